//! Vision-language embedders (CLIP, SigLIP): text and images into one space.
//!
//! Loading reads `config.json` (`model_type` clip or siglip), `tokenizer.json` (with the
//! model's truncation and padding applied as its transformers processor does) and
//! `preprocessor_config.json` (see [`crate::image`]; defaults per family when absent).
//! Vectors are L2-normalised; the `*_features` methods return them unnormalised, as
//! transformers' `get_text_features` / `get_image_features` do.
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;
use tokenizers::{PaddingDirection, PaddingParams, PaddingStrategy, Tokenizer};

use crate::families::truncate::truncate_right;
use crate::files::ModelFiles;
use crate::image::{ImageProcessor, PreprocessError};
use crate::{Error, Result};
use sift_nn::layers::ops::{self, l2_normalize};
use sift_nn::models::clip::{Clip, ClipConfig};
use sift_nn::models::siglip::{Siglip, SiglipConfig};

/// Model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisionArch {
    /// OpenAI CLIP and compatible (`model_type` "clip").
    Clip,
    /// SigLIP and SigLIP 2 fixed-resolution (`model_type` "siglip").
    Siglip,
}

impl VisionArch {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            VisionArch::Clip => "clip",
            VisionArch::Siglip => "siglip",
        }
    }
}

/// Settings of a [`VisionEmbedder`].
#[derive(Debug, Clone)]
pub struct VisionOptions {
    /// Texts or images per forward pass.
    pub batch_size: usize,
    /// Weights and activations dtype (f32 on CPU).
    pub dtype: DType,
    /// SigLIP text: pass the padding mask to attention. Off by default, as SigLIP was
    /// trained and published (big_vision; transformers 4): padding is attended and the last
    /// (padding) position is pooled. transformers 5's tokenizers return a mask, which
    /// changes the vectors; turn this on to match a pipeline that passes it.
    pub siglip_text_mask: bool,
}

impl Default for VisionOptions {
    fn default() -> Self {
        VisionOptions {
            batch_size: 32,
            dtype: DType::F32,
            siglip_text_mask: false,
        }
    }
}

enum Towers {
    Clip(Clip),
    Siglip(Siglip),
}

/// A text/image embedder of the CLIP family.
pub struct VisionEmbedder {
    name: String,
    arch: VisionArch,
    towers: Towers,
    tokenizer: Tokenizer,
    /// SiglipTokenizer's canonicalisation ([`siglip_canonicalize_with`]); `Some(lowercase)`
    canonicalize: Option<bool>,
    processor: ImageProcessor,
    dim: usize,
    max_text_len: usize,
    device: Device,
    options: VisionOptions,
    /// [`ModelFiles::content_hash`].
    content: String,
}

#[derive(Deserialize)]
struct Arch {
    model_type: Option<String>,
    projection_dim: Option<usize>,
}

#[derive(Deserialize, Default)]
struct TokenizerConfig {
    tokenizer_class: Option<String>,
    do_lower_case: Option<bool>,
    pad_token: Option<serde_json::Value>,
}

use crate::files::read_json;

/// Whether `config.json` describes a model this module loads.
pub fn is_vision_model(config: &Path) -> bool {
    matches!(
        crate::Family::of(config),
        crate::Family::Clip | crate::Family::Siglip
    )
}

impl VisionEmbedder {
    super::identity_getters!();

    /// Loads a model (see [`ModelFiles::resolve`]) onto `device`.
    pub fn load(files: &ModelFiles, device: &Device, options: VisionOptions) -> Result<Self> {
        let arch: Arch = read_json(&files.config)?;
        let unsupported = |message: String| Error::Unsupported {
            path: files.config.clone(),
            message,
        };
        let kind = match arch.model_type.as_deref() {
            Some("clip") => VisionArch::Clip,
            Some("siglip") => VisionArch::Siglip,
            other => {
                return Err(unsupported(format!(
                    "model_type {other:?} (vision models supported: clip, siglip)"
                )));
            }
        };
        let vb = files.var_builder(options.dtype, device)?;
        let bad_weights = |e: candle_core::Error| {
            unsupported(format!("weights do not match a {} model: {e}", kind.name()))
        };
        let tok_config: TokenizerConfig = match &files.tokenizer_config {
            Some(p) => read_json(p)?,
            None => TokenizerConfig::default(),
        };
        let mut tokenizer = files.load_tokenizer()?;
        let (towers, dim, max_text_len, image_size, pad) = match kind {
            VisionArch::Clip => {
                let c: ClipConfig = read_json(&files.config)?;
                let m = Clip::new(vb, &c).map_err(bad_weights)?;
                let size = m.vision.image_size();
                let max = c.text_config.max_position_embeddings;
                let dim = arch.projection_dim.unwrap_or(c.projection_dim);
                (Towers::Clip(m), dim, max, size, None)
            }
            VisionArch::Siglip => {
                let c: SiglipConfig = read_json(&files.config)?;
                let m = Siglip::new(vb, &c).map_err(bad_weights)?;
                let size = m.vision.image_size();
                let max = c.text_config.max_position_embeddings;
                let dim = m.text.dim();
                let pad_id = match tok_config.pad_token.as_ref().and_then(token_content) {
                    Some(t) => tokenizer.token_to_id(&t),
                    None => None,
                }
                .or(c.text_config.pad_token_id)
                .ok_or_else(|| unsupported("no padding token".into()))?;
                (Towers::Siglip(m), dim, max, size, Some(pad_id))
            }
        };
        truncate_right(&mut tokenizer, max_text_len)?;
        match pad {
            // SigLIP: every text padded to the full length, as the processor is called
            // (padding="max_length"), because the last position is pooled
            Some(pad_id) => {
                let pad_token = tokenizer.id_to_token(pad_id).unwrap_or_default();
                tokenizer.with_padding(Some(PaddingParams {
                    strategy: PaddingStrategy::Fixed(max_text_len),
                    direction: PaddingDirection::Right,
                    pad_to_multiple_of: None,
                    pad_id,
                    pad_type_id: 0,
                    pad_token,
                }));
            }
            None => {
                tokenizer.with_padding(None);
            }
        }
        let processor = match &files.preprocessor {
            Some(p) => {
                let bytes = std::fs::read(p).map_err(|e| Error::file(p, e))?;
                let text = std::str::from_utf8(crate::files::without_bom(&bytes))
                    .map_err(|e| Error::file(p, format!("not UTF-8: {e}")))?;
                ImageProcessor::from_config_json(text).map_err(|e| Error::file(p, e))?
            }
            None => match kind {
                VisionArch::Clip => ImageProcessor::clip(image_size as u32),
                VisionArch::Siglip => ImageProcessor::siglip(image_size as u32),
            },
        };
        let (h, w) = processor.output_size();
        if (h as usize, w as usize) != (image_size, image_size) {
            return Err(unsupported(format!(
                "the image processor makes {h}x{w} inputs, the model takes {image_size}x{image_size}"
            )));
        }
        // SiglipTokenizer canonicalises whatever do_lower_case says (it only gates lower-casing)
        let canonicalize = (tok_config.tokenizer_class.as_deref() == Some("SiglipTokenizer"))
            .then(|| tok_config.do_lower_case.unwrap_or(true));
        Ok(VisionEmbedder {
            name: files.name.clone(),
            arch: kind,
            towers,
            tokenizer,
            canonicalize,
            processor,
            dim,
            max_text_len,
            device: device.clone(),
            options,
            content: files.content_hash()?,
        })
    }

    /// Family.
    pub fn arch(&self) -> VisionArch {
        self.arch
    }

    /// Longest text, in tokens.
    pub fn max_text_len(&self) -> usize {
        self.max_text_len
    }

    /// The image preprocessing in use.
    pub fn processor(&self) -> &ImageProcessor {
        &self.processor
    }

    /// Settings.
    pub fn options(&self) -> &VisionOptions {
        &self.options
    }

    /// Token ids and attention masks as the model's processor makes them (CLIP: truncated,
    /// unpadded; SigLIP: truncated and padded to the full length). Long texts are cut
    /// before tokenising, with identical ids ([`super::truncate`]).
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<(Vec<u32>, usize)>> {
        self.tokenize_with(texts, true)
    }

    /// Whether `text` fits the text tower whole: its tokens, special ones included, are at
    /// most [`VisionEmbedder::max_text_len`] (a processor without truncation would feed
    /// longer ones to the model, which refuses them).
    pub fn fits(&self, text: &str) -> Result<bool> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(enc.get_overflowing().is_empty() && enc.get_ids().len() <= self.max_text_len)
    }

    /// [`VisionEmbedder::tokenize`] tokenising every text whole before truncating (what
    /// transformers' processors do; slower on long texts, same ids).
    pub fn tokenize_whole(&self, texts: &[&str]) -> Result<Vec<(Vec<u32>, usize)>> {
        self.tokenize_with(texts, false)
    }

    fn tokenize_with(&self, texts: &[&str], early: bool) -> Result<Vec<(Vec<u32>, usize)>> {
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| match self.canonicalize {
                Some(lowercase) => siglip_canonicalize_with(t, lowercase),
                None => t.to_string(),
            })
            .collect();
        let enc = if !early {
            self.tokenizer
                .encode_batch(inputs, true)
                .map_err(|e| Error::Tokenizer(e.to_string()))?
        } else {
            super::truncate::encode_truncated(&self.tokenizer, inputs, self.max_text_len)?
        };
        Ok(enc
            .into_iter()
            .map(|e| {
                let real = e.get_attention_mask().iter().filter(|&&m| m == 1).count();
                (e.get_ids().to_vec(), real)
            })
            .collect())
    }

    /// Unnormalised text features of tokenised inputs, `(n, dim)`.
    pub fn text_features(&self, inputs: &[(Vec<u32>, usize)]) -> Result<Tensor> {
        let seqs: Vec<&[u32]> = inputs
            .iter()
            .map(|(ids, _)| if ids.is_empty() { &[0u32][..] } else { ids })
            .collect();
        Ok(match &self.towers {
            Towers::Clip(m) => m.text.forward(&seqs)?,
            Towers::Siglip(m) => {
                let keys: Vec<usize> = inputs
                    .iter()
                    .map(|(ids, real)| {
                        if self.options.siglip_text_mask {
                            *real
                        } else {
                            ids.len()
                        }
                    })
                    .collect();
                m.text.forward(&seqs, &keys)?
            }
        })
    }

    /// Unit text vectors, one per text, in order.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_tokenized(&self.tokenize(texts)?)
    }

    /// Unit text vectors of tokenised texts ([`VisionEmbedder::tokenize`]), in order.
    pub fn embed_tokenized(&self, inputs: &[(Vec<u32>, usize)]) -> Result<Vec<Vec<f32>>> {
        self.text_rows(inputs, true)
    }

    /// Unnormalised text features of tokenised texts, one row per text, in order.
    pub fn text_feature_rows(&self, inputs: &[(Vec<u32>, usize)]) -> Result<Vec<Vec<f32>>> {
        self.text_rows(inputs, false)
    }

    fn text_rows(&self, inputs: &[(Vec<u32>, usize)], unit: bool) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].0.len()));
        let mut out = vec![Vec::new(); inputs.len()];
        for chunk in order.chunks(self.options.batch_size.max(1)) {
            let batch: Vec<(Vec<u32>, usize)> = chunk.iter().map(|&i| inputs[i].clone()).collect();
            let f = self.text_features(&batch)?;
            let f = if unit {
                l2_normalize(&f)?
            } else {
                f.to_dtype(DType::F32)?
            };
            for (&i, v) in chunk.iter().zip(f.to_vec2::<f32>()?) {
                out[i] = v;
            }
        }
        crate::error::finite(self.name(), out)
    }

    /// Unnormalised image features of preprocessed pixels `(n, 3, size, size)`.
    pub fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        let pixels = pixels
            .to_device(&self.device)?
            .to_dtype(ops::activation_dtype(self.options.dtype, &self.device))?;
        Ok(match &self.towers {
            Towers::Clip(m) => m.vision.forward(&pixels)?,
            Towers::Siglip(m) => m.vision.forward(&pixels)?,
        })
    }

    /// Decodes and preprocesses encoded images in parallel: the model input of each, or why
    /// it cannot be decoded.
    pub fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Vec<f32>, PreprocessError>> {
        self.processor.prepare_all(images)
    }

    /// Unit vectors of prepared inputs (see [`VisionEmbedder::prepare`]), in order.
    pub fn embed_prepared(&self, inputs: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
        self.image_rows(inputs, true)
    }

    /// Unnormalised image features of prepared inputs, one row per image, in order.
    pub fn image_feature_rows(&self, inputs: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
        self.image_rows(inputs, false)
    }

    fn image_rows(&self, inputs: &[Vec<f32>], unit: bool) -> Result<Vec<Vec<f32>>> {
        let (h, w) = self.processor.output_size();
        // f32 pixels: image_features casts them to the model's dtype
        let (run, size) = (
            (self.options.batch_size, DType::F32),
            (h as usize, w as usize),
        );
        super::pixel_rows(self.name(), inputs, run, size, &self.device, |pixels| {
            let f = self.image_features(&pixels)?;
            Ok(if unit {
                l2_normalize(&f)?
            } else {
                f.to_dtype(DType::F32)?
            })
        })
    }

    /// Unit vectors of encoded images; undecodable ones are errors (use
    /// [`VisionEmbedder::prepare`] to skip them instead).
    pub fn embed_images(&self, images: &[&[u8]]) -> Result<Vec<Vec<f32>>> {
        let prepared = self
            .prepare(images)
            .into_iter()
            .collect::<std::result::Result<Vec<_>, _>>()?;
        self.embed_prepared(&prepared)
    }

    /// Everything that decides the vectors besides the input: the model's files, the
    /// tower, settings, image processor, dtype and kind of device (for caches).
    pub fn fingerprint(&self, tower: &str) -> String {
        format!(
            "{}|{}|{tower}|{:?}|len={}|mask={}|{:?}|{}|{}",
            self.name,
            self.arch.name(),
            self.options.dtype,
            self.max_text_len,
            self.options.siglip_text_mask,
            self.processor,
            crate::files::device_class(&self.device),
            self.content
        )
    }
}

/// The special tokens `SiglipTokenizer` finds in the raw text before it canonicalises (eos =
/// pad `</s>`, unk `<unk>`: every SigLIP v1 tokenizer_config.json). They stay in the text, so
/// `tokenizer.json` (models/siglip_tokenizer_json.py) matches them as added tokens.
const SIGLIP_SPECIAL_TOKENS: [&str; 2] = ["</s>", "<unk>"];

/// What transformers' `SiglipTokenizer.tokenize` (SigLIP v1, `do_lower_case`) does to a text
/// before SentencePiece, so that a converted `tokenizer.json` then gives its ids: `▁` becomes a
/// space; the text is split on `</s>`/`<unk>` (kept as they are); each piece between them goes
/// through `canonicalize_text`: lower case, ASCII punctuation (Python's `string.punctuation`)
/// removed, runs of whitespace (Python's `\s`: Unicode White_Space plus U+001C..U+001F) made
/// one space, stripped; then SentencePiece's composition (`compose_like_sentencepiece`).
/// Python reference:
/// `siglip_canonicalize` in models/siglip_tokenizer_json.py.
pub fn siglip_canonicalize(text: &str) -> String {
    siglip_canonicalize_with(text, true)
}

/// [`siglip_canonicalize`], lower-casing only when `lowercase` (`do_lower_case`).
pub fn siglip_canonicalize_with(text: &str, lowercase: bool) -> String {
    let text = text.replace('\u{2581}', " ");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    loop {
        let special = SIGLIP_SPECIAL_TOKENS
            .iter()
            .filter_map(|s| rest.find(s).map(|at| (at, *s)))
            .min_by_key(|&(at, _)| at);
        let piece = special.map_or(rest, |(at, _)| &rest[..at]);
        out.push_str(&compose_like_sentencepiece(&canonicalize_piece(
            piece, lowercase,
        )));
        let Some((at, token)) = special else { break };
        out.push_str(token);
        rest = &rest[at + token.len()..];
    }
    out
}

/// `canonicalize_text` of one piece.
fn canonicalize_piece(piece: &str, lowercase: bool) -> String {
    let text = if lowercase {
        piece.to_lowercase()
    } else {
        piece.to_string()
    };
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars().filter(|c| !c.is_ascii_punctuation()) {
        // Python's str.isspace / re `\s`: Rust's White_Space plus the four separators
        if c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c) {
            space = !out.is_empty();
        } else {
            if space {
                out.push(' ');
                space = false;
            }
            out.push(c);
        }
    }
    out
}

/// A combining mark or a Hangul medial/final jamo: part of the cluster before it.
fn joins(c: char) -> bool {
    unicode_normalization_alignments::char::is_combining_mark(c)
        || ('\u{1160}'..='\u{11ff}').contains(&c)
}

fn normalized(text: &str, nfc: bool) -> String {
    let mut n = tokenizers::NormalizedString::from(text);
    if nfc {
        n.nfc();
    } else {
        n.nfd();
    }
    n.get().to_string()
}

/// Composes canonical decompositions the way SentencePiece's nmt_nfkc charsmap does: the
/// longest exact canonical decomposition of one character at the start of each cluster (NFD
/// "ế" = e U+0302 U+0301, NFD Hangul jamo) becomes that character; other marks stay (a
/// precomposed "ê" + U+0301 stays two characters). tokenizers' `Precompiled` normaliser
/// instead replaces a whole short grapheme by its shortest matching prefix and drops the rest
/// (NFD "ế" -> "ê"; huggingface/tokenizers#2116, #2334); after this it only sees composed
/// characters and lone marks, which it maps like SentencePiece. Not covered: a compatibility
/// character followed by a mark ("ﬁ" U+0301: SentencePiece "fi" U+0301, tokenizers "fi").
fn compose_like_sentencepiece(text: &str) -> String {
    if !text.chars().any(joins) {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let mut j = i + 1;
        while j < chars.len() && joins(chars[j]) {
            j += 1;
        }
        let (mut k, mut composed) = (i + 1, chars[i]);
        for end in i + 2..=j {
            let seq: String = chars[i..end].iter().collect();
            let nfc = normalized(&seq, true);
            let mut one = nfc.chars();
            if let (Some(c), None) = (one.next(), one.next())
                && normalized(&nfc, false) == seq
            {
                (k, composed) = (end, c);
            }
        }
        out.push(composed);
        out.extend(&chars[k..j]);
        i = j;
    }
    out
}

/// `"</s>"` or `{"content": "</s>", ...}`.
fn token_content(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}
