//! The AVX-512 kernels: [`Kernel::DotBf16`](super::Kernel::DotBf16) (AVX512-BF16
//! `vdpbf16ps` on rows rounded to bfloat16), the bfloat16 dot product and rounding of a row,
//! and [`Kernel::F32`](super::Kernel::F32)'s widening kernel at AVX-512F.
use super::block::{Block, add_tile, row_tiles};
use super::convert::bf16_to_f32;

/// # Safety
/// The processor must have AVX512-BF16 (with AVX-512F and BW).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn dot_avx512bf16(a: &[u16], b: &[u16]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: every load reads 32 values at i + 32 * j + 32 <= n.
    unsafe {
        let mut s = [_mm512_setzero_ps(); 4];
        while i + 128 <= n {
            for (j, acc) in s.iter_mut().enumerate() {
                let o = i + 32 * j;
                let x = as_bh(_mm512_loadu_si512(pa.add(o) as *const __m512i));
                let y = as_bh(_mm512_loadu_si512(pb.add(o) as *const __m512i));
                *acc = _mm512_dpbf16_ps(*acc, x, y);
            }
            i += 128;
        }
        while i + 32 <= n {
            let x = as_bh(_mm512_loadu_si512(pa.add(i) as *const __m512i));
            let y = as_bh(_mm512_loadu_si512(pb.add(i) as *const __m512i));
            s[0] = _mm512_dpbf16_ps(s[0], x, y);
            i += 32;
        }
        let v = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
        let mut sum = _mm512_reduce_add_ps(v);
        while i < n {
            sum += bf16_to_f32(a[i]) * bf16_to_f32(b[i]);
            i += 1;
        }
        sum
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn round_row_avx512(src: &[f32], dst: &mut [u16]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let mut i = 0;
    // SAFETY: every load reads src[i..i + 32] or `tail`, and every store writes
    // dst[i..i + 32] or `out`, in bounds.
    unsafe {
        while i + 32 <= n {
            let lo = _mm512_loadu_ps(src.as_ptr().add(i));
            let hi = _mm512_loadu_ps(src.as_ptr().add(i + 16));
            let v = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(dst.as_mut_ptr().add(i) as *mut __m512i, v);
            i += 32;
        }
        if i < n {
            // the last few values through a zero-padded block: one conversion, not a
            // scalar loop (rows of a head's keys or a block's probabilities end this way)
            let mut tail = [0f32; 32];
            tail[..n - i].copy_from_slice(&src[i..n]);
            let lo = _mm512_loadu_ps(tail.as_ptr());
            let hi = _mm512_loadu_ps(tail.as_ptr().add(16));
            let mut out = [0u16; 32];
            let v = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(out.as_mut_ptr() as *mut __m512i, v);
            dst[i..n].copy_from_slice(&out[..n - i]);
        }
    }
}

/// The 32 bfloat16 values of `v`'s bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn as_bh(v: std::arch::x86_64::__m512i) -> std::arch::x86_64::__m512bh {
    // SAFETY: both are 64-byte plain vectors; every bit pattern is a valid bfloat16 vector.
    unsafe { std::mem::transmute::<std::arch::x86_64::__m512i, std::arch::x86_64::__m512bh>(v) }
}

/// Row tiles of one panel block on the AVX512-BF16 kernel.
///
/// # Safety
/// AVX512-BF16 must be present; `b.dst` must be valid for rows `b.r0..b.r0 + b.rows()` of
/// `b.ld` columns and no other thread may write columns `b.col0..b.col0 + b.cols` of those
/// rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn rows_dot_bf16(b: Block<u16>) {
    macro_rules! tile {
        ($r:literal, $i:expr) => {
            tile_dot_bf16::<$r>(&b, $i)
        };
    }
    // SAFETY: forwarded from the caller; the tile kernels read rows i.. of x and write the
    // rows r0 + i.. of dst.
    unsafe { row_tiles!(tile, b.rows(), 6, [1, 2, 3, 4, 5]) }
}

/// `R` rows × 64 columns: 4R accumulators of 16 lanes, one `vdpbf16ps` per (row, line) per
/// input pair, the pair of each row broadcast.
///
/// # Safety
/// As [`rows_dot_bf16`], for rows `i..i + R` of `b.x`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile_dot_bf16<const R: usize>(b: &Block<u16>, i: usize) {
    use std::arch::x86_64::*;
    let (xs, pairs, (xp, wp)) = (b.xs, b.pairs, b.tile_start(i, R));
    // SAFETY: reads stay inside x (rows i..i + R, the block's values: `tile_start` checked)
    // and the panel (its pairs q0..q0 + pairs: checked); the stores are masked to the
    // task's columns.
    unsafe {
        let mut c = [[_mm512_setzero_ps(); 4]; R];
        for q in 0..pairs {
            let w: [__m512bh; 4] = [
                as_bh(_mm512_load_si512(wp.add(b.line(q, 0)))),
                as_bh(_mm512_load_si512(wp.add(b.line(q, 1)))),
                as_bh(_mm512_load_si512(wp.add(b.line(q, 2)))),
                as_bh(_mm512_load_si512(wp.add(b.line(q, 3)))),
            ];
            for (r, acc) in c.iter_mut().enumerate() {
                let pair = (xp.add(r * xs + 2 * q) as *const i32).read_unaligned();
                let x = as_bh(_mm512_set1_epi32(pair));
                for (a, w) in acc.iter_mut().zip(&w) {
                    *a = _mm512_dpbf16_ps(*a, x, *w);
                }
            }
        }
        add_tile(&c, b, i);
    }
}

/// Row tiles of one panel block with AVX-512F: each line widened in registers (the even
/// inputs shifted into place, the odd ones masked), two fused multiply-adds per line.
///
/// # Safety
/// AVX-512F must be present; otherwise as [`rows_dot_bf16`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn rows_widen_avx512(b: Block<f32>) {
    macro_rules! tile {
        ($r:literal, $i:expr) => {
            tile_widen_avx512::<$r>(&b, $i)
        };
    }
    // SAFETY: forwarded; each tile covers rows i..i + R.
    unsafe { row_tiles!(tile, b.rows(), 4, [1, 2, 3]) }
}

/// `R` rows × 64 columns, weights widened to f32.
///
/// # Safety
/// As [`rows_widen_avx512`], for rows `i..i + R` of `b.x`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile_widen_avx512<const R: usize>(b: &Block<f32>, i: usize) {
    use std::arch::x86_64::*;
    let (xs, pairs, (xp, wp)) = (b.xs, b.pairs, b.tile_start(i, R));
    // SAFETY: reads stay inside x (rows i..i + R, the block's values: `tile_start` checked)
    // and the panel (its pairs q0..q0 + pairs: checked); the stores are masked to the
    // task's columns.
    unsafe {
        let mut c = [[_mm512_setzero_ps(); 4]; R];
        let high = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
        for q in 0..pairs {
            let mut even = [_mm512_setzero_ps(); 4];
            let mut odd = [_mm512_setzero_ps(); 4];
            for v in 0..4 {
                let w = _mm512_load_si512(wp.add(b.line(q, v)));
                even[v] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
                odd[v] = _mm512_castsi512_ps(_mm512_and_si512(w, high));
            }
            for (r, acc) in c.iter_mut().enumerate() {
                let a = _mm512_set1_ps(*xp.add(r * xs + 2 * q));
                let b = _mm512_set1_ps(*xp.add(r * xs + 2 * q + 1));
                for v in 0..4 {
                    acc[v] = _mm512_fmadd_ps(b, odd[v], _mm512_fmadd_ps(a, even[v], acc[v]));
                }
            }
        }
        add_tile(&c, b, i);
    }
}
