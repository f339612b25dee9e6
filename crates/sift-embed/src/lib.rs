//! Embedding models for Sift, in candle.
//!
//! [`Embedder`] is the one entry point: it loads any supported model from a directory in
//! Hugging Face layout or a hub id ([`ModelFiles::resolve`]; feature `hub`), tells its
//! [`Family`] from `config.json`, and embeds texts by [`Role`], images, and (GME) a text with
//! images in one input, whatever the family:
//!
//! ```
//! use sift_embed::{Embedder, EmbedderOptions, Role};
//!
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/fixtures/vision/tiny-clip-quickgelu");
//! let clip = Embedder::load(dir, &EmbedderOptions::default())?;
//! assert!(clip.capabilities().images);
//! let texts = clip.embed_texts(&["a map projection"], Role::Query)?;
//! let png = std::fs::read(concat!(
//!     env!("CARGO_MANIFEST_DIR"),
//!     "/../../models/fixtures/vision/images/shapes_rgb_50x37.png"
//! ))?;
//! let prepared: Vec<_> = clip.prepare_images(&[&png]).into_iter().collect::<Result<_, _>>()?;
//! let images = clip.embed_images(&prepared)?;
//! let cosine: f32 = texts[0].iter().zip(&images[0]).map(|(a, b)| a * b).sum();
//! assert!(cosine.abs() <= 1.0001);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The families ([`families`] over sift-nn's networks, [`Family`]): BERT-family sentence encoders ([`TextEmbedder`]:
//! pooling from sentence-transformers' `1_Pooling/config.json` or the [`registry`], prefixes,
//! truncation), CLIP and SigLIP ([`VisionEmbedder`]; BGE-VL is a CLIP checkpoint), GME
//! ([`GmeEmbedder`], over Qwen2-VL), decoder LLM embedders ([`DecoderEmbedder`]: Mistral,
//! Qwen2, Qwen3, Llama), Nomic Embed v1.5 text and vision ([`NomicEmbedder`]) and
//! Jina-CLIP v1 and v2 ([`JinaClipEmbedder`]). Images are
//! decoded and preprocessed exactly as transformers' processors do ([`image`](mod@image)); [`bench`](mod@bench)
//! measures throughput.
#![warn(missing_docs)]

pub mod bench;
mod device;
mod embedder;
mod error;
pub mod families;
mod files;
pub mod image;
pub mod profile;
pub mod registry;

pub use device::{DevicePref, select_device};
pub use embedder::{
    Capabilities, Embedder, EmbedderOptions, Family, Input, JointInput, Precision, PreparedImage,
    PreparedTexts,
};
pub use error::{Error, Result};
pub use families::cross_encoder::{
    CrossEncoder, CrossEncoderOptions, ScoreActivation, is_cross_encoder,
};
pub use families::decoder::{DECODER_MODEL_TYPES, DecoderEmbedder, DecoderOptions, DecoderPooling};
pub use families::gme::{
    GmeEmbedder, GmeImage, GmeInput, GmeOptions, GmePositions, GmeProcessor, is_gme_model,
};
pub use families::jina_clip::{JinaClipEmbedder, JinaClipOptions};
pub use families::nomic_pair::{NomicEmbedder, NomicOptions};
pub use families::text::{Role, TextEmbedder, TextEmbedderOptions};
pub use families::vision::{
    VisionArch, VisionEmbedder, VisionOptions, is_vision_model, siglip_canonicalize,
    siglip_canonicalize_with,
};
pub use files::{ModelFiles, read_json};
pub use image::PreprocessError;
pub use profile::{Profile, ReferenceModel};
pub use registry::{ModelInfo, Pooling};
pub use sift_nn::layers::kernels::Kernels;
pub use sift_nn::layers::linear::activation_dtype;
pub use sift_nn::models::nomic_vision::{NomicVision, NomicVisionConfig};

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
