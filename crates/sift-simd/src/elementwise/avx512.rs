//! Hand-written AVX-512 versions of the hottest element-wise kernels of [`super`], for
//! what the compiler does not find from the portable loops: exact GELU by a rational erf
//! whose division is `vrcp14ps` and one Newton step, `2^n` by `vscalefps`, and the
//! bfloat16 softmax in three passes (maximum; exponential, stored and summed; normalised and
//! rounded by `vcvtne2ps2bf16`), tails through masks.
use std::arch::x86_64::*;

const LOG2E: f32 = std::f32::consts::LOG2_E;

/// e^x in 16 lanes for probabilities rounded to bfloat16 (steps of 2^-8): `2^(x log2 e)`,
/// the fraction's power by a degree-4 polynomial fitted at Chebyshev nodes on [-1/2, 1/2]
/// (relative error 3.7e-6, within a bfloat16 step: the test
/// `rounded_softmax_is_within_a_bf16_step_of_the_softmax_rounded`), inputs below -87.3 clamped there (x is a score minus the row's
/// maximum: at most 0).
#[inline]
#[target_feature(enable = "avx512f")]
fn exp16_bf16(x: __m512) -> __m512 {
    let t = _mm512_mul_ps(
        _mm512_max_ps(x, _mm512_set1_ps(-87.3)),
        _mm512_set1_ps(LOG2E),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm512_sub_ps(t, n);
    let mut p = _mm512_set1_ps(0.009_676_037);
    for c in [0.055_922_035, 0.240_221_07, 0.693_121, 1.000_000_1] {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// Exact GELU `x Φ(x)` in 16 lanes: erf as the odd degree-13 over even degree-8 rational
/// function of Eigen's and XLA's f32 `erf` (inputs clamped to [-4, 4], where erf is ±1 in
/// f32), the division by `vrcp14ps` and one Newton step. Absolute error of erf below 5e-7
/// in f32 (the test `gelu_lanes_match_erf_in_double_precision`): 21 instructions where
/// Abramowitz & Stegun 7.1.26 with an exponential (as `erf`, the portable
/// loops) takes about 35, the only part of a bfloat16 GELU layer's epilogue that is not
/// moving memory.
#[inline]
#[target_feature(enable = "avx512f")]
fn gelu16(x: __m512) -> __m512 {
    const ALPHA: [f32; 7] = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_600_2e-3,
        -1.609_603_3e-2,
    ];
    const BETA: [f32; 5] = [
        -1.456_607_2e-5,
        -2.133_740_6e-4,
        -1.682_827e-3,
        -7.373_329_2e-3,
        -1.426_473_9e-2,
    ];
    let z = _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
    let z = _mm512_max_ps(_mm512_min_ps(z, _mm512_set1_ps(4.0)), _mm512_set1_ps(-4.0));
    let z2 = _mm512_mul_ps(z, z);
    let mut p = _mm512_set1_ps(ALPHA[0]);
    for c in &ALPHA[1..] {
        p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(*c));
    }
    p = _mm512_mul_ps(p, z);
    let mut q = _mm512_set1_ps(BETA[0]);
    for c in &BETA[1..] {
        q = _mm512_fmadd_ps(q, z2, _mm512_set1_ps(*c));
    }
    // 1 / q (q <= -0.0142): 14 bits, then one Newton step (about 2^-28 relative)
    let r = _mm512_rcp14_ps(q);
    let r = _mm512_mul_ps(r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(2.0)));
    let erf = _mm512_mul_ps(p, r);
    let half = _mm512_mul_ps(x, _mm512_set1_ps(0.5));
    _mm512_fmadd_ps(half, erf, half)
}

/// The lanes of a 16-value step that hold the first `n` values.
#[inline]
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 { !0 } else { (1u16 << n) - 1 }
}

/// Exact GELU over `xs` in place.
///
/// # Safety
/// The processor must have AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gelu(xs: &mut [f32]) {
    let p = xs.as_mut_ptr();
    for i in (0..xs.len()).step_by(16) {
        let m = lanes(xs.len() - i);
        // SAFETY: the mask covers xs[i..min(i + 16, len)], in bounds.
        unsafe {
            let x = _mm512_maskz_loadu_ps(m, p.add(i));
            _mm512_mask_storeu_ps(p.add(i), m, gelu16(x));
        }
    }
}

/// [`super::softmax_row_bf16`]: `row[..visible]` left holding the unnormalised
/// exponentials, `out[..visible]` the probabilities rounded to bfloat16 (to nearest, ties
/// to even), `out[visible..]` zero.
///
/// # Safety
/// The processor must have AVX-512F, AVX512-BW and AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn softmax_row_bf16(row: &mut [f32], visible: usize, out: &mut [u16]) {
    let v = visible.min(row.len()).min(out.len());
    let p = row.as_mut_ptr();
    // SAFETY: every whole load and store covers row[i..i + 16] with i + 16 <= v, every
    // masked one row[i..min(i + 16, v)] or out[i..min(i + 32, v)], in bounds.
    unsafe {
        // four running maxima and two sums: each pass's chain of dependent instructions
        // split so that their latencies overlap
        let mut mx = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
        let whole = v / 64 * 64;
        for i in (0..whole).step_by(64) {
            for (j, m) in mx.iter_mut().enumerate() {
                *m = _mm512_max_ps(*m, _mm512_loadu_ps(p.add(i + 16 * j)));
            }
        }
        for i in (whole..v).step_by(16) {
            mx[0] = _mm512_max_ps(mx[0], _mm512_mask_loadu_ps(mx[0], lanes(v - i), p.add(i)));
        }
        let m01 = _mm512_max_ps(mx[0], mx[1]);
        let m23 = _mm512_max_ps(mx[2], mx[3]);
        let max = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(m01, m23)));
        let mut sum = [_mm512_setzero_ps(); 2];
        let pairs = v / 32 * 32;
        for i in (0..pairs).step_by(32) {
            for (j, s) in sum.iter_mut().enumerate() {
                let at = p.add(i + 16 * j);
                let e = exp16_bf16(_mm512_sub_ps(_mm512_loadu_ps(at), max));
                _mm512_storeu_ps(at, e);
                *s = _mm512_add_ps(*s, e);
            }
        }
        for i in (pairs..v).step_by(16) {
            let m = lanes(v - i);
            let e = exp16_bf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), max));
            _mm512_mask_storeu_ps(p.add(i), m, e);
            sum[0] = _mm512_mask_add_ps(sum[0], m, sum[0], e);
        }
        let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(_mm512_add_ps(sum[0], sum[1])));
        let o = out.as_mut_ptr();
        for i in (0..v).step_by(32) {
            let (m0, m1) = (lanes(v - i), lanes((v - i).saturating_sub(16)));
            let lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, p.add(i)), inv);
            let hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, p.wrapping_add(i + 16)), inv);
            let b = _mm512_cvtne2ps_pbh(hi, lo);
            let mask = (m0 as u32) | ((m1 as u32) << 16);
            _mm512_mask_storeu_epi16(
                o.add(i).cast(),
                mask,
                std::mem::transmute::<__m512bh, __m512i>(b),
            );
        }
    }
    out[v..].fill(0);
}

/// A packed layer's rounded output in one pass over each cached block: `src + bias` (row
/// `i` at `src[i * src_ld..]`, `bias.len()` values), then exact GELU when `gelu`, rounded
/// to bfloat16 (to nearest, ties to even) into row `i` of `out` at `out[i * out_ld..]`,
/// for every row both hold whole; `src` is left as it was.
///
/// # Safety
/// The processor must have AVX-512F, AVX512-BW and AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn bias_act_round(
    src: &[f32],
    src_ld: usize,
    bias: &[f32],
    gelu: bool,
    out: &mut [u16],
    out_ld: usize,
) {
    let n = bias.len();
    if n == 0 || src_ld < n || out_ld < n {
        return;
    }
    let whole = |len: usize, ld: usize| if len < n { 0 } else { (len - n) / ld + 1 };
    let rows = whole(src.len(), src_ld).min(whole(out.len(), out_ld));
    let b = bias.as_ptr();
    for r in 0..rows {
        let (p, o) = (src[r * src_ld..].as_ptr(), out[r * out_ld..].as_mut_ptr());
        for i in (0..n).step_by(32) {
            let (m0, m1) = (lanes(n - i), lanes((n - i).saturating_sub(16)));
            // SAFETY: the masks cover values i..min(i + 32, n) of row r of src and out
            // (whole rows: `rows`) and of bias.
            unsafe {
                let mut lo = _mm512_add_ps(
                    _mm512_maskz_loadu_ps(m0, p.add(i)),
                    _mm512_maskz_loadu_ps(m0, b.add(i)),
                );
                let mut hi = _mm512_add_ps(
                    _mm512_maskz_loadu_ps(m1, p.wrapping_add(i + 16)),
                    _mm512_maskz_loadu_ps(m1, b.wrapping_add(i + 16)),
                );
                if gelu {
                    lo = gelu16(lo);
                    hi = gelu16(hi);
                }
                let v = _mm512_cvtne2ps_pbh(hi, lo);
                _mm512_mask_storeu_epi16(
                    o.add(i).cast(),
                    (m0 as u32) | ((m1 as u32) << 16),
                    std::mem::transmute::<__m512bh, __m512i>(v),
                );
            }
        }
    }
}
