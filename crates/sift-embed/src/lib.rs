//! Embedding models for Sift, in candle.
//!
//! - [`TextEmbedder`]: BERT-family sentence encoders (all-MiniLM, bge, e5, gte): configuration
//!   from the model's `config.json`, pooling from sentence-transformers'
//!   `1_Pooling/config.json` (else the [`registry`]), L2 normalisation, query/passage
//!   prefixes, truncation to the model's maximum sequence length.
//! - [`registry`]: the supported model ids (`models/registry.json`).
//! - [`ModelFiles::resolve`]: a local directory, or a hub id through hf-hub (feature `hub`).
#![warn(missing_docs)]

mod device;
mod error;
mod files;
pub mod registry;
mod text;

pub use device::{DevicePref, select_device};
pub use error::{Error, Result};
pub use files::ModelFiles;
pub use registry::{ModelInfo, Pooling};
pub use text::{Kind, TextEmbedder, TextEmbedderOptions};
