//! [`Kernel::F32`](super::Kernel::F32): the weights widened to f32 (exact) and multiplied with
//! the unrounded activations, on the vector instructions of the processor's [`Level`](crate::Level): the
//! AVX-512F kernel ([`super::avx512`]), or the portable loops compiled for AVX2/FMA or
//! baseline x86-64.
use super::block::{Block, row_tiles};
use super::convert::bf16_to_f32;
use super::pack::PANEL;

/// Row tiles of one panel block with the weights widened to f32, on the vector
/// instructions of `level`.
///
/// # Safety
/// As [`rows_dot_bf16`], with the processor supporting `level` instead of AVX512-BF16.
pub(super) unsafe fn rows_f32(level: crate::Level, b: Block<f32>) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level;
    #[cfg(target_arch = "x86_64")]
    match level {
        crate::Level::Avx512 => {
            // SAFETY: the caller's level is the processor's or below; the rest is forwarded.
            return unsafe { super::avx512::rows_widen_avx512(b) };
        }
        crate::Level::Avx2 => {
            // SAFETY: as above.
            return unsafe { rows_f32_avx2(b) };
        }
        crate::Level::Baseline => {}
    }
    // SAFETY: forwarded.
    unsafe { rows_f32_generic::<false>(b) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_f32_avx2(b: Block<f32>) {
    // SAFETY: forwarded.
    unsafe { rows_f32_generic::<true>(b) }
}

/// The widening kernel, four rows at a time, written for the compiler to vectorise over the
/// 64 columns (inlined into a function compiled for the target's vector instructions).
/// `FMA`: fused multiply-adds (only where the processor has them; otherwise `mul_add`
/// would be a library call).
///
/// # Safety
/// As [`rows_dot_bf16`] (without the processor requirement).
#[inline(always)]
unsafe fn rows_f32_generic<const FMA: bool>(b: Block<f32>) {
    macro_rules! tile {
        ($r:literal, $i:expr) => {
            tile_f32::<$r, FMA>(&b, $i)
        };
    }
    // SAFETY: forwarded; tile t covers rows i..i + R.
    unsafe { row_tiles!(tile, b.rows(), 4, [1, 2, 3]) }
}

/// `R` rows × 64 columns of the widening kernel.
///
/// # Safety
/// As [`rows_dot_bf16`] (without the processor requirement), for rows `i..i + R` of `b.x`.
#[inline(always)]
unsafe fn tile_f32<const R: usize, const FMA: bool>(b: &Block<f32>, i: usize) {
    let (x, xs, k0) = (b.x, b.xs, 2 * b.q0);
    let mut c = [[0f32; PANEL]; R];
    for q in 0..b.pairs {
        let mut even = [0f32; PANEL];
        let mut odd = [0f32; PANEL];
        for v in 0..4 {
            let line = &b.lines[b.line(q, v)].0;
            for j in 0..16 {
                even[16 * v + j] = bf16_to_f32(line[2 * j]);
                odd[16 * v + j] = bf16_to_f32(line[2 * j + 1]);
            }
        }
        for (t, acc) in c.iter_mut().enumerate() {
            let a = x[(i + t) * xs + k0 + 2 * q];
            let b = x[(i + t) * xs + k0 + 2 * q + 1];
            for j in 0..PANEL {
                acc[j] = if FMA {
                    b.mul_add(odd[j], a.mul_add(even[j], acc[j]))
                } else {
                    acc[j] + a * even[j] + b * odd[j]
                };
            }
        }
    }
    for (t, acc) in c.iter().enumerate() {
        // SAFETY: output row `r0 + i + t`, columns col0..col0 + cols are this task's (caller).
        let o = unsafe {
            std::slice::from_raw_parts_mut(b.dst.0.add((b.r0 + i + t) * b.ld + b.col0), b.cols)
        };
        for (o, a) in o.iter_mut().zip(acc) {
            *o += a;
        }
    }
}
