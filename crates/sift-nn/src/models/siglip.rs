//! SigLIP (Zhai et al. 2023) as Hugging Face `SiglipModel`: both towers with their heads.
//! SigLIP 2 fixed-resolution checkpoints have the same architecture (`model_type` "siglip").
//!
//! Text: token + position embeddings, encoder (bidirectional), final layer norm, the LAST
//! position pooled (padding included: SigLIP pads every text to `max_position_embeddings`),
//! a linear head. Vision: patch convolution (with bias) + position embeddings, encoder, post
//! layer norm, multi-head attention pooling with a learned probe.
use candle_core::{D, Module, Result, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use crate::layers::encoder::{
    Encoder, EncoderSizes, TextStack, VisionEmbeddings, VisionStem, hf_sizes,
};
use crate::layers::ops::{self, Packing, Proj};
use crate::models::clip::{Side, act, vision_embeddings};

/// `text_config` of a SigLIP `config.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct SiglipTextConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    /// Every text is padded (or truncated) to this many tokens.
    pub max_position_embeddings: usize,
    hidden_act: String,
    layer_norm_eps: f64,
    /// Padding id (used when the tokenizer names none).
    pub pad_token_id: Option<u32>,
    /// Output size of the head (the hidden size when absent).
    projection_size: Option<usize>,
}

impl Default for SiglipTextConfig {
    fn default() -> Self {
        SiglipTextConfig {
            vocab_size: 32000,
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            max_position_embeddings: 64,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
            pad_token_id: Some(1),
            projection_size: Default::default(),
        }
    }
}

/// `vision_config` of a SigLIP `config.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct SiglipVisionConfig {
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_channels: usize,
    /// Input resolution.
    pub image_size: Side,
    patch_size: Side,
    hidden_act: String,
    layer_norm_eps: f64,
    vision_use_head: bool,
}

impl Default for SiglipVisionConfig {
    fn default() -> Self {
        SiglipVisionConfig {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: Side::One(224),
            patch_size: Side::One(16),
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
            vision_use_head: true,
        }
    }
}

/// A SigLIP `config.json`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SiglipConfig {
    /// Text tower.
    pub text_config: SiglipTextConfig,
    /// Vision tower.
    pub vision_config: SiglipVisionConfig,
}

/// SigLIP's text tower.
pub struct SiglipText {
    stack: TextStack,
    head: Proj,
}

impl SiglipText {
    fn load(vb: &VarBuilder, c: &SiglipConfig, pk: Packing) -> Result<SiglipText> {
        let t = &c.text_config;
        let h = t.hidden_size;
        let m = vb.pp("text_model");
        let vocab = (t.vocab_size, t.max_position_embeddings);
        Ok(SiglipText {
            stack: TextStack::load(&m, vocab, hf_sizes!(t), pk)?,
            head: pk.load(&m.pp("head"), h, t.projection_size.unwrap_or(h), true)?,
        })
    }

    /// Output size.
    pub fn dim(&self) -> usize {
        self.head.out_features()
    }

    /// Text features `(n, projection_size)`, not normalised. `seqs` are padded token ids;
    /// `keys[i]` is how many leading tokens of sequence `i` attention may see (its length
    /// when no attention mask is used, its unpadded length with one).
    pub fn forward(&self, seqs: &[&[u32]], keys: &[usize]) -> Result<Tensor> {
        let dev = self.stack.embeddings.device();
        let (x, mut segments) = self.stack.embeddings.forward(seqs)?;
        for (seg, &k) in segments.iter_mut().zip(keys) {
            seg.keys = k.clamp(1, seg.len);
        }
        let x = self.stack.encoder.forward(x, &segments, false)?;
        let last: Vec<u32> = segments
            .iter()
            .map(|s| (s.start + s.len - 1) as u32)
            .collect();
        let last = Tensor::from_vec(last, seqs.len(), dev)?;
        let pooled = self.stack.final_norm.forward(&x.index_select(&last, 0)?)?;
        ops::linear(&self.head, &pooled, None)
    }
}

/// Multi-head attention pooling (`vision_model.head`): a learned probe attends over the
/// tokens (torch.nn.MultiheadAttention), then a residual MLP.
struct PoolingHead {
    probe: Tensor,
    q: Linear,
    kv: Proj,
    out: Proj,
    norm: LayerNorm,
    fc1: Proj,
    fc2: Proj,
    heads: usize,
    act: ops::Act,
}

impl PoolingHead {
    fn load(vb: &VarBuilder, v: &SiglipVisionConfig, pk: Packing) -> Result<PoolingHead> {
        let h = v.hidden_size;
        let a = vb.pp("attention");
        let w = a.get((3 * h, h), "in_proj_weight")?;
        let b = a.get(3 * h, "in_proj_bias")?;
        let head_dim = EncoderSizes {
            hidden: h,
            intermediate: 0,
            layers: 0,
            heads: v.num_attention_heads,
            eps: 0.0,
            act: ops::Act::Gelu,
        }
        .head_dim()?;
        let scale = 1.0 / (head_dim as f64).sqrt();
        Ok(PoolingHead {
            probe: vb.get((1, 1, h), "probe")?.reshape((1, h))?,
            q: Linear::new(
                (w.narrow(0, 0, h)? * scale)?,
                Some((b.narrow(0, 0, h)? * scale)?),
            ),
            kv: pk.proj(Linear::new(
                w.narrow(0, h, 2 * h)?,
                Some(b.narrow(0, h, 2 * h)?),
            ))?,
            out: pk.load(&a.pp("out_proj"), h, h, true)?,
            norm: ops::load_layer_norm(&vb.pp("layernorm"), h, v.layer_norm_eps)?,
            fc1: pk.load(&vb.pp("mlp.fc1"), h, v.intermediate_size, true)?,
            fc2: pk.load(&vb.pp("mlp.fc2"), v.intermediate_size, h, true)?,
            heads: v.num_attention_heads,
            act: act(&v.hidden_act)?,
        })
    }

    /// `x`: `(batch * tokens, hidden)` -> `(batch, hidden)`.
    fn forward(&self, x: &Tensor, batch: usize) -> Result<Tensor> {
        let (rows, h) = x.dims2()?;
        let tokens = rows / batch;
        let d = h / self.heads;
        let q = ops::linear(&self.q, &self.probe, None)? // (1, h), scaled
            .reshape((1, self.heads, 1, d))?;
        let kv = ops::linear(&self.kv, x, None)?.reshape((batch, tokens, 2, self.heads, d))?;
        let k = kv
            .narrow(2, 0, 1)?
            .squeeze(2)?
            .permute((0, 2, 3, 1))?
            .contiguous()?; // (b, H, d, t)
        let v = kv
            .narrow(2, 1, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?; // (b, H, t, d)
        let q = q.broadcast_as((batch, self.heads, 1, d))?.contiguous()?;
        let probs = candle_nn::ops::softmax(&q.matmul(&k)?, D::Minus1)?; // (b, H, 1, t)
        let ctx = probs.matmul(&v)?.reshape((batch, h))?;
        let y = ops::linear(&self.out, &ctx, None)?;
        let m = ops::linear_act(&self.fc1, &self.norm.forward(&y)?, None, Some(self.act))?;
        ops::linear(&self.fc2, &m, Some(&y))
    }
}

/// SigLIP's vision tower.
pub struct SiglipVision {
    embeddings: VisionEmbeddings,
    encoder: Encoder,
    post_norm: LayerNorm,
    head: PoolingHead,
}

impl SiglipVision {
    fn load(vb: &VarBuilder, c: &SiglipConfig, pk: Packing) -> Result<SiglipVision> {
        let v = &c.vision_config;
        if !v.vision_use_head {
            candle_core::bail!(
                "vision_use_head = false (no pooled image embedding) is not supported"
            )
        }
        let h = v.hidden_size;
        let m = vb.pp("vision_model");
        let stem = VisionStem {
            class_token: false,
            patch_bias: true,
        };
        Ok(SiglipVision {
            embeddings: vision_embeddings(&m, h, v.num_channels, v.image_size, v.patch_size, stem)?,
            encoder: Encoder::load(m.pp("encoder"), hf_sizes!(v), pk)?,
            post_norm: ops::load_layer_norm(&m.pp("post_layernorm"), h, v.layer_norm_eps)?,
            head: PoolingHead::load(&m.pp("head"), v, pk)?,
        })
    }

    /// Input resolution (square).
    pub fn image_size(&self) -> usize {
        self.embeddings.image_size()
    }

    /// Image features `(batch, hidden)` of `(batch, 3, size, size)` pixels, not normalised.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (x, segments) = self.embeddings.forward(pixels)?;
        let x = self.encoder.forward(x, &segments, false)?;
        let x = self.post_norm.forward(&x)?;
        self.head.forward(&x, segments.len())
    }
}

/// Both SigLIP towers.
pub struct Siglip {
    /// Text tower.
    pub text: SiglipText,
    /// Vision tower.
    pub vision: SiglipVision,
}

impl Siglip {
    /// Loads a `SiglipModel` checkpoint (bfloat16 on the CPU: see `Packing` in `layers::linear`).
    pub fn new(vb: VarBuilder, config: &SiglipConfig) -> Result<Siglip> {
        let (vb, pk) = Packing::split(vb);
        Ok(Siglip {
            text: SiglipText::load(&vb, config, pk)?,
            vision: SiglipVision::load(&vb, config, pk)?,
        })
    }
}
