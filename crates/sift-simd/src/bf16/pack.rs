//! The packed weight: panels of [`PANEL`] output columns whose 64-byte lines each hold 16
//! columns × 2 consecutive inputs (the layout `vdpbf16ps` reads), in the order the AMX tiles
//! read them ([`line_at`]).
use rayon::prelude::*;

/// Output columns per packed panel.
pub const PANEL: usize = 64;
/// Input pairs of one tile step (a `B` tile's rows; an `A` tile's 32 inputs).
pub(super) const STEP_PAIRS: usize = 16;
/// Rows of the output one block covers (two `A` tiles).
pub(super) const BLOCK_ROWS: usize = 32;

/// One 64-byte line of a panel: 16 output columns × 2 consecutive inputs (bfloat16 bits).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct Line(pub(super) [u16; 32]);

/// Where the line of input pair `q` and column group `g` (16 columns, `0..4`) lies in a
/// panel of `stride` pairs: the panel's two halves (groups 0-1, 2-3) one after the other;
/// in a half, each tile step of 16 pairs holds group `2h`'s 16 lines, then group `2h + 1`'s.
/// A tile step of a half's two weight tiles is then 2 KiB read straight through, where the
/// pair-by-pair order (four lines per pair) had each tile's rows 256 bytes apart: measured
/// on Sapphire Rapids (one thread, 128 rows against a 768 x 3072 and a 3072 x 768 weight)
/// 1,100-1,300 GFLOP/s against 980-1,160. `stride` is a multiple of [`STEP_PAIRS`].
#[inline(always)]
pub(super) fn line_at(stride: usize, q: usize, g: usize) -> usize {
    let (half, tile) = (g / 2, g % 2);
    half * 2 * stride + (q / STEP_PAIRS) * 2 * STEP_PAIRS + tile * STEP_PAIRS + q % STEP_PAIRS
}

/// A linear layer's weight, packed for [`PackedBf16::matmul_acc`].
#[derive(Clone)]
pub struct PackedBf16 {
    pub(super) n: usize,
    pub(super) k: usize,
    /// Input pairs (`k` rounded up to even, halved).
    pub(super) pairs: usize,
    /// Lines a panel holds per column group: `pairs` rounded up to a whole AMX step (the
    /// rest zero).
    pub(super) stride: usize,
    pub(super) lines: Vec<Line>,
}

impl std::fmt::Debug for PackedBf16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedBf16")
            .field("n", &self.n)
            .field("k", &self.k)
            .finish()
    }
}

impl PackedBf16 {
    /// Packs `w`: `n` rows of `k` bfloat16 values (bits), row-major (a linear layer's
    /// `(out, in)` weight). Panics when `w.len() != n * k`.
    pub fn pack(w: &[u16], n: usize, k: usize) -> PackedBf16 {
        assert_eq!(w.len(), n * k, "a {n}x{k} weight has {} values", w.len());
        let pairs = k.div_ceil(2);
        let stride = pairs.div_ceil(STEP_PAIRS) * STEP_PAIRS;
        let panels = n.div_ceil(PANEL);
        let mut lines = vec![Line([0; 32]); panels * stride * 4];
        lines
            .par_chunks_mut(stride * 4)
            .enumerate()
            .for_each(|(p, panel)| {
                for c in 0..PANEL {
                    let row = p * PANEL + c;
                    if row >= n {
                        break;
                    }
                    let src = &w[row * k..(row + 1) * k];
                    let (v, lane) = (c / 16, c % 16);
                    for (q, pair) in src.chunks(2).enumerate() {
                        let line = &mut panel[line_at(stride, q, v)].0;
                        line[2 * lane] = pair[0];
                        line[2 * lane + 1] = pair.get(1).copied().unwrap_or(0);
                    }
                }
            });
        PackedBf16 {
            n,
            k,
            pairs,
            stride,
            lines,
        }
    }

    /// Output features (rows of the weight).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input features (columns of the weight).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes held (the padded panels).
    pub fn bytes(&self) -> usize {
        self.lines.len() * std::mem::size_of::<Line>()
    }
}
