//! bfloat16 bits one value at a time: rounding an f32 (to nearest, ties to even) and
//! widening back (exact), and copies of rows of bits.

/// Rounds an f32 to bfloat16 bits: to nearest, ties to even; NaN stays NaN.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) as u16) | 0x0040;
    }
    (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// Widens bfloat16 bits to f32 (exact).
#[inline]
pub fn bf16_to_f32(x: u16) -> f32 {
    f32::from_bits(u32::from(x) << 16)
}

/// Copies `src` into `dst` (equally long) 32 values at a time: fixed-size moves the
/// compiler inlines, where `copy_from_slice` would call `memcpy` for every short row (a
/// head's 32 or 64 values of a key).
#[inline]
pub(super) fn copy_bits(src: &[u16], dst: &mut [u16]) {
    let whole = src.len().min(dst.len()) / 32 * 32;
    let (dst, dr) = dst.split_at_mut(whole);
    let (src, sr) = src.split_at(whole);
    for (s, d) in src.chunks_exact(32).zip(dst.chunks_exact_mut(32)) {
        let s: &[u16; 32] = s.try_into().expect("32 values");
        let d: &mut [u16; 32] = d.try_into().expect("32 values");
        *d = *s;
    }
    for (d, s) in dr.iter_mut().zip(sr) {
        *d = *s;
    }
}
