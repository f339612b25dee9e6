//! GME (Alibaba-NLP `gme-Qwen2-VL-2B-Instruct` / `-7B-Instruct`): one Qwen2-VL model embeds
//! text, images, and text with any number of images into one space.
//!
//! Each input becomes a chat prompt, exactly as GME's `gme_inference.py` writes it:
//!
//! ```text
//! <|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n{images}{text}<|im_end|>\n<|im_start|>assistant\n<|endoftext|>
//! ```
//!
//! where each image is `<|vision_start|><|image_pad|><|vision_end|>` with `<|image_pad|>`
//! repeated once per merged image token, and `instruction` is the query instruction for
//! queries (when set) and "You are a helpful assistant." otherwise. The prompt is cut at
//! `max_length` tokens; the vector is the final hidden state of its last token, L2-normalised.
//!
//! Positions: GME's code runs the language model on input embeddings without position ids,
//! so transformers (< 4.52, which GME requires) numbers the tokens 0, 1, 2, ... on all three
//! M-RoPE axes ([`GmePositions::Sequential`], the default). [`GmePositions::Mrope`] gives the
//! positions Qwen2-VL's `get_rope_index` assigns instead (image tokens by row and column).
//!
//! Images go through GME's `fetch_image` (Pillow's `convert("RGB")`, which drops alpha, then
//! a bicubic resize to `smart_resize(h, w, 28, 4*28*28, 16384*28*28)` of `qwen_vl_utils`),
//! then through the Qwen2-VL image processor with GME's pixel bounds
//! (`min_image_tokens`/`max_image_tokens` x 28 x 28, 256 and 1280 by default): its own
//! `smart_resize`, bicubic resize, rescale, CLIP mean/std, and the flattening into
//! `(t h w, 3 x 2 x 14 x 14)` patches in 2x2 merge-block order.
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use image::RgbImage;
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::files::ModelFiles;
use crate::image::{
    Alpha, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, PreprocessError, Resample, decode_rgb_with,
    resize_rgb8,
};
use crate::{Error, Result};
use sift_nn::layers::ops::{self, Segment, l2_normalize};
use sift_nn::models::qwen2vl::{
    Position, Qwen2VlConfig, TextModel, VisionTower, mrope_positions, place_image_tokens,
};

/// GME's instruction for candidates, and for queries without one of their own.
pub const DEFAULT_INSTRUCTION: &str = "You are a helpful assistant.";

/// How tokens are numbered for the rotary embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GmePositions {
    /// 0, 1, 2, ... on all three axes: what GME's published inference code computes.
    #[default]
    Sequential,
    /// Qwen2-VL's multimodal positions (`get_rope_index`): image tokens by frame, row and
    /// column, text after an image continuing from its largest position.
    Mrope,
}

/// Settings of a [`GmeEmbedder`].
#[derive(Debug, Clone)]
pub struct GmeOptions {
    /// Inputs per forward pass.
    pub batch_size: usize,
    /// Weights and activations dtype (f32 on CPU).
    pub dtype: DType,
    /// Token positions.
    pub positions: GmePositions,
    /// Instruction (system prompt) for queries; GME's default when `None`.
    pub query_instruction: Option<String>,
    /// The prompt's length limit in tokens; `config.json`'s `max_length` (else 1,800, the
    /// default of GME's code) when `None`.
    pub max_length: Option<usize>,
}

impl Default for GmeOptions {
    fn default() -> Self {
        GmeOptions {
            batch_size: 8,
            dtype: DType::F32,
            positions: GmePositions::Sequential,
            query_instruction: None,
            max_length: None,
        }
    }
}

/// A preprocessed image: its patch grid `[t, h, w]` and flattened patches
/// `(t h w, patch_values)`, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct GmeImage {
    /// Frames, rows and columns of patches.
    pub grid: [usize; 3],
    /// Patch values.
    pub patches: Vec<f32>,
}

impl GmeImage {
    /// Patches.
    pub fn len(&self) -> usize {
        self.grid.iter().product()
    }

    /// Whether there are no patches.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One input: an instruction, images (in order, before the text) and text.
#[derive(Debug, Clone, Copy)]
pub struct GmeInput<'a> {
    /// System prompt.
    pub instruction: &'a str,
    /// Images.
    pub images: &'a [&'a GmeImage],
    /// Text, if any.
    pub text: Option<&'a str>,
}

/// Special tokens of the prompt that user text must not inject.
const VISION_TOKENS: [&str; 5] = [
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
];

/// `round(x)` as Python rounds (half to even).
fn py_round(x: f64) -> f64 {
    x.round_ties_even()
}

/// `qwen_vl_utils.smart_resize` as GME's `fetch_image` calls it: `(height, width)`, both
/// multiples of `factor`, the area within `[min_pixels, max_pixels]`, aspect ratio at most
/// 200 (clamped).
pub fn smart_resize_fetch(
    height: u32,
    width: u32,
    factor: u32,
    min_pixels: u64,
    max_pixels: u64,
) -> (u32, u32) {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let rounded = ((py_round(h / f) * f).max(f), (py_round(w / f) * f).max(f));
    let (mut hb, mut wb) = fit_pixels((h, w), f, rounded, (min_pixels, max_pixels));
    if hb.max(wb) / hb.min(wb) > 200.0 {
        if hb > wb {
            hb = wb * 200.0;
        } else {
            wb = hb * 200.0;
        }
    }
    (hb as u32, wb as u32)
}

/// Both `smart_resize`s' scaling step: the sides `rounded` (multiples of `f`) of an
/// `h` x `w` image, rescaled (keeping the aspect ratio, multiples of `f`) when their product
/// is over `max_pixels` (floored, at least `f`) or under `min_pixels` (ceiled).
fn fit_pixels(
    (h, w): (f64, f64),
    f: f64,
    (hb, wb): (f64, f64),
    (min_pixels, max_pixels): (u64, u64),
) -> (f64, f64) {
    if hb * wb > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        (
            ((h / beta / f).floor() * f).max(f),
            ((w / beta / f).floor() * f).max(f),
        )
    } else if hb * wb < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        ((h * beta / f).ceil() * f, (w * beta / f).ceil() * f)
    } else {
        (hb, wb)
    }
}

/// transformers' `Qwen2VLImageProcessor` `smart_resize` (5.24): like
/// [`smart_resize_fetch`] but an aspect ratio over 200 is an error, and only the
/// down-scaling branch is floored at `factor`.
pub fn smart_resize_processor(
    height: u32,
    width: u32,
    factor: u32,
    min_pixels: u64,
    max_pixels: u64,
) -> std::result::Result<(u32, u32), String> {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > 200.0 {
        return Err(format!(
            "aspect ratio of {width}x{height} is over 200 (Qwen2-VL's limit)"
        ));
    }
    let rounded = (py_round(h / f) * f, py_round(w / f) * f);
    let (hb, wb) = fit_pixels((h, w), f, rounded, (min_pixels, max_pixels));
    if hb < f || wb < f {
        return Err(format!("{width}x{height} resizes to nothing"));
    }
    Ok((hb as u32, wb as u32))
}

/// Pillow's `Image.resize` to `(width, height)`, bicubic; the same size is a copy.
fn resize_to(img: RgbImage, height: u32, width: u32) -> RgbImage {
    if (img.height(), img.width()) == (height, width) {
        img
    } else {
        resize_rgb8(&img, width, height, Resample::Bicubic)
    }
}

/// The image pipeline of GME: sizes and value table.
#[derive(Debug, Clone)]
pub struct GmeProcessor {
    /// Patch side.
    pub patch: usize,
    /// Merge size.
    pub merge: usize,
    /// Frames per patch.
    pub temporal: usize,
    /// Smallest image area in pixels (`min_image_tokens` x 28 x 28).
    pub min_pixels: u64,
    /// Largest image area in pixels (`max_image_tokens` x 28 x 28).
    pub max_pixels: u64,
    lut: [[f32; 256]; 3],
}

impl GmeProcessor {
    /// The processor for patch size `patch`, merge size `merge`, `temporal` frames per patch,
    /// with images of `min_tokens..=max_tokens` merged tokens.
    pub fn new(
        patch: usize,
        merge: usize,
        temporal: usize,
        min_tokens: u64,
        max_tokens: u64,
    ) -> Self {
        let unit = (patch * merge * patch * merge) as u64;
        let mut lut = [[0f32; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, out) in table.iter_mut().enumerate() {
                // transformers: uint8 * (1/255) in float64, cast to float32, then float32
                // (x - mean) / std
                let x = (v as f64 * (1.0 / 255.0)) as f32;
                *out = (x - OPENAI_CLIP_MEAN[c]) / OPENAI_CLIP_STD[c];
            }
        }
        GmeProcessor {
            patch,
            merge,
            temporal,
            min_pixels: min_tokens * unit,
            max_pixels: max_tokens * unit,
            lut,
        }
    }

    fn factor(&self) -> u32 {
        (self.patch * self.merge) as u32
    }

    /// The 8-bit image the processor flattens: GME's `fetch_image` resize, then the
    /// processor's, with at most `max_pixels` pixels (the processor's bound when `None`).
    pub fn resize(
        &self,
        img: RgbImage,
        max_pixels: Option<u64>,
    ) -> std::result::Result<RgbImage, PreprocessError> {
        let (h, w) =
            smart_resize_fetch(img.height(), img.width(), 28, 4 * 28 * 28, 16384 * 28 * 28);
        let img = resize_to(img, h, w);
        let max = max_pixels.unwrap_or(self.max_pixels).min(self.max_pixels);
        let (h, w) = smart_resize_processor(h, w, self.factor(), self.min_pixels.min(max), max)
            .map_err(PreprocessError::Size)?;
        Ok(resize_to(img, h, w))
    }

    /// Flattens a resized image into patches (see the module docs for the order).
    pub fn patchify(&self, img: &RgbImage) -> GmeImage {
        let (p, m, t) = (self.patch, self.merge, self.temporal);
        let (gh, gw) = (img.height() as usize / p, img.width() as usize / p);
        let width = img.width() as usize;
        let raw = img.as_raw();
        let per = 3 * t * p * p;
        let mut out = Vec::with_capacity(gh * gw * per);
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let (y0, x0) = ((bh * m + mh) * p, (bw * m + mw) * p);
                        for c in 0..3 {
                            let lut = &self.lut[c];
                            for _ in 0..t {
                                for y in y0..y0 + p {
                                    let row = &raw[(y * width + x0) * 3..(y * width + x0 + p) * 3];
                                    out.extend(row.chunks_exact(3).map(|px| lut[px[c] as usize]));
                                }
                            }
                        }
                    }
                }
            }
        }
        GmeImage {
            grid: [1, gh, gw],
            patches: out,
        }
    }

    /// Decodes and preprocesses an encoded image, with at most `max_tokens` merged tokens
    /// (the processor's bound when `None`).
    pub fn prepare(
        &self,
        bytes: &[u8],
        max_tokens: Option<u64>,
    ) -> std::result::Result<GmeImage, PreprocessError> {
        self.prepare_rgb(decode_rgb_with(bytes, Alpha::Drop)?, max_tokens)
    }

    /// Decodes and preprocesses an encoded image as transformers' `Qwen2VLImageProcessor`
    /// alone does it (PIL backend: transparency composited onto white, as transformers 5's
    /// `convert_rgb` does, then one bicubic `smart_resize` within
    /// the processor's pixel bounds), without GME's own `fetch_image` resize first: what a
    /// Qwen2-VL-Instruct prompt's images go through.
    pub fn prepare_processor_only(
        &self,
        bytes: &[u8],
    ) -> std::result::Result<GmeImage, PreprocessError> {
        let img = decode_rgb_with(bytes, Alpha::OverWhite)?;
        let (h, w) = smart_resize_processor(
            img.height(),
            img.width(),
            self.factor(),
            self.min_pixels,
            self.max_pixels,
        )
        .map_err(PreprocessError::Size)?;
        Ok(self.patchify(&resize_to(img, h, w)))
    }

    /// Preprocesses a decoded image, with at most `max_tokens` merged tokens (the
    /// processor's bound when `None`).
    pub fn prepare_rgb(
        &self,
        img: RgbImage,
        max_tokens: Option<u64>,
    ) -> std::result::Result<GmeImage, PreprocessError> {
        let unit = (self.factor() as u64).pow(2);
        let img = self.resize(img, max_tokens.map(|t| t.max(1) * unit))?;
        Ok(self.patchify(&img))
    }
}

/// The GME embedder.
pub struct GmeEmbedder {
    name: String,
    vision: VisionTower,
    text: TextModel,
    tokenizer: Tokenizer,
    processor: GmeProcessor,
    image_token: u32,
    patch_values: usize,
    merge: usize,
    dim: usize,
    max_length: usize,
    device: Device,
    options: GmeOptions,
    /// [`ModelFiles::content_hash`].
    content: String,
}

use crate::files::read_json;

/// The length limit GME's sentence-transformers module (`custom_st.py`, which MM-BRIGHT's
/// released code runs) truncates its prompts at: `self.max_seq_length` (custom_st.py:118),
/// which sentence-transformers takes from the checkpoint's `sentence_bert_config.json`, else
/// as `min(config.max_position_embeddings, tokenizer.model_max_length)` (a tokenizer
/// without `model_max_length` has no limit of its own); `None` when neither file says
/// (no truncation at all). Not `custom_st.py`'s own `max_length` of 1,800, which the
/// module keeps but never passes to its processor.
pub fn sentence_transformers_max_length(files: &ModelFiles) -> Option<usize> {
    let dir = files.config.parent()?;
    let number = |path: &Path, key: &str| -> Option<u64> {
        read_json::<Value>(path).ok()?.get(key)?.as_u64()
    };
    if let Some(n) = number(&dir.join("sentence_bert_config.json"), "max_seq_length") {
        return Some(n as usize);
    }
    let config = read_json::<Value>(&files.config).ok()?;
    let positions = config
        .get("max_position_embeddings")
        .or_else(|| config.get("text_config")?.get("max_position_embeddings"))?
        .as_u64()?;
    let tokenizer = number(&dir.join("tokenizer_config.json"), "model_max_length");
    Some(tokenizer.map_or(positions, |t| t.min(positions)) as usize)
}

/// Whether `config.json` describes a Qwen2-VL model (GME).
pub fn is_gme_model(config: &Path) -> bool {
    crate::Family::of(config) == crate::Family::Gme
}

impl GmeEmbedder {
    super::identity_getters!();

    /// Loads a GME (any Qwen2-VL) checkpoint onto `device`.
    pub fn load(files: &ModelFiles, device: &Device, options: GmeOptions) -> Result<Self> {
        let value = read_json::<Value>(&files.config)?;
        let unsupported = |message: String| Error::Unsupported {
            path: files.config.clone(),
            message,
        };
        let cfg = Qwen2VlConfig::from_json(&value).map_err(unsupported)?;
        let gme_key = |k: &str, d: u64| value.get(k).and_then(Value::as_u64).unwrap_or(d);
        let vb = files.var_builder(options.dtype, device)?;
        let bad = |e: candle_core::Error| {
            unsupported(format!("weights do not match a Qwen2-VL model: {e}"))
        };
        let vision = VisionTower::new(&vb, &cfg.vision).map_err(bad)?;
        let text = TextModel::new(&vb, &cfg.text).map_err(bad)?;
        let tokenizer = files.load_tokenizer()?;
        for t in [
            "<|im_start|>",
            "<|im_end|>",
            "<|endoftext|>",
            "<|vision_start|>",
            "<|vision_end|>",
        ] {
            if tokenizer.token_to_id(t).is_none() {
                return Err(Error::file(
                    &files.tokenizer,
                    format!("no {t} token (not a Qwen2-VL tokenizer)"),
                ));
            }
        }
        if tokenizer.token_to_id("<|image_pad|>") != Some(cfg.image_token_id) {
            return Err(Error::file(
                &files.tokenizer,
                format!(
                    "<|image_pad|> is not token {} (config image_token_id)",
                    cfg.image_token_id
                ),
            ));
        }
        let v = &cfg.vision;
        let processor = GmeProcessor::new(
            v.patch_size,
            v.spatial_merge_size,
            v.temporal_patch_size,
            gme_key("min_image_tokens", 256),
            gme_key("max_image_tokens", 1280),
        );
        let max_length = options
            .max_length
            .unwrap_or(gme_key("max_length", 1800) as usize);
        // the prompt around an empty text must fit, or every input is cut inside GME's template
        let template = tokenizer
            .encode(
                Self::prompt(&GmeInput {
                    instruction: DEFAULT_INSTRUCTION,
                    images: &[],
                    text: Some(""),
                }),
                true,
            )
            .map_err(|e| Error::file(&files.tokenizer, e))?
            .get_ids()
            .len();
        if max_length <= template {
            return Err(unsupported(format!(
                "max_length {max_length} leaves no room for text: GME's prompt template alone is {template} tokens"
            )));
        }
        Ok(GmeEmbedder {
            name: files.name.clone(),
            vision,
            text,
            tokenizer,
            processor,
            image_token: cfg.image_token_id,
            patch_values: v.patch_values(),
            merge: v.spatial_merge_size,
            dim: cfg.text.hidden_size,
            max_length,
            device: device.clone(),
            options,
            content: files.content_hash()?,
        })
    }

    /// Maximum prompt length in tokens.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The image pipeline.
    pub fn processor(&self) -> &GmeProcessor {
        &self.processor
    }

    /// Settings.
    pub fn options(&self) -> &GmeOptions {
        &self.options
    }

    /// Values per flattened patch.
    pub fn patch_values(&self) -> usize {
        self.patch_values
    }

    /// The instruction of queries.
    pub fn query_instruction(&self) -> &str {
        self.options
            .query_instruction
            .as_deref()
            .unwrap_or(DEFAULT_INSTRUCTION)
    }

    /// Merged tokens an image becomes.
    fn image_tokens(&self, img: &GmeImage) -> usize {
        img.len() / (self.merge * self.merge)
    }

    /// The prompt of an input before the image tokens are repeated (as GME writes it).
    pub fn prompt(input: &GmeInput<'_>) -> String {
        let mut content = "<|vision_start|><|image_pad|><|vision_end|>".repeat(input.images.len());
        if let Some(t) = input.text {
            let mut t = t.to_string();
            for s in VISION_TOKENS {
                t = t.replace(s, "");
            }
            content.push_str(&t);
        }
        format!(
            "<|im_start|>system\n{}<|im_end|>\n<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n<|endoftext|>",
            input.instruction
        )
    }

    /// Token ids of an input: the prompt tokenised, each image's `<|image_pad|>` repeated
    /// once per merged token, cut at `max_length`.
    pub fn tokenize(&self, input: &GmeInput<'_>) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(Self::prompt(input), true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut ids = Vec::with_capacity(enc.get_ids().len());
        let mut images = input.images.iter();
        for &id in enc.get_ids() {
            if id == self.image_token {
                let img = images.next().ok_or_else(|| {
                    Error::Tokenizer("more image placeholders than images".into())
                })?;
                ids.extend(std::iter::repeat_n(id, self.image_tokens(img)));
            } else {
                ids.push(id);
            }
        }
        let needed: usize = input.images.iter().map(|i| self.image_tokens(i)).sum();
        ids.truncate(self.max_length);
        let kept = ids.iter().filter(|&&i| i == self.image_token).count();
        if kept != needed {
            return Err(Error::Image(PreprocessError::TooManyTokens {
                needed,
                max_length: self.max_length,
            }));
        }
        Ok(ids)
    }

    /// Token positions of one sequence.
    fn positions(&self, ids: &[u32], images: &[&GmeImage], out: &mut Vec<Position>) {
        match self.options.positions {
            GmePositions::Sequential => out.extend((0..ids.len() as u32).map(|i| [i, i, i])),
            GmePositions::Mrope => {
                let grids: Vec<[usize; 3]> = images.iter().map(|i| i.grid).collect();
                mrope_positions(ids, self.image_token, &grids, self.merge, out);
            }
        }
    }

    /// Unit vectors of inputs, in order.
    pub fn embed(&self, inputs: &[GmeInput<'_>]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(inputs.len());
        for chunk in inputs.chunks(self.options.batch_size.max(1)) {
            out.extend(self.embed_batch(chunk)?);
        }
        crate::error::finite(self.name(), out)
    }

    fn embed_batch(&self, inputs: &[GmeInput<'_>]) -> Result<Vec<Vec<f32>>> {
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut lens = Vec::with_capacity(inputs.len());
        for input in inputs {
            let seq = self.tokenize(input)?;
            self.positions(&seq, input.images, &mut positions);
            lens.push(seq.len());
            ids.extend(seq);
        }
        let mut x = self.text.embed_tokens(&ids)?;
        let images: Vec<&GmeImage> = inputs
            .iter()
            .flat_map(|i| i.images.iter().copied())
            .collect();
        if !images.is_empty() {
            let grids: Vec<[usize; 3]> = images.iter().map(|i| i.grid).collect();
            let mut flat = Vec::with_capacity(images.iter().map(|i| i.patches.len()).sum());
            for img in &images {
                if img.patches.len() != img.len() * self.patch_values {
                    return Err(Error::Image(PreprocessError::Shape {
                        got: img.patches.len(),
                        expected: img.len() * self.patch_values,
                    }));
                }
                flat.extend_from_slice(&img.patches);
            }
            let n = flat.len() / self.patch_values;
            let patches = Tensor::from_vec(flat, (n, self.patch_values), &self.device)?
                .to_dtype(ops::activation_dtype(self.options.dtype, &self.device))?;
            let embeds = self.vision.forward(&patches, &grids)?;
            // image tokens take the merged image embeddings in order
            x = place_image_tokens(&x, &embeds, &ids, self.image_token)?;
        }
        let segments = Segment::packed(lens.iter().copied());
        let last: Vec<usize> = segments.iter().map(|s| s.start + s.len - 1).collect();
        let h = self.text.forward(x, &positions, &segments, &last, true)?;
        Ok(l2_normalize(&h)?.to_vec2::<f32>()?)
    }

    /// Unit vectors of texts: queries with the query instruction, passages with the default.
    pub fn embed_texts(&self, texts: &[&str], query: bool) -> Result<Vec<Vec<f32>>> {
        let instruction = if query {
            self.query_instruction()
        } else {
            DEFAULT_INSTRUCTION
        };
        self.embed_texts_instructed(texts, instruction)
    }

    /// Unit vectors of texts with `instruction` as their system prompt.
    pub fn embed_texts_instructed(
        &self,
        texts: &[&str],
        instruction: &str,
    ) -> Result<Vec<Vec<f32>>> {
        let inputs: Vec<GmeInput<'_>> = texts
            .iter()
            .map(|t| GmeInput {
                instruction,
                images: &[],
                text: Some(t),
            })
            .collect();
        self.embed(&inputs)
    }

    /// Decodes and preprocesses encoded images in parallel, or says why each cannot be
    /// embedded: it does not decode, or it needs more image tokens than its prompt (GME's
    /// default instruction, no text) has room for within `max_length`.
    pub fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<GmeImage, PreprocessError>> {
        use rayon::prelude::*;
        images
            .par_iter()
            .map(|b| {
                let img = self.processor.prepare(b, None)?;
                self.check_fits(&[&img], DEFAULT_INSTRUCTION)?;
                Ok(img)
            })
            .collect()
    }

    /// Whether `images` survive the cut at `max_length` in one prompt with `instruction`
    /// and no text (GME cuts prompts there; an image cut short cannot be embedded).
    pub(crate) fn check_fits(
        &self,
        images: &[&GmeImage],
        instruction: &str,
    ) -> std::result::Result<(), PreprocessError> {
        match self.tokenize(&GmeInput {
            instruction,
            images,
            text: None,
        }) {
            Ok(_) => Ok(()),
            Err(Error::Image(e)) => Err(e),
            Err(e) => Err(PreprocessError::Size(e.to_string())),
        }
    }

    /// Unit vectors of prepared images alone (candidates: default instruction, no text).
    pub fn embed_images(&self, images: &[GmeImage]) -> Result<Vec<Vec<f32>>> {
        let refs: Vec<[&GmeImage; 1]> = images.iter().map(|i| [i]).collect();
        let inputs: Vec<GmeInput<'_>> = refs
            .iter()
            .map(|r| GmeInput {
                instruction: DEFAULT_INSTRUCTION,
                images: r,
                text: None,
            })
            .collect();
        self.embed(&inputs)
    }

    /// Settings that determine the vectors of passages and corpus images besides the input
    /// (for caches; the query instruction does not enter them).
    pub fn fingerprint(&self, kind: &str) -> String {
        format!(
            "{}|gme|{kind}|{:?}|{:?}|len={}|pixels={}..{}|{}|{}",
            self.name,
            self.options.dtype,
            self.options.positions,
            self.max_length,
            self.processor.min_pixels,
            self.processor.max_pixels,
            crate::files::device_class(&self.device),
            self.content
        )
    }
}
