//! Reranking a first-stage ranking: each query's top `depth` candidates rescored by a
//! [`Reranker`], the rest kept below them in their first-stage order.
//!
//! Rerankers:
//! - [`CrossEncoderReranker`]: a BERT / XLM-RoBERTa cross-encoder
//!   ([`sift_embed::CrossEncoder`]) on the query's text and each candidate's passage text
//!   (Tasks 1, 2 and 4; it cannot read images, so Task 3 is not for it, and a Task 4
//!   passage's pairs share its score);
//! - [`PointwiseReranker`]: a local Qwen2-VL / Qwen2.5-VL asked whether each candidate is
//!   relevant, scored by `log P(yes)` against `no` at the answer's first token, with the
//!   query's images and the candidate's image in the prompt (every task);
//! - [`ListwiseReranker`]: any generator given the top candidates numbered and asked for their
//!   order, over a sliding window from the bottom up, as BRIGHT's `rerank.py` (after RankGPT)
//!   runs it; scores `k - rank`, a reply that does not parse keeps the order and is counted.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use sift_core::{Corpus, Example};
use sift_eval::{Run, RunEntry, Task};

use crate::{Error, Result};

/// A query as a reranker sees it.
#[derive(Debug, Clone, Copy)]
pub struct RerankQuery<'a> {
    /// Query id.
    pub id: &'a str,
    /// Query text.
    pub text: &'a str,
    /// The query's images (encoded files), for rerankers that see images.
    pub images: &'a [&'a [u8]],
}

/// A candidate as a reranker sees it: a passage's text, a corpus image, or both (a Task 4
/// pair).
#[derive(Debug, Clone, Copy)]
pub struct RerankDoc<'a> {
    /// Document id (as in the run).
    pub id: &'a str,
    /// Passage text.
    pub text: Option<&'a str>,
    /// Image file.
    pub image: Option<&'a [u8]>,
}

/// Something that rescores a query's candidates.
pub trait Reranker: Send + Sync {
    /// Its name in tables (`rerank:<name>`).
    fn name(&self) -> &str;

    /// Whether it reads images (query images, corpus images).
    fn sees_images(&self) -> bool;

    /// Whether it can rank `task`'s candidates (a text reranker cannot rank Task 3's images).
    fn ranks(&self, task: Task) -> bool {
        self.sees_images() || task != Task::Images
    }

    /// A score for each of `docs`, given in first-stage order (higher is better).
    fn scores(&self, query: &RerankQuery<'_>, docs: &[RerankDoc<'_>]) -> Result<Vec<f64>>;

    /// Things worth reporting after a run (e.g. replies that did not parse).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether its scores are probabilities already (through a sigmoid: a cross-encoder
    /// whose checkpoint names that activation, the score head), rather than logits or other
    /// unbounded scores.
    fn probabilities(&self) -> bool {
        false
    }
}

/// A reranking stage of an evaluation: a reranker and how deep it reads.
#[derive(Clone)]
pub struct RerankStage {
    /// The reranker.
    pub reranker: std::sync::Arc<dyn Reranker>,
    /// Candidates per query it rescores.
    pub depth: usize,
}

impl std::fmt::Debug for RerankStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RerankStage")
            .field("reranker", &self.reranker.name())
            .field("depth", &self.depth)
            .finish()
    }
}

/// The passage texts and image files a domain's reranking reads, loaded for the candidates
/// it needs.
#[derive(Debug, Default)]
pub struct RerankContent {
    passages: HashMap<String, String>,
    images: HashMap<String, Vec<u8>>,
    query_images: HashMap<String, Vec<u8>>,
}

impl RerankContent {
    /// Loads, from `domain` of `corpus`, the passages and corpus images the top `depth`
    /// documents of `run` (over `task`'s candidates) name (images only when `with_images`),
    /// and the query images of `queries` (also only then). Already loaded ones are kept.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        &mut self,
        corpus: &Corpus,
        domain: &str,
        task: Task,
        run: &Run,
        depth: usize,
        queries: &[Example],
        with_images: bool,
    ) -> Result<()> {
        let mut passages: HashSet<&str> = HashSet::new();
        let mut images: HashSet<&str> = HashSet::new();
        for entries in run.values() {
            for e in ranked(entries).into_iter().take(depth) {
                let (p, i) = task.doc_parts(&e.doc);
                if let Some(p) = p
                    && !self.passages.contains_key(p)
                {
                    passages.insert(p);
                }
                if with_images
                    && let Some(i) = i
                    && !self.images.contains_key(i)
                {
                    images.insert(i);
                }
            }
        }
        if !passages.is_empty() {
            for p in corpus.passages(domain)? {
                let p = p?;
                if passages.contains(p.id.as_str()) {
                    self.passages.insert(p.id, p.text);
                }
            }
        }
        if !images.is_empty() {
            for r in corpus.images(domain)? {
                let r = r?;
                if images.contains(r.path.as_str()) {
                    self.images.insert(r.path, r.bytes);
                }
            }
        }
        if with_images {
            let wanted: HashSet<&str> = queries
                .iter()
                .flat_map(|q| q.image_paths.iter().map(String::as_str))
                .filter(|p| !self.query_images.contains_key(*p))
                .collect();
            if !wanted.is_empty() {
                for r in corpus.query_images(domain)? {
                    let r = r?;
                    if wanted.contains(r.path.as_str()) {
                        self.query_images.insert(r.path, r.bytes);
                    }
                }
            }
        }
        Ok(())
    }
}

/// A query's entries best first, in trec_eval's order (score descending, then document id
/// descending).
fn ranked(entries: &[RunEntry]) -> Vec<&RunEntry> {
    let mut v: Vec<&RunEntry> = entries.iter().collect();
    v.sort_by(|a, b| sift_eval::trec_order(a, b));
    v
}

/// Queries after which, failing one after the other, a reranking stops asking: the
/// reranker (an endpoint that is down, a hung one) is taken for broken.
pub const MAX_FAILURES_IN_A_ROW: usize = 3;

/// A reranked run and the queries it could not rerank.
#[derive(Debug, Clone, Default)]
pub struct RerankedRun {
    /// Every query of the first-stage run: reranked, or, for those in `failed`, as the
    /// first stage ranked it.
    pub run: Run,
    /// The queries the reranker failed on (its error), and after [`MAX_FAILURES_IN_A_ROW`]
    /// failures in a row the queries not asked, in the run's order.
    pub failed: Vec<(String, String)>,
}

/// Reranks `run` (one domain's, over `task`'s candidates): each query's top `depth`
/// documents get the reranker's scores, the others follow below the lowest of them in their
/// first-stage order ([`rerank_entries`]). `on_query` is called after each query.
///
/// A query the reranker fails on (an endpoint's error, a score that is not a number) keeps
/// its first-stage ranking and is listed in [`RerankedRun::failed`] with the error; after
/// [`MAX_FAILURES_IN_A_ROW`] failures in a row the remaining queries are not asked (listed
/// too). The rankings that finished are kept: one failure does not lose the run.
pub fn rerank_run(
    stage: &RerankStage,
    task: Task,
    run: &Run,
    queries: &[Example],
    content: &RerankContent,
    on_query: &(dyn Fn() + Sync),
) -> RerankedRun {
    let by_id: HashMap<&str, &Example> = queries.iter().map(|q| (q.id.as_str(), q)).collect();
    let sees = stage.reranker.sees_images();
    let mut out = RerankedRun::default();
    let mut in_a_row = 0;
    for (qid, entries) in run {
        let Some(q) = by_id.get(qid.as_str()) else {
            out.run.insert(qid.clone(), entries.clone());
            continue;
        };
        if in_a_row >= MAX_FAILURES_IN_A_ROW {
            out.failed.push((
                qid.clone(),
                format!(
                    "not asked: rerank:{} failed on the {MAX_FAILURES_IN_A_ROW} queries before it",
                    stage.reranker.name()
                ),
            ));
            out.run.insert(qid.clone(), entries.clone());
            on_query();
            continue;
        }
        let query_images: Vec<&[u8]> = if sees && task.has_query_images() {
            q.image_paths
                .iter()
                .filter_map(|p| content.query_images.get(p).map(Vec::as_slice))
                .collect()
        } else {
            Vec::new()
        };
        let query = RerankQuery {
            id: qid,
            text: &q.query,
            images: &query_images,
        };
        match rerank_entries(stage, task, &query, entries, content) {
            Ok(e) => {
                in_a_row = 0;
                out.run.insert(qid.clone(), e);
            }
            Err(e) => {
                in_a_row += 1;
                out.failed.push((qid.clone(), e.to_string()));
                out.run.insert(qid.clone(), entries.clone());
            }
        }
        on_query();
    }
    out
}

/// One query's reranked entries: its top `depth` first-stage `entries` (in trec_eval's
/// order) rescored, the others below the lowest of those scores, one apart, in their
/// first-stage order. Candidates' texts and images come from `content`.
pub fn rerank_entries(
    stage: &RerankStage,
    task: Task,
    query: &RerankQuery<'_>,
    entries: &[RunEntry],
    content: &RerankContent,
) -> Result<Vec<RunEntry>> {
    let sees = stage.reranker.sees_images();
    let ranked = ranked(entries);
    let top = &ranked[..stage.depth.min(ranked.len())];
    let mut docs = Vec::with_capacity(top.len());
    for e in top {
        let (p, i) = task.doc_parts(&e.doc);
        let text = match p {
            None => None,
            Some(p) => Some(content.passages.get(p).map(String::as_str).ok_or_else(|| {
                Error::Unsupported(format!("rerank: passage {p:?} is not in the corpus"))
            })?),
        };
        let image = match (i, sees) {
            (None, _) | (_, false) => None,
            (Some(i), true) => Some(content.images.get(i).map(Vec::as_slice).ok_or_else(|| {
                Error::Unsupported(format!("rerank: corpus image {i:?} was not found"))
            })?),
        };
        docs.push(RerankDoc {
            id: &e.doc,
            text,
            image,
        });
    }
    Ok(rescore(stage, query, &docs, ranked.len())?
        .into_iter()
        .map(|(i, score)| RunEntry {
            doc: ranked[i].doc.clone(),
            score,
        })
        .collect())
}

/// The new scores of `total` ranked candidates whose first `docs.len()` are `docs`: each of
/// those gets the reranker's score, each after them the lowest of those minus 1, 2, ... in
/// its order. Returns (position in the first-stage ranking, score) for every candidate.
pub fn rescore(
    stage: &RerankStage,
    query: &RerankQuery<'_>,
    docs: &[RerankDoc<'_>],
    total: usize,
) -> Result<Vec<(usize, f64)>> {
    let scores = stage.reranker.scores(query, docs)?;
    if scores.len() != docs.len() {
        return Err(Error::Unsupported(format!(
            "rerank:{} gave {} scores for {} candidates",
            stage.reranker.name(),
            scores.len(),
            docs.len()
        )));
    }
    // one check for every reranker, local or remote, computed or read from a cache: a
    // NaN or an infinity would reach the run (and sort anywhere)
    if let Some((i, s)) = scores.iter().enumerate().find(|(_, s)| !s.is_finite()) {
        return Err(Error::Unsupported(format!(
            "rerank:{}: query {}: candidate {} got the score {s}, not a finite number",
            stage.reranker.name(),
            query.id,
            docs[i].id
        )));
    }
    let floor = scores.iter().copied().fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 0.0 };
    let mut out: Vec<(usize, f64)> = scores.into_iter().enumerate().collect();
    out.extend((docs.len()..total).map(|i| (i, floor - 1.0 - (i - docs.len()) as f64)));
    Ok(out)
}

/// A cross-encoder reranker ([`sift_embed::CrossEncoder`]).
pub struct CrossEncoderReranker {
    name: String,
    model: sift_embed::CrossEncoder,
}

impl CrossEncoderReranker {
    /// Wraps a loaded cross-encoder.
    pub fn new(model: sift_embed::CrossEncoder) -> Self {
        CrossEncoderReranker {
            name: model.name().to_string(),
            model,
        }
    }
}

impl Reranker for CrossEncoderReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn sees_images(&self) -> bool {
        false
    }

    fn scores(&self, query: &RerankQuery<'_>, docs: &[RerankDoc<'_>]) -> Result<Vec<f64>> {
        let pairs: Vec<(&str, &str)> = docs
            .iter()
            .map(|d| (query.text, d.text.unwrap_or("")))
            .collect();
        Ok(self
            .model
            .score(&pairs)?
            .into_iter()
            .map(f64::from)
            .collect())
    }

    fn probabilities(&self) -> bool {
        self.model.activation() == sift_embed::ScoreActivation::Sigmoid
    }
}

/// How [`open_reranker`] loads a reranker.
#[derive(Debug, Clone)]
pub struct RerankOptions {
    /// Where local models run.
    pub device: candle_core::Device,
    /// Local models' weights (bf16 on the CPU: the packed kernels).
    pub dtype: candle_core::DType,
    /// Cross-encoder pairs per forward pass.
    pub batch: usize,
    /// Cross-encoder tokens per pair (`None`: the model's).
    pub max_length: Option<usize>,
    /// The model an endpoint serves (listwise over a remote generator).
    pub model: Option<String>,
    /// How endpoints are reached.
    pub remote: sift_generate::RemoteSettings,
    /// Listwise prompting and sampling.
    pub listwise: ListwiseSettings,
    /// Characters of each candidate's text in a pointwise prompt.
    pub pointwise_max_chars: usize,
    /// The pointwise prompt and answer words.
    pub pointwise_prompt: PointwisePrompt,
    /// Where listwise replies and pointwise scores are cached (JSONL).
    pub cache: Option<std::path::PathBuf>,
    /// Entries the cache holds at most: past it, new replies and scores are not stored
    /// ([`sift_generate::GenerationCache::with_max_entries`]).
    pub cache_max_entries: usize,
}

impl RerankOptions {
    /// Local models on `device` in `dtype`, with the defaults of `--rerank`'s flags: 32
    /// pairs a forward pass, the model's own length, no cache, the default prompts and
    /// endpoint settings.
    pub fn new(device: candle_core::Device, dtype: candle_core::DType) -> RerankOptions {
        RerankOptions {
            device,
            dtype,
            batch: 32,
            max_length: None,
            model: None,
            remote: sift_generate::RemoteSettings::default(),
            listwise: ListwiseSettings::default(),
            pointwise_max_chars: 2000,
            pointwise_prompt: PointwisePrompt::default(),
            cache: None,
            cache_max_entries: 1_000_000,
        }
    }
}

/// The reranker `spec` names: `listwise:<generator>` (an OpenAI-compatible endpoint's base
/// URL, with [`RerankOptions::model`], or a local Qwen2-VL / Qwen2.5-VL checkpoint),
/// `pointwise:<checkpoint>` (a local Qwen2-VL / Qwen2.5-VL, or an OpenAI-compatible
/// endpoint's base URL with [`RerankOptions::model`], read through its `top_logprobs`; a
/// checkpoint with its own relevance head,
/// jina-reranker-m0's `JinaVLForRanking`, scores with that head), `cross-encoder:<model>`, or
/// a bare model: a sequence classifier is a cross-encoder, anything else is tried as a local
/// pointwise model.
pub fn open_reranker(spec: &str, o: &RerankOptions) -> Result<std::sync::Arc<dyn Reranker>> {
    use std::sync::Arc;
    let gen_err = |e: sift_generate::Error| Error::Unsupported(format!("rerank {spec}: {e}"));
    if let Some(g) = spec.strip_prefix("listwise:") {
        let (generator, _) = sift_generate::open(
            g,
            o.model.as_deref(),
            &o.remote,
            &o.device,
            o.dtype == candle_core::DType::BF16,
        )
        .map_err(gen_err)?;
        let cache = match &o.cache {
            Some(p) => Some(open_cache(p, o).map_err(gen_err)?),
            None => None,
        };
        return Ok(Arc::new(ListwiseReranker::new(
            Arc::from(generator),
            cache,
            o.listwise.clone(),
        )));
    }
    let pointwise = |m: &str| -> Result<Arc<dyn Reranker>> {
        // an endpoint: the answer's first-token log probabilities
        if sift_generate::is_endpoint(m) {
            let endpoint =
                sift_generate::open_endpoint(m, o.model.as_deref(), &o.remote).map_err(gen_err)?;
            let mut r = RemotePointwiseReranker::new(
                endpoint,
                o.pointwise_max_chars,
                o.pointwise_prompt.clone(),
            );
            if let Some(p) = &o.cache {
                r = r.with_cache(open_cache(p, o).map_err(gen_err)?);
            }
            return Ok(Arc::new(r));
        }
        // a checkpoint with its own relevance head (jina-reranker-m0) scores with it
        if sift_embed::ModelFiles::resolve(m).is_ok_and(|f| has_score_head(&f)) {
            return Ok(Arc::new(ScoreHeadReranker::load(
                m,
                &o.device,
                o.dtype,
                o.pointwise_max_chars,
            )?));
        }
        let model =
            sift_generate::LocalQwen2Vl::load_with(m, &o.device, o.dtype).map_err(gen_err)?;
        let mut r = PointwiseReranker::with_prompt(
            model,
            o.pointwise_max_chars,
            o.pointwise_prompt.clone(),
        )?;
        if let Some(p) = &o.cache {
            r = r.with_cache(open_cache(p, o).map_err(gen_err)?);
        }
        Ok(Arc::new(r))
    };
    let cross = |m: &str| -> Result<Arc<dyn Reranker>> {
        let options = sift_embed::CrossEncoderOptions {
            max_length: o.max_length,
            dtype: o.dtype,
            batch: o.batch,
        };
        Ok(Arc::new(CrossEncoderReranker::new(
            sift_embed::CrossEncoder::load(m, &o.device, &options)?,
        )))
    };
    if let Some(m) = spec.strip_prefix("pointwise:") {
        return pointwise(m);
    }
    if let Some(m) = spec.strip_prefix("cross-encoder:") {
        return cross(m);
    }
    let files = sift_embed::ModelFiles::resolve(spec)?;
    if sift_embed::is_cross_encoder(&files) {
        cross(spec)
    } else {
        pointwise(spec)
    }
}

/// The note on entries a full cache did not store, when there were any.
fn full_cache_note(name: &str, cache: &sift_generate::GenerationCache) -> Option<String> {
    let n = cache.not_stored();
    (n > 0).then(|| {
        format!(
            "rerank:{name}: {} full ({} entries): {n} new entries not cached",
            cache.path().display(),
            cache.len()
        )
    })
}

/// The reranking cache at `path`, bounded by `o`'s entries.
fn open_cache(
    path: &std::path::Path,
    o: &RerankOptions,
) -> sift_generate::Result<sift_generate::GenerationCache> {
    Ok(sift_generate::GenerationCache::open(path)?.with_max_entries(o.cache_max_entries))
}

/// A model's name for tables: a local directory's last component, a hub id or an
/// endpoint's model as it is.
fn short_name(id: &str) -> &str {
    let path = std::path::Path::new(id);
    if path.is_dir() {
        path.file_name().and_then(|n| n.to_str()).unwrap_or(id)
    } else {
        id
    }
}

/// Counts shared by a reranker's queries.
#[derive(Debug, Default)]
struct Counter(AtomicU64);

impl Counter {
    fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub use listwise::{
    ListwiseReranker, ListwiseSettings, Permutation, listwise_prompt, parse_permutation,
};
pub use pointwise::{
    CANDIDATE_IMAGE, PointwisePrompt, PointwiseReranker, QUERY_IMAGES, RemotePointwiseReranker,
    TOP_LOGPROBS, yes_no_from_logprobs,
};
pub use score_head::{ScoreHeadReranker, has_score_head};

mod listwise;
mod pointwise;
mod score_head;

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores each candidate by its position, except: a query whose text is `fail` is an
    /// error, `nan` / `inf` give that score to its first candidate.
    struct Scripted;

    impl Reranker for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }

        fn sees_images(&self) -> bool {
            false
        }

        fn scores(&self, query: &RerankQuery<'_>, docs: &[RerankDoc<'_>]) -> Result<Vec<f64>> {
            let mut s: Vec<f64> = (0..docs.len()).map(|i| i as f64).collect();
            match query.text {
                "fail" => return Err(Error::Unsupported("endpoint down".into())),
                "nan" => s[0] = f64::NAN,
                "inf" => s[0] = f64::NEG_INFINITY,
                _ => {}
            }
            Ok(s)
        }
    }

    fn stage() -> RerankStage {
        RerankStage {
            reranker: std::sync::Arc::new(Scripted),
            depth: 2,
        }
    }

    /// Queries `q0`, `q1`, ... with these texts, each with three images ranked `a`, `b`, `c`.
    fn run_of(texts: &[&str]) -> (Run, Vec<Example>) {
        let mut run = Run::new();
        let mut queries = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let id = format!("q{i}");
            let entries = ["a", "b", "c"]
                .iter()
                .enumerate()
                .map(|(r, d)| RunEntry {
                    doc: d.to_string(),
                    score: 10.0 - r as f64,
                })
                .collect();
            run.insert(id.clone(), entries);
            queries.push(Example {
                id,
                query: t.to_string(),
                gold_ids: Vec::new(),
                negative_ids: Vec::new(),
                gold_answers: Vec::new(),
                image_paths: Vec::new(),
                images: None,
            });
        }
        (run, queries)
    }

    #[test]
    fn scores_that_are_not_finite_are_an_error_naming_the_query_and_candidate() {
        for text in ["nan", "inf"] {
            let (run, queries) = run_of(&[text]);
            let out = rerank_run(
                &stage(),
                Task::Images,
                &run,
                &queries,
                &RerankContent::default(),
                &|| {},
            );
            let (q, e) = &out.failed[0];
            assert_eq!(q, "q0");
            assert!(
                e.contains("query q0") && e.contains("candidate a") && e.contains("not a finite"),
                "{e}"
            );
            // the query keeps its first-stage ranking: no NaN reaches the run
            assert_eq!(out.run, run);
        }
    }

    #[test]
    fn a_failed_query_keeps_its_first_stage_ranking_and_three_in_a_row_stop_the_asking() {
        let (run, queries) = run_of(&["ok", "fail", "ok", "fail", "fail", "fail", "ok"]);
        let out = rerank_run(
            &stage(),
            Task::Images,
            &run,
            &queries,
            &RerankContent::default(),
            &|| {},
        );
        let failed: Vec<&str> = out.failed.iter().map(|(q, _)| q.as_str()).collect();
        assert_eq!(failed, ["q1", "q3", "q4", "q5", "q6"]);
        assert!(out.failed[0].1.contains("endpoint down"));
        assert!(
            out.failed[4].1.starts_with("not asked"),
            "{}",
            out.failed[4].1
        );
        // reranked: the depth's two swapped by the scripted scores, the third below them
        let docs = |q: &str| -> Vec<&str> { out.run[q].iter().map(|e| e.doc.as_str()).collect() };
        let mut reranked: Vec<&RunEntry> = out.run["q0"].iter().collect();
        reranked.sort_by(|a, b| sift_eval::trec_order(a, b));
        assert_eq!(
            reranked.iter().map(|e| e.doc.as_str()).collect::<Vec<_>>(),
            ["b", "a", "c"]
        );
        assert_eq!(docs("q2").len(), 3);
        for q in ["q1", "q3", "q6"] {
            assert_eq!(out.run[q], run[q], "{q}");
        }
        assert_eq!(out.run.len(), run.len());
    }
}
