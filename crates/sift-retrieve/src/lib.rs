//! Retrieval with Sift as a library, between the index ([`sift_index`]), the models
//! ([`sift_embed`]) and the evaluator ([`sift_eval`]):
//!
//! - [`RetrieverSpec`]: `bm25`, `dense:<model>`, `hybrid:<a>+<b>[:<wa>,<wb>]`, parsed with
//!   [`FromStr`](std::str::FromStr); hybrids combine rankings by [`RankFusion`]
//!   ([`fusion`]).
//! - [`ModelSet`]: the dense indexes' models, loaded once and checked against the index;
//!   [`Sides`] adapts an [`Embedder`](sift_embed::Embedder) to the index builder.
//! - [`encode_queries`]: query vectors, with query images fused as [`QueryImages`] says.
//! - [`DomainSearcher`]: one domain, searched over passages, corpus images or Task 4
//!   passage+image pairs ([`Candidates`]).
//! - [`evaluate`]: every task, retriever and query-image mode over the domains, as typed
//!   per-domain reports ([`EvalReport`]) that render as tables, JSON, runs and qrels.
//! - [`rerank`]: first-stage runs rescored by cross-encoders, pointwise yes/no VLM prompts
//!   or listwise LLM prompts ([`Reranker`], [`RerankStage`], `EvalConfig::rerank`).
//!
//! Index the bundled sample corpus with BM25 and evaluate Task 1:
//!
//! ```
//! use sift_core::Corpus;
//! use sift_index::{BuildOptions, IndexDir, NoProgress};
//! use sift_retrieve::{EvalConfig, ModelSet, evaluate};
//!
//! let corpus = Corpus::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample"))?;
//! let dir = tempfile::tempdir()?;
//! let index = IndexDir::build(
//!     dir.path().join("index"),
//!     &corpus,
//!     &corpus.domains()?,
//!     &BuildOptions::default(),
//!     &[],
//!     &NoProgress,
//! )?;
//! let report = evaluate(&corpus, &index, &ModelSet::new(), &EvalConfig::default(), &NoProgress)?;
//! let ndcg = report.jobs[0].report.mean()["ndcg@10"];
//! assert!(ndcg > 0.5, "{ndcg}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod augment;
mod candidates;
mod error;
mod evaluate;
pub mod fusion;
mod merge;
mod models;
mod pairs;
mod query;
mod reference;
pub mod rerank;
mod searcher;
mod spec;

pub use augment::QueryAugment;
pub use candidates::{PairCandidates, PairLinking};
pub use error::{Error, Result, SpecError};
pub use evaluate::{
    Comparison, EvalConfig, EvalReport, JobReport, RUN_TAG, RerankFailures, RulesInForce,
    RunOutput, TABLE_COLUMNS, count_jobs, evaluate, evaluate_quietly,
};
pub use merge::{DomainPart, search_domains};
pub use models::{
    DenseModel, Indexed, ModelSet, Side, Sides, match_precomputed, recorded_spec, slug,
};
pub use pairs::{
    PairVectors, embeds_pairs, loadable_images, passage_texts, reference_pair_vectors,
};
pub use query::{
    Instructions, QueryFusion, QueryImages, QueryVectors, encode_queries, encode_query,
    normalized_sum,
};
pub use reference::{
    MissingImage, ReferenceFusion, ReferencePairs, ReferenceRule, reference_image_stand_ins,
    reference_pair_stand_ins, reference_pairs, reference_rule, reference_rules_in_force,
    reference_white_corpus,
};
pub use rerank::{RerankOptions, RerankStage, Reranker, open_reranker};
pub use searcher::{
    AUTO_EXACT_MAX, Ann, Candidates, DomainSearcher, PairStandIns, PairTable, Query,
    SearchSettings, fuse,
};
pub use sift_eval::{run_file_name, safe_name};
pub use spec::{RRF_K, RankFusion, RetrieverSpec};
