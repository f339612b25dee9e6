//! Embedding models for Sift, in candle.
//!
//! - [`TextEmbedder`]: BERT-family sentence encoders (all-MiniLM, bge, e5, gte): configuration
//!   from the model's `config.json`, pooling from sentence-transformers'
//!   `1_Pooling/config.json` (else the [`registry`]), L2 normalisation, query/passage
//!   prefixes, truncation to the model's maximum sequence length.
//! - [`GmeEmbedder`]: GME (Qwen2-VL, [`qwen2vl`]): text, images, and text with images in
//!   one space.
//! - [`registry`]: the supported model ids (`models/registry.json`).
//! - [`ModelFiles::resolve`]: a local directory, or a hub id through hf-hub (feature `hub`).
#![warn(missing_docs)]

pub mod bench;
mod device;
mod embedder;
mod error;
mod files;
pub mod image;
pub mod models;
mod nn;
pub mod registry;

pub use device::{DevicePref, select_device};
pub use embedder::{
    Capabilities, Embedder, EmbedderOptions, Family, Input, JointInput, Precision, PreparedImage,
    PreparedTexts,
};
pub use error::{Error, Result};
pub use files::{ModelFiles, read_json};
pub use image::PreprocessError;
pub use models::gme::{GmeEmbedder, GmeImage, GmeInput, GmeOptions, GmePositions, is_gme_model};
pub use models::text::{Role, TextEmbedder, TextEmbedderOptions};
pub use models::vision::{
    VisionArch, VisionEmbedder, VisionOptions, is_vision_model, siglip_canonicalize,
    siglip_canonicalize_with,
};
pub use registry::{ModelInfo, Pooling};

/// Makes glibc's allocator keep large buffers for reuse instead of returning each one to the
/// kernel: model inference allocates and frees activation tensors of many megabytes per
/// layer, and with glibc's defaults every one of them is a fresh mmap (page faults, system
/// time). No-op on other platforms.
///
/// # Safety
///
/// Call it once, at the start of `main`, before any other thread exists: glibc documents
/// `mallopt` as unsafe to call while other threads may be allocating.
pub unsafe fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds, and the caller guarantees no other
    // thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 512 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
