//! Activations: [`Act`] (sift-simd's, whose element-wise kernels the CPU layers apply it in)
//! read from a Hugging Face config ([`parse_act`]) and applied with candle's ops on any device
//! and dtype ([`apply_act`]).
use candle_core::{Result, Tensor};
pub use sift_simd::elementwise::Act;

/// Parses a `hidden_act` value.
pub fn parse_act(name: &str) -> Option<Act> {
    Some(match name {
        "gelu" => Act::Gelu,
        "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" => Act::GeluTanh,
        "quick_gelu" => Act::QuickGelu,
        "relu" => Act::Relu,
        "silu" | "swish" => Act::Silu,
        _ => return None,
    })
}

/// Applies `act` with candle's ops (any device and dtype; on the CPU with f32 the layers
/// apply it inside [`linear_act`](super::linear::linear_act) instead).
pub fn apply_act(act: Act, xs: &Tensor) -> Result<Tensor> {
    match act {
        Act::Gelu => xs.gelu_erf(),
        Act::GeluTanh => xs.gelu(),
        Act::QuickGelu => xs * candle_nn::ops::sigmoid(&(xs * 1.702)?)?,
        Act::Relu => xs.relu(),
        Act::Silu => xs.silu(),
    }
}
