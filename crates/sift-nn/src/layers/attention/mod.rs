//! Multi-head self-attention over packed (unpadded) sequences: the segments, the score
//! biases, and [`Attention`], which runs one of three paths: the CPU kernel (`cpu.rs`), the
//! generic padded batches of candle's ops (`padded.rs`), or flash attention on CUDA
//! (`flash.rs`).
pub(crate) mod cpu;
pub(crate) mod flash;
pub(crate) mod padded;
use crate::layers::kernels::*;
use candle_core::{DType, Result, Tensor};
use cpu::*;
use padded::*;

/// One sequence of a packed batch, as attention sees it.
#[derive(Debug, Clone, Copy)]
pub struct Segment {
    /// First row of the sequence in the packed matrix.
    pub start: usize,
    /// Rows (tokens) of the sequence.
    pub len: usize,
    /// Keys visible to every query: the first `keys` tokens (the rest are masked padding).
    pub keys: usize,
}

impl Segment {
    /// Keys every query sees: `keys`, at least 1 and at most `len` (1 for an empty segment).
    pub fn visible_keys(&self) -> usize {
        self.keys.clamp(1, self.len.max(1))
    }

    /// Segments of sequences of the given lengths, packed one after the other, every token
    /// visible.
    pub fn packed(lens: impl IntoIterator<Item = usize>) -> Vec<Segment> {
        let mut start = 0;
        lens.into_iter()
            .map(|len| {
                let s = Segment {
                    start,
                    len,
                    keys: len,
                };
                start += len;
                s
            })
            .collect()
    }
}

/// Checks that `segments` are in order, do not overlap and lie within `tokens` rows (the
/// packed attention writes each segment's rows from its own thread: overlapping segments
/// would be a data race).
fn check_segments(segments: &[Segment], tokens: usize) -> Result<()> {
    let mut end = 0usize;
    for s in segments {
        let Some(stop) = s.start.checked_add(s.len) else {
            candle_core::bail!("attention: segment {s:?} overflows")
        };
        if s.start < end {
            candle_core::bail!(
                "attention: segment {s:?} overlaps the one before or is out of order"
            )
        }
        if stop > tokens {
            candle_core::bail!("attention: segment {s:?} beyond the {tokens} tokens")
        }
        end = stop;
    }
    Ok(())
}

/// A flash plan (or that flash attention does not apply) with the device, dtype and rows it
/// was decided for.
#[cfg(feature = "flash-attn")]
type FlashCache = (
    (candle_core::DeviceLocation, DType, usize),
    Option<flash::varlen::Plan>,
);

/// Multi-head self-attention over packed sequences, prepared once for a batch and run at
/// every layer ([`Attention::run`]).
///
/// `qkv` is `(tokens, 3 * heads * head_dim)`: queries (already scaled by 1/sqrt(head_dim)),
/// keys, values. Each segment attends only within itself, to its first `keys` tokens, and,
/// when causal, only to earlier positions. The context is `(tokens, heads * head_dim)`.
/// Segments run in parallel on the CPU; they must be sorted, disjoint and within the rows of
/// `qkv` (checked at each run).
///
/// What the GPU paths derive from the segments alone is made on the first run and kept for
/// the layers after it, so later layers upload nothing: flash attention's sequence offsets,
/// key rows and ALiBi slopes, and the padded path's buckets, gather indices,
/// masks, ALiBi distances and the order the rows come back in.
pub struct Attention<'a> {
    segments: &'a [Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
    pub(in crate::layers) window: Option<usize>,
    bias: ScoreBias<'a>,
    bf16: bool,
    /// Where the tiles run ([`Attention::bf16`]), the context comes back in bfloat16.
    round_output: bool,
    padded: std::cell::OnceCell<PaddedPlan>,
    #[cfg(feature = "flash-attn")]
    flash: std::cell::OnceCell<FlashCache>,
}

impl<'a> Attention<'a> {
    /// Bidirectional attention over `segments`, `heads` heads of `head_dim`.
    pub fn new(segments: &'a [Segment], heads: usize, head_dim: usize) -> Self {
        Attention {
            segments,
            heads,
            head_dim,
            causal: false,
            window: None,
            bias: ScoreBias::default(),
            bf16: false,
            round_output: false,
            padded: std::cell::OnceCell::new(),
            #[cfg(feature = "flash-attn")]
            flash: std::cell::OnceCell::new(),
        }
    }

    /// Causal when `causal`: a token sees only earlier positions and itself.
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Causal, and with `window` `W` a token sees only the `W` latest positions, itself
    /// included (Mistral's sliding window: key `j` is visible to query `i` when
    /// `i - W < j <= i`).
    pub fn windowed(mut self, window: Option<usize>) -> Self {
        self.causal = true;
        self.window = window;
        self
    }

    /// With additive biases on the scores ([`ScoreBias`]). The same paths run as without: the fused kernel on the CPU in f32, flash attention on CUDA (ALiBi only:
    /// key biases that are not all zero take the padded path), the padded batches elsewhere.
    pub fn biased(mut self, bias: ScoreBias<'a>) -> Self {
        self.bias = bias;
        self
    }

    /// With `on`, where the tiles run the products ([`Attention::bf16`]), the context comes
    /// back rounded to bfloat16 (a BF16 tensor) instead of f32: for a consumer that rounds
    /// it anyway (a packed projection on the tiles), half the memory traffic and no
    /// rounding pass there. Elsewhere the context stays f32.
    pub fn rounded_output(mut self, on: bool) -> Self {
        self.round_output = on;
        self
    }

    /// With `on`, the CPU kernel rounds the queries, keys, probabilities and values to
    /// bfloat16 for its two products and runs them on the AMX tiles, accumulating in f32
    /// (as PyTorch's bfloat16 attention does; the softmax stays f32), where the processor
    /// has the tiles; elsewhere, and on other devices, nothing changes. For models whose
    /// linear layers are packed bfloat16 ([`Packing`](crate::layers::ops::Packing)).
    pub fn bf16(mut self, on: bool) -> Self {
        self.bf16 = on;
        self
    }

    /// The context of one layer's `qkv`.
    pub fn run(&self, qkv: &Tensor) -> Result<Tensor> {
        let (segments, heads, head_dim) = (self.segments, self.heads, self.head_dim);
        let (causal, window, bias) = (self.causal, self.window, self.bias);
        let (tokens, width) = qkv.dims2()?;
        if let Some(a) = bias.alibi
            && a.len() != heads
        {
            candle_core::bail!("attention: {} ALiBi slopes for {heads} heads", a.len())
        }
        if let Some(k) = bias.keys
            && k.len() != tokens
        {
            candle_core::bail!("attention: {} key biases for {tokens} rows", k.len())
        }
        check_segments(segments, tokens)?;
        if width != 3 * heads * head_dim {
            candle_core::bail!(
                "attention: qkv of width {width}, expected {}",
                3 * heads * head_dim
            )
        }
        if window.is_some() && !causal {
            candle_core::bail!("attention: a sliding window needs causal attention")
        }
        if window == Some(0) {
            candle_core::bail!("attention: a sliding window of 0 tokens")
        }
        if fused_cpu(qkv.device()) && matches!(qkv.dtype(), DType::F32 | DType::BF16) {
            // bfloat16 input (a layer's rounded output) goes to the tile products as it is;
            // without them, to the padded batches in bfloat16 as before
            let op = AttentionOp {
                segments: segments.to_vec(),
                heads,
                head_dim,
                causal,
                window,
                alibi: bias.alibi.map(<[f32]>::to_vec),
                key_bias: bias.keys.map(<[f32]>::to_vec),
                bf16: self.bf16,
                round_output: self.round_output,
            };
            if qkv.dtype() == DType::F32 || op.tiles() {
                return qkv.contiguous()?.apply_op1_no_bwd(&op);
            }
        }
        #[cfg(feature = "flash-attn")]
        {
            // the plan, or that there is none, holds for the device, dtype and rows it was
            // made for
            let key = (qkv.device().location(), qkv.dtype(), tokens);
            let fresh;
            let plan = match self.flash.get() {
                Some((k, p)) if *k == key => p.as_ref(),
                Some(_) => {
                    fresh = self.flash_plan(qkv)?;
                    fresh.as_ref()
                }
                None => {
                    let p = self.flash_plan(qkv)?;
                    self.flash.get_or_init(|| (key, p)).1.as_ref()
                }
            };
            if let Some(plan) = plan {
                return plan.run(qkv, heads, head_dim);
            }
        }
        let plan = match self.padded.get() {
            Some(p) if p.fits(qkv) => p,
            Some(_) => return self.plan(qkv)?.run(qkv, heads, head_dim),
            None => {
                let p = self.plan(qkv)?;
                self.padded.get_or_init(|| p)
            }
        };
        plan.run(qkv, heads, head_dim)
    }

    #[cfg(feature = "flash-attn")]
    fn flash_plan(&self, qkv: &Tensor) -> Result<Option<flash::varlen::Plan>> {
        flash::varlen::Plan::new(
            qkv,
            self.segments,
            self.head_dim,
            self.causal,
            self.window,
            self.bias,
        )
    }

    fn plan(&self, qkv: &Tensor) -> Result<PaddedPlan> {
        PaddedPlan::new(
            self.segments,
            self.heads,
            self.causal,
            self.window,
            self.bias,
            qkv,
        )
    }
}

/// Additive biases on the attention scores, for encoders whose published code adds them to
/// `Q K^T` before the softmax: JinaBERT's ALiBi, and the `-10000` that JinaBERT and
/// XLM-RoBERTa add on keys holding the padding id.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScoreBias<'a> {
    /// ALiBi slopes, one per head: query `i` and key `j` of a sequence (positions within it)
    /// get `-slopes[h] * |i - j|` (symmetric, as JinaBERT's bidirectional ALiBi).
    pub alibi: Option<&'a [f32]>,
    /// One value per packed row, added to every score on that row as a key.
    pub keys: Option<&'a [f32]>,
}

/// [`ScoreBias::keys`] for packed sequences whose published encoder masks keys holding the
/// padding id (`(1 - mask) * -10000` on the scores, mask `ids != pad`), or `None` when no
/// sequence holds it.
pub fn padding_key_bias(seqs: &[&[u32]], pad: u32) -> Option<Vec<f32>> {
    seqs.iter().any(|s| s.contains(&pad)).then(|| {
        seqs.iter()
            .flat_map(|s| s.iter().map(|&t| if t == pad { -10000.0 } else { 0.0 }))
            .collect()
    })
}
