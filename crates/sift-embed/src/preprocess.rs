//! TEMPORARY placeholder, replaced by the Pillow-exact implementation.
#![allow(missing_docs)]
use image::RgbImage;

#[derive(Debug, Clone)]
pub struct ImageProcessor {
    pub size: (u32, u32),
}

#[derive(Debug, thiserror::Error)]
pub enum PreprocessError {
    #[error("{0}")]
    Decode(String),
}

impl ImageProcessor {
    pub fn clip(size: u32) -> Self {
        ImageProcessor { size: (size, size) }
    }
    pub fn siglip(size: u32) -> Self {
        ImageProcessor { size: (size, size) }
    }
    pub fn from_config_json(text: &str) -> Result<Self, PreprocessError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| PreprocessError::Decode(e.to_string()))?;
        let s = v["crop_size"]["height"]
            .as_u64()
            .or(v["size"]["height"].as_u64())
            .unwrap_or(224) as u32;
        Ok(ImageProcessor { size: (s, s) })
    }
    pub fn output_size(&self) -> (u32, u32) {
        self.size
    }
    pub fn preprocess(&self, img: &RgbImage) -> Vec<f32> {
        let r = image::imageops::resize(
            img,
            self.size.1,
            self.size.0,
            image::imageops::FilterType::CatmullRom,
        );
        let mut out = vec![0f32; 3 * r.len() / 3];
        let n = (self.size.0 * self.size.1) as usize;
        for (i, p) in r.pixels().enumerate() {
            for c in 0..3 {
                out[c * n + i] = p[c] as f32 / 255.0;
            }
        }
        out
    }
}

pub fn decode_rgb(bytes: &[u8]) -> Result<RgbImage, PreprocessError> {
    image::load_from_memory(bytes)
        .map(|i| i.to_rgb8())
        .map_err(|e| PreprocessError::Decode(e.to_string()))
}
