//! The generic attention path: segments grouped into padded batches with masks, candle's
//! operations (any device and dtype).
use crate::layers::attention::*;
use candle_core::{DType, Result, Tensor};

/// Scores (batch x heads x queries x keys) one padded batch may hold: 2^27 values (256 MiB in
/// bfloat16); longer buckets are split.
const PADDED_SCORE_VALUES: usize = 1 << 27;

/// Groups of segments (indices, shortest first) that attention runs as one padded batch:
/// similar lengths, so padding adds at most a quarter to the sum of `len x keys`, and at most
/// [`PADDED_SCORE_VALUES`] scores per group (a longer sequence gets a group of its own).
pub(crate) fn buckets(segments: &[Segment], heads: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..segments.len())
        .filter(|&i| segments[i].len > 0)
        .collect();
    order.sort_by_key(|&i| (segments[i].len, segments[i].visible_keys()));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let (mut cost, mut max_len, mut max_keys) = (0usize, 0usize, 0usize);
    for i in order {
        let s = &segments[i];
        let (len, k) = (s.len, s.visible_keys());
        if let Some(g) = groups.last_mut() {
            let (ml, mk) = (max_len.max(len), max_keys.max(k));
            let padded = (g.len() + 1) * ml * mk;
            let exact = cost + len * k;
            if padded * 4 <= exact * 5 && padded * heads <= PADDED_SCORE_VALUES {
                g.push(i);
                (cost, max_len, max_keys) = (exact, ml, mk);
                continue;
            }
        }
        groups.push(vec![i]);
        (cost, max_len, max_keys) = (len * k, len, k);
    }
    groups
}

/// How one bucket's queries and keys are gathered from the packed rows.
pub(crate) enum Gather {
    /// Every sequence is `lq` long, sees all its keys, and follows the one before in the
    /// packed matrix: the bucket is the `b x lq` rows from `start`, with no copy.
    Rows { start: usize },
    /// Row indices of the `(b x lq)` queries and `(b x lk)` keys (padding repeats a valid row).
    Index { q: Tensor, k: Tensor },
}

/// One padded batch of [`PaddedPlan`].
pub(crate) struct Bucket {
    pub(crate) b: usize,
    pub(crate) lq: usize,
    pub(crate) lk: usize,
    pub(crate) gather: Gather,
    /// Score masks and biases, added in turn: ALiBi (1, heads, lq, lk), each sequence's keys
    /// (b, 1, 1, lk) with their biases, the causal window (1, 1, lq, lk).
    pub(crate) masks: Vec<Tensor>,
    /// (b, 1, lq, 1): 0 on queries that see no key (their context is zero), when any does.
    pub(crate) seen: Option<Tensor>,
    /// The sequences' own rows of the `b x lq` context, when padding is among them.
    pub(crate) keep: Option<Tensor>,
}

/// The generic attention (candle's ops, any device and dtype), prepared from the segments:
/// segments of similar lengths go together as one padded batch with a mask (see
/// [`buckets`]), so a GPU runs a few large batched matrix products instead of a few small
/// ones per sequence. A query that sees no key (possible only with masked keys and a sliding
/// window) gets a zero context, as on the CPU.
pub(crate) struct PaddedPlan {
    pub(crate) location: candle_core::DeviceLocation,
    pub(crate) dtype: DType,
    pub(crate) tokens: usize,
    /// The dtype scores are biased and soft-maxed in.
    pub(crate) score_dtype: DType,
    pub(crate) buckets: Vec<Bucket>,
    /// Each packed row's row in the buckets' contexts concatenated (the last, zero, row for
    /// rows outside every segment); `None` when they already are the packed rows in order.
    pub(crate) order: Option<Tensor>,
}

impl PaddedPlan {
    pub(crate) fn new(
        segments: &[Segment],
        heads: usize,
        causal: bool,
        window: Option<usize>,
        bias: ScoreBias,
        qkv: &Tensor,
    ) -> Result<PaddedPlan> {
        let (dev, dtype) = (qkv.device(), qkv.dtype());
        let tokens = qkv.dim(0)?;
        // Scores with ALiBi are biased and soft-maxed in f32, as the published code does them
        // (PyTorch promotes bf16 scores plus an f32 bias to f32; flash attention adds ALiBi in
        // f32): in bf16, a distance bias of -255 is rounded to a step of 1.
        let score_dtype = if bias.alibi.is_some() {
            DType::F32
        } else {
            dtype
        };
        // masked scores: finite (a fully masked row stays finite), twice still finite in f16
        let masked = match score_dtype {
            DType::F16 => -3e4f32,
            _ => -1e30f32,
        };
        let w = window.unwrap_or(usize::MAX);
        let index = |rows: Vec<u32>| {
            let n = rows.len();
            Tensor::from_vec(rows, n, dev)
        };
        let mut planned = Vec::new();
        let mut place: Vec<Option<u32>> = vec![None; tokens];
        let mut done = 0u32;
        for group in buckets(segments, heads) {
            let segs: Vec<Segment> = group.iter().map(|&i| segments[i]).collect();
            let b = segs.len();
            let lq = segs.iter().map(|s| s.len).max().unwrap_or(1);
            let lk = segs.iter().map(Segment::visible_keys).max().unwrap_or(1);
            let full = segs.iter().all(|s| s.len == lq);
            let gather = if full
                && lk == lq
                && segs.iter().all(|s| s.visible_keys() == lq)
                && segs.windows(2).all(|p| p[1].start == p[0].start + lq)
            {
                Gather::Rows {
                    start: segs[0].start,
                }
            } else {
                let mut q = Vec::with_capacity(b * lq);
                let mut k = Vec::with_capacity(b * lk);
                for s in &segs {
                    q.extend((0..lq).map(|i| (s.start + i.min(s.len - 1)) as u32));
                    k.extend((0..lk).map(|j| (s.start + j.min(s.visible_keys() - 1)) as u32));
                }
                Gather::Index {
                    q: index(q)?,
                    k: index(k)?,
                }
            };
            let mut masks = Vec::new();
            // ALiBi made on the device (distances times slopes)
            if let Some(slopes) = bias.alibi {
                let pos = |n: usize| Tensor::arange(0f32, n as f32, dev);
                let dist = pos(lq)?
                    .reshape((lq, 1))?
                    .broadcast_sub(&pos(lk)?.reshape((1, lk))?)?
                    .abs()?
                    .reshape((1, 1, lq, lk))?;
                let slopes = Tensor::from_slice(slopes, (1, heads, 1, 1), dev)?;
                masks.push(dist.broadcast_mul(&slopes)?.neg()?.to_dtype(score_dtype)?);
            }
            if bias.keys.is_some() || segs.iter().any(|s| s.visible_keys() != lk) {
                let m: Vec<f32> = segs
                    .iter()
                    .flat_map(|s| {
                        (0..lk).map(move |j| match bias.keys {
                            _ if j >= s.visible_keys() => masked,
                            Some(k) => k[s.start + j],
                            None => 0.0,
                        })
                    })
                    .collect();
                masks.push(Tensor::from_vec(m, (b, 1, 1, lk), dev)?.to_dtype(score_dtype)?);
            }
            if causal {
                let m: Vec<f32> = (0..lq)
                    .flat_map(|i| {
                        (0..lk).map(move |j| if j <= i && i - j < w { 0.0 } else { masked })
                    })
                    .collect();
                masks.push(Tensor::from_vec(m, (1, 1, lq, lk), dev)?.to_dtype(score_dtype)?);
            }
            // queries that see no key (a window past the last visible key) get a zero context
            let seen: Vec<f32> = segs
                .iter()
                .flat_map(|s| {
                    let keys = s.visible_keys();
                    (0..lq).map(move |i| {
                        let visible = !causal || i < keys || i - (keys - 1) < w;
                        if visible { 1.0 } else { 0.0 }
                    })
                })
                .collect();
            let seen = if seen.contains(&0.0) {
                Some(Tensor::from_vec(seen, (b, 1, lq, 1), dev)?.to_dtype(dtype)?)
            } else {
                None
            };
            // keep the sequences' own rows
            let mut keep = Vec::new();
            for (bi, s) in segs.iter().enumerate() {
                for i in 0..s.len {
                    keep.push((bi * lq + i) as u32);
                    place[s.start + i] = Some(done);
                    done += 1;
                }
            }
            let keep = if full { None } else { Some(index(keep)?) };
            planned.push(Bucket {
                b,
                lq,
                lk,
                gather,
                masks,
                seen,
                keep,
            });
        }
        let in_order = place.iter().enumerate().all(|(r, p)| *p == Some(r as u32));
        // rows outside every segment get a zero context (the row after the buckets'), as the
        // CPU kernel leaves them
        let order = if in_order {
            None
        } else {
            Some(index(
                place.into_iter().map(|p| p.unwrap_or(done)).collect(),
            )?)
        };
        Ok(PaddedPlan {
            location: dev.location(),
            dtype,
            tokens,
            score_dtype,
            buckets: planned,
            order,
        })
    }

    /// Whether this plan was made for a `qkv` of this device, dtype and length.
    pub(crate) fn fits(&self, qkv: &Tensor) -> bool {
        qkv.device().location() == self.location
            && qkv.dtype() == self.dtype
            && qkv.dim(0).ok() == Some(self.tokens)
    }

    pub(crate) fn run(&self, qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
        let h = heads * head_dim;
        let mut parts: Vec<Tensor> = Vec::with_capacity(self.buckets.len() + 1);
        for bk in &self.buckets {
            let (b, lq, lk) = (bk.b, bk.lq, bk.lk);
            let (q_in, kv_in) = match &bk.gather {
                Gather::Rows { start } => {
                    let rows = qkv.narrow(0, *start, b * lq)?;
                    (rows.clone(), rows)
                }
                Gather::Index { q, k } => (qkv.index_select(q, 0)?, qkv.index_select(k, 0)?),
            };
            let split = |x: &Tensor, part: usize, rows: usize| -> Result<Tensor> {
                x.narrow(1, part * h, h)?
                    .reshape((b, rows, heads, head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let (q, k, v) = (
                split(&q_in, 0, lq)?,
                split(&kv_in, 1, lk)?,
                split(&kv_in, 2, lk)?,
            );
            let mut scores = q.matmul(&k.t()?)?.to_dtype(self.score_dtype)?; // (b, heads, lq, lk)
            for m in &bk.masks {
                scores = scores.broadcast_add(m)?;
            }
            let mut probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(self.dtype)?;
            if let Some(seen) = &bk.seen {
                probs = probs.broadcast_mul(seen)?;
            }
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b * lq, h))?;
            parts.push(match &bk.keep {
                Some(keep) => ctx.index_select(keep, 0)?,
                None => ctx,
            });
        }
        match &self.order {
            None if parts.is_empty() => Tensor::zeros((0, h), self.dtype, qkv.device()),
            None if parts.len() == 1 => Ok(parts.remove(0)),
            None => Tensor::cat(&parts, 0),
            Some(order) => {
                parts.push(Tensor::zeros((1, h), self.dtype, qkv.device())?);
                Tensor::cat(&parts, 0)?.index_select(order, 0)
            }
        }
    }
}

/// The padded path run once (tests compare it with the other paths).
#[cfg(test)]
pub(crate) fn attention_padded(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
    window: Option<usize>,
    bias: ScoreBias,
) -> Result<Tensor> {
    check_segments(segments, qkv.dim(0)?)?;
    PaddedPlan::new(segments, heads, causal, window, bias, qkv)?.run(qkv, heads, head_dim)
}
