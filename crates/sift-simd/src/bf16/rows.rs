//! The activations a product reads ([`Rows`]), and rows laid out as the AMX tiles read them.
use super::convert::copy_bits;
use super::pack::BLOCK_ROWS;
use super::vector::round_row;
use crate::mem::aligned;

/// Makes `x` `padded` rows of `xs` values from a 64-byte boundary ([`aligned`]) and returns
/// them: `row(i, values)` writes each of the first `rows` (all `xs` values), the rest are
/// zero. Reuses `x`'s memory without clearing it first.
pub(super) fn fill_rows(
    x: &mut Vec<u16>,
    xs: usize,
    padded: usize,
    rows: usize,
    mut row: impl FnMut(usize, &mut [u16]),
) -> &[u16] {
    let x = aligned(x, padded * xs);
    for (i, r) in x.chunks_exact_mut(xs).enumerate() {
        if i < rows {
            row(i, r);
        } else {
            r.fill(0);
        }
    }
    x
}

/// The activations a product reads, `m × k` row-major: f32 (rounded to bfloat16 as they
/// are read, or read as they are by [`Kernel::F32`](super::Kernel::F32)), or bfloat16 bits already rounded (a
/// layer's output kept in bfloat16 for the next layer, which would round it anyway).
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// bfloat16 bits.
    Bf16(&'a [u16]),
}

impl Rows<'_> {
    /// Values held.
    pub fn len(&self) -> usize {
        match self {
            Rows::F32(x) => x.len(),
            Rows::Bf16(x) => x.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `r` (`k` values) rounded into `dst` (at least `k` long; the rest untouched).
    pub(super) fn round(&self, r: usize, k: usize, dst: &mut [u16]) {
        self.round_span(r * k, k, dst)
    }

    /// Rows `r0..r0 + rows` (`k` values each) rounded into `xb` as an AMX task reads them:
    /// `xs` values a row (zero past `k`), whole blocks of rows (zero past `rows`), from a
    /// 64-byte boundary (a tile row that straddles two cache lines loads both). `xb` grows
    /// as needed and is reused without clearing; returns the rows.
    pub(super) fn round_chunk<'b>(
        &self,
        r0: usize,
        rows: usize,
        k: usize,
        xs: usize,
        xb: &'b mut Vec<u16>,
    ) -> &'b [u16] {
        let padded = rows.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
        fill_rows(xb, xs, padded, rows, |r, d| {
            self.round(r0 + r, k, d);
            d[k..].fill(0);
        })
    }

    /// Rows `r0..r0 + rows` as an AMX task reads them ([`Rows::round_chunk`]): bfloat16
    /// rows that already have that layout (`k == xs`, whole blocks of rows, on a 64-byte
    /// boundary) are read in place, anything else is rounded into `xb`.
    pub(super) fn chunk<'s>(
        &'s self,
        r0: usize,
        rows: usize,
        k: usize,
        xs: usize,
        xb: &'s mut Vec<u16>,
    ) -> &'s [u16] {
        match self {
            Rows::Bf16(x)
                if k == xs
                    && rows.is_multiple_of(BLOCK_ROWS)
                    && x[r0 * k..].as_ptr().cast::<u8>().align_offset(64) == 0 =>
            {
                &x[r0 * k..(r0 + rows) * k]
            }
            _ => self.round_chunk(r0, rows, k, xs, xb),
        }
    }

    /// The `len` values from `at` rounded into `dst` (at least `len` long; the rest
    /// untouched).
    pub fn round_span(&self, at: usize, len: usize, dst: &mut [u16]) {
        match self {
            Rows::F32(x) => round_row(&x[at..at + len], dst),
            Rows::Bf16(x) => copy_bits(&x[at..at + len], &mut dst[..len]),
        }
    }

    /// Asks the processor to bring the `len` values from `at` into its caches (a hint, for
    /// rows read at a stride the hardware prefetchers do not follow: a head's part of the
    /// rows of a fused QKV matrix); nothing where they are out of bounds.
    #[inline]
    pub fn prefetch(&self, at: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let (ptr, bytes, n) = match self {
                Rows::F32(x) => (x.as_ptr().cast::<u8>(), 4, x.len()),
                Rows::Bf16(x) => (x.as_ptr().cast::<u8>(), 2, x.len()),
            };
            if len == 0 || at + len > n {
                return;
            }
            for line in (0..len * bytes).step_by(64).chain([len * bytes - 1]) {
                // SAFETY: the byte is inside the slice (at + len <= n); a prefetch reads
                // nothing architecturally.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        ptr.add(at * bytes + line).cast::<i8>(),
                    )
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (at, len);
    }

    /// The values from `at` on.
    pub fn from(self, at: usize) -> Self {
        match self {
            Rows::F32(x) => Rows::F32(&x[at..]),
            Rows::Bf16(x) => Rows::Bf16(&x[at..]),
        }
    }
}
