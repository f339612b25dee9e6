//! [`PackedLinear`], a linear layer whose weight is bfloat16 packed for sift-simd's CPU
//! kernels, and its CPU op: bias, scale, activation, residual, a following norm and the
//! rounding to bfloat16 fused into the product on rows still in the cache.
use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Result, Shape, Storage, Tensor,
};
use sift_simd::bf16::Epilogue;
use sift_simd::elementwise::{
    act_slice, add_to_rows, add_values, bias_act_fuses, bias_act_round, bias_act_round_rows,
    scale_rows,
};

use crate::layers::act::Act;
use crate::layers::norm::NormRows;

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

    /// Output features.
    pub fn out_features(&self) -> usize {
        self.w.rows()
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
