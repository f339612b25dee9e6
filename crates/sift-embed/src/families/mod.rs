//! The families' embedders ([`Family`](crate::Family)): a model's files, tokenizer, prompts,
//! pooling and image processing around its network (sift-nn's `models`): BERT-family
//! sentence encoders ([`text`]), CLIP and SigLIP ([`vision`]), GME ([`gme`]), decoder LLMs
//! ([`decoder`]), Nomic Embed ([`nomic_pair`]) and Jina-CLIP v1 and v2 ([`jina_clip`]);
//! cross-encoder rerankers ([`cross_encoder`]); early truncation of long texts for every
//! tokenizer ([`truncate`]).
pub mod cross_encoder;
pub mod decoder;
pub mod gme;
pub mod jina_clip;
pub mod nomic_pair;
pub mod text;
pub mod truncate;
pub mod vision;

/// Prepared images, each `(3, height, width)` channels first as the image processors give
/// them, stacked into one `(images, 3, height, width)` tensor on `device`; an input of another
/// size is an error.
pub(crate) fn pixel_batch(
    images: &[Vec<f32>],
    height: usize,
    width: usize,
    device: &candle_core::Device,
) -> crate::Result<candle_core::Tensor> {
    let per = 3 * height * width;
    let mut flat = Vec::with_capacity(images.len() * per);
    for x in images {
        if x.len() != per {
            return Err(crate::Error::Image(crate::image::PreprocessError::Shape {
                got: x.len(),
                expected: per,
            }));
        }
        flat.extend_from_slice(x);
    }
    Ok(candle_core::Tensor::from_vec(
        flat,
        (images.len(), 3, height, width),
        device,
    )?)
}

/// The rows `f` makes of prepared images (`(height, width)` each) as `dtype` pixels,
/// `batch` images a pass, checked finite for `model`: each image embedder's batching loop.
pub(crate) fn pixel_rows(
    model: &str,
    images: &[Vec<f32>],
    (batch, dtype): (usize, candle_core::DType),
    (height, width): (usize, usize),
    device: &candle_core::Device,
    f: impl Fn(candle_core::Tensor) -> crate::Result<candle_core::Tensor>,
) -> crate::Result<Vec<Vec<f32>>> {
    let mut out = Vec::with_capacity(images.len());
    for chunk in images.chunks(batch.max(1)) {
        let pixels = pixel_batch(chunk, height, width, device)?.to_dtype(dtype)?;
        out.extend(f(pixels)?.to_vec2::<f32>()?);
    }
    crate::error::finite(model, out)
}

/// An embedder's `name`, `dim` and `content_hash`, read from its fields `name`, `dim` and
/// `content` (one definition for every family's embedder).
macro_rules! identity_getters {
    () => {
        /// Model name (hub id or directory name).
        pub fn name(&self) -> &str {
            &self.name
        }

        /// Embedding dimension.
        pub fn dim(&self) -> usize {
            self.dim
        }

        /// [`ModelFiles::content_hash`](crate::ModelFiles::content_hash) of the files the
        /// model was loaded from.
        pub fn content_hash(&self) -> &str {
            &self.content
        }
    };
}
pub(crate) use identity_getters;
