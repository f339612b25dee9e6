//! Qwen2-VL and Qwen2.5-VL in candle (candle-transformers has neither): the vision tower
//! and the Qwen2 language model, as transformers' `modeling_qwen2_vl.py` and
//! `modeling_qwen2_5_vl.py` compute them.
//!
//! - Vision: the 3-D patch embedding (a `(temporal 2, 14, 14)` convolution over the
//!   processor's flattened patches) as one matrix product; 2-D rotary positions (row and
//!   column of each patch, laid out in 2x2 merge blocks); pre-norm blocks (layer norm,
//!   attention within each image, `quick_gelu` MLP); the patch merger (layer norm, 2x2
//!   neighbours concatenated, GELU MLP) giving one language-model token per 2x2 patches.
//! - Qwen2.5-VL's vision tower differs in its blocks (RMSNorm, a gated SiLU MLP with
//!   biases), its merger's norm (RMSNorm) and its attention: most blocks attend within
//!   windows of `window_size` pixels (the patches reordered window by window, transformers'
//!   `get_vision_window_index`, and put back in order after the merger), the blocks of
//!   `fullatt_block_indexes` over the whole image. Its language model is Qwen2-VL's.
//! - Language model: Qwen2 decoder layers (RMSNorm, grouped-query causal attention with
//!   biased Q/K/V, SwiGLU MLP), rotary positions with three axes (M-RoPE: temporal, height,
//!   width positions each rotate their own band of frequencies, `mrope_section`).
//!
//! Weight names follow the published checkpoints (`visual.*`, `model.*`: transformers
//! 4.45-4.51, which GME ships); the transformers 5 layout (`model.visual.*`,
//! `model.language_model.*`) loads too. Configurations are read from `config.json` in
//! either the flat (4.x) or nested (`text_config`, 5.x) form, with transformers' defaults
//! for absent keys.
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, RmsNorm, VarBuilder};
use serde::Deserialize;

use crate::models::decoder_config::DecoderConfig;
use serde_json::Value;

use crate::layers::ops::{self, Act, Packing, Proj, Segment, parse_act};

/// `vision_config` of a Qwen2-VL checkpoint (transformers' `Qwen2VLVisionConfig` defaults).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct VisionConfig {
    /// Blocks.
    pub depth: usize,
    /// Width of the blocks.
    pub embed_dim: usize,
    /// Output width of the merger (the language model's hidden size).
    pub hidden_size: usize,
    /// Block MLP activation.
    pub hidden_act: String,
    /// MLP width as a multiple of `embed_dim`.
    pub mlp_ratio: f64,
    /// Attention heads.
    pub num_heads: usize,
    /// Input channels.
    #[serde(alias = "in_chans")]
    pub in_channels: usize,
    /// Patch side in pixels.
    pub patch_size: usize,
    /// Patches merged per side into one language-model token.
    pub spatial_merge_size: usize,
    /// Frames per patch (an image is repeated to fill them).
    pub temporal_patch_size: usize,
    /// Qwen2.5-VL's blocks and window attention (`None`: a Qwen2-VL tower).
    #[serde(skip)]
    pub qwen25: Option<Qwen25Vision>,
}

/// What a Qwen2.5-VL vision tower has that Qwen2-VL's has not.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen25Vision {
    /// Width of the blocks' gated MLP (`intermediate_size`).
    pub intermediate_size: usize,
    /// Side of an attention window in pixels (`window_size`).
    pub window_size: usize,
    /// Blocks attending over the whole image (`fullatt_block_indexes`); the rest attend
    /// within windows.
    pub full_attention_blocks: Vec<usize>,
}

/// `vision_config` of a Qwen2.5-VL checkpoint as written (transformers'
/// `Qwen2_5_VLVisionConfig` defaults): its `hidden_size` is the blocks' width and
/// `out_hidden_size` the merger's output.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
struct Qwen25VisionJson {
    depth: usize,
    hidden_size: usize,
    hidden_act: String,
    intermediate_size: usize,
    num_heads: usize,
    #[serde(alias = "in_chans")]
    in_channels: usize,
    patch_size: usize,
    spatial_merge_size: usize,
    temporal_patch_size: usize,
    window_size: usize,
    out_hidden_size: usize,
    fullatt_block_indexes: Vec<usize>,
}

impl Default for Qwen25VisionJson {
    fn default() -> Self {
        Qwen25VisionJson {
            depth: 32,
            hidden_size: 3584,
            hidden_act: "silu".into(),
            intermediate_size: 3420,
            num_heads: 16,
            in_channels: 3,
            patch_size: 14,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            window_size: 112,
            out_hidden_size: 3584,
            fullatt_block_indexes: vec![7, 15, 23, 31],
        }
    }
}

impl From<Qwen25VisionJson> for VisionConfig {
    fn from(v: Qwen25VisionJson) -> Self {
        VisionConfig {
            depth: v.depth,
            embed_dim: v.hidden_size,
            hidden_size: v.out_hidden_size,
            hidden_act: v.hidden_act,
            mlp_ratio: v.intermediate_size as f64 / v.hidden_size.max(1) as f64,
            num_heads: v.num_heads,
            in_channels: v.in_channels,
            patch_size: v.patch_size,
            spatial_merge_size: v.spatial_merge_size,
            temporal_patch_size: v.temporal_patch_size,
            qwen25: Some(Qwen25Vision {
                intermediate_size: v.intermediate_size,
                window_size: v.window_size,
                full_attention_blocks: v.fullatt_block_indexes,
            }),
        }
    }
}

impl Default for VisionConfig {
    fn default() -> Self {
        VisionConfig {
            depth: 32,
            embed_dim: 1280,
            hidden_size: 3584,
            hidden_act: "quick_gelu".into(),
            mlp_ratio: 4.0,
            num_heads: 16,
            in_channels: 3,
            patch_size: 14,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            qwen25: None,
        }
    }
}

impl VisionConfig {
    /// Values per flattened patch: channels x frames x patch x patch.
    pub fn patch_values(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }
}

/// The language model's settings, resolved from a `config.json` by
/// [`DecoderConfig::resolve`](crate::models::decoder_config::DecoderConfig::resolve).
#[derive(Debug, Clone)]
pub struct TextConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// MLP activation.
    pub hidden_act: String,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Rotary base (`rope_theta`, or `rope_parameters.rope_theta`).
    pub rope_theta: f64,
    /// Frequency bands of the temporal, height and width positions (halves of the head
    /// dimension; `rope_scaling.mrope_section` or `rope_parameters.mrope_section`).
    pub mrope_section: Vec<usize>,
    /// Whether the query / key / value projections have biases (Qwen2: yes; Mistral,
    /// Llama, Qwen3: no).
    pub qkv_bias: bool,
    /// RMSNorm of each query and key head before the rotation (Qwen3's `q_norm`, `k_norm`).
    pub qk_norm: bool,
    /// Head dimension when the config gives one that is not hidden / heads (Qwen3).
    pub head_dim_override: Option<usize>,
    /// Llama 3's rotary frequency scaling (`rope_type` llama3).
    pub llama3_rope: Option<Llama3Rope>,
    /// Mistral's sliding window: each token attends to this many latest positions (causal
    /// attention only; every layer).
    pub attention_window: Option<usize>,
}

/// Llama 3's rotary scaling (transformers' `_compute_llama3_parameters`): long wavelengths
/// divided by `factor`, short ones kept, a smooth blend between.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Rope {
    /// `factor`.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`.
    pub original_max_position_embeddings: f64,
}

impl Llama3Rope {
    /// Scales rotary inverse frequencies.
    pub fn apply(&self, inv_freq: &mut [f32]) {
        let old = self.original_max_position_embeddings;
        let low_wavelen = old / self.low_freq_factor;
        let high_wavelen = old / self.high_freq_factor;
        for f in inv_freq.iter_mut() {
            let freq = *f as f64;
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let scaled = if wavelen > low_wavelen {
                freq / self.factor
            } else if wavelen < high_wavelen {
                freq
            } else {
                let smooth = (old / wavelen - self.low_freq_factor)
                    / (self.high_freq_factor - self.low_freq_factor);
                (1.0 - smooth) * freq / self.factor + smooth * freq
            };
            *f = scaled as f32;
        }
    }
}

#[cfg(test)]
mod llama3_tests {
    use super::*;

    #[test]
    fn llama3_scaling_keeps_short_and_divides_long_wavelengths() {
        let r = Llama3Rope {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        // wavelengths 2 pi / f: 6.3 (kept), 1e6 (divided by 8), 4000 (blended)
        let mut f = [
            1.0f32,
            (2.0 * std::f64::consts::PI / 1e6) as f32,
            (2.0 * std::f64::consts::PI / 4000.0) as f32,
        ];
        let before = f;
        r.apply(&mut f);
        assert_eq!(f[0], before[0]);
        assert!((f[1] - before[1] / 8.0).abs() < 1e-12);
        assert!(f[2] < before[2] && f[2] > before[2] / 8.0);
    }
}

impl TextConfig {
    /// Dimension of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim_override
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }
}

/// A Qwen2-VL or Qwen2.5-VL `config.json`.
#[derive(Debug, Clone)]
pub struct Qwen2VlConfig {
    /// The language model.
    pub text: TextConfig,
    /// The vision tower.
    pub vision: VisionConfig,
    /// Token id of each image token (`<|image_pad|>`).
    pub image_token_id: u32,
}

impl Qwen2VlConfig {
    /// Parses `config.json` (flat transformers-4 form, or with `text_config`); a Qwen2.5-VL
    /// one (`model_type` `qwen2_5_vl`) by its own vision settings.
    pub fn from_json(value: &Value) -> std::result::Result<Self, String> {
        let text_value = value.get("text_config").unwrap_or(value);
        let mut raw: DecoderConfig =
            serde_json::from_value(text_value.clone()).map_err(|e| format!("text config: {e}"))?;
        // the language model of a Qwen2-VL checkpoint, whatever its text config calls itself
        raw.model_type = Some("qwen2_vl".into());
        // transformers 5 keeps the rotary settings and the image token at the top level
        if raw.rope_scaling.is_none() && raw.rope_parameters.is_none() {
            let top: DecoderConfig =
                serde_json::from_value(value.clone()).map_err(|e| format!("config: {e}"))?;
            raw.rope_scaling = top.rope_scaling.or(top.rope_parameters);
            raw.rope_theta = raw.rope_theta.or(top.rope_theta);
        }
        let text = raw.resolve()?;
        let model_type = |v: Option<&Value>| {
            v.and_then(|v| v.get("model_type"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let qwen25 = model_type(Some(value)).as_deref() == Some("qwen2_5_vl")
            || model_type(value.get("vision_config")).as_deref() == Some("qwen2_5_vl_vision");
        let vision_value = value
            .get("vision_config")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        let vision: VisionConfig = if qwen25 {
            serde_json::from_value::<Qwen25VisionJson>(vision_value)
                .map_err(|e| format!("vision_config: {e}"))?
                .into()
        } else {
            serde_json::from_value(vision_value).map_err(|e| format!("vision_config: {e}"))?
        };
        let image_token_id = raw
            .image_token_id
            .or_else(|| {
                value
                    .get("image_token_id")
                    .and_then(Value::as_u64)
                    .map(|v| v as u32)
            })
            .unwrap_or(151_655);
        let cfg = Qwen2VlConfig {
            text,
            vision,
            image_token_id,
        };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let t = &self.text;
        if t.num_attention_heads == 0
            || !t.hidden_size.is_multiple_of(t.num_attention_heads)
            || t.num_key_value_heads == 0
            || !t.num_attention_heads.is_multiple_of(t.num_key_value_heads)
        {
            return Err(format!(
                "hidden_size {} / num_attention_heads {} / num_key_value_heads {} do not divide",
                t.hidden_size, t.num_attention_heads, t.num_key_value_heads
            ));
        }
        if self.text.mrope_section.len() != 3
            || self.text.mrope_section.iter().sum::<usize>() * 2 != t.head_dim()
        {
            return Err(format!(
                "mrope_section {:?} must be three bands summing to head_dim / 2 = {}",
                t.mrope_section,
                t.head_dim() / 2
            ));
        }
        let v = &self.vision;
        if v.num_heads == 0 || !v.embed_dim.is_multiple_of(v.num_heads) {
            return Err(format!(
                "vision embed_dim {} is not a multiple of {} heads",
                v.embed_dim, v.num_heads
            ));
        }
        if let Some(q) = &v.qwen25
            && q.window_size < v.spatial_merge_size * v.patch_size
        {
            return Err(format!(
                "vision window_size {} is smaller than one merged token ({} pixels)",
                q.window_size,
                v.spatial_merge_size * v.patch_size
            ));
        }
        if !(v.embed_dim / v.num_heads).is_multiple_of(4) {
            return Err("vision head dimension must be a multiple of 4 (2-D rotary)".into());
        }
        if v.hidden_size != t.hidden_size {
            return Err(format!(
                "vision_config.hidden_size {} differs from the language model's {}",
                v.hidden_size, t.hidden_size
            ));
        }
        if parse_act(&v.hidden_act).is_none() || parse_act(&t.hidden_act).is_none() {
            return Err(format!(
                "unsupported activation ({} / {})",
                v.hidden_act, t.hidden_act
            ));
        }
        Ok(())
    }
}

/// Inverse rotary frequencies `1 / base^(2i / dim)`, `i < dim / 2`, in f32 as torch computes
/// them.
pub(crate) fn inv_freq(base: f64, dim: usize) -> Vec<f32> {
    (0..dim / 2)
        .map(|i| 1.0 / (base as f32).powf((2 * i) as f32 / dim as f32))
        .collect()
}

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

/// Applies rotary tables to the query and key parts of a packed `(tokens, (hq + 2 hk) * d)`
/// projection and returns `(tokens, 3 hq d)` for [`ops::Attention`]: queries and keys
/// rotated (`x cos + rotate_half(x) sin`, `cos`/`sin` `(tokens, d / 2)`), keys and values
/// repeated to every query head of their group.
pub(crate) fn rotate_qkv(
    qkv: &Tensor,
    hq: usize,
    hk: usize,
    d: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<Tensor> {
    let n = qkv.dim(0)?;
    let part = |start: usize, heads: usize| -> Result<Tensor> {
        qkv.narrow(1, start * d, heads * d)?
            .contiguous()?
            .reshape((1, n, heads, d))
    };
    let q = candle_nn::rotary_emb::rope_thd(&part(0, hq)?, cos, sin)?;
    let k = candle_nn::rotary_emb::rope_thd(&part(hq, hk)?, cos, sin)?;
    let v = part(hq + hk, hk)?;
    let repeat = |x: Tensor| -> Result<Tensor> {
        if hq == hk {
            return x.reshape((n, hq * d));
        }
        x.reshape((n, hk, 1, d))?
            .broadcast_as((n, hk, hq / hk, d))?
            .contiguous()?
            .reshape((n, hq * d))
    };
    Tensor::cat(&[q.reshape((n, hq * d))?, repeat(k)?, repeat(v)?], 1)
}

pub(crate) fn tables(
    angles: Vec<f32>,
    n: usize,
    half: usize,
    device: &Device,
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    Ok((
        Tensor::from_vec(cos, (n, half), device)?.to_dtype(dtype)?,
        Tensor::from_vec(sin, (n, half), device)?.to_dtype(dtype)?,
    ))
}

/// Loads a weight under the first prefix of `prefixes` that has it (published and
/// transformers-5 layouts).
fn pick<'a>(vb: &VarBuilder<'a>, prefixes: &[&str], probe: &str) -> VarBuilder<'a> {
    for p in prefixes {
        if vb.contains_tensor(&format!("{p}.{probe}")) {
            return vb.pp(*p);
        }
    }
    vb.pp(prefixes[0])
}

/// A vision block's MLP: Qwen2-VL's `fc1`, activation, `fc2`; Qwen2.5-VL's gated
/// `down(act(gate(x)) * up(x))`.
enum VisionMlp {
    Plain { fc1: Proj, fc2: Proj },
    Gated { gate: Proj, up: Proj, down: Proj },
}

struct VisionBlock {
    /// Layer norms (Qwen2-VL) or RMSNorms (Qwen2.5-VL).
    norm1: LayerNorm,
    qkv: Proj,
    proj: Proj,
    norm2: LayerNorm,
    mlp: VisionMlp,
}

/// The Qwen2-VL or Qwen2.5-VL vision tower (`visual`).
pub struct VisionTower {
    patch: Linear,
    blocks: Vec<VisionBlock>,
    merger_norm: LayerNorm,
    merger_fc1: Proj,
    merger_fc2: Proj,
    cfg: VisionConfig,
    act: Act,
    inv_freq: Vec<f32>,
}

impl VisionTower {
    /// Loads `visual.*` (or `model.visual.*`) from the checkpoint root `vb` (bfloat16 on
    /// the CPU: see `Packing` in `layers::linear`).
    pub fn load(vb: &VarBuilder, cfg: &VisionConfig) -> Result<Self> {
        let vb = pick(vb, &["visual", "model.visual"], "patch_embed.proj.weight");
        let (vb, pk) = Packing::split(vb);
        let e = cfg.embed_dim;
        let heads = cfg.num_heads;
        let d = e / heads;
        let mlp_width = (e as f64 * cfg.mlp_ratio) as usize;
        let patch = Linear::new(
            vb.pp("patch_embed.proj")
                .get(
                    (
                        e,
                        cfg.in_channels,
                        cfg.temporal_patch_size,
                        cfg.patch_size,
                        cfg.patch_size,
                    ),
                    "weight",
                )?
                .reshape((e, cfg.patch_values()))?,
            None,
        );
        let scale = 1.0 / (d as f64).sqrt();
        // Qwen2-VL: layer norms; Qwen2.5-VL: RMSNorms (eps 1e-6 both)
        let norm = |vb: &VarBuilder| -> Result<LayerNorm> {
            match cfg.qwen25 {
                Some(_) => Ok(LayerNorm::rms_norm(vb.get(e, "weight")?, 1e-6)),
                None => ops::load_layer_norm(vb, e, 1e-6),
            }
        };
        let mut blocks = Vec::with_capacity(cfg.depth);
        for i in 0..cfg.depth {
            let b = vb.pp(format!("blocks.{i}"));
            let qkv = ops::load_linear(&b.pp("attn.qkv"), e, 3 * e, true)?;
            // fold the attention scale into the query rows (rotation is linear)
            let w = qkv.weight();
            let bias = qkv.bias().expect("loaded with bias");
            let w = Tensor::cat(&[(w.narrow(0, 0, e)? * scale)?, w.narrow(0, e, 2 * e)?], 0)?;
            let bias = Tensor::cat(
                &[(bias.narrow(0, 0, e)? * scale)?, bias.narrow(0, e, 2 * e)?],
                0,
            )?;
            let mlp = match &cfg.qwen25 {
                Some(q) => {
                    let (m, width) = (b.pp("mlp"), q.intermediate_size);
                    VisionMlp::Gated {
                        gate: pk.load(&m.pp("gate_proj"), e, width, true)?,
                        up: pk.load(&m.pp("up_proj"), e, width, true)?,
                        down: pk.load(&m.pp("down_proj"), width, e, true)?,
                    }
                }
                None => VisionMlp::Plain {
                    fc1: pk.load(&b.pp("mlp.fc1"), e, mlp_width, true)?,
                    fc2: pk.load(&b.pp("mlp.fc2"), mlp_width, e, true)?,
                },
            };
            blocks.push(VisionBlock {
                norm1: norm(&b.pp("norm1"))?,
                qkv: pk.proj(Linear::new(w, Some(bias)))?,
                proj: pk.load(&b.pp("attn.proj"), e, e, true)?,
                norm2: norm(&b.pp("norm2"))?,
                mlp,
            });
        }
        let merged = e * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let m = vb.pp("merger");
        Ok(VisionTower {
            patch,
            blocks,
            merger_norm: norm(&m.pp("ln_q"))?,
            merger_fc1: pk.load(&m.pp("mlp.0"), merged, merged, true)?,
            merger_fc2: pk.load(&m.pp("mlp.2"), merged, cfg.hidden_size, true)?,
            act: parse_act(&cfg.hidden_act).unwrap_or(Act::QuickGelu),
            // axial rope: a quarter of the head dimension per axis, base 10000
            inv_freq: inv_freq(10_000.0, d / 2),
            cfg: cfg.clone(),
        })
    }

    /// Rotary tables `(patches, head_dim / 2)` of images with patch grids `grids`
    /// (`[t, h, w]` each): row then column frequencies of each patch, patches in the
    /// processor's order (2x2 merge blocks, row-major inside and between blocks).
    fn rotary(
        &self,
        grids: &[[usize; 3]],
        device: &Device,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        let m = self.cfg.spatial_merge_size;
        let q = self.inv_freq.len();
        let mut angles = Vec::new();
        let mut n = 0;
        for &[t, h, w] in grids {
            for _ in 0..t {
                for bh in 0..h / m {
                    for bw in 0..w / m {
                        for mh in 0..m {
                            for mw in 0..m {
                                let (row, col) = ((bh * m + mh) as f32, (bw * m + mw) as f32);
                                angles.extend(self.inv_freq.iter().map(|f| row * f));
                                angles.extend(self.inv_freq.iter().map(|f| col * f));
                                n += 1;
                            }
                        }
                    }
                }
            }
        }
        tables(angles, n, 2 * q, device, dtype)
    }

    /// Merged image tokens `(sum of t h w / merge^2, hidden)` of the flattened patches
    /// `(sum of t h w, patch_values)` of images with grids `grids`.
    pub fn forward(&self, patches: &Tensor, grids: &[[usize; 3]]) -> Result<Tensor> {
        let total: usize = grids.iter().map(|g| g[0] * g[1] * g[2]).sum();
        let m = self.cfg.spatial_merge_size;
        if patches.dims() != [total, self.cfg.patch_values()] {
            candle_core::bail!(
                "patches {:?} do not match the grids ({total} x {})",
                patches.dims(),
                self.cfg.patch_values()
            )
        }
        if grids.iter().any(|g| g[1] % m != 0 || g[2] % m != 0) {
            candle_core::bail!("patch grids {grids:?} are not multiples of the merge size {m}")
        }
        let heads = self.cfg.num_heads;
        let d = self.cfg.embed_dim / heads;
        let device = patches.device();
        let (mut cos, mut sin) = self.rotary(grids, device, patches.dtype())?;
        let mut patches = patches.clone();
        // full attention runs within each frame of each image
        let segments = Segment::packed(
            grids
                .iter()
                .flat_map(|&[t, h, w]| std::iter::repeat_n(h * w, t)),
        );
        let attention = ops::Attention::new(&segments, heads, d);
        // Qwen2.5-VL: the patches (and their rotary rows) reordered window by window, each
        // frame's windows still together, so both kinds of attention see contiguous rows
        let windows = self
            .cfg
            .qwen25
            .as_ref()
            .map(|q| Windows::new(grids, m, q.window_size / (m * self.cfg.patch_size)));
        let window_segments = windows
            .as_ref()
            .map(|w| Segment::packed(w.lens(m * m)))
            .unwrap_or_default();
        let windowed = ops::Attention::new(&window_segments, heads, d);
        if let Some(w) = &windows {
            let order = Tensor::from_vec(w.patch_order(m * m), total, device)?;
            patches = patches.index_select(&order, 0)?;
            cos = cos.index_select(&order, 0)?;
            sin = sin.index_select(&order, 0)?;
        }
        let full_blocks = self
            .cfg
            .qwen25
            .as_ref()
            .map(|q| q.full_attention_blocks.as_slice());
        let mut x = ops::linear(&self.patch, &patches, None)?;
        for (i, b) in self.blocks.iter().enumerate() {
            let attention = match full_blocks {
                Some(full) if !full.contains(&i) => &windowed,
                _ => &attention,
            };
            let qkv = ops::linear(&b.qkv, &b.norm1.forward(&x)?, None)?;
            let qkv = rotate_qkv(&qkv, heads, heads, d, &cos, &sin)?;
            let ctx = attention.run(&qkv)?;
            x = ops::linear(&b.proj, &ctx, Some(&x))?;
            let h = b.norm2.forward(&x)?;
            x = match &b.mlp {
                VisionMlp::Plain { fc1, fc2 } => {
                    let h = ops::linear_act(fc1, &h, None, Some(self.act))?;
                    ops::linear(fc2, &h, Some(&x))?
                }
                VisionMlp::Gated { gate, up, down } => {
                    let g = ops::linear_act(gate, &h, None, Some(self.act))?;
                    let u = ops::linear(up, &h, None)?;
                    ops::linear(down, &(g * u)?, Some(&x))?
                }
            };
        }
        let merged = self.cfg.embed_dim * m * m;
        let x = self
            .merger_norm
            .forward(&x)?
            .reshape((total / (m * m), merged))?;
        let x = ops::linear_act(&self.merger_fc1, &x, None, Some(Act::Gelu))?;
        let x = ops::linear(&self.merger_fc2, &x, None)?;
        match windows {
            // the merged tokens back in the processor's order
            Some(w) => {
                let back = Tensor::from_vec(w.inverse(), total / (m * m), device)?;
                x.index_select(&back, 0)
            }
            None => Ok(x),
        }
    }
}

/// Qwen2.5-VL's attention windows over merged tokens (transformers'
/// `get_vision_window_index`): each frame's grid of merged tokens (`h / merge` x
/// `w / merge`) cut into `side` x `side` windows from the top left (the last row and column
/// of windows partial), windows in row-major order, tokens row-major within each.
struct Windows {
    /// Merged-token indices (processor order) in window order.
    order: Vec<u32>,
    /// Merged tokens per non-empty window.
    sizes: Vec<usize>,
}

impl Windows {
    fn new(grids: &[[usize; 3]], merge: usize, side: usize) -> Windows {
        let side = side.max(1);
        let (mut order, mut sizes) = (Vec::new(), Vec::new());
        let mut base = 0;
        for &[t, h, w] in grids {
            let (lh, lw) = (h / merge, w / merge);
            for f in 0..t {
                for r0 in (0..lh).step_by(side) {
                    for c0 in (0..lw).step_by(side) {
                        let before = order.len();
                        for r in r0..(r0 + side).min(lh) {
                            for c in c0..(c0 + side).min(lw) {
                                order.push((base + (f * lh + r) * lw + c) as u32);
                            }
                        }
                        sizes.push(order.len() - before);
                    }
                }
            }
            base += t * lh * lw;
        }
        Windows { order, sizes }
    }

    /// Patch rows in window order: each merged token's `unit` (merge^2) patches, together.
    fn patch_order(&self, unit: usize) -> Vec<u32> {
        self.order
            .iter()
            .flat_map(|&k| (0..unit as u32).map(move |j| k * unit as u32 + j))
            .collect()
    }

    /// Patches per window.
    fn lens(&self, unit: usize) -> impl Iterator<Item = usize> + '_ {
        self.sizes.iter().map(move |s| s * unit)
    }

    /// For each merged token in processor order, its row in window order.
    fn inverse(&self) -> Vec<u32> {
        let mut back = vec![0u32; self.order.len()];
        for (i, &k) in self.order.iter().enumerate() {
            back[k as usize] = i as u32;
        }
        back
    }
}

#[cfg(test)]
mod window_tests {
    use super::{Qwen2VlConfig, Qwen25Vision, Windows};

    #[test]
    fn qwen2_5_vl_configs_read_in_the_published_and_the_transformers_5_layouts() {
        let published: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../models/fixtures/qwen2_5_vl_instruct/tiny/config.json"
            ))
            .unwrap(),
        )
        .unwrap();
        // what transformers 5.24's `to_dict` writes for the same checkpoint
        let nested = serde_json::json!({
            "model_type": "qwen2_5_vl", "image_token_id": 726,
            "text_config": {"model_type": "qwen2_5_vl_text", "vocab_size": 768,
                "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
                "rms_norm_eps": 1e-6, "rope_parameters": {"type": "mrope",
                "mrope_section": [2, 3, 3], "rope_theta": 1e6, "rope_type": "default"}},
            "vision_config": {"model_type": "qwen2_5_vl_vision", "depth": 4, "hidden_size": 32,
                "hidden_act": "silu", "intermediate_size": 48, "num_heads": 4,
                "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
                "temporal_patch_size": 2, "tokens_per_second": 2, "window_size": 56,
                "out_hidden_size": 64, "fullatt_block_indexes": [1, 3],
                "rope_parameters": {"rope_theta": 10000.0, "rope_type": "axial"}}
        });
        for value in [published, nested] {
            let cfg = Qwen2VlConfig::from_json(&value).unwrap();
            let v = &cfg.vision;
            assert_eq!((v.embed_dim, v.hidden_size, v.depth), (32, 64, 4));
            assert_eq!(
                v.qwen25,
                Some(Qwen25Vision {
                    intermediate_size: 48,
                    window_size: 56,
                    full_attention_blocks: vec![1, 3],
                })
            );
            assert_eq!(cfg.text.mrope_section, vec![2, 3, 3]);
            assert_eq!(cfg.image_token_id, 726);
        }
        // a Qwen2-VL config stays one
        let gme: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../models/fixtures/gme/tiny-gme/config.json"
            ))
            .unwrap(),
        )
        .unwrap();
        let cfg = Qwen2VlConfig::from_json(&gme).unwrap();
        assert_eq!((cfg.vision.embed_dim, cfg.vision.qwen25), (32, None));
        // a window narrower than one merged token is refused
        let mut bad = serde_json::json!({"model_type": "qwen2_5_vl", "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "vision_config": {"hidden_size": 32, "num_heads": 4, "out_hidden_size": 64}});
        bad["vision_config"]["window_size"] = 20.into();
        let e = Qwen2VlConfig::from_json(&bad).unwrap_err();
        assert!(e.contains("window_size 20"), "{e}");
    }

    #[test]
    fn windows_cover_every_merged_token_once_in_transformers_order() {
        // a 3 x 5 grid of merged tokens (6 x 10 patches), windows of 2: rows {0,1} and {2},
        // columns {0,1}, {2,3}, {4}; then a 2 x 2 grid that is exactly one window
        let w = Windows::new(&[[1, 6, 10], [1, 4, 4]], 2, 2);
        assert_eq!(
            w.order,
            vec![
                0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18
            ]
        );
        assert_eq!(w.sizes, vec![4, 4, 2, 2, 2, 1, 4]);
        assert_eq!(w.lens(4).sum::<usize>(), 19 * 4);
        let back = w.inverse();
        for (i, &k) in w.order.iter().enumerate() {
            assert_eq!(back[k as usize] as usize, i);
        }
        assert_eq!(&w.patch_order(4)[..8], &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(&w.patch_order(4)[8..12], &[20, 21, 22, 23]);
    }
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
    pub fn load(vb: &VarBuilder, cfg: &TextConfig) -> Result<Self> {
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
