//! The on-disk Sift index.
//!
//! ```text
//! INDEX/
//!   manifest.json            names the live generation; replaced atomically (write + rename)
//!   gen-<id>/bm25/<domain>/  tantivy segments + ids.json, one retrieval problem per domain
//!   gen-<id>/dense/<model>/<domain>/  vectors (f32 or f16) by passage ordinal + HNSW graph
//!   embed-cache/<model>.bin  embeddings keyed by model settings and text, kept across builds
//! ```
//!
//! A build writes a complete new generation beside the live one and only then swaps
//! `manifest.json`, so a crash or Ctrl-C at any point leaves the previous index usable; stale
//! generations are removed by the next build. See [`IndexDir`].
//!
//! BM25 is scored by Sift itself over tantivy's postings and field norms (tantivy's own scorer
//! fixes k1 = 1.2, b = 0.75): see [`Bm25Domain`] and [`Bm25Params`].
#![warn(missing_docs)]

mod analyzer;
mod bm25;
mod cache;
mod dense;
mod dir;
mod error;
mod hnsw;
mod manifest;
mod progress;
mod readonly;

pub use analyzer::{AnalyzerConfig, Stemming, StopWords};
pub use bm25::{Bm25Domain, Bm25Params, Hit, QueryWeighting, Scratch};
pub use dense::{
    AnnMode, DenseDomain, DenseMeta, HnswParams, VectorDtype, dot, write as write_dense,
};
pub use dir::{BuildOptions, DenseBuild, ImageEmbedder, IndexDir, PassageEmbedder};
pub use error::{Error, Result};
pub use hnsw::Hnsw;
pub use manifest::{DenseInfo, DomainInfo, FORMAT_VERSION, ImageIndexInfo, Manifest};
pub use progress::{NoProgress, Progress};
