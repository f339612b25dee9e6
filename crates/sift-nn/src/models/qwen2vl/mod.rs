//! Qwen2-VL and Qwen2.5-VL in candle (candle-transformers has neither): the vision tower
//! and the Qwen2 language model, as transformers' `modeling_qwen2_vl.py` and
//! `modeling_qwen2_5_vl.py` compute them.
//!
//! - Vision: the 3-D patch embedding (a `(temporal 2, 14, 14)` convolution over the
//!   processor's flattened patches) as one matrix product; 2-D rotary positions (row and
//!   column of each patch, laid out in 2x2 merge blocks); pre-norm blocks (layer norm,
//!   attention within each image, `quick_gelu` MLP); the patch merger (layer norm, 2x2
//!   neighbours concatenated, GELU MLP) giving one language-model token per 2x2 patches.
//! - Qwen2.5-VL's vision tower differs in its blocks (RMSNorm, a gated SiLU MLP with
//!   biases), its merger's norm (RMSNorm) and its attention: most blocks attend within
//!   windows of `window_size` pixels (the patches reordered window by window, transformers'
//!   `get_vision_window_index`, and put back in order after the merger), the blocks of
//!   `fullatt_block_indexes` over the whole image. Its language model is Qwen2-VL's.
//! - Language model: Qwen2 decoder layers (RMSNorm, grouped-query causal attention with
//!   biased Q/K/V, SwiGLU MLP), rotary positions with three axes (M-RoPE: temporal, height,
//!   width positions each rotate their own band of frequencies, `mrope_section`).
//!
//! Weight names follow the published checkpoints (`visual.*`, `model.*`: transformers
//! 4.45-4.51, which GME ships); the transformers 5 layout (`model.visual.*`,
//! `model.language_model.*`) loads too. Configurations are read from `config.json` in
//! either the flat (4.x) or nested (`text_config`, 5.x) form, with transformers' defaults
//! for absent keys.
//!
//! The files: `config` (the checkpoint's `config.json`, [`Qwen2VlConfig`]), `text_config`
//! (the language model's, [`DecoderConfig`] for every decoder family), `vision` (the towers,
//! [`VisionTower`]) and `text` (the language model, [`TextModel`]).
mod config;
mod text;
mod text_config;
mod vision;

pub use config::{Qwen2VlConfig, Qwen25Vision, VisionConfig};
pub use text::{KvCache, LmHead, Position, TextModel, mrope_positions, place_image_tokens};
pub use text_config::{DecoderConfig, Ids, Llama3Rope, RopeParameters, TextConfig};
pub use vision::VisionTower;
