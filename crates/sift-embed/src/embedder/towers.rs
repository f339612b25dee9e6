//! [`Tower`]: what every family does behind [`Embedder`](super::Embedder), one
//! implementation per family, so that the embedder dispatches once.
use std::any::Any;

use image::RgbImage;

use super::{Family, Input, Prepared, PreparedImage};
use crate::families::decoder::DecoderEmbedder;
use crate::families::gme::{DEFAULT_INSTRUCTION, GmeEmbedder};
use crate::families::jina_clip::JinaClipEmbedder;
use crate::families::nomic_pair::NomicEmbedder;
use crate::families::text::{Role, TextEmbedder};
use crate::families::vision::{VisionArch, VisionEmbedder};
use crate::image::PreprocessError;
use crate::{Error, Result};

/// A model family as the embedder drives it: texts (every family), images (those with an
/// image side, [`Tower::images`]).
pub(crate) trait Tower: Send + Sync + Any {
    /// Model name (hub id or directory name).
    fn name(&self) -> &str;
    /// Embedding dimension.
    fn dim(&self) -> usize;
    /// The family.
    fn family(&self) -> Family;
    /// The content hash of the files the model was loaded from.
    fn content_hash(&self) -> &str;
    /// The family's part of the cache key of `input`.
    fn fingerprint(&self, input: Input) -> String;
    /// The longest text input in tokens, special tokens included.
    fn max_text_tokens(&self) -> usize;
    /// Texts of `role` tokenised with the role's prefix or prompt (`reference`: the
    /// reference code's profile, which embeds Nomic documents without their prefix).
    fn prepare_texts(&self, texts: &[&str], role: Role, reference: bool) -> Result<Prepared>;
    /// Queries tokenised with `instruction` in the model's prompt format; `None` for a model
    /// that takes none.
    fn prepare_instructed(&self, texts: &[&str], instruction: &str) -> Option<Result<Prepared>>;
    /// Unit vectors of texts this family prepared; `None` for texts another prepared.
    fn embed_prepared(&self, texts: &Prepared) -> Option<Result<Vec<Vec<f32>>>>;
    /// The image side, for a model that embeds images.
    fn images(&self) -> Option<&dyn ImageTower> {
        None
    }
    /// The concrete model, for what only one family does (GME's joint inputs, CLIP's raw
    /// features).
    fn as_any(&self) -> &dyn Any;
}

/// The image side of a [`Tower`].
pub(crate) trait ImageTower {
    /// A decoded image prepared as the model prepares images (GME: checked to fit its
    /// prompt alone).
    fn prepare_rgb(&self, img: RgbImage) -> std::result::Result<PreparedImage, PreprocessError>;
    /// A blank image prepared (no prompt check).
    fn prepare_blank(&self, img: RgbImage) -> Result<PreparedImage> {
        Ok(self.prepare_rgb(img)?)
    }
    /// Unit vectors of prepared images.
    fn embed_images(&self, images: &[PreparedImage]) -> Result<Vec<Vec<f32>>>;
    /// Whether the model's own image loading drops transparency (GME's `fetch_image`,
    /// Jina-CLIP's `encode_image`), whatever the profile.
    fn drops_alpha(&self) -> bool {
        false
    }
}

fn capability(model: &str, what: &str) -> Error {
    Error::Capability {
        model: model.to_string(),
        message: format!("cannot {what}"),
    }
}

/// The pixels of images prepared for a model that takes pixels.
pub(crate) fn pixels(model: &str, images: &[PreparedImage]) -> Result<Vec<Vec<f32>>> {
    images
        .iter()
        .map(|i| match i {
            PreparedImage::Pixels(p) => Ok(p.clone()),
            PreparedImage::Patches(_) => Err(capability(model, "embed an image prepared for GME")),
        })
        .collect()
}

/// [`Tower`]'s name, dimension, content hash and `as_any`: the family's own (inherent
/// methods, which a path through `Self` resolves to before the trait's).
macro_rules! identity {
    () => {
        fn name(&self) -> &str {
            Self::name(self)
        }
        fn dim(&self) -> usize {
            Self::dim(self)
        }
        fn content_hash(&self) -> &str {
            Self::content_hash(self)
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    };
}

impl Tower for TextEmbedder {
    identity!();
    fn family(&self) -> Family {
        Family::Text
    }
    fn fingerprint(&self, input: Input) -> String {
        match input {
            Input::Text(role) => TextEmbedder::fingerprint(self, role),
            Input::Image => format!(
                "{}|no images",
                TextEmbedder::fingerprint(self, Role::Passage)
            ),
        }
    }
    fn max_text_tokens(&self) -> usize {
        self.max_seq_len()
    }
    fn prepare_texts(&self, texts: &[&str], role: Role, _: bool) -> Result<Prepared> {
        Ok(Prepared::Text(self.tokenize(texts, role)?))
    }
    fn prepare_instructed(&self, texts: &[&str], instruction: &str) -> Option<Result<Prepared>> {
        let prefix = self.instruction_prefix(instruction)?;
        Some(
            self.tokenize_with_prefix(texts, &prefix)
                .map(Prepared::Text),
        )
    }
    fn embed_prepared(&self, texts: &Prepared) -> Option<Result<Vec<Vec<f32>>>> {
        match texts {
            Prepared::Text(ids) => Some(self.embed_tokens(ids)),
            _ => None,
        }
    }
}

impl Tower for DecoderEmbedder {
    identity!();
    fn family(&self) -> Family {
        Family::Decoder
    }
    fn fingerprint(&self, input: Input) -> String {
        match input {
            Input::Text(role) => DecoderEmbedder::fingerprint(self, role),
            Input::Image => {
                format!(
                    "{}|no images",
                    DecoderEmbedder::fingerprint(self, Role::Passage)
                )
            }
        }
    }
    fn max_text_tokens(&self) -> usize {
        self.max_seq_len()
    }
    fn prepare_texts(&self, texts: &[&str], role: Role, _: bool) -> Result<Prepared> {
        Ok(Prepared::Decoder(
            self.tokenize(texts, role)?,
            self.role_prefix_tokens(role),
        ))
    }
    fn prepare_instructed(&self, texts: &[&str], instruction: &str) -> Option<Result<Prepared>> {
        let prefix = self.instruction_prefix(instruction)?;
        Some((|| {
            Ok(Prepared::Decoder(
                self.tokenize_with_prefix(texts, Role::Query, &prefix)?,
                self.prefix_tokens(&prefix)?,
            ))
        })())
    }
    fn embed_prepared(&self, texts: &Prepared) -> Option<Result<Vec<Vec<f32>>>> {
        match texts {
            Prepared::Decoder(ids, skip) => Some(self.embed_tokens_after(ids, *skip)),
            _ => None,
        }
    }
}

impl Tower for VisionEmbedder {
    identity!();
    fn family(&self) -> Family {
        match self.arch() {
            VisionArch::Clip => Family::Clip,
            VisionArch::Siglip => Family::Siglip,
        }
    }
    fn fingerprint(&self, input: Input) -> String {
        match input {
            Input::Text(_) => VisionEmbedder::fingerprint(self, "text"),
            Input::Image => VisionEmbedder::fingerprint(self, "image"),
        }
    }
    fn max_text_tokens(&self) -> usize {
        self.max_text_len()
    }
    fn prepare_texts(&self, texts: &[&str], _: Role, _: bool) -> Result<Prepared> {
        Ok(Prepared::Vision(self.tokenize(texts)?))
    }
    fn prepare_instructed(&self, _: &[&str], _: &str) -> Option<Result<Prepared>> {
        None
    }
    fn embed_prepared(&self, texts: &Prepared) -> Option<Result<Vec<Vec<f32>>>> {
        match texts {
            Prepared::Vision(ids) => Some(self.embed_tokenized(ids)),
            _ => None,
        }
    }
    fn images(&self) -> Option<&dyn ImageTower> {
        Some(self)
    }
}

impl ImageTower for VisionEmbedder {
    fn prepare_rgb(&self, img: RgbImage) -> std::result::Result<PreparedImage, PreprocessError> {
        Ok(PreparedImage::Pixels(self.processor().preprocess(&img)))
    }
    fn embed_images(&self, images: &[PreparedImage]) -> Result<Vec<Vec<f32>>> {
        self.embed_prepared(&pixels(VisionEmbedder::name(self), images)?)
    }
}

impl Tower for NomicEmbedder {
    identity!();
    fn family(&self) -> Family {
        Family::Nomic
    }
    fn fingerprint(&self, input: Input) -> String {
        match input {
            Input::Text(role) => format!(
                "{}|{}",
                self.text().fingerprint(role),
                NomicEmbedder::content_hash(self)
            ),
            Input::Image => self.fingerprint_images(),
        }
    }
    fn max_text_tokens(&self) -> usize {
        self.text().max_seq_len()
    }
    fn prepare_texts(&self, texts: &[&str], role: Role, reference: bool) -> Result<Prepared> {
        Ok(Prepared::Text(if reference && role == Role::Passage {
            // the reference code embeds Nomic documents without `search_document: `
            // (task2_multimodal.py:471-478)
            self.text().tokenize_with_prefix(texts, "")?
        } else {
            self.text().tokenize(texts, role)?
        }))
    }
    fn prepare_instructed(&self, texts: &[&str], instruction: &str) -> Option<Result<Prepared>> {
        let prefix = self.text().instruction_prefix(instruction)?;
        Some(
            self.text()
                .tokenize_with_prefix(texts, &prefix)
                .map(Prepared::Text),
        )
    }
    fn embed_prepared(&self, texts: &Prepared) -> Option<Result<Vec<Vec<f32>>>> {
        match texts {
            Prepared::Text(ids) => Some(self.text().embed_tokens(ids)),
            _ => None,
        }
    }
    fn images(&self) -> Option<&dyn ImageTower> {
        Some(self)
    }
}

impl ImageTower for NomicEmbedder {
    fn prepare_rgb(&self, img: RgbImage) -> std::result::Result<PreparedImage, PreprocessError> {
        Ok(PreparedImage::Pixels(self.processor().preprocess(&img)))
    }
    fn embed_images(&self, images: &[PreparedImage]) -> Result<Vec<Vec<f32>>> {
        self.embed_prepared(&pixels(NomicEmbedder::name(self), images)?)
    }
}

impl Tower for JinaClipEmbedder {
    identity!();
    fn family(&self) -> Family {
        Family::JinaClip
    }
    fn fingerprint(&self, input: Input) -> String {
        match input {
            Input::Text(role) => self.text_fingerprint(role),
            Input::Image => JinaClipEmbedder::fingerprint(self, "image"),
        }
    }
    fn max_text_tokens(&self) -> usize {
        self.max_seq_len()
    }
    fn prepare_texts(&self, texts: &[&str], role: Role, _: bool) -> Result<Prepared> {
        // v2: queries as encode_text(task="retrieval.query"), passages with no task
        Ok(Prepared::Text(self.tokenize_role(texts, role)?))
    }
    fn prepare_instructed(&self, _: &[&str], _: &str) -> Option<Result<Prepared>> {
        None
    }
    fn embed_prepared(&self, texts: &Prepared) -> Option<Result<Vec<Vec<f32>>>> {
        match texts {
            Prepared::Text(ids) => Some(self.embed_tokens(ids)),
            _ => None,
        }
    }
    fn images(&self) -> Option<&dyn ImageTower> {
        Some(self)
    }
}

impl ImageTower for JinaClipEmbedder {
    fn prepare_rgb(&self, img: RgbImage) -> std::result::Result<PreparedImage, PreprocessError> {
        Ok(PreparedImage::Pixels(self.preprocess(&img)))
    }
    fn embed_images(&self, images: &[PreparedImage]) -> Result<Vec<Vec<f32>>> {
        self.embed_prepared(&pixels(JinaClipEmbedder::name(self), images)?)
    }
    fn drops_alpha(&self) -> bool {
        true
    }
}

impl Tower for GmeEmbedder {
    identity!();
    fn family(&self) -> Family {
        Family::Gme
    }
    fn fingerprint(&self, input: Input) -> String {
        match input {
            Input::Text(Role::Query) => GmeEmbedder::fingerprint(self, "query"),
            Input::Text(Role::Passage) => GmeEmbedder::fingerprint(self, "passage"),
            Input::Image => GmeEmbedder::fingerprint(self, "image"),
        }
    }
    fn max_text_tokens(&self) -> usize {
        self.max_length()
    }
    fn prepare_texts(&self, texts: &[&str], role: Role, _: bool) -> Result<Prepared> {
        Ok(Prepared::Gme(
            texts.iter().map(|t| t.to_string()).collect(),
            role,
            None,
        ))
    }
    fn prepare_instructed(&self, texts: &[&str], instruction: &str) -> Option<Result<Prepared>> {
        Some(Ok(Prepared::Gme(
            texts.iter().map(|t| t.to_string()).collect(),
            Role::Query,
            Some(instruction.to_string()),
        )))
    }
    fn embed_prepared(&self, texts: &Prepared) -> Option<Result<Vec<Vec<f32>>>> {
        let Prepared::Gme(t, role, instruction) = texts else {
            return None;
        };
        let refs: Vec<&str> = t.iter().map(String::as_str).collect();
        Some(match (role, instruction) {
            (Role::Query, Some(i)) => self.embed_texts_instructed(&refs, i),
            _ => self.embed_texts(&refs, *role == Role::Query),
        })
    }
    fn images(&self) -> Option<&dyn ImageTower> {
        Some(self)
    }
}

impl ImageTower for GmeEmbedder {
    fn prepare_rgb(&self, img: RgbImage) -> std::result::Result<PreparedImage, PreprocessError> {
        let img = self.processor().prepare_rgb(img, None)?;
        self.check_fits(&[&img], DEFAULT_INSTRUCTION)?;
        Ok(PreparedImage::Patches(img))
    }
    fn prepare_blank(&self, img: RgbImage) -> Result<PreparedImage> {
        let resized = self.processor().resize(img, None)?;
        Ok(PreparedImage::Patches(self.processor().patchify(&resized)))
    }
    fn embed_images(&self, images: &[PreparedImage]) -> Result<Vec<Vec<f32>>> {
        let patches = images
            .iter()
            .map(|i| match i {
                PreparedImage::Patches(p) => Ok(p.clone()),
                PreparedImage::Pixels(_) => Err(capability(
                    GmeEmbedder::name(self),
                    "embed an image prepared for CLIP / SigLIP",
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        GmeEmbedder::embed_images(self, &patches)
    }
    fn drops_alpha(&self) -> bool {
        true
    }
}
