//! One task's share of a panel product: the output pointer the tasks share ([`Out`]), the
//! block of a panel a register kernel multiplies ([`Block`]), the row tiling ([`row_tiles`])
//! and the masked add of a tile of accumulators into the output ([`add_tile`], AVX-512F).
use super::pack::{Line, line_at};

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(super) struct Out(pub(super) *mut f32);
// SAFETY: every task writes its own (row, column) ranges of the output; no element is
// written by two tasks, and the output outlives the parallel loop.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

impl Out {
    /// The element `offset` places past the start (a method, so that closures capture the
    /// whole `Out`, which is `Sync`, rather than its raw pointer).
    pub(super) fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

/// Runs a tile kernel over `rows` rows: tiles of `$full` rows, then one tile of the rest.
/// `$kernel!(R, i)` runs the `R`-row tile starting at row `i`.
macro_rules! row_tiles {
    ($kernel:ident, $rows:expr, $full:literal, [$($r:literal),+]) => {{
        let rows = $rows;
        let mut i = 0;
        while i + $full <= rows {
            $kernel!($full, i);
            i += $full;
        }
        match rows - i {
            0 => {}
            $($r => $kernel!($r, i),)+
            _ => unreachable!("a whole tile of rows remains"),
        }
    }};
}
pub(super) use row_tiles;

/// One task's share of a product: its rows of the activations against one block of a
/// panel, added into the output.
#[derive(Clone, Copy)]
pub(super) struct Block<'a, T> {
    /// The task's rows of the activations, `xs` values each (bfloat16 bits or f32).
    pub(super) x: &'a [T],
    pub(super) xs: usize,
    /// The block's first input pair (its first value is `2 * q0`) and its pairs.
    pub(super) q0: usize,
    pub(super) pairs: usize,
    /// The panel's lines, four per input pair of the panel ([`line_at`]).
    pub(super) lines: &'a [Line],
    /// The output, `ld` columns a row.
    pub(super) dst: Out,
    pub(super) ld: usize,
    /// Output row of `x`'s first row.
    pub(super) r0: usize,
    /// The panel's first output column and its width (at most [`PANEL`](super::PANEL)).
    pub(super) col0: usize,
    pub(super) cols: usize,
}

impl<T> Block<'_, T> {
    /// Lines a panel holds per column group.
    pub(super) fn stride(&self) -> usize {
        self.lines.len() / 4
    }

    /// Where in the panel's lines the block's pair `q` (from `q0`) of column group `g` lies.
    #[inline(always)]
    pub(super) fn line(&self, q: usize, g: usize) -> usize {
        line_at(self.stride(), self.q0 + q, g)
    }

    /// Rows of `x`.
    pub(super) fn rows(&self) -> usize {
        self.x.len() / self.xs
    }

    /// Where the tile of rows `i..i + r` reads: its first row's first value of the block,
    /// and the panel's lines as 512-bit vectors ([`Block::line`] of them); a tile reaching
    /// past `x` or a block past the panel panics.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn tile_start(
        &self,
        i: usize,
        r: usize,
    ) -> (*const T, *const std::arch::x86_64::__m512i) {
        assert!((i + r) * self.xs <= self.x.len() && 2 * (self.q0 + self.pairs) <= self.xs);
        assert!(self.q0 + self.pairs <= self.stride());
        (
            self.x[i * self.xs + 2 * self.q0..].as_ptr(),
            self.lines.as_ptr().cast(),
        )
    }
}

/// Adds an `R` x 64 tile of accumulators into the output rows of `b`'s rows `i..i + R`,
/// columns `b.col0..b.col0 + b.cols` (masked to `b.cols`).
///
/// # Safety
/// AVX-512F must be present; those elements must be valid and this task's alone.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn add_tile<T, const R: usize>(
    c: &[[std::arch::x86_64::__m512; 4]; R],
    b: &Block<T>,
    i: usize,
) {
    use std::arch::x86_64::*;
    // SAFETY: forwarded from the caller; the loads and stores are masked to `cols`.
    unsafe {
        for (r, acc) in c.iter().enumerate() {
            let o = b.dst.0.add((b.r0 + i + r) * b.ld + b.col0);
            for (v, a) in acc.iter().enumerate() {
                let first = v * 16;
                if first >= b.cols {
                    break;
                }
                let left = b.cols - first;
                let mask: __mmask16 = if left >= 16 {
                    0xFFFF
                } else {
                    (1u16 << left) - 1
                };
                let p = o.add(first);
                let cur = _mm512_maskz_loadu_ps(mask, p);
                _mm512_mask_storeu_ps(p, mask, _mm512_add_ps(cur, *a));
            }
        }
    }
}
