//! How a product on the AMX tiles ([`super::amx`]) is split into tasks: chunks of rows
//! against every panel (each task holding whole rows, so its rows can be handed over from
//! its scratch while cached), panels split too when there are few rows, or each panel
//! streamed once over all rows when the weight outweighs them; the threads' scratch.
use rayon::prelude::*;

use super::amx;
use super::block::Out;
use super::pack::{BLOCK_ROWS, PANEL, PackedBf16};
use super::product::{Epilogue, Kernel, MidSink, Tile, TileSink, epilogue_rows};
use super::rows::Rows;
use crate::mem::aligned;

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
    pub(super) fn product_amx(
        &self,
        x: Rows,
        m: usize,
        dst: Out,
        acc: bool,
        then: Option<Epilogue>,
    ) {
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
    /// [`PackedBf16::matmul_pair`] on the AMX tiles: each task its rows through the first
    /// weight a panel at a time ([`PackedBf16::product_amx_tiles`]' loop), `mid` writing
    /// them into the task's middle rows, then those through every panel of `second`
    /// ([`PackedBf16::product_amx_sink`]'s).
    pub(super) fn product_amx_pair(
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
            let padded = rows.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
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
}

impl PackedBf16 {
    /// Whether a product of `m` rows runs on the AMX tiles in tasks that each hold whole
    /// rows (row chunks, every panel: [`PackedBf16::product_amx`]'s first form), as
    /// [`PackedBf16::matmul_blocks`], [`PackedBf16::matmul_tiles`] and
    /// [`PackedBf16::matmul_pair`] need to hand rows over from a task's scratch.
    pub(super) fn amx_tasks_hold_rows(&self, m: usize) -> bool {
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
    pub(super) fn product_amx_sink(&self, x: Rows, m: usize, sink: Epilogue) {
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
    pub(super) fn product_amx_tiles(&self, x: Rows, m: usize, sink: TileSink) {
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
        let padded = m.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
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
            let row_parts = (2 * threads).div_ceil(panels).clamp(1, padded / BLOCK_ROWS);
            // whole blocks of rows per task
            let rows_per = (padded / BLOCK_ROWS).div_ceil(row_parts) * BLOCK_ROWS;
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
