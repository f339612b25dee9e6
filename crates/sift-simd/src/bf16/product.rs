//! The products: their entry points on [`PackedBf16`], the choice of [`Kernel`], and the
//! split of the register kernels' products over panels and rows on rayon's pool (the AMX
//! products' tasks are [`super::amx_tasks`]'s).
use rayon::prelude::*;
use std::mem::MaybeUninit;

use super::block::{Block, Out};
use super::convert::bf16_to_f32;
use super::pack::{PANEL, PackedBf16};
use super::rows::Rows;
use super::vector::has_dot_bf16;
use super::{amx, avx512, widen};

/// Input pairs per cache block: a panel's block is `PAIRS_PER_BLOCK * 256` bytes (40 KiB,
/// in the panel's two halves; measured best among 64-256 on AMD Zen 4 with the lines pair
/// by pair), which every row tile of the task reads.
const PAIRS_PER_BLOCK: usize = 160;

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

impl PackedBf16 {
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

    /// [`PackedBf16::matmul_acc_with`], the widening kernel compiled for `level` (at most
    /// the processor's).
    #[cfg(test)]
    pub(super) fn matmul_acc_at(
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
    pub(super) fn product(
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
                            avx512::rows_dot_bf16(task!(&xb[r0 * kp..r1 * kp]))
                        }
                    }
                    Kernel::F32 => {
                        // SAFETY: as above (the widening kernels only read their inputs).
                        unsafe { widen::rows_f32(level, task!(&xf[r0 * kp..r1 * kp])) }
                    }
                }
            }
        });
    }
}

/// Runs `then` over the written `m × n` output at `dst` in parallel blocks of rows.
pub(super) fn epilogue_rows(then: Epilogue, dst: Out, m: usize, n: usize) {
    let rows = (16384 / n.max(1)).max(1);
    (0..m.div_ceil(rows)).into_par_iter().for_each(|b| {
        let (r0, r1) = (b * rows, ((b + 1) * rows).min(m));
        // SAFETY: the product wrote all m x n elements; this iteration alone holds rows
        // r0..r1.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.at(r0 * n), (r1 - r0) * n) };
        then(r0, out);
    });
}
