//! [`Proj`], a linear layer as a model runs it (candle's, or packed bfloat16 weights),
//! [`Packing`] (which of the two a model loads), and [`linear_act`] over either.
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{Linear, VarBuilder};

use super::dense::{dense_act, load_linear};
use super::packed::PackedLinear;
use crate::layers::act::Act;
use crate::layers::kernels::fused_cpu;
use crate::layers::norm::Norm;

/// A linear layer the models run through [`linear_act`]: candle's [`Linear`] or a [`Proj`].
pub trait LinearLayer {
    /// `act(x W^T + b) (+ residual)` for a 2-D `x`.
    fn run(&self, x: &Tensor, residual: Option<&Tensor>, act: Option<Act>) -> Result<Tensor>;
}

impl LinearLayer for Linear {
    fn run(&self, x: &Tensor, residual: Option<&Tensor>, act: Option<Act>) -> Result<Tensor> {
        dense_act(self, x, residual, act)
    }
}

impl LinearLayer for Proj {
    fn run(&self, x: &Tensor, residual: Option<&Tensor>, act: Option<Act>) -> Result<Tensor> {
        self.forward(x, residual, act)
    }
}

/// `act(x W^T + b) (+ residual)` for a 2-D `x` (the activation, when given, applies before
/// the residual; layers use one or the other): [`dense_act`] for candle's layer,
/// [`PackedLinear::forward`] for packed bfloat16 weights.
pub fn linear_act(
    l: &impl LinearLayer,
    x: &Tensor,
    residual: Option<&Tensor>,
    act: Option<Act>,
) -> Result<Tensor> {
    l.run(x, residual, act)
}

/// `x W^T (+ b) (+ residual)` for a 2-D `x` (see [`linear_act`]).
pub fn linear(l: &impl LinearLayer, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
    l.run(x, residual, None)
}

/// How a model holds its linear layers, chosen from the dtype and device it is loaded for:
/// bfloat16 on the CPU (with the fused kernels) packs every linear layer's weights for
/// [`sift_simd::bf16`]'s kernels and loads everything else (embeddings, norms, positions)
/// in f32, so that activations, attention, norms and residuals run in f32 and only the
/// matrix products read bfloat16 weights; any other dtype or device loads candle's layers
/// in that dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    packed: bool,
}

impl Packing {
    /// The packing of a model loaded in `dtype` on `device`.
    pub fn new(dtype: DType, device: &Device) -> Packing {
        Packing {
            packed: cpu_packs(dtype, device),
        }
    }

    /// The packing for `vb`'s dtype and device, and the builder the rest of the model loads
    /// from (f32 when packed).
    pub fn split(vb: VarBuilder) -> (VarBuilder, Packing) {
        let pk = Packing::new(vb.dtype(), vb.device());
        let vb = if pk.packed {
            vb.set_dtype(DType::F32)
        } else {
            vb
        };
        (vb, pk)
    }

    /// Whether linear layers are packed bfloat16 weights.
    pub fn is_packed(self) -> bool {
        self.packed
    }

    /// `l` as the model runs it.
    pub fn proj(self, l: Linear) -> Result<Proj> {
        if self.packed {
            Ok(Proj::Packed(Box::new(PackedLinear::new(
                l.weight(),
                l.bias(),
                None,
            )?)))
        } else {
            Ok(Proj::Dense(l))
        }
    }

    /// Loads `weight` `(out, inp)` (and `bias`) as the model runs it.
    pub fn load(self, vb: &VarBuilder, inp: usize, out: usize, bias: bool) -> Result<Proj> {
        self.proj(load_linear(vb, inp, out, bias)?)
    }
}

/// Whether a model loaded in `dtype` on `device` packs its linear layers ([`Packing`]).
fn cpu_packs(dtype: DType, device: &Device) -> bool {
    dtype == DType::BF16 && fused_cpu(device)
}

/// The dtype of the activations of a model loaded in `dtype` on `device`: f32 where it
/// packs its linear layers (`Packing`: bfloat16 on the CPU), else `dtype`.
pub fn activation_dtype(dtype: DType, device: &Device) -> DType {
    if cpu_packs(dtype, device) {
        DType::F32
    } else {
        dtype
    }
}

/// A linear layer as a model runs it: candle's (any device and dtype; on the CPU with f32
/// the fused op of [`dense_act`]), or bfloat16 weights packed for the CPU's bfloat16
/// kernels ([`PackedLinear`]).
pub enum Proj {
    /// candle's layer.
    Dense(Linear),
    /// Packed bfloat16 weights; f32 in and out.
    Packed(Box<PackedLinear>),
}

impl Proj {
    /// Output features.
    pub fn out_features(&self) -> usize {
        match self {
            Proj::Dense(l) => l.weight().dims().first().copied().unwrap_or(0),
            Proj::Packed(p) => p.out_features(),
        }
    }

    /// Whether the weights are packed bfloat16 (the model's activations are f32 and its
    /// attention may run in bfloat16 too: [`Attention::bf16`](crate::layers::ops::Attention::bf16)).
    pub fn is_packed(&self) -> bool {
        matches!(self, Proj::Packed(_))
    }

    /// `act(x W^T + b) (+ residual)` for a 2-D `x` (see [`linear_act`]).
    pub fn forward(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        act: Option<Act>,
    ) -> Result<Tensor> {
        match self {
            Proj::Dense(l) => dense_act(l, x, residual, act),
            Proj::Packed(p) => p.forward(x, residual, act),
        }
    }

    /// Whether [`Proj::forward_rounded`] keeps its output in bfloat16: packed weights on a
    /// processor with AMX tiles, where the layers after it (and the attention's products
    /// on the tiles) round their inputs to bfloat16 anyway.
    pub fn rounds_output(&self) -> bool {
        self.is_packed() && sift_simd::bf16::Kernel::best() == sift_simd::bf16::Kernel::Amx
    }

    /// `act(x W^T + b)` for a 2-D `x`, for a consumer that rounds its input to bfloat16:
    /// bfloat16 where [`Proj::rounds_output`] (the bias and activation in f32 first, then
    /// one rounding, the value the consumer would have made: half the memory traffic of
    /// f32 and no rounding pass), else as [`Proj::forward`]. The consumers read either
    /// dtype: packed layers ([`PackedLinear::forward`]) and attention with
    /// [`Attention::bf16`](crate::layers::ops::Attention::bf16).
    pub fn forward_rounded(&self, x: &Tensor, act: Option<Act>) -> Result<Tensor> {
        match self {
            Proj::Packed(p) if self.rounds_output() => p.forward_bf16(x, act),
            _ => self.forward(x, None, act),
        }
    }
}

impl Proj {
    /// `norm(x W^T + b + residual)` for a 2-D `x`, and, where [`Proj::rounds_output`], the
    /// same rows in bfloat16 for the layers after (which read either dtype): packed
    /// weights normalise each block of rows while it is cached
    /// ([`PackedLinear::forward_norm`]); candle's layer runs the product, then the norm.
    pub fn forward_norm(
        &self,
        x: &Tensor,
        residual: &Tensor,
        norm: &Norm,
    ) -> Result<(Tensor, Option<Tensor>)> {
        match self {
            Proj::Packed(p) => p.forward_norm(x, residual, norm.rows(), self.rounds_output()),
            Proj::Dense(_) => Ok((norm.forward(&self.forward(x, Some(residual), None)?)?, None)),
        }
    }

    /// A post-norm feed-forward block, `norm(act(x U^T + c) W^T + b + residual)` for
    /// `up` (`U`, `c`) and this layer (`W`, `b`), with the rounded rows as
    /// [`Proj::forward_norm`]: where both are packed and [`Proj::rounds_output`], the two
    /// products run as one ([`PackedLinear::forward_mlp_norm`]), the same values as
    /// [`Proj::forward_rounded`] then [`Proj::forward_norm`], which run otherwise.
    pub fn forward_mlp_norm(
        &self,
        up: &Proj,
        act: Option<Act>,
        x: &Tensor,
        residual: &Tensor,
        norm: &Norm,
    ) -> Result<(Tensor, Option<Tensor>)> {
        if let (Proj::Packed(p), Proj::Packed(u)) = (self, up)
            && up.rounds_output()
            && self.rounds_output()
            && let Some(out) = p.forward_mlp_norm(u, act, x, residual, norm.rows(), true)?
        {
            return Ok(out);
        }
        let mid = up.forward_rounded(x, act)?;
        self.forward_norm(&mid, residual, norm)
    }
}
