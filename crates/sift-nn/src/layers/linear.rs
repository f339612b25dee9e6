//! Linear layers: the fused CPU layer (bias and residual pre-filled, gemm accumulates,
//! activation in place), its bfloat16-weight twin [`PackedLinear`], [`Proj`] holding either,
//! [`Packing`] (which of the two a model loads), and the loaders.
use crate::layers::act::{Act, apply_act};
use crate::layers::kernels::*;
use crate::layers::norm::{Norm, NormRows};
use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Device, Layout, Module, Result, Shape,
    Storage, Tensor,
};
use candle_nn::{Linear, VarBuilder};
use sift_simd::bf16::Epilogue;
use sift_simd::elementwise::{
    act_slice, add_to_rows, add_values, bias_act_fuses, bias_act_round, bias_act_round_rows,
    scale_rows,
};

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

/// candle's linear layer as [`linear_act`] runs it.
///
/// On the CPU with f32 this is one custom op over the gemm kernel candle itself uses: the
/// output starts as the bias (plus the residual) and the matrix product accumulates into
/// it, then the activation runs in place, in parallel. That saves the zero fill, the copies
/// and the separate passes of `matmul` + `broadcast_add` + `add` + activation.
pub fn dense_act(
    l: &Linear,
    x: &Tensor,
    residual: Option<&Tensor>,
    act: Option<Act>,
) -> Result<Tensor> {
    let cpu_f32 = fused_cpu(x.device()) && x.dtype() == DType::F32 && x.rank() == 2;
    if cpu_f32 {
        let op = LinearOp {
            bias: l.bias().map(|b| b.to_vec1::<f32>()).transpose()?,
            act,
        };
        let x = x.contiguous()?;
        let w = l.weight().contiguous()?;
        return match residual {
            Some(r) => x.apply_op3_no_bwd(&w, &r.contiguous()?, &op),
            None => x.apply_op2_no_bwd(&w, &op),
        };
    }
    let mut y = l.forward(x)?;
    if let Some(a) = act {
        y = apply_act(a, &y)?;
    }
    match residual {
        Some(r) => y + r,
        None => Ok(y),
    }
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

/// The fused CPU linear layer of [`dense_act`].
struct LinearOp {
    bias: Option<Vec<f32>>,
    act: Option<Act>,
}

impl LinearOp {
    fn compute(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
        residual: Option<(&CpuStorage, &Layout)>,
    ) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (x, w) else {
            candle_core::bail!("linear: f32 only")
        };
        let (Some((x0, x1)), Some((w0, w1))) = (xl.contiguous_offsets(), wl.contiguous_offsets())
        else {
            candle_core::bail!("linear: contiguous inputs only")
        };
        let (m, k) = xl.shape().dims2()?;
        let (n, k2) = wl.shape().dims2()?;
        if k != k2 {
            candle_core::bail!("linear: input of {k} features, weight of {k2}")
        }
        let (x, w) = (&x[x0..x1], &w[w0..w1]);
        let mut dst = vec![0f32; m * n];
        let rows = (16384 / n.max(1)).max(1);
        match residual {
            Some((r, rl)) => {
                let CpuStorage::F32(r) = r else {
                    candle_core::bail!("linear: f32 residual only")
                };
                let Some((r0, r1)) = rl.contiguous_offsets() else {
                    candle_core::bail!("linear: contiguous residual only")
                };
                let r = &r[r0..r1];
                if r.len() != m * n {
                    candle_core::bail!("linear: residual of {} values for {m}x{n}", r.len())
                }
                dst.par_chunks_mut(rows * n)
                    .zip(r.par_chunks(rows * n))
                    .for_each(|(d, r)| {
                        d.copy_from_slice(r);
                        if let Some(b) = &self.bias {
                            for row in d.chunks_mut(n) {
                                row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                            }
                        }
                    });
            }
            None => {
                if let Some(b) = &self.bias {
                    dst.par_chunks_mut(rows * n).for_each(|d| {
                        for row in d.chunks_mut(n) {
                            row.copy_from_slice(b);
                        }
                    });
                }
            }
        }
        let read_dst = residual.is_some() || self.bias.is_some();
        let threads = candle_core::utils::get_num_threads();
        let parallelism = if threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        // SAFETY: dst is m x n row-major, x is m x k row-major, w is n x k row-major (read as
        // the k x n matrix W^T through its strides); every pointer covers its full extent.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                read_dst,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
        if let Some(act) = self.act {
            dst.par_chunks_mut(8192).for_each(|d| act_slice(act, d));
        }
        Ok((CpuStorage::F32(dst), Shape::from((m, n))))
    }
}

impl CustomOp2 for LinearOp {
    fn name(&self) -> &'static str {
        "linear-fused"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.compute(s1, l1, s2, l2, None)
    }
}

impl CustomOp3 for LinearOp {
    fn name(&self) -> &'static str {
        "linear-fused-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.compute(s1, l1, s2, l2, Some((s3, l3)))
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
            Proj::Packed(p) => p.w.rows(),
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

/// A linear layer whose weight is bfloat16 packed for [`sift_simd::bf16`]'s CPU kernels
/// (Intel AMX tiles, else AVX512-BF16 dot products where the processor has them, else the
/// weights widened to f32): the weights take half the memory of f32 and are read once per product, while the
/// activations, bias, scale, activation function and residual stay f32.
pub struct PackedLinear {
    w: sift_simd::bf16::PackedBf16,
    bias: Option<Vec<f32>>,
    /// Per-output factors: `(x W^T + b) * scale` (an attention scale applied to the query
    /// outputs without rounding it into the bfloat16 weights).
    scale: Option<Vec<f32>>,
}

impl PackedLinear {
    /// Packs `weight` `(out, in)` (rounded to bfloat16 unless it is already), with an
    /// optional bias and per-output scale.
    pub fn new(weight: &Tensor, bias: Option<&Tensor>, scale: Option<Vec<f32>>) -> Result<Self> {
        use half::slice::HalfFloatSliceExt;
        let (n, k) = weight.dims2()?;
        let values = weight
            .to_dtype(DType::BF16)?
            .flatten_all()?
            .to_vec1::<half::bf16>()?;
        let w = sift_simd::bf16::PackedBf16::pack(values.reinterpret_cast(), n, k);
        drop(values);
        let bias = bias
            .map(|b| b.to_dtype(DType::F32)?.to_vec1::<f32>())
            .transpose()?;
        for (what, v) in [("bias", &bias), ("scale", &scale)] {
            if let Some(v) = v
                && v.len() != n
            {
                candle_core::bail!(
                    "packed linear: {what} of {} values for {n} outputs",
                    v.len()
                )
            }
        }
        Ok(PackedLinear { w, bias, scale })
    }

    /// `act((x W^T + b) * scale) (+ residual)` for a 2-D `x` on the CPU, f32 or bfloat16
    /// (already rounded: read as it is), in f32 (the product, then bias, scale, activation
    /// and residual on each block of rows while it is cached).
    pub fn forward(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        act: Option<Act>,
    ) -> Result<Tensor> {
        Self::check_input(x)?;
        if residual.is_some() && self.scale.is_some() {
            candle_core::bail!("packed linear: a residual with a scale")
        }
        let op = PackedOp {
            l: self,
            act,
            rounded: false,
        };
        let x = x.contiguous()?;
        match residual {
            Some(r) => x.apply_op2_no_bwd(&r.to_dtype(DType::F32)?.contiguous()?, &op),
            None => x.apply_op1_no_bwd(&op),
        }
    }

    /// [`PackedLinear::forward`] without a residual, the output rounded to bfloat16 (a
    /// BF16 tensor) block by block while it is cached: the f32 product never goes through
    /// memory where the AMX tasks hold whole rows ([`sift_simd::bf16::PackedBf16::matmul_blocks`]).
    pub fn forward_bf16(&self, x: &Tensor, act: Option<Act>) -> Result<Tensor> {
        Self::check_input(x)?;
        let op = PackedOp {
            l: self,
            act,
            rounded: true,
        };
        let x = x.contiguous()?;
        let (out, m) = {
            let (xs, xl) = x.storage_and_layout();
            let Storage::Cpu(xs) = &*xs else {
                candle_core::bail!("packed linear: CPU tensors only")
            };
            op.compute_rounded(xs, xl)?
        };
        out.tensor((m, self.w.rows()), x.device())
    }

    /// `norm(x W^T + b + residual)` for a 2-D `x` (a post-norm block's output: BERT's),
    /// the bias, residual and norm applied to each block of rows while it is cached; with
    /// `rounded`, the rows rounded to bfloat16 too (for the layers after, which would round
    /// them), from the same cached block. Returns the f32 rows and the rounded ones.
    pub fn forward_norm(
        &self,
        x: &Tensor,
        residual: &Tensor,
        norm: &NormRows,
        rounded: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        Self::check_input(x)?;
        if self.scale.is_some() {
            candle_core::bail!("packed linear: a residual with a scale")
        }
        let op = PackedOp {
            l: self,
            act: None,
            rounded,
        };
        self.norm_tensors(x, residual, |xs, xl, r| op.compute_norm(xs, xl, r, norm))
    }

    /// Runs `f` on `x`'s storage and the f32 residual's and makes tensors of the rows it
    /// returns (f32, and bfloat16 where it rounded them; `m` rows of this layer's outputs):
    /// the plumbing of [`PackedLinear::forward_norm`] and [`PackedLinear::forward_mlp_norm`].
    fn norm_tensors(
        &self,
        x: &Tensor,
        residual: &Tensor,
        f: impl FnOnce(
            &CpuStorage,
            &Layout,
            (&CpuStorage, &Layout),
        ) -> Result<(Vec<f32>, Option<AlignedBf16>, usize)>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let x = x.contiguous()?;
        let r = residual.to_dtype(DType::F32)?.contiguous()?;
        let (full, half, m) = {
            let ((xs, xl), (rs, rl)) = (x.storage_and_layout(), r.storage_and_layout());
            let (Storage::Cpu(xs), Storage::Cpu(rs)) = (&*xs, &*rs) else {
                candle_core::bail!("packed linear: CPU tensors only")
            };
            f(xs, xl, (rs, rl))?
        };
        let n = self.w.rows();
        let full = Tensor::from_vec(full, (m, n), x.device())?;
        let half = half.map(|h| h.tensor((m, n), x.device())).transpose()?;
        Ok((full, half))
    }

    /// [`PackedLinear::forward_norm`] of `act(x U^T + c)` for `up`'s layer (`U`, `c`) in
    /// bfloat16 ([`PackedLinear::forward_bf16`]): a feed-forward block whose two products
    /// run as one, each task's middle rows kept in its scratch between them. `None` where
    /// `up`'s bias and `act` do not fuse into one pass (the caller runs the two layers).
    pub fn forward_mlp_norm(
        &self,
        up: &PackedLinear,
        act: Option<Act>,
        x: &Tensor,
        residual: &Tensor,
        norm: &NormRows,
        rounded: bool,
    ) -> Result<Option<(Tensor, Option<Tensor>)>> {
        Self::check_input(x)?;
        let up_bias = up.bias.as_deref().unwrap_or(&[]);
        if self.scale.is_some() || up.scale.is_some() || !bias_act_fuses(up_bias, act) {
            return Ok(None);
        }
        let op = PackedOp {
            l: self,
            act: None,
            rounded,
        };
        self.norm_tensors(x, residual, |xs, xl, r| {
            op.compute_mlp_norm(up, act, xs, xl, r, norm)
        })
        .map(Some)
    }

    fn check_input(x: &Tensor) -> Result<()> {
        if !x.device().is_cpu() || !matches!(x.dtype(), DType::F32 | DType::BF16) || x.rank() != 2 {
            candle_core::bail!(
                "packed linear: a 2-D f32 or bf16 input on the CPU, not {:?} {:?} on {:?}",
                x.dtype(),
                x.shape(),
                x.device().location()
            )
        }
        Ok(())
    }
}

/// A bfloat16 output whose rows the tasks of a product write, each its own.
type RoundedOut = sift_simd::mem::Disjoint<u16>;

/// A bfloat16 output whose first value sits on a 64-byte boundary, so that the AMX
/// products after read its rows in place (from a row that straddles two cache lines a tile
/// loads both; elsewhere they copy rows into aligned scratch first): a buffer a few values
/// longer, the tensor a view from the boundary.
struct AlignedBf16 {
    buf: Vec<half::bf16>,
    off: usize,
    len: usize,
}

impl AlignedBf16 {
    /// Room for `len` values, not yet written.
    fn new(len: usize) -> AlignedBf16 {
        let mut buf: Vec<half::bf16> = Vec::with_capacity(len + 32);
        let off = sift_simd::mem::align_offset(buf.spare_capacity_mut()).min(32);
        buf.resize(off, half::bf16::ZERO);
        AlignedBf16 { buf, off, len }
    }

    /// Where the values go.
    fn out(&mut self) -> RoundedOut {
        RoundedOut::new(self.buf.spare_capacity_mut().as_mut_ptr().cast::<u16>())
    }

    /// Marks the `len` values written.
    ///
    /// # Safety
    /// Every one of them must have been written through [`AlignedBf16::out`].
    unsafe fn assume_written(&mut self) {
        // SAFETY: the caller's contract; the capacity holds off + len values.
        unsafe { self.buf.set_len(self.off + self.len) }
    }

    /// The values as a `shape` tensor (a view of the buffer from the boundary).
    fn tensor(self, shape: (usize, usize), device: &Device) -> Result<Tensor> {
        let total = self.buf.len();
        Tensor::from_vec(self.buf, total, device)?
            .narrow(0, self.off, self.len)?
            .reshape(shape)
    }
}

/// The CPU op of [`PackedLinear::forward`] and, `rounded`, [`PackedLinear::forward_bf16`].
struct PackedOp<'a> {
    l: &'a PackedLinear,
    act: Option<Act>,
    rounded: bool,
}

/// A packed product's checked inputs: the activations, their rows, and the residual.
struct Inputs<'s> {
    rows: sift_simd::bf16::Rows<'s>,
    m: usize,
    residual: Option<&'s [f32]>,
}

/// A residual's `m × n` f32 values, checked.
fn residual_rows<'s>(residual: (&'s CpuStorage, &Layout), m: usize, n: usize) -> Result<&'s [f32]> {
    match residual {
        (CpuStorage::F32(r), rl) => {
            let Some((r0, r1)) = rl.contiguous_offsets() else {
                candle_core::bail!("packed linear: contiguous residual only")
            };
            if r1 - r0 != m * n {
                candle_core::bail!("packed linear: residual of {} values for {m}x{n}", r1 - r0)
            }
            Ok(&r[r0..r1])
        }
        _ => candle_core::bail!("packed linear: f32 residual only"),
    }
}

impl PackedOp<'_> {
    fn inputs<'s>(
        &self,
        x: &'s CpuStorage,
        xl: &Layout,
        residual: Option<(&'s CpuStorage, &Layout)>,
    ) -> Result<Inputs<'s>> {
        use half::slice::HalfFloatSliceExt;
        use sift_simd::bf16::Rows;
        let Some((x0, x1)) = xl.contiguous_offsets() else {
            candle_core::bail!("packed linear: contiguous input only")
        };
        let rows = match x {
            CpuStorage::F32(x) => Rows::F32(&x[x0..x1]),
            CpuStorage::BF16(x) => Rows::Bf16(x[x0..x1].reinterpret_cast()),
            _ => candle_core::bail!("packed linear: f32 or bf16 input only"),
        };
        let (m, k) = xl.shape().dims2()?;
        let (n, l) = (self.l.w.rows(), self.l);
        if k != l.w.cols() {
            candle_core::bail!(
                "packed linear: input of {k} features, weight of {}",
                l.w.cols()
            )
        }
        let residual = residual.map(|r| residual_rows(r, m, n)).transpose()?;
        Ok(Inputs { rows, m, residual })
    }

    /// Bias, scale, activation and residual on the rows from `first` of the output (`d`:
    /// whole rows), fused into the product on rows still in the cache.
    fn epilogue(&self, residual: Option<&[f32]>, first: usize, d: &mut [f32]) {
        let (n, l) = (self.l.w.rows(), self.l);
        if let Some(b) = &l.bias {
            add_to_rows(d, b);
        }
        if let Some(s) = &l.scale {
            scale_rows(d, s);
        }
        if let Some(act) = self.act {
            act_slice(act, d);
        }
        if let Some(r) = residual {
            add_values(d, &r[first * n..first * n + d.len()]);
        }
    }

    fn compute(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        residual: Option<(&CpuStorage, &Layout)>,
    ) -> Result<(CpuStorage, Shape)> {
        let Inputs { rows, m, residual } = self.inputs(x, xl, residual)?;
        let (n, l) = (self.l.w.rows(), self.l);
        let then = |first: usize, d: &mut [f32]| self.epilogue(residual, first, d);
        let fused =
            l.bias.is_some() || l.scale.is_some() || self.act.is_some() || residual.is_some();
        let then: Option<Epilogue> = fused.then_some(&then);
        // written whole by the product: no zero-fill first
        let mut dst = Vec::with_capacity(m * n);
        l.w.matmul_rows_into(rows, m, &mut dst.spare_capacity_mut()[..m * n], then);
        // SAFETY: `matmul_rows_into` initialised the first m * n elements.
        unsafe { dst.set_len(m * n) };
        Ok((CpuStorage::F32(dst), Shape::from((m, n))))
    }

    /// `act(x W^T + b)` rounded to bfloat16 ([`PackedLinear::forward_bf16`]), each block of
    /// rows as the product hands it over, while it is cached: bias, activation and rounding
    /// in one pass where they fuse.
    fn compute_rounded(&self, x: &CpuStorage, xl: &Layout) -> Result<(AlignedBf16, usize)> {
        let Inputs { rows, m, .. } = self.inputs(x, xl, None)?;
        let (n, l) = (self.l.w.rows(), self.l);
        let mut dst = AlignedBf16::new(m * n);
        let out = dst.out();
        let bias = l.bias.as_deref().unwrap_or(&[]);
        let sink = |first: usize, d: &mut [f32]| {
            // SAFETY: rows first.. of the m x n output, handed to this call alone.
            let o = unsafe { out.slice(first * n, d.len()) };
            if l.scale.is_some() || !bias_act_round(d, bias, self.act, o) {
                self.epilogue(None, first, d);
                sift_simd::bf16::round_into(d, o);
            }
        };
        l.w.matmul_blocks(rows, m, &sink);
        // SAFETY: `matmul_blocks` handed every row to the sink once, which wrote it.
        unsafe { dst.assume_written() };
        Ok((dst, m))
    }

    /// `norm(x W^T + b + residual)`, and where `rounded` the same rows rounded to
    /// bfloat16 too, each block of rows normalised and rounded while it is cached
    /// ([`PackedLinear::forward_norm`]).
    fn compute_norm(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        residual: (&CpuStorage, &Layout),
        norm: &NormRows,
    ) -> Result<(Vec<f32>, Option<AlignedBf16>, usize)> {
        let Inputs { rows, m, residual } = self.inputs(x, xl, Some(residual))?;
        let Some(residual) = residual else {
            candle_core::bail!("packed linear: a norm needs the residual")
        };
        // SAFETY: `matmul_rows_into` initialises the m * n outputs and runs the epilogue on
        // every row once.
        unsafe {
            self.norm_outputs(m, residual, norm, |full, then| {
                self.l.w.matmul_rows_into(rows, m, full, Some(then));
            })
        }
    }

    /// This layer's `m` rows of outputs with a norm after them: `product(full, then)` runs
    /// the product into `full` and hands every block of its rows to `then` (while they are
    /// cached: bias, residual and norm in one pass, then the rounded copy). Returns the rows
    /// in f32 and, `rounded`, in bfloat16.
    ///
    /// # Safety
    /// `product` must initialise all of `full` and call `then` once on every row.
    unsafe fn norm_outputs(
        &self,
        m: usize,
        residual: &[f32],
        norm: &NormRows,
        product: impl FnOnce(&mut [std::mem::MaybeUninit<f32>], Epilogue),
    ) -> Result<(Vec<f32>, Option<AlignedBf16>, usize)> {
        let (n, l) = (self.l.w.rows(), self.l);
        if norm.width() != n {
            candle_core::bail!(
                "packed linear: a norm of {} features after {n} outputs",
                norm.width()
            )
        }
        let mut full: Vec<f32> = Vec::with_capacity(m * n);
        let mut half = AlignedBf16::new(if self.rounded { m * n } else { 0 });
        let out16 = half.out();
        let add = l.bias.as_deref().unwrap_or(&[]);
        let then = |first: usize, d: &mut [f32]| {
            norm.apply_sum(d, add, &residual[first * n..first * n + d.len()]);
            if self.rounded {
                // SAFETY: rows first.. of the m x n output, handed to this call alone.
                sift_simd::bf16::round_into(d, unsafe { out16.slice(first * n, d.len()) });
            }
        };
        product(&mut full.spare_capacity_mut()[..m * n], &then);
        // SAFETY: `product` initialised the m * n values and ran `then` on every row once,
        // which wrote the rounded copy (the caller's contract).
        unsafe {
            full.set_len(m * n);
            if self.rounded {
                half.assume_written();
            }
        }
        Ok((full, self.rounded.then_some(half), m))
    }
}

impl PackedOp<'_> {
    /// [`PackedLinear::forward_mlp_norm`]: `norm(mid · W^T + b + residual)` for this op's
    /// layer `W`, where `mid = act(x U^T + c)` rounded to bfloat16 (`up`'s layer `U`, `c`)
    /// never leaves the product's tasks ([`sift_simd::bf16::PackedBf16::matmul_pair`]).
    /// The caller checked that `up`'s bias and `act` fuse ([`bias_act_fuses`]).
    #[allow(clippy::too_many_arguments)]
    fn compute_mlp_norm(
        &self,
        up: &PackedLinear,
        act: Option<Act>,
        x: &CpuStorage,
        xl: &Layout,
        residual: (&CpuStorage, &Layout),
        norm: &NormRows,
    ) -> Result<(Vec<f32>, Option<AlignedBf16>, usize)> {
        let up_op = PackedOp {
            l: up,
            act,
            rounded: true,
        };
        let Inputs { rows, m, .. } = up_op.inputs(x, xl, None)?;
        let (n, l) = (self.l.w.rows(), self.l);
        if l.w.cols() != up.w.rows() {
            candle_core::bail!(
                "packed linear: {} outputs feed a layer of {} inputs",
                up.w.rows(),
                l.w.cols()
            )
        }
        let residual = residual_rows(residual, m, n)?;
        let up_bias = up.bias.as_deref().unwrap_or(&[]);
        let mid = |t: sift_simd::bf16::Tile, rows: &mut [u16], ld: usize| {
            let fused = bias_act_round_rows(
                t.values,
                t.ld,
                &up_bias[t.col..t.col + t.cols],
                act,
                rows,
                ld,
            );
            debug_assert!(fused, "the caller checked that they fuse");
        };
        // the second product's rows: `then` on each block, which is then written out
        let product = |full: &mut [std::mem::MaybeUninit<f32>], then: Epilogue| {
            let out = sift_simd::mem::Disjoint::new(full.as_mut_ptr().cast::<f32>());
            let sink = |first: usize, d: &mut [f32]| {
                then(first, d);
                // SAFETY: rows first.. of the m x n outputs, handed to this call alone.
                unsafe { out.slice(first * n, d.len()) }.copy_from_slice(d);
            };
            up.w.matmul_pair(&l.w, rows, m, &mid, &sink);
        };
        // SAFETY: `matmul_pair` hands every row of the second product to the sink once,
        // which runs `then` on it and writes it into `full`.
        unsafe { self.norm_outputs(m, residual, norm, product) }
    }
}

impl CustomOp1 for PackedOp<'_> {
    fn name(&self) -> &'static str {
        "packed-bf16-linear"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.compute(s, l, None)
    }
}

impl CustomOp2 for PackedOp<'_> {
    fn name(&self) -> &'static str {
        "packed-bf16-linear-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.compute(s1, l1, Some((s2, l2)))
    }
}

/// A fused `[q; k; v]` projection (`3 * h` output rows) with `scale` folded into the query
/// rows and bias: attention scores are bilinear in q and k (and a rotary rotation is linear),
/// so this scales the scores without a pass over them.
pub fn scale_query_rows(qkv: &Linear, h: usize, scale: f64) -> Result<Linear> {
    let fold = |t: &Tensor| -> Result<Tensor> {
        Tensor::cat(
            &[&(t.narrow(0, 0, h)? * scale)?, &t.narrow(0, h, 2 * h)?],
            0,
        )
    };
    let bias = qkv.bias().map(fold).transpose()?;
    Ok(Linear::new(fold(qkv.weight())?, bias))
}

/// Loads `weight` `(out, inp)` and, when `bias`, `bias` `(out)`.
pub fn load_linear(vb: &VarBuilder, inp: usize, out: usize, bias: bool) -> Result<Linear> {
    let b = if bias {
        Some(vb.get(out, "bias")?)
    } else {
        None
    };
    Ok(Linear::new(vb.get((out, inp), "weight")?, b))
}

/// Fuses separate Q, K, V projections into one `(3 * hidden, hidden)` linear layer, with the
/// attention scale `1/sqrt(head_dim)` folded into the query part.
pub fn fuse_qkv(q: &Linear, k: &Linear, v: &Linear, head_dim: usize) -> Result<Linear> {
    let scale = 1.0 / (head_dim as f64).sqrt();
    let w = Tensor::cat(&[&(q.weight() * scale)?, k.weight(), v.weight()], 0)?;
    let b = match (q.bias(), k.bias(), v.bias()) {
        (Some(qb), Some(kb), Some(vb)) => Some(Tensor::cat(&[&(qb * scale)?, kb, vb], 0)?),
        (None, None, None) => None,
        _ => candle_core::bail!("some but not all of the Q/K/V projections have a bias"),
    };
    Ok(Linear::new(w, b))
}
