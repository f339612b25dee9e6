//! Nomic Embed Vision v1.5's image tower, `NomicVisionModel` (its published
//! `modeling_hf_nomic_bert.py`; EVA02-B/16 style): patches through a linear layer, a CLS
//! token and learned positions; pre-norm blocks with 2-D rotary positions on the patch tokens
//! (interleaved pairs: the first quarter of each head turns with the row, the second with the
//! column, scaled to `ref_feat_shape`), a SwiGLU MLP with a layer norm inside; no final norm;
//! then an attention-pooling head (`selector`: one learned query over every token) whose
//! output, through its MLP, is added to the tokens. The image vector is token 0 of that sum,
//! L2-normalised (the model card's `last_hidden_state[:, 0]`).
use candle_core::{D, DType, Device, Module, Result, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use crate::layers::encoder::{rotate_qk, vit_tokens};
use crate::layers::ops::{self, Act, Packing, Proj, load_layer_norm as layer_norm};

/// A Nomic vision `config.json` (GPT-2 key names; `n_inner` may be a float).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct NomicVisionConfig {
    /// Hidden size.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Image side in pixels.
    pub img_size: usize,
    /// Patch side in pixels.
    pub patch_size: usize,
    /// Input channels.
    pub num_channels: usize,
    /// Block layer-norm epsilon.
    pub layer_norm_epsilon: f64,
    /// Pre-norm blocks (the published model: true).
    pub prenorm: bool,
    /// 2-D rotary positions on the patch tokens.
    pub use_rotary_pos_emb: bool,
    /// The grid the rotary positions are scaled to.
    pub ref_feat_shape: Vec<usize>,
    /// A layer norm inside the MLP.
    pub norm_mlp: bool,
    /// No final layer norm.
    pub no_last_ln: bool,
    /// No CLS token.
    pub no_cls_token: bool,
    /// Register tokens.
    pub register_tokens: usize,
}

impl Default for NomicVisionConfig {
    fn default() -> Self {
        NomicVisionConfig {
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            img_size: 224,
            patch_size: 16,
            num_channels: 3,
            layer_norm_epsilon: 1e-6,
            prenorm: true,
            use_rotary_pos_emb: true,
            ref_feat_shape: vec![14, 14],
            norm_mlp: true,
            no_last_ln: true,
            no_cls_token: false,
            register_tokens: 0,
        }
    }
}

impl NomicVisionConfig {
    /// Refuses what the tower does not run.
    pub fn check(&self) -> std::result::Result<(), String> {
        let bad = |m: &str| Err(format!("{m} (the published vision tower's layout only)"));
        if !self.prenorm || !self.use_rotary_pos_emb || !self.norm_mlp || !self.no_last_ln {
            return bad("post-norm, no rotary positions, no MLP norm or a final norm");
        }
        if self.no_cls_token || self.register_tokens != 0 {
            return bad("no CLS token or register tokens");
        }
        if self.ref_feat_shape.len() != 2 {
            return bad("ref_feat_shape not of two values");
        }
        if self.n_head == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return bad("n_embd not a multiple of n_head");
        }
        if !(self.n_embd / self.n_head).is_multiple_of(4) {
            return bad("a head dimension not a multiple of 4");
        }
        if self.patch_size == 0 || !self.img_size.is_multiple_of(self.patch_size) {
            return bad("img_size not a multiple of patch_size");
        }
        Ok(())
    }
}

struct Mlp {
    fc11: Proj,
    fc12: Proj,
    norm: Option<LayerNorm>,
    fc2: Proj,
}

impl Mlp {
    fn load(vb: &VarBuilder, h: usize, norm: bool, pk: Packing) -> Result<Mlp> {
        let inner = vb.pp("fc11").get_unchecked("weight")?.dim(0)?;
        Ok(Mlp {
            fc11: pk.load(&vb.pp("fc11"), h, inner, true)?,
            fc12: pk.load(&vb.pp("fc12"), h, inner, true)?,
            // nn.LayerNorm's default eps, not the config's
            norm: norm
                .then(|| layer_norm(&vb.pp("norm"), inner, 1e-5))
                .transpose()?,
            fc2: pk.load(&vb.pp("fc2"), inner, h, true)?,
        })
    }

    /// `fc2(norm(fc11(x) * silu(fc12(x)))) (+ residual)`.
    fn forward(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        let g = ops::linear_act(&self.fc12, x, None, Some(Act::Silu))?;
        let mut m = (ops::linear(&self.fc11, x, None)? * g)?;
        if let Some(n) = &self.norm {
            m = n.forward(&m)?;
        }
        ops::linear(&self.fc2, &m, residual)
    }
}

struct Block {
    norm1: LayerNorm,
    qkv: Proj,
    out: Proj,
    norm2: LayerNorm,
    mlp: Mlp,
}

/// The Nomic vision tower.
pub struct NomicVision {
    proj: Linear,
    cls: Tensor,
    pos: Tensor,
    blocks: Vec<Block>,
    latent: Tensor,
    sel_q: Linear,
    sel_kv: Proj,
    sel_out: Linear,
    sel_norm: LayerNorm,
    sel_mlp: Mlp,
    heads: usize,
    head_dim: usize,
    grid: usize,
    patch: usize,
    channels: usize,
    /// Rotary tables of the tokens (CLS first, at angle 0), `(1 + grid * grid, head_dim / 2)`.
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

impl NomicVision {
    /// Loads the weights (at the root, or under `vision.`).
    pub fn new(vb: VarBuilder, cfg: &NomicVisionConfig) -> Result<NomicVision> {
        cfg.check().map_err(candle_core::Error::Msg)?;
        let vb = if vb.contains_tensor("embeddings.cls_token") {
            vb
        } else {
            vb.pp("vision")
        };
        let (vb, pk) = Packing::split(vb);
        let h = cfg.n_embd;
        let (heads, d) = (cfg.n_head, cfg.n_embd / cfg.n_head);
        let grid = cfg.img_size / cfg.patch_size;
        let patch_values = cfg.num_channels * cfg.patch_size * cfg.patch_size;
        let e = vb.pp("embeddings");
        let scale = 1.0 / (d as f64).sqrt();
        let eps = cfg.layer_norm_epsilon;
        let mut blocks = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let l = vb.pp(format!("layers.{i}"));
            let wqkv = ops::load_linear(&l.pp("attn.Wqkv"), h, 3 * h, true)?;
            // the attention scale goes into the query rows (rotation is linear)
            let qkv = pk.proj(ops::scale_query_rows(&wqkv, h, scale)?)?;
            blocks.push(Block {
                norm1: layer_norm(&l.pp("norm1"), h, eps)?,
                qkv,
                out: pk.load(&l.pp("attn.out_proj"), h, h, true)?,
                norm2: layer_norm(&l.pp("norm2"), h, eps)?,
                mlp: Mlp::load(&l.pp("mlp"), h, true, pk)?,
            });
        }
        let s = vb.pp("selector");
        // 2-D rotary angles of each patch: hd/4 bands per axis, positions scaled to the
        // reference grid, each angle used by one interleaved pair
        let bands = d / 4;
        let freq: Vec<f32> = (0..bands)
            .map(|k| 1.0 / 10000f32.powf(k as f32 / bands as f32))
            .collect();
        // token 0 (CLS) is not rotated: angle 0
        let mut angles = vec![0f32; d / 2];
        angles.reserve(grid * grid * d / 2);
        for r in 0..grid {
            for c in 0..grid {
                let tr = r as f32 / grid as f32 * cfg.ref_feat_shape[0] as f32;
                let tc = c as f32 / grid as f32 * cfg.ref_feat_shape[1] as f32;
                angles.extend(freq.iter().map(|f| tr * f));
                angles.extend(freq.iter().map(|f| tc * f));
            }
        }
        let n = grid * grid;
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        let dev = vb.device().clone();
        let dtype = vb.dtype();
        Ok(NomicVision {
            proj: ops::load_linear(&e.pp("proj"), patch_values, h, true)?,
            cls: e.get((1, 1, h), "cls_token")?.reshape((1, h))?,
            pos: e.get((1, 1 + n, h), "pos_embed")?.reshape((1 + n, h))?,
            blocks,
            latent: s.pp("attn").get((1, 1, h), "latent")?.reshape((1, h))?,
            sel_q: ops::load_linear(&s.pp("attn.Wq"), h, h, true)?,
            sel_kv: pk.load(&s.pp("attn.Wkv"), h, 2 * h, true)?,
            sel_out: ops::load_linear(&s.pp("attn.out_proj"), h, h, true)?,
            sel_norm: layer_norm(&s.pp("norm1"), h, eps)?,
            sel_mlp: Mlp::load(&s.pp("mlp"), h, false, pk)?,
            heads,
            head_dim: d,
            grid,
            patch: cfg.patch_size,
            channels: cfg.num_channels,
            cos: Tensor::from_vec(cos, (1 + n, d / 2), &dev)?.to_dtype(dtype)?,
            sin: Tensor::from_vec(sin, (1 + n, d / 2), &dev)?.to_dtype(dtype)?,
            device: dev,
        })
    }

    /// Pixels per image side the tower takes.
    pub fn image_size(&self) -> usize {
        self.grid * self.patch
    }

    /// Rotates the queries and keys of the patch tokens (interleaved pairs, candle's
    /// `rope_i` kernel: each token is its own batch row with its own angles); CLS turns by
    /// zero.
    fn rotate(&self, qkv: &Tensor, images: usize) -> Result<Tensor> {
        rotate_qk(qkv, images, self.heads, self.head_dim, &self.cos, &self.sin)
    }

    /// Image vectors `(images, hidden)` (not normalised) of pixels `(images, channels,
    /// size, size)`, channels first.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (n, c, sh, sw) = pixels.dims4()?;
        let (g, p) = (self.grid, self.patch);
        if c != self.channels || sh != g * p || sw != g * p {
            candle_core::bail!(
                "pixels of shape {:?}, expected (n, {}, {}, {})",
                pixels.shape(),
                self.channels,
                g * p,
                g * p
            )
        }
        let (mut x, segments) = vit_tokens(pixels, p, &self.proj, &self.cls, &self.pos)?;
        let attention = ops::Attention::new(&segments, self.heads, self.head_dim)
            .bf16(self.blocks.first().is_some_and(|l| l.qkv.is_packed()));
        for b in &self.blocks {
            let qkv = ops::linear(&b.qkv, &b.norm1.forward(&x)?, None)?;
            let qkv = self.rotate(&qkv, n)?;
            let ctx = attention.run(&qkv)?;
            x = ops::linear(&b.out, &ctx, Some(&x))?;
            x = b.mlp.forward(&b.norm2.forward(&x)?, Some(&x))?;
        }
        // the pooling head: one latent query per image over all its tokens
        let (t, h, d) = (1 + g * g, self.heads * self.head_dim, self.head_dim);
        let q = ops::linear(&self.sel_q, &self.latent, None)?; // (1, h)
        let q = (q.reshape((1, self.heads, 1, d))? / (d as f64).sqrt())?;
        let kv = ops::linear(&self.sel_kv, &x, None)?.reshape((n, t, 2 * h))?;
        let split = |i: usize| -> Result<Tensor> {
            kv.narrow(2, i * h, h)?
                .reshape((n, t, self.heads, d))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (k, v) = (split(0)?, split(1)?); // (n, heads, t, d)
        let scores = q
            .broadcast_as((n, self.heads, 1, d))?
            .contiguous()?
            .matmul(&k.t()?)?;
        let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
        let pooled = probs.matmul(&v)?.transpose(1, 2)?.reshape((n, h))?; // (n, h)
        let pooled = ops::linear(&self.sel_out, &pooled, None)?;
        let cls_states = x.reshape((n, t, h))?.narrow(1, 0, 1)?.squeeze(1)?;
        let head = self
            .sel_mlp
            .forward(&self.sel_norm.forward(&pooled)?, Some(&cls_states))?;
        head.to_dtype(DType::F32)
    }

    /// The device the tower runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}
