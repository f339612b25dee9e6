//! Normalisation: layer norms as the checkpoints store them, and L2 rows.
use crate::layers::kernels::fused_cpu;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Module, Result, Shape, Tensor};
use candle_nn::{LayerNorm, VarBuilder};
use sift_simd::elementwise::add_layer_norm_rows;

/// Loads a layer norm (`weight`, `bias`).
pub fn load_layer_norm(vb: &VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        vb.get(size, "weight")?,
        vb.get(size, "bias")?,
        eps,
    ))
}

/// Loads a layer norm (`weight`, `bias`) as a [`Norm`].
pub fn load_norm(vb: &VarBuilder, size: usize, eps: f64) -> Result<Norm> {
    Norm::new(load_layer_norm(vb, size, eps)?)
}

/// A layer norm with a bias, as a model runs it: on the CPU in f32 one vectorised pass per
/// row ([`NormRows`]; candle's sums each row one value at a time), elsewhere candle's.
pub struct Norm {
    ln: LayerNorm,
    rows: NormRows,
}

/// A layer norm's weight, bias and epsilon as f32 values, for the CPU kernels that
/// normalise rows in place (after a packed linear layer's product, on rows still in the
/// cache: [`PackedLinear::forward_norm`](crate::layers::linear::PackedLinear::forward_norm)).
#[derive(Debug, Clone)]
pub struct NormRows {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl NormRows {
    /// Features a row holds.
    pub fn width(&self) -> usize {
        self.weight.len()
    }

    /// Normalises every row of `rows` (whole rows of [`NormRows::width`] values) in place.
    pub fn apply(&self, rows: &mut [f32]) {
        add_layer_norm_rows(rows, &[], &[], &self.weight, &self.bias, self.eps)
    }

    /// Normalises `rows + add + residual` in place, in one pass over each row: `add` is
    /// added to every row (a bias, or empty), `residual` value by value (as long as
    /// `rows`).
    pub fn apply_sum(&self, rows: &mut [f32], add: &[f32], residual: &[f32]) {
        add_layer_norm_rows(rows, add, residual, &self.weight, &self.bias, self.eps)
    }
}

impl Norm {
    /// `ln`, which must have a bias and subtract the mean (not an RMS norm).
    pub fn new(ln: LayerNorm) -> Result<Norm> {
        let Some(bias) = ln.bias() else {
            candle_core::bail!("layer norm without a bias")
        };
        if !ln.remove_mean() {
            candle_core::bail!("an RMS norm where a layer norm was expected")
        }
        let vec = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
        let rows = NormRows {
            weight: vec(ln.weight())?,
            bias: vec(bias)?,
            eps: ln.eps() as f32,
        };
        if rows.weight.len() != rows.bias.len() {
            candle_core::bail!(
                "layer norm: weight of {} values, bias of {}",
                rows.weight.len(),
                rows.bias.len()
            )
        }
        Ok(Norm { ln, rows })
    }

    /// The weight, bias and epsilon as f32 values.
    pub fn rows(&self) -> &NormRows {
        &self.rows
    }

    /// The layer norm over the last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if fused_cpu(x.device())
            && x.dtype() == DType::F32
            && x.dim(x.rank() - 1)? == self.rows.width()
        {
            return x.contiguous()?.apply_op1_no_bwd(&NormOp(&self.rows));
        }
        self.ln.forward(x)
    }
}

/// The CPU op of [`Norm::forward`].
struct NormOp<'a>(&'a NormRows);

impl CustomOp1 for NormOp<'_> {
    fn name(&self) -> &'static str {
        "layer-norm-rows"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let (CpuStorage::F32(x), Some((a, b))) = (s, l.contiguous_offsets()) else {
            candle_core::bail!("layer norm: contiguous f32 input only")
        };
        let n = self.0.width();
        let mut out = x[a..b].to_vec();
        // blocks of whole rows, about 64 KiB each
        let rows = (16384 / n.max(1)).max(1);
        out.par_chunks_mut(rows * n.max(1))
            .for_each(|d| self.0.apply(d));
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// Rows scaled to unit L2 norm (norm clamped at 1e-12), as f32.
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    x.broadcast_div(&norm)
}
