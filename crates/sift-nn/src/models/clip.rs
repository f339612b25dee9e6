//! CLIP (Radford et al. 2021) as Hugging Face `CLIPModel`: both towers and their projections.
//!
//! Weight names follow transformers (`text_model.*`, `vision_model.*`, `text_projection`,
//! `visual_projection`); sizes come from `config.json` with transformers' defaults for keys a
//! config leaves out (transformers writes only the values that differ from its defaults).
use candle_core::{Module, Result, Tensor};
use candle_nn::{LayerNorm, VarBuilder};
use serde::Deserialize;

use crate::layers::encoder::{Encoder, TextStack, VisionEmbeddings, VisionStem, hf_sizes};
use crate::layers::ops::{self, Act, Packing, Proj, parse_act};

/// An image or patch size: one number, or `[height, width]`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum Side {
    /// Square.
    One(usize),
    /// `[height, width]`.
    Two([usize; 2]),
}

impl Side {
    /// The side of a square; an error for a non-square size.
    pub fn square(self, what: &str) -> Result<usize> {
        match self {
            Side::One(n) => Ok(n),
            Side::Two([h, w]) if h == w => Ok(h),
            Side::Two([h, w]) => candle_core::bail!("non-square {what} {h}x{w} is not supported"),
        }
    }
}

/// `text_config` of a CLIP `config.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ClipTextConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    /// Longest input, special tokens included.
    pub max_position_embeddings: usize,
    hidden_act: String,
    layer_norm_eps: f64,
    /// End-of-text id; the legacy value 2 means "pool at the highest token id".
    pub eos_token_id: u32,
}

impl Default for ClipTextConfig {
    fn default() -> Self {
        ClipTextConfig {
            vocab_size: 49408,
            hidden_size: 512,
            intermediate_size: 2048,
            num_hidden_layers: 12,
            num_attention_heads: 8,
            max_position_embeddings: 77,
            hidden_act: "quick_gelu".into(),
            layer_norm_eps: 1e-5,
            eos_token_id: 49407,
        }
    }
}

/// `vision_config` of a CLIP `config.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ClipVisionConfig {
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
}

impl Default for ClipVisionConfig {
    fn default() -> Self {
        ClipVisionConfig {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: Side::One(224),
            patch_size: Side::One(32),
            hidden_act: "quick_gelu".into(),
            layer_norm_eps: 1e-5,
        }
    }
}

/// A CLIP `config.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ClipConfig {
    /// Text tower.
    pub text_config: ClipTextConfig,
    /// Vision tower.
    pub vision_config: ClipVisionConfig,
    /// Shared embedding size.
    pub projection_dim: usize,
}

impl Default for ClipConfig {
    fn default() -> Self {
        ClipConfig {
            text_config: Default::default(),
            vision_config: Default::default(),
            projection_dim: 512,
        }
    }
}

/// The vision embeddings (under `vision_model.embeddings`) of a CLIP-style vision config.
pub(crate) fn vision_embeddings(
    vision_model: &VarBuilder,
    hidden: usize,
    channels: usize,
    image: Side,
    patch: Side,
    stem: VisionStem,
) -> Result<VisionEmbeddings> {
    let sides = (image.square("image_size")?, patch.square("patch_size")?);
    VisionEmbeddings::load(
        &vision_model.pp("embeddings"),
        hidden,
        channels,
        sides,
        stem,
    )
}

pub(crate) fn act(name: &str) -> Result<Act> {
    parse_act(name).ok_or_else(|| candle_core::Error::Msg(format!("hidden_act {name:?}")))
}

/// CLIP's text tower with its projection.
pub struct ClipText {
    stack: TextStack,
    projection: Proj,
    eos: u32,
}

impl ClipText {
    fn load(vb: &VarBuilder, c: &ClipConfig, pk: Packing) -> Result<ClipText> {
        let t = &c.text_config;
        let h = t.hidden_size;
        let m = vb.pp("text_model");
        let vocab = (t.vocab_size, t.max_position_embeddings);
        Ok(ClipText {
            stack: TextStack::load(&m, vocab, hf_sizes!(t), pk)?,
            projection: pk.load(&vb.pp("text_projection"), h, c.projection_dim, false)?,
            eos: t.eos_token_id,
        })
    }

    /// Index of the pooled token, as transformers picks it: with the legacy
    /// `eos_token_id == 2`, the highest id (the end-of-text token has the highest id in
    /// CLIP's vocabulary); otherwise the first end-of-text token (or 0 when there is none).
    fn pool_index(&self, ids: &[u32]) -> usize {
        if self.eos == 2 {
            // first maximum, like torch.argmax
            let mut best = 0;
            for (i, &id) in ids.iter().enumerate() {
                if id > ids[best] {
                    best = i;
                }
            }
            best
        } else {
            ids.iter().position(|&id| id == self.eos).unwrap_or(0)
        }
    }

    /// Projected text features `(n, projection_dim)`, not normalised. Every sequence must be
    /// non-empty and at most `max_position_embeddings` long.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Tensor> {
        let dev = self.stack.embeddings.device();
        let (x, segments) = self.stack.embeddings.forward(seqs)?;
        let x = self.stack.encoder.forward(x, &segments, true)?;
        let rows: Vec<u32> = segments
            .iter()
            .zip(seqs)
            .map(|(seg, s)| (seg.start + self.pool_index(s)) as u32)
            .collect();
        let rows = Tensor::from_vec(rows, seqs.len(), dev)?;
        let pooled = self.stack.final_norm.forward(&x.index_select(&rows, 0)?)?;
        ops::linear(&self.projection, &pooled, None)
    }
}

/// CLIP's vision tower with its projection.
pub struct ClipVision {
    embeddings: VisionEmbeddings,
    pre_norm: LayerNorm,
    encoder: Encoder,
    post_norm: LayerNorm,
    projection: Proj,
}

impl ClipVision {
    fn load(vb: &VarBuilder, c: &ClipConfig, pk: Packing) -> Result<ClipVision> {
        let v = &c.vision_config;
        let h = v.hidden_size;
        let m = vb.pp("vision_model");
        let stem = VisionStem {
            class_token: true,
            patch_bias: false,
        };
        Ok(ClipVision {
            embeddings: vision_embeddings(&m, h, v.num_channels, v.image_size, v.patch_size, stem)?,
            // transformers' spelling
            pre_norm: ops::load_layer_norm(&m.pp("pre_layrnorm"), h, v.layer_norm_eps)?,
            encoder: Encoder::load(m.pp("encoder"), hf_sizes!(v), pk)?,
            post_norm: ops::load_layer_norm(&m.pp("post_layernorm"), h, v.layer_norm_eps)?,
            projection: pk.load(&vb.pp("visual_projection"), h, c.projection_dim, false)?,
        })
    }

    /// Input resolution (square).
    pub fn image_size(&self) -> usize {
        self.embeddings.image_size()
    }

    /// Projected image features `(batch, projection_dim)` of `(batch, 3, size, size)` pixels,
    /// not normalised.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (x, segments) = self.embeddings.forward(pixels)?;
        let x = self
            .encoder
            .forward(self.pre_norm.forward(&x)?, &segments, false)?;
        let (rows, h) = x.dims2()?;
        let b = segments.len();
        let cls = x
            .reshape((b, rows / b.max(1), h))?
            .narrow(1, 0, 1)?
            .squeeze(1)?;
        let pooled = self.post_norm.forward(&cls)?;
        ops::linear(&self.projection, &pooled, None)
    }
}

/// Both CLIP towers.
pub struct Clip {
    /// Text tower.
    pub text: ClipText,
    /// Vision tower.
    pub vision: ClipVision,
}

impl Clip {
    /// Loads a `CLIPModel` checkpoint (bfloat16 on the CPU: see `Packing` in `layers::linear`).
    pub fn new(vb: VarBuilder, config: &ClipConfig) -> Result<Clip> {
        let (vb, pk) = Packing::split(vb);
        Ok(Clip {
            text: ClipText::load(&vb, config, pk)?,
            vision: ClipVision::load(&vb, config, pk)?,
        })
    }
}
