//! Matrix products with bfloat16 weights and f32 activations: `out += x · Wᵀ` for a linear
//! layer's weight `W` (`n` outputs × `k` inputs, row-major as checkpoints store it).
//!
//! The weight is packed once ([`PackedBf16::pack`]) into panels of 64 output columns whose
//! rows are pairs of consecutive inputs, the layout the AVX512-BF16 dot product `vdpbf16ps`
//! reads: one 64-byte line holds 16 columns × 2 inputs. The lines are in the order the Intel
//! AMX tiles read them (`line_at`): 16 consecutive lines (16 pairs of one group of 16
//! columns) are one contiguous 1 KiB weight tile. Three kernels run over it:
//!
//! - [`Kernel::Amx`] (Intel Sapphire Rapids and later, on Linux): the activations rounded to
//!   bfloat16 as below, multiplied on the AMX tiles (`tdpbf16ps`, [`amx`]) into f32;
//! - [`Kernel::DotBf16`] (processors with AVX512-BF16: AMD Zen 4 and later, Intel Cooper Lake
//!   and Sapphire Rapids and later): the activations are rounded to bfloat16 (to nearest,
//!   ties to even) and multiplied pairwise into f32 accumulators, two multiply-adds per lane
//!   per instruction, as PyTorch's bfloat16 matrix products do;
//! - [`Kernel::F32`] (everywhere else, and on request): the weights are widened to f32 in
//!   registers (exact) and multiplied with the unrounded f32 activations.
//!
//! All accumulate in f32. The product is split over the panels (and over rows when there
//! are fewer panels than threads) on rayon's pool; each task writes its own columns.
use rayon::prelude::*;

use crate::mem::aligned;
use std::mem::MaybeUninit;

pub mod amx;
pub mod attention;

/// Output columns per packed panel.
pub const PANEL: usize = 64;
/// Input pairs per cache block: a panel's block is `PAIRS_PER_BLOCK * 256` bytes (40 KiB,
/// in the panel's two halves; measured best among 64-256 on AMD Zen 4 with the lines pair
/// by pair), which every row tile of the task reads.
const PAIRS_PER_BLOCK: usize = 160;

/// One 64-byte line of a panel: 16 output columns × 2 consecutive inputs (bfloat16 bits).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u16; 32]);

/// Where the line of input pair `q` and column group `g` (16 columns, `0..4`) lies in a
/// panel of `stride` pairs: the panel's two halves (groups 0-1, 2-3) one after the other;
/// in a half, each tile step of 16 pairs holds group `2h`'s 16 lines, then group `2h + 1`'s.
/// A tile step of a half's two weight tiles is then 2 KiB read straight through, where the
/// pair-by-pair order (four lines per pair) had each tile's rows 256 bytes apart: measured
/// on Sapphire Rapids (one thread, 128 rows against a 768 x 3072 and a 3072 x 768 weight)
/// 1,100-1,300 GFLOP/s against 980-1,160. `stride` is a multiple of [`amx::STEP_PAIRS`].
#[inline(always)]
fn line_at(stride: usize, q: usize, g: usize) -> usize {
    let (half, tile) = (g / 2, g % 2);
    half * 2 * stride
        + (q / amx::STEP_PAIRS) * 2 * amx::STEP_PAIRS
        + tile * amx::STEP_PAIRS
        + q % amx::STEP_PAIRS
}

/// The kernel a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Intel AMX `tdpbf16ps` on 16 × 16 tiles: activations rounded to bfloat16, f32
    /// accumulation.
    Amx,
    /// AVX512-BF16 `vdpbf16ps`: activations rounded to bfloat16, f32 accumulation.
    DotBf16,
    /// Weights widened to f32, f32 activations and accumulation (portable; AVX-512F or
    /// AVX2/FMA code where the processor has it).
    F32,
}

impl Kernel {
    /// The fastest kernel this processor runs.
    pub fn best() -> Kernel {
        if amx::available() {
            Kernel::Amx
        } else if has_dot_bf16() {
            Kernel::DotBf16
        } else {
            Kernel::F32
        }
    }
}

/// Whether the processor has AVX512-BF16 (with the AVX-512 foundation and byte/word
/// instructions the kernel also uses): [`crate::Cpu::dot_bf16`].
pub fn has_dot_bf16() -> bool {
    crate::cpu().dot_bf16()
}

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

/// A linear layer's weight, packed for [`PackedBf16::matmul_acc`].
#[derive(Clone)]
pub struct PackedBf16 {
    n: usize,
    k: usize,
    /// Input pairs (`k` rounded up to even, halved).
    pairs: usize,
    /// Lines a panel holds per column group: `pairs` rounded up to a whole AMX step (the
    /// rest zero).
    stride: usize,
    lines: Vec<Line>,
}

impl std::fmt::Debug for PackedBf16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedBf16")
            .field("n", &self.n)
            .field("k", &self.k)
            .finish()
    }
}

/// Makes `x` `padded` rows of `xs` values from a 64-byte boundary ([`aligned`]) and returns
/// them: `row(i, values)` writes each of the first `rows` (all `xs` values), the rest are
/// zero. Reuses `x`'s memory without clearing it first.
fn fill_rows(
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

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: every task writes its own (row, column) ranges of the output; no element is
// written by two tasks, and the output outlives the parallel loop.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

impl Out {
    /// The element `offset` places past the start (a method, so that closures capture the
    /// whole `Out`, which is `Sync`, rather than its raw pointer).
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

/// The activations a product reads, `m × k` row-major: f32 (rounded to bfloat16 as they
/// are read, or read as they are by [`Kernel::F32`]), or bfloat16 bits already rounded (a
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
    fn round(&self, r: usize, k: usize, dst: &mut [u16]) {
        self.round_span(r * k, k, dst)
    }

    /// Rows `r0..r0 + rows` (`k` values each) rounded into `xb` as an AMX task reads them:
    /// `xs` values a row (zero past `k`), whole blocks of rows (zero past `rows`), from a
    /// 64-byte boundary (a tile row that straddles two cache lines loads both). `xb` grows
    /// as needed and is reused without clearing; returns the rows.
    fn round_chunk<'b>(
        &self,
        r0: usize,
        rows: usize,
        k: usize,
        xs: usize,
        xb: &'b mut Vec<u16>,
    ) -> &'b [u16] {
        let padded = rows.div_ceil(amx::BLOCK_ROWS) * amx::BLOCK_ROWS;
        fill_rows(xb, xs, padded, rows, |r, d| {
            self.round(r0 + r, k, d);
            d[k..].fill(0);
        })
    }

    /// Rows `r0..r0 + rows` as an AMX task reads them ([`Rows::round_chunk`]): bfloat16
    /// rows that already have that layout (`k == xs`, whole blocks of rows, on a 64-byte
    /// boundary) are read in place, anything else is rounded into `xb`.
    fn chunk<'s>(
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
                    && rows.is_multiple_of(amx::BLOCK_ROWS)
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

impl PackedBf16 {
    /// Packs `w`: `n` rows of `k` bfloat16 values (bits), row-major (a linear layer's
    /// `(out, in)` weight). Panics when `w.len() != n * k`.
    pub fn pack(w: &[u16], n: usize, k: usize) -> PackedBf16 {
        assert_eq!(w.len(), n * k, "a {n}x{k} weight has {} values", w.len());
        let pairs = k.div_ceil(2);
        let stride = pairs.div_ceil(amx::STEP_PAIRS) * amx::STEP_PAIRS;
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

    /// `out += x · Wᵀ` on [`Kernel::best`]: `x` is `m × k` row-major, `out` `m × n`.
    pub fn matmul_acc(&self, x: &[f32], m: usize, out: &mut [f32]) {
        self.matmul_acc_with(Kernel::best(), x, m, out)
    }

    /// `out += x · Wᵀ` on `kernel`; [`Kernel::DotBf16`] falls back to [`Kernel::F32`] on a
    /// processor without AVX512-BF16. Panics when the lengths do not match `m`.
    pub fn matmul_acc_with(&self, kernel: Kernel, x: &[f32], m: usize, out: &mut [f32]) {
        assert_eq!(out.len(), m * self.n, "out is not {m}x{}", self.n);
        let dst = Out(out.as_mut_ptr());
        self.product(kernel, crate::level(), Rows::F32(x), m, dst, true, None)
    }

    /// `out = x · Wᵀ` on [`Kernel::best`], then `then(first_row, rows)` over the output in
    /// blocks of whole rows (`rows` holds `n` values a row), each block while it is still in
    /// the cache where the kernel allows: a bias, an activation or a residual fused into the
    /// product. `out` may be uninitialised (a `Vec`'s spare capacity): every element is
    /// written, none is read first, so no zero-fill pass is needed; the returned slice is
    /// `out`, initialised.
    pub fn matmul_into<'o>(
        &self,
        x: &[f32],
        m: usize,
        out: &'o mut [MaybeUninit<f32>],
        then: Option<Epilogue>,
    ) -> &'o mut [f32] {
        self.matmul_into_with(Kernel::best(), x, m, out, then)
    }

    /// [`PackedBf16::matmul_into`] on `kernel` (falling back as
    /// [`PackedBf16::matmul_acc_with`] does).
    pub fn matmul_into_with<'o>(
        &self,
        kernel: Kernel,
        x: &[f32],
        m: usize,
        out: &'o mut [MaybeUninit<f32>],
        then: Option<Epilogue>,
    ) -> &'o mut [f32] {
        assert_eq!(out.len(), m * self.n, "out is not {m}x{}", self.n);
        let dst = Out(out.as_mut_ptr().cast::<f32>());
        self.product(kernel, crate::level(), Rows::F32(x), m, dst, false, then);
        // SAFETY: `product` with `acc: false` writes every one of the m x n elements (the
        // AMX tasks cover every row and panel; the other kernels zero-fill first).
        unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) }
    }

    /// [`PackedBf16::matmul_into`] of activations given as [`Rows`].
    pub fn matmul_rows_into<'o>(
        &self,
        x: Rows,
        m: usize,
        out: &'o mut [MaybeUninit<f32>],
        then: Option<Epilogue>,
    ) -> &'o mut [f32] {
        assert_eq!(out.len(), m * self.n, "out is not {m}x{}", self.n);
        let dst = Out(out.as_mut_ptr().cast::<f32>());
        self.product(Kernel::best(), crate::level(), x, m, dst, false, then);
        // SAFETY: as in `matmul_into_with`.
        unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) }
    }

    /// `x · Wᵀ` on [`Kernel::best`], handed to `sink(first_row, rows)` in blocks of whole
    /// rows (`n` values a row) and not kept: where the AMX tasks each hold whole rows, a
    /// block is the task's scratch, still in the cache, so the product never goes through
    /// memory in f32 (the sink writes what the caller keeps: say, the rows after a bias and
    /// an activation, rounded to bfloat16); elsewhere the product is written whole first.
    pub fn matmul_blocks(&self, x: Rows, m: usize, sink: Epilogue) {
        let (n, k) = (self.n, self.k);
        assert_eq!(x.len(), m * k, "x is not {m}x{k}");
        if m == 0 || n == 0 {
            return;
        }
        if self.amx_tasks_hold_rows(m) {
            return self.product_amx_sink(x, m, sink);
        }
        let kernel = Kernel::best();
        let mut out: Vec<f32> = Vec::with_capacity(m * n);
        let dst = Out(out.as_mut_ptr());
        self.product(kernel, crate::level(), x, m, dst, false, Some(sink));
    }

    /// `x · Wᵀ` on [`Kernel::best`], handed to `sink` in tiles and not kept: where the AMX
    /// tasks each hold whole rows, a tile is a task's rows against one panel ([`PANEL`]
    /// columns, 32 KiB at 128 rows), written into the thread's scratch on the tiles and
    /// handed over while it is still in the core's L1 cache (a row block of
    /// [`PackedBf16::matmul_blocks`] at 3,072 columns is 1.5 MiB, which the weight streaming
    /// through L2 pushes out before the sink reads it); elsewhere the product is written
    /// whole first and handed over in blocks of whole rows. For a sink that works value by
    /// value (a bias, an activation, a rounding); a row-wise one (a norm) needs
    /// [`PackedBf16::matmul_blocks`].
    pub fn matmul_tiles(&self, x: Rows, m: usize, sink: TileSink) {
        let (n, k) = (self.n, self.k);
        if self.amx_tasks_hold_rows(m) {
            assert_eq!(x.len(), m * k, "x is not {m}x{k}");
            return self.product_amx_tiles(x, m, sink);
        }
        // which checks x and returns at once from an empty product
        self.matmul_blocks(x, m, &|row, values| {
            sink(Tile {
                row,
                col: 0,
                cols: n,
                ld: n,
                values,
            })
        });
    }

    /// Two products in a row, `sink(mid(x · Wᵀ) · Vᵀ)` for this weight `W` and `second`'s
    /// `V` (a feed-forward block: `mid` adds the first layer's bias, applies its activation
    /// and rounds to bfloat16, `sink` takes blocks of whole rows of the second product, as
    /// [`PackedBf16::matmul_blocks`]). Where the AMX tasks each hold whole rows, a task
    /// keeps its rows between the two products in its own scratch (128 rows x 3,072
    /// bfloat16 values: 768 KiB, in the core's L2 cache), so the wide middle rows never go
    /// through memory; elsewhere the first product is written whole (rounded by `mid`),
    /// then read by the second. Panics when `second` does not take this weight's outputs as
    /// its inputs.
    pub fn matmul_pair(
        &self,
        second: &PackedBf16,
        x: Rows,
        m: usize,
        mid: MidSink,
        sink: Epilogue,
    ) {
        let (n, k) = (self.n, self.k);
        assert_eq!(
            second.k, n,
            "a {n}-output product feeds {} inputs",
            second.k
        );
        assert_eq!(x.len(), m * k, "x is not {m}x{k}");
        if m == 0 || second.n == 0 {
            return;
        }
        if self.amx_tasks_hold_rows(m) && second.amx_tasks_hold_rows(m) {
            return self.product_amx_pair(second, x, m, mid, sink);
        }
        let mut rows: Vec<u16> = vec![0; m * n];
        let out = crate::mem::Disjoint::new(rows.as_mut_ptr());
        self.matmul_tiles(x, m, &|t| {
            let first = t.row;
            // SAFETY: the tile's rows (and columns) of the m x n middle rows are this
            // call's alone; the slice ends inside them.
            let rows = unsafe { out.slice(first * n + t.col, (t.rows() - 1) * n + t.cols) };
            mid(t, rows, n);
        });
        second.matmul_blocks(Rows::Bf16(&rows), m, sink);
    }

    /// [`PackedBf16::matmul_pair`] on the AMX tiles: each task its rows through the first
    /// weight a panel at a time ([`PackedBf16::product_amx_tiles`]' loop), `mid` writing
    /// them into the task's middle rows, then those through every panel of `second`
    /// ([`PackedBf16::product_amx_sink`]'s).
    fn product_amx_pair(
        &self,
        second: &PackedBf16,
        x: Rows,
        m: usize,
        mid: MidSink,
        sink: Epilogue,
    ) {
        let (n, n2, ms) = (self.n, second.n, 2 * second.stride);
        let chunk = self.amx_rows().max(second.amx_rows());
        self.amx_row_tasks(x, m, chunk, |r0, rows, xb, out| {
            let padded = rows.div_ceil(amx::BLOCK_ROWS) * amx::BLOCK_ROWS;
            let mut run = |mb: &mut Vec<u16>, tb: &mut Vec<f32>| {
                // the middle rows as the second product's tiles read them: `ms` values a
                // row, zero past the n outputs and past the rows
                let midrows = aligned(mb, padded * ms);
                for (r, row) in midrows.chunks_exact_mut(ms).enumerate() {
                    row[if r < rows { n } else { 0 }..].fill(0);
                }
                // SAFETY: AMX is available (the caller's kernel); xb is `Rows::chunk`'s.
                unsafe {
                    self.amx_tiles(xb, rows, r0, tb, |t| {
                        let (col, cols) = (t.col, t.cols);
                        mid(t, &mut midrows[col..(rows - 1) * ms + col + cols], ms)
                    })
                };
                let out = aligned(out, rows * n2);
                // SAFETY: AMX is available; the middle rows are whole blocks of rows of `ms`
                // values (zero past the outputs); the scratch holds rows x n2 values and
                // this task alone writes it.
                unsafe {
                    second.amx_task(
                        midrows,
                        rows,
                        0..n2.div_ceil(PANEL),
                        Out(out.as_mut_ptr()),
                        0,
                        false,
                    )
                };
                sink(r0, out);
            };
            AMX_PAIR.with(|cell| match cell.try_borrow_mut() {
                Ok(mut b) => {
                    let (mb, tb) = &mut *b;
                    run(mb, tb)
                }
                Err(_) => run(&mut Vec::new(), &mut Vec::new()),
            });
        });
    }

    /// [`PackedBf16::matmul_acc_with`], the widening kernel compiled for `level` (at most
    /// the processor's).
    #[cfg(test)]
    fn matmul_acc_at(
        &self,
        kernel: Kernel,
        level: crate::Level,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) {
        assert_eq!(out.len(), m * self.n, "out is not {m}x{}", self.n);
        let dst = Out(out.as_mut_ptr());
        self.product(kernel, level, Rows::F32(x), m, dst, true, None)
    }

    /// The product into `dst` (`m × n`, valid for writes; read only when `acc`), then `then`.
    #[allow(clippy::too_many_arguments)]
    fn product(
        &self,
        kernel: Kernel,
        level: crate::Level,
        x: Rows,
        m: usize,
        dst: Out,
        acc: bool,
        then: Option<Epilogue>,
    ) {
        let (n, k) = (self.n, self.k);
        assert_eq!(x.len(), m * k, "x is not {m}x{k}");
        if m == 0 || n == 0 {
            return;
        }
        let kernel = match kernel {
            Kernel::Amx if !amx::available() => Kernel::best(),
            // one or two rows (a decoding step) leave AMX's 16-row tiles mostly empty: the
            // dot-product kernel reads the weight as fast and wastes nothing (1 x 1536 x
            // 8960: 0.6 vs 0.9 ms here)
            Kernel::Amx if m <= 2 && has_dot_bf16() => Kernel::DotBf16,
            Kernel::DotBf16 if !has_dot_bf16() => Kernel::F32,
            k => k,
        };
        if kernel == Kernel::Amx && k > 0 {
            return self.product_amx(x, m, dst, acc, then);
        }
        if !acc {
            // the other kernels add into the output: start it at zero
            (0..m).into_par_iter().for_each(|r| {
                // SAFETY: row r of the m x n output is valid for writes (the caller's
                // contract) and written by this iteration alone.
                unsafe { std::ptr::write_bytes(dst.at(r * n), 0, n) }
            });
        }
        if k > 0 {
            self.product_panels(kernel, level, x, m, dst);
        }
        if let Some(then) = then {
            epilogue_rows(then, dst, m, n);
        }
    }

    /// `dst += x · Wᵀ` on the [`Kernel::DotBf16`] or [`Kernel::F32`] kernel, split over the
    /// panels (and rows).
    fn product_panels(&self, kernel: Kernel, level: crate::Level, x: Rows, m: usize, dst: Out) {
        let (n, k) = (self.n, self.k);
        // rows of the activations as the kernel reads them: bfloat16 pairs, or f32 padded
        // to an even length
        let kp = 2 * self.pairs;
        let xb: Vec<u16>;
        let xf: Vec<f32>;
        match kernel {
            Kernel::Amx | Kernel::DotBf16 => {
                let mut v = vec![0u16; m * kp];
                v.par_chunks_mut(kp)
                    .enumerate()
                    .for_each(|(r, d)| x.round(r, k, d));
                xb = v;
                xf = Vec::new();
            }
            Kernel::F32 => {
                xb = Vec::new();
                xf = match x {
                    Rows::F32(_) if kp == k => Vec::new(),
                    Rows::F32(x) => {
                        let mut v = vec![0f32; m * kp];
                        v.chunks_mut(kp)
                            .zip(x.chunks(k))
                            .for_each(|(d, s)| d[..k].copy_from_slice(s));
                        v
                    }
                    Rows::Bf16(x) => {
                        let mut v = vec![0f32; m * kp];
                        v.chunks_mut(kp).zip(x.chunks(k)).for_each(|(d, s)| {
                            d.iter_mut().zip(s).for_each(|(d, &s)| *d = bf16_to_f32(s))
                        });
                        v
                    }
                };
            }
        }
        let xf: &[f32] = match x {
            Rows::F32(x) if kernel == Kernel::F32 && kp == k => x,
            _ => &xf,
        };
        let panels = n.div_ceil(PANEL);
        let threads = rayon::current_num_threads().max(1);
        // split rows too when there are too few panels to keep every thread busy
        let row_parts = (2 * threads)
            .div_ceil(panels)
            .clamp(1, m.div_ceil(8).max(1));
        let rows_per = m.div_ceil(row_parts);
        (0..panels * row_parts).into_par_iter().for_each(|task| {
            let (p, r) = (task / row_parts, task % row_parts);
            let (r0, r1) = (r * rows_per, ((r + 1) * rows_per).min(m));
            if r0 >= r1 {
                return;
            }
            let col0 = p * PANEL;
            let cols = (n - col0).min(PANEL);
            let panel = &self.lines[p * self.stride * 4..(p + 1) * self.stride * 4];
            for q0 in (0..self.pairs).step_by(PAIRS_PER_BLOCK) {
                let q1 = (q0 + PAIRS_PER_BLOCK).min(self.pairs);
                macro_rules! task {
                    ($x:expr) => {
                        Block {
                            x: $x,
                            xs: kp,
                            q0,
                            pairs: q1 - q0,
                            lines: panel,
                            dst,
                            ld: n,
                            r0,
                            col0,
                            cols,
                        }
                    };
                }
                match kernel {
                    Kernel::Amx => unreachable!("run by matmul_acc_amx"),
                    Kernel::DotBf16 => {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: AVX512-BF16 was detected; rows r0..r1 of xb hold kp values
                        // each, and this task alone writes rows r0..r1, columns col0..+cols.
                        unsafe {
                            rows_dot_bf16(task!(&xb[r0 * kp..r1 * kp]))
                        }
                    }
                    Kernel::F32 => {
                        // SAFETY: as above (the widening kernels only read their inputs).
                        unsafe { rows_f32(level, task!(&xf[r0 * kp..r1 * kp])) }
                    }
                }
            }
        });
    }
}

/// Bytes of packed weight past which an AMX task takes [`AMX_WIDE_ROWS`] rows instead of
/// [`AMX_CHUNK_ROWS`]: a core's L2 cache on Sapphire Rapids. Each task streams the whole
/// weight past its rows; a weight the cache cannot keep comes from further out each time,
/// so fewer, taller tasks read it fewer times.
const AMX_L2_BYTES: usize = 2 << 20;
/// Rows of the activations one AMX task takes: rounded to bfloat16 into the thread's
/// scratch (48 KiB at 384 inputs: in the core's L1 or L2 cache) and multiplied against
/// every panel of the task before the next rows are read.
const AMX_CHUNK_ROWS: usize = 64;
/// [`AMX_CHUNK_ROWS`] for a weight over [`AMX_L2_BYTES`]. Measured on Sapphire Rapids, 2
/// cores, with `sift bench rerank --dtype bf16` at 512 tokens: bge-reranker-base (768
/// inputs, 3.5-4.5 MiB layers) 13.3-13.5 pairs/s at 128 rows against 12.0-12.7 at 64 and
/// 12.6-13.3 at 256; the MiniLM-L6 cross-encoder (384 inputs, at most 1.1 MiB) 57.2-57.6
/// at 128 against 58.1-58.2 at 64.
const AMX_WIDE_ROWS: usize = 128;

thread_local! {
    /// A thread's rounded rows for the AMX tasks, kept between products.
    static AMX_ROWS: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A thread's block of output for [`PackedBf16::matmul_blocks`], kept between products.
    static AMX_OUT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A calling thread's rounded rows for the panel-outermost AMX product.
    static AMX_SHARED: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A thread's rows between the two products of [`PackedBf16::matmul_pair`] and its
    /// tile of the first product's output, kept between products.
    static AMX_PAIR: std::cell::RefCell<(Vec<u16>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

impl PackedBf16 {
    /// `dst = x · Wᵀ` or `dst += x · Wᵀ` on the AMX tiles ([`amx`]), then `then`; the
    /// processor must have them. Tasks take [`PackedBf16::amx_rows`] rows each and every panel
    /// (the epilogue runs in the task, on rows still in the cache); with too few rows to
    /// keep the threads busy, the panels are split between tasks as well and the epilogue
    /// runs after them.
    fn product_amx(&self, x: Rows, m: usize, dst: Out, acc: bool, then: Option<Epilogue>) {
        let (n, k) = (self.n, self.k);
        let xs = 2 * self.stride;
        if self.streams_panels(m) {
            // the weight outweighs the rounded rows (a decoder's layers, short inputs):
            // stream each panel once over all rows instead of once per chunk of rows
            return self.product_amx_panels(x, m, dst, acc, then);
        }
        let panels = n.div_ceil(PANEL);
        let chunk = self.amx_rows();
        let chunks = m.div_ceil(chunk);
        let col_parts = self.amx_col_parts(m);
        let panels_per = panels.div_ceil(col_parts);
        (0..chunks * col_parts).into_par_iter().for_each(|task| {
            let (c, part) = (task / col_parts, task % col_parts);
            let (r0, r1) = (c * chunk, ((c + 1) * chunk).min(m));
            let (p0, p1) = (part * panels_per, ((part + 1) * panels_per).min(panels));
            if p0 >= p1 {
                return;
            }
            let rows = r1 - r0;
            AMX_ROWS.with_borrow_mut(|xb| {
                // rows rounded to bfloat16, zero past the inputs, whole blocks of rows
                let xb = x.chunk(r0, rows, k, xs, xb);
                // SAFETY: AMX is available (checked by the caller); this task alone writes
                // rows r0..r1 of panels p0..p1 (columns p0 * PANEL.. up to n).
                unsafe { self.amx_task(xb, rows, p0..p1, dst, r0, acc) };
            });
            if col_parts == 1
                && let Some(then) = then
            {
                // SAFETY: this task alone wrote (and now owns) rows r0..r1, all n columns.
                let out = unsafe { std::slice::from_raw_parts_mut(dst.at(r0 * n), rows * n) };
                then(r0, out);
            }
        });
        if col_parts > 1
            && let Some(then) = then
        {
            epilogue_rows(then, dst, m, n);
        }
    }
}

impl PackedBf16 {
    /// Whether a product of `m` rows runs on the AMX tiles in tasks that each hold whole
    /// rows (row chunks, every panel: [`PackedBf16::product_amx`]'s first form), as
    /// [`PackedBf16::matmul_blocks`], [`PackedBf16::matmul_tiles`] and
    /// [`PackedBf16::matmul_pair`] need to hand rows over from a task's scratch.
    fn amx_tasks_hold_rows(&self, m: usize) -> bool {
        Kernel::best() == Kernel::Amx
            && self.k > 0
            && self.n > 0
            && m > 2
            && !self.streams_panels(m)
            && self.amx_col_parts(m) == 1
    }

    /// Whether an AMX product of `m` rows streams each panel once over all rows
    /// ([`PackedBf16::product_amx_panels`]): the weight outweighs the rounded rows.
    fn streams_panels(&self, m: usize) -> bool {
        self.bytes() > m * 2 * self.stride * 2
    }

    /// Rows an AMX task takes: [`AMX_WIDE_ROWS`] for a weight over [`AMX_L2_BYTES`], else
    /// [`AMX_CHUNK_ROWS`].
    fn amx_rows(&self) -> usize {
        if self.bytes() > AMX_L2_BYTES {
            AMX_WIDE_ROWS
        } else {
            AMX_CHUNK_ROWS
        }
    }

    /// How many parts [`PackedBf16::product_amx`] splits the panels into for `m` rows: 1
    /// unless there are too few chunks of rows to keep every thread busy.
    fn amx_col_parts(&self, m: usize) -> usize {
        let threads = rayon::current_num_threads().max(1);
        let chunks = m.div_ceil(self.amx_rows());
        (2 * threads)
            .div_ceil(chunks)
            .clamp(1, self.n.div_ceil(PANEL))
    }

    /// One task's rows `xb` (rounded by `Rows::round_chunk`: whole blocks of rows) against
    /// the panels `panels` on the tiles, written (or, `acc`, added) to rows `r0..r0 + rows`
    /// of `dst` (`n` columns a row).
    ///
    /// # Safety
    /// AMX must be available ([`amx::available`]); `dst` must be valid for those rows and
    /// the panels' columns, and written by no other thread meanwhile.
    unsafe fn amx_task(
        &self,
        xb: &[u16],
        rows: usize,
        panels: std::ops::Range<usize>,
        dst: Out,
        r0: usize,
        acc: bool,
    ) {
        let (n, xs) = (self.n, 2 * self.stride);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the tiles are available (the caller's contract) and configured here for
        // these calls; xb holds whole blocks of rows of `xs` values; the output rows and
        // columns are the caller's.
        unsafe {
            amx::configure();
            for p in panels {
                let col0 = p * PANEL;
                amx::panel_rows(&amx::PanelRows {
                    x: xb,
                    xs,
                    rows,
                    lines: &self.lines[p * self.stride * 4..(p + 1) * self.stride * 4],
                    dst,
                    ld: n,
                    r0,
                    col0,
                    cols: (n - col0).min(PANEL),
                    acc,
                });
            }
            amx::release();
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (xb, rows, panels, dst, r0, acc, n, xs);
    }

    /// [`PackedBf16::product_amx`] with each task's output in its own scratch, handed to
    /// `sink` there (every task holds whole rows: `amx_col_parts(m) == 1`).
    fn product_amx_sink(&self, x: Rows, m: usize, sink: Epilogue) {
        let (n, panels) = (self.n, self.n.div_ceil(PANEL));
        self.amx_row_tasks(x, m, self.amx_rows(), |r0, rows, xb, out| {
            // on a 64-byte boundary, as the tiles store whole cache lines
            let out = aligned(out, rows * n);
            // SAFETY: AMX is available (the caller's kernel); the scratch holds rows x n
            // values and this task alone writes it.
            unsafe { self.amx_task(xb, rows, 0..panels, Out(out.as_mut_ptr()), 0, false) };
            sink(r0, out);
        });
    }

    /// [`PackedBf16::product_amx_sink`] a panel at a time: each task's rows against one
    /// panel into the thread's scratch (rows x [`PANEL`], on a cache line), handed to `sink`
    /// before the next panel (every task holds whole rows: `amx_col_parts(m) == 1`).
    fn product_amx_tiles(&self, x: Rows, m: usize, sink: TileSink) {
        self.amx_row_tasks(x, m, self.amx_rows(), |r0, rows, xb, out| {
            // SAFETY: AMX is available (the caller's kernel); xb is `Rows::chunk`'s.
            unsafe { self.amx_tiles(xb, rows, r0, out, sink) };
        });
    }

    /// The tasks of an AMX product that hold whole rows: `f(r0, rows, xb, out)` in parallel
    /// on each `chunk` rows of the `m` rows `x`, `xb` the task's rows as the tiles read them
    /// ([`Rows::chunk`]), `out` this thread's output scratch ([`with_task_scratch`]).
    fn amx_row_tasks(
        &self,
        x: Rows,
        m: usize,
        chunk: usize,
        f: impl Fn(usize, usize, &[u16], &mut Vec<f32>) + Sync,
    ) {
        let (k, xs) = (self.k, 2 * self.stride);
        (0..m.div_ceil(chunk)).into_par_iter().for_each(|c| {
            let (r0, rows) = (c * chunk, chunk.min(m - c * chunk));
            with_task_scratch(|xb, out| f(r0, rows, x.chunk(r0, rows, k, xs, xb), out));
        });
    }

    /// One task's rounded rows `xb` (`rows` of them, the product's from `r0`; whole blocks,
    /// as `Rows::round_chunk` makes them) against each panel in turn into `scratch` (rows x
    /// [`PANEL`] values, on a cache line), handed to `f` as a [`Tile`] before the next panel.
    /// The tiles are configured for each panel and released before `f` runs (which may run
    /// products of its own).
    ///
    /// # Safety
    /// AMX must be available ([`amx::available`]).
    unsafe fn amx_tiles(
        &self,
        xb: &[u16],
        rows: usize,
        r0: usize,
        scratch: &mut Vec<f32>,
        mut f: impl FnMut(Tile),
    ) {
        let (n, xs) = (self.n, 2 * self.stride);
        let out = aligned(scratch, rows * PANEL);
        for p in 0..n.div_ceil(PANEL) {
            let col = p * PANEL;
            let cols = (n - col).min(PANEL);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AMX is available (the caller's contract), configured here and
            // released before `f` runs; xb holds whole blocks of rows of `xs` values; the
            // scratch holds rows x PANEL values (the columns' `ld`), this task's alone.
            unsafe {
                amx::configure();
                amx::panel_rows(&amx::PanelRows {
                    x: xb,
                    xs,
                    rows,
                    lines: &self.lines[p * self.stride * 4..(p + 1) * self.stride * 4],
                    dst: Out(out.as_mut_ptr()),
                    ld: PANEL,
                    r0: 0,
                    col0: 0,
                    cols,
                    acc: false,
                });
                amx::release();
            }
            f(Tile {
                row: r0,
                col,
                cols,
                ld: PANEL,
                values: out,
            });
        }
    }

    /// [`PackedBf16::product_amx`] with the panels outermost: the rows are rounded once
    /// into a shared buffer and each task takes a panel (and a part of the rows when there
    /// are fewer panels than tasks); the epilogue runs after them.
    fn product_amx_panels(&self, x: Rows, m: usize, dst: Out, acc: bool, then: Option<Epilogue>) {
        let (n, k) = (self.n, self.k);
        let xs = 2 * self.stride;
        let padded = m.div_ceil(amx::BLOCK_ROWS) * amx::BLOCK_ROWS;
        let run = |xb: &mut Vec<u16>| {
            let xb = aligned(xb, padded * xs);
            xb.par_chunks_mut(xs).enumerate().for_each(|(r, d)| {
                if r < m {
                    x.round(r, k, d);
                    d[k..].fill(0);
                } else {
                    d.fill(0);
                }
            });
            let xb = &*xb;
            let panels = n.div_ceil(PANEL);
            let threads = rayon::current_num_threads().max(1);
            let row_parts = (2 * threads)
                .div_ceil(panels)
                .clamp(1, padded / amx::BLOCK_ROWS);
            // whole blocks of rows per task
            let rows_per = (padded / amx::BLOCK_ROWS).div_ceil(row_parts) * amx::BLOCK_ROWS;
            (0..panels * row_parts).into_par_iter().for_each(|task| {
                let (p, r) = (task / row_parts, task % row_parts);
                let (r0, r1) = (r * rows_per, ((r + 1) * rows_per).min(m));
                if r0 >= r1 {
                    return;
                }
                // SAFETY: AMX is available (checked by the caller); this task alone writes
                // rows r0..r1 of panel p; xb holds whole blocks of rows past r1.
                unsafe { self.amx_task(&xb[r0 * xs..], r1 - r0, p..p + 1, dst, r0, acc) };
            });
        };
        // the calling thread's buffer, kept between products (a fresh one if it is in use:
        // a product started from inside another's task)
        AMX_SHARED.with(|cell| match cell.try_borrow_mut() {
            Ok(mut xb) => run(&mut xb),
            Err(_) => run(&mut Vec::new()),
        });
        if let Some(then) = then {
            epilogue_rows(then, dst, m, n);
        }
    }
}

/// A pass over a product's output after it is written: `then(first_row, rows)` on blocks of
/// whole rows (`n` values a row).
pub type Epilogue<'a> = &'a (dyn Fn(usize, &mut [f32]) + Sync);

/// A block of a product's output ([`PackedBf16::matmul_tiles`]): rows `row..` and columns
/// `col..col + cols` of the `m × n` product, row `i` at `values[i * ld..i * ld + cols]`
/// (`values.len() / ld` rows; the values past `cols` in a row are not the product's).
pub struct Tile<'a> {
    /// The product's row of the tile's first row.
    pub row: usize,
    /// The product's column of the tile's first column.
    pub col: usize,
    /// Columns of the product in each row.
    pub cols: usize,
    /// Values from one row to the next in `values` (at least `cols`).
    pub ld: usize,
    /// The rows, `ld` values each.
    pub values: &'a mut [f32],
}

impl Tile<'_> {
    /// Rows held.
    pub fn rows(&self) -> usize {
        self.values.len() / self.ld.max(1)
    }
}

/// Takes the tiles of [`PackedBf16::matmul_tiles`], each once, from several threads.
pub type TileSink<'a> = &'a (dyn Fn(Tile) + Sync);

/// [`PackedBf16::matmul_pair`]'s pass between its products: `mid(tile, rows, ld)` writes
/// the tile's values (after a bias, an activation) as bfloat16 bits into `rows`, row `i`
/// at `rows[i * ld..i * ld + tile.cols]` (`rows` starts at the tile's first row and
/// column).
pub type MidSink<'a> = &'a (dyn Fn(Tile, &mut [u16], usize) + Sync);

/// Runs `f` on this thread's scratch for an AMX task (rounded rows, output), kept between
/// products; fresh buffers where they are in use (a product started from a sink).
fn with_task_scratch(f: impl FnOnce(&mut Vec<u16>, &mut Vec<f32>)) {
    AMX_ROWS.with(|xb| {
        AMX_OUT.with(|out| match (xb.try_borrow_mut(), out.try_borrow_mut()) {
            (Ok(mut xb), Ok(mut out)) => f(&mut xb, &mut out),
            _ => f(&mut Vec::new(), &mut Vec::new()),
        })
    });
}

/// Runs `then` over the written `m × n` output at `dst` in parallel blocks of rows.
fn epilogue_rows(then: Epilogue, dst: Out, m: usize, n: usize) {
    let rows = (16384 / n.max(1)).max(1);
    (0..m.div_ceil(rows)).into_par_iter().for_each(|b| {
        let (r0, r1) = (b * rows, ((b + 1) * rows).min(m));
        // SAFETY: the product wrote all m x n elements; this iteration alone holds rows
        // r0..r1.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.at(r0 * n), (r1 - r0) * n) };
        then(r0, out);
    });
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

/// # Safety
/// The processor must have AVX512-BF16 (with AVX-512F and BW).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn dot_avx512bf16(a: &[u16], b: &[u16]) -> f32 {
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

/// Copies `src` into `dst` (equally long) 32 values at a time: fixed-size moves the
/// compiler inlines, where `copy_from_slice` would call `memcpy` for every short row (a
/// head's 32 or 64 values of a key).
#[inline]
fn copy_bits(src: &[u16], dst: &mut [u16]) {
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

/// Rounds one row to bfloat16 (`dst` may be longer: the rest stays zero).
fn round_row(src: &[f32], dst: &mut [u16]) {
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn round_row_avx512(src: &[f32], dst: &mut [u16]) {
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

/// One task's share of a product: its rows of the activations against one block of a
/// panel, added into the output.
#[derive(Clone, Copy)]
struct Block<'a, T> {
    /// The task's rows of the activations, `xs` values each (bfloat16 bits or f32).
    x: &'a [T],
    xs: usize,
    /// The block's first input pair (its first value is `2 * q0`) and its pairs.
    q0: usize,
    pairs: usize,
    /// The panel's lines, four per input pair of the panel ([`line_at`]).
    lines: &'a [Line],
    /// The output, `ld` columns a row.
    dst: Out,
    ld: usize,
    /// Output row of `x`'s first row.
    r0: usize,
    /// The panel's first output column and its width (at most [`PANEL`]).
    col0: usize,
    cols: usize,
}

impl<T> Block<'_, T> {
    /// Lines a panel holds per column group.
    fn stride(&self) -> usize {
        self.lines.len() / 4
    }

    /// Where in the panel's lines the block's pair `q` (from `q0`) of column group `g` lies.
    #[inline(always)]
    fn line(&self, q: usize, g: usize) -> usize {
        line_at(self.stride(), self.q0 + q, g)
    }

    /// Rows of `x`.
    fn rows(&self) -> usize {
        self.x.len() / self.xs
    }

    /// Where the tile of rows `i..i + r` reads: its first row's first value of the block,
    /// and the panel's lines as 512-bit vectors ([`Block::line`] of them); a tile reaching
    /// past `x` or a block past the panel panics.
    #[cfg(target_arch = "x86_64")]
    fn tile_start(&self, i: usize, r: usize) -> (*const T, *const std::arch::x86_64::__m512i) {
        assert!((i + r) * self.xs <= self.x.len() && 2 * (self.q0 + self.pairs) <= self.xs);
        assert!(self.q0 + self.pairs <= self.stride());
        (
            self.x[i * self.xs + 2 * self.q0..].as_ptr(),
            self.lines.as_ptr().cast(),
        )
    }
}

/// Row tiles of one panel block on the AVX512-BF16 kernel.
///
/// # Safety
/// AVX512-BF16 must be present; `b.dst` must be valid for rows `b.r0..b.r0 + b.rows()` of
/// `b.ld` columns and no other thread may write columns `b.col0..b.col0 + b.cols` of those
/// rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn rows_dot_bf16(b: Block<u16>) {
    macro_rules! tile {
        ($r:literal, $i:expr) => {
            tile_dot_bf16::<$r>(&b, $i)
        };
    }
    // SAFETY: forwarded from the caller; the tile kernels read rows i.. of x and write the
    // rows r0 + i.. of dst.
    unsafe { row_tiles!(tile, b.rows(), 6, [1, 2, 3, 4, 5]) }
}

/// Adds an `R` x 64 tile of accumulators into the output rows of `b`'s rows `i..i + R`,
/// columns `b.col0..b.col0 + b.cols` (masked to `b.cols`).
///
/// # Safety
/// AVX-512F must be present; those elements must be valid and this task's alone.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn add_tile<T, const R: usize>(
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

/// Row tiles of one panel block with the weights widened to f32, on the vector
/// instructions of `level`.
///
/// # Safety
/// As [`rows_dot_bf16`], with the processor supporting `level` instead of AVX512-BF16.
unsafe fn rows_f32(level: crate::Level, b: Block<f32>) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level;
    #[cfg(target_arch = "x86_64")]
    match level {
        crate::Level::Avx512 => {
            // SAFETY: the caller's level is the processor's or below; the rest is forwarded.
            return unsafe { rows_widen_avx512(b) };
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

/// Row tiles of one panel block with AVX-512F: each line widened in registers (the even
/// inputs shifted into place, the odd ones masked), two fused multiply-adds per line.
///
/// # Safety
/// AVX-512F must be present; otherwise as [`rows_dot_bf16`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows_widen_avx512(b: Block<f32>) {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Reproducible values in [-1, 1) (an LCG), for the products' tests.
    pub(in crate::bf16) fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3F80);
        // 1 + 2^-8 is halfway between 1 and the next bfloat16: ties to even (1)
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8000)), 0x3F80);
        // 1 + 3 * 2^-8 is halfway above an odd one: rounds up
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F81_8000)), 0x3F82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8001)), 0x3F81);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7F80);
        assert_eq!(f32_to_bf16(-0.0), 0x8000);
        let mut a = vec![0u16; 40];
        let src = values(37, 9);
        round_row(&src, &mut a);
        for (j, (&d, &s)) in a.iter().zip(&src).enumerate() {
            assert_eq!(d, f32_to_bf16(s), "value {j}");
        }
        assert!(a[37..].iter().all(|&d| d == 0));
    }

    #[test]
    fn products_match_a_double_precision_reference_on_both_kernels() {
        // odd inputs, a partial last panel, rows not a multiple of the tiles, more input
        // pairs than a cache block; outputs on a cache line whose rows are too (the AMX
        // kernel's runs of tile steps, whole blocks added to in place: 45 x 600 x 128)
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 7, 5),
            (7, 64, 64),
            (13, 250, 130),
            (2, 200, 65),
            (9, 1, 70),
            (40, 100, 200),
            (70, 33, 64),
            (45, 600, 128),
        ] {
            let x = values(m * k, (m * 31 + k) as u64);
            let wf = values(n * k, (n * 17 + k) as u64);
            let w: Vec<u16> = wf.iter().map(|&v| f32_to_bf16(v)).collect();
            let packed = PackedBf16::pack(&w, n, k);
            let base = values(m * n, 5);
            // every kernel this processor runs: the dot product, and the widening one at
            // each instruction level up to the processor's
            let mut runs = vec![
                (Kernel::DotBf16, crate::level()),
                (Kernel::F32, crate::Level::Baseline),
            ];
            if crate::level() != crate::Level::Baseline {
                runs.push((Kernel::F32, crate::Level::Avx2));
            }
            if crate::level() == crate::Level::Avx512 {
                runs.push((Kernel::F32, crate::Level::Avx512));
            }
            if amx::available() {
                runs.push((Kernel::Amx, crate::level()));
            } else if (m, k, n) == (1, 1, 1) {
                eprintln!("skipped: the AMX kernel (this processor or OS has no AMX tiles)");
            }
            for (kernel, level) in runs {
                let rounded = (kernel == Kernel::DotBf16 && has_dot_bf16())
                    || (kernel == Kernel::Amx && amx::available());
                let mut buf = Vec::new();
                let out = aligned(&mut buf, m * n);
                out.copy_from_slice(&base);
                packed.matmul_acc_at(kernel, level, &x, m, out);
                for r in 0..m {
                    for c in 0..n {
                        let want: f64 = base[r * n + c] as f64
                            + (0..k)
                                .map(|j| {
                                    let a = x[r * k + j];
                                    let a = if rounded {
                                        bf16_to_f32(f32_to_bf16(a))
                                    } else {
                                        a
                                    };
                                    a as f64 * bf16_to_f32(w[c * k + j]) as f64
                                })
                                .sum::<f64>();
                        let got = out[r * n + c] as f64;
                        assert!(
                            (got - want).abs() <= 1e-5 * (1.0 + k as f64).sqrt(),
                            "{kernel:?} {level:?} {m}x{k}x{n} at ({r}, {c}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bf16_dot_matches_a_double_precision_sum_at_every_length() {
        for n in [0usize, 1, 31, 32, 33, 127, 128, 129, 384, 1000] {
            let a: Vec<u16> = values(n, 7).iter().map(|&v| f32_to_bf16(v)).collect();
            let b: Vec<u16> = values(n, 8).iter().map(|&v| f32_to_bf16(v)).collect();
            let want: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| bf16_to_f32(*x) as f64 * bf16_to_f32(*y) as f64)
                .sum();
            let got = dot(&a, &b) as f64;
            assert!(
                (got - want).abs() <= 1e-4 * (1.0 + n as f64).sqrt(),
                "n {n}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn written_products_equal_accumulated_ones_and_run_the_epilogue_once_per_row() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(8)
            .build()
            .unwrap();
        // rows outweighing the weight (chunks of rows on the tiles), a weight outweighing
        // the rows (panels outermost), a single row, an odd number of inputs
        for (m, k, n) in [(301, 70, 150), (5, 300, 200), (1, 64, 70), (130, 33, 64)] {
            let x = values(m * k, 5);
            let w: Vec<u16> = values(n * k, 6).iter().map(|&v| f32_to_bf16(v)).collect();
            let packed = PackedBf16::pack(&w, n, k);
            let mut kernels = vec![Kernel::F32];
            if has_dot_bf16() {
                kernels.push(Kernel::DotBf16);
            }
            if amx::available() {
                kernels.push(Kernel::Amx);
            } else {
                eprintln!("skipped: the AMX kernel's written products (no AMX tiles)");
            }
            for kernel in kernels {
                let mut want = vec![0f32; m * n];
                packed.matmul_acc_with(kernel, &x, m, &mut want);
                for threads in [1, 8] {
                    let run = || {
                        // garbage where the product writes: every element must be written
                        let mut out = vec![MaybeUninit::new(f32::NAN); m * n];
                        packed
                            .matmul_into_with(kernel, &x, m, &mut out, None)
                            .to_vec()
                    };
                    let got = if threads == 1 {
                        run()
                    } else {
                        pool.install(run)
                    };
                    assert_eq!(got, want, "{kernel:?} {m}x{k}x{n}, {threads} threads");
                    // the epilogue sees every row once, with its index
                    let seen: Vec<std::sync::atomic::AtomicUsize> =
                        (0..m).map(|_| Default::default()).collect();
                    let then = |first: usize, rows: &mut [f32]| {
                        assert_eq!(rows.len() % n, 0);
                        for (i, row) in rows.chunks_mut(n).enumerate() {
                            seen[first + i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            row.iter_mut().for_each(|v| *v += (first + i) as f32);
                        }
                    };
                    let fused = || {
                        let mut out = vec![MaybeUninit::new(f32::NAN); m * n];
                        packed
                            .matmul_into_with(kernel, &x, m, &mut out, Some(&then))
                            .to_vec()
                    };
                    let got = if threads == 1 {
                        fused()
                    } else {
                        pool.install(fused)
                    };
                    let shifted: Vec<f32> = want
                        .chunks(n)
                        .enumerate()
                        .flat_map(|(r, row)| row.iter().map(move |v| v + r as f32))
                        .collect();
                    assert_eq!(got, shifted, "{kernel:?} {m}x{k}x{n} epilogue");
                    assert!(
                        seen.iter()
                            .all(|c| c.load(std::sync::atomic::Ordering::Relaxed) == 1)
                    );
                }
            }
        }
    }

    #[test]
    fn rounded_rows_and_blocks_equal_the_written_product() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(8)
            .build()
            .unwrap();
        // many chunks of rows (scratch blocks on the tiles), few (the panels split between
        // tasks: written whole first), a weight outweighing the rows, two rows, odd inputs,
        // a weight over a core's L2 cache (taller chunks of rows), rows a multiple of 16
        // columns long with more than one run of tile steps (the AMX tasks' scratch)
        for (m, k, n) in [
            (1300, 1024, 1100),
            (300, 600, 320),
            (301, 70, 150),
            (40, 64, 300),
            (5, 300, 200),
            (2, 64, 70),
            (130, 33, 64),
        ] {
            let x = values(m * k, 7);
            let xb: Vec<u16> = x.iter().map(|&v| f32_to_bf16(v)).collect();
            let w: Vec<u16> = values(n * k, 8).iter().map(|&v| f32_to_bf16(v)).collect();
            let packed = PackedBf16::pack(&w, n, k);
            let mut want = vec![MaybeUninit::new(f32::NAN); m * n];
            let want = packed.matmul_into(&x, m, &mut want, None).to_vec();
            // spot checks against a double-precision product of the bfloat16 values (the
            // last row and column included)
            for t in 0..200.max(m) {
                let (i, j) = (t * 7919 % m, t * 104_729 % n);
                let (i, j) = if t == 0 { (m - 1, n - 1) } else { (i, j) };
                let exact: f64 = (0..k)
                    .map(|c| {
                        // (the widening kernel reads the rows unrounded)
                        let a = if has_dot_bf16() {
                            bf16_to_f32(xb[i * k + c]) as f64
                        } else {
                            x[i * k + c] as f64
                        };
                        a * bf16_to_f32(w[j * k + c]) as f64
                    })
                    .sum();
                let got = want[i * n + j] as f64;
                assert!(
                    (got - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                    "{m}x{k}x{n} ({i}, {j}): {got} vs {exact}"
                );
            }
            for threads in [1, 8] {
                let run = || {
                    let mut out = vec![MaybeUninit::new(f32::NAN); m * n];
                    let pre = packed
                        .matmul_rows_into(Rows::Bf16(&xb), m, &mut out, None)
                        .to_vec();
                    let blocks: Vec<std::sync::Mutex<Vec<f32>>> =
                        (0..m).map(|_| Default::default()).collect();
                    let sink = |first: usize, rows: &mut [f32]| {
                        assert_eq!(rows.len() % n, 0);
                        for (i, row) in rows.chunks(n).enumerate() {
                            blocks[first + i].lock().unwrap().extend_from_slice(row);
                        }
                    };
                    packed.matmul_blocks(Rows::F32(&x), m, &sink);
                    let blocks: Vec<f32> = blocks
                        .into_iter()
                        .flat_map(|b| b.into_inner().unwrap())
                        .collect();
                    // the tiles, each element handed over once
                    let tiles: Vec<std::sync::Mutex<(f32, usize)>> =
                        (0..m * n).map(|_| Default::default()).collect();
                    let sink = |t: Tile| {
                        assert!(t.cols <= t.ld && t.col + t.cols <= n);
                        assert_eq!(t.values.len() % t.ld, 0);
                        for (i, row) in t.values.chunks(t.ld).enumerate() {
                            for (j, &v) in row[..t.cols].iter().enumerate() {
                                let mut e = tiles[(t.row + i) * n + t.col + j].lock().unwrap();
                                *e = (v, e.1 + 1);
                            }
                        }
                    };
                    packed.matmul_tiles(Rows::F32(&x), m, &sink);
                    let tiles: Vec<(f32, usize)> =
                        tiles.into_iter().map(|t| t.into_inner().unwrap()).collect();
                    assert!(tiles.iter().all(|t| t.1 == 1), "{m}x{k}x{n}: tiles once");
                    let tiles: Vec<f32> = tiles.into_iter().map(|t| t.0).collect();
                    (pre, blocks, tiles)
                };
                let (pre, blocks, tiles) = if threads == 1 {
                    run()
                } else {
                    pool.install(run)
                };
                // pre-rounded rows: where the kernel rounds (AMX, AVX512-BF16), the same
                // product; the widening kernel multiplies unrounded f32 rows otherwise
                if has_dot_bf16() {
                    assert_eq!(pre, want, "{m}x{k}x{n} bf16 rows, {threads} threads");
                }
                // each row handed over once, as written
                assert_eq!(blocks, want, "{m}x{k}x{n} blocks, {threads} threads");
                assert_eq!(tiles, want, "{m}x{k}x{n} tiles, {threads} threads");
            }
        }
    }

    #[test]
    fn paired_products_equal_the_products_one_after_the_other() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(8)
            .build()
            .unwrap();
        // many chunks of rows with a middle of several panels (a partial last one), a
        // weight over a core's L2 cache, few rows (the products one after the other)
        for (m, k, n, n2) in [
            (300, 600, 320, 200),
            (1300, 256, 1100, 64),
            (5, 64, 70, 40),
            (64, 40, 33, 17),
        ] {
            let x = values(m * k, 11);
            let bits = |len: usize, seed: u64| -> Vec<u16> {
                values(len, seed).iter().map(|&v| f32_to_bf16(v)).collect()
            };
            let (first, second) = (
                PackedBf16::pack(&bits(n * k, 12), n, k),
                PackedBf16::pack(&bits(n2 * n, 13), n2, n),
            );
            let bias = values(n, 14);
            // the reference: the first product written whole, biased and rounded, then the
            // second
            let mut a = vec![MaybeUninit::new(0f32); m * n];
            let a = first.matmul_into(&x, m, &mut a, None);
            let mid: Vec<u16> = a
                .chunks(n)
                .flat_map(|r| r.iter().zip(&bias).map(|(v, b)| f32_to_bf16(v + b)))
                .collect();
            let mut want = vec![MaybeUninit::new(0f32); m * n2];
            let want = second
                .matmul_rows_into(Rows::Bf16(&mid), m, &mut want, None)
                .to_vec();
            let midsink = |t: Tile, rows: &mut [u16], ld: usize| {
                for (i, r) in t.values.chunks(t.ld).enumerate() {
                    for j in 0..t.cols {
                        rows[i * ld + j] = f32_to_bf16(r[j] + bias[t.col + j]);
                    }
                }
            };
            for threads in [1, 8] {
                let run = || {
                    let got: Vec<std::sync::Mutex<Vec<f32>>> =
                        (0..m).map(|_| Default::default()).collect();
                    let sink = |first: usize, rows: &mut [f32]| {
                        for (i, row) in rows.chunks(n2).enumerate() {
                            got[first + i].lock().unwrap().extend_from_slice(row);
                        }
                    };
                    first.matmul_pair(&second, Rows::F32(&x), m, &midsink, &sink);
                    got.into_iter()
                        .flat_map(|b| b.into_inner().unwrap())
                        .collect::<Vec<f32>>()
                };
                let got = if threads == 1 {
                    run()
                } else {
                    pool.install(run)
                };
                assert_eq!(got, want, "{m}x{k}x{n}x{n2}, {threads} threads");
            }
        }
    }

    #[test]
    fn row_splitting_with_many_threads_writes_every_element_once() {
        // one panel, many rows: the rows are split across 8 threads
        let (m, k, n) = (101, 33, 40);
        let x = values(m * k, 1);
        let w: Vec<u16> = values(n * k, 2).iter().map(|&v| f32_to_bf16(v)).collect();
        let packed = PackedBf16::pack(&w, n, k);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(8)
            .build()
            .unwrap();
        let mut many = vec![1.0f32; m * n];
        pool.install(|| packed.matmul_acc_with(Kernel::F32, &x, m, &mut many));
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let mut single = vec![1.0f32; m * n];
        one.install(|| packed.matmul_acc_with(Kernel::F32, &x, m, &mut single));
        assert_eq!(many, single);
        // the tiles: rows split into whole blocks across the threads
        if amx::available() {
            let (m, k, n) = (301, 70, 150);
            let x = values(m * k, 3);
            let w: Vec<u16> = values(n * k, 4).iter().map(|&v| f32_to_bf16(v)).collect();
            let packed = PackedBf16::pack(&w, n, k);
            let mut many = vec![1.0f32; m * n];
            pool.install(|| packed.matmul_acc_with(Kernel::Amx, &x, m, &mut many));
            let mut single = vec![1.0f32; m * n];
            one.install(|| packed.matmul_acc_with(Kernel::Amx, &x, m, &mut single));
            assert_eq!(many, single);
            let mut dot = vec![1.0f32; m * n];
            packed.matmul_acc_with(Kernel::F32, &x, m, &mut dot);
            let worst = many
                .iter()
                .zip(&dot)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 0.1, "AMX vs widened f32: {worst}");
        } else {
            eprintln!("skipped: the AMX kernel across threads (no AMX tiles)");
        }
    }
}
