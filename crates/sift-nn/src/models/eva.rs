//! The EVA02 vision tower of Jina-CLIP v1 (EVA02-B/16 at 224 px) and v2 (EVA02-L/14 at 512 px) (`EVAVisionTransformer` of jina-clip-implementation's
//! `eva_model.py`, as its `_build_vision_tower` configures it; weights under `vision_model.`):
//! a conv patch embedding, a CLS token and learned positions; pre-norm blocks whose attention
//! has separate q/k/v projections (biases on q and v only), 2-D rotary positions on the patch
//! tokens (interleaved pairs: the first half of each head turns with the row, the second with
//! the column, positions scaled to `pt_hw_seq_len` with `intp_freq`) and a layer norm over the
//! concatenated heads before the output projection (`subln`); a SwiGLU MLP
//! (`w3(ffn_ln(silu(w1 x) * w2 x))`); then a final layer norm, token 0, and the head (identity
//! when `embed_dim == width`, else a linear layer). Every layer norm has eps 1e-6.
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use crate::layers::encoder::{rotate_qk, vit_tokens};
use crate::layers::ops::{self, Act, Packing, Proj, load_layer_norm as layer_norm};

/// Jina-CLIP's `vision_config` (`JinaCLIPVisionConfig`), with the published class's defaults
/// for omitted keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct EvaConfig {
    /// Output width (the head's).
    pub embed_dim: usize,
    /// Hidden size.
    pub width: usize,
    /// Image side in pixels.
    pub image_size: usize,
    /// Patch side in pixels.
    pub patch_size: usize,
    /// Blocks.
    pub layers: usize,
    /// Head dimension (heads = width / head_width).
    pub head_width: usize,
    /// MLP width over `width` (the width is read from the weights).
    pub mlp_ratio: f64,
    /// Layer scale init (`null`: no layer scale; others unsupported).
    pub ls_init_value: Option<f64>,
    /// q and v biases.
    pub qkv_bias: bool,
    /// Post-norm blocks (unsupported).
    pub post_norm: bool,
    /// 2-D rotary positions.
    pub rope_embeddings: bool,
    /// The grid the rotary positions were trained on.
    pub pt_hw_seq_len: usize,
    /// Rotary positions scaled from the image's grid to `pt_hw_seq_len`.
    pub intp_freq: bool,
    /// SwiGLU MLP (`w1`/`w2`/`w3`); false (a GELU `fc1`/`fc2` MLP) is unsupported.
    pub naive_swiglu: bool,
    /// Separate q/k/v projections and the inner layer norms.
    pub subln: bool,
    /// `null` or `linear`: the head when `embed_dim == width`.
    pub proj_type: Option<String>,
}

impl Default for EvaConfig {
    fn default() -> Self {
        EvaConfig {
            embed_dim: 768,
            width: 768,
            image_size: 224,
            patch_size: 16,
            layers: 12,
            head_width: 64,
            mlp_ratio: 4.0,
            ls_init_value: None,
            qkv_bias: true,
            post_norm: false,
            rope_embeddings: false,
            pt_hw_seq_len: 16,
            intp_freq: false,
            naive_swiglu: false,
            subln: false,
            proj_type: None,
        }
    }
}

impl EvaConfig {
    /// Refuses what the tower does not run.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.post_norm {
            return Err("post_norm blocks (only pre-norm)".into());
        }
        if self.ls_init_value.is_some_and(|v| v > 0.0) {
            return Err("layer scale (ls_init_value) is not supported".into());
        }
        if !self.naive_swiglu {
            return Err("naive_swiglu false (a GELU MLP) is not supported".into());
        }
        if self.head_width == 0 || !self.width.is_multiple_of(self.head_width) {
            return Err(format!(
                "width {} is not a multiple of head_width {}",
                self.width, self.head_width
            ));
        }
        if self.rope_embeddings && !self.head_width.is_multiple_of(4) {
            return Err("a head width not a multiple of 4 with rotary positions".into());
        }
        // the patch conv drops the last `image_size % patch_size` rows and columns (EVA02-L/14
        // at 512 px: a 36 x 36 grid over 504 px)
        if self.patch_size == 0 || self.image_size < self.patch_size {
            return Err("image_size smaller than patch_size".into());
        }
        let grid = self.image_size / self.patch_size;
        if self.rope_embeddings && !self.intp_freq && grid != self.pt_hw_seq_len {
            return Err(format!(
                "a {grid} x {grid} patch grid with rotary tables for {0} x {0} (intp_freq false)",
                self.pt_hw_seq_len
            ));
        }
        match self.proj_type.as_deref() {
            None if self.embed_dim == self.width => {}
            Some("linear") => {}
            None => {
                return Err(format!(
                    "embed_dim {} != width {} without proj_type (the published tower has no head then)",
                    self.embed_dim, self.width
                ));
            }
            Some(other) => return Err(format!("proj_type {other:?} (only null or linear)")),
        }
        Ok(())
    }
}

struct Block {
    norm1: LayerNorm,
    qkv: Proj,
    inner_ln: Option<LayerNorm>,
    proj: Proj,
    norm2: LayerNorm,
    w1: Proj,
    w2: Proj,
    ffn_ln: Option<LayerNorm>,
    w3: Proj,
}

/// The EVA02 vision tower.
pub struct EvaVision {
    proj: Linear,
    cls: Tensor,
    pos: Tensor,
    blocks: Vec<Block>,
    norm: LayerNorm,
    head: Option<Linear>,
    heads: usize,
    head_dim: usize,
    grid: usize,
    patch: usize,
    /// Pixels per image side taken (`grid * patch` of them are read).
    image_size: usize,
    /// Rotary tables of the tokens (CLS first, at angle 0), `(1 + grid * grid, head_dim / 2)`.
    rope: Option<(Tensor, Tensor)>,
    device: Device,
}

const EPS: f64 = 1e-6;

impl EvaVision {
    /// Loads the weights under `vb` (`patch_embed.*`, `cls_token`, `pos_embed`, `blocks.{i}.*`,
    /// `norm.*`, `head.*`).
    /// bfloat16 on the CPU: see `Packing` in `layers::linear`.
    pub fn new(vb: VarBuilder, cfg: &EvaConfig) -> Result<EvaVision> {
        cfg.check().map_err(candle_core::Error::Msg)?;
        let (vb, pk) = Packing::split(vb);
        let h = cfg.width;
        let (heads, d) = (cfg.width / cfg.head_width, cfg.head_width);
        let (grid, p) = (cfg.image_size / cfg.patch_size, cfg.patch_size);
        let n = grid * grid;
        let scale = 1.0 / (d as f64).sqrt();
        let mut blocks = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let b = vb.pp(format!("blocks.{i}"));
            let a = b.pp("attn");
            let (wq, wk, wv) = if cfg.subln {
                (
                    a.pp("q_proj").get((h, h), "weight")?,
                    a.pp("k_proj").get((h, h), "weight")?,
                    a.pp("v_proj").get((h, h), "weight")?,
                )
            } else {
                let w = a.pp("qkv").get((3 * h, h), "weight")?;
                (
                    w.narrow(0, 0, h)?,
                    w.narrow(0, h, h)?,
                    w.narrow(0, 2 * h, h)?,
                )
            };
            // the attention scale goes into the query rows (rotation is linear)
            let w = Tensor::cat(&[&(wq * scale)?, &wk, &wv], 0)?;
            let bias = if cfg.qkv_bias {
                let qb = a.get(h, "q_bias")?;
                let vb_ = a.get(h, "v_bias")?;
                Some(Tensor::cat(&[&(qb * scale)?, &vb_.zeros_like()?, &vb_], 0)?)
            } else {
                None
            };
            let m = b.pp("mlp");
            let inner = m.pp("w1").get_unchecked("weight")?.dim(0)?;
            blocks.push(Block {
                norm1: layer_norm(&b.pp("norm1"), h, EPS)?,
                qkv: pk.proj(Linear::new(w, bias))?,
                inner_ln: cfg
                    .subln
                    .then(|| layer_norm(&a.pp("inner_attn_ln"), h, EPS))
                    .transpose()?,
                proj: pk.load(&a.pp("proj"), h, h, true)?,
                norm2: layer_norm(&b.pp("norm2"), h, EPS)?,
                w1: pk.load(&m.pp("w1"), h, inner, true)?,
                w2: pk.load(&m.pp("w2"), h, inner, true)?,
                ffn_ln: cfg
                    .subln
                    .then(|| layer_norm(&m.pp("ffn_ln"), inner, EPS))
                    .transpose()?,
                w3: pk.load(&m.pp("w3"), inner, h, true)?,
            });
        }
        let dev = vb.device().clone();
        let dtype = vb.dtype();
        let rope = if cfg.rope_embeddings {
            // VisionRotaryEmbeddingFast(dim = head_dim / 2): bands 1 / 10000^(2k / dim) for
            // k < dim / 2, positions t = arange(ft) / ft * pt (f32, as torch computes them)
            let dim = d / 2;
            let bands: Vec<f32> = (0..dim / 2)
                .map(|k| 1.0 / 10000f32.powf((2 * k) as f32 / dim as f32))
                .collect();
            let ft = if cfg.intp_freq {
                grid
            } else {
                cfg.pt_hw_seq_len
            };
            let t: Vec<f32> = (0..grid)
                .map(|r| r as f32 / ft as f32 * cfg.pt_hw_seq_len as f32)
                .collect();
            // token 0 (CLS) is not rotated: angle 0
            let mut angles = vec![0f32; d / 2];
            angles.reserve(n * d / 2);
            for r in 0..grid {
                for c in 0..grid {
                    angles.extend(bands.iter().map(|b| t[r] * b));
                    angles.extend(bands.iter().map(|b| t[c] * b));
                }
            }
            let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
            let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
            Some((
                Tensor::from_vec(cos, (1 + n, d / 2), &dev)?.to_dtype(dtype)?,
                Tensor::from_vec(sin, (1 + n, d / 2), &dev)?.to_dtype(dtype)?,
            ))
        } else {
            None
        };
        let pe = vb.pp("patch_embed.proj");
        let conv = pe.get((h, 3, p, p), "weight")?.reshape((h, 3 * p * p))?;
        let head = match cfg.proj_type.as_deref() {
            Some("linear") => Some(ops::load_linear(
                &vb.pp("head"),
                h,
                cfg.embed_dim,
                cfg.qkv_bias,
            )?),
            _ => None,
        };
        Ok(EvaVision {
            proj: Linear::new(conv, Some(pe.get(h, "bias")?)),
            cls: vb.get((1, 1, h), "cls_token")?.reshape((1, h))?,
            pos: vb.get((1, 1 + n, h), "pos_embed")?.reshape((1 + n, h))?,
            blocks,
            norm: layer_norm(&vb.pp("norm"), h, EPS)?,
            head,
            heads,
            head_dim: d,
            grid,
            patch: p,
            image_size: cfg.image_size,
            rope,
            device: dev,
        })
    }

    /// Pixels per image side the tower takes.
    pub fn image_size(&self) -> usize {
        self.image_size
    }

    /// Output width.
    pub fn dim(&self) -> usize {
        match &self.head {
            Some(l) => l.weight().dims()[0],
            None => self.heads * self.head_dim,
        }
    }

    /// Rotates the queries and keys of the patch tokens (interleaved pairs, candle's `rope_i`
    /// kernel with each token its own batch row); CLS turns by zero.
    fn rotate(&self, qkv: &Tensor, images: usize) -> Result<Tensor> {
        match &self.rope {
            Some((cos, sin)) => rotate_qk(qkv, images, self.heads, self.head_dim, cos, sin),
            None => Ok(qkv.clone()),
        }
    }

    /// Image features `(images, dim)` (not normalised) of pixels `(images, 3, size, size)`.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (n, c, sh, sw) = pixels.dims4()?;
        let (g, p, side) = (self.grid, self.patch, self.image_size);
        if c != 3 || sh != side || sw != side {
            candle_core::bail!(
                "pixels of shape {:?}, expected (n, 3, {side}, {side})",
                pixels.shape(),
            )
        }
        // the stride-p conv reads the top-left g * p pixels only
        let (mut x, segments) = vit_tokens(pixels, p, &self.proj, &self.cls, &self.pos)?;
        let attention = ops::Attention::new(&segments, self.heads, self.head_dim)
            .bf16(self.blocks.first().is_some_and(|l| l.qkv.is_packed()));
        for b in &self.blocks {
            let qkv = ops::linear(&b.qkv, &b.norm1.forward(&x)?, None)?;
            let qkv = self.rotate(&qkv, n)?;
            let mut ctx = attention.run(&qkv)?;
            if let Some(ln) = &b.inner_ln {
                ctx = ln.forward(&ctx)?;
            }
            x = ops::linear(&b.proj, &ctx, Some(&x))?;
            let hn = b.norm2.forward(&x)?;
            let gate = ops::linear_act(&b.w1, &hn, None, Some(Act::Silu))?;
            let mut m = (gate * ops::linear(&b.w2, &hn, None)?)?;
            if let Some(ln) = &b.ffn_ln {
                m = ln.forward(&m)?;
            }
            x = ops::linear(&b.w3, &m, Some(&x))?;
        }
        // the final norm is per token: only token 0 is kept
        let (t, h) = (1 + g * g, self.heads * self.head_dim);
        let cls = x.reshape((n, t, h))?.narrow(1, 0, 1)?.squeeze(1)?;
        let mut out = self.norm.forward(&cls)?;
        if let Some(head) = &self.head {
            out = ops::linear(head, &out, None)?;
        }
        out.to_dtype(DType::F32)
    }

    /// The device the tower runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}
