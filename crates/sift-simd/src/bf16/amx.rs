//! [`super::Kernel::Amx`]: the product on Intel AMX tiles (Sapphire Rapids and later).
//!
//! Eight tile registers of 16 rows × 64 bytes: four accumulators `C` (16 rows × 16 f32
//! columns each, a 32 × 32 block of the output), two tiles of activations `A` (16 rows ×
//! 32 bfloat16 inputs) and two of weights `B` (16 input pairs × 16 columns: 16 consecutive
//! lines of a panel, 1 KiB, exactly as [`super::PackedBf16::pack`] lays them out).
//! `tdpbf16ps` multiplies them pairwise into the f32 accumulators, as `vdpbf16ps` does,
//! 16 × 16 × 32 products an instruction.
//!
//! The buffers made for the tiles (rounded rows, packed weights, output scratch, attention
//! scores and context) start on a 64-byte boundary with rows a multiple of 64 bytes apart:
//! a tile row that straddles two cache lines costs both, and on the Sapphire Rapids machine
//! this was measured on a 16-row tile load took 16-20 ns that way against 2.5 ns aligned
//! (stores 9-16 ns against 5; `examples/amx_tiles`). An output the caller hands in (a
//! tensor's memory) is written where it lies.
//!
//! The instructions are written in `asm!` (the AMX intrinsics and target features are not
//! stable Rust); [`available`] reads [`crate::cpu`], which checked CPUID and asked Linux for the
//! tile state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`) once, before any tile is
//! used.
use super::block::Out;
use super::pack::{BLOCK_ROWS, Line, STEP_PAIRS, line_at};

/// Whether the processor has AMX-BF16 and Linux lets this process use the tiles
/// ([`crate::Cpu::amx`]).
pub fn available() -> bool {
    crate::cpu().amx
}

/// The tile configuration: palette 1, every tile 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn full() -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            // bytes per row (u16, little-endian) at 16 + 2t, rows at 48 + t
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
        }
        TileConfig(c)
    }
}

/// Tile steps a whole block of output runs before the next block of rows takes its turn
/// (its four output tiles stored and loaded again at the next steps), for products of
/// [`KBLOCK_MIN_STEPS`] to [`KBLOCK_MAX_STEPS`] steps (512-1,023 inputs): a run's weight
/// tiles of the half-panel (16 KiB) stay in the core's L1 cache over the task's blocks of
/// rows. Measured on Sapphire Rapids, one thread, 128 rows (`GFLOP/s` at 8 steps against
/// every step in one run): 768 x 2304 1,270-1,360 vs 1,100-1,160, 768 x 3072 1,180-1,270
/// vs 1,070-1,130, 640 x 2560 1,130-1,200 vs 1,015-1,040, 512 x 2048 1,130-1,220 vs
/// 1,100-1,150, 896 x 3584 about the same; at 384 inputs (the half-panel fits L1 whole)
/// 1,150 vs 1,260-1,300, and at 1,024-3,072 inputs 2-12% slower.
const KBLOCK_STEPS: usize = 8;
/// The fewest tile steps split into runs of [`KBLOCK_STEPS`].
const KBLOCK_MIN_STEPS: usize = 16;
/// The most tile steps split into runs of [`KBLOCK_STEPS`].
const KBLOCK_MAX_STEPS: usize = 31;

/// Four 16 x 16 f32 output tiles on a 64-byte boundary.
#[repr(C, align(64))]
struct Tiles([f32; 1024]);

/// One task's rows of the activations against one panel, added into the output.
pub(super) struct PanelRows<'a> {
    /// The activations' rows rounded to bfloat16, `xs` values each (a multiple of 32, zero
    /// past the inputs), from the task's first row; readable for `rows` rounded up to
    /// [`BLOCK_ROWS`].
    pub x: &'a [u16],
    pub xs: usize,
    /// Rows the task writes.
    pub rows: usize,
    /// The panel's lines ([`line_at`]): four per input pair, at least `xs / 2` pairs (zero
    /// past the inputs).
    pub lines: &'a [Line],
    /// The output, `ld` columns a row; the task's first row is `r0`, its panel's first column
    /// `col0`, `cols` wide (at most 64).
    pub dst: Out,
    /// Whether the product is added to the output (`out += x · Wᵀ`) or written over it
    /// (`out = x · Wᵀ`: the output is never read, so it may be uninitialised).
    pub acc: bool,
    pub ld: usize,
    pub r0: usize,
    pub col0: usize,
    pub cols: usize,
}

/// Loads the tile configuration the products use on this thread (palette 1, all eight
/// tiles 16 rows x 64 bytes), for the tile instructions that follow until [`release`].
///
/// # Safety
/// [`available`] must have returned true.
#[cfg(target_arch = "x86_64")]
pub unsafe fn configure() {
    let cfg = TileConfig::full();
    // SAFETY: the tiles were granted (`available`, the caller's contract); `ldtilecfg`
    // reads the 64-byte configuration.
    unsafe { std::arch::asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack)) };
}

/// Releases this thread's tiles (after [`configure`] and the tile instructions that follow it).
///
/// # Safety
/// [`available`] must have returned true.
#[cfg(target_arch = "x86_64")]
pub unsafe fn release() {
    // SAFETY: the tiles were granted; `tilerelease` touches no memory.
    unsafe { std::arch::asm!("tilerelease", options(nostack)) };
}

/// Runs `p` on the tiles.
///
/// # Safety
/// [`configure`] must have run on this thread (and no [`release`] since); `p.dst` must be
/// valid for rows `p.r0..p.r0 + p.rows`, columns `p.col0..p.col0 + p.cols`, written by no
/// other thread.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn panel_rows(p: &PanelRows) {
    let steps = p.xs / (2 * STEP_PAIRS);
    // pairs per column group of the panel
    let pairs = p.lines.len() / 4;
    let blocks = p.rows.div_ceil(BLOCK_ROWS);
    assert!(p.xs.is_multiple_of(2 * STEP_PAIRS) && p.cols <= 64);
    assert!(p.x.len() >= blocks * BLOCK_ROWS * p.xs);
    assert!(pairs >= steps * STEP_PAIRS && pairs.is_multiple_of(STEP_PAIRS));
    // four 16 x 16 f32 tiles on 64-byte boundaries, written by the tile stores before they
    // are read (never zero-filled)
    let mut acc = std::mem::MaybeUninit::<Tiles>::uninit();
    let bufs: [*mut f32; 4] = {
        let base = acc.as_mut_ptr().cast::<f32>();
        // SAFETY: each offset lies inside the 4 KiB buffer
        unsafe { [base, base.add(256), base.add(512), base.add(768)] }
    };
    // the panel's column halves outermost, then runs of tile steps (KBLOCK_STEPS): a run's
    // weight tiles stay in the core's L1 cache over the task's blocks of rows, which stream
    // from L2. Runs only where the output's rows lie on cache lines (a tile stored or loaded
    // across cache lines costs several times an aligned one: module docs); elsewhere, and
    // outside the measured range, every step in one run.
    let on_lines = p.dst.0.cast::<u8>().align_offset(64) == 0 && p.ld.is_multiple_of(16);
    let run = if on_lines && (KBLOCK_MIN_STEPS..=KBLOCK_MAX_STEPS).contains(&steps) {
        KBLOCK_STEPS
    } else {
        steps.max(1)
    };
    for g in [0usize, 2] {
        if g * 16 >= p.cols {
            break;
        }
        for s0 in (0..steps).step_by(run) {
            for b in 0..blocks {
                let i = b * BLOCK_ROWS;
                // a whole 32 x 32 block inside the task's rows and the panel's columns
                // accumulates in place: its output tiles are loaded (or zeroed when the
                // product is written over the output, before its first run), added to and
                // stored back, a run at a time; a partial one is summed from zero over every
                // step at the first run and added (or written) through a buffer
                let whole = i + BLOCK_ROWS <= p.rows && (g + 2) * 16 <= p.cols;
                if !whole && s0 > 0 {
                    continue;
                }
                let steps = if whole {
                    s0..(s0 + run).min(steps)
                } else {
                    0..steps
                };
                // where the four output tiles C00 C01 / C10 C11 are loaded from and stored
                // to: the block itself, or the buffers (their pointers only made for a whole
                // block, which the output holds)
                let (c, stride) = if whole {
                    // SAFETY: a whole block's 32 rows x 32 columns lie inside the caller's
                    // rows and columns of the output.
                    let c = unsafe { p.dst.0.add((p.r0 + i) * p.ld + p.col0 + g * 16) };
                    let l = p.ld;
                    // SAFETY: as above: the four tiles' first elements.
                    unsafe { ([c, c.add(16), c.add(16 * l), c.add(16 * l + 16)], l * 4) }
                } else {
                    (bufs, 64)
                };
                let load = whole && (p.acc || steps.start > 0);
                // SAFETY: the tiles are configured (the caller's contract); the loads and
                // stores of `c` cover the block (inside the caller's rows and columns: it is
                // whole) or the 1 KiB buffers of `bufs`; the steps read rows of a block of `x`
                // and 16 consecutive lines of a step's group (asserted above).
                unsafe {
                    start_block(c, stride, load);
                    block_steps(p, i, g, steps, pairs);
                    store_block(c, stride);
                }
                if !whole {
                    // SAFETY: the buffers hold the block's sums (stored above); the rows and
                    // columns written are the caller's (bounded by `p.rows`, `p.cols`).
                    unsafe { add_partial_block(p, &bufs, i, g) };
                }
            }
        }
    }
}

/// Starts a block's four accumulator tiles `tmm0..tmm3`: loaded from `c` (rows `stride`
/// bytes apart) when `load`, else zeroed.
///
/// # Safety
/// The tiles must be configured; with `load`, each `c[t]` must be readable for 16 rows of
/// 64 bytes `stride` bytes apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn start_block(c: [*mut f32; 4], stride: usize, load: bool) {
    if load {
        // SAFETY: the caller's contract; the loads read the four tiles' rows.
        unsafe {
            std::arch::asm!(
                "tileloadd tmm0, [{c0} + {s}*1]",
                "tileloadd tmm1, [{c1} + {s}*1]",
                "tileloadd tmm2, [{c2} + {s}*1]",
                "tileloadd tmm3, [{c3} + {s}*1]",
                c0 = in(reg) c[0],
                c1 = in(reg) c[1],
                c2 = in(reg) c[2],
                c3 = in(reg) c[3],
                s = in(reg) stride,
                options(nostack, readonly)
            )
        };
    } else {
        // SAFETY: the tiles are configured (the caller's contract); no memory is touched.
        unsafe {
            std::arch::asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack)
            )
        };
    }
}

/// The tile steps `steps` of the block of rows `i..i + 32` against column groups `g`, `g +
/// 1` of the panel (`pairs` input pairs per group), added into `tmm0..tmm3`.
///
/// # Safety
/// The tiles must be configured; the block's rows of `p.x` and the steps' lines of
/// `p.lines` must be inside them ([`panel_rows`]' assertions).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn block_steps(
    p: &PanelRows,
    i: usize,
    g: usize,
    steps: std::ops::Range<usize>,
    pairs: usize,
) {
    let (xstride, wstride) = (p.xs * 2, std::mem::size_of::<Line>());
    for s in steps {
        // SAFETY: the caller's contract: the two activation tiles are rows i..i + 32 of a
        // block of `x`, the two weight tiles 16 consecutive lines each of the step's groups.
        unsafe {
            let a0 = p.x.as_ptr().add(i * p.xs + s * 2 * STEP_PAIRS);
            let a1 = a0.add(16 * p.xs);
            // groups g and g + 1 of the step: two tiles, one after the other
            let b0 = p.lines.as_ptr().add(line_at(pairs, s * STEP_PAIRS, g));
            let b1 = b0.add(STEP_PAIRS);
            std::arch::asm!(
                "tileloadd tmm4, [{a0} + {xs}*1]",
                "tileloadd tmm6, [{b0} + {ws}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b1} + {ws}*1]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a1} + {xs}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a0 = in(reg) a0,
                a1 = in(reg) a1,
                b0 = in(reg) b0,
                b1 = in(reg) b1,
                xs = in(reg) xstride,
                ws = in(reg) wstride,
                options(nostack, readonly)
            );
        }
    }
}

/// Stores the block's four accumulator tiles `tmm0..tmm3` to `c` (rows `stride` bytes
/// apart).
///
/// # Safety
/// The tiles must be configured; each `c[t]` must be writable for 16 rows of 64 bytes
/// `stride` bytes apart, by this thread alone.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_block(c: [*mut f32; 4], stride: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        std::arch::asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            c0 = in(reg) c[0],
            c1 = in(reg) c[1],
            c2 = in(reg) c[2],
            c3 = in(reg) c[3],
            s = in(reg) stride,
            options(nostack)
        )
    };
}

/// Adds (or, without `p.acc`, writes) a partial block's sums in `bufs` (C00 C01 / C10 C11:
/// rows `i..`, `i + 16..`; columns of groups `g`, `g + 1`) into the output, the rows and
/// columns of it inside `p.rows` and `p.cols`.
///
/// # Safety
/// `bufs` must hold the four stored tiles (16 rows of 16 f32 each); `p.dst` must be valid
/// for the caller's rows and columns, written by no other thread.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add_partial_block(p: &PanelRows, bufs: &[*mut f32; 4], i: usize, g: usize) {
    for (t, &c) in bufs.iter().enumerate() {
        let (dr, group) = (16 * (t / 2), g + t % 2);
        let col = group * 16;
        if col >= p.cols {
            continue;
        }
        let width = (p.cols - col).min(16);
        for r in 0..16 {
            let row = i + dr + r;
            if row >= p.rows {
                break;
            }
            // SAFETY: row `row` < p.rows and columns col..col + width <= p.cols of the
            // output are the caller's; row r of tile t holds 16 sums in its buffer.
            unsafe {
                let o = p.dst.0.add((p.r0 + row) * p.ld + p.col0 + col);
                let sum = c.add(16 * r);
                if width == 16 {
                    // whole tile rows: fixed-size moves the compiler vectorises
                    let sum = &*sum.cast::<[f32; 16]>();
                    if p.acc {
                        let out = &mut *o.cast::<[f32; 16]>();
                        out.iter_mut().zip(sum).for_each(|(d, v)| *d += v);
                    } else {
                        o.cast::<[f32; 16]>().write_unaligned(*sum);
                    }
                } else if p.acc {
                    let out = std::slice::from_raw_parts_mut(o, width);
                    let sum = std::slice::from_raw_parts(sum, width);
                    out.iter_mut().zip(sum).for_each(|(d, v)| *d += v);
                } else {
                    // the output may be uninitialised: written, never read
                    std::ptr::copy_nonoverlapping(sum, o, width);
                }
            }
        }
    }
}
