//! [`Embedder`]: one entry point for every supported model. It loads a model from a
//! directory or hub id, tells the family from `config.json`, and embeds texts by role,
//! images, and (for models that read both in one input) text with images, through the same
//! methods whatever the family.
use std::borrow::Cow;

use candle_core::DType;

use crate::families::decoder::DecoderEmbedder;
use crate::families::gme::{GmeEmbedder, GmeImage, GmeInput};
use crate::families::jina_clip::JinaClipEmbedder;
use crate::families::nomic_pair::NomicEmbedder;
use crate::families::text::{Role, TextEmbedder};
use crate::families::vision::VisionEmbedder;
use crate::image::{Decode, PreprocessError};
use crate::profile::{Profile, ReferenceModel};
use crate::{DevicePref, Error, ModelFiles, Result};

mod load;
mod towers;

use towers::Tower;

/// A model family, told from `config.json`'s `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// A BERT-family sentence encoder (`bert`): texts only.
    Text,
    /// CLIP (`clip`): separate text and image towers in one space.
    Clip,
    /// SigLIP / SigLIP 2 (`siglip`): separate text and image towers in one space.
    Siglip,
    /// GME (`qwen2_vl`): one model for text, images, and text with images in one input.
    Gme,
    /// A decoder LM embedding texts at its last token (`mistral`, `qwen2`): texts only.
    Decoder,
    /// Nomic Embed v1.5 (`nomic_bert` with `NomicVisionModel`): its vision checkpoint with
    /// the text checkpoint beside it, one space. (A `nomic_bert` text checkpoint alone is
    /// [`Family::Text`].)
    Nomic,
    /// Jina-CLIP v1 and v2 (`jina_clip`, `JinaCLIPModel`): a JinaBERT (v1) or XLM-RoBERTa
    /// with task LoRA (v2) text tower and an EVA02 image tower in one checkpoint, one space.
    JinaClip,
}

impl Family {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Text => "text",
            Family::Clip => "clip",
            Family::Siglip => "siglip",
            Family::Gme => "gme",
            Family::Decoder => "decoder",
            Family::Nomic => "nomic",
            Family::JinaClip => "jina_clip",
        }
    }

    /// The family of the model whose `config.json` is at `config`, from its `model_type`
    /// (read once; BERT configs may have none).
    pub fn of(config: &std::path::Path) -> Family {
        let value = crate::read_json::<serde_json::Value>(config).ok();
        let model_type = value
            .as_ref()
            .and_then(|v| v.get("model_type")?.as_str().map(str::to_owned));
        match model_type.as_deref() {
            Some("nomic_bert") if value.as_ref().is_some_and(NomicEmbedder::is_vision_config) => {
                Family::Nomic
            }
            _ if value.as_ref().is_some_and(JinaClipEmbedder::is_config) => Family::JinaClip,
            Some("qwen2_vl") => Family::Gme,
            Some("clip") => Family::Clip,
            Some("siglip") => Family::Siglip,
            Some(t) if crate::DECODER_MODEL_TYPES.contains(&t) => Family::Decoder,
            _ => Family::Text,
        }
    }
}

/// What a model can embed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Images (corpus images, query images) into the texts' space.
    pub images: bool,
    /// A text and images in one input, fused by the model itself ([`Embedder::embed_joint`]:
    /// GME's prompt, BGE-VL's sum of raw features); models without it embed each separately
    /// and callers combine the vectors.
    pub joint: bool,
}

/// How to load a model.
#[derive(Debug, Clone)]
pub struct EmbedderOptions {
    /// Device.
    pub device: DevicePref,
    /// Weights and activations: f32, f16 / bf16 (on the CPU, bf16 packs every model's linear
    /// layers as bfloat16 for the processor's bfloat16 dot products, the rest in f32), or
    /// [`Precision::Auto`].
    pub dtype: Precision,
    /// Inputs per forward pass; the family's default when `None`.
    pub batch_size: Option<usize>,
    /// A task instruction for queries: in the model's prompt format for models the registry
    /// gives one ([`crate::registry::ModelInfo::query_template`]: E5-Mistral, GritLM, BGE,
    /// ...), GME's system prompt; loading a model that takes none with it is an error.
    pub query_instruction: Option<String>,
    /// Sift's handling of the model, or MM-BRIGHT's reference code's ([`Profile`]).
    pub profile: Profile,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        EmbedderOptions {
            device: DevicePref::Cpu,
            dtype: Precision::F32,
            batch_size: None,
            query_instruction: None,
            profile: Profile::Default,
        }
    }
}

/// Weights and activations precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Precision {
    /// 32-bit floats (the CPU default).
    #[default]
    F32,
    /// 16-bit floats (GPUs, through candle's generic operations).
    F16,
    /// bfloat16: on GPUs through candle's generic operations; on the CPU every model's
    /// linear layers keep bfloat16 weights packed for the processor's bfloat16 units
    /// (Intel AMX tiles, else AVX512-BF16 dot products; widened to f32 on processors
    /// without either) while embeddings, norms, attention and residuals run in f32 (under
    /// `SIFT_KERNELS=generic`, candle's generic operations as on GPUs).
    Bf16,
    /// bf16 on the CPU where the processor has AVX512-BF16 (or AMX) and the family's
    /// parity suites hold the packed bound (cosine >= 0.999 to f32), f32 elsewhere
    /// ([`Precision::resolve`]).
    Auto,
}

impl Precision {
    /// candle's dtype ([`Precision::Auto`] unresolved: f32).
    pub fn dtype(self) -> DType {
        match self {
            Precision::F32 | Precision::Auto => DType::F32,
            Precision::F16 => DType::F16,
            Precision::Bf16 => DType::BF16,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
            Precision::Auto => "auto",
        }
    }

    /// The precision a model of `family` loads in on `device`: [`Precision::Auto`] is bf16
    /// on the CPU's fused kernels where the processor has AVX512-BF16 (or AMX) and the
    /// family holds the packed bound, else f32; the others are themselves.
    ///
    /// The families that hold it: every parity suite of theirs stays at cosine >= 0.999 to
    /// the f32 vectors with packed bfloat16 weights (`SIFT_TEST_DTYPE=bf16` in
    /// `scripts/test`). Jina-CLIP does not (v2's XLM-RoBERTa text tower gives 0.996 on its
    /// fixture passages), so it stays f32.
    pub fn resolve(self, family: Family, device: &candle_core::Device) -> Precision {
        match self {
            Precision::Auto => {
                let packs = sift_nn::layers::kernels::fused_cpu(device)
                    && sift_simd::bf16::has_dot_bf16()
                    && family != Family::JinaClip;
                if packs {
                    Precision::Bf16
                } else {
                    Precision::F32
                }
            }
            p => p,
        }
    }

    /// The kernel a model's linear layers run on `device` at this (resolved) precision:
    /// `packed-bf16-amx` (bfloat16 weights on Intel AMX tiles), `packed-bf16-avx512`
    /// (bfloat16 weights, AVX512-BF16 dot products),
    /// `packed-bf16-widened` (bfloat16 weights widened to f32), `fused-f32` (the CPU's
    /// fused f32 gemm), or `candle-<dtype>` (candle's generic operations: GPUs, and the
    /// CPU under `SIFT_KERNELS=generic` or in f16).
    pub fn linear_kernel(self, device: &candle_core::Device) -> &'static str {
        let fused = sift_nn::layers::kernels::fused_cpu(device);
        match self {
            Precision::Bf16 if fused => match sift_simd::bf16::Kernel::best() {
                sift_simd::bf16::Kernel::Amx => "packed-bf16-amx",
                sift_simd::bf16::Kernel::DotBf16 => "packed-bf16-avx512",
                sift_simd::bf16::Kernel::F32 => "packed-bf16-widened",
            },
            Precision::F32 | Precision::Auto if fused => "fused-f32",
            Precision::F32 | Precision::Auto => "candle-f32",
            Precision::F16 => "candle-f16",
            Precision::Bf16 => "candle-bf16",
        }
    }
}

/// An image decoded and preprocessed for one model ([`Embedder::prepare_images`]).
#[derive(Debug, Clone, PartialEq)]
pub enum PreparedImage {
    /// CLIP / SigLIP: normalised pixels, channels first.
    Pixels(Vec<f32>),
    /// GME: the patch grid.
    Patches(GmeImage),
}

/// What is embedded: texts of a role, or images (the cache key of each differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Texts: queries or passages.
    Text(Role),
    /// Images on their own (corpus images).
    Image,
}

/// Texts tokenised for a model ([`Embedder::prepare_texts`]): the preparation that can be
/// timed apart from the model.
#[derive(Debug, Clone)]
pub struct PreparedTexts(Prepared);

#[derive(Debug, Clone)]
pub(crate) enum Prepared {
    Text(Vec<Vec<u32>>),
    Vision(Vec<(Vec<u32>, usize)>),
    /// GME tokenises inside its forward pass (queries with this instruction, when not the
    /// default).
    Gme(Vec<String>, Role, Option<String>),
    /// Decoders' ids and the length of their prefix (left out of GritLM-style means).
    Decoder(Vec<Vec<u32>>, usize),
}

impl PreparedTexts {
    /// Number of texts.
    pub fn len(&self) -> usize {
        match &self.0 {
            Prepared::Text(v) => v.len(),
            Prepared::Vision(v) => v.len(),
            Prepared::Gme(v, _, _) => v.len(),
            Prepared::Decoder(v, _) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens the model will read, special tokens and prefixes included; `None` for GME,
    /// which tokenises inside its forward pass.
    pub fn token_count(&self) -> Option<usize> {
        match &self.0 {
            Prepared::Text(v) => Some(v.iter().map(Vec::len).sum()),
            Prepared::Vision(v) => Some(v.iter().map(|(ids, _)| ids.len()).sum()),
            Prepared::Gme(..) => None,
            Prepared::Decoder(v, _) => Some(v.iter().map(Vec::len).sum()),
        }
    }
}

/// One input of a joint embedding (text and images together, [`Embedder::embed_joint`]).
#[derive(Debug, Clone, Copy)]
pub struct JointInput<'a> {
    /// The text, if any.
    pub text: Option<&'a str>,
    /// The images, in order (before the text in the model's prompt).
    pub images: &'a [&'a PreparedImage],
}

/// Any supported embedding model behind one API (see the module docs).
pub struct Embedder {
    model: Box<dyn Tower>,
    profile: Profile,
    reference: ReferenceModel,
    precision: Precision,
    linear_kernel: &'static str,
    max_image_pixels: u64,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("name", &self.name())
            .field("family", &self.family())
            .field("dim", &self.dim())
            .field("profile", &self.profile)
            .finish()
    }
}

impl Embedder {
    /// Loads a model from a local directory in Hugging Face layout, or a hub id / registry
    /// alias (feature `hub`; cached models load offline). The family comes from
    /// `config.json`.
    pub fn load(spec: &str, options: &EmbedderOptions) -> Result<Embedder> {
        Self::from_files(&ModelFiles::resolve(spec)?, options)
    }

    /// `bge_vl`: the model is BGE-VL (a CLIP checkpoint whose joint input sums the towers'
    /// raw features).
    fn new(model: Box<dyn Tower>, bge_vl: bool) -> Embedder {
        let reference = match model.family() {
            Family::Siglip => ReferenceModel::Siglip,
            Family::Clip if bge_vl => ReferenceModel::BgeVl,
            Family::Clip => ReferenceModel::Clip,
            Family::Nomic => ReferenceModel::Nomic,
            Family::Gme => ReferenceModel::Gme,
            Family::JinaClip => ReferenceModel::JinaClip,
            Family::Text | Family::Decoder => ReferenceModel::Other,
        };
        Embedder {
            model,
            profile: Profile::Default,
            reference,
            precision: Precision::F32,
            linear_kernel: "fused-f32",
            max_image_pixels: crate::image::DEFAULT_MAX_PIXELS,
        }
    }

    /// The same model, recorded as loaded at `precision` on `device`.
    fn with_precision(mut self, precision: Precision, device: &candle_core::Device) -> Embedder {
        self.precision = precision;
        self.linear_kernel = precision.linear_kernel(device);
        self
    }

    /// The precision the model was loaded at ([`Precision::Auto`] resolved).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The kernel its linear layers run ([`Precision::linear_kernel`]).
    pub fn linear_kernel(&self) -> &'static str {
        self.linear_kernel
    }

    /// The same model with inputs prepared as `profile` says.
    pub fn with_profile(mut self, profile: Profile) -> Embedder {
        self.profile = profile;
        self
    }

    /// How inputs are prepared ([`Profile`]).
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// Which of the reference code's per-model rules apply to this model.
    pub fn reference_model(&self) -> ReferenceModel {
        self.reference
    }

    /// A text encoder already loaded.
    pub fn from_text(model: TextEmbedder) -> Embedder {
        Embedder::new(Box::new(model), false)
    }

    /// A CLIP / SigLIP model already loaded.
    pub fn from_vision(model: VisionEmbedder) -> Embedder {
        let bge_vl = is_bge_vl_name(model.name());
        Embedder::new(Box::new(model), bge_vl)
    }

    /// A decoder embedder already loaded.
    pub fn from_decoder(model: DecoderEmbedder) -> Embedder {
        Embedder::new(Box::new(model), false)
    }

    /// A GME model already loaded.
    pub fn from_gme(model: GmeEmbedder) -> Embedder {
        Embedder::new(Box::new(model), false)
    }

    /// Model name (hub id or directory name).
    pub fn name(&self) -> &str {
        self.model.name()
    }

    /// Embedding dimension.
    pub fn dim(&self) -> usize {
        self.model.dim()
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.model.family()
    }

    /// What the model can embed.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            images: self.model.images().is_some(),
            joint: self.family() == Family::Gme || self.reference == ReferenceModel::BgeVl,
        }
    }

    /// [`ModelFiles::content_hash`] of the files the model was loaded from.
    pub fn content_hash(&self) -> &str {
        self.model.content_hash()
    }

    /// Everything besides the input that decides the vectors of `input` (the model's files,
    /// settings, dtype, device kind): a cache key. GME's query instruction is not in it:
    /// only queries use it, and queries are not cached.
    pub fn fingerprint(&self, input: Input) -> String {
        let base = self.model.fingerprint(input);
        let profiled = matches!(
            self.reference,
            ReferenceModel::Nomic | ReferenceModel::Gme | ReferenceModel::BgeVl
        );
        match input {
            // both reference profiles cut texts alike: they share cached vectors
            Input::Text(_) if self.profile.is_reference() && profiled => {
                format!("{base}|profile=reference")
            }
            Input::Image => {
                let decode = self.image_decode();
                // GME and Jina-CLIP drop transparency in every profile: it is in their own
                // fingerprints' meaning, not spelled out
                let own_alpha = self.model.images().is_some_and(|i| !i.drops_alpha());
                let mut key = if own_alpha && decode.alpha == crate::image::Alpha::Drop {
                    format!("{base}|alpha=drop|{}", crate::image::DECODER)
                } else {
                    format!("{base}|{}", crate::image::DECODER)
                };
                if !decode.orient {
                    key.push_str("|orient=stored");
                }
                if decode.truncated {
                    key.push_str("|truncated=partial");
                }
                key
            }
            _ => base,
        }
    }

    /// The longest text input in tokens, special tokens included.
    pub fn max_text_tokens(&self) -> usize {
        self.model.max_text_tokens()
    }

    /// Tokenises texts of `role` (with the model's prefix or prompt).
    pub fn prepare_texts(&self, texts: &[&str], role: Role) -> Result<PreparedTexts> {
        let profiled = self.profiled(texts, role)?;
        let texts: Vec<&str> = profiled.iter().map(|t| t.as_ref()).collect();
        Ok(PreparedTexts(self.model.prepare_texts(
            &texts,
            role,
            self.profile.is_reference(),
        )?))
    }

    /// `text` cut by BGE-VL's rule `cut` of the reference profile ([`crate::profile::bge_vl_cut`],
    /// which differs per task); any other model or profile: `text` as it is. Texts cut so
    /// pass through the embedder's own (Tasks 1-2) cut unchanged when they fit.
    pub fn reference_text(&self, text: &str, cut: crate::profile::BgeVlCut) -> Result<String> {
        match (self.as_vision(), self.reference, self.profile) {
            (Some(m), ReferenceModel::BgeVl, p) if p.is_reference() => {
                crate::profile::bge_vl_cut(text, cut, |t| m.fits(t))
            }
            _ => Ok(text.to_string()),
        }
    }

    /// `texts` of `role` as the profile has them embedded: as they are by default; in the
    /// reference profile cut as the reference code cuts them ([`crate::profile`]).
    fn profiled<'t>(&self, texts: &[&'t str], role: Role) -> Result<Vec<Cow<'t, str>>> {
        if self.profile == Profile::Default {
            return Ok(texts.iter().map(|t| Cow::Borrowed(*t)).collect());
        }
        match (self.as_vision(), self.reference) {
            (Some(m), ReferenceModel::BgeVl) => texts
                .iter()
                .map(|t| crate::profile::bge_vl_text(t, role, |cut| m.fits(cut)).map(Cow::Owned))
                .collect(),
            _ => Ok(texts
                .iter()
                .map(|t| crate::profile::reference_cut(self.reference, role, t))
                .collect()),
        }
    }

    /// Whether queries can carry a task instruction: the registry gives the model a prompt
    /// format for one ([`crate::registry::ModelInfo::query_template`]), or it is GME (whose
    /// instruction is the system prompt).
    pub fn takes_instruction(&self) -> bool {
        self.model.prepare_instructed(&[], "").is_some()
    }

    /// BRIGHT's task instruction for this model, `{domain}` standing for the domain (the
    /// registry's [`crate::registry::ModelInfo::bright_instruction`]).
    pub fn bright_instruction(&self) -> Option<&'static str> {
        crate::registry::find(self.name()).and_then(|m| m.bright_instruction.as_deref())
    }

    /// Tokenises queries carrying `instruction` in the model's prompt format (`None`: the
    /// model's default prefix or prompt, as [`Embedder::prepare_texts`]). An error for a
    /// model that takes none ([`Embedder::takes_instruction`]).
    pub fn prepare_queries(
        &self,
        texts: &[&str],
        instruction: Option<&str>,
    ) -> Result<PreparedTexts> {
        let Some(instruction) = instruction else {
            return self.prepare_texts(texts, Role::Query);
        };
        let profiled = self.profiled(texts, Role::Query)?;
        let texts: Vec<&str> = profiled.iter().map(|t| t.as_ref()).collect();
        match self.model.prepare_instructed(&texts, instruction) {
            Some(prepared) => Ok(PreparedTexts(prepared?)),
            None => Err(self.cannot("take a query instruction (no prompt format for one)")),
        }
    }

    /// Unit vectors of queries carrying `instruction` ([`Embedder::prepare_queries`]).
    pub fn embed_queries(
        &self,
        texts: &[&str],
        instruction: Option<&str>,
    ) -> Result<Vec<Vec<f32>>> {
        self.embed_prepared_texts(&self.prepare_queries(texts, instruction)?)
    }

    /// Unit vectors of prepared texts, in order.
    pub fn embed_prepared_texts(&self, texts: &PreparedTexts) -> Result<Vec<Vec<f32>>> {
        self.model
            .embed_prepared(&texts.0)
            .unwrap_or_else(|| Err(self.cannot("embed texts prepared for another model")))
    }

    /// Unit vectors of texts of `role`, in order.
    pub fn embed_texts(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<f32>>> {
        self.embed_prepared_texts(&self.prepare_texts(texts, role)?)
    }

    /// Decodes and preprocesses encoded images in parallel: each one's model input, or why
    /// it cannot be embedded (it does not decode; for GME, it needs more tokens than the
    /// prompt has room for). A text model cannot embed images: every item is an error.
    /// Images are decoded as the profile decodes the index's ([`Embedder::image_decode`]).
    pub fn prepare_images(
        &self,
        images: &[&[u8]],
    ) -> Vec<std::result::Result<PreparedImage, PreprocessError>> {
        self.prepare_images_with(images, self.image_decode(), None)
    }

    /// [`Embedder::prepare_images`] with the decoding `decode`, and each decoded image first
    /// resized to `resize` (width, height) with Pillow's `Image.resize` default (bicubic)
    /// when given: how some of the reference code's rules load an image before the model's
    /// processor sees it.
    pub fn prepare_images_with(
        &self,
        images: &[&[u8]],
        decode: Decode,
        resize: Option<(u32, u32)>,
    ) -> Vec<std::result::Result<PreparedImage, PreprocessError>> {
        use rayon::prelude::*;
        if self.model.images().is_none() {
            return images.iter().map(|_| Err(self.no_images())).collect();
        }
        images
            .par_iter()
            .map(|bytes| {
                let img = crate::image::decode_image(bytes, decode)?;
                self.prepare_rgb(pre_resize(img, resize))
            })
            .collect()
    }

    /// A decoded image prepared as this model prepares images (GME: checked to fit its
    /// prompt alone).
    pub fn prepare_rgb(
        &self,
        img: image::RgbImage,
    ) -> std::result::Result<PreparedImage, PreprocessError> {
        match self.model.images() {
            Some(images) => images.prepare_rgb(img),
            None => Err(self.no_images()),
        }
    }

    fn no_images(&self) -> PreprocessError {
        PreprocessError::Size(format!(
            "{} is a text model: it embeds no images",
            self.name()
        ))
    }

    /// How this model's images are decoded for the index and for queries: transformers'
    /// `load_image` in the default profile (transparency composited onto white, except for
    /// the models whose own code drops it: BGE-VL's `encode`, GME's `fetch_image`,
    /// Jina-CLIP's `encode_image`); in the reference profiles, as MM-BRIGHT's data loader
    /// hands images over ([`Decode::REFERENCE_LOADER`]: transparency dropped, stored
    /// orientation, truncated files decoded as far as they go).
    pub fn image_decode(&self) -> Decode {
        if self.profile.is_reference() {
            return Decode {
                max_pixels: self.max_image_pixels,
                ..Decode::REFERENCE_LOADER
            };
        }
        let drop = self.reference == ReferenceModel::BgeVl
            || self.model.images().is_some_and(|i| i.drops_alpha());
        Decode {
            alpha: if drop {
                crate::image::Alpha::Drop
            } else {
                crate::image::Alpha::OverWhite
            },
            max_pixels: self.max_image_pixels,
            ..Decode::TRANSFORMERS
        }
    }

    /// Sets the most pixels an image may have (header width x height) before it is decoded;
    /// larger images are refused with [`PreprocessError::TooManyPixels`] (the index counts
    /// and names them). Default [`crate::image::DEFAULT_MAX_PIXELS`].
    pub fn set_max_image_pixels(&mut self, max_pixels: u64) {
        self.max_image_pixels = max_pixels.max(1);
    }

    /// Prepares one image of a query that holds `count` images in one input (GME: each
    /// image at most an equal share of the prompt; other families as
    /// [`Embedder::prepare_images`]).
    pub fn prepare_query_image(
        &self,
        bytes: &[u8],
        count: usize,
    ) -> std::result::Result<PreparedImage, PreprocessError> {
        self.prepare_query_image_with(bytes, count, self.image_decode(), None)
    }

    /// [`Embedder::prepare_query_image`] with the decoding and first resize of
    /// [`Embedder::prepare_images_with`].
    pub fn prepare_query_image_with(
        &self,
        bytes: &[u8],
        count: usize,
        decode: Decode,
        resize: Option<(u32, u32)>,
    ) -> std::result::Result<PreparedImage, PreprocessError> {
        match self.as_gme() {
            Some(m) => {
                let budget = (m.max_length().saturating_sub(128) / count.max(1)) as u64;
                let img = pre_resize(crate::image::decode_image(bytes, decode)?, resize);
                m.processor()
                    .prepare_rgb(img, Some(budget))
                    .map(PreparedImage::Patches)
            }
            None => self
                .prepare_images_with(&[bytes], decode, resize)
                .pop()
                .expect("one result per image"),
        }
    }

    /// Unit vectors of prepared images, in order.
    pub fn embed_images(&self, images: &[PreparedImage]) -> Result<Vec<Vec<f32>>> {
        match self.model.images() {
            Some(tower) => tower.embed_images(images),
            None if images.is_empty() => Ok(Vec::new()),
            None => Err(self.cannot("embed images: it is a text model")),
        }
    }

    /// Unit vectors of inputs holding a text and images together, each embedded by the
    /// model as one input (GME's prompt with the images before the text); queries get the
    /// query instruction. Only for models with [`Capabilities::joint`].
    pub fn embed_joint(&self, inputs: &[JointInput<'_>], role: Role) -> Result<Vec<Vec<f32>>> {
        self.embed_joint_queries(inputs, role, None)
    }

    /// [`Embedder::embed_joint`]; queries with `instruction` instead of the model's query
    /// instruction when it is given.
    pub fn embed_joint_queries(
        &self,
        inputs: &[JointInput<'_>],
        role: Role,
        instruction: Option<&str>,
    ) -> Result<Vec<Vec<f32>>> {
        if self.reference == ReferenceModel::BgeVl {
            return self.embed_features_summed(inputs, role);
        }
        let Some(m) = self.as_gme() else {
            return Err(
                self.cannot("embed a text and images as one input (it embeds them separately)")
            );
        };
        let images: Vec<Vec<&GmeImage>> = inputs
            .iter()
            .map(|i| {
                i.images
                    .iter()
                    .map(|img| match img {
                        PreparedImage::Patches(p) => Ok(p),
                        PreparedImage::Pixels(_) => {
                            Err(self.cannot("embed an image prepared for CLIP / SigLIP"))
                        }
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        let instruction = match role {
            Role::Query => instruction.unwrap_or(m.query_instruction()),
            Role::Passage => crate::families::gme::DEFAULT_INSTRUCTION,
        };
        let texts: Vec<&str> = inputs.iter().map(|i| i.text.unwrap_or("")).collect();
        let profiled = self.profiled(&texts, role)?;
        let gme_inputs: Vec<GmeInput<'_>> = inputs
            .iter()
            .zip(&images)
            .zip(&profiled)
            .map(|((i, imgs), t)| GmeInput {
                instruction,
                images: imgs,
                text: i.text.map(|_| t.as_ref()),
            })
            .collect();
        m.embed(&gme_inputs)
    }

    /// Unit vectors of normalise(text features + mean of the images' features), from the
    /// towers' raw (unnormalised) outputs; an input without images is its text's vector.
    /// BGE-VL's `encode(images=..., text=...)` (`encode_multimodal`), and how MM-BRIGHT's
    /// reference code fuses CLIP and SigLIP queries (`(text + image) / 2` before
    /// normalising: task2_multimodal.py:110-115, 211-216). Texts are prepared as `role`'s
    /// are. Only for CLIP and SigLIP models.
    pub fn embed_features_summed(
        &self,
        inputs: &[JointInput<'_>],
        role: Role,
    ) -> Result<Vec<Vec<f32>>> {
        let Some(m) = self.as_vision() else {
            return Err(self.cannot("sum raw text and image features (not a CLIP-style model)"));
        };
        let texts: Vec<&str> = inputs.iter().map(|i| i.text.unwrap_or("")).collect();
        let profiled = self.profiled(&texts, role)?;
        let refs: Vec<&str> = profiled.iter().map(|t| t.as_ref()).collect();
        let text = m.text_feature_rows(&m.tokenize(&refs)?)?;
        let images: Vec<PreparedImage> = inputs
            .iter()
            .flat_map(|i| i.images.iter().map(|img| (*img).clone()))
            .collect();
        let pixels = towers::pixels(self.name(), &images)?;
        let mut images = m.image_feature_rows(&pixels)?.into_iter();
        Ok(inputs
            .iter()
            .zip(text)
            .map(|(input, mut t)| {
                if input.text.is_none() {
                    t.iter_mut().for_each(|x| *x = 0.0);
                }
                let n = input.images.len();
                if n > 0 {
                    let mut mean = vec![0f32; t.len()];
                    for v in images.by_ref().take(n) {
                        mean.iter_mut()
                            .zip(&v)
                            .for_each(|(m, x)| *m += x / n as f32);
                    }
                    t.iter_mut().zip(&mean).for_each(|(a, b)| *a += b);
                }
                let norm = t.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                t.iter_mut().for_each(|x| *x /= norm);
                t
            })
            .collect())
    }

    /// The vector of a blank white 224 x 224 image, prepared as this model prepares images
    /// (the reference code's stand-in for a query without an image).
    pub fn blank_image_vector(&self) -> Result<Vec<f32>> {
        let prepared = self.blank_image()?;
        Ok(self
            .embed_images(&[prepared])?
            .pop()
            .expect("one vector for one image"))
    }

    /// A blank white 224 x 224 image prepared as this model prepares images (the reference
    /// code's `Image.new("RGB", (224, 224), color="white")`; SigLIP's 384 x 384 one is the
    /// same after resizing).
    pub fn blank_image(&self) -> Result<PreparedImage> {
        let img = image::RgbImage::from_pixel(224, 224, image::Rgb([255, 255, 255]));
        match self.model.images() {
            Some(tower) => tower.prepare_blank(img),
            None => Err(self.cannot("embed images: it is a text model")),
        }
    }

    /// The concrete model, when it is a `T`.
    fn downcast<T: 'static>(&self) -> Option<&T> {
        self.model.as_any().downcast_ref::<T>()
    }

    /// The BERT-family encoder, when that is the family (for its tokenizer and settings).
    pub fn as_text(&self) -> Option<&TextEmbedder> {
        self.downcast()
    }

    /// The CLIP / SigLIP model, when that is the family.
    pub fn as_vision(&self) -> Option<&VisionEmbedder> {
        self.downcast()
    }

    /// The GME model, when that is the family.
    pub fn as_gme(&self) -> Option<&GmeEmbedder> {
        self.downcast()
    }

    fn cannot(&self, what: &str) -> Error {
        Error::Capability {
            model: self.name().to_string(),
            message: format!("cannot {what}"),
        }
    }
}

/// `img` resized to `to` (width, height) as Pillow's `Image.resize` does by default
/// (bicubic, no reducing gap), or as it is.
fn pre_resize(img: image::RgbImage, to: Option<(u32, u32)>) -> image::RgbImage {
    match to {
        Some((w, h)) if (w, h) != img.dimensions() => {
            crate::image::resize_rgb8(&img, w, h, crate::image::Resample::Bicubic)
        }
        _ => img,
    }
}

/// Whether `name` is BGE-VL's (registry alias `bge-vl-*`).
fn is_bge_vl_name(name: &str) -> bool {
    crate::registry::find(name).is_some_and(|m| m.alias.starts_with("bge-vl"))
}

/// Whether the CLIP checkpoint in `files` is BGE-VL: by name, or by its `config.json`
/// naming BGE-VL's modelling code (`modeling_MMRet_CLIP`) in `auto_map`.
fn is_bge_vl(files: &ModelFiles) -> bool {
    is_bge_vl_name(&files.name)
        || crate::read_json::<serde_json::Value>(&files.config)
            .ok()
            .and_then(|v| v.get("auto_map").map(|m| m.to_string()))
            .is_some_and(|m| m.contains("MMRet"))
}
