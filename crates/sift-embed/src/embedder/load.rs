//! Loading: the family from `config.json`, and its loader with the options it takes.
use super::towers::Tower;
use super::{Embedder, EmbedderOptions, Family, is_bge_vl};
use crate::families::decoder::{DecoderEmbedder, DecoderOptions};
use crate::families::gme::{GmeEmbedder, GmeOptions};
use crate::families::jina_clip::{JinaClipEmbedder, JinaClipOptions};
use crate::families::nomic_pair::{NomicEmbedder, NomicOptions};
use crate::families::text::{TextEmbedder, TextEmbedderOptions};
use crate::families::vision::{VisionEmbedder, VisionOptions};
use crate::{Error, ModelFiles, Result, select_device};

impl Embedder {
    /// Loads the model whose files are `files`.
    pub fn from_files(files: &ModelFiles, options: &EmbedderOptions) -> Result<Embedder> {
        let device = select_device(options.device)?;
        let family = Family::of(&files.config);
        let precision = options.dtype.resolve(family, &device);
        let (dtype, instruction) = (precision.dtype(), options.query_instruction.clone());
        if instruction.is_some()
            && matches!(family, Family::Clip | Family::Siglip | Family::JinaClip)
        {
            return Err(Error::Unsupported {
                path: files.config.clone(),
                message: format!("{} takes no query instruction", files.name),
            });
        }
        // the options' batch size, else the family's; at least 1
        let batch = |default: usize| options.batch_size.unwrap_or(default).max(1);
        let model: Box<dyn Tower> = match family {
            Family::Gme => {
                let d = GmeOptions::default();
                // the reference code runs GME through sentence-transformers, whose length
                // limit is not GME's own (no limit at all when no file gives one)
                let max_length = options.profile.is_reference().then(|| {
                    crate::families::gme::sentence_transformers_max_length(files)
                        .unwrap_or(usize::MAX / 4)
                });
                let o = GmeOptions {
                    batch_size: batch(d.batch_size),
                    dtype,
                    query_instruction: instruction,
                    max_length,
                    ..d
                };
                Box::new(GmeEmbedder::load(files, &device, o)?)
            }
            Family::Clip | Family::Siglip => {
                let d = VisionOptions::default();
                let o = VisionOptions {
                    batch_size: batch(d.batch_size),
                    dtype,
                    ..d
                };
                Box::new(VisionEmbedder::load(files, &device, o)?)
            }
            Family::Nomic => {
                let o = NomicOptions {
                    batch_size: batch(NomicOptions::default().batch_size),
                    dtype,
                    text_model: None,
                    text: TextEmbedderOptions {
                        query_instruction: instruction,
                        ..TextEmbedderOptions::default()
                    },
                };
                Box::new(NomicEmbedder::load(files, &device, o)?)
            }
            Family::JinaClip => {
                let d = JinaClipOptions::default();
                let o = JinaClipOptions {
                    batch_size: batch(d.batch_size),
                    dtype,
                    ..d
                };
                Box::new(JinaClipEmbedder::load(files, &device, o)?)
            }
            Family::Decoder => {
                let d = DecoderOptions::default();
                let o = DecoderOptions {
                    batch_size: batch(d.batch_size),
                    dtype,
                    query_instruction: instruction,
                    ..d
                };
                Box::new(DecoderEmbedder::load(files, &device, o)?)
            }
            Family::Text => {
                let d = TextEmbedderOptions::default();
                let o = TextEmbedderOptions {
                    batch_size: batch(d.batch_size),
                    dtype,
                    query_instruction: instruction,
                    ..d
                };
                Box::new(TextEmbedder::load(files, &device, o)?)
            }
        };
        Ok(Embedder::new(model, is_bge_vl(files))
            .with_profile(options.profile)
            .with_precision(precision, &device))
    }
}
