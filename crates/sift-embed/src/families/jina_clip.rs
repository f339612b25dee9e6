//! Jina-CLIP v1 (`jinaai/jina-clip-v1`, `model_type` jina_clip): one checkpoint with a JinaBERT
//! text tower ([`JinaBert`]) and an EVA02 image tower ([`EvaVision`]) in one space, and
//! Jina-CLIP v2 (`jinaai/jina-clip-v2`: an XLM-RoBERTa flash text tower with task LoRA,
//! [`XlmRoberta`], and EVA02-L/14 at 512 px), computed as the published
//! `JinaCLIPModel.encode_text` / `encode_image` do:
//!
//! - texts: v2 only: the task instruction prefixed (below); the tokenizer with
//!   `max_length=512, truncation=True`, the text tower (v2: with the adapter of
//!   `text_config.default_lora_task` merged in, for queries and passages alike:
//!   `encode_text` never passes its task to the adapters), the mean of the states over tokens
//!   that are not padding (`pooler_type` `mean_pooler`), `HFTextEncoder.proj` (identity when
//!   the widths agree), the optional `text_projection`, v2 only: `[:truncate_dim]`
//!   (`config.truncate_dim`), L2;
//! - roles (v2): `encode_text(task=...)` prefixes `task_instructions[task]`, and with no task
//!   the instruction of `default_instruction_task` (jina-clip-v2: null, so none). sift maps
//!   [`Role::Query`] to `task="retrieval.query"` (jina-clip-v2's documented query call,
//!   `"Represent the query for retrieving evidence documents: "` in its config) and
//!   [`Role::Passage`] to no task (its documented call for documents). v1 takes no
//!   instruction: both roles embed the bare text;
//! - images: `convert('RGB')`, `JinaCLIPImageProcessor` (torchvision: shortest edge resized to
//!   `size` with PIL's bicubic, centre crop with Python's rounding, `x / 255`, normalised with
//!   `mean`/`std`), the EVA tower (final norm, token 0, head), the optional
//!   `visual_projection`, v2 only: `[:truncate_dim]`, L2. EVA02-L/14 at 512 px reads the top-left
//!   504 x 504 pixels (its stride-14 conv drops the rest).
use candle_core::{DType, Device, Tensor};
use serde::Deserialize;
use tokenizers::Tokenizer;

use crate::families::truncate::truncate_right;
use crate::files::{ModelFiles, read_json};
use crate::image::{ImageProcessor, PreprocessError, Resample, Resize};
use crate::{Error, Result, Role};
use sift_nn::layers::ops::{self, l2_normalize};
use sift_nn::models::eva::{EvaConfig, EvaVision};
use sift_nn::models::jina_bert::{JinaBert, JinaBertConfig};
use sift_nn::models::xlm_roberta::{XlmRoberta, XlmRobertaConfig};

/// `encode_text`'s default `max_length`.
pub const JINA_CLIP_MAX_TOKENS: usize = 512;

/// Settings of a [`JinaClipEmbedder`].
#[derive(Debug, Clone)]
pub struct JinaClipOptions {
    /// Inputs per forward pass.
    pub batch_size: usize,
    /// Weights and activations dtype.
    pub dtype: DType,
    /// Tokens per text, special tokens included (`encode_text`'s `max_length`; 512 when
    /// `None`).
    pub max_seq_len: Option<usize>,
}

impl Default for JinaClipOptions {
    fn default() -> Self {
        JinaClipOptions {
            batch_size: 32,
            dtype: DType::F32,
            max_seq_len: None,
        }
    }
}

/// `JinaCLIPTextConfig`.
#[derive(Debug, Clone, Deserialize)]
struct TextConfig {
    #[serde(default = "default_embed_dim")]
    embed_dim: usize,
    #[serde(default)]
    hf_model_name_or_path: Option<String>,
    #[serde(default)]
    hf_model_config_kwargs: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pooler_type: Option<String>,
    #[serde(default)]
    proj_type: Option<String>,
    #[serde(default)]
    proj_bias: bool,
    /// v2: the task whose instruction `encode_text` prefixes when given no task.
    #[serde(default)]
    default_instruction_task: Option<String>,
    /// v2: the LoRA adapter the text tower always runs with.
    #[serde(default)]
    default_lora_task: Option<String>,
}

fn default_embed_dim() -> usize {
    768
}

/// `JinaCLIPConfig`.
#[derive(Debug, Clone, Deserialize)]
struct ClipConfig {
    #[serde(default)]
    add_projections: bool,
    #[serde(default = "default_embed_dim")]
    projection_dim: usize,
    text_config: TextConfig,
    vision_config: EvaConfig,
    #[serde(default)]
    truncate_dim: Option<usize>,
}

/// `JinaCLIPImageProcessor`'s transform (jina-clip-implementation's `transform.py`,
/// inference branch).
#[derive(Debug, Clone, PartialEq)]
struct Transform {
    /// Resizes (PIL filter, shortest edge or exact size); never crops.
    resize: ImageProcessor,
    /// Centre crop `(height, width)` after a shortest-edge resize.
    crop: Option<(u32, u32)>,
    mean: [f32; 3],
    std: [f32; 3],
}

impl Transform {
    /// From `preprocessor_config.json`: `size` (int or `[h, w]`), `mean`, `std` (lists or a
    /// scalar), `resize_mode` (`shortest`, `squash`), `interpolation` (`bicubic`, `bilinear`,
    /// `random` = bicubic); absent keys take `JinaCLIPImageProcessor`'s defaults.
    fn from_config(v: &serde_json::Value) -> std::result::Result<Self, PreprocessError> {
        let err = |key: &str, message: String| PreprocessError::Config {
            key: key.into(),
            message,
        };
        let obj = v
            .as_object()
            .ok_or_else(|| PreprocessError::Json("expected an object".into()))?;
        let size = match obj.get("size") {
            None => (224, 224),
            Some(s) => match (s.as_u64(), s.as_array()) {
                (Some(n), _) => (n as u32, n as u32),
                (None, Some(a)) if a.len() == 2 && a.iter().all(|x| x.as_u64().is_some()) => (
                    a[0].as_u64().expect("checked") as u32,
                    a[1].as_u64().expect("checked") as u32,
                ),
                _ => {
                    return Err(err(
                        "size",
                        format!("expected an integer or [h, w], got {s}"),
                    ));
                }
            },
        };
        if size.0 == 0 || size.1 == 0 {
            return Err(err("size", "must be positive".into()));
        }
        let channels =
            |key: &str, default: [f32; 3]| -> std::result::Result<[f32; 3], PreprocessError> {
                match obj.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(default),
                    Some(x) => {
                        if let Some(f) = x.as_f64() {
                            return Ok([f as f32; 3]);
                        }
                        let a = x
                            .as_array()
                            .filter(|a| a.len() == 3 && a.iter().all(|y| y.as_f64().is_some()))
                            .ok_or_else(|| err(key, format!("expected 3 numbers, got {x}")))?;
                        Ok([0, 1, 2].map(|i| a[i].as_f64().expect("checked") as f32))
                    }
                }
            };
        let mean = channels("mean", crate::image::OPENAI_CLIP_MEAN)?;
        let std = channels("std", crate::image::OPENAI_CLIP_STD)?;
        if std.contains(&0.0) {
            return Err(err("std", "a zero standard deviation".into()));
        }
        let text =
            |key: &str, default: &'static str| -> std::result::Result<String, PreprocessError> {
                match obj.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(default.to_string()),
                    Some(serde_json::Value::String(s)) => Ok(s.clone()),
                    Some(x) => Err(err(key, format!("expected a string, got {x}"))),
                }
            };
        let resample = match text("interpolation", "bicubic")?.as_str() {
            "bicubic" | "random" => Resample::Bicubic,
            "bilinear" => Resample::Bilinear,
            other => {
                return Err(err(
                    "interpolation",
                    format!("{other:?} (bicubic, bilinear, random)"),
                ));
            }
        };
        let (resize, crop) = match text("resize_mode", "shortest")?.as_str() {
            "shortest" if size.0 == size.1 => (Resize::ShortestEdge(size.0), Some(size)),
            "shortest" => {
                return Err(err(
                    "size",
                    "a non-square size with resize_mode shortest is not supported".into(),
                ));
            }
            "squash" => (
                Resize::Exact {
                    height: size.0,
                    width: size.1,
                },
                None,
            ),
            other => {
                return Err(err(
                    "resize_mode",
                    format!("{other:?} is not supported (shortest, squash)"),
                ));
            }
        };
        let mut p = ImageProcessor::clip(size.0);
        p.resize = resize;
        p.resample = resample;
        p.do_center_crop = false;
        Ok(Transform {
            resize: p,
            crop,
            mean,
            std,
        })
    }

    /// `(height, width)` of the pixels.
    fn output_size(&self) -> (u32, u32) {
        match (self.crop, self.resize.resize) {
            (Some(c), _) => c,
            (None, Resize::Exact { height, width }) => (height, width),
            (None, Resize::ShortestEdge(s)) => (s, s),
        }
    }

    /// Channels-first pixels `(3, h, w)`: resize, torchvision's centre crop
    /// (`int(round((H - h) / 2))`, ties to even), `ToTensor` (`x / 255` in f32), `Normalize`.
    fn preprocess(&self, img: &image::RgbImage) -> Vec<f32> {
        let resized = self.resize.resize_and_crop(img);
        let pixels = match self.crop {
            Some((ch, cw)) if (resized.height(), resized.width()) != (ch, cw) => {
                let off = |size: u32, crop: u32| {
                    ((size as f64 - crop as f64) / 2.0)
                        .round_ties_even()
                        .max(0.0) as u32
                };
                let (top, left) = (off(resized.height(), ch), off(resized.width(), cw));
                image::imageops::crop_imm(&resized, left, top, cw, ch).to_image()
            }
            _ => resized,
        };
        let mut lut = [[0f32; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, out) in table.iter_mut().enumerate() {
                *out = (v as f32 / 255.0 - self.mean[c]) / self.std[c];
            }
        }
        let n = pixels.width() as usize * pixels.height() as usize;
        let mut out = vec![0f32; 3 * n];
        for (i, p) in pixels.pixels().enumerate() {
            for c in 0..3 {
                out[c * n + i] = lut[c][p[c] as usize];
            }
        }
        out
    }
}

/// The text tower of a version.
enum TextTower {
    /// v1. `cls`: `pooler_type` `cls_pooler` (or null, the default for a BERT config): token 0.
    JinaBert { model: JinaBert, cls: bool },
    /// v2 (mean pooling).
    XlmRoberta(XlmRoberta),
}

/// The `task` sift's v2 queries are embedded with (`encode_text(task="retrieval.query")`).
pub const JINA_CLIP_V2_QUERY_TASK: &str = "retrieval.query";

/// Jina-CLIP v1's or v2's text and image towers in one space.
pub struct JinaClipEmbedder {
    name: String,
    text: TextTower,
    /// Instruction prefixed to queries and to passages (v1: none).
    query_prefix: String,
    passage_prefix: String,
    /// v2's LoRA task (`default_lora_task`), for the fingerprint.
    lora_task: Option<String>,
    /// `config.truncate_dim` (v2).
    truncate_dim: Option<usize>,
    /// `HFTextEncoder.proj`, when not the identity.
    text_proj: Option<ops::Proj>,
    /// `text_projection` / `visual_projection` (`add_projections`).
    projections: Option<(ops::Proj, ops::Proj)>,
    vision: EvaVision,
    tokenizer: Tokenizer,
    max_seq_len: usize,
    transform: Transform,
    dim: usize,
    options: JinaClipOptions,
    content: String,
    device: Device,
}

impl JinaClipEmbedder {
    super::identity_getters!();

    /// Whether `config.json` (parsed) is a Jina-CLIP checkpoint: `model_type` jina_clip or
    /// `architectures` naming `JinaCLIPModel`.
    pub fn is_config(value: &serde_json::Value) -> bool {
        value.get("model_type").and_then(|t| t.as_str()) == Some("jina_clip")
            || value
                .get("architectures")
                .and_then(|a| a.as_array())
                .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("JinaCLIPModel")))
    }

    /// Loads the checkpoint `files` onto `device`.
    pub fn load(files: &ModelFiles, device: &Device, options: JinaClipOptions) -> Result<Self> {
        let path = files.config.clone();
        let unsupported = |message: String| Error::Unsupported {
            path: path.clone(),
            message,
        };
        let value: serde_json::Value = read_json(&files.config)?;
        let cfg: ClipConfig = serde_json::from_value(value)
            .map_err(|e| unsupported(format!("not a Jina-CLIP config: {e}")))?;
        let tc = &cfg.text_config;
        let v1 = tc
            .hf_model_name_or_path
            .as_deref()
            .is_some_and(|n| n.contains("jina-bert"));
        if v1 && cfg.truncate_dim.is_some() {
            return Err(unsupported(
                "truncate_dim (Matryoshka) is not supported for a JinaBERT (v1) text tower".into(),
            ));
        }
        // v1: the pooler of pooler_type (null: a BERT config's cls_pooler); v2: the current
        // _build_text_tower builds XLMRobertaLoRA from XLMRobertaFlashConfig(**kwargs), whose
        // HFTextEncoder default pooler is mean_pooler
        let text_cls = match tc.pooler_type.as_deref() {
            Some("mean_pooler") => false,
            Some("cls_pooler") if v1 => true,
            None => v1,
            Some(other) => {
                return Err(unsupported(format!(
                    "text_config.pooler_type {other:?} (mean_pooler{})",
                    if v1 { ", cls_pooler" } else { "" }
                )));
            }
        };
        cfg.vision_config
            .check()
            .map_err(|m| unsupported(format!("vision_config: {m}")))?;

        let vb = files.var_builder(options.dtype, device)?;
        let tvb = vb.pp("text_model");
        // the towers pack themselves; the projections as they do
        let (heads, pk) = ops::Packing::split(vb.clone());
        let LoadedText {
            tower: text,
            width,
            query_prefix,
            passage_prefix,
            lora_task,
        } = if v1 {
            load_jina_bert(tc, &tvb, text_cls, &unsupported)?
        } else {
            load_xlm_roberta(tc, &tvb, &unsupported)?
        };
        // HFTextEncoder: identity when the widths agree and proj_type is null
        let text_proj = match tc.proj_type.as_deref() {
            None if width == tc.embed_dim => None,
            None | Some("linear") => Some(
                pk.load(
                    &heads.pp("text_model.proj"),
                    width,
                    tc.embed_dim,
                    tc.proj_bias,
                )
                .map_err(|e| unsupported(format!("text_model.proj: {e}")))?,
            ),
            Some(other) => {
                return Err(unsupported(format!(
                    "text_config.proj_type {other:?} (null, linear)"
                )));
            }
        };
        let vision = EvaVision::new(vb.pp("vision_model"), &cfg.vision_config)
            .map_err(|e| unsupported(format!("weights do not match an EVA vision tower: {e}")))?;
        let (tdim, vdim) = (tc.embed_dim, vision.dim());
        let projections = if cfg.add_projections {
            let load = |name: &str, inp: usize| {
                pk.load(&heads.pp(name), inp, cfg.projection_dim, false)
                    .map_err(|e| unsupported(format!("{name}: {e}")))
            };
            Some((
                load("text_projection", tdim)?,
                load("visual_projection", vdim)?,
            ))
        } else {
            if tdim != vdim {
                return Err(unsupported(format!(
                    "text embed_dim {tdim} != vision embed_dim {vdim} without add_projections"
                )));
            }
            None
        };
        let full = if cfg.add_projections {
            cfg.projection_dim
        } else {
            tdim
        };
        if let Some(t) = cfg.truncate_dim
            && (t == 0 || t > full)
        {
            return Err(unsupported(format!(
                "truncate_dim {t} of {full}-dimensional embeddings"
            )));
        }
        let dim = cfg.truncate_dim.unwrap_or(full);

        let preprocessor = files
            .preprocessor
            .as_ref()
            .ok_or_else(|| unsupported("no preprocessor_config.json beside the weights".into()))?;
        let pv: serde_json::Value = read_json(preprocessor)?;
        let transform = Transform::from_config(&pv).map_err(|e| Error::file(preprocessor, e))?;
        let (h, w) = transform.output_size();
        let side = vision.image_size() as u32;
        if (h, w) != (side, side) {
            return Err(unsupported(format!(
                "the image processor makes {h}x{w} pixels, the vision tower takes {side}x{side}"
            )));
        }

        let max_seq_len = options.max_seq_len.unwrap_or(JINA_CLIP_MAX_TOKENS);
        if max_seq_len < 2 {
            return Err(unsupported(format!("max_seq_len {max_seq_len}")));
        }
        let mut tokenizer = files.load_tokenizer()?;
        truncate_right(&mut tokenizer, max_seq_len)?;
        tokenizer.with_padding(None);
        Ok(JinaClipEmbedder {
            name: files.name.clone(),
            text,
            query_prefix,
            passage_prefix,
            lora_task,
            truncate_dim: cfg.truncate_dim,
            text_proj,
            projections,
            vision,
            tokenizer,
            max_seq_len,
            transform,
            dim,
            options,
            content: files.content_hash()?,
            device: device.clone(),
        })
    }

    /// Maximum tokens per text, special tokens included.
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// Token ids of passages ([`JinaClipEmbedder::tokenize_role`] with [`Role::Passage`]).
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        self.tokenize_role(texts, Role::Passage)
    }

    /// The instruction `encode_text` prefixes to texts of `role`: v2's
    /// `task_instructions["retrieval.query"]` for queries, the `default_instruction_task`'s
    /// (none for jina-clip-v2) for passages; v1: none.
    pub fn instruction(&self, role: Role) -> &str {
        match role {
            Role::Query => &self.query_prefix,
            Role::Passage => &self.passage_prefix,
        }
    }

    /// Token ids of `texts` of `role` (the role's instruction prefixed), truncated to
    /// [`JinaClipEmbedder::max_seq_len`].
    pub fn tokenize_role(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<u32>>> {
        let prefix = self.instruction(role);
        let inputs: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        let enc = super::truncate::encode_truncated(&self.tokenizer, inputs, self.max_seq_len)?;
        Ok(enc.into_iter().map(|e| e.get_ids().to_vec()).collect())
    }

    /// Unit vectors of passages, in order.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_tokens(&self.tokenize(texts)?)
    }

    /// Unit vectors of texts of `role`, in order.
    pub fn embed_texts_role(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<f32>>> {
        self.embed_tokens(&self.tokenize_role(texts, role)?)
    }

    /// `_truncate_embeddings` (before the L2).
    fn truncate(&self, f: Tensor) -> Result<Tensor> {
        match self.truncate_dim {
            Some(t) => Ok(f.narrow(1, 0, t)?),
            None => Ok(f),
        }
    }

    /// Unit vectors of tokenised texts ([`JinaClipEmbedder::tokenize`]), in order; sorted by
    /// length into batches internally.
    pub fn embed_tokens(&self, ids: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let mut out = vec![Vec::new(); ids.len()];
        for chunk in order.chunks(self.options.batch_size.max(1)) {
            let batch: Vec<&[u32]> = chunk
                .iter()
                .map(|&i| {
                    if ids[i].is_empty() {
                        &[0u32][..]
                    } else {
                        ids[i].as_slice()
                    }
                })
                .collect();
            let mut f = match &self.text {
                TextTower::JinaBert { model, cls } => model.forward(&batch, *cls)?,
                TextTower::XlmRoberta(model) => model.forward(&batch)?,
            };
            if let Some(p) = &self.text_proj {
                f = ops::linear(p, &f, None)?;
            }
            if let Some((t, _)) = &self.projections {
                f = ops::linear(t, &f, None)?;
            }
            let f = self.truncate(f)?;
            for (&i, v) in chunk.iter().zip(l2_normalize(&f)?.to_vec2::<f32>()?) {
                out[i] = v;
            }
        }
        crate::error::finite(self.name(), out)
    }

    /// The model input of a decoded image: channels-first pixels.
    pub fn preprocess(&self, img: &image::RgbImage) -> Vec<f32> {
        self.transform.preprocess(img)
    }

    /// Decodes (`convert('RGB')`: transparency dropped, as Pillow does) and preprocesses
    /// encoded images in parallel.
    pub fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Vec<f32>, PreprocessError>> {
        use rayon::prelude::*;
        images
            .par_iter()
            .map(|b| {
                let img = crate::image::decode_rgb_with(b, crate::image::Alpha::Drop)?;
                Ok(self.transform.preprocess(&img))
            })
            .collect()
    }

    /// Unit vectors of prepared images, in order.
    pub fn embed_prepared(&self, inputs: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
        let side = self.vision.image_size();
        let dtype = ops::activation_dtype(self.options.dtype, &self.device);
        let run = (self.options.batch_size, dtype);
        super::pixel_rows(self.name(), inputs, run, (side, side), &self.device, |x| {
            let mut f = self.vision.forward(&x)?.to_dtype(dtype)?;
            if let Some((_, v)) = &self.projections {
                f = ops::linear(v, &f, None)?;
            }
            Ok(l2_normalize(&self.truncate(f)?)?)
        })
    }

    /// Everything besides the input that decides the vectors of `tower` (`text` or `image`):
    /// a cache key.
    pub fn fingerprint(&self, tower: &str) -> String {
        let v2 = match &self.text {
            TextTower::JinaBert { .. } => String::new(),
            TextTower::XlmRoberta(_) => format!(
                "|v2|lora={:?}|truncate={:?}",
                self.lora_task, self.truncate_dim
            ),
        };
        format!(
            "{}|jina-clip|{tower}|len={}|{:?}|{:?}|{}|{}{v2}",
            self.name,
            self.max_seq_len,
            self.transform,
            self.options.dtype,
            crate::files::device_class(&self.device),
            self.content
        )
    }

    /// [`JinaClipEmbedder::fingerprint`] of texts of `role`: v1's `text` (both roles embed
    /// alike), v2's with the role's instruction.
    pub fn text_fingerprint(&self, role: Role) -> String {
        match &self.text {
            TextTower::JinaBert { .. } => self.fingerprint("text"),
            TextTower::XlmRoberta(_) => {
                self.fingerprint(&format!("text|prefix={:?}", self.instruction(role)))
            }
        }
    }
}

/// A Jina-CLIP text tower as loaded, with its prompts and LoRA adapter.
struct LoadedText {
    tower: TextTower,
    width: usize,
    query_prefix: String,
    passage_prefix: String,
    lora_task: Option<String>,
}

/// v1's JinaBERT text tower (`cls`: pooled by the CLS token, else by the mean).
fn load_jina_bert(
    tc: &TextConfig,
    tvb: &candle_nn::VarBuilder,
    cls: bool,
    unsupported: &dyn Fn(String) -> Error,
) -> Result<LoadedText> {
    let kwargs = serde_json::Value::Object(tc.hf_model_config_kwargs.clone());
    let bert: JinaBertConfig = serde_json::from_value(kwargs)
        .map_err(|e| unsupported(format!("text_config.hf_model_config_kwargs: {e}")))?;
    bert.check()
        .map_err(|m| unsupported(format!("text_config.hf_model_config_kwargs: {m}")))?;
    let model = JinaBert::new(tvb.pp("transformer"), &bert)
        .map_err(|e| unsupported(format!("weights do not match a JinaBERT text tower: {e}")))?;
    let width = bert.hidden_size;
    Ok(LoadedText {
        tower: TextTower::JinaBert { model, cls },
        width,
        query_prefix: String::new(),
        passage_prefix: String::new(),
        lora_task: None,
    })
}

/// v2's XLM-RoBERTa text tower with its LoRA adapters and task instructions.
fn load_xlm_roberta(
    tc: &TextConfig,
    tvb: &candle_nn::VarBuilder,
    unsupported: &dyn Fn(String) -> Error,
) -> Result<LoadedText> {
    let kwargs = serde_json::Value::Object(tc.hf_model_config_kwargs.clone());
    // the current _build_text_tower: XLMRobertaFlashConfig(**hf_model_config_kwargs)
    let tower = format!(
        "text_config.hf_model_config_kwargs (an XLM-RoBERTa text tower, as for \
             hf_model_name_or_path {:?})",
        tc.hf_model_name_or_path.as_deref().unwrap_or("null")
    );
    let xc: XlmRobertaConfig =
        serde_json::from_value(kwargs).map_err(|e| unsupported(format!("{tower}: {e}")))?;
    xc.check()
        .map_err(|m| unsupported(format!("{tower}: {m}")))?;
    // HFTextEncoder.get_instruction_from_task: instructions only when the tower has
    // some; an unknown task raises
    let instructions = xc.task_instructions.clone().unwrap_or_default();
    let instruction = |task: Option<&str>| -> Result<String> {
        match task {
            _ if instructions.is_empty() => Ok(String::new()),
            None => Ok(String::new()),
            Some(t) => instructions.get(t).cloned().ok_or_else(|| {
                unsupported(format!(
                    "task {t:?} is not in hf_model_config_kwargs.task_instructions"
                ))
            }),
        }
    };
    let query_prefix = instruction(Some(JINA_CLIP_V2_QUERY_TASK))?;
    let passage_prefix = instruction(tc.default_instruction_task.as_deref())?;
    let lora = match tc.default_lora_task.as_deref() {
        None => None,
        Some(t) => Some(xc.lora_index(t).ok_or_else(|| {
            unsupported(format!(
                "text_config.default_lora_task {t:?} is not in lora_adaptations"
            ))
        })?),
    };
    let model = XlmRoberta::new(tvb.pp("transformer.roberta"), &xc, lora).map_err(|e| {
        unsupported(format!(
            "weights do not match an XLM-RoBERTa (LoRA) text tower: {e}"
        ))
    })?;
    let width = model.hidden();
    Ok(LoadedText {
        tower: TextTower::XlmRoberta(model),
        width,
        query_prefix,
        passage_prefix,
        lora_task: tc.default_lora_task.clone(),
    })
}
