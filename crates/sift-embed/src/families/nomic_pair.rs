//! Nomic Embed v1.5 as one multimodal embedder: the text tower
//! (nomic-ai/nomic-embed-text-v1.5, a [`TextEmbedder`] over NomicBERT with its task
//! prefixes) and the image tower (nomic-ai/nomic-embed-vision-v1.5, [`NomicVision`]) share
//! one space. They are two checkpoints: the vision checkpoint's text partner is
//! [`NomicOptions::text_model`] when given, else the directory beside it whose name has
//! `text` for `vision` (`nomic-embed-vision-v1.5` -> `nomic-embed-text-v1.5`), else the
//! registry's partner by hub id.
use candle_core::Device;

use crate::files::{ModelFiles, read_json};
use crate::image::{ImageProcessor, PreprocessError};
use sift_nn::models::nomic_vision::{NomicVision, NomicVisionConfig};

/// The text model Nomic's vision checkpoints share their space with.
const NOMIC_TEXT: &str = "nomic-ai/nomic-embed-text-v1.5";
use crate::families::text::{TextEmbedder, TextEmbedderOptions};
use crate::{Error, Result};
use sift_nn::layers::ops::{self, l2_normalize};

/// Settings of a [`NomicEmbedder`].
#[derive(Debug, Clone)]
pub struct NomicOptions {
    /// Inputs per forward pass.
    pub batch_size: usize,
    /// Weights and activations dtype.
    pub dtype: candle_core::DType,
    /// The text checkpoint (a directory or hub id); found beside the vision one when `None`.
    pub text_model: Option<String>,
    /// Options of the text tower (its prefixes come from the registry).
    pub text: TextEmbedderOptions,
}

impl Default for NomicOptions {
    fn default() -> Self {
        NomicOptions {
            batch_size: 32,
            dtype: candle_core::DType::F32,
            text_model: None,
            text: TextEmbedderOptions::default(),
        }
    }
}

/// Nomic Embed's text and image towers in one space.
pub struct NomicEmbedder {
    name: String,
    text: TextEmbedder,
    vision: NomicVision,
    processor: ImageProcessor,
    options: NomicOptions,
    content: String,
    device: Device,
}

impl NomicEmbedder {
    /// Whether `config.json` at `config` is a Nomic vision checkpoint.
    pub fn is_vision_config(value: &serde_json::Value) -> bool {
        crate::files::is_nomic_vision_config(value)
    }

    /// Loads the vision checkpoint `files` and its text partner.
    pub fn load(files: &ModelFiles, device: &Device, options: NomicOptions) -> Result<Self> {
        let unsupported = |message: String| Error::Unsupported {
            path: files.config.clone(),
            message,
        };
        let value: serde_json::Value = read_json(&files.config)?;
        let mut value = value;
        // the published config writes n_inner as a float (2048.0); the MLP width comes from
        // the weights anyway
        if let Some(obj) = value.as_object_mut() {
            obj.remove("n_inner");
        }
        let cfg: NomicVisionConfig = serde_json::from_value(value)
            .map_err(|e| unsupported(format!("not a Nomic vision config: {e}")))?;
        cfg.check().map_err(&unsupported)?;
        let preprocessor = files.preprocessor.as_ref().ok_or_else(|| {
            unsupported("no preprocessor_config.json beside the vision weights".into())
        })?;
        let text =
            std::fs::read_to_string(preprocessor).map_err(|e| Error::file(preprocessor, e))?;
        let processor =
            ImageProcessor::from_config_json(&text).map_err(|e| Error::file(preprocessor, e))?;
        let (h, w) = processor.output_size();
        if h as usize != cfg.img_size || w as usize != cfg.img_size {
            return Err(unsupported(format!(
                "the processor makes {h}x{w} pixels, the tower takes {}",
                cfg.img_size
            )));
        }
        let vb = files.var_builder(options.dtype, device)?;
        let vision = NomicVision::new(vb, &cfg)
            .map_err(|e| unsupported(format!("weights do not match a Nomic vision model: {e}")))?;
        let text_files = Self::text_partner(files, options.text_model.as_deref())?;
        // whatever its directory is called, the partner is Nomic Embed Text v1.5: its task
        // prefixes (`search_query: `, `search_document: `) put texts in the images' space
        let text = TextEmbedder::load(
            &text_files,
            device,
            TextEmbedderOptions {
                batch_size: options.batch_size,
                dtype: options.dtype,
                registry_fallback: options
                    .text
                    .registry_fallback
                    .clone()
                    .or_else(|| Some(NOMIC_TEXT.to_string())),
                ..options.text.clone()
            },
        )?;
        if text.dim() != cfg.n_embd {
            return Err(unsupported(format!(
                "the text model {} makes {}-dimensional vectors, the vision tower {}",
                text_files.name,
                text.dim(),
                cfg.n_embd
            )));
        }
        Ok(NomicEmbedder {
            name: files.name.clone(),
            content: format!("{}+{}", files.content_hash()?, text.content_hash()),
            text,
            vision,
            processor,
            options,
            device: device.clone(),
        })
    }

    /// The text checkpoint that goes with the vision one.
    fn text_partner(files: &ModelFiles, given: Option<&str>) -> Result<ModelFiles> {
        if let Some(spec) = given {
            return ModelFiles::resolve(spec);
        }
        let dir = files.config.parent().unwrap_or(std::path::Path::new("."));
        if let Some(name) = dir.file_name().and_then(|n| n.to_str())
            && name.contains("vision")
        {
            let sibling = dir.with_file_name(name.replace("vision", "text"));
            if sibling.join("config.json").is_file() {
                return ModelFiles::from_dir(&sibling);
            }
        }
        match crate::registry::find(&files.name).and_then(|m| m.text_model.clone()) {
            Some(id) => ModelFiles::resolve(&id),
            None => Err(Error::Unsupported {
                path: files.config.clone(),
                message: "no text model for this Nomic vision checkpoint: put \
                          nomic-embed-text-v1.5 beside it (the directory name with `text` for \
                          `vision`) or name it"
                    .into(),
            }),
        }
    }

    /// Model name (the vision checkpoint's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The text tower.
    pub fn text(&self) -> &TextEmbedder {
        &self.text
    }

    /// Embedding dimension.
    pub fn dim(&self) -> usize {
        self.text.dim()
    }

    /// The image processor.
    pub fn processor(&self) -> &ImageProcessor {
        &self.processor
    }

    /// Both checkpoints' content hashes.
    pub fn content_hash(&self) -> &str {
        &self.content
    }

    /// Decodes and preprocesses images in parallel.
    pub fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Vec<f32>, PreprocessError>> {
        self.processor.prepare_all(images)
    }

    /// Unit vectors of prepared images, in order.
    pub fn embed_prepared(&self, inputs: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
        let (side, run) = (
            self.vision.image_size(),
            (
                self.options.batch_size,
                ops::activation_dtype(self.options.dtype, &self.device),
            ),
        );
        super::pixel_rows(self.name(), inputs, run, (side, side), &self.device, |x| {
            Ok(l2_normalize(&self.vision.forward(&x)?)?)
        })
    }

    /// Everything that decides image vectors besides the input (a cache key).
    pub fn fingerprint_images(&self) -> String {
        format!(
            "{}|nomic-vision|{:?}|{:?}|{}|{}",
            self.name,
            self.processor,
            self.options.dtype,
            crate::files::device_class(&self.device),
            self.content
        )
    }
}
