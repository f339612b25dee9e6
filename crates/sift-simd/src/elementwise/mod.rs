//! The element-wise and row-wise kernels of the networks' layers: activations, the softmax
//! of a row of scores (also rounded to bfloat16), layer norm with the residual and bias added
//! in the same pass, bias and scale rows, and a packed layer's output with its bias and
//! activation rounded to bfloat16 in one pass. Each is a safe function that runs the
//! hand-written AVX-512 kernel ([`avx512`](self)'s) or the portable loops compiled for
//! AVX-512, for AVX2/FMA or for baseline x86-64, whichever the processor has ([`crate::cpu`];
//! the loops are written so the compiler vectorises them).

/// The activation functions the kernels apply (Hugging Face configs' `hidden_act`).
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

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(test)]
mod tests;

/// erf with absolute error below 1.5e-7 (Abramowitz & Stegun 7.1.26).
#[inline]
fn erf(x: f32) -> f32 {
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
fn exp_approx(x: f32) -> f32 {
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
    // SAFETY: x is clamped, so n is an integer in [-126, 127] and n + 127 fits an i32 (the
    // unchecked conversion is one vector instruction; `as` saturates lane by lane)
    let e = unsafe { (n + 127.0).to_int_unchecked::<i32>() };
    y * f32::from_bits((e << 23) as u32)
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
    crate::cpu().avx2_fma
}

/// Whether the AVX-512 versions of the element-wise kernels can run (with AVX2 and FMA, as
/// the portable loops compiled for AVX-512 also use them).
#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    crate::level() == crate::Level::Avx512
}

/// Whether the hand-written AVX512-BF16 kernels can run (AVX-512 as [`has_avx512`], and
/// AVX512-BF16 with the byte/word instructions).
#[cfg(target_arch = "x86_64")]
fn has_avx512_bf16() -> bool {
    has_avx512() && crate::cpu().dot_bf16()
}

/// Defines `$name`, which runs `$portable` compiled for AVX-512, for AVX2/FMA or for
/// baseline x86-64, whichever the processor has (the portable loops are written so the
/// compiler vectorises them; the crate itself is built for baseline x86-64).
macro_rules! simd_dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) => $portable:ident) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
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
    /// Applies `act` to every value (the portable loops; see [`act_slice`]).
    fn act_slice_loops(act: Act, xs: &mut [f32]) => act_slice_portable
);

/// Applies `act` to every value.
pub fn act_slice(act: Act, xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if act == Act::Gelu && has_avx512() {
        // SAFETY: AVX-512F was detected.
        return unsafe { avx512::gelu(xs) };
    }
    act_slice_loops(act, xs)
}

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
    pub fn softmax_row(row: &mut [f32], visible: usize) => softmax_row_portable
);

simd_dispatch!(
    /// [`softmax_row_bf16`] in the portable loops.
    fn softmax_row_bf16_loops(row: &mut [f32], visible: usize, out: &mut [u16]) => softmax_row_bf16_portable
);

/// [`softmax_row`] with the probabilities rounded to bfloat16 bits (to nearest, ties to
/// even) into `out`, as long as `row` (zeros past `visible`), for products on bfloat16
/// tiles: one pass writes what a normalising pass and a rounding pass would. `row` is left
/// holding the unnormalised exponentials.
pub fn softmax_row_bf16(row: &mut [f32], visible: usize, out: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512_bf16() {
        // SAFETY: AVX-512F, AVX512-BW and AVX512-BF16 were detected.
        return unsafe { avx512::softmax_row_bf16(row, visible, out) };
    }
    softmax_row_bf16_loops(row, visible, out)
}

#[inline(always)]
fn softmax_row_bf16_portable(row: &mut [f32], visible: usize, out: &mut [u16]) {
    let visible = visible.min(row.len());
    let inv = 1.0 / exp_in_place(&mut row[..visible], exp_fma);
    let (head, tail) = out.split_at_mut(visible.min(out.len()));
    for (o, &x) in head.iter_mut().zip(&row[..visible]) {
        // finite probabilities in [0, 1]: round to nearest even without a NaN branch
        let b = (x * inv).to_bits();
        *o = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
    }
    tail.iter_mut().for_each(|o| *o = 0);
}

/// e^x to about 3e-6 relative error, for probabilities rounded to bfloat16 (2^-9): the
/// range reduction of [`exp_approx`], a degree-5 Taylor polynomial, every step a fused
/// multiply-add (compiled where the processor has FMA: the AVX2 and AVX-512 paths; the
/// baseline one computes the same values more slowly).
#[inline(always)]
fn exp_fma(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.3);
    let n = x.mul_add(LOG2E, 0.5).floor();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let mut p = 1.0f32 / 120.0;
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    // SAFETY: as in `exp_approx`: n is an integer in [-126, 127]
    let e = unsafe { (n + 127.0).to_int_unchecked::<i32>() };
    p * f32::from_bits((e << 23) as u32)
}

/// `exp(x - max)` over `head` in place, with `exp`; returns the sum.
#[inline(always)]
fn exp_in_place(head: &mut [f32], exp: impl Fn(f32) -> f32) -> f32 {
    // the maximum and the sum in 16 lanes (a strict left-to-right f32 fold is one value per
    // add latency and does not vectorise), then across the lanes
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = head.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = rest
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    head.iter_mut().for_each(|x| *x = exp(*x - max));
    lanes_sum(head, |x| x)
}

#[inline(always)]
fn softmax_row_portable(row: &mut [f32], visible: usize) {
    let (head, tail) = row.split_at_mut(visible.min(row.len()));
    let inv = 1.0 / exp_in_place(head, exp_approx);
    head.iter_mut().for_each(|x| *x *= inv);
    tail.iter_mut().for_each(|x| *x = 0.0);
}

simd_dispatch!(
    /// Layer norm of every `weight.len()`-long row of `rows + add + residual` in place:
    /// `(x - mean) / sqrt(var + eps) * weight + bias`, the variance that of the centred
    /// values (two passes over a cached row, as PyTorch's is computed, not `E[x²] - mean²`);
    /// `add` (a linear layer's bias, or empty) is added to every row and `residual` (as long
    /// as `rows`, or empty) value by value first, in the same pass over each cached row.
    pub fn add_layer_norm_rows(rows: &mut [f32], add: &[f32], residual: &[f32], weight: &[f32], bias: &[f32], eps: f32) => add_layer_norm_rows_portable
);

#[inline(always)]
fn add_layer_norm_rows_portable(
    rows: &mut [f32],
    add: &[f32],
    residual: &[f32],
    weight: &[f32],
    bias: &[f32],
    eps: f32,
) {
    let n = weight.len();
    if n == 0 {
        return;
    }
    for (i, row) in rows.chunks_exact_mut(n).enumerate() {
        if add.len() == n {
            row.iter_mut().zip(add).for_each(|(x, a)| *x += a);
        }
        if let Some(r) = residual.get(i * n..(i + 1) * n) {
            row.iter_mut().zip(r).for_each(|(x, r)| *x += r);
        }
        let mean = lanes_sum(row, |x| x) / n as f32;
        let var = lanes_sum(row, |x| (x - mean) * (x - mean)) / n as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((x, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *x = (*x - mean) * inv * w + b;
        }
    }
}

/// The sum of `f(x)` over `xs` in 16 lanes, then across them (vectorises; a strict
/// left-to-right f32 fold does not).
#[inline(always)]
fn lanes_sum(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; 16];
    let chunks = xs.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in lanes.iter_mut().zip(c) {
            *a += f(x);
        }
    }
    lanes.iter().sum::<f32>() + rest.iter().map(|&x| f(x)).sum::<f32>()
}

simd_dispatch!(
    /// Adds `v` to every `v.len()`-long row of `rows`.
    pub fn add_to_rows(rows: &mut [f32], v: &[f32]) => add_to_rows_portable
);

#[inline(always)]
fn add_to_rows_portable(rows: &mut [f32], v: &[f32]) {
    for row in rows.chunks_exact_mut(v.len().max(1)) {
        row.iter_mut().zip(v).for_each(|(o, b)| *o += b);
    }
}

simd_dispatch!(
    /// Multiplies every `v.len()`-long row of `rows` by `v`, value by value.
    pub fn scale_rows(rows: &mut [f32], v: &[f32]) => scale_rows_portable
);

#[inline(always)]
fn scale_rows_portable(rows: &mut [f32], v: &[f32]) {
    for row in rows.chunks_exact_mut(v.len().max(1)) {
        row.iter_mut().zip(v).for_each(|(o, s)| *o *= s);
    }
}

simd_dispatch!(
    /// `xs[i] += ys[i]` (over the shorter of the two).
    pub fn add_values(xs: &mut [f32], ys: &[f32]) => add_values_portable
);

#[inline(always)]
fn add_values_portable(xs: &mut [f32], ys: &[f32]) {
    xs.iter_mut().zip(ys).for_each(|(x, y)| *x += y);
}

/// A packed layer's output rounded to bfloat16 into `out` (as long as `rows`): `rows + bias`
/// (every `bias.len()`-long row), then `act`, then the rounding, in one AVX-512 pass over
/// each row (`rows` left as it was). Returns false, doing nothing, where it does not fuse
/// them (no AVX512-BF16, an empty bias, another activation than exact GELU): the caller runs
/// its own passes.
pub fn bias_act_round(rows: &[f32], bias: &[f32], act: Option<Act>, out: &mut [u16]) -> bool {
    if out.len() < rows.len() {
        return false;
    }
    let n = bias.len();
    bias_act_round_rows(rows, n, bias, act, out, n)
}

/// [`bias_act_round`] on rows apart: row `i` of `src` at `src[i * src_ld..]`, its `bias.len()`
/// values rounded into `out[i * out_ld..]`, for every row both hold whole.
pub fn bias_act_round_rows(
    src: &[f32],
    src_ld: usize,
    bias: &[f32],
    act: Option<Act>,
    out: &mut [u16],
    out_ld: usize,
) -> bool {
    if !bias_act_fuses(bias, act) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: AVX-512F, AVX512-BW and AVX512-BF16 were detected (`bias_act_fuses`).
        unsafe { avx512::bias_act_round(src, src_ld, bias, act.is_some(), out, out_ld) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (src, src_ld, out, out_ld);
        false
    }
}

/// Whether [`bias_act_round`] fuses `bias` and `act` on this processor.
pub fn bias_act_fuses(bias: &[f32], act: Option<Act>) -> bool {
    if bias.is_empty() || !matches!(act, None | Some(Act::Gelu)) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512_bf16() {
        return true;
    }
    false
}
