//! Sift's hand-written kernels, and the one check of what the processor offers them
//! ([`cpu`], detected once at run time): the vector dot product every dense search runs on,
//! the bfloat16 matrix products ([`bf16`]) and the element-wise kernels of the networks'
//! layers ([`elementwise`]).
//!
//! The crates are built for baseline x86-64; the hot loops are also compiled for AVX2/FMA
//! and AVX-512 (AVX512-BF16, AMX) and the best version the processor has is chosen from
//! [`cpu`]. Every `#[target_feature]` function of the workspace is in this crate, behind a
//! safe function that checks [`cpu`] first.
//!
//! ```
//! let a = [1.0f32, 2.0, 3.0];
//! assert_eq!(sift_simd::dot(&a, &a), 14.0);
//! ```
#![warn(missing_docs)]

pub mod bf16;
mod cpu;
pub mod elementwise;
pub mod mem;

pub use cpu::{Cpu, Level, cpu, level};

/// Inner product of two equally long vectors: explicit AVX-512 or AVX2/FMA kernels with four
/// independent accumulators where the processor has them ([`level`]), else 16 accumulators
/// so the portable loop vectorises.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match level() {
        // SAFETY: the features were detected.
        Level::Avx512 => return unsafe { dot_avx512(a, b) },
        // SAFETY: the features were detected.
        Level::Avx2 => return unsafe { dot_avx2(a, b) },
        Level::Baseline => {}
    }
    dot_portable(a, b)
}

/// Four independent 8-wide FMA accumulators (32 values per step) so the additions do not
/// wait on each other.
///
/// # Safety
///
/// The processor must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: every load reads 8 values at i + 8 * j + 8 <= n.
    unsafe {
        let mut s = [_mm256_setzero_ps(); 4];
        while i + 32 <= n {
            for (j, acc) in s.iter_mut().enumerate() {
                let o = i + 8 * j;
                *acc =
                    _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(o)), _mm256_loadu_ps(pb.add(o)), *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            s[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s[0]);
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3]));
        let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        let mut sum = _mm_cvtss_f32(h);
        while i < n {
            sum += a[i] * b[i];
            i += 1;
        }
        sum
    }
}

/// Four independent 16-wide FMA accumulators (64 values per step).
///
/// # Safety
///
/// The processor must have AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: every load reads 16 values at i + 16 * j + 16 <= n.
    unsafe {
        let mut s = [_mm512_setzero_ps(); 4];
        while i + 64 <= n {
            for (j, acc) in s.iter_mut().enumerate() {
                let o = i + 16 * j;
                *acc =
                    _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(o)), _mm512_loadu_ps(pb.add(o)), *acc);
            }
            i += 64;
        }
        while i + 16 <= n {
            s[0] = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s[0]);
            i += 16;
        }
        let v = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
        let mut sum = _mm512_reduce_add_ps(v);
        while i < n {
            sum += a[i] * b[i];
            i += 1;
        }
        sum
    }
}

#[inline(always)]
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_double_precision_sum_at_every_length() {
        for n in [
            0usize, 1, 7, 8, 15, 16, 31, 33, 63, 64, 65, 100, 384, 1000, 1152,
        ] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
                .collect();
            let b: Vec<f32> = (0..n)
                .map(|i| ((i * 104_729) % 97) as f32 / 48.0 - 1.0)
                .collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            for got in [dot(&a, &b), dot_portable(&a, &b)] {
                assert!(
                    (got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "n {n}: {got} vs {want}"
                );
            }
        }
    }
}
