//! Linear layers: the fused CPU layer (bias and residual pre-filled, gemm accumulates,
//! activation in place), its bfloat16-weight twin [`PackedLinear`], [`Proj`] holding either,
//! [`Packing`] (which of the two a model loads), and the loaders.
//!
//! The files: `proj` (what the models hold: [`Proj`], [`Packing`], [`linear_act`]), `dense`
//! (candle's layer and its fused CPU op, the loaders) and `packed` ([`PackedLinear`] and its
//! op).
mod dense;
mod packed;
mod proj;

pub use dense::{dense_act, fuse_qkv, load_linear, scale_query_rows};
pub use packed::PackedLinear;
pub use proj::{LinearLayer, Packing, Proj, activation_dtype, linear, linear_act};
