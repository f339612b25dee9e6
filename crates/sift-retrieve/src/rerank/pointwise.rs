//! Pointwise yes/no reranking with a local Qwen2-VL / Qwen2.5-VL (monoT5's and MonoQwen2-VL's
//! scheme, with Sift's own prompt): for each candidate one prompt holding the query (its
//! images too) and the candidate (its text, its image), asking whether the candidate is
//! relevant; the score is `log P(yes)` against `no` at the answer's first token,
//! `logit(yes) - log(e^logit(yes) + e^logit(no))`.
//!
//! The prompt and the answer words can be the user's ([`PointwisePrompt`]): e.g.
//! MonoQwen2-VL's (its adapter merged into Qwen2-VL-2B-Instruct) is the candidate image, then
//! `Assert the relevance of the previous image document to the following query, answer True
//! or False. The query is: {query}`, with answers `True` / `False`.
use sift_generate::{
    CacheKey, CachedGeneration, Generation, GenerationCache, Generator, LocalQwen2Vl, Message,
    Part, Request, Sampling,
};

use super::{Counter, RerankDoc, RerankQuery, Reranker};
use crate::{Error, Result};

/// The instruction before the query.
pub const POINTWISE_INTRO: &str = "Judge whether the candidate helps answer the query.\n\nQuery: ";
/// Before the candidate.
pub const POINTWISE_CANDIDATE: &str = "\n\nCandidate: ";
/// The question after the candidate.
pub const POINTWISE_QUESTION: &str =
    "\n\nIs the candidate relevant to the query? Answer yes or no.";

/// The prompt's name and version, as the cache keys scores.
pub const POINTWISE_TEMPLATE: (&str, u32) = ("pointwise-yes-no", 1);

/// Where the query's images go in a [`PointwisePrompt`] template.
pub const QUERY_IMAGES: &str = "<query_images>";
/// Where the candidate's image goes.
pub const CANDIDATE_IMAGE: &str = "<candidate_image>";

/// A pointwise prompt: one user turn made from `template`, in which `{query}` is the query's
/// text, `{candidate}` the candidate's text (cut to the reranker's length; empty for an
/// image), and [`QUERY_IMAGES`] / [`CANDIDATE_IMAGE`] mark where the images go; scored by
/// the first tokens of the two answer words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointwisePrompt {
    /// The template.
    pub template: String,
    /// The relevant answer (`yes`).
    pub yes: String,
    /// The other answer (`no`).
    pub no: String,
}

impl Default for PointwisePrompt {
    /// Sift's: the instruction, the query and its images, the candidate's text and image,
    /// the question; answers `yes` / `no`.
    fn default() -> Self {
        PointwisePrompt {
            template: format!(
                "{POINTWISE_INTRO}{{query}}{QUERY_IMAGES}{POINTWISE_CANDIDATE}{{candidate}}{CANDIDATE_IMAGE}{POINTWISE_QUESTION}"
            ),
            yes: "yes".into(),
            no: "no".into(),
        }
    }
}

/// `t` with `{query}` and `{candidate}` replaced in one pass (a query holding the text
/// `{candidate}` stays as it is).
fn fill(t: &str, query: &str, candidate: &str) -> String {
    let mut out = String::with_capacity(t.len() + query.len() + candidate.len());
    let mut rest = t;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(r) = tail.strip_prefix("{query}") {
            out.push_str(query);
            rest = r;
        } else if let Some(r) = tail.strip_prefix("{candidate}") {
            out.push_str(candidate);
            rest = r;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// One piece of a filled template.
enum Piece {
    Text(String),
    QueryImages,
    CandidateImage,
}

impl PointwisePrompt {
    /// The template cut at its image markers, `{query}` and `{candidate}` filled.
    fn pieces(&self, query: &str, candidate: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut rest = self.template.as_str();
        loop {
            let next = [(QUERY_IMAGES, true), (CANDIDATE_IMAGE, false)]
                .into_iter()
                .filter_map(|(m, q)| rest.find(m).map(|i| (i, m, q)))
                .min_by_key(|x| x.0);
            let text = |t: &str| fill(t, query, candidate);
            match next {
                Some((i, m, query_images)) => {
                    if i > 0 {
                        out.push(Piece::Text(text(&rest[..i])));
                    }
                    out.push(if query_images {
                        Piece::QueryImages
                    } else {
                        Piece::CandidateImage
                    });
                    rest = &rest[i + m.len()..];
                }
                None => {
                    if !rest.is_empty() {
                        out.push(Piece::Text(text(rest)));
                    }
                    return out;
                }
            }
        }
    }
}

/// A pointwise yes/no reranker over a local generator.
pub struct PointwiseReranker {
    name: String,
    model: LocalQwen2Vl,
    yes: u32,
    no: u32,
    max_chars: usize,
    prompt: PointwisePrompt,
    cache: Option<GenerationCache>,
    rejected: Counter,
}

impl PointwiseReranker {
    /// Wraps `model` with Sift's prompt; candidates' texts are cut to `max_chars`
    /// characters.
    pub fn new(model: LocalQwen2Vl, max_chars: usize) -> Result<Self> {
        Self::with_prompt(model, max_chars, PointwisePrompt::default())
    }

    /// Wraps `model` with `prompt`. The answer tokens are the first tokens of its two
    /// answers, which must differ.
    pub fn with_prompt(
        model: LocalQwen2Vl,
        max_chars: usize,
        prompt: PointwisePrompt,
    ) -> Result<Self> {
        let first = |w: &str| -> Result<u32> {
            let ids = model
                .tokenize(w)
                .map_err(|e| Error::Unsupported(format!("rerank: {e}")))?;
            ids.first()
                .copied()
                .ok_or_else(|| Error::Unsupported(format!("rerank: {w:?} has no tokens")))
        };
        let (yes, no) = (first(&prompt.yes)?, first(&prompt.no)?);
        if yes == no {
            return Err(Error::Unsupported(format!(
                "rerank: {:?} and {:?} start with the same token",
                prompt.yes, prompt.no
            )));
        }
        Ok(PointwiseReranker {
            name: format!("pointwise:{}", super::short_name(model.model_id())),
            model,
            yes,
            no,
            max_chars,
            prompt,
            cache: None,
            rejected: Counter::default(),
        })
    }

    /// Keeps every score in `cache` (the score as the entry's text), and reads it back on a
    /// rerun.
    pub fn with_cache(mut self, cache: GenerationCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The local model.
    pub fn model(&self) -> &LocalQwen2Vl {
        &self.model
    }

    /// The answer tokens: the first tokens of the prompt's two answers.
    pub fn answer_tokens(&self) -> (u32, u32) {
        (self.yes, self.no)
    }

    /// The chat asking about one candidate.
    pub fn messages(&self, query: &RerankQuery<'_>, doc: &RerankDoc<'_>) -> Vec<Message> {
        messages(&self.prompt, self.max_chars, query, doc)
    }

    /// The score of one candidate (from the cache when it holds it).
    pub fn score(&self, query: &RerankQuery<'_>, doc: &RerankDoc<'_>) -> Result<f64> {
        let msgs = self.messages(query, doc);
        let cache = self.cache.as_ref().map(|c| (c, &self.rejected));
        cached(
            cache,
            &self.name,
            self.model.model_id(),
            query.id,
            msgs,
            |m| self.compute(m),
        )
    }

    /// The score of the candidate the chat `msgs` asks about.
    fn compute(&self, msgs: &[Message]) -> Result<f64> {
        let err =
            |e: sift_generate::Error| Error::Unsupported(format!("rerank:{}: {e}", self.name));
        let images: Vec<&[u8]> = msgs
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|p| match p {
                Part::Image { bytes, .. } => Some(bytes.as_slice()),
                Part::Text(_) => None,
            })
            .collect();
        let prepared = self.model.prepare_images(&images).map_err(err)?;
        let prompt = self
            .model
            .tokenize(&self.model.chat_prompt(msgs).map_err(err)?)
            .map_err(err)?;
        let prompt = self
            .model
            .expand_image_tokens(&prompt, &prepared)
            .map_err(err)?;
        let logits = self
            .model
            .next_token_logits(&prompt, &prepared)
            .map_err(err)?;
        let (y, n) = (
            logits[self.yes as usize] as f64,
            logits[self.no as usize] as f64,
        );
        Ok(log_share(y, n))
    }
}

/// The chat asking whether `doc` helps answer `query`: `prompt` filled, the candidate's text
/// cut to `max_chars` characters.
fn messages(
    prompt: &PointwisePrompt,
    max_chars: usize,
    query: &RerankQuery<'_>,
    doc: &RerankDoc<'_>,
) -> Vec<Message> {
    let candidate: String = doc.text.unwrap_or("").chars().take(max_chars).collect();
    let mut parts = Vec::new();
    for piece in prompt.pieces(query.text, &candidate) {
        match piece {
            Piece::Text(t) => parts.push(Part::text(t)),
            Piece::QueryImages => {
                parts.extend(query.images.iter().map(|b| Part::image(b.to_vec())))
            }
            Piece::CandidateImage => parts.extend(doc.image.map(|b| Part::image(b.to_vec()))),
        }
    }
    vec![Message::user(parts)]
}

/// The score `compute` gives the chat `msgs`, read from `cache` when it holds it (keyed by
/// the model, the prompt's template and the chat) and kept there otherwise. A cached entry
/// that is not a finite number (`NaN`, `inf`, an edited or foreign line) is not used: it is
/// counted in the cache's `rejected` counter and the score computed again (and stored,
/// replacing it). A computed score that is not finite is an error naming the query.
fn cached(
    cache: Option<(&GenerationCache, &Counter)>,
    name: &str,
    model: &str,
    query_id: &str,
    msgs: Vec<Message>,
    compute: impl FnOnce(&[Message]) -> Result<f64>,
) -> Result<f64> {
    let checked = |s: f64| -> Result<f64> {
        if s.is_finite() {
            Ok(s)
        } else {
            Err(Error::Unsupported(format!(
                "rerank:{name}: query {query_id}: the model's score is {s}, not a finite number"
            )))
        }
    };
    let Some((c, rejected)) = cache else {
        return checked(compute(&msgs)?);
    };
    let request = Request {
        messages: msgs,
        sampling: Sampling::greedy(1),
    };
    let key = CacheKey::new(model, POINTWISE_TEMPLATE, query_id, &request).digest();
    if let Some(hit) = c.get(&key) {
        match hit.generation.text.parse::<f64>() {
            Ok(s) if s.is_finite() => return Ok(s),
            _ => rejected.add(),
        }
    }
    let s = checked(compute(&request.messages)?)?;
    c.put(CachedGeneration {
        key,
        query_id: query_id.to_string(),
        model: model.to_string(),
        template: POINTWISE_TEMPLATE.0.to_string(),
        template_version: POINTWISE_TEMPLATE.1,
        generation: Generation {
            // Rust prints the shortest text that reads back as the same f64
            text: s.to_string(),
            finish_reason: None,
            usage: Default::default(),
        },
    })
    .map_err(|e| Error::Unsupported(format!("rerank:{name}: cache: {e}")))?;
    Ok(s)
}

/// The notes on cached scores rejected (not finite numbers) and on scores a full cache did
/// not store, when there were any.
fn rejected_note(name: &str, cache: Option<&GenerationCache>, rejected: &Counter) -> Vec<String> {
    let Some(c) = cache else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    if rejected.get() > 0 {
        notes.push(format!(
            "warning: rerank:{name}: {} cached score(s) in {} were not finite numbers \
             (rejected and computed again)",
            rejected.get(),
            c.path().display()
        ));
    }
    notes.extend(super::full_cache_note(name, c));
    notes
}

/// `log P(yes)` against `no` from an answer's first-token log probabilities `top`: each
/// answer's probability is the sum over the listed tokens that are its word (spaces
/// trimmed, any case: `yes`, ` Yes`); a word not listed is given the smallest listed
/// probability, the most it can have. A value above 0 (no log probability) counts as 0.
pub fn yes_no_from_logprobs(top: &[(String, f64)], yes: &str, no: &str) -> f64 {
    let floor = top.iter().map(|t| t.1.min(0.0)).fold(0.0, f64::min);
    let lp = |w: &str| -> f64 {
        let p: f64 = top
            .iter()
            .filter(|(t, _)| t.trim().eq_ignore_ascii_case(w.trim()))
            .map(|(_, lp)| lp.min(0.0).exp())
            .sum();
        if p > 0.0 { p.ln() } else { floor }
    };
    log_share(lp(yes), lp(no))
}

/// `ln(e^y / (e^y + e^n))`, the log probability of `y` between the two, computed relative
/// to the larger (at llama.cpp's lowest finite log probability, m + ln 2 == m).
fn log_share(y: f64, n: f64) -> f64 {
    let m = y.max(n);
    (y - m) - ((y - m).exp() + (n - m).exp()).ln()
}

/// Log probabilities asked of the endpoint per answer (`top_logprobs`: OpenAI allows 20).
pub const TOP_LOGPROBS: usize = 20;

/// The pointwise yes/no reranker over an OpenAI-compatible endpoint that returns log
/// probabilities (`logprobs`, `top_logprobs`): the same prompt and score as the local one,
/// the answer's first-token log probabilities read from the reply
/// ([`yes_no_from_logprobs`]).
pub struct RemotePointwiseReranker {
    name: String,
    endpoint: sift_generate::OpenAiCompatible,
    max_chars: usize,
    prompt: PointwisePrompt,
    cache: Option<GenerationCache>,
    rejected: Counter,
}

impl RemotePointwiseReranker {
    /// Asks `endpoint` with `prompt`; candidates' texts are cut to `max_chars` characters.
    pub fn new(
        endpoint: sift_generate::OpenAiCompatible,
        max_chars: usize,
        prompt: PointwisePrompt,
    ) -> Self {
        RemotePointwiseReranker {
            name: format!("pointwise:{}", super::short_name(endpoint.model_id())),
            endpoint,
            max_chars,
            prompt,
            cache: None,
            rejected: Counter::default(),
        }
    }

    /// Keeps every score in `cache`, and reads it back on a rerun.
    pub fn with_cache(mut self, cache: GenerationCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The score of one candidate (from the cache when it holds it).
    pub fn score(&self, query: &RerankQuery<'_>, doc: &RerankDoc<'_>) -> Result<f64> {
        let msgs = messages(&self.prompt, self.max_chars, query, doc);
        let cache = self.cache.as_ref().map(|c| (c, &self.rejected));
        cached(
            cache,
            &self.name,
            self.endpoint.model_id(),
            query.id,
            msgs,
            |m| {
                let request = Request {
                    messages: m.to_vec(),
                    sampling: Sampling::greedy(1),
                };
                let top = self
                    .endpoint
                    .first_token_logprobs(&request, TOP_LOGPROBS)
                    .map_err(|e| Error::Unsupported(format!("rerank:{}: {e}", self.name)))?;
                Ok(yes_no_from_logprobs(
                    &top,
                    &self.prompt.yes,
                    &self.prompt.no,
                ))
            },
        )
    }
}

impl Reranker for RemotePointwiseReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn sees_images(&self) -> bool {
        true
    }

    fn scores(&self, query: &RerankQuery<'_>, docs: &[RerankDoc<'_>]) -> Result<Vec<f64>> {
        docs.iter().map(|d| self.score(query, d)).collect()
    }

    fn notes(&self) -> Vec<String> {
        rejected_note(&self.name, self.cache.as_ref(), &self.rejected)
    }
}

impl Reranker for PointwiseReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn sees_images(&self) -> bool {
        true
    }

    fn scores(&self, query: &RerankQuery<'_>, docs: &[RerankDoc<'_>]) -> Result<Vec<f64>> {
        docs.iter().map(|d| self.score(query, d)).collect()
    }

    fn notes(&self) -> Vec<String> {
        rejected_note(&self.name, self.cache.as_ref(), &self.rejected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yes_no_scores_read_an_endpoints_top_logprobs() {
        // OpenAI's shape: the chosen token, its top alternatives
        let reply = r#"{"choices":[{"message":{"role":"assistant","content":"Yes"},
            "logprobs":{"content":[{"token":"Yes","logprob":-0.3,"bytes":[89,101,115],
            "top_logprobs":[{"token":"Yes","logprob":-0.3},{"token":"No","logprob":-1.6},
            {"token":" yes","logprob":-2.5}]}]}}]}"#;
        let top = sift_generate::parse_first_token_logprobs(reply).unwrap();
        assert_eq!(top[0], ("Yes".to_string(), -0.3));
        let s = yes_no_from_logprobs(&top, "yes", "no");
        let (y, n) = ((-0.3f64).exp() + (-2.5f64).exp(), (-1.6f64).exp());
        assert!((s - (y / (y + n)).ln()).abs() < 1e-12, "{s}");
        // an answer word missing from the list gets the smallest listed probability
        let only_yes = vec![("yes".to_string(), -0.1), ("maybe".to_string(), -4.0)];
        let s = yes_no_from_logprobs(&only_yes, "yes", "no");
        let (y, n) = ((-0.1f64).exp(), (-4.0f64).exp());
        assert!((s - (y / (y + n)).ln()).abs() < 1e-12, "{s}");
        // llama.cpp's server: token ids and bytes beside each token, and a token of
        // probability zero given the lowest finite f32 as its log probability (its JSON
        // writes -inf as null)
        let llama = r#"{"choices":[{"finish_reason":"length","index":0,"message":{"role":
            "assistant","content":"no"},"logprobs":{"content":[{"id":2152,"token":"no",
            "bytes":[110,111],"logprob":-0.0004,"top_logprobs":[{"id":2152,"token":"no",
            "bytes":[110,111],"logprob":-0.0004},{"id":9693,"token":"yes","bytes":[121,101,
            115],"logprob":-7.9},{"id":13,"token":".","bytes":[46],
            "logprob":-3.4028234663852886e38}]}]}}],"object":"chat.completion"}"#;
        let top = sift_generate::parse_first_token_logprobs(llama).unwrap();
        assert_eq!(top.len(), 3);
        let s = yes_no_from_logprobs(&top, "yes", "no");
        let (y, n) = ((-7.9f64).exp(), (-0.0004f64).exp());
        assert!((s - (y / (y + n)).ln()).abs() < 1e-12, "{s}");
        // neither answer listed, the floor that lowest finite value: even odds, not NaN
        let s = yes_no_from_logprobs(&top[2..], "yes", "no");
        assert!((s - 0.5f64.ln()).abs() < 1e-12, "{s}");
        // a value above 0 is no log probability: read as 0, the score stays one
        let odd = vec![("yes".to_string(), 1e308), ("no".to_string(), -1.0)];
        let s = yes_no_from_logprobs(&odd, "yes", "no");
        assert!(
            (s - (1.0 / (1.0 + (-1.0f64).exp())).ln()).abs() < 1e-12,
            "{s}"
        );
        // a reply without logprobs is an error naming what is missing
        let none = r#"{"choices":[{"message":{"role":"assistant","content":"yes"}}]}"#;
        let e = sift_generate::parse_first_token_logprobs(none).unwrap_err();
        assert!(e.contains("logprobs"), "{e}");
    }

    #[test]
    fn templates_fill_once_and_cut_at_the_image_markers() {
        assert_eq!(
            fill("a {query} b {candidate} {x}", "{candidate}", "C"),
            "a {candidate} b C {x}"
        );
        let mono = PointwisePrompt {
            template: format!(
                "{CANDIDATE_IMAGE}Assert the relevance of the previous image document to the \
                 following query, answer True or False. The query is: {{query}}"
            ),
            yes: "True".into(),
            no: "False".into(),
        };
        let pieces = mono.pieces("q?", "");
        assert!(matches!(pieces[0], Piece::CandidateImage));
        assert!(matches!(&pieces[1], Piece::Text(t) if t.ends_with("The query is: q?")));
        assert_eq!(pieces.len(), 2);
        let sift = PointwisePrompt::default().pieces("Q", "P");
        let kinds: Vec<&str> = sift
            .iter()
            .map(|p| match p {
                Piece::Text(_) => "t",
                Piece::QueryImages => "q",
                Piece::CandidateImage => "c",
            })
            .collect();
        assert_eq!(kinds, ["t", "q", "t", "c", "t"]);
    }
}
