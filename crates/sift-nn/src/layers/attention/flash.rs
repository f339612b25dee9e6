//! Variable-length flash attention on CUDA (bfloat16 and float16), and the layout it runs
//! from (made on the host, checked on the CPU against the padded path).

#[cfg(any(test, feature = "flash-attn"))]
use crate::layers::attention::{ScoreBias, Segment};

/// How variable-length flash attention runs a batch of segments, worked out on the host from
/// the segments alone: the cumulative query and key offsets of the packed sequences, the rows
/// of the visible keys where some sequence masks its trailing keys, and the window. `None`
/// where flash attention cannot give Sift's result: segments that leave rows between or after
/// them or hold no row, key biases that are not all zero, a head size it has no kernel for, or
/// a causal or ALiBi sequence with masked keys (flash attention aligns a causal mask and
/// ALiBi's distances to the last key when a sequence has fewer keys than queries; Sift aligns
/// them to the first).
///
/// Semantics relied on (flash-attn's `mha_varlen_fwd`, as candle-flash-attn calls it): query
/// `i` of a sequence with `lq` queries and `lk` keys sees key `j` when
/// `i + lk - lq - left <= j <= i + lk - lq + right` (no bound where one is `None`), and ALiBi
/// adds `-slope * |i + lk - lq - j|`. The tests run a CPU model of exactly that on this layout
/// against the padded path.
#[cfg(any(test, feature = "flash-attn"))]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FlashLayout {
    pub(crate) cu_q: Vec<u32>,
    pub(crate) cu_k: Vec<u32>,
    /// The packed rows of the visible keys; `None` when every key is visible.
    pub(crate) kv_rows: Option<Vec<u32>>,
    pub(crate) max_q: usize,
    pub(crate) max_k: usize,
    pub(crate) left: Option<usize>,
    pub(crate) right: Option<usize>,
}

#[cfg(any(test, feature = "flash-attn"))]
impl FlashLayout {
    pub(crate) fn new(
        segments: &[Segment],
        tokens: usize,
        head_dim: usize,
        causal: bool,
        window: Option<usize>,
        bias: ScoreBias,
    ) -> Option<FlashLayout> {
        if bias.keys.is_some_and(|k| k.iter().any(|&b| b != 0.0)) {
            return None;
        }
        let contiguous = segments
            .iter()
            .scan(0usize, |end, s| {
                let ok = s.start == *end && s.len > 0;
                *end = s.start + s.len;
                Some(ok)
            })
            .all(|ok| ok);
        let covered = segments.last().map(|s| s.start + s.len) == Some(tokens);
        if !head_dim.is_multiple_of(8) || head_dim > 512 || !contiguous || !covered {
            return None;
        }
        let all_keys = segments.iter().all(|s| s.keys >= s.len);
        if (causal || bias.alibi.is_some()) && !all_keys {
            return None;
        }
        let mut cu_q = vec![0u32];
        let mut cu_k = vec![0u32];
        for s in segments {
            cu_q.push((s.start + s.len) as u32);
            cu_k.push(cu_k.last().copied().unwrap_or(0) + s.visible_keys() as u32);
        }
        let kv_rows = (!all_keys).then(|| {
            segments
                .iter()
                .flat_map(|s| (s.start..s.start + s.visible_keys()).map(|r| r as u32))
                .collect()
        });
        Some(FlashLayout {
            cu_q,
            cu_k,
            kv_rows,
            max_q: segments.iter().map(|s| s.len).max().unwrap_or(1),
            max_k: segments
                .iter()
                .map(Segment::visible_keys)
                .max()
                .unwrap_or(1),
            // key j is visible to query i when i - left <= j <= i + right
            left: window.map(|w| w - 1),
            right: causal.then_some(0),
        })
    }
}

/// Variable-length flash attention on CUDA (bfloat16 and float16) over the packed batch.
#[cfg(feature = "flash-attn")]
pub(crate) mod varlen {
    use super::FlashLayout;
    use crate::layers::attention::{ScoreBias, Segment};
    use candle_core::{DType, Result, Tensor};

    /// A [`FlashLayout`] with its small inputs (offsets, key rows, ALiBi slopes) on the
    /// device, made once per batch and run at every layer.
    pub(crate) struct Plan {
        tokens: usize,
        layout: FlashLayout,
        cu_q: Tensor,
        cu_k: Tensor,
        kv_rows: Option<Tensor>,
        slopes: Option<Tensor>,
    }

    impl Plan {
        /// The plan, or `None` where flash attention does not apply (not CUDA, f32, or
        /// [`FlashLayout::new`]'s cases): the caller falls back to the padded path.
        pub(crate) fn new(
            qkv: &Tensor,
            segments: &[Segment],
            head_dim: usize,
            causal: bool,
            window: Option<usize>,
            bias: ScoreBias,
        ) -> Result<Option<Plan>> {
            let dev = qkv.device();
            if !dev.is_cuda() || !matches!(qkv.dtype(), DType::BF16 | DType::F16) {
                return Ok(None);
            }
            let tokens = qkv.dim(0)?;
            let Some(layout) = FlashLayout::new(segments, tokens, head_dim, causal, window, bias)
            else {
                return Ok(None);
            };
            let upload = |v: &[u32]| Tensor::from_vec(v.to_vec(), v.len(), dev);
            Ok(Some(Plan {
                tokens,
                cu_q: upload(&layout.cu_q)?,
                cu_k: upload(&layout.cu_k)?,
                kv_rows: layout.kv_rows.as_deref().map(upload).transpose()?,
                slopes: bias
                    .alibi
                    .map(|s| Tensor::from_vec(s.to_vec(), s.len(), dev))
                    .transpose()?,
                layout,
            }))
        }

        pub(crate) fn run(&self, qkv: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
            let h = heads * head_dim;
            let part = |x: &Tensor, i: usize| -> Result<Tensor> {
                x.narrow(1, i * h, h)?
                    .contiguous()?
                    .reshape((x.dim(0)?, heads, head_dim))
            };
            let q = part(qkv, 0)?;
            // sequences whose trailing keys are masked: their visible keys, packed
            let kv = match &self.kv_rows {
                Some(rows) => qkv.index_select(rows, 0)?,
                None => qkv.clone(),
            };
            let (k, v) = (part(&kv, 1)?, part(&kv, 2)?);
            let l = &self.layout;
            // the queries are already scaled
            let ctx = match &self.slopes {
                // flash attention's ALiBi is `-slope * |i + keys - queries - j|`: JinaBERT's
                // symmetric `|i - j|` for the bidirectional, unmasked sequences that reach here
                Some(slopes) => candle_flash_attn::flash_attn_varlen_alibi_windowed(
                    &q, &k, &v, slopes, &self.cu_q, &self.cu_k, l.max_q, l.max_k, 1.0, l.left,
                    l.right,
                )?,
                None => candle_flash_attn::flash_attn_varlen_windowed(
                    &q, &k, &v, &self.cu_q, &self.cu_k, l.max_q, l.max_k, 1.0, l.left, l.right,
                )?,
            };
            ctx.reshape((self.tokens, h))
        }
    }
}
