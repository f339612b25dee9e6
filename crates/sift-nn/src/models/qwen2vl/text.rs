//! The language model ([`TextModel`]): Qwen2 decoder layers (Mistral, Llama and Qwen3 run on
//! them too), M-RoPE positions ([`mrope_positions`]), the image tokens' places
//! ([`place_image_tokens`]), the head ([`LmHead`]) and the KV cache ([`KvCache`]).
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};

use super::config::pick;
use super::text_config::TextConfig;
use crate::layers::ops::{self, Act, Packing, Proj, Segment, parse_act};
use crate::layers::rotary::{inv_freq, rotate_qkv, tables};

/// RMS-normalises each query head with `qn` and each key head with `kn` in a packed
/// `(tokens, (hq + 2 hk) * d)` projection (values untouched).
fn norm_heads(
    qkv: &Tensor,
    hq: usize,
    hk: usize,
    d: usize,
    qn: &RmsNorm,
    kn: &RmsNorm,
) -> Result<Tensor> {
    let n = qkv.dim(0)?;
    let heads = |start: usize, count: usize, norm: &RmsNorm| -> Result<Tensor> {
        norm.forward(
            &qkv.narrow(1, start * d, count * d)?
                .contiguous()?
                .reshape((n * count, d))?,
        )?
        .reshape((n, count * d))
    };
    let q = heads(0, hq, qn)?;
    let k = heads(hq, hk, kn)?;
    let v = qkv.narrow(1, (hq + hk) * d, hk * d)?;
    Tensor::cat(&[&q, &k, &v], 1)
}

struct DecoderLayer {
    input_norm: RmsNorm,
    /// Per-head query / key norms (Qwen3), the query's carrying the attention scale.
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    qkv: Proj,
    o: Proj,
    post_norm: RmsNorm,
    gate: Proj,
    up: Proj,
    down: Proj,
}

/// The Qwen2 language model of Qwen2-VL (`model.*` or `model.language_model.*`), without
/// the LM head.
///
/// Loaded in bfloat16 on the CPU, its linear layers are packed for the CPU's bfloat16
/// kernels (`PackedLinear` in `layers::ops`) and everything else (embeddings after the lookup, norms,
/// rotary positions, attention, residuals) runs in f32; elsewhere it runs in the weights'
/// dtype on candle's ops.
pub struct TextModel {
    embed: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    cfg: TextConfig,
    act: Act,
    inv_freq: Vec<f32>,
    /// bfloat16 weights packed on the CPU; f32 activations.
    packed: bool,
}

/// M-RoPE positions of one token: temporal, height, width.
pub type Position = [u32; 3];

/// Qwen2-VL's multimodal positions of one sequence (transformers' `get_rope_index`): text
/// tokens count up on all three axes; each image's run of `image_token`s (one per `merge` x
/// `merge` patches of its `grids` entry, in order) takes (frame, row, column) offsets from
/// the next text position, which then moves past the image's largest side.
pub fn mrope_positions(
    ids: &[u32],
    image_token: u32,
    grids: &[[usize; 3]],
    merge: usize,
    out: &mut Vec<Position>,
) {
    let mut next = 0u32; // next text position
    let mut i = 0;
    let mut grids = grids.iter();
    while i < ids.len() {
        let Some(&[t, h, w]) = (ids[i] == image_token).then(|| grids.next()).flatten() else {
            out.push([next; 3]);
            next += 1;
            i += 1;
            continue;
        };
        let (lh, lw) = (h / merge, w / merge);
        for ti in 0..t {
            for r in 0..lh {
                for c in 0..lw {
                    out.push([next + ti as u32, next + r as u32, next + c as u32]);
                }
            }
        }
        i += t * lh * lw;
        next += lh.max(lw) as u32;
    }
}

/// The input embeddings `x` `(tokens, hidden)` of token ids `ids` with the rows of every
/// `image_token`, in order, taken by the vision tower's merged image tokens `embeds`
/// (`(image tokens, hidden)`); an error when their counts differ.
pub fn place_image_tokens(
    x: &Tensor,
    embeds: &Tensor,
    ids: &[u32],
    image_token: u32,
) -> Result<Tensor> {
    let tokens = ids.len();
    let mut k = 0u32;
    let rows: Vec<u32> = ids
        .iter()
        .enumerate()
        .map(|(r, &id)| {
            if id == image_token {
                k += 1;
                tokens as u32 + k - 1
            } else {
                r as u32
            }
        })
        .collect();
    if k as usize != embeds.dim(0)? {
        candle_core::bail!("{k} image tokens for {} image embeddings", embeds.dim(0)?)
    }
    let rows = Tensor::from_vec(rows, tokens, x.device())?;
    Tensor::cat(&[x, &embeds.to_dtype(x.dtype())?], 0)?.index_select(&rows, 0)
}

/// A generating model's output projection ([`TextModel::lm_head`]).
pub struct LmHead(Proj);

/// The keys and values of one sequence's tokens so far, per layer, for incremental decoding
/// ([`TextModel::forward_cached`]): `(tokens, heads * head_dim)` each, already repeated to
/// every query head of their group.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first tokens.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl TextModel {
    /// Loads the language model from the checkpoint root `vb`.
    pub fn new(vb: &VarBuilder, cfg: &TextConfig) -> Result<Self> {
        // a bare decoder's weights sit at the root (`embed_tokens.weight`, as embedding
        // checkpoints saved from the base model have them)
        let vb = if vb.contains_tensor("embed_tokens.weight") {
            vb.clone()
        } else {
            pick(
                vb,
                &["model", "model.language_model"],
                "embed_tokens.weight",
            )
        };
        let h = cfg.hidden_size;
        let (hq, hk, d) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim(),
        );
        // bfloat16 on the CPU: packed linear layers, f32 for the rest
        // (the weights themselves are loaded in bfloat16, not through `Packing::split`'s f32
        // builder: a 7B decoder is not widened to f32 on the way)
        let pk = Packing::new(vb.dtype(), vb.device());
        let packed = pk.is_packed();
        let small = |t: Tensor| -> Result<Tensor> {
            if packed {
                t.to_dtype(DType::F32)
            } else {
                Ok(t)
            }
        };
        let rms = |vb: VarBuilder| -> Result<RmsNorm> {
            Ok(RmsNorm::new(small(vb.get(h, "weight")?)?, cfg.rms_norm_eps))
        };
        let scale = 1.0 / (d as f64).sqrt();
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("layers.{i}"));
            let a = l.pp("self_attn");
            let bias = cfg.qkv_bias;
            // the attention scale goes into the queries: their projection, or, when the
            // queries are normalised after it, their norm's weight
            let (q_scale, qk_norm) = if cfg.qk_norm {
                let qn = RmsNorm::new(
                    (small(a.pp("q_norm").get(d, "weight")?)? * scale)?,
                    cfg.rms_norm_eps,
                );
                let kn = RmsNorm::new(small(a.pp("k_norm").get(d, "weight")?)?, cfg.rms_norm_eps);
                (1.0, Some((qn, kn)))
            } else {
                (scale, None)
            };
            let q = ops::load_linear(&a.pp("q_proj"), h, hq * d, bias)?;
            let k = ops::load_linear(&a.pp("k_proj"), h, hk * d, bias)?;
            let v = ops::load_linear(&a.pp("v_proj"), h, hk * d, bias)?;
            let qkv = if packed {
                // the scale multiplies the query outputs in f32 instead of being rounded
                // into the bfloat16 weights
                let w = Tensor::cat(&[q.weight(), k.weight(), v.weight()], 0)?;
                let b = match (q.bias(), k.bias(), v.bias()) {
                    (Some(qb), Some(kb), Some(vb)) => Some(Tensor::cat(&[qb, kb, vb], 0)?),
                    _ => None,
                };
                let s = (q_scale != 1.0).then(|| {
                    let mut s = vec![q_scale as f32; hq * d];
                    s.resize((hq + 2 * hk) * d, 1.0);
                    s
                });
                Proj::Packed(Box::new(ops::PackedLinear::new(&w, b.as_ref(), s)?))
            } else {
                let w = Tensor::cat(&[&(q.weight() * q_scale)?, k.weight(), v.weight()], 0)?;
                let b = match (q.bias(), k.bias(), v.bias()) {
                    (Some(qb), Some(kb), Some(vb)) => {
                        Some(Tensor::cat(&[&(qb * q_scale)?, kb, vb], 0)?)
                    }
                    _ => None,
                };
                Proj::Dense(Linear::new(w, b))
            };
            drop((q, k, v));
            let mlp = l.pp("mlp");
            let inter = cfg.intermediate_size;
            layers.push(DecoderLayer {
                input_norm: rms(l.pp("input_layernorm"))?,
                qk_norm,
                qkv,
                o: pk.load(&a.pp("o_proj"), hq * d, h, false)?,
                post_norm: rms(l.pp("post_attention_layernorm"))?,
                gate: pk.load(&mlp.pp("gate_proj"), h, inter, false)?,
                up: pk.load(&mlp.pp("up_proj"), h, inter, false)?,
                down: pk.load(&mlp.pp("down_proj"), inter, h, false)?,
            });
        }
        Ok(TextModel {
            embed: Embedding::new(vb.pp("embed_tokens").get((cfg.vocab_size, h), "weight")?, h),
            layers,
            norm: rms(vb.pp("norm"))?,
            act: parse_act(&cfg.hidden_act).unwrap_or(Act::Silu),
            inv_freq: {
                let mut f = inv_freq(cfg.rope_theta, d);
                if let Some(r) = cfg.llama3_rope {
                    r.apply(&mut f);
                }
                f
            },
            cfg: cfg.clone(),
            packed,
        })
    }

    /// The output projection for generation: the checkpoint's `lm_head.weight`, or the
    /// token embeddings where the checkpoint ties them (and stores none); packed bfloat16
    /// where the model's linear layers are, so a decoding step reads it once, as bfloat16.
    pub fn lm_head(&self, vb: &VarBuilder) -> Result<LmHead> {
        let (vocab, h) = (self.cfg.vocab_size, self.cfg.hidden_size);
        let stored = ["lm_head.weight", "model.lm_head.weight"]
            .into_iter()
            .find(|n| vb.contains_tensor(n));
        let w = match stored {
            Some(name) => vb.get((vocab, h), name)?,
            None => self.embed.embeddings().clone(),
        };
        Ok(LmHead(if self.packed {
            Proj::Packed(Box::new(ops::PackedLinear::new(&w, None, None)?))
        } else {
            Proj::Dense(Linear::new(w, None))
        }))
    }

    /// An empty [`KvCache`] for one sequence.
    pub fn new_cache(&self) -> KvCache {
        KvCache {
            layers: vec![None; self.layers.len()],
            len: 0,
        }
    }

    /// Runs one sequence's next tokens, their input embeddings `x` `(n, hidden)` at
    /// `positions`, attending causally to each other and to every token in `cache`, which
    /// they join; returns the final-norm hidden state of the last of them `(1, hidden)`.
    /// Prefill is one call with the whole prompt, each decoding step one with one token.
    pub fn forward_cached(
        &self,
        mut x: Tensor,
        positions: &[Position],
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        if self.cfg.attention_window.is_some() {
            candle_core::bail!(
                "incremental decoding with sliding-window attention is not supported"
            )
        }
        let (hq, hk, d) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim(),
        );
        if self.packed {
            x = x.to_dtype(DType::F32)?;
        }
        let (n, past) = (x.dim(0)?, cache.len);
        if n == 0 || positions.len() != n || cache.layers.len() != self.layers.len() {
            candle_core::bail!("forward_cached: {n} tokens, {} positions", positions.len())
        }
        let total = past + n;
        let device = x.device().clone();
        let (cos, sin) = self.rotary(positions, &device, x.dtype())?;
        // new token i (absolute position past + i) sees keys 0..=past + i
        let mask: Vec<f32> = (0..n)
            .flat_map(|i| {
                (0..total).map(move |j| {
                    if j <= past + i {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (1, n, total), &device)?.to_dtype(x.dtype())?;
        let heads = |t: &Tensor, len: usize| -> Result<Tensor> {
            t.reshape((len, hq, d))?.transpose(0, 1)?.contiguous()
        };
        for (l, slot) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let mut qkv = l.qkv.forward(&l.input_norm.forward(&x)?, None, None)?;
            if let Some((qn, kn)) = &l.qk_norm {
                qkv = norm_heads(&qkv, hq, hk, d, qn, kn)?;
            }
            // (n, 3 hq d): queries (scaled), keys and values repeated to every query head
            let qkv = rotate_qkv(&qkv, hq, hk, d, &cos, &sin)?;
            let q = qkv.narrow(1, 0, hq * d)?;
            let (k, v) = (
                qkv.narrow(1, hq * d, hq * d)?,
                qkv.narrow(1, 2 * hq * d, hq * d)?,
            );
            let (k, v) = match slot.take() {
                Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 0)?, Tensor::cat(&[&pv, &v], 0)?),
                None => (k.contiguous()?, v.contiguous()?),
            };
            let scores = heads(&q, n)?
                .matmul(&heads(&k, total)?.t()?)?
                .broadcast_add(&mask)?;
            let p = candle_nn::ops::softmax_last_dim(&scores)?;
            let ctx = p
                .matmul(&heads(&v, total)?)?
                .transpose(0, 1)?
                .contiguous()?
                .reshape((n, hq * d))?;
            *slot = Some((k, v));
            x = l.o.forward(&ctx, Some(&x), None)?;
            let h = l.post_norm.forward(&x)?;
            let g = l.gate.forward(&h, None, Some(self.act))?;
            let u = l.up.forward(&h, None, None)?;
            x = l.down.forward(&(g * u)?, Some(&x), None)?;
        }
        cache.len = total;
        self.norm.forward(&x.narrow(0, n - 1, 1)?)
    }

    /// Next-token logits `(rows, vocab)` of final hidden states ([`TextModel::lm_head`]).
    pub fn logits(&self, hidden: &Tensor, head: &LmHead) -> Result<Tensor> {
        head.0.forward(hidden, None, None)
    }

    /// Token embeddings `(tokens, hidden)` of `ids`.
    pub fn embed_tokens(&self, ids: &[u32]) -> Result<Tensor> {
        let device = self.embed.embeddings().device();
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= self.cfg.vocab_size) {
            candle_core::bail!(
                "token id {bad} is outside the vocabulary ({})",
                self.cfg.vocab_size
            )
        }
        let x = self
            .embed
            .forward(&Tensor::from_slice(ids, ids.len(), device)?)?;
        if self.packed {
            x.to_dtype(DType::F32)
        } else {
            Ok(x)
        }
    }

    /// M-RoPE tables of tokens at `positions`: frequency `j` rotates by the temporal,
    /// height or width position according to the band of `mrope_section` it falls in.
    fn rotary(
        &self,
        positions: &[Position],
        device: &Device,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut axis = Vec::with_capacity(half);
        for (a, &len) in self.cfg.mrope_section.iter().enumerate() {
            axis.extend(std::iter::repeat_n(a, len));
        }
        let mut angles = Vec::with_capacity(positions.len() * half);
        for p in positions {
            angles.extend(
                self.inv_freq
                    .iter()
                    .zip(&axis)
                    .map(|(f, &a)| p[a] as f32 * f),
            );
        }
        tables(angles, positions.len(), half, device, dtype)
    }

    /// Runs the decoder over the packed input embeddings `x` `(tokens, hidden)`: sequences
    /// given by `segments` (attention within each, causal or not), each token at `positions`.
    /// Returns the final-norm hidden states of the rows `pick` (e.g. each sequence's last).
    pub fn forward(
        &self,
        mut x: Tensor,
        positions: &[Position],
        segments: &[Segment],
        pick: &[usize],
        causal: bool,
    ) -> Result<Tensor> {
        let (hq, hk, d) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim(),
        );
        if self.packed {
            x = x.to_dtype(DType::F32)?;
        }
        let (cos, sin) = self.rotary(positions, x.device(), x.dtype())?;
        let attention = match self.cfg.attention_window.filter(|_| causal) {
            Some(w) => ops::Attention::new(segments, hq, d).windowed(Some(w)),
            None => ops::Attention::new(segments, hq, d).causal(causal),
        };
        for l in &self.layers {
            let mut qkv = l.qkv.forward(&l.input_norm.forward(&x)?, None, None)?;
            if let Some((qn, kn)) = &l.qk_norm {
                qkv = norm_heads(&qkv, hq, hk, d, qn, kn)?;
            }
            let qkv = rotate_qkv(&qkv, hq, hk, d, &cos, &sin)?;
            let ctx = attention.run(&qkv)?;
            x = l.o.forward(&ctx, Some(&x), None)?;
            let h = l.post_norm.forward(&x)?;
            let g = l.gate.forward(&h, None, Some(self.act))?;
            let u = l.up.forward(&h, None, None)?;
            x = l.down.forward(&(g * u)?, Some(&x), None)?;
        }
        let rows: Vec<u32> = pick.iter().map(|&r| r as u32).collect();
        let rows = Tensor::from_vec(rows, pick.len(), x.device())?;
        self.norm.forward(&x.index_select(&rows, 0)?)
    }
}
