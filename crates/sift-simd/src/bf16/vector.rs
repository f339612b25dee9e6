//! Whole vectors of bfloat16 bits: the dot product and the rounding of a row, on AVX512-BF16
//! where the processor has it ([`has_dot_bf16`]), else in the portable loops.
use super::avx512::{dot_avx512bf16, round_row_avx512};
use super::convert::{bf16_to_f32, f32_to_bf16};

/// Whether the processor has AVX512-BF16 (with the AVX-512 foundation and byte/word
/// instructions the kernel also uses): [`crate::Cpu::dot_bf16`].
pub fn has_dot_bf16() -> bool {
    crate::cpu().dot_bf16()
}

/// Rounds `src` to bfloat16 bits into `dst` (to nearest, ties to even; `dst` may be longer:
/// the rest is left as it is).
pub fn round_into(src: &[f32], dst: &mut [u16]) {
    round_row(src, dst)
}

/// Inner product of two equally long bfloat16 vectors (bits), accumulated in f32: AVX512-BF16
/// `vdpbf16ps` with four accumulators where the processor has it, else each value widened
/// to f32 (exact) and multiplied in the portable loop.
pub fn dot(a: &[u16], b: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_dot_bf16() {
        // SAFETY: AVX512-BF16 was detected.
        return unsafe { dot_avx512bf16(a, b) };
    }
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        sum += bf16_to_f32(*x) * bf16_to_f32(*y);
    }
    sum
}

/// Rounds one row to bfloat16 (`dst` may be longer: the rest stays zero).
pub(super) fn round_row(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if has_dot_bf16() {
        // SAFETY: AVX512-BF16 was detected.
        unsafe { round_row_avx512(src, dst) };
        return;
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32_to_bf16(s);
    }
}
