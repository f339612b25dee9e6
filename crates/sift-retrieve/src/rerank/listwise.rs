//! Listwise LLM reranking as BRIGHT's `rerank.py` runs it (xlang-ai/BRIGHT at d99e839,
//! `OpenAIModel`): one chat per query, system `You are a helpful assistant`, the user turn
//! `The following passages are related to query: {query}` with every candidate numbered
//! `[i]. text` (newline runs in a passage made one space, newlines in the query two spaces),
//! asking for step-by-step reasoning and then the ids of the `k` most relevant as a JSON
//! list; sampled at temperature 0.8, top-p 0.8, 2048 tokens. The reply's last ```` ```json ````
//! block is the order; the score of the document at rank `r` (from 0) is `k - r`; a reply
//! with no parsable list keeps the first-stage order (BRIGHT's fallback) and is counted.
//!
//! Where Sift differs from the released code, on purpose:
//! - candidates the reply leaves out follow the listed ones in their first-stage order
//!   (BRIGHT drops them from the ranking), an id listed twice counts at its first place
//!   (BRIGHT: its last), ids out of range or not integers are dropped and counted;
//! - a bare JSON list at the end of the reply is accepted when there is no fenced block;
//! - with a window smaller than the depth the candidates are ranked RankGPT-style, window by
//!   window from the bottom of the list up, each window moving by `step` (BRIGHT puts all
//!   candidates in one prompt: the default, window = depth);
//! - passages may be cut to `max_chars` characters (BRIGHT does not cut them);
//! - every reply is cached (`GenerationCache`), so a rerun reranks the same way.
use std::sync::Arc;

use sift_generate::{
    CacheKey, CachedGeneration, Generation, GenerationCache, Generator, Message, Part, Request,
    Role, Sampling,
};

use super::{Counter, RerankDoc, RerankQuery, Reranker};
use crate::{Error, Result};

/// BRIGHT's system turn.
pub const LISTWISE_SYSTEM: &str = "You are a helpful assistant";

/// The prompt's template name and version, as the cache keys replies.
pub const LISTWISE_TEMPLATE: (&str, u32) = ("bright-listwise", 1);

/// BRIGHT's user turn for `query` over `docs` (texts in order), asking for `k` ids.
pub fn listwise_prompt(query: &str, docs: &[&str], k: usize) -> String {
    let mut doc_string = String::new();
    for (i, d) in docs.iter().enumerate() {
        doc_string.push_str(&format!("[{}]. {}\n\n", i + 1, collapse_newlines(d)));
    }
    let query = query.replace('\n', "  ");
    format!(
        "The following passages are related to query: {query}\n\n\
         {doc_string}\
         First identify the essential problem in the query.\n\
         Think step by step to reason about why each document is relevant or irrelevant.\n\
         Rank these passages based on their relevance to the query.\n\
         Please output the ranking result of passages as a list, where the first element is the id of the most relevant \
         passage, the second element is the id of the second most element, etc.\n\
         Please strictly follow the format to output a list of {k} ids corresponding to the most relevant {k} passages, \
         sorted from the most to least relevant passage. First think step by step and write the reasoning process, then \
         output the ranking results as a list of ids in a json format."
    )
}

/// `re.sub('\n+', ' ', text)`.
fn collapse_newlines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_run = false;
    for c in text.chars() {
        if c == '\n' {
            if !in_run {
                out.push(' ');
            }
            in_run = true;
        } else {
            out.push(c);
            in_run = false;
        }
    }
    out
}

/// What a reply gave: the 0-based candidates in the order the reply lists them (each once,
/// in range), and what was dropped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permutation {
    /// Candidate positions, best first.
    pub order: Vec<usize>,
    /// Ids listed again after their first place.
    pub duplicates: usize,
    /// Entries that are not an id `1..=n`.
    pub invalid: usize,
}

/// Parses a reply's ranking over `n` candidates: the last ```` ```json ```` block (else a
/// JSON list at the end of the reply) read as a list of 1-based ids. `None` when there is
/// no such list (the caller keeps the first-stage order).
pub fn parse_permutation(reply: &str, n: usize) -> Option<Permutation> {
    let list = last_fenced_json(reply).or_else(|| trailing_list(reply))?;
    let value: serde_json::Value = serde_json::from_str(list.trim()).ok()?;
    let items = value.as_array()?;
    let mut seen = vec![false; n];
    let mut p = Permutation::default();
    for it in items {
        match it.as_u64().map(|x| x as usize) {
            Some(id) if (1..=n).contains(&id) => {
                if seen[id - 1] {
                    p.duplicates += 1;
                } else {
                    seen[id - 1] = true;
                    p.order.push(id - 1);
                }
            }
            _ => p.invalid += 1,
        }
    }
    Some(p)
}

/// The body of the last ```` ```json ... ``` ```` block.
fn last_fenced_json(reply: &str) -> Option<&str> {
    let start = reply.rfind("```json")? + "```json".len();
    let rest = &reply[start..];
    let end = rest.find("```")?;
    Some(&rest[..end])
}

/// A `[...]` that ends the reply (trailing whitespace aside).
fn trailing_list(reply: &str) -> Option<&str> {
    let t = reply.trim_end();
    if !t.ends_with(']') {
        return None;
    }
    let start = t.rfind('[')?;
    Some(&t[start..])
}

/// How the listwise reranker prompts and samples.
#[derive(Debug, Clone)]
pub struct ListwiseSettings {
    /// Candidates per prompt (`None`: all of them in one prompt, as BRIGHT).
    pub window: Option<usize>,
    /// How far each window moves up the list (RankGPT: half the window).
    pub step: usize,
    /// Characters of each passage in the prompt (`None`: whole, as BRIGHT).
    pub max_chars: Option<usize>,
    /// Sampling (BRIGHT: temperature 0.8, top-p 0.8, 2048 tokens).
    pub sampling: Sampling,
}

impl Default for ListwiseSettings {
    fn default() -> Self {
        ListwiseSettings {
            window: None,
            step: 10,
            max_chars: None,
            sampling: Sampling {
                max_new_tokens: 2048,
                temperature: 0.8,
                top_p: 0.8,
                seed: Some(0),
                stop: Vec::new(),
            },
        }
    }
}

/// A listwise reranker over any generator.
pub struct ListwiseReranker {
    name: String,
    generator: Arc<dyn Generator>,
    cache: Option<GenerationCache>,
    settings: ListwiseSettings,
    prompts: Counter,
    failed: Counter,
    duplicates: Counter,
    invalid: Counter,
    left_out: Counter,
}

impl ListwiseReranker {
    /// A reranker asking `generator`, its replies kept in `cache` when given.
    pub fn new(
        generator: Arc<dyn Generator>,
        cache: Option<GenerationCache>,
        settings: ListwiseSettings,
    ) -> Self {
        ListwiseReranker {
            name: format!("listwise:{}", super::short_name(generator.model_id())),
            generator,
            cache,
            settings,
            prompts: Counter::default(),
            failed: Counter::default(),
            duplicates: Counter::default(),
            invalid: Counter::default(),
            left_out: Counter::default(),
        }
    }

    /// The reply to one prompt (from the cache when it holds it).
    fn reply(&self, query_id: &str, user: String) -> Result<Generation> {
        let request = Request {
            messages: vec![
                Message {
                    role: Role::System,
                    content: vec![Part::text(LISTWISE_SYSTEM)],
                },
                Message {
                    role: Role::User,
                    content: vec![Part::text(user)],
                },
            ],
            sampling: self.settings.sampling.clone(),
        };
        let key = CacheKey::new(
            self.generator.model_id(),
            LISTWISE_TEMPLATE,
            query_id,
            &request,
        )
        .digest();
        if let Some(hit) = self.cache.as_ref().and_then(|c| c.get(&key)) {
            return Ok(hit.generation);
        }
        let generation = self.generator.generate(&request).map_err(|e| {
            Error::Unsupported(format!("rerank:{}: query {query_id}: {e}", self.name))
        })?;
        if let Some(c) = &self.cache {
            c.put(CachedGeneration {
                key,
                query_id: query_id.to_string(),
                model: self.generator.model_id().to_string(),
                template: LISTWISE_TEMPLATE.0.to_string(),
                template_version: LISTWISE_TEMPLATE.1,
                generation: generation.clone(),
            })
            .map_err(|e| Error::Unsupported(format!("rerank:{}: cache: {e}", self.name)))?;
        }
        Ok(generation)
    }

    /// Reorders `order` (positions into `texts`) in place by one prompt over it.
    fn rank_window(
        &self,
        query: &RerankQuery<'_>,
        texts: &[String],
        order: &mut [usize],
    ) -> Result<()> {
        let docs: Vec<&str> = order.iter().map(|&i| texts[i].as_str()).collect();
        let prompt = listwise_prompt(query.text, &docs, docs.len());
        let reply = self.reply(query.id, prompt)?;
        self.prompts.add();
        let Some(p) = parse_permutation(&reply.text, docs.len()) else {
            self.failed.add();
            return Ok(());
        };
        (0..p.duplicates).for_each(|_| self.duplicates.add());
        (0..p.invalid).for_each(|_| self.invalid.add());
        let mut listed = vec![false; order.len()];
        let mut new: Vec<usize> = Vec::with_capacity(order.len());
        for &i in &p.order {
            listed[i] = true;
            new.push(order[i]);
        }
        for (i, &o) in order.iter().enumerate() {
            if !listed[i] {
                self.left_out.add();
                new.push(o);
            }
        }
        order.copy_from_slice(&new);
        Ok(())
    }
}

impl Reranker for ListwiseReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn sees_images(&self) -> bool {
        false
    }

    fn scores(&self, query: &RerankQuery<'_>, docs: &[RerankDoc<'_>]) -> Result<Vec<f64>> {
        let texts: Vec<String> = docs
            .iter()
            .map(|d| {
                let t = d.text.unwrap_or("");
                match self.settings.max_chars {
                    Some(m) => t.chars().take(m).collect(),
                    None => t.to_string(),
                }
            })
            .collect();
        let n = docs.len();
        let mut order: Vec<usize> = (0..n).collect();
        let window = self.settings.window.unwrap_or(n).max(1);
        if n <= window {
            self.rank_window(query, &texts, &mut order)?;
        } else {
            // RankGPT's sliding window: from the bottom of the list to the top
            let step = self.settings.step.clamp(1, window);
            let mut end = n;
            loop {
                let start = end.saturating_sub(window);
                self.rank_window(query, &texts, &mut order[start..end])?;
                if start == 0 {
                    break;
                }
                end -= step;
            }
        }
        // k - rank for every candidate
        let mut scores = vec![0.0; n];
        for (rank, &i) in order.iter().enumerate() {
            scores[i] = (n - rank) as f64;
        }
        Ok(scores)
    }

    fn notes(&self) -> Vec<String> {
        let full = self
            .cache
            .as_ref()
            .and_then(|c| super::full_cache_note(&self.name, c));
        std::iter::once(format!(
            "rerank:{}: {} prompts, {} replies without a parsable ranking (first-stage order kept), \
             {} ids listed twice, {} invalid ids, {} candidates left out of replies (kept after the listed ones)",
            self.name,
            self.prompts.get(),
            self.failed.get(),
            self.duplicates.get(),
            self.invalid.get(),
            self.left_out.get()
        ))
        .chain(full)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_as_bright_reads_them_with_the_counted_differences() {
        let fenced = "Reasoning...\n```json\n[3, 1, 2]\n```\n";
        assert_eq!(parse_permutation(fenced, 3).unwrap().order, vec![2, 0, 1]);
        // the last block
        let two = "```json\n[1, 2]\n```\nbetter:\n```json\n[2, 1]\n```";
        assert_eq!(parse_permutation(two, 2).unwrap().order, vec![1, 0]);
        // duplicates keep their first place, junk and out-of-range ids are counted
        let p = parse_permutation("```json\n[2, 2, \"x\", 9, 1]\n```", 3).unwrap();
        assert_eq!((p.order, p.duplicates, p.invalid), (vec![1, 0], 1, 2));
        // a bare list at the end
        assert_eq!(
            parse_permutation("so: [2, 1]", 2).unwrap().order,
            vec![1, 0]
        );
        // no list, broken JSON
        assert_eq!(parse_permutation("I cannot rank these.", 3), None);
        assert_eq!(parse_permutation("```json\n[1, 2\n```", 3), None);
    }

    /// Replies from a script: a fixed text, or each window's ids reversed.
    struct Scripted {
        reply: Option<&'static str>,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl Generator for Scripted {
        fn model_id(&self) -> &str {
            "scripted"
        }

        fn generate(&self, r: &Request) -> sift_generate::Result<Generation> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Part::Text(user) = &r.messages[1].content[0] else {
                panic!("text prompt")
            };
            let text = match self.reply {
                Some(t) => t.to_string(),
                None => {
                    let n = (1..)
                        .take_while(|i| user.contains(&format!("[{i}]. ")))
                        .count();
                    let ids: Vec<String> = (1..=n).rev().map(|i| i.to_string()).collect();
                    format!("Reasoning.\n```json\n[{}]\n```", ids.join(", "))
                }
            };
            Ok(Generation {
                text,
                finish_reason: Some("stop".into()),
                usage: Default::default(),
            })
        }
    }

    fn rerank(
        reply: Option<&'static str>,
        n: usize,
        window: Option<usize>,
    ) -> (Vec<f64>, ListwiseReranker) {
        let g = Arc::new(Scripted {
            reply,
            calls: Default::default(),
        });
        let r = ListwiseReranker::new(
            g,
            None,
            ListwiseSettings {
                window,
                step: 2,
                ..Default::default()
            },
        );
        let texts: Vec<String> = (0..n).map(|i| format!("passage {i}")).collect();
        let docs: Vec<RerankDoc> = texts
            .iter()
            .map(|t| RerankDoc {
                id: t,
                text: Some(t),
                image: None,
            })
            .collect();
        let q = RerankQuery {
            id: "q1",
            text: "why",
            images: &[],
        };
        (r.scores(&q, &docs).unwrap(), r)
    }

    #[test]
    fn a_known_reply_gives_brights_k_minus_rank_scores_and_a_malformed_one_keeps_the_order() {
        // [3, 1, 2]: passage 3 first (k = 3), then 1, then 2
        let (s, r) = rerank(Some("Think...\n```json\n[3, 1, 2]\n```"), 3, None);
        assert_eq!(s, vec![2.0, 1.0, 3.0]);
        assert!(
            r.notes()[0].contains("1 prompts, 0 replies without"),
            "{:?}",
            r.notes()
        );
        // a reply without a list: the first-stage order, counted
        let (s, r) = rerank(Some("Passage 2 is best."), 3, None);
        assert_eq!(s, vec![3.0, 2.0, 1.0]);
        assert!(r.notes()[0].contains("1 replies without a parsable ranking"));
        // ids left out follow in their order; duplicates and junk are counted
        let (s, r) = rerank(Some("```json\n[4, 4, 0, \"a\"]\n```"), 4, None);
        assert_eq!(s, vec![3.0, 2.0, 1.0, 4.0]);
        let n = &r.notes()[0];
        assert!(
            n.contains("1 ids listed twice, 2 invalid ids, 3 candidates left out"),
            "{n}"
        );
    }

    #[test]
    fn a_window_smaller_than_the_list_slides_from_the_bottom_up() {
        // 5 candidates, window 3, step 2, each reply reversing its window:
        // [0 1 2 3 4] -> window 2..5 reversed: [0 1 4 3 2] -> window 0..3: [4 1 0 3 2]
        let (s, _) = rerank(None, 5, Some(3));
        assert_eq!(s, vec![3.0, 4.0, 1.0, 2.0, 5.0]);
    }

    #[test]
    fn replies_are_cached_and_a_rerun_asks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rerank-cache.jsonl");
        let texts = ["a", "b", "c"];
        let docs: Vec<RerankDoc> = texts
            .iter()
            .map(|t| RerankDoc {
                id: t,
                text: Some(t),
                image: None,
            })
            .collect();
        let q = RerankQuery {
            id: "q1",
            text: "why",
            images: &[],
        };
        let run = |reply| {
            let g = Arc::new(Scripted {
                reply: Some(reply),
                calls: Default::default(),
            });
            let cache = GenerationCache::open(&path).unwrap();
            let r = ListwiseReranker::new(g.clone(), Some(cache), ListwiseSettings::default());
            let s = r.scores(&q, &docs).unwrap();
            (s, g.calls.load(std::sync::atomic::Ordering::SeqCst))
        };
        assert_eq!(run("```json\n[2, 3, 1]\n```"), (vec![1.0, 3.0, 2.0], 1));
        // the same prompt again: the cached reply, not the generator's new one
        assert_eq!(run("```json\n[1, 2, 3]\n```"), (vec![1.0, 3.0, 2.0], 0));
    }

    #[test]
    fn the_prompt_is_brights() {
        let p = listwise_prompt("why\nnow", &["a\n\n\nb", "c"], 2);
        assert!(p.starts_with(
            "The following passages are related to query: why  now\n\n[1]. a b\n\n[2]. c\n\n"
        ));
        assert!(p.ends_with("output the ranking results as a list of ids in a json format."));
        assert!(p.contains("output a list of 2 ids corresponding to the most relevant 2 passages"));
    }
}
