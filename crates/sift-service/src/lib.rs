//! Sift's one-query core: an index, its models and (optionally) its corpus, loaded once
//! ([`Service::load`]) and answering every request the same way whichever door it came
//! through: the `sift` command line, the HTTP and MCP transports of sift-serve, and the
//! Python package.
//!
//! - [`Service::search`]: passages, corpus images or Task 4 passage+image pairs by text
//!   and/or images, in one domain or merged across domains, reranked when the service has a
//!   reranker; the task a query is encoded as follows one rule, [`query_task`];
//! - pages, passages and image bytes by id ([`Service::page`], [`Service::document`],
//!   [`Service::image`]), with the links an agent follows ([`pages`]);
//! - raw reranker scores of given (query, passage[, image]) pairs ([`score_pairs`]);
//! - embeddings, scoring hits against qrels, fusing result lists, and chat completions with
//!   a local generator ([`chat`]: the one conversion of OpenAI's chats, for every door);
//! - the request and response types ([`api`], serde and JSON Schema), parsed with the field
//!   at fault named ([`api::parse_json`]), and the errors ([`ApiError`]) every door maps to
//!   its own shape.
//!
//! Everything here is synchronous and CPU-bound, with no HTTP types: a transport runs it on
//! its own threads. The service only reads: ids are looked up in what the index and corpus
//! hold, never joined to paths.
//!
//! Search the bundled sample corpus's index, without any server:
//!
//! ```
//! use sift_core::Corpus;
//! use sift_index::{BuildOptions, IndexDir, NoProgress};
//! use sift_service::{ServeConfig, Service, api::SearchRequest};
//!
//! let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample");
//! let corpus = Corpus::open(sample)?;
//! let dir = tempfile::tempdir()?;
//! let root = dir.path().join("index");
//! IndexDir::build(&root, &corpus, &["biology".to_string()], &BuildOptions::default(), &[], &NoProgress)?;
//! let mut config = ServeConfig::new(&root);
//! config.corpus = Some(sample.into());
//! let service = Service::load(&config)?;
//! let res = service.search(&SearchRequest {
//!     query: "how do plants make sugar".into(),
//!     top_k: 3,
//!     ..SearchRequest::default()
//! })?;
//! assert_eq!(res.hits.len(), 3);
//! assert!(res.hits[0].text.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod api;
pub mod chat;
mod error;
pub mod images;
pub mod pages;
mod rerank;
mod service;

pub use error::{ApiError, Error, ErrorKind};
pub use rerank::{ScorePair, rerank_documents, score_pairs};
pub use service::{
    BatchOptions, BatchStats, Limits, Page, ServeConfig, Service, document_path, encode_path,
    image_path, page_path, query_task,
};
