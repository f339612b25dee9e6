//! Glue between `sift-embed` models and the index/eval commands.
use anyhow::{Context, Result};
use sift_embed::{
    DevicePref, GmeEmbedder, GmeOptions, Kind, ModelFiles, TextEmbedder, TextEmbedderOptions,
    VisionEmbedder, VisionOptions, is_gme_model, is_vision_model, registry, select_device,
};

/// Model flags shared by commands that embed.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelFlags {
    /// Device: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Instruction (system prompt) of GME queries; GME's default "You are a helpful
    /// assistant." when absent. Passages and corpus images always use the default.
    #[arg(long)]
    pub query_instruction: Option<String>,
}

/// A loaded embedding model: a text encoder, or a vision-language model (text and images).
pub enum Model {
    /// BERT-family sentence encoder.
    Text(Box<TextEmbedder>),
    /// CLIP / SigLIP: separate text and image towers.
    Vision(Box<VisionEmbedder>),
    /// GME (Qwen2-VL): one model for text, images, and text with images.
    Gme(Box<GmeEmbedder>),
}

impl Model {
    /// Model name (hub id or directory name).
    pub fn name(&self) -> &str {
        match self {
            Model::Text(m) => m.name(),
            Model::Vision(m) => m.name(),
            Model::Gme(m) => m.name(),
        }
    }

    /// Embedding dimension.
    pub fn dim(&self) -> usize {
        match self {
            Model::Text(m) => m.dim(),
            Model::Vision(m) => m.dim(),
            Model::Gme(m) => m.dim(),
        }
    }

    /// The CLIP/SigLIP model, if this is one.
    pub fn vision(&self) -> Option<&VisionEmbedder> {
        match self {
            Model::Vision(m) => Some(m),
            _ => None,
        }
    }

    /// Whether the model embeds images (CLIP, SigLIP, GME).
    pub fn has_images(&self) -> bool {
        !matches!(self, Model::Text(_))
    }

    /// [`sift_embed::ModelFiles::content_hash`] of the model's files.
    pub fn content_hash(&self) -> &str {
        match self {
            Model::Text(m) => m.content_hash(),
            Model::Vision(m) => m.content_hash(),
            Model::Gme(m) => m.content_hash(),
        }
    }

    /// A short name of the family, for messages.
    pub fn family(&self) -> &'static str {
        match self {
            Model::Text(_) => "text",
            Model::Vision(m) => m.arch().name(),
            Model::Gme(_) => "gme",
        }
    }

    /// Unit vectors of texts of `kind`.
    pub fn embed(&self, texts: &[&str], kind: Kind) -> Result<Vec<Vec<f32>>> {
        Ok(match self {
            Model::Text(m) => m.embed(texts, kind)?,
            Model::Vision(m) => m.embed_texts(texts)?,
            Model::Gme(m) => m.embed_texts(texts, kind == Kind::Query)?,
        })
    }
}

/// Loads a model from a directory or hub id (text or vision-language, by its config).
pub fn load_model(spec: &str, flags: &ModelFlags) -> Result<Model> {
    load_model_as(spec, flags, candle_core::DType::F32)
}

/// [`load_model`] with weights and activations in `dtype`.
pub fn load_model_as(spec: &str, flags: &ModelFlags, dtype: candle_core::DType) -> Result<Model> {
    let pref: DevicePref = flags.device.parse()?;
    let device = select_device(pref)?;
    let files = ModelFiles::resolve(spec)?;
    if is_gme_model(&files.config) {
        let options = GmeOptions {
            batch_size: flags.batch_size.max(1),
            dtype,
            query_instruction: flags.query_instruction.clone(),
            ..Default::default()
        };
        return Ok(Model::Gme(Box::new(
            GmeEmbedder::load(&files, &device, options)
                .with_context(|| format!("loading model {spec}"))?,
        )));
    }
    if is_vision_model(&files.config) {
        let options = VisionOptions {
            batch_size: flags.batch_size.max(1),
            dtype,
            ..Default::default()
        };
        return Ok(Model::Vision(Box::new(
            VisionEmbedder::load(&files, &device, options)
                .with_context(|| format!("loading model {spec}"))?,
        )));
    }
    Ok(Model::Text(Box::new(
        TextEmbedder::load(
            &files,
            &device,
            TextEmbedderOptions {
                batch_size: flags.batch_size.max(1),
                dtype,
                ..Default::default()
            },
        )
        .with_context(|| format!("loading model {spec}"))?,
    )))
}

/// Loads a text model from a directory or hub id.
pub fn load_text_model(spec: &str, flags: &ModelFlags) -> Result<TextEmbedder> {
    match load_model(spec, flags)? {
        Model::Text(m) => Ok(*m),
        other => anyhow::bail!(
            "{spec} is a {} model; this command needs a text model",
            other.family()
        ),
    }
}

/// The name a dense index of `model` goes by: the registry alias, else the model name made
/// safe for a directory.
pub fn slug(model: &Model) -> String {
    if let Some(info) = registry::find(model.name()) {
        return info.alias.clone();
    }
    model
        .name()
        .rsplit('/')
        .next()
        .unwrap_or("model")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Embeds passages for the index builder.
pub struct Passages<'a>(pub &'a Model);

impl sift_index::PassageEmbedder for Passages<'_> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn fingerprint(&self) -> String {
        match self.0 {
            Model::Text(m) => m.fingerprint(Kind::Passage),
            Model::Vision(m) => m.fingerprint("text"),
            Model::Gme(m) => m.fingerprint("passage"),
        }
    }
    fn model_hash(&self) -> String {
        self.0.content_hash().to_string()
    }
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, String> {
        self.0
            .embed(texts, Kind::Passage)
            .map_err(|e| format!("{e:#}"))
    }
}

/// Embeds corpus images for the index builder (and `sift embed --image`, `sift bench`):
/// the image side of a CLIP, SigLIP or GME model.
pub struct Images<'a>(&'a Model);

impl<'a> Images<'a> {
    /// The image side of `model`, if it has one.
    pub fn of(model: &'a Model) -> Option<Images<'a>> {
        model.has_images().then_some(Images(model))
    }

    /// Decodes and preprocesses encoded images: model input per image, or why the image
    /// cannot be decoded.
    pub fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Vec<f32>, String>> {
        match self.0 {
            Model::Vision(m) => m.prepare(images),
            Model::Gme(m) => m.prepare(images),
            Model::Text(_) => unreachable!("Images::of checks"),
        }
    }

    /// One unit vector per prepared input.
    pub fn embed_prepared(&self, inputs: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
        Ok(match self.0 {
            Model::Vision(m) => m.embed_prepared(inputs)?,
            Model::Gme(m) => m.embed_prepared(inputs)?,
            Model::Text(_) => unreachable!("Images::of checks"),
        })
    }
}

impl sift_index::ImageEmbedder for Images<'_> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn fingerprint(&self) -> String {
        match self.0 {
            Model::Vision(m) => m.fingerprint("image"),
            Model::Gme(m) => m.fingerprint("image"),
            Model::Text(_) => unreachable!("Images::of checks"),
        }
    }
    fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Vec<f32>, String>> {
        Images::prepare(self, images)
    }
    fn embed_prepared(&self, inputs: &[Vec<f32>]) -> std::result::Result<Vec<Vec<f32>>, String> {
        Images::embed_prepared(self, inputs).map_err(|e| format!("{e:#}"))
    }
}
