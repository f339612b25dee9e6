//! The on-disk Sift index: BM25 (tantivy postings, Sift's scoring) and dense vectors with
//! HNSW graphs, per domain, built from any [`PassageSource`] and replaced atomically.
//!
//! ```
//! use sift_index::{BuildOptions, IndexDir, MemorySource, NoProgress};
//!
//! let mut source = MemorySource::new("notes");
//! source.add("physics", "p1", "Shock waves heat the gas behind them.");
//! source.add("physics", "p2", "A boundary layer forms along the wall.");
//! let dir = tempfile::tempdir()?;
//! let index = IndexDir::build(
//!     dir.path().join("index"),
//!     &source,
//!     &source.domains(),
//!     &BuildOptions::default(),
//!     &[],
//!     &NoProgress,
//! )?;
//! let bm25 = index.bm25("physics")?;
//! let hits = bm25.search(&mut bm25.scratch(), "shock heating", 10, &Default::default(), &[])?;
//! assert_eq!(bm25.id(hits[0].ord), "p1");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A build writes a complete new generation beside the live one and only then swaps
//! `manifest.json`, so a crash or Ctrl-C at any point leaves the previous index usable;
//! readers lease the generation they opened, so a rebuild never pulls it from under them.
//! See [`IndexDir`] and the layout in `paths.rs`.
//!
//! BM25 is scored by Sift itself over tantivy's postings and field norms (tantivy's own scorer
//! fixes k1 = 1.2, b = 0.75): see [`Bm25Domain`] and [`Bm25Params`]. Dense indexes take any
//! embedder implementing [`PassageEmbedder`] (and [`ImageEmbedder`] for images), so this crate
//! depends on no model runtime.
#![warn(missing_docs)]

mod analyzer;
mod bm25;
mod build;
mod cache;
mod dense;
mod dir;
mod embedding;
mod error;
mod faiss;
mod hnsw;
pub mod lucene;
mod manifest;
mod paths;
mod precomputed;
mod progress;
mod readonly;
mod source;

pub use analyzer::{Analyzer, AnalyzerConfig, AnalyzerPreset, Stemming, StopWords, TokenizerKind};
pub use bm25::{Bm25Domain, Bm25Params, Bm25Scoring, Bm25Stats, Hit, Scratch};
pub use build::BuildOptions;
pub use dense::{
    AnnMode, DenseDomain, DenseMeta, HnswParams, VectorDtype, dot, write as write_dense,
};
pub use dir::IndexDir;
pub use embedding::{BoxError, DenseBuild, EmbedderInfo, ImageEmbedder, PassageEmbedder};
pub use error::{Error, Result};
pub use faiss::{FaissFile, FaissMetric, UNIT_TOLERANCE};
pub use hnsw::Hnsw;
pub use manifest::{DenseInfo, DomainInfo, FORMAT_VERSION, ImageIndexInfo, Manifest};
pub use precomputed::{Precomputed, VECTORS_MANIFEST, VectorsDomain, VectorsManifest};
pub use progress::{NoProgress, Progress};
pub use source::{ImageStream, MemorySource, PassageSource, PassageStream};
