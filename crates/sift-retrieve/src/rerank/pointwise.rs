//! Pointwise yes/no reranking with a local Qwen2-VL / Qwen2.5-VL (monoT5's and MonoQwen2-VL's
//! scheme, with Sift's own prompt): for each candidate one prompt holding the query (its
//! images too) and the candidate (its text, its image), asking whether the candidate is
//! relevant; the score is `log P(yes)` against `no` at the answer's first token,
//! `logit(yes) - log(e^logit(yes) + e^logit(no))`.
use sift_generate::{
    CacheKey, CachedGeneration, Generation, GenerationCache, Generator, LocalQwen2Vl, Message,
    Part, Request, Sampling,
};

use super::{RerankDoc, RerankQuery, Reranker};
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

/// A pointwise yes/no reranker over a local generator.
pub struct PointwiseReranker {
    name: String,
    model: LocalQwen2Vl,
    yes: u32,
    no: u32,
    max_chars: usize,
    cache: Option<GenerationCache>,
}

impl PointwiseReranker {
    /// Wraps `model`; candidates' texts are cut to `max_chars` characters. The answer
    /// tokens are the first tokens of `yes` and `no`, which must differ.
    pub fn new(model: LocalQwen2Vl, max_chars: usize) -> Result<Self> {
        let first = |w: &str| -> Result<u32> {
            let ids = model
                .tokenize(w)
                .map_err(|e| Error::Unsupported(format!("rerank: {e}")))?;
            ids.first()
                .copied()
                .ok_or_else(|| Error::Unsupported(format!("rerank: {w:?} has no tokens")))
        };
        let (yes, no) = (first("yes")?, first("no")?);
        if yes == no {
            return Err(Error::Unsupported(
                "rerank: \"yes\" and \"no\" start with the same token".into(),
            ));
        }
        Ok(PointwiseReranker {
            name: format!("pointwise:{}", super::short_name(model.model_id())),
            model,
            yes,
            no,
            max_chars,
            cache: None,
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

    /// The answer tokens: the first tokens of `yes` and `no`.
    pub fn answer_tokens(&self) -> (u32, u32) {
        (self.yes, self.no)
    }

    /// The chat asking about one candidate.
    pub fn messages(&self, query: &RerankQuery<'_>, doc: &RerankDoc<'_>) -> Vec<Message> {
        let mut parts = vec![Part::text(format!("{POINTWISE_INTRO}{}", query.text))];
        parts.extend(query.images.iter().map(|b| Part::image(b.to_vec())));
        parts.push(Part::text(POINTWISE_CANDIDATE));
        if let Some(t) = doc.text {
            let cut: String = t.chars().take(self.max_chars).collect();
            parts.push(Part::text(cut));
        }
        if let Some(i) = doc.image {
            parts.push(Part::image(i.to_vec()));
        }
        parts.push(Part::text(POINTWISE_QUESTION));
        vec![Message::user(parts)]
    }

    /// The score of one candidate (from the cache when it holds it).
    pub fn score(&self, query: &RerankQuery<'_>, doc: &RerankDoc<'_>) -> Result<f64> {
        let msgs = self.messages(query, doc);
        let key = self.cache.as_ref().map(|_| {
            let request = Request {
                messages: msgs.clone(),
                sampling: Sampling::greedy(1),
            };
            CacheKey::new(
                self.model.model_id(),
                POINTWISE_TEMPLATE,
                query.id,
                &request,
            )
            .digest()
        });
        if let (Some(c), Some(k)) = (&self.cache, &key)
            && let Some(hit) = c.get(k)
            && let Ok(s) = hit.generation.text.parse::<f64>()
        {
            return Ok(s);
        }
        let s = self.compute(&msgs)?;
        if let (Some(c), Some(k)) = (&self.cache, key) {
            c.put(CachedGeneration {
                key: k,
                query_id: query.id.to_string(),
                model: self.model.model_id().to_string(),
                template: POINTWISE_TEMPLATE.0.to_string(),
                template_version: POINTWISE_TEMPLATE.1,
                generation: Generation {
                    // Rust prints the shortest text that reads back as the same f64
                    text: s.to_string(),
                    finish_reason: None,
                    usage: Default::default(),
                },
            })
            .map_err(|e| Error::Unsupported(format!("rerank:{}: cache: {e}", self.name)))?;
        }
        Ok(s)
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
        let m = y.max(n);
        Ok(y - (m + ((y - m).exp() + (n - m).exp()).ln()))
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
}
