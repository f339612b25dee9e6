//! Building blocks shared by the transformer encoders: activations, linear layers with fused
//! bias/residual additions, and attention over packed (unpadded) sequences.
//!
//! On the CPU with f32, the element-wise work runs in parallel custom ops (candle's own unary
//! ops are single-threaded); elsewhere candle's ops are used, with the same arithmetic: the
//! generic path, the one CUDA and Metal run. `SIFT_KERNELS=generic` forces it on the CPU too
//! ([`fused_cpu`]), so the test suites check its numerics on machines without a GPU.
use std::sync::OnceLock;

use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Device, Layout, Module, Result, Shape,
    Tensor,
};
use candle_nn::{LayerNorm, Linear, VarBuilder};

/// Which kernels the layers run: [`Kernels::Auto`] (the CPU's fused kernels on the CPU,
/// candle's ops elsewhere) unless `SIFT_KERNELS=generic` asks for candle's ops everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernels {
    /// Fused custom kernels on the CPU (f32, packed bfloat16), candle's ops on GPUs.
    Auto,
    /// candle's ops on every device: on the CPU, the arithmetic a GPU runs.
    Generic,
}

impl Kernels {
    /// The kernels of this process, read once from `SIFT_KERNELS` (`auto`, the default, or
    /// `generic`; anything else is reported on stderr and read as `auto`).
    pub fn current() -> Kernels {
        static KERNELS: OnceLock<Kernels> = OnceLock::new();
        *KERNELS.get_or_init(|| match std::env::var("SIFT_KERNELS").as_deref() {
            Err(_) | Ok("") | Ok("auto") => Kernels::Auto,
            Ok("generic") => Kernels::Generic,
            Ok(other) => {
                eprintln!("SIFT_KERNELS={other:?}: expected auto or generic; using auto");
                Kernels::Auto
            }
        })
    }

    /// `auto` or `generic`.
    pub fn name(self) -> &'static str {
        match self {
            Kernels::Auto => "auto",
            Kernels::Generic => "generic",
        }
    }
}

/// Whether the CPU's fused kernels run for tensors on `device`: on the CPU, unless
/// `SIFT_KERNELS=generic`.
pub(crate) fn fused_cpu(device: &Device) -> bool {
    device.is_cpu() && Kernels::current() == Kernels::Auto
}

/// Activation functions of Hugging Face configs (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Exact GELU, `x * Phi(x)` (`gelu`).
    Gelu,
    /// Tanh approximation of GELU (`gelu_pytorch_tanh`, `gelu_new`, `gelu_fast`).
    GeluTanh,
    /// `x * sigmoid(1.702 x)` (`quick_gelu`, CLIP).
    QuickGelu,
    /// `max(x, 0)`.
    Relu,
    /// `x * sigmoid(x)` (`silu`, `swish`: Qwen2's MLP gate).
    Silu,
}

impl Act {
    /// Parses a `hidden_act` value.
    pub fn parse(name: &str) -> Option<Act> {
        Some(match name {
            "gelu" => Act::Gelu,
            "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" => Act::GeluTanh,
            "quick_gelu" => Act::QuickGelu,
            "relu" => Act::Relu,
            "silu" | "swish" => Act::Silu,
            _ => return None,
        })
    }

    /// Applies the activation with candle's ops (any device and dtype; on the CPU with f32
    /// the layers apply it inside [`linear_act`] instead).
    pub fn apply(self, xs: &Tensor) -> Result<Tensor> {
        match self {
            Act::Gelu => xs.gelu_erf(),
            Act::GeluTanh => xs.gelu(),
            Act::QuickGelu => xs * candle_nn::ops::sigmoid(&(xs * 1.702)?)?,
            Act::Relu => xs.relu(),
            Act::Silu => xs.silu(),
        }
    }
}

/// erf with absolute error below 1.5e-7 (Abramowitz & Stegun 7.1.26).
#[inline]
pub(crate) fn erf(x: f32) -> f32 {
    let s = x.signum();
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_8) * t - 0.284_496_72) * t
            + 0.254_829_6)
            * t
            * exp_approx(-a * a);
    s * y
}

/// e^x for f32 without branches or calls, so loops over it vectorise (Cephes' expf: range
/// reduction by ln 2, degree-6 polynomial, exponent bits; relative error about 1e-7). Inputs
/// are clamped to [-87.3, 88.3] (results from about 1e-38 to 2e38).
#[inline(always)]
pub(crate) fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_2e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

#[inline(always)]
fn act_f32(act: Act, x: f32) -> f32 {
    match act {
        Act::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        Act::GeluTanh => {
            // PyTorch's gelu(approximate="tanh"): 0.5 x (1 + tanh z) = x sigmoid(2 z)
            const K2: f32 = 2.0 * 0.797_884_6; // 2 sqrt(2 / pi)
            x / (1.0 + exp_approx(-K2 * (x + 0.044_715 * x * x * x)))
        }
        Act::QuickGelu => x / (1.0 + exp_approx(-1.702 * x)),
        Act::Relu => x.max(0.0),
        Act::Silu => x / (1.0 + exp_approx(-x)),
    }
}

/// Whether the AVX2 + FMA versions of the element-wise kernels can run.
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    sift_simd::level() != sift_simd::Level::Baseline
}

/// Whether the AVX-512 versions of the element-wise kernels can run.
#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    sift_simd::level() == sift_simd::Level::Avx512
}

/// Defines `$name`, which runs `$portable` compiled for AVX-512, for AVX2/FMA or for
/// baseline x86-64, whichever the processor has (the portable loops are written so the
/// compiler vectorises them; the crate itself is built for baseline x86-64).
macro_rules! simd_dispatch {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $portable:ident) => {
        $(#[$meta])*
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety: the processor must have AVX-512F, AVX2 and FMA.
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) {
                    $portable($($arg),*)
                }
                /// # Safety: the processor must have AVX2 and FMA.
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    $portable($($arg),*)
                }
                if has_avx512() {
                    // SAFETY: the features were detected.
                    return unsafe { avx512($($arg),*) };
                }
                if has_avx2() {
                    // SAFETY: the features were detected.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $portable($($arg),*)
        }
    };
}

simd_dispatch!(
    /// Applies `act` to every value.
    fn act_slice(act: Act, xs: &mut [f32]) => act_slice_portable
);

#[inline(always)]
fn act_slice_portable(act: Act, xs: &mut [f32]) {
    match act {
        Act::Gelu => xs.iter_mut().for_each(|x| *x = act_f32(Act::Gelu, *x)),
        Act::GeluTanh => xs.iter_mut().for_each(|x| *x = act_f32(Act::GeluTanh, *x)),
        Act::QuickGelu => xs.iter_mut().for_each(|x| *x = act_f32(Act::QuickGelu, *x)),
        Act::Relu => xs.iter_mut().for_each(|x| *x = x.max(0.0)),
        Act::Silu => xs.iter_mut().for_each(|x| *x = act_f32(Act::Silu, *x)),
    }
}

simd_dispatch!(
    /// Softmax of one row in place over its first `visible` values (the rest set to 0).
    fn softmax_row(row: &mut [f32], visible: usize) => softmax_row_portable
);

#[inline(always)]
fn softmax_row_portable(row: &mut [f32], visible: usize) {
    let (head, tail) = row.split_at_mut(visible.min(row.len()));
    let max = head.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    head.iter_mut().for_each(|x| *x = exp_approx(*x - max));
    let sum: f32 = head.iter().sum();
    let inv = 1.0 / sum;
    head.iter_mut().for_each(|x| *x *= inv);
    tail.iter_mut().for_each(|x| *x = 0.0);
}

/// `act(x W^T + b) (+ residual)` for a 2-D `x` (the activation, when given, applies before
/// the residual; layers use one or the other).
///
/// On the CPU with f32 this is one custom op over the gemm kernel candle itself uses: the
/// output starts as the bias (plus the residual) and the matrix product accumulates into
/// it, then the activation runs in place, in parallel. That saves the zero fill, the copies
/// and the separate passes of `matmul` + `broadcast_add` + `add` + activation.
pub fn linear_act(
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
        y = a.apply(&y)?;
    }
    match residual {
        Some(r) => y + r,
        None => Ok(y),
    }
}

/// `x W^T (+ b) (+ residual)` for a 2-D `x` (see [`linear_act`]).
pub fn linear(l: &Linear, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
    linear_act(l, x, residual, None)
}

/// The fused CPU linear layer of [`linear_act`].
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
/// the fused op of [`linear_act`]), or bfloat16 weights packed for the CPU's bfloat16
/// kernels ([`PackedLinear`]).
pub enum Proj {
    /// candle's layer.
    Dense(Linear),
    /// Packed bfloat16 weights; f32 in and out.
    Packed(PackedLinear),
}

impl Proj {
    /// Loads `weight` `(out, inp)` (and `bias`): packed when `packed`.
    pub fn load(vb: &VarBuilder, inp: usize, out: usize, bias: bool, packed: bool) -> Result<Proj> {
        let l = load_linear(vb, inp, out, bias)?;
        if packed {
            Ok(Proj::Packed(PackedLinear::new(l.weight(), l.bias(), None)?))
        } else {
            Ok(Proj::Dense(l))
        }
    }

    /// `act(x W^T + b) (+ residual)` for a 2-D `x` (see [`linear_act`]).
    pub fn forward(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        act: Option<Act>,
    ) -> Result<Tensor> {
        match self {
            Proj::Dense(l) => linear_act(l, x, residual, act),
            Proj::Packed(p) => p.forward(x, residual, act),
        }
    }
}

/// A linear layer whose weight is bfloat16 packed for [`sift_simd::bf16`]'s CPU kernels
/// (AVX512-BF16 dot products where the processor has them, else the weights widened to
/// f32): the weights take half the memory of f32 and are read once per product, while the
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

    /// `act((x W^T + b) * scale) (+ residual)` for a 2-D f32 `x` on the CPU.
    pub fn forward(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        act: Option<Act>,
    ) -> Result<Tensor> {
        if !x.device().is_cpu() || x.dtype() != DType::F32 || x.rank() != 2 {
            candle_core::bail!(
                "packed linear: a 2-D f32 input on the CPU, not {:?} {:?} on {:?}",
                x.dtype(),
                x.shape(),
                x.device().location()
            )
        }
        if residual.is_some() && self.scale.is_some() {
            candle_core::bail!("packed linear: a residual with a scale")
        }
        let op = PackedOp { l: self, act };
        let x = x.contiguous()?;
        match residual {
            Some(r) => x.apply_op2_no_bwd(&r.to_dtype(DType::F32)?.contiguous()?, &op),
            None => x.apply_op1_no_bwd(&op),
        }
    }
}

/// The CPU op of [`PackedLinear::forward`].
struct PackedOp<'a> {
    l: &'a PackedLinear,
    act: Option<Act>,
}

impl PackedOp<'_> {
    fn compute(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        residual: Option<(&CpuStorage, &Layout)>,
    ) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let CpuStorage::F32(x) = x else {
            candle_core::bail!("packed linear: f32 input only")
        };
        let Some((x0, x1)) = xl.contiguous_offsets() else {
            candle_core::bail!("packed linear: contiguous input only")
        };
        let (m, k) = xl.shape().dims2()?;
        let (n, l) = (self.l.w.rows(), self.l);
        if k != l.w.cols() {
            candle_core::bail!(
                "packed linear: input of {k} features, weight of {}",
                l.w.cols()
            )
        }
        let mut dst = match residual {
            Some((CpuStorage::F32(r), rl)) => {
                let Some((r0, r1)) = rl.contiguous_offsets() else {
                    candle_core::bail!("packed linear: contiguous residual only")
                };
                if r1 - r0 != m * n {
                    candle_core::bail!("packed linear: residual of {} values for {m}x{n}", r1 - r0)
                }
                r[r0..r1].to_vec()
            }
            Some(_) => candle_core::bail!("packed linear: f32 residual only"),
            None => vec![0f32; m * n],
        };
        l.w.matmul_acc(&x[x0..x1], m, &mut dst);
        let rows = (16384 / n.max(1)).max(1);
        if l.bias.is_some() || l.scale.is_some() || self.act.is_some() {
            dst.par_chunks_mut(rows * n).for_each(|d| {
                for row in d.chunks_mut(n) {
                    if let Some(b) = &l.bias {
                        row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                    }
                    if let Some(s) = &l.scale {
                        row.iter_mut().zip(s).for_each(|(o, s)| *o *= s);
                    }
                }
                if let Some(act) = self.act {
                    act_slice(act, d);
                }
            });
        }
        Ok((CpuStorage::F32(dst), Shape::from((m, n))))
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

/// Loads `weight` `(out, inp)` and, when `bias`, `bias` `(out)`.
pub fn load_linear(vb: &VarBuilder, inp: usize, out: usize, bias: bool) -> Result<Linear> {
    let b = if bias {
        Some(vb.get(out, "bias")?)
    } else {
        None
    };
    Ok(Linear::new(vb.get((out, inp), "weight")?, b))
}

/// Loads a layer norm (`weight`, `bias`).
pub fn load_layer_norm(vb: &VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        vb.get(size, "weight")?,
        vb.get(size, "bias")?,
        eps,
    ))
}

/// One sequence of a packed batch, as attention sees it.
#[derive(Debug, Clone, Copy)]
pub struct Segment {
    /// First row of the sequence in the packed matrix.
    pub start: usize,
    /// Rows (tokens) of the sequence.
    pub len: usize,
    /// Keys visible to every query: the first `keys` tokens (the rest are masked padding).
    pub keys: usize,
}

impl Segment {
    /// Keys every query sees: `keys`, at least 1 and at most `len` (1 for an empty segment).
    pub fn visible_keys(&self) -> usize {
        self.keys.clamp(1, self.len.max(1))
    }

    /// Segments of sequences of the given lengths, packed one after the other, every token
    /// visible.
    pub fn packed(lens: impl IntoIterator<Item = usize>) -> Vec<Segment> {
        let mut start = 0;
        lens.into_iter()
            .map(|len| {
                let s = Segment {
                    start,
                    len,
                    keys: len,
                };
                start += len;
                s
            })
            .collect()
    }
}

/// Checks that `segments` are in order, do not overlap and lie within `tokens` rows (the
/// packed attention writes each segment's rows from its own thread: overlapping segments
/// would be a data race).
fn check_segments(segments: &[Segment], tokens: usize) -> Result<()> {
    let mut end = 0usize;
    for s in segments {
        let Some(stop) = s.start.checked_add(s.len) else {
            candle_core::bail!("attention: segment {s:?} overflows")
        };
        if s.start < end {
            candle_core::bail!(
                "attention: segment {s:?} overlaps the one before or is out of order"
            )
        }
        if stop > tokens {
            candle_core::bail!("attention: segment {s:?} beyond the {tokens} tokens")
        }
        end = stop;
    }
    Ok(())
}

/// A flash plan (or that flash attention does not apply) with the device, dtype and rows it
/// was decided for.
#[cfg(feature = "flash-attn")]
type FlashCache = (
    (candle_core::DeviceLocation, DType, usize),
    Option<flash::Plan>,
);

/// Multi-head self-attention over packed sequences, prepared once for a batch and run at
/// every layer ([`Attention::run`]).
///
/// `qkv` is `(tokens, 3 * heads * head_dim)`: queries (already scaled by 1/sqrt(head_dim)),
/// keys, values. Each segment attends only within itself, to its first `keys` tokens, and,
/// when causal, only to earlier positions. The context is `(tokens, heads * head_dim)`.
/// Segments run in parallel on the CPU; they must be sorted, disjoint and within the rows of
/// `qkv` (checked at each run).
///
/// What the GPU paths derive from the segments alone is made on the first run and kept for
/// the layers after it, so later layers upload nothing: flash attention's sequence offsets,
/// key rows and ALiBi slopes, and the padded path's buckets, gather indices,
/// masks, ALiBi distances and the order the rows come back in.
pub struct Attention<'a> {
    segments: &'a [Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
    window: Option<usize>,
    bias: ScoreBias<'a>,
    padded: std::cell::OnceCell<PaddedPlan>,
    #[cfg(feature = "flash-attn")]
    flash: std::cell::OnceCell<FlashCache>,
}

impl<'a> Attention<'a> {
    /// Bidirectional attention over `segments`, `heads` heads of `head_dim`.
    pub fn new(segments: &'a [Segment], heads: usize, head_dim: usize) -> Self {
        Attention {
            segments,
            heads,
            head_dim,
            causal: false,
            window: None,
            bias: ScoreBias::default(),
            padded: std::cell::OnceCell::new(),
            #[cfg(feature = "flash-attn")]
            flash: std::cell::OnceCell::new(),
        }
    }

    /// Causal when `causal`: a token sees only earlier positions and itself.
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Causal, and with `window` `W` a token sees only the `W` latest positions, itself
    /// included (Mistral's sliding window: key `j` is visible to query `i` when
    /// `i - W < j <= i`).
    pub fn windowed(mut self, window: Option<usize>) -> Self {
        self.causal = true;
        self.window = window;
        self
    }

    /// With additive biases on the scores ([`ScoreBias`]). The same paths run as without: the fused kernel on the CPU in f32, flash attention on CUDA (ALiBi only:
    /// key biases that are not all zero take the padded path), the padded batches elsewhere.
    pub fn biased(mut self, bias: ScoreBias<'a>) -> Self {
        self.bias = bias;
        self
    }

    /// The context of one layer's `qkv`.
    pub fn run(&self, qkv: &Tensor) -> Result<Tensor> {
        let (segments, heads, head_dim) = (self.segments, self.heads, self.head_dim);
        let (causal, window, bias) = (self.causal, self.window, self.bias);
        let (tokens, width) = qkv.dims2()?;
        if let Some(a) = bias.alibi
            && a.len() != heads
        {
            candle_core::bail!("attention: {} ALiBi slopes for {heads} heads", a.len())
        }
        if let Some(k) = bias.keys
            && k.len() != tokens
        {
            candle_core::bail!("attention: {} key biases for {tokens} rows", k.len())
        }
        check_segments(segments, tokens)?;
        if width != 3 * heads * head_dim {
            candle_core::bail!(
                "attention: qkv of width {width}, expected {}",
                3 * heads * head_dim
            )
        }
        if window.is_some() && !causal {
            candle_core::bail!("attention: a sliding window needs causal attention")
        }
        if window == Some(0) {
            candle_core::bail!("attention: a sliding window of 0 tokens")
        }
        if fused_cpu(qkv.device()) && qkv.dtype() == DType::F32 {
            let op = AttentionOp {
                segments: segments.to_vec(),
                heads,
                head_dim,
                causal,
                window,
                alibi: bias.alibi.map(<[f32]>::to_vec),
                key_bias: bias.keys.map(<[f32]>::to_vec),
            };
            return qkv.contiguous()?.apply_op1_no_bwd(&op);
        }
        #[cfg(feature = "flash-attn")]
        {
            // the plan, or that there is none, holds for the device, dtype and rows it was
            // made for
            let key = (qkv.device().location(), qkv.dtype(), tokens);
            let fresh;
            let plan = match self.flash.get() {
                Some((k, p)) if *k == key => p.as_ref(),
                Some(_) => {
                    fresh = self.flash_plan(qkv)?;
                    fresh.as_ref()
                }
                None => {
                    let p = self.flash_plan(qkv)?;
                    self.flash.get_or_init(|| (key, p)).1.as_ref()
                }
            };
            if let Some(plan) = plan {
                return plan.run(qkv, heads, head_dim);
            }
        }
        let plan = match self.padded.get() {
            Some(p) if p.fits(qkv) => p,
            Some(_) => return self.plan(qkv)?.run(qkv, heads, head_dim),
            None => {
                let p = self.plan(qkv)?;
                self.padded.get_or_init(|| p)
            }
        };
        plan.run(qkv, heads, head_dim)
    }

    #[cfg(feature = "flash-attn")]
    fn flash_plan(&self, qkv: &Tensor) -> Result<Option<flash::Plan>> {
        flash::Plan::new(
            qkv,
            self.segments,
            self.head_dim,
            self.causal,
            self.window,
            self.bias,
        )
    }

    fn plan(&self, qkv: &Tensor) -> Result<PaddedPlan> {
        PaddedPlan::new(
            self.segments,
            self.heads,
            self.causal,
            self.window,
            self.bias,
            qkv,
        )
    }
}

/// [`Attention`] run once: bidirectional, or causal when `causal` (the tests' entry).
#[cfg(test)]
fn attention(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
) -> Result<Tensor> {
    Attention::new(segments, heads, head_dim)
        .causal(causal)
        .run(qkv)
}

/// [`attention`] where, with `window` (causal only), a token sees only the latest positions
/// ([`Attention::windowed`]).
#[cfg(test)]
fn attention_windowed(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
    window: Option<usize>,
) -> Result<Tensor> {
    let a = Attention::new(segments, heads, head_dim).causal(causal);
    let a = Attention { window, ..a };
    a.run(qkv)
}

/// Additive biases on the attention scores, for encoders whose published code adds them to
/// `Q K^T` before the softmax: JinaBERT's ALiBi, and the `-10000` that JinaBERT and
/// XLM-RoBERTa add on keys holding the padding id.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScoreBias<'a> {
    /// ALiBi slopes, one per head: query `i` and key `j` of a sequence (positions within it)
    /// get `-slopes[h] * |i - j|` (symmetric, as JinaBERT's bidirectional ALiBi).
    pub alibi: Option<&'a [f32]>,
    /// One value per packed row, added to every score on that row as a key.
    pub keys: Option<&'a [f32]>,
}

/// [`ScoreBias::keys`] for packed sequences whose published encoder masks keys holding the
/// padding id (`(1 - mask) * -10000` on the scores, mask `ids != pad`), or `None` when no
/// sequence holds it.
pub fn padding_key_bias(seqs: &[&[u32]], pad: u32) -> Option<Vec<f32>> {
    seqs.iter().any(|s| s.contains(&pad)).then(|| {
        seqs.iter()
            .flat_map(|s| s.iter().map(|&t| if t == pad { -10000.0 } else { 0.0 }))
            .collect()
    })
}

/// [`Attention::biased`] run once (the tests' entry).
#[cfg(test)]
fn attention_biased(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    bias: ScoreBias,
) -> Result<Tensor> {
    Attention::new(segments, heads, head_dim)
        .biased(bias)
        .run(qkv)
}

/// Scores (batch x heads x queries x keys) one padded batch may hold: 2^27 values (256 MiB in
/// bfloat16); longer buckets are split.
const PADDED_SCORE_VALUES: usize = 1 << 27;

/// Groups of segments (indices, shortest first) that attention runs as one padded batch:
/// similar lengths, so padding adds at most a quarter to the sum of `len x keys`, and at most
/// [`PADDED_SCORE_VALUES`] scores per group (a longer sequence gets a group of its own).
fn buckets(segments: &[Segment], heads: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..segments.len())
        .filter(|&i| segments[i].len > 0)
        .collect();
    order.sort_by_key(|&i| (segments[i].len, segments[i].visible_keys()));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let (mut cost, mut max_len, mut max_keys) = (0usize, 0usize, 0usize);
    for i in order {
        let s = &segments[i];
        let (len, k) = (s.len, s.visible_keys());
        if let Some(g) = groups.last_mut() {
            let (ml, mk) = (max_len.max(len), max_keys.max(k));
            let padded = (g.len() + 1) * ml * mk;
            let exact = cost + len * k;
            if padded * 4 <= exact * 5 && padded * heads <= PADDED_SCORE_VALUES {
                g.push(i);
                (cost, max_len, max_keys) = (exact, ml, mk);
                continue;
            }
        }
        groups.push(vec![i]);
        (cost, max_len, max_keys) = (len * k, len, k);
    }
    groups
}

/// How one bucket's queries and keys are gathered from the packed rows.
enum Gather {
    /// Every sequence is `lq` long, sees all its keys, and follows the one before in the
    /// packed matrix: the bucket is the `b x lq` rows from `start`, with no copy.
    Rows { start: usize },
    /// Row indices of the `(b x lq)` queries and `(b x lk)` keys (padding repeats a valid row).
    Index { q: Tensor, k: Tensor },
}

/// One padded batch of [`PaddedPlan`].
struct Bucket {
    b: usize,
    lq: usize,
    lk: usize,
    gather: Gather,
    /// Score masks and biases, added in turn: ALiBi (1, heads, lq, lk), each sequence's keys
    /// (b, 1, 1, lk) with their biases, the causal window (1, 1, lq, lk).
    masks: Vec<Tensor>,
    /// (b, 1, lq, 1): 0 on queries that see no key (their context is zero), when any does.
    seen: Option<Tensor>,
    /// The sequences' own rows of the `b x lq` context, when padding is among them.
    keep: Option<Tensor>,
}

/// The generic attention (candle's ops, any device and dtype), prepared from the segments:
/// segments of similar lengths go together as one padded batch with a mask (see
/// [`buckets`]), so a GPU runs a few large batched matrix products instead of a few small
/// ones per sequence. A query that sees no key (possible only with masked keys and a sliding
/// window) gets a zero context, as on the CPU.
struct PaddedPlan {
    location: candle_core::DeviceLocation,
    dtype: DType,
    tokens: usize,
    /// The dtype scores are biased and soft-maxed in.
    score_dtype: DType,
    buckets: Vec<Bucket>,
    /// Each packed row's row in the buckets' contexts concatenated (the last, zero, row for
    /// rows outside every segment); `None` when they already are the packed rows in order.
    order: Option<Tensor>,
}

impl PaddedPlan {
    fn new(
        segments: &[Segment],
        heads: usize,
        causal: bool,
        window: Option<usize>,
        bias: ScoreBias,
        qkv: &Tensor,
    ) -> Result<PaddedPlan> {
        let (dev, dtype) = (qkv.device(), qkv.dtype());
        let tokens = qkv.dim(0)?;
        // Scores with ALiBi are biased and soft-maxed in f32, as the published code does them
        // (PyTorch promotes bf16 scores plus an f32 bias to f32; flash attention adds ALiBi in
        // f32): in bf16, a distance bias of -255 is rounded to a step of 1.
        let score_dtype = if bias.alibi.is_some() {
            DType::F32
        } else {
            dtype
        };
        // masked scores: finite (a fully masked row stays finite), twice still finite in f16
        let masked = match score_dtype {
            DType::F16 => -3e4f32,
            _ => -1e30f32,
        };
        let w = window.unwrap_or(usize::MAX);
        let index = |rows: Vec<u32>| {
            let n = rows.len();
            Tensor::from_vec(rows, n, dev)
        };
        let mut planned = Vec::new();
        let mut place: Vec<Option<u32>> = vec![None; tokens];
        let mut done = 0u32;
        for group in buckets(segments, heads) {
            let segs: Vec<Segment> = group.iter().map(|&i| segments[i]).collect();
            let b = segs.len();
            let lq = segs.iter().map(|s| s.len).max().unwrap_or(1);
            let lk = segs.iter().map(Segment::visible_keys).max().unwrap_or(1);
            let full = segs.iter().all(|s| s.len == lq);
            let gather = if full
                && lk == lq
                && segs.iter().all(|s| s.visible_keys() == lq)
                && segs.windows(2).all(|p| p[1].start == p[0].start + lq)
            {
                Gather::Rows {
                    start: segs[0].start,
                }
            } else {
                let mut q = Vec::with_capacity(b * lq);
                let mut k = Vec::with_capacity(b * lk);
                for s in &segs {
                    q.extend((0..lq).map(|i| (s.start + i.min(s.len - 1)) as u32));
                    k.extend((0..lk).map(|j| (s.start + j.min(s.visible_keys() - 1)) as u32));
                }
                Gather::Index {
                    q: index(q)?,
                    k: index(k)?,
                }
            };
            let mut masks = Vec::new();
            // ALiBi made on the device (distances times slopes)
            if let Some(slopes) = bias.alibi {
                let pos = |n: usize| Tensor::arange(0f32, n as f32, dev);
                let dist = pos(lq)?
                    .reshape((lq, 1))?
                    .broadcast_sub(&pos(lk)?.reshape((1, lk))?)?
                    .abs()?
                    .reshape((1, 1, lq, lk))?;
                let slopes = Tensor::from_slice(slopes, (1, heads, 1, 1), dev)?;
                masks.push(dist.broadcast_mul(&slopes)?.neg()?.to_dtype(score_dtype)?);
            }
            if bias.keys.is_some() || segs.iter().any(|s| s.visible_keys() != lk) {
                let m: Vec<f32> = segs
                    .iter()
                    .flat_map(|s| {
                        (0..lk).map(move |j| match bias.keys {
                            _ if j >= s.visible_keys() => masked,
                            Some(k) => k[s.start + j],
                            None => 0.0,
                        })
                    })
                    .collect();
                masks.push(Tensor::from_vec(m, (b, 1, 1, lk), dev)?.to_dtype(score_dtype)?);
            }
            if causal {
                let m: Vec<f32> = (0..lq)
                    .flat_map(|i| {
                        (0..lk).map(move |j| if j <= i && i - j < w { 0.0 } else { masked })
                    })
                    .collect();
                masks.push(Tensor::from_vec(m, (1, 1, lq, lk), dev)?.to_dtype(score_dtype)?);
            }
            // queries that see no key (a window past the last visible key) get a zero context
            let seen: Vec<f32> = segs
                .iter()
                .flat_map(|s| {
                    let keys = s.visible_keys();
                    (0..lq).map(move |i| {
                        let visible = !causal || i < keys || i - (keys - 1) < w;
                        if visible { 1.0 } else { 0.0 }
                    })
                })
                .collect();
            let seen = if seen.contains(&0.0) {
                Some(Tensor::from_vec(seen, (b, 1, lq, 1), dev)?.to_dtype(dtype)?)
            } else {
                None
            };
            // keep the sequences' own rows
            let mut keep = Vec::new();
            for (bi, s) in segs.iter().enumerate() {
                for i in 0..s.len {
                    keep.push((bi * lq + i) as u32);
                    place[s.start + i] = Some(done);
                    done += 1;
                }
            }
            let keep = if full { None } else { Some(index(keep)?) };
            planned.push(Bucket {
                b,
                lq,
                lk,
                gather,
                masks,
                seen,
                keep,
            });
        }
        let in_order = place.iter().enumerate().all(|(r, p)| *p == Some(r as u32));
        // rows outside every segment get a zero context (the row after the buckets'), as the
        // CPU kernel leaves them
        let order = if in_order {
            None
        } else {
            Some(index(
                place.into_iter().map(|p| p.unwrap_or(done)).collect(),
            )?)
        };
        Ok(PaddedPlan {
            location: dev.location(),
            dtype,
            tokens,
            score_dtype,
            buckets: planned,
            order,
        })
    }

    /// Whether this plan was made for a `qkv` of this device, dtype and length.
    fn fits(&self, qkv: &Tensor) -> bool {
        qkv.device().location() == self.location
            && qkv.dtype() == self.dtype
            && qkv.dim(0).ok() == Some(self.tokens)
    }

    fn run(&self, qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
        let h = heads * head_dim;
        let mut parts: Vec<Tensor> = Vec::with_capacity(self.buckets.len() + 1);
        for bk in &self.buckets {
            let (b, lq, lk) = (bk.b, bk.lq, bk.lk);
            let (q_in, kv_in) = match &bk.gather {
                Gather::Rows { start } => {
                    let rows = qkv.narrow(0, *start, b * lq)?;
                    (rows.clone(), rows)
                }
                Gather::Index { q, k } => (qkv.index_select(q, 0)?, qkv.index_select(k, 0)?),
            };
            let split = |x: &Tensor, part: usize, rows: usize| -> Result<Tensor> {
                x.narrow(1, part * h, h)?
                    .reshape((b, rows, heads, head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let (q, k, v) = (
                split(&q_in, 0, lq)?,
                split(&kv_in, 1, lk)?,
                split(&kv_in, 2, lk)?,
            );
            let mut scores = q.matmul(&k.t()?)?.to_dtype(self.score_dtype)?; // (b, heads, lq, lk)
            for m in &bk.masks {
                scores = scores.broadcast_add(m)?;
            }
            let mut probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(self.dtype)?;
            if let Some(seen) = &bk.seen {
                probs = probs.broadcast_mul(seen)?;
            }
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b * lq, h))?;
            parts.push(match &bk.keep {
                Some(keep) => ctx.index_select(keep, 0)?,
                None => ctx,
            });
        }
        match &self.order {
            None if parts.is_empty() => Tensor::zeros((0, h), self.dtype, qkv.device()),
            None if parts.len() == 1 => Ok(parts.remove(0)),
            None => Tensor::cat(&parts, 0),
            Some(order) => {
                parts.push(Tensor::zeros((1, h), self.dtype, qkv.device())?);
                Tensor::cat(&parts, 0)?.index_select(order, 0)
            }
        }
    }
}

/// The padded path run once (tests compare it with the other paths).
#[cfg(test)]
fn attention_padded(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
    window: Option<usize>,
    bias: ScoreBias,
) -> Result<Tensor> {
    check_segments(segments, qkv.dim(0)?)?;
    PaddedPlan::new(segments, heads, causal, window, bias, qkv)?.run(qkv, heads, head_dim)
}

/// How variable-length flash attention runs a batch of segments, worked out on the host from
/// the segments alone: the cumulative query and key offsets of the packed sequences, the rows
/// of the visible keys where some sequence masks its trailing keys, and the window. `None`
/// where flash attention cannot give Sift's result: segments that leave rows between or after
/// them or hold no row, key biases that are not all zero, a head size it has no kernel for, or
/// a causal or ALiBi sequence with masked keys (flash attention aligns a causal mask and
/// ALiBi's distances to the last key when a sequence has fewer keys than queries; Sift aligns
/// them to the first).
///
/// Semantics relied on (flash-attn's `mha_varlen_fwd`, as candle-flash-attn calls it): query
/// `i` of a sequence with `lq` queries and `lk` keys sees key `j` when
/// `i + lk - lq - left <= j <= i + lk - lq + right` (no bound where one is `None`), and ALiBi
/// adds `-slope * |i + lk - lq - j|`. The tests run a CPU model of exactly that on this layout
/// against the padded path.
#[cfg(any(test, feature = "flash-attn"))]
#[derive(Debug, Clone, PartialEq)]
struct FlashLayout {
    cu_q: Vec<u32>,
    cu_k: Vec<u32>,
    /// The packed rows of the visible keys; `None` when every key is visible.
    kv_rows: Option<Vec<u32>>,
    max_q: usize,
    max_k: usize,
    left: Option<usize>,
    right: Option<usize>,
}

#[cfg(any(test, feature = "flash-attn"))]
impl FlashLayout {
    fn new(
        segments: &[Segment],
        tokens: usize,
        head_dim: usize,
        causal: bool,
        window: Option<usize>,
        bias: ScoreBias,
    ) -> Option<FlashLayout> {
        if bias.keys.is_some_and(|k| k.iter().any(|&b| b != 0.0)) {
            return None;
        }
        let contiguous = segments
            .iter()
            .scan(0usize, |end, s| {
                let ok = s.start == *end && s.len > 0;
                *end = s.start + s.len;
                Some(ok)
            })
            .all(|ok| ok);
        let covered = segments.last().map(|s| s.start + s.len) == Some(tokens);
        if !head_dim.is_multiple_of(8) || head_dim > 512 || !contiguous || !covered {
            return None;
        }
        let all_keys = segments.iter().all(|s| s.keys >= s.len);
        if (causal || bias.alibi.is_some()) && !all_keys {
            return None;
        }
        let mut cu_q = vec![0u32];
        let mut cu_k = vec![0u32];
        for s in segments {
            cu_q.push((s.start + s.len) as u32);
            cu_k.push(cu_k.last().copied().unwrap_or(0) + s.visible_keys() as u32);
        }
        let kv_rows = (!all_keys).then(|| {
            segments
                .iter()
                .flat_map(|s| (s.start..s.start + s.visible_keys()).map(|r| r as u32))
                .collect()
        });
        Some(FlashLayout {
            cu_q,
            cu_k,
            kv_rows,
            max_q: segments.iter().map(|s| s.len).max().unwrap_or(1),
            max_k: segments
                .iter()
                .map(Segment::visible_keys)
                .max()
                .unwrap_or(1),
            // key j is visible to query i when i - left <= j <= i + right
            left: window.map(|w| w - 1),
            right: causal.then_some(0),
        })
    }
}

/// Variable-length flash attention on CUDA (bfloat16 and float16) over the packed batch.
#[cfg(feature = "flash-attn")]
mod flash {
    use super::{FlashLayout, ScoreBias, Segment};
    use candle_core::{DType, Result, Tensor};

    /// A [`FlashLayout`] with its small inputs (offsets, key rows, ALiBi slopes) on the
    /// device, made once per batch and run at every layer.
    pub(super) struct Plan {
        tokens: usize,
        layout: FlashLayout,
        cu_q: Tensor,
        cu_k: Tensor,
        kv_rows: Option<Tensor>,
        slopes: Option<Tensor>,
    }

    impl Plan {
        /// The plan, or `None` where flash attention does not apply (not CUDA, f32, or
        /// [`FlashLayout::new`]'s cases): the caller falls back to the padded path.
        pub(super) fn new(
            qkv: &Tensor,
            segments: &[Segment],
            head_dim: usize,
            causal: bool,
            window: Option<usize>,
            bias: ScoreBias,
        ) -> Result<Option<Plan>> {
            let dev = qkv.device();
            if !dev.is_cuda() || !matches!(qkv.dtype(), DType::BF16 | DType::F16) {
                return Ok(None);
            }
            let tokens = qkv.dim(0)?;
            let Some(layout) = FlashLayout::new(segments, tokens, head_dim, causal, window, bias)
            else {
                return Ok(None);
            };
            let upload = |v: &[u32]| Tensor::from_vec(v.to_vec(), v.len(), dev);
            Ok(Some(Plan {
                tokens,
                cu_q: upload(&layout.cu_q)?,
                cu_k: upload(&layout.cu_k)?,
                kv_rows: layout.kv_rows.as_deref().map(upload).transpose()?,
                slopes: bias
                    .alibi
                    .map(|s| Tensor::from_vec(s.to_vec(), s.len(), dev))
                    .transpose()?,
                layout,
            }))
        }

        pub(super) fn run(&self, qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
            let h = heads * head_dim;
            let part = |x: &Tensor, i: usize| -> Result<Tensor> {
                x.narrow(1, i * h, h)?
                    .contiguous()?
                    .reshape((x.dim(0)?, heads, head_dim))
            };
            let q = part(qkv, 0)?;
            // sequences whose trailing keys are masked: their visible keys, packed
            let kv = match &self.kv_rows {
                Some(rows) => qkv.index_select(rows, 0)?,
                None => qkv.clone(),
            };
            let (k, v) = (part(&kv, 1)?, part(&kv, 2)?);
            let l = &self.layout;
            // the queries are already scaled
            let ctx = match &self.slopes {
                // flash attention's ALiBi is `-slope * |i + keys - queries - j|`: JinaBERT's
                // symmetric `|i - j|` for the bidirectional, unmasked sequences that reach here
                Some(slopes) => candle_flash_attn::flash_attn_varlen_alibi_windowed(
                    &q, &k, &v, slopes, &self.cu_q, &self.cu_k, l.max_q, l.max_k, 1.0, l.left,
                    l.right,
                )?,
                None => candle_flash_attn::flash_attn_varlen_windowed(
                    &q, &k, &v, &self.cu_q, &self.cu_k, l.max_q, l.max_k, 1.0, l.left, l.right,
                )?,
            };
            ctx.reshape((self.tokens, h))
        }
    }
}

/// Attention on the CPU in one op: every (sequence, head) pair in parallel, reading Q, K and
/// V in place from the packed `qkv` matrix through strides and writing its context straight
/// into the output (no per-head copies, transposes or concatenation).
struct AttentionOp {
    segments: Vec<Segment>,
    heads: usize,
    head_dim: usize,
    causal: bool,
    /// Causal sliding window (tokens seen, the query's own included).
    window: Option<usize>,
    /// ALiBi slopes per head ([`ScoreBias::alibi`]).
    alibi: Option<Vec<f32>>,
    /// Score bias per key row ([`ScoreBias::keys`]).
    key_bias: Option<Vec<f32>>,
}

/// Scores computed at once per (sequence, head) task: 128 Ki values (512 KiB), about a
/// core's L2 cache.
const SCORE_BLOCK_VALUES: usize = 128 * 1024;

/// A raw output pointer shared by tasks that write disjoint parts of one buffer.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: each task writes only its own (rows of a sequence) x (columns of a head) block,
// and `check_segments` has made sure the sequences' rows do not overlap.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl CustomOp1 for AttentionOp {
    fn name(&self) -> &'static str {
        "attention-packed"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("attention: f32 only")
        };
        let Some((a, b)) = layout.contiguous_offsets() else {
            candle_core::bail!("attention: contiguous input only")
        };
        let qkv = &data[a..b];
        let (tokens, width) = layout.shape().dims2()?;
        let (heads, d) = (self.heads, self.head_dim);
        let h = heads * d;
        if width != 3 * h {
            candle_core::bail!("attention: qkv of width {width}, expected {}", 3 * h)
        }
        check_segments(&self.segments, tokens)?;
        if self.alibi.as_ref().is_some_and(|a| a.len() != heads)
            || self.key_bias.as_ref().is_some_and(|k| k.len() != tokens)
        {
            candle_core::bail!("attention: score biases do not match {heads} heads, {tokens} rows")
        }
        let mut out = vec![0f32; tokens * h];
        let out_ptr = OutPtr(out.as_mut_ptr());
        let tasks: Vec<(usize, usize)> = (0..self.segments.len())
            .flat_map(|s| (0..heads).map(move |hd| (s, hd)))
            .collect();
        let w = 3 * h;
        tasks
            .par_iter()
            .for_each_init(Vec::new, |scores, &(si, hd)| {
                let seg = self.segments[si];
                let (len, keys) = (seg.len, seg.visible_keys());
                if len == 0 {
                    return;
                }
                // Query rows go in blocks whose scores stay in the core's cache while they
                // are computed, soft-maxed and multiplied by V (long sequences, e.g. GME's
                // thousands of image patches, would otherwise stream len x keys scores
                // through memory three times); causal blocks skip the keys no row sees.
                let block = (SCORE_BLOCK_VALUES / keys).clamp(16, 512).min(len);
                scores.clear();
                scores.resize(block * keys, 0.0);
                let base = seg.start * w;
                let dst = out_ptr;
                for r0 in (0..len).step_by(block) {
                    let rows = block.min(len - r0);
                    let kv = if self.causal {
                        (r0 + rows).min(keys)
                    } else {
                        keys
                    };
                    let q = qkv[base + r0 * w + hd * d..].as_ptr();
                    let k = qkv[base + h + hd * d..].as_ptr();
                    let v = qkv[base + 2 * h + hd * d..].as_ptr();
                    // SAFETY: q, k, v point into qkv with rows `w` apart; the extents read
                    // are within the segment's rows; `scores` holds rows x kv values.
                    unsafe {
                        gemm::gemm(
                            rows,
                            kv,
                            d,
                            scores.as_mut_ptr(),
                            1,
                            kv as isize,
                            false,
                            q,
                            1,
                            w as isize,
                            k,
                            w as isize,
                            1,
                            0.0,
                            1.0,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        );
                    }
                    for (i, row) in scores[..rows * kv].chunks_mut(kv).enumerate() {
                        let visible = if self.causal {
                            (r0 + i + 1).min(kv)
                        } else {
                            kv
                        };
                        // keys that slid out of the window weigh nothing: the softmax runs
                        // over the window alone (the query's own position is always in it)
                        let first = self
                            .window
                            .map_or(0, |wn| (r0 + i + 1).saturating_sub(wn).min(visible));
                        row[..first].fill(0.0);
                        let qi = r0 + i;
                        if let Some(slopes) = &self.alibi {
                            let sl = slopes[hd];
                            for (j, x) in row[first..visible].iter_mut().enumerate() {
                                *x -= sl * (qi as f32 - (first + j) as f32).abs();
                            }
                        }
                        if let Some(kb) = &self.key_bias {
                            let kb = &kb[seg.start + first..seg.start + visible];
                            row[first..visible]
                                .iter_mut()
                                .zip(kb)
                                .for_each(|(x, b)| *x += b);
                        }
                        softmax_row(&mut row[first..], visible - first);
                    }
                    // SAFETY: this task alone writes rows start..start+len, columns
                    // hd*d..(hd+1)*d.
                    unsafe {
                        gemm::gemm(
                            rows,
                            d,
                            kv,
                            dst.0.add((seg.start + r0) * h + hd * d),
                            1,
                            h as isize,
                            false,
                            scores.as_ptr(),
                            1,
                            kv as isize,
                            v,
                            1,
                            w as isize,
                            0.0,
                            1.0,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        );
                    }
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((tokens, h))))
    }
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

/// Rows scaled to unit L2 norm (norm clamped at 1e-12), as f32.
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let x = x.to_dtype(DType::F32)?;
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    x.broadcast_div(&norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Normal noise `(rows, cols)` with standard deviation `sd`, the same on every run (a
    /// fixed splitmix64 stream through Box-Muller): bounds checked on it cannot flake.
    fn noise(rows: usize, cols: usize, sd: f32, seed: u64) -> Tensor {
        let mut state = seed;
        let mut uniform = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let values: Vec<f32> = (0..rows * cols)
            .map(|_| {
                let (u, v) = (uniform().max(1e-300), uniform());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32 * sd
            })
            .collect();
        Tensor::from_vec(values, (rows, cols), &candle_core::Device::Cpu).unwrap()
    }

    /// The largest absolute difference between two tensors of one shape, in f32.
    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let f32 = |x: &Tensor| x.to_dtype(DType::F32).unwrap();
        (f32(a) - f32(b))
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    }

    #[test]
    fn overlapping_unordered_or_overflowing_segments_are_refused() {
        let seg = |start, len| Segment {
            start,
            len,
            keys: len,
        };
        let qkv = Tensor::zeros((10, 3 * 4), DType::F32, &candle_core::Device::Cpu).unwrap();
        let run = |segs: &[Segment]| attention(&qkv, segs, 2, 2, false);
        assert!(run(&[seg(0, 4), seg(4, 6)]).is_ok());
        assert!(run(&[seg(0, 5), seg(4, 6)]).is_err(), "overlap");
        assert!(run(&[seg(4, 6), seg(0, 4)]).is_err(), "order");
        assert!(run(&[seg(6, 6)]).is_err(), "beyond the rows");
        assert!(run(&[seg(usize::MAX - 1, 3)]).is_err(), "overflow");
    }

    #[test]
    fn erf_is_accurate() {
        // reference values of erf
        for (x, want) in [
            (0.0f32, 0.0f64),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (-1.5, -0.966_105_146_5),
            (3.0, 0.999_977_909_5),
        ] {
            assert!((erf(x) as f64 - want).abs() < 3e-7, "erf({x})");
        }
    }

    #[test]
    fn exp_approx_is_accurate() {
        let mut worst = 0f64;
        for i in -87_000..88_000 {
            let x = i as f32 / 1000.0;
            let want = (x as f64).exp();
            let rel = ((exp_approx(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(exp_approx(-1000.0), exp_approx(-87.3));
        assert!(exp_approx(1000.0).is_finite());
    }

    #[test]
    fn parallel_activations_match_candle() {
        let dev = candle_core::Device::Cpu;
        let xs: Vec<f32> = (0..20_000)
            .map(|i| (i as f32 - 10_000.0) / 1500.0)
            .collect();
        let x = Tensor::from_vec(xs.clone(), 20_000, &dev).unwrap();
        for act in [
            Act::Gelu,
            Act::GeluTanh,
            Act::QuickGelu,
            Act::Relu,
            Act::Silu,
        ] {
            let mut fast = xs.clone();
            act_slice(act, &mut fast);
            let got = Tensor::from_vec(fast, 20_000, &dev).unwrap();
            let diff = (got - act.apply(&x).unwrap())
                .unwrap()
                .abs()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(diff < 2e-6, "{act:?}: max diff {diff}");
        }
    }

    #[test]
    fn fused_linear_matches_matmul() {
        let dev = candle_core::Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (37, 24), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (19, 24), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, 19, &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (37, 19), &dev).unwrap();
        let l = Linear::new(w.clone(), Some(b.clone()));
        let plain = x
            .matmul(&w.t().unwrap())
            .unwrap()
            .broadcast_add(&b)
            .unwrap();
        assert!(max_diff(&linear(&l, &x, None).unwrap(), &plain) < 1e-5);
        let with_res = (&plain + &r).unwrap();
        assert!(max_diff(&linear(&l, &x, Some(&r)).unwrap(), &with_res) < 1e-5);
        let act = linear_act(&l, &x, None, Some(Act::Gelu)).unwrap();
        assert!(max_diff(&act, &plain.gelu_erf().unwrap()) < 1e-5);
        let no_bias = Linear::new(w.clone(), None);
        let plain = x.matmul(&w.t().unwrap()).unwrap();
        assert!(max_diff(&linear(&no_bias, &x, None).unwrap(), &plain) < 1e-5);
    }

    #[test]
    fn packed_attention_matches_the_tensor_version() {
        let dev = candle_core::Device::Cpu;
        let (heads, d) = (3, 4);
        let qkv = Tensor::randn(0f32, 1.0, (17, 3 * heads * d), &dev).unwrap();
        let mut segs = Segment::packed([5, 1, 11]);
        segs[2].keys = 7;
        for causal in [false, true] {
            let fast = attention(&qkv, &segs, heads, d, causal).unwrap();
            // the portable path, forced by going through f64
            let slow = attention(&qkv.to_dtype(DType::F64).unwrap(), &segs, heads, d, causal)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap();
            let diff = max_diff(&fast, &slow);
            assert!(diff < 1e-5, "causal {causal}: {diff}");
        }
    }

    #[test]
    fn padded_buckets_match_the_cpu_kernel_in_f32_and_bf16() {
        // lengths from 1 to 90: several buckets; gaps between segments; masked keys
        let (heads, d) = (2, 8);
        let lens = [3usize, 90, 1, 17, 18, 40, 41, 5, 64, 2];
        let mut segs = Vec::new();
        let mut start = 2;
        for (i, &len) in lens.iter().enumerate() {
            let keys = if i % 3 == 0 { len.div_ceil(2) } else { len };
            segs.push(Segment { start, len, keys });
            start += len + i % 2;
        }
        let tokens = start + 3;
        assert!(buckets(&segs, heads).len() > 2, "several buckets");
        // scores of a few units, as with the models' scaled queries
        let qkv = noise(tokens, 3 * heads * d, 0.6, 1);
        for (causal, window) in [(false, None), (true, None), (true, Some(7))] {
            let fast = attention_windowed(&qkv, &segs, heads, d, causal, window).unwrap();
            let padded =
                attention_padded(&qkv, &segs, heads, d, causal, window, ScoreBias::default())
                    .unwrap();
            assert_eq!(padded.dims(), fast.dims());
            let diff = |a: &Tensor| max_diff(a, &fast);
            assert!(
                diff(&padded) < 1e-5,
                "f32, causal {causal}: {}",
                diff(&padded)
            );
            // bf16 against f32 on the same (rounded) inputs: what is left is bf16's rounding
            // of scores, probabilities and products (8 bits of mantissa)
            let rounded = qkv.to_dtype(DType::BF16).unwrap();
            let want = attention_windowed(
                &rounded.to_dtype(DType::F32).unwrap(),
                &segs,
                heads,
                d,
                causal,
                window,
            )
            .unwrap();
            let bf16 = attention_padded(
                &rounded,
                &segs,
                heads,
                d,
                causal,
                window,
                ScoreBias::default(),
            )
            .unwrap();
            assert_eq!(bf16.dtype(), DType::BF16);
            let err = max_diff(&bf16, &want);
            eprintln!("bf16, causal {causal}: {err}");
            assert!(err < 0.02, "bf16, causal {causal}: {err}");
        }
    }

    #[test]
    fn score_biases_match_a_plain_softmax_on_every_path() {
        // ALiBi and per-key biases (-10000 on some keys, as on padding ids) over ragged
        // sequences: the fused CPU kernel, the padded batches (f32 and bf16) and the portable
        // path against softmax(q k^T + bias) v written out in f64
        let dev = candle_core::Device::Cpu;
        let (heads, d) = (3, 8);
        let lens = [4usize, 1, 23, 9, 24];
        let segs = Segment::packed(lens);
        let tokens: usize = lens.iter().sum();
        let slopes = [0.5f32, 0.25, 0.0625];
        let keys: Vec<f32> = (0..tokens)
            .map(|r| {
                if r % 5 == 3 {
                    -10000.0
                } else {
                    0.01 * r as f32
                }
            })
            .collect();
        let qkv = noise(tokens, 3 * heads * d, 0.6, 2);
        let x: Vec<Vec<f32>> = qkv.to_vec2().unwrap();
        let h = heads * d;
        let mut want = vec![0f32; tokens * h];
        for s in &segs {
            for hd in 0..heads {
                for i in 0..s.len {
                    let q = &x[s.start + i][hd * d..(hd + 1) * d];
                    let sc: Vec<f64> = (0..s.len)
                        .map(|j| {
                            let k = &x[s.start + j][h + hd * d..h + (hd + 1) * d];
                            let dot: f64 = q.iter().zip(k).map(|(a, b)| (a * b) as f64).sum();
                            dot - (slopes[hd] as f64) * (i as f64 - j as f64).abs()
                                + keys[s.start + j] as f64
                        })
                        .collect();
                    let max = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = sc.iter().map(|v| (v - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        let v: f64 = (0..s.len)
                            .map(|j| e[j] / sum * x[s.start + j][2 * h + hd * d + c] as f64)
                            .sum();
                        want[(s.start + i) * h + hd * d + c] = v as f32;
                    }
                }
            }
        }
        let want = Tensor::from_vec(want, (tokens, h), &dev).unwrap();
        let bias = ScoreBias {
            alibi: Some(&slopes),
            keys: Some(&keys),
        };
        let err = |got: &Tensor| max_diff(got, &want);
        let fused = attention_biased(&qkv, &segs, heads, d, bias).unwrap();
        assert!(err(&fused) < 1e-5, "fused: {}", err(&fused));
        let padded = attention_padded(&qkv, &segs, heads, d, false, None, bias).unwrap();
        assert!(err(&padded) < 1e-5, "padded: {}", err(&padded));
        let portable =
            attention_biased(&qkv.to_dtype(DType::F64).unwrap(), &segs, heads, d, bias).unwrap();
        assert!(err(&portable) < 1e-5, "portable: {}", err(&portable));
        let bf16 = attention_padded(
            &qkv.to_dtype(DType::BF16).unwrap(),
            &segs,
            heads,
            d,
            false,
            None,
            bias,
        )
        .unwrap();
        eprintln!("biased bf16: {}", err(&bf16));
        assert!(err(&bf16) < 0.03, "bf16: {}", err(&bf16));
        // without biases the same entry is plain attention; mismatched biases are errors
        let plain = attention_biased(&qkv, &segs, heads, d, ScoreBias::default()).unwrap();
        let unbiased = attention(&qkv, &segs, heads, d, false).unwrap();
        assert_eq!(max_diff(&plain, &unbiased), 0.0);
        let short = ScoreBias {
            alibi: Some(&slopes[..2]),
            keys: None,
        };
        assert!(attention_biased(&qkv, &segs, heads, d, short).is_err());
        let few_keys = ScoreBias {
            alibi: None,
            keys: Some(&keys[1..]),
        };
        assert!(attention_biased(&qkv, &segs, heads, d, few_keys).is_err());
    }

    #[test]
    fn equal_sequences_run_in_place_and_others_are_gathered() {
        // images' patches: sequences of one length, one after the other: the padded path takes
        // their rows as they lie (no gathers, no reordering) and gives the fused kernel's context
        let (heads, d) = (4, 8);
        let qkv = noise(5 * 9, 3 * heads * d, 0.6, 3);
        let segs = Segment::packed([9; 5]);
        let plan = PaddedPlan::new(&segs, heads, false, None, ScoreBias::default(), &qkv).unwrap();
        assert_eq!(plan.buckets.len(), 1);
        assert!(matches!(plan.buckets[0].gather, Gather::Rows { start: 0 }));
        assert!(plan.buckets[0].keep.is_none() && plan.buckets[0].masks.is_empty());
        assert!(plan.order.is_none());
        let want = attention(&qkv, &segs, heads, d, false).unwrap();
        let got = plan.run(&qkv, heads, d).unwrap();
        assert!(max_diff(&got, &want) < 1e-5, "{}", max_diff(&got, &want));
        // the same lengths with a row between two of them, or a masked key: gathered
        let mut gap = Segment::packed([9; 5]);
        for s in &mut gap[3..] {
            s.start += 1;
        }
        let wide = noise(5 * 9 + 1, 3 * heads * d, 0.6, 4);
        let mut masked = segs.clone();
        masked[2].keys = 4;
        for (segs, qkv) in [(&gap, &wide), (&masked, &qkv)] {
            let plan =
                PaddedPlan::new(segs, heads, false, None, ScoreBias::default(), qkv).unwrap();
            assert!(matches!(plan.buckets[0].gather, Gather::Index { .. }));
            let want = attention(qkv, segs, heads, d, false).unwrap();
            let got = plan.run(qkv, heads, d).unwrap();
            assert!(max_diff(&got, &want) < 1e-5, "{}", max_diff(&got, &want));
        }
        // a row outside every segment gets a zero context
        let gap_row = Tensor::zeros((1, heads * d), DType::F32, &candle_core::Device::Cpu).unwrap();
        let got =
            attention_padded(&wide, &gap, heads, d, false, None, ScoreBias::default()).unwrap();
        assert_eq!(max_diff(&got.narrow(0, 27, 1).unwrap(), &gap_row), 0.0);
        // no tokens at all
        let empty =
            Tensor::zeros((0, 3 * heads * d), DType::F32, &candle_core::Device::Cpu).unwrap();
        let got = attention_padded(&empty, &[], heads, d, false, None, ScoreBias::default());
        assert_eq!(got.unwrap().dims(), &[0, heads * d]);
    }

    /// flash-attn's variable-length forward as its documentation states it ([`FlashLayout`]'s
    /// "semantics relied on"), in f64 on the CPU: sequence `b` has the query rows
    /// `cu_q[b]..cu_q[b + 1]` of `qkv` and the key / value rows `cu_k[b]..cu_k[b + 1]` of the
    /// packed keys (`kv_rows` of `qkv`, or all of it); softmax scale 1.
    fn flash_varlen_model(
        qkv: &Tensor,
        l: &FlashLayout,
        heads: usize,
        d: usize,
        slopes: Option<&[f32]>,
    ) -> Tensor {
        let rows: Vec<Vec<f32>> = qkv.to_dtype(DType::F32).unwrap().to_vec2().unwrap();
        let kv: Vec<&Vec<f32>> = match &l.kv_rows {
            Some(r) => r.iter().map(|&r| &rows[r as usize]).collect(),
            None => rows.iter().collect(),
        };
        let h = heads * d;
        let mut out = vec![vec![0f32; h]; rows.len()];
        for b in 0..l.cu_q.len() - 1 {
            let (q0, q1) = (l.cu_q[b] as usize, l.cu_q[b + 1] as usize);
            let (k0, k1) = (l.cu_k[b] as usize, l.cu_k[b + 1] as usize);
            let (lq, lk) = ((q1 - q0) as i64, (k1 - k0) as i64);
            for i in 0..lq {
                let shift = i + lk - lq;
                let visible = |j: i64| {
                    l.left.is_none_or(|w| j >= shift - w as i64)
                        && l.right.is_none_or(|w| j <= shift + w as i64)
                };
                for hd in 0..heads {
                    let q = &rows[q0 + i as usize][hd * d..(hd + 1) * d];
                    let scores: Vec<(usize, f64)> = (0..lk)
                        .filter(|&j| visible(j))
                        .map(|j| {
                            let k = &kv[k0 + j as usize][h + hd * d..h + (hd + 1) * d];
                            let dot: f64 =
                                q.iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum();
                            let alibi =
                                slopes.map_or(0.0, |s| -(s[hd] as f64) * (shift - j).abs() as f64);
                            (j as usize, dot + alibi)
                        })
                        .collect();
                    let top = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                    let total: f64 = scores.iter().map(|s| (s.1 - top).exp()).sum();
                    for (j, sc) in &scores {
                        let w = (sc - top).exp() / total;
                        let v = &kv[k0 + j][2 * h + hd * d..2 * h + (hd + 1) * d];
                        for (o, x) in out[q0 + i as usize][hd * d..(hd + 1) * d].iter_mut().zip(v) {
                            *o += (w * *x as f64) as f32;
                        }
                    }
                }
            }
        }
        Tensor::new(out, &candle_core::Device::Cpu).unwrap()
    }

    #[test]
    fn flash_layout_gives_the_padded_paths_context() {
        // what the flash path hands flash attention (offsets, key rows, window), run through
        // a model of flash attention's documented masking and ALiBi, gives the context of the
        // padded path, the one checked against the published models
        let (heads, d) = (2, 8);
        let lens = [5, 9, 1, 12, 3];
        let tokens: usize = lens.iter().sum();
        let packed = Segment::packed(lens);
        let mut masked = packed.clone();
        masked[1].keys = 4;
        masked[3].keys = 7;
        let slopes = [0.5f32, 0.125];
        let alibi = ScoreBias {
            alibi: Some(&slopes),
            keys: None,
        };
        let zeros = vec![0f32; tokens];
        let alibi_zero_keys = ScoreBias {
            alibi: Some(&slopes),
            keys: Some(&zeros),
        };
        let none = ScoreBias::default();
        let qkv = noise(tokens, 3 * heads * d, 0.7, 31);
        for (name, segs, causal, window, bias) in [
            ("bidirectional", &packed, false, None, none),
            ("masked keys", &masked, false, None, none),
            ("causal", &packed, true, None, none),
            ("sliding window", &packed, true, Some(3), none),
            ("ALiBi", &packed, false, None, alibi),
            (
                "ALiBi, zero key biases",
                &packed,
                false,
                None,
                alibi_zero_keys,
            ),
        ] {
            let layout = FlashLayout::new(segs, tokens, d, causal, window, bias)
                .unwrap_or_else(|| panic!("{name}: no flash layout"));
            let got = flash_varlen_model(&qkv, &layout, heads, d, bias.alibi);
            let want = attention_padded(&qkv, segs, heads, d, causal, window, bias).unwrap();
            let diff = max_diff(&got, &want);
            assert!(diff < 1e-5, "{name}: max diff {diff}");
        }
        // the layout itself, for the sequences with masked keys
        let l = FlashLayout::new(&masked, tokens, d, false, None, none).unwrap();
        assert_eq!(l.cu_q, [0, 5, 14, 15, 27, 30]);
        assert_eq!(l.cu_k, [0, 5, 9, 10, 17, 20]);
        let rows: Vec<u32> = [0..5, 5..9, 14..15, 15..22, 27..30]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(l.kv_rows.as_deref(), Some(&rows[..]));
        assert_eq!((l.max_q, l.max_k, l.left, l.right), (12, 7, None, None));
        // where flash attention cannot give Sift's result, the padded path runs instead
        let mut gap = packed.clone();
        for s in &mut gap[2..] {
            s.start += 1;
        }
        let mut empty = Segment::packed([5, 0, 9]);
        empty[1].keys = 0;
        let key_bias: Vec<f32> = (0..tokens)
            .map(|r| if r == 3 { -10000.0 } else { 0.0 })
            .collect();
        let keyed = ScoreBias {
            alibi: None,
            keys: Some(&key_bias),
        };
        for (name, segs, tokens, d, causal, bias) in [
            ("a row between sequences", &gap, tokens + 1, d, false, none),
            ("a row after the last", &packed, tokens + 1, d, false, none),
            ("an empty sequence", &empty, 14, d, false, none),
            ("key biases", &packed, tokens, d, false, keyed),
            ("causal with masked keys", &masked, tokens, d, true, none),
            ("ALiBi with masked keys", &masked, tokens, d, false, alibi),
            ("a head size of 12", &packed, tokens, 12, false, none),
            ("a head size of 520", &packed, tokens, 520, false, none),
        ] {
            assert!(
                FlashLayout::new(segs, tokens, d, causal, None, bias).is_none(),
                "{name}"
            );
        }
    }

    #[test]
    fn one_plan_serves_every_layer() {
        // the padded path's preparation, made on the first run, gives every later layer (other
        // inputs, same segments) what a fresh run gives it; another dtype gets its own
        let (heads, d) = (2, 8);
        let mut segs = Segment::packed([7, 30, 2, 31, 12]);
        segs[1].keys = 20;
        for s in &mut segs[3..] {
            s.start += 2;
        }
        let tokens = segs[4].start + segs[4].len + 1;
        let slopes = [0.5f32, 0.125];
        let keys: Vec<f32> = (0..tokens)
            .map(|r| if r % 7 == 1 { -10000.0 } else { 0.0 })
            .collect();
        let bias = ScoreBias {
            alibi: Some(&slopes),
            keys: Some(&keys),
        };
        let windowed = Attention::new(&segs, heads, d).windowed(Some(5));
        let biased = Attention::new(&segs, heads, d).biased(bias);
        for (layer, dtype) in [
            (0, DType::BF16),
            (1, DType::BF16),
            (2, DType::F64),
            (3, DType::BF16),
        ] {
            let qkv = noise(tokens, 3 * heads * d, 0.6, 10 + layer)
                .to_dtype(dtype)
                .unwrap();
            let fresh =
                attention_padded(&qkv, &segs, heads, d, true, Some(5), ScoreBias::default())
                    .unwrap();
            assert_eq!(
                max_diff(&windowed.run(&qkv).unwrap(), &fresh),
                0.0,
                "layer {layer}"
            );
            let fresh = attention_padded(&qkv, &segs, heads, d, false, None, bias).unwrap();
            assert_eq!(
                max_diff(&biased.run(&qkv).unwrap(), &fresh),
                0.0,
                "layer {layer}"
            );
        }
        // a run with the wrong number of rows is refused, not served from the plan
        let short = noise(tokens - 2, 3 * heads * d, 0.6, 20)
            .to_dtype(DType::BF16)
            .unwrap();
        assert!(windowed.run(&short).is_err());
    }

    #[test]
    fn buckets_keep_padding_and_score_memory_bounded() {
        let segs = Segment::packed([10, 11, 12, 100, 101, 1000]);
        let groups = buckets(&segs, 4);
        assert_eq!(groups, vec![vec![0, 1, 2], vec![3, 4], vec![5]]);
        // a long sequence is never batched past the score budget
        let long = Segment::packed([4000, 4000, 4000]);
        let groups = buckets(&long, 16);
        assert_eq!(groups, vec![vec![0], vec![1], vec![2]]);
        // every segment lands in exactly one bucket; empty ones in none
        let mixed = Segment::packed([0, 5, 0, 7]);
        let mut all: Vec<usize> = buckets(&mixed, 1).concat();
        all.sort();
        assert_eq!(all, vec![1, 3]);
    }

    #[test]
    fn causal_attention_ignores_later_tokens() {
        let dev = candle_core::Device::Cpu;
        // one head of size 2, a sequence of 3 tokens; token 0 must see only itself
        let qkv = Tensor::from_vec(
            vec![
                1f32, 0., 1., 0., 5., 6., //
                0., 1., 0., 1., 7., 8., //
                1., 1., 1., 1., 9., 10.,
            ],
            (3, 6),
            &dev,
        )
        .unwrap();
        let seg = Segment::packed([3]);
        let ctx = attention(&qkv, &seg, 1, 2, true).unwrap();
        let row0: Vec<f32> = ctx.get(0).unwrap().to_vec1().unwrap();
        assert_eq!(row0, vec![5., 6.]);
        let full = attention(&qkv, &seg, 1, 2, false).unwrap();
        let row0: Vec<f32> = full.get(0).unwrap().to_vec1().unwrap();
        assert!(row0[0] > 5.5);
    }

    #[test]
    fn blocked_attention_matches_the_generic_path() {
        // sequences long enough for several row blocks; one with masked trailing keys
        let (heads, d) = (2, 8);
        let segments = [
            Segment {
                start: 0,
                len: 700,
                keys: 700,
            },
            Segment {
                start: 700,
                len: 800,
                keys: 600,
            },
        ];
        let tokens = 1500;
        let vals: Vec<f32> = (0..tokens * 3 * heads * d)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 0.8)
            .collect();
        let dev = candle_core::Device::Cpu;
        let qkv = Tensor::from_vec(vals, (tokens, 3 * heads * d), &dev).unwrap();
        // a sliding window shorter than a block and one longer than the sequences
        for (causal, window) in [
            (false, None),
            (true, None),
            (true, Some(100)),
            (true, Some(5000)),
        ] {
            let fast = attention_windowed(&qkv, &segments, heads, d, causal, window).unwrap();
            // f64 takes the generic (candle ops) path
            let slow = attention_windowed(
                &qkv.to_dtype(DType::F64).unwrap(),
                &segments,
                heads,
                d,
                causal,
                window,
            )
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
            let diff = (fast - slow)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(
                diff < 1e-5,
                "causal {causal}, window {window:?}: max diff {diff}"
            );
        }
        let windowed = attention_windowed(&qkv, &segments, heads, d, true, Some(100)).unwrap();
        let full = attention(&qkv, &segments, heads, d, true).unwrap();
        let moved = (windowed - full).unwrap().abs().unwrap().max_all().unwrap();
        assert!(
            moved.to_scalar::<f32>().unwrap() > 1e-3,
            "the window changes the context"
        );
        assert!(attention_windowed(&qkv, &segments, heads, d, false, Some(4)).is_err());
    }
}
