//! Normalisation: layer norms as the checkpoints store them, and L2 rows.
use candle_core::{DType, Result, Tensor};
use candle_nn::{LayerNorm, VarBuilder};

/// Loads a layer norm (`weight`, `bias`).
pub fn load_layer_norm(vb: &VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        vb.get(size, "weight")?,
        vb.get(size, "bias")?,
        eps,
    ))
}

/// Rows scaled to unit L2 norm (norm clamped at 1e-12), as f32.
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    x.broadcast_div(&norm)
}
