//! Attention on the CPU in one op over every (sequence, head) pair.
use crate::layers::attention::*;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape};
use sift_simd::bf16::Rows;
use sift_simd::bf16::attention::HeadProducts;
use sift_simd::elementwise::{softmax_row, softmax_row_bf16};

/// Attention on the CPU in one op: every (sequence, head) pair in parallel, reading Q, K and
/// V in place from the packed `qkv` matrix through strides and writing its context straight
/// into the output (no per-head copies, transposes or concatenation).
pub(crate) struct AttentionOp {
    pub(crate) segments: Vec<Segment>,
    pub(crate) heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) causal: bool,
    /// Causal sliding window (tokens seen, the query's own included).
    pub(crate) window: Option<usize>,
    /// ALiBi slopes per head ([`ScoreBias::alibi`]).
    pub(crate) alibi: Option<Vec<f32>>,
    /// Score bias per key row ([`ScoreBias::keys`]).
    pub(crate) key_bias: Option<Vec<f32>>,
    /// The two products on bfloat16 tiles ([`HeadProducts`]) where the processor has them.
    pub(crate) bf16: bool,
    /// On the tiles, the context rounded to bfloat16 (a BF16 output) for a consumer that
    /// rounds it anyway.
    pub(crate) round_output: bool,
}

/// Scores computed at once per (sequence, head) task: 128 Ki values (512 KiB), about a
/// core's L2 cache.
const SCORE_BLOCK_VALUES: usize = 128 * 1024;

thread_local! {
    /// A thread's attention scratch: a block of scores and the tile products' packing.
    static ATTENTION_SCRATCH: std::cell::RefCell<(Vec<f32>, Option<HeadProducts>)> =
        const { std::cell::RefCell::new((Vec::new(), None)) };
}

/// A raw output pointer shared by tasks that write disjoint parts of one buffer: f32 or
/// bfloat16 bits.
#[derive(Clone, Copy)]
enum OutPtr {
    F32(*mut f32),
    Bf16(*mut u16),
}
// SAFETY: each task writes only its own (rows of a sequence) x (columns of a head) block,
// and `check_segments` has made sure the sequences' rows do not overlap.
unsafe impl Send for OutPtr {}
// SAFETY: as for `Send`: tasks share the pointer, never the same element.
unsafe impl Sync for OutPtr {}

impl AttentionOp {
    /// Whether the products run on the tiles ([`HeadProducts`]).
    pub(crate) fn tiles(&self) -> bool {
        self.bf16 && HeadProducts::new(self.head_dim).is_some()
    }
}

/// What every (sequence, head) task reads and where it writes.
#[derive(Clone, Copy)]
struct Pass<'a> {
    /// The f32 input the f32 products read (empty for bfloat16 input, which only the tiles
    /// read).
    qkv: &'a [f32],
    /// The input as the tiles read it.
    all: Rows<'a>,
    /// The context, `tokens x heads * head_dim`.
    out: OutPtr,
}

/// The op's output, f32 or bfloat16: zero-filled, or, where the segments cover every row one
/// after another, left for the tasks to write whole (no zero-fill then).
struct Output {
    f32: Vec<f32>,
    bf16: Vec<half::bf16>,
    len: usize,
    rounded: bool,
    covered: bool,
}

impl Output {
    /// Room for `len` values, in bfloat16 when `rounded`, written whole by the tasks when
    /// `covered`.
    fn new(len: usize, rounded: bool, covered: bool) -> Output {
        let mut o = Output {
            f32: Vec::new(),
            bf16: Vec::new(),
            len,
            rounded,
            covered,
        };
        match (rounded, covered) {
            (false, false) => o.f32 = vec![0f32; len],
            (false, true) => o.f32.reserve_exact(len),
            (true, false) => o.bf16 = vec![half::bf16::ZERO; len],
            (true, true) => o.bf16.reserve_exact(len),
        }
        o
    }

    /// Where the tasks write.
    fn ptr(&mut self) -> OutPtr {
        if self.rounded {
            OutPtr::Bf16(self.bf16.as_mut_ptr().cast())
        } else {
            OutPtr::F32(self.f32.as_mut_ptr())
        }
    }

    /// The written values.
    ///
    /// # Safety
    /// Where `covered`, every one of the `len` values must have been written through
    /// [`Output::ptr`].
    unsafe fn finish(mut self) -> CpuStorage {
        if self.covered {
            // SAFETY: the segments cover every row one after another (checked) and the
            // tasks wrote every (row, head) block of them: all tokens x h values (the
            // caller's contract).
            unsafe {
                if self.rounded {
                    self.bf16.set_len(self.len)
                } else {
                    self.f32.set_len(self.len)
                }
            }
        }
        if self.rounded {
            CpuStorage::BF16(self.bf16)
        } else {
            CpuStorage::F32(self.f32)
        }
    }
}

impl CustomOp1 for AttentionOp {
    fn name(&self) -> &'static str {
        "attention-packed"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (qkv, all, tokens) = self.inputs(storage, layout)?;
        let h = self.heads * self.head_dim;
        // every row written when the segments cover them all, one after another: no
        // zero-fill then
        let covered = self
            .segments
            .iter()
            .try_fold(0, |end, s| (s.start == end).then_some(end + s.len))
            == Some(tokens);
        let mut out = Output::new(tokens * h, self.round_output && self.tiles(), covered);
        let pass = Pass {
            qkv,
            all,
            out: out.ptr(),
        };
        self.run_tasks(&pass);
        // SAFETY: the tasks wrote every (row, head) block of every segment, which cover
        // every row where `covered`.
        let storage = unsafe { out.finish() };
        Ok((storage, Shape::from((tokens, h))))
    }
}

impl AttentionOp {
    /// The input checked against the op: as f32 (empty for bfloat16 input) and as the tiles
    /// read it, and its rows.
    fn inputs<'s>(
        &self,
        storage: &'s CpuStorage,
        layout: &Layout,
    ) -> Result<(&'s [f32], Rows<'s>, usize)> {
        use half::slice::HalfFloatSliceExt;
        let Some((a, b)) = layout.contiguous_offsets() else {
            candle_core::bail!("attention: contiguous input only")
        };
        // f32, or bfloat16 for the tile products (which would round it anyway); the f32
        // products need f32
        let (qkv, all) = match storage {
            CpuStorage::F32(data) => (&data[a..b], Rows::F32(&data[a..b])),
            CpuStorage::BF16(data) if self.tiles() => {
                (&[][..], Rows::Bf16(data[a..b].reinterpret_cast()))
            }
            _ => candle_core::bail!("attention: f32 input (bf16 only on the tiles)"),
        };
        let (tokens, width) = layout.shape().dims2()?;
        let heads = self.heads;
        let h = heads * self.head_dim;
        if width != 3 * h {
            candle_core::bail!("attention: qkv of width {width}, expected {}", 3 * h)
        }
        check_segments(&self.segments, tokens)?;
        if self.alibi.as_ref().is_some_and(|a| a.len() != heads)
            || self.key_bias.as_ref().is_some_and(|k| k.len() != tokens)
        {
            candle_core::bail!("attention: score biases do not match {heads} heads, {tokens} rows")
        }
        Ok((qkv, all, tokens))
    }

    /// Every (sequence, head) task in parallel, each on its thread's scratch.
    fn run_tasks(&self, pass: &Pass) {
        use rayon::prelude::*;
        let d = self.head_dim;
        let tasks: Vec<(usize, usize)> = (0..self.segments.len())
            .flat_map(|s| (0..self.heads).map(move |hd| (s, hd)))
            .collect();
        let want_tiles = self.tiles();
        tasks.par_iter().for_each(|&(si, hd)| {
            // the thread's scratch, kept between heads and layers (rayon's per-split init
            // would allocate and zero-fill a score block many times a layer); fresh where it
            // is in use (a task started inside another)
            ATTENTION_SCRATCH.with(|cell| match cell.try_borrow_mut() {
                Ok(mut s) => {
                    let (scores, tiles) = &mut *s;
                    if tiles.as_ref().map(HeadProducts::head_dim) != want_tiles.then_some(d) {
                        *tiles = want_tiles.then(|| HeadProducts::new(d)).flatten();
                    }
                    self.head(pass, scores, tiles, si, hd)
                }
                Err(_) => self.head(
                    pass,
                    &mut Vec::new(),
                    &mut want_tiles.then(|| HeadProducts::new(d)).flatten(),
                    si,
                    hd,
                ),
            })
        });
    }

    /// Head `hd` of segment `si`: the scores of each block of query rows, their
    /// probabilities, the context (on the tiles where `tiles` holds them, else the f32
    /// products).
    fn head(
        &self,
        pass: &Pass,
        scores: &mut Vec<f32>,
        tiles: &mut Option<HeadProducts>,
        si: usize,
        hd: usize,
    ) {
        let (Pass { qkv, all, out }, d) = (*pass, self.head_dim);
        let h = self.heads * d;
        let w = 3 * h;
        let seg = self.segments[si];
        let (len, keys) = (seg.len, seg.visible_keys());
        if len == 0 {
            return;
        }
        // Query rows go in blocks whose scores stay in the core's cache while they are
        // computed, soft-maxed and multiplied by V (long sequences, e.g. GME's thousands of
        // image patches, would otherwise stream len x keys scores through memory three
        // times); causal blocks skip the keys no row sees.
        let block = (SCORE_BLOCK_VALUES / keys).clamp(16, 512).min(len);
        // score rows on the tiles: a multiple of 16 apart from a 64-byte boundary, so the
        // tiles store each row whole (a row across two cache lines costs both)
        let tiled = tiles.is_some();
        let stride = |kv: usize| if tiled { kv.next_multiple_of(16) } else { kv };
        // every score a block reads is written by its product first: the buffer only grows,
        // never refilled
        let scores = sift_simd::mem::aligned(scores, block * stride(keys));
        let base = seg.start * w;
        if let Some(t) = tiles.as_mut() {
            let (k, v) = (all.from(base + h + hd * d), all.from(base + 2 * h + hd * d));
            t.load_kv(k, v, w, keys);
        }
        for r0 in (0..len).step_by(block) {
            let rows = block.min(len - r0);
            let kv = if self.causal {
                (r0 + rows).min(keys)
            } else {
                keys
            };
            // (read by the f32 products only: empty for bf16 input)
            let ld = stride(kv);
            let q = qkv.as_ptr().wrapping_add(base + r0 * w + hd * d);
            let k = qkv.as_ptr().wrapping_add(base + h + hd * d);
            let v = qkv.as_ptr().wrapping_add(base + 2 * h + hd * d);
            match tiles.as_mut() {
                Some(t) => {
                    let q = all.from(base + r0 * w + hd * d);
                    t.scores(q, w, rows, kv, scores, ld);
                }
                // SAFETY: q, k, v point into qkv with rows `w` apart; the extents read are
                // within the segment's rows; `scores` holds rows x kv values.
                None => unsafe {
                    matmul(
                        (rows, kv, d),
                        (scores.as_mut_ptr(), kv),
                        (q, w),
                        // K^T: a key's values are a column
                        (k, 1, w),
                    )
                },
            }
            // the tiles read the probabilities rounded, written by the softmax
            let rounded = tiles.as_mut().map(|t| t.probabilities(rows, kv));
            self.probabilities(seg, hd, r0, kv, &mut scores[..rows * ld], ld, rounded);
            let at = (seg.start + r0) * h + hd * d;
            // SAFETY: this task alone writes rows start..start+len, columns
            // hd*d..(hd+1)*d, of the tokens x h output.
            unsafe {
                match (tiles.as_mut(), out) {
                    (Some(t), OutPtr::Bf16(o)) => t.context_bf16(rows, kv, o.add(at), h),
                    (Some(t), OutPtr::F32(o)) => t.context_rounded(rows, kv, o.add(at), h),
                    (None, OutPtr::F32(o)) => matmul(
                        (rows, d, kv),
                        (o.add(at), h),
                        (scores.as_ptr(), kv),
                        (v, w, 1),
                    ),
                    (None, OutPtr::Bf16(_)) => {
                        unreachable!("bfloat16 output on tiles only")
                    }
                }
            }
        }
    }

    /// A block's scores (query rows `r0..` of `seg`, head `hd`; rows `ld` apart, `kv` keys
    /// each) made probabilities in place: the keys the causal mask and the window hide
    /// weigh nothing, the ALiBi and key biases are added, each row soft-maxed; on the tiles
    /// also rounded into `rounded` (`xs` values a row).
    #[allow(clippy::too_many_arguments)]
    fn probabilities(
        &self,
        seg: Segment,
        hd: usize,
        r0: usize,
        kv: usize,
        scores: &mut [f32],
        ld: usize,
        mut rounded: Option<(&mut [u16], usize)>,
    ) {
        for (i, row) in scores.chunks_mut(ld).enumerate() {
            let row = &mut row[..kv];
            let visible = if self.causal {
                (r0 + i + 1).min(kv)
            } else {
                kv
            };
            // keys that slid out of the window weigh nothing: the softmax runs over the
            // window alone (the query's own position is always in it)
            let first = self
                .window
                .map_or(0, |wn| (r0 + i + 1).saturating_sub(wn).min(visible));
            row[..first].fill(0.0);
            let qi = r0 + i;
            if let Some(slopes) = &self.alibi {
                let sl = slopes[hd];
                for (j, x) in row[first..visible].iter_mut().enumerate() {
                    *x -= sl * (qi as f32 - (first + j) as f32).abs();
                }
            }
            if let Some(kb) = &self.key_bias {
                let kb = &kb[seg.start + first..seg.start + visible];
                row[first..visible]
                    .iter_mut()
                    .zip(kb)
                    .for_each(|(x, b)| *x += b);
            }
            match rounded.as_mut() {
                Some((p, xs)) => {
                    let p = &mut p[i * *xs..(i + 1) * *xs];
                    p[..first].fill(0);
                    p[kv..].fill(0);
                    softmax_row_bf16(&mut row[first..], visible - first, &mut p[first..kv]);
                }
                None => softmax_row(&mut row[first..], visible - first),
            }
        }
    }
}

/// `dst = a b` on one thread (the attention tasks run in parallel): `(m, n, k)` sizes, `dst`
/// `m x n` and `a` `m x k` row-major with their row strides, `b` `k x n` with its row and
/// column strides.
///
/// # Safety
/// Each pointer must be valid for the extent its sizes and strides cover, and `dst` this
/// caller's alone.
unsafe fn matmul(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (*mut f32, usize),
    (a, a_rs): (*const f32, usize),
    (b, b_rs, b_cs): (*const f32, usize, usize),
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            false,
            a,
            1,
            a_rs as isize,
            b,
            b_cs as isize,
            b_rs as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}
