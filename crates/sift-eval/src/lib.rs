//! Retrieval evaluation with trec_eval semantics, TREC run/qrels I/O, MM-BRIGHT task
//! assembly and reports.
//!
//! Metrics follow trec_eval 9 as pytrec_eval runs it (reference numbers and the script that
//! made them: `eval/reference/`): scores compared as 32-bit floats, ties broken by document
//! id descending, graded gains for nDCG, grade >= 1 relevant for the binary measures.
//!
//! ```
//! use sift_core::Qrels;
//! use sift_eval::{Exclusions, Run, RunEntry, score_run};
//!
//! let mut run = Run::new();
//! run.insert("q1".into(), vec![
//!     RunEntry { doc: "d1".into(), score: 2.0 },
//!     RunEntry { doc: "d2".into(), score: 1.0 },
//! ]);
//! let mut qrels = Qrels::new();
//! qrels.insert("q1".into(), [("d2".to_string(), 1)].into());
//! let ev = score_run(&run, &qrels, &Exclusions::new(), false);
//! assert_eq!(ev.mean["mrr"], 0.5); // the relevant document is second
//! ```
#![warn(missing_docs)]

mod error;
mod links;
mod metrics;
pub mod report;
pub mod stats;
mod tasks;
mod trec;

pub use error::{Error, Result};
pub use links::{LinkReport, LinkStats, Links, PairLink};
pub use metrics::{
    CUTOFFS, Evaluation, Exclusions, Metrics, Run, RunEntry, evaluate_query, metric_names,
    score_run, trec_order, trec_score_key,
};
pub use report::{DomainResult, Report};
pub use tasks::{
    CandidateKind, NO_IMAGE, PAIR_SEP, Pairs, Protocol, Task, TaskData, check_exclusions,
    check_qrels_ids, orphan_positive_images, pair_id, split_pair_id, task1, task2, task3, task4,
};
pub use trec::{
    RunWriter, TREC_LINE_LIMIT, read_exclusions, read_qrels, read_run, run_file_name, safe_name,
    write_exclusions, write_qrels, write_run,
};
