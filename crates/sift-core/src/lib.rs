//! Core types and corpus readers for Sift.
//!
//! A corpus is read one *domain* at a time: each domain is its own retrieval problem
//! (MM-BRIGHT protocol, `docs/src/mm-bright-protocol.md`: "a domain's queries are run
//! against that domain's passages and images only"). A BEIR collection is a corpus with a
//! single domain named after its directory.
//!
//! - [`Corpus::open`] detects the layout ([`Layout::Beir`], [`Layout::MmBright`], or
//!   [`Layout::Kb`]: a knowledge base, one JSONL or Parquet file of rows `{"id" or "qid",
//!   "text", "image_path"}`).
//! - [`Corpus::passages`] streams a domain's passages, rejecting duplicate ids.
//! - [`Corpus::examples`] reads a domain's queries with their gold ids, exclusions and image
//!   annotations; [`Corpus::beir_qrels`] reads BEIR qrels.
//! - [`Corpus::images`] streams a domain's corpus images without holding them all in memory.
//! - [`Corpus::row_links`] gives a knowledge base's passage-image links (its rows).
//!
//! Problems that make the input unusable are an [`Error`] naming the file and line/row; problems
//! where skipping is the right call are counted in [`Warnings`].
//!
//! ```
//! use sift_core::{Corpus, Layout, Warnings};
//!
//! let corpus = Corpus::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample"))?;
//! assert_eq!(corpus.layout(), Layout::MmBright);
//! assert_eq!(corpus.domains()?, ["biology", "gis", "physics"]);
//! let passages = corpus.passages("gis")?.collect::<sift_core::Result<Vec<_>>>()?;
//! assert_eq!(passages.len(), 15);
//! let mut warnings = Warnings::new();
//! let queries = corpus.examples("gis", false, &mut warnings)?;
//! assert!(queries.iter().all(|q| !q.gold_ids.is_empty()));
//! # Ok::<(), sift_core::Error>(())
//! ```
#![warn(missing_docs)]

mod beir;

pub use beir::{UTF8_BOM, is_qrels_header, parse_grade, passage_text};
mod corpus;
mod error;
mod files;
mod guard;
mod kb;
pub use kb::contents_title;
mod mmbright;
mod paths;
mod types;
pub mod vectors;
mod warnings;

pub use corpus::{Corpus, ImageRecord, Images, Layout, Passages};
pub use error::{Error, Result};
pub use files::{
    LINE_LIMIT, Lines, OutputFile, TEXT_FILE_LIMIT, VettedFile, open_regular_file,
    open_regular_file_if_exists, open_regular_file_no_follow, read_regular_file,
    read_regular_file_if_exists, read_regular_text, write_output,
};
pub use guard::catch_panics;
pub use paths::{
    domain_problem, id_problem, image_base_key, normalize_image_path, passage_base_key,
};
pub use types::{Example, ImageLabels, Passage, Qrels};
pub use warnings::{Warning, WarningKind, Warnings};
