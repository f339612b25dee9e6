//! The model families, one module each, named after their upstream weights: BERT-family
//! sentence encoders ([`text`] over [`bert`]), CLIP and SigLIP ([`vision`] over [`clip`] and
//! [`siglip`]), GME ([`gme`] over [`qwen2vl`]), decoder LLMs ([`decoder`]), Nomic Embed
//! ([`nomic_pair`] over [`nomic`] and [`nomic_vision`]), and Jina-CLIP v1 ([`jina_clip`] over
//! [`jina_bert`] and [`eva`]; v2 over [`xlm_roberta`] and [`eva`]).
pub mod bert;
pub mod clip;
pub mod decoder;
pub mod decoder_config;
pub mod eva;
pub mod gme;
pub mod jina_bert;
pub mod jina_clip;
pub mod nomic;
pub mod nomic_pair;
pub mod nomic_vision;
pub mod qwen2vl;
pub mod siglip;
pub mod text;
pub mod truncate;
pub mod vision;
pub mod xlm_roberta;

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
