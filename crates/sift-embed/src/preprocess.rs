//! Image preprocessing that reproduces Hugging Face's CLIP and SigLIP image processors.
//!
//! The reference is what `CLIPImageProcessor`, `SiglipImageProcessor` and
//! `AutoImageProcessor.from_pretrained(dir)` do in transformers 5.24 with Pillow 13 when
//! torchvision is not installed: they fall back to the PIL backend (`CLIPImageProcessorPil`,
//! `SiglipImageProcessorPil`). For every output value the result here equals that backend's
//! `pixel_values` (bit for bit on the tested images; the parity test allows 1e-5):
//!
//! 1. [`decode_rgb`]: decode, then convert to RGB as transformers' `convert_to_rgb` does: an
//!    image with an alpha band or a `transparency` entry (palette or colour-key `tRNS`, GIF
//!    transparency) is converted to RGBA and alpha-composited onto opaque white with Pillow's
//!    integer `alpha_composite`; other images go through Pillow's `convert("RGB")` (16-bit
//!    greyscale saturates at 255, 16-bit colour keeps the high byte).
//! 2. Resize with Pillow's `Image.resize` ([`resize_rgb8`]): shortest edge to `size` with the
//!    long edge `int(size * long / short)`, or exactly to `(height, width)`.
//! 3. Centre crop as `transformers.image_transforms.center_crop`, zero-padding when the image
//!    is smaller than the crop.
//! 4. `(f32(f64(v) * rescale_factor) - mean) / std` in float32, channels first.
//!
//! Steps 2 and 3 are fused: only the pixels that survive the crop are computed, each with
//! exactly the arithmetic Pillow uses for it.
//!
//! With torchvision installed, transformers 5.24 defaults to its torchvision backend instead,
//! whose output differs from the PIL backend's by a few levels; that backend is not
//! reproduced here.

use image::{DynamicImage, ImageFormat, RgbImage, Rgba};
use serde_json::{Map, Value};

/// OpenAI CLIP's normalisation mean (transformers' `OPENAI_CLIP_MEAN`). The constants are
/// rounded to f32 from the f64 values, as numpy does with transformers' Python floats.
pub const OPENAI_CLIP_MEAN: [f32; 3] = [
    0.48145466f64 as f32,
    0.4578275f64 as f32,
    0.40821073f64 as f32,
];
/// OpenAI CLIP's normalisation standard deviation (transformers' `OPENAI_CLIP_STD`).
pub const OPENAI_CLIP_STD: [f32; 3] = [
    0.26862954f64 as f32,
    0.26130258f64 as f32,
    0.27577711f64 as f32,
];
/// SigLIP's normalisation mean and standard deviation (`IMAGENET_STANDARD_MEAN`/`_STD`).
pub const IMAGENET_STANDARD_MEAN_STD: [f32; 3] = [0.5, 0.5, 0.5];

/// Resampling filter, as Pillow's `Image.Resampling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resample {
    /// Nearest neighbour (`NEAREST`, PIL code 0).
    Nearest,
    /// Triangle filter (`BILINEAR`, code 2), support 1, widened when downsampling.
    Bilinear,
    /// Cubic convolution with a = -0.5 (`BICUBIC`, code 3), support 2, widened when
    /// downsampling.
    Bicubic,
    /// Box filter (`BOX`, code 4).
    Box,
    /// Hamming-windowed sinc (`HAMMING`, code 5).
    Hamming,
    /// Lanczos-3 (`LANCZOS`, code 1).
    Lanczos,
}

impl Resample {
    /// The filter for a PIL resampling code as stored in `preprocessor_config.json`
    /// (`"resample": 3`); `None` for codes not implemented here (including Pillow 13's
    /// `MKS2013` = 6 and `MKS2021` = 7).
    pub fn from_pil_code(code: i64) -> Option<Self> {
        Some(match code {
            0 => Resample::Nearest,
            1 => Resample::Lanczos,
            2 => Resample::Bilinear,
            3 => Resample::Bicubic,
            4 => Resample::Box,
            5 => Resample::Hamming,
            _ => return None,
        })
    }

    /// The PIL resampling code of this filter.
    pub fn pil_code(self) -> u8 {
        match self {
            Resample::Nearest => 0,
            Resample::Lanczos => 1,
            Resample::Bilinear => 2,
            Resample::Bicubic => 3,
            Resample::Box => 4,
            Resample::Hamming => 5,
        }
    }

    /// Filter support in input pixels at scale 1 (Pillow's `struct filter`); 0 for nearest.
    fn support(self) -> f64 {
        match self {
            Resample::Nearest => 0.0,
            Resample::Box => 0.5,
            Resample::Bilinear | Resample::Hamming => 1.0,
            Resample::Bicubic => 2.0,
            Resample::Lanczos => 3.0,
        }
    }

    /// The filter kernel, transcribed from Pillow's `libImaging/Resample.c`.
    fn kernel(self, x: f64) -> f64 {
        match self {
            Resample::Nearest => 0.0,
            Resample::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Resample::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Resample::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let x = x * std::f64::consts::PI;
                    // Pillow writes the window constants as C `float` literals.
                    x.sin() / x * (0.54f32 as f64 + 0.46f32 as f64 * x.cos())
                }
            }
            Resample::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Resample::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * std::f64::consts::PI;
    x.sin() / x
}

/// How the image is resized before the optional centre crop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resize {
    /// The shorter side becomes this many pixels, the longer one `int(size * long / short)`
    /// (transformers' `get_resize_output_image_size` with `default_to_square=False`).
    ShortestEdge(u32),
    /// Exactly this size, ignoring the aspect ratio.
    Exact {
        /// Output height.
        height: u32,
        /// Output width.
        width: u32,
    },
}

impl Resize {
    /// `(height, width)` after resizing an image of `height` x `width`.
    pub fn output_size(&self, height: u32, width: u32) -> (u32, u32) {
        match *self {
            Resize::Exact { height, width } => (height, width),
            Resize::ShortestEdge(size) => {
                let (short, long) = if width <= height {
                    (width, height)
                } else {
                    (height, width)
                };
                // Python: int(size * long / short). Both operands are exact in f64 and the
                // division is correctly rounded, as Python's int / int is.
                let new_long = ((size as u64 * long as u64) as f64 / short.max(1) as f64) as u32;
                if width <= height {
                    (new_long, size)
                } else {
                    (size, new_long)
                }
            }
        }
    }
}

/// Errors decoding an image or reading a `preprocessor_config.json`.
#[derive(Debug, thiserror::Error)]
pub enum PreprocessError {
    /// The bytes are not an image in a supported format (JPEG, PNG, WebP, GIF, BMP).
    #[error("unrecognised image format")]
    UnknownFormat,
    /// The decoder rejected the image.
    #[error("cannot decode image: {0}")]
    Decode(#[from] image::ImageError),
    /// The file ends before the image does (Pillow refuses it: "image file is truncated";
    /// the JPEG decoder here would fill the rest with grey).
    #[error("cannot decode image: the JPEG file is truncated (no end-of-image marker)")]
    Truncated,
    /// The config is not valid JSON, or not a JSON object.
    #[error("preprocessor config is not a JSON object: {0}")]
    Json(String),
    /// A key of the config has a value that is invalid or not supported here.
    #[error("preprocessor config key `{key}`: {message}")]
    Config {
        /// The key at fault.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

fn config_err(key: &str, message: impl Into<String>) -> PreprocessError {
    PreprocessError::Config {
        key: key.to_string(),
        message: message.into(),
    }
}

/// An image processor: transformers' CLIP/SigLIP image processor (PIL backend) settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    /// Convert to RGB. [`decode_rgb`] always does (as transformers does by default); with an
    /// [`RgbImage`] input this flag changes nothing.
    pub do_convert_rgb: bool,
    /// Resize as [`ImageProcessor::resize`] says.
    pub do_resize: bool,
    /// Target size of the resize.
    pub resize: Resize,
    /// Resampling filter of the resize.
    pub resample: Resample,
    /// Centre-crop (zero-padding if needed) to [`ImageProcessor::crop`].
    pub do_center_crop: bool,
    /// Crop size, `(height, width)`.
    pub crop: (u32, u32),
    /// Multiply by `rescale_factor`. Kept in f64 as transformers computes it
    /// (`uint8 -> float64 * factor -> float32`), so that results are bit-identical.
    pub do_rescale: bool,
    /// The rescale factor, normally 1/255.
    pub rescale_factor: f64,
    /// Subtract `mean` and divide by `std` per channel, in float32.
    pub do_normalize: bool,
    /// Per-channel mean.
    pub mean: [f32; 3],
    /// Per-channel standard deviation.
    pub std: [f32; 3],
}

/// Which transformers processor class a config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Clip,
    Siglip,
}

impl ImageProcessor {
    /// transformers' `CLIPImageProcessor` defaults, with the shortest edge resized to `size`
    /// (bicubic) and a `size` x `size` centre crop.
    pub fn clip(size: u32) -> Self {
        ImageProcessor {
            do_convert_rgb: true,
            do_resize: true,
            resize: Resize::ShortestEdge(size),
            resample: Resample::Bicubic,
            do_center_crop: true,
            crop: (size, size),
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
            mean: OPENAI_CLIP_MEAN,
            std: OPENAI_CLIP_STD,
        }
    }

    /// transformers' `SiglipImageProcessor` defaults: resize to exactly `size` x `size`
    /// (bicubic), no crop, mean = std = 0.5.
    pub fn siglip(size: u32) -> Self {
        ImageProcessor {
            do_convert_rgb: true,
            do_resize: true,
            resize: Resize::Exact {
                height: size,
                width: size,
            },
            resample: Resample::Bicubic,
            do_center_crop: false,
            crop: (size, size),
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
            mean: IMAGENET_STANDARD_MEAN_STD,
            std: IMAGENET_STANDARD_MEAN_STD,
        }
    }

    /// Reads a Hugging Face `preprocessor_config.json` as
    /// `AutoImageProcessor.from_pretrained` does in transformers 5.24.
    ///
    /// The class comes from `image_processor_type` (`CLIPImageProcessor`,
    /// `SiglipImageProcessor`, with or without the `Fast`/`Pil` suffix), else from the legacy
    /// `feature_extractor_type` (`CLIPFeatureExtractor`). Absent keys take the class defaults
    /// ([`ImageProcessor::clip`]`(224)`, [`ImageProcessor::siglip`]`(224)`). As in
    /// transformers: an integer `size` means the shortest edge (both classes have
    /// `default_to_square = False`, unless the config sets `default_to_square`), so a SigLIP
    /// config with `"size": 224` gives input-dependent shapes; an integer `crop_size` is
    /// square; `[h, w]` lists are `(height, width)`; a scalar `image_mean`/`image_std`
    /// applies to every channel; a JSON `null` flag is false (numbers count as Python
    /// truth values); CLIP's `use_square_size` forces a 224 x 224 resize. Size dictionaries
    /// other than `{shortest_edge}` and `{height, width}`, resampling codes other than 0-5,
    /// and settings transformers would reject at preprocessing time (a missing size, crop
    /// size, mean, ...) are errors naming the key.
    pub fn from_config_json(text: &str) -> Result<Self, PreprocessError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| PreprocessError::Json(e.to_string()))?;
        let obj = value
            .as_object()
            .ok_or_else(|| PreprocessError::Json("expected an object".into()))?;

        let family = config_family(obj)?;
        let mut p = match family {
            Family::Clip => ImageProcessor::clip(224),
            Family::Siglip => ImageProcessor::siglip(224),
        };

        if let Some(b) = get_flag(obj, "do_convert_rgb")? {
            p.do_convert_rgb = b;
        }
        if let Some(b) = get_flag(obj, "do_resize")? {
            p.do_resize = b;
        }
        if let Some(b) = get_flag(obj, "do_center_crop")? {
            p.do_center_crop = b;
        }
        if let Some(b) = get_flag(obj, "do_rescale")? {
            p.do_rescale = b;
        }
        if let Some(b) = get_flag(obj, "do_normalize")? {
            p.do_normalize = b;
        }
        let default_to_square = get_flag(obj, "default_to_square")?.unwrap_or(false);

        // Each setting: Some(value) if set, None if set to null (or absent with no class
        // default); checked against the flags below as transformers' validation does.
        let mut size = Some(p.resize);
        if let Some(v) = obj.get("size") {
            size = parse_size(v, "size", default_to_square)?;
        }
        if family == Family::Clip && get_flag(obj, "use_square_size")? == Some(true) {
            // transformers: size = {height: cls.size["shortest_edge"], width: ...} = 224.
            size = Some(Resize::Exact {
                height: 224,
                width: 224,
            });
        }
        let mut crop = match family {
            Family::Clip => Some(p.crop),
            Family::Siglip => None,
        };
        if let Some(v) = obj.get("crop_size") {
            crop = match parse_size(v, "crop_size", true)? {
                None => None,
                Some(Resize::Exact { height, width }) => Some((height, width)),
                Some(Resize::ShortestEdge(_)) => {
                    return Err(config_err("crop_size", "must give height and width"));
                }
            };
        }
        let mut resample = Some(p.resample);
        if let Some(v) = obj.get("resample") {
            resample = match v {
                Value::Null => None,
                v => {
                    let code = v
                        .as_i64()
                        .ok_or_else(|| config_err("resample", "expected a PIL filter code"))?;
                    Some(Resample::from_pil_code(code).ok_or_else(|| {
                        config_err(
                            "resample",
                            format!("unsupported PIL filter code {code} (supported: 0-5)"),
                        )
                    })?)
                }
            };
        }
        let mut rescale_factor = Some(p.rescale_factor);
        if let Some(v) = obj.get("rescale_factor") {
            rescale_factor = match v {
                Value::Null => None,
                v => Some(
                    v.as_f64()
                        .ok_or_else(|| config_err("rescale_factor", "expected a number"))?,
                ),
            };
        }
        let mut mean = Some(p.mean);
        if let Some(v) = obj.get("image_mean") {
            mean = parse_channels(v, "image_mean")?;
        }
        let mut std = Some(p.std);
        if let Some(v) = obj.get("image_std") {
            std = parse_channels(v, "image_std")?;
        }

        if p.do_resize {
            p.resize = size.ok_or_else(|| config_err("size", "required when do_resize"))?;
            p.resample =
                resample.ok_or_else(|| config_err("resample", "required when do_resize"))?;
        } else {
            p.resize = size.unwrap_or(p.resize);
            p.resample = resample.unwrap_or(Resample::Bilinear);
        }
        if p.do_center_crop {
            p.crop = crop.ok_or_else(|| config_err("crop_size", "required when do_center_crop"))?;
        } else {
            // Unused; kept meaningful (SigLIP has no crop size: mirror the resize size).
            p.crop = crop.unwrap_or(match p.resize {
                Resize::Exact { height, width } => (height, width),
                Resize::ShortestEdge(s) => (s, s),
            });
        }
        if p.do_rescale {
            p.rescale_factor = rescale_factor
                .ok_or_else(|| config_err("rescale_factor", "required when do_rescale"))?;
        }
        if p.do_normalize {
            p.mean = mean.ok_or_else(|| config_err("image_mean", "required when do_normalize"))?;
            p.std = std.ok_or_else(|| config_err("image_std", "required when do_normalize"))?;
        }
        Ok(p)
    }

    /// `(height, width)` of the pixel tensor when it does not depend on the input: the crop
    /// size when cropping, else the exact resize size; `(0, 0)` when it depends on the
    /// input (a shortest-edge resize without crop, or neither resize nor crop). See
    /// [`ImageProcessor::fixed_output_size`] and [`ImageProcessor::output_size_for`].
    pub fn output_size(&self) -> (u32, u32) {
        self.fixed_output_size().unwrap_or((0, 0))
    }

    /// `(height, width)` of the pixel tensor if it is the same for every input.
    pub fn fixed_output_size(&self) -> Option<(u32, u32)> {
        if self.do_center_crop {
            Some(self.crop)
        } else if let (true, Resize::Exact { height, width }) = (self.do_resize, self.resize) {
            Some((height, width))
        } else {
            None
        }
    }

    /// `(height, width)` of the pixel tensor for an input of `height` x `width`.
    pub fn output_size_for(&self, height: u32, width: u32) -> (u32, u32) {
        if self.do_center_crop {
            self.crop
        } else {
            self.resized_size(height, width)
        }
    }

    /// `(height, width)` after the resize step (the input size if `do_resize` is false).
    pub fn resized_size(&self, height: u32, width: u32) -> (u32, u32) {
        if self.do_resize {
            self.resize.output_size(height, width)
        } else {
            (height, width)
        }
    }

    /// The 8-bit image after resize and centre crop, before rescale and normalisation:
    /// the `uint8` array transformers holds at that point.
    pub fn resize_and_crop(&self, img: &RgbImage) -> RgbImage {
        let (in_h, in_w) = (img.height(), img.width());
        let (rh, rw) = self.resized_size(in_h, in_w);
        let window = if self.do_center_crop {
            let (ch, cw) = self.crop;
            // transformers' center_crop: top = (H - ch) // 2, zero padding where the crop
            // leaves the image (placing the image at ceil((ch - H) / 2)) is the same window.
            Window {
                x0: (rw as i64 - cw as i64).div_euclid(2),
                y0: (rh as i64 - ch as i64).div_euclid(2),
                width: cw,
                height: ch,
            }
        } else {
            Window::full(rw, rh)
        };
        resample_window(img, rw, rh, self.resample, window)
    }

    /// The model input: channels-first `(3, h, w)`, row-major, as transformers'
    /// `pixel_values[0]`.
    pub fn preprocess(&self, img: &RgbImage) -> Vec<f32> {
        let pixels = self.resize_and_crop(img);
        let lut = self.value_table();
        let n = pixels.width() as usize * pixels.height() as usize;
        let mut out = vec![0f32; 3 * n];
        let (r, rest) = out.split_at_mut(n);
        let (g, b) = rest.split_at_mut(n);
        for (i, p) in pixels.pixels().enumerate() {
            r[i] = lut[0][p[0] as usize];
            g[i] = lut[1][p[1] as usize];
            b[i] = lut[2][p[2] as usize];
        }
        out
    }

    /// The output value of each 8-bit level, per channel: rescale and normalise exactly as
    /// transformers' PIL backend (`rescale`: float64 multiply, cast to float32;
    /// `normalize`: float32 subtract and divide).
    pub fn value_table(&self) -> [[f32; 256]; 3] {
        let mut lut = [[0f32; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, out) in table.iter_mut().enumerate() {
                let mut x = if self.do_rescale {
                    (v as f64 * self.rescale_factor) as f32
                } else {
                    v as f32
                };
                if self.do_normalize {
                    x = (x - self.mean[c]) / self.std[c];
                }
                *out = x;
            }
        }
        lut
    }
}

fn config_family(obj: &Map<String, Value>) -> Result<Family, PreprocessError> {
    let (key, name) = match (
        obj.get("image_processor_type").and_then(Value::as_str),
        obj.get("feature_extractor_type").and_then(Value::as_str),
    ) {
        (Some(t), _) => ("image_processor_type", t.to_string()),
        (None, Some(t)) => (
            "feature_extractor_type",
            t.replace("FeatureExtractor", "ImageProcessor"),
        ),
        (None, None) => {
            return Err(config_err(
                "image_processor_type",
                "missing (neither image_processor_type nor feature_extractor_type is set)",
            ));
        }
    };
    let base = name
        .strip_suffix("Fast")
        .or_else(|| name.strip_suffix("Pil"))
        .unwrap_or(&name);
    match base {
        "CLIPImageProcessor" => Ok(Family::Clip),
        "SiglipImageProcessor" => Ok(Family::Siglip),
        _ => Err(config_err(
            key,
            format!(
                "unsupported processor {name:?} (supported: CLIPImageProcessor, SiglipImageProcessor)"
            ),
        )),
    }
}

fn get_flag(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, PreprocessError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(false)),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        // Python truthiness, as transformers tests these flags.
        Some(Value::Number(n)) => Ok(Some(n.as_f64() != Some(0.0))),
        Some(_) => Err(config_err(key, "expected true or false")),
    }
}

fn positive_u32(v: &Value, key: &str) -> Result<u32, PreprocessError> {
    v.as_u64()
        .filter(|&n| n > 0 && n <= u32::MAX as u64)
        .map(|n| n as u32)
        .ok_or_else(|| config_err(key, format!("expected a positive integer, got {v}")))
}

/// transformers' `get_size_dict`: `None` for null.
fn parse_size(
    v: &Value,
    key: &str,
    default_to_square: bool,
) -> Result<Option<Resize>, PreprocessError> {
    Ok(Some(match v {
        Value::Null => return Ok(None),
        Value::Number(_) => {
            let n = positive_u32(v, key)?;
            if default_to_square {
                Resize::Exact {
                    height: n,
                    width: n,
                }
            } else {
                Resize::ShortestEdge(n)
            }
        }
        Value::Array(a) if a.len() == 2 => Resize::Exact {
            height: positive_u32(&a[0], key)?,
            width: positive_u32(&a[1], key)?,
        },
        Value::Object(m) => {
            let mut keys: Vec<&str> = m.keys().map(String::as_str).collect();
            keys.sort_unstable();
            match keys.as_slice() {
                ["shortest_edge"] => Resize::ShortestEdge(positive_u32(&m["shortest_edge"], key)?),
                ["height", "width"] => Resize::Exact {
                    height: positive_u32(&m["height"], key)?,
                    width: positive_u32(&m["width"], key)?,
                },
                _ => {
                    return Err(config_err(
                        key,
                        format!(
                            "unsupported keys {keys:?} (supported: {{shortest_edge}} or {{height, width}})"
                        ),
                    ));
                }
            }
        }
        _ => {
            return Err(config_err(
                key,
                format!("expected an integer, [height, width] or an object, got {v}"),
            ));
        }
    }))
}

fn parse_channels(v: &Value, key: &str) -> Result<Option<[f32; 3]>, PreprocessError> {
    let num = |x: &Value| {
        x.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| config_err(key, format!("expected a number, got {x}")))
    };
    match v {
        Value::Null => Ok(None),
        Value::Number(_) => {
            let x = num(v)?;
            Ok(Some([x; 3]))
        }
        Value::Array(a) if a.len() == 3 => Ok(Some([num(&a[0])?, num(&a[1])?, num(&a[2])?])),
        _ => Err(config_err(key, "expected a number or a list of 3 numbers")),
    }
}

// ---------------------------------------------------------------------------------------
// Pillow-exact resampling
// ---------------------------------------------------------------------------------------

/// Pillow's `PRECISION_BITS` for 8-bit resampling: coefficients are fixed point with 22
/// fractional bits, leaving 8 bits for the value and 2 for overshoot and sign.
pub const PRECISION_BITS: u32 = 32 - 8 - 2;

/// A rectangle of the resized image to compute, in resized-image coordinates; it may
/// extend past the image, where the output is zero (transformers' crop padding).
#[derive(Debug, Clone, Copy)]
struct Window {
    x0: i64,
    y0: i64,
    width: u32,
    height: u32,
}

impl Window {
    fn full(width: u32, height: u32) -> Self {
        Window {
            x0: 0,
            y0: 0,
            width,
            height,
        }
    }
}

/// Resamples `img` to `width` x `height` exactly as Pillow's `Image.resize((width, height),
/// filter)` does on an 8-bit RGB image (Pillow 13, `libImaging/Resample.c` for the
/// convolution filters, the affine nearest-neighbour scaler for [`Resample::Nearest`]).
/// A zero width or height gives an empty image (Pillow raises instead).
pub fn resize_rgb8(img: &RgbImage, width: u32, height: u32, filter: Resample) -> RgbImage {
    resample_window(img, width, height, filter, Window::full(width, height))
}

/// Fixed-point coefficients of one resampling pass for the output indices
/// `first..first + count` (Pillow's `precompute_coeffs` followed by
/// `normalize_coeffs_8bpc`; the per-index arithmetic does not depend on the other indices).
#[derive(Debug, Clone)]
struct Coeffs {
    /// Coefficients per output index, `ksize` apart.
    ksize: usize,
    /// `(xmin, xmax)` per output index: the first input index and how many are used.
    bounds: Vec<(usize, usize)>,
    kk: Vec<i32>,
}

impl Coeffs {
    fn new(in_size: u32, out_size: u32, filter: Resample, first: u32, count: u32) -> Coeffs {
        let (ksize, bounds, prekk) = precompute_coeffs(in_size, out_size, filter, first, count);
        let kk = prekk.iter().map(|&k| fixed_point(k)).collect();
        Coeffs { ksize, bounds, kk }
    }

    /// `(first, count)`: the input indices read by any of these outputs.
    fn span(&self) -> (usize, usize) {
        let first = self.bounds.iter().map(|b| b.0).min().unwrap_or(0);
        let last = self.bounds.iter().map(|b| b.0 + b.1).max().unwrap_or(first);
        (first, last.saturating_sub(first))
    }

    fn get(&self, i: usize) -> (usize, &[i32]) {
        let (xmin, xmax) = self.bounds[i];
        (xmin, &self.kk[i * self.ksize..i * self.ksize + xmax])
    }
}

/// `normalize_coeffs_8bpc`: round half away from zero to `PRECISION_BITS` fractional bits.
fn fixed_point(k: f64) -> i32 {
    let scale = (1u32 << PRECISION_BITS) as f64;
    if k < 0.0 {
        (-0.5 + k * scale) as i32
    } else {
        (0.5 + k * scale) as i32
    }
}

/// Pillow's `precompute_coeffs` over the whole input (`box = (0, size)`), for the output
/// indices `first..first + count`: `(ksize, bounds, coefficients)`.
fn precompute_coeffs(
    in_size: u32,
    out_size: u32,
    filter: Resample,
    first: u32,
    count: u32,
) -> (usize, Vec<(usize, usize)>, Vec<f64>) {
    // box = (0, in_size) as C floats: in0 = 0, in1 - in0 = in_size (exact below 2^24).
    let in0 = 0.0f64;
    let span = (in_size as f32 - 0.0f32) as f64;
    let scale = span / out_size as f64;
    let filterscale = if scale < 1.0 { 1.0 } else { scale };
    let support = filter.support() * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let inv_filterscale = 1.0 / filterscale;

    let mut bounds = Vec::with_capacity(count as usize);
    let mut kk = vec![0f64; count as usize * ksize];
    for (i, xx) in (first..first + count).enumerate() {
        let center = in0 + (xx as f64 + 0.5) * scale;
        // C: (int)(double) truncates toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64);
        let n = (xmax - xmin).max(0) as usize;
        let k = &mut kk[i * ksize..i * ksize + n];
        let mut ww = 0.0f64;
        for (x, kx) in k.iter_mut().enumerate() {
            let w = filter.kernel(((x as i64 + xmin) as f64 - center + 0.5) * inv_filterscale);
            *kx = w;
            ww += w;
        }
        if ww != 0.0 {
            for kx in k.iter_mut() {
                *kx /= ww;
            }
        }
        bounds.push((xmin as usize, n));
    }
    (ksize, bounds, kk)
}

/// Pillow's `clip8`: the accumulator (with the rounding half already added) shifted down
/// and clamped to 0..=255.
#[inline]
fn clip8(ss: i32) -> u8 {
    (ss >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Intersection of `[w0, w0 + wn)` with `[0, size)`: `(first, count)`.
fn clamp_range(w0: i64, wn: u32, size: u32) -> (u32, u32) {
    let lo = w0.max(0).min(size as i64);
    let hi = (w0 + wn as i64).max(0).min(size as i64);
    (lo as u32, (hi - lo).max(0) as u32)
}

/// Resizes `img` to `out_w` x `out_h` as Pillow does and returns the pixels of `window`
/// of the result (zero outside it).
fn resample_window(
    img: &RgbImage,
    out_w: u32,
    out_h: u32,
    filter: Resample,
    window: Window,
) -> RgbImage {
    let (in_w, in_h) = (img.width(), img.height());
    let mut out = RgbImage::new(window.width, window.height);
    // The part of the window inside the resized image.
    let (cx0, cw) = clamp_range(window.x0, window.width, out_w);
    let (cy0, ch) = clamp_range(window.y0, window.height, out_h);
    if cw == 0 || ch == 0 || in_w == 0 || in_h == 0 {
        return out;
    }
    let block = Block {
        x0: cx0 as usize,
        y0: cy0 as usize,
        width: cw as usize,
        height: ch as usize,
        // Where the block starts inside the output window.
        out_x: (cx0 as i64 - window.x0) as usize,
        out_y: (cy0 as i64 - window.y0) as usize,
        out_stride: window.width as usize * 3,
    };
    let dst: &mut [u8] = &mut out;
    let src = img.as_raw();
    let in_stride = in_w as usize * 3;

    if out_w == in_w && out_h == in_h {
        // Pillow: same size and full box -> copy.
        for y in 0..block.height {
            for x in 0..block.width {
                let s = (block.y0 + y) * in_stride + (block.x0 + x) * 3;
                block.put(dst, x, y, [src[s], src[s + 1], src[s + 2]]);
            }
        }
        return out;
    }

    if filter == Resample::Nearest {
        let xs = nearest_table(in_w, out_w);
        let ys = nearest_table(in_h, out_h);
        for y in 0..block.height {
            let Some(sy) = ys[block.y0 + y] else {
                continue;
            };
            for x in 0..block.width {
                if let Some(sx) = xs[block.x0 + x] {
                    let s = sy * in_stride + sx * 3;
                    block.put(dst, x, y, [src[s], src[s + 1], src[s + 2]]);
                }
            }
        }
        return out;
    }

    // Pillow skips the pass of an unchanged dimension. With both passes it runs the
    // vertical one first when the height shrinks by more than twice as many pixels as the
    // width does (Pillow 13; established against 13.0.0 on thousands of random size pairs
    // with every filter; older Pillows always go horizontal first). The order matters:
    // the intermediate image is rounded to 8 bits.
    let need_horizontal = out_w != in_w;
    let need_vertical = out_h != in_h;
    let vertical_first =
        out_h < in_h && (in_h as i64 - out_h as i64) > 2 * (in_w as i64 - out_w as i64);
    let horiz = need_horizontal.then(|| Coeffs::new(in_w, out_w, filter, cx0, cw));
    let vert = need_vertical.then(|| Coeffs::new(in_h, out_h, filter, cy0, ch));
    let (bw, bh) = (block.width, block.height);

    // Each pass computes only what the block needs, from the input rows/columns it reads.
    let pixels = match (&horiz, &vert) {
        (Some(h), Some(v)) if vertical_first => {
            let (col0, cols) = h.span();
            let temp = vertical_pass(src, in_stride, col0, cols, 0, v, bh);
            horizontal_pass(&temp, cols * 3, 0, bh, col0, h, bw)
        }
        (Some(h), Some(v)) => {
            let (row0, rows) = v.span();
            let temp = horizontal_pass(src, in_stride, row0, rows, 0, h, bw);
            vertical_pass(&temp, bw * 3, 0, bw, row0, v, bh)
        }
        (Some(h), None) => horizontal_pass(src, in_stride, block.y0, bh, 0, h, bw),
        (None, Some(v)) => vertical_pass(src, in_stride, block.x0, bw, 0, v, bh),
        (None, None) => unreachable!("same size is copied above"),
    };
    for y in 0..bh {
        let o = (y + block.out_y) * block.out_stride + block.out_x * 3;
        dst[o..o + bw * 3].copy_from_slice(&pixels[y * bw * 3..(y + 1) * bw * 3]);
    }
    out
}

/// The part of the output window that lies inside the resized image.
struct Block {
    /// First column and row in resized-image coordinates.
    x0: usize,
    y0: usize,
    width: usize,
    height: usize,
    /// Position of the block in the output window, and the window's row stride in bytes.
    out_x: usize,
    out_y: usize,
    out_stride: usize,
}

impl Block {
    #[inline]
    fn put(&self, dst: &mut [u8], x: usize, y: usize, px: [u8; 3]) {
        let o = (y + self.out_y) * self.out_stride + (x + self.out_x) * 3;
        dst[o..o + 3].copy_from_slice(&px);
    }
}

/// Pillow's rounding bias: half a unit of the fixed-point accumulator.
const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Pillow's `ImagingResampleHorizontal_8bpc` for RGB: rows `row0..row0 + rows` of `src`
/// (row stride `stride` bytes) to the `n_out` outputs of `h`; input column `c` is at byte
/// `(c - col_base) * 3` of a row. Returns `rows` x `n_out` pixels.
fn horizontal_pass(
    src: &[u8],
    stride: usize,
    row0: usize,
    rows: usize,
    col_base: usize,
    h: &Coeffs,
    n_out: usize,
) -> Vec<u8> {
    let mut out = vec![0u8; rows * n_out * 3];
    for (r, out_row) in out.chunks_exact_mut(n_out * 3).enumerate() {
        let line = &src[(row0 + r) * stride..];
        for (xx, px) in out_row.chunks_exact_mut(3).enumerate() {
            let (xmin, k) = h.get(xx);
            let taps = &line[(xmin - col_base) * 3..][..k.len() * 3];
            let (mut s0, mut s1, mut s2) = (HALF, HALF, HALF);
            for (p, &ki) in taps.chunks_exact(3).zip(k) {
                s0 = s0.wrapping_add((p[0] as i32).wrapping_mul(ki));
                s1 = s1.wrapping_add((p[1] as i32).wrapping_mul(ki));
                s2 = s2.wrapping_add((p[2] as i32).wrapping_mul(ki));
            }
            px.copy_from_slice(&[clip8(s0), clip8(s1), clip8(s2)]);
        }
    }
    out
}

/// Pillow's `ImagingResampleVertical_8bpc` for RGB: the `n_out` outputs of `v`, each a row
/// of `width` pixels starting at column `col0` of `src` (row stride `stride` bytes; input
/// row `r` is row `r - row_base` of `src`). Accumulates a whole row per tap: the integer
/// sums are the same in any order, so this equals Pillow's per-pixel loop.
fn vertical_pass(
    src: &[u8],
    stride: usize,
    col0: usize,
    width: usize,
    row_base: usize,
    v: &Coeffs,
    n_out: usize,
) -> Vec<u8> {
    let w3 = width * 3;
    let mut out = vec![0u8; n_out * w3];
    let mut acc = vec![0i32; w3];
    for (yy, out_row) in out.chunks_exact_mut(w3.max(1)).enumerate().take(n_out) {
        let (ymin, k) = v.get(yy);
        acc.fill(HALF);
        for (i, &ki) in k.iter().enumerate() {
            let row = &src[(ymin - row_base + i) * stride + col0 * 3..][..w3];
            for (a, &p) in acc.iter_mut().zip(row) {
                *a = a.wrapping_add((p as i32).wrapping_mul(ki));
            }
        }
        for (o, &a) in out_row.iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
    out
}

/// Source index of each output index for Pillow's nearest-neighbour resize
/// (`ImagingScaleAffine`: the position accumulates in double precision, `COORD` truncates;
/// out-of-range positions leave the pixel zero).
fn nearest_table(in_size: u32, out_size: u32) -> Vec<Option<usize>> {
    let a = (in_size as f32 - 0.0f32) as f64 / out_size as f64;
    let mut pos = 0.0 + a * 0.5;
    let mut table = Vec::with_capacity(out_size as usize);
    for _ in 0..out_size {
        let i = if pos < 0.0 { -1 } else { pos as i64 };
        table.push((i >= 0 && i < in_size as i64).then_some(i as usize));
        pos += a;
    }
    table
}

// ---------------------------------------------------------------------------------------
// Decoding and conversion to RGB as Pillow + transformers' convert_to_rgb
// ---------------------------------------------------------------------------------------

/// What a PNG's header says about its pixels (the `image` crate hides it).
#[derive(Debug, Clone, Copy, Default)]
struct PngInfo {
    color_type: u8,
    bit_depth: u8,
    /// Raw tRNS sample values for greyscale (one) or RGB (three) images.
    trns_key: Option<[u16; 3]>,
}

fn png_info(bytes: &[u8]) -> Option<PngInfo> {
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    if bytes.len() < 33 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" {
        return None;
    }
    let mut info = PngInfo::default();
    let mut pos = 8;
    while pos + 8 <= bytes.len() {
        let len = be32(&bytes[pos..]) as usize;
        let kind = &bytes[pos + 4..pos + 8];
        let data = bytes.get(pos + 8..pos + 8 + len)?;
        match kind {
            b"IHDR" if len >= 13 => {
                info.bit_depth = data[8];
                info.color_type = data[9];
            }
            b"tRNS" => {
                let be16 = |i: usize| data.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
                info.trns_key = match info.color_type {
                    0 => be16(0).map(|g| [g, g, g]),
                    2 => match (be16(0), be16(2), be16(4)) {
                        (Some(r), Some(g), Some(b)) => Some([r, g, b]),
                        _ => None,
                    },
                    _ => None,
                };
            }
            b"IDAT" | b"IEND" => break,
            _ => {}
        }
        pos += 12 + len;
    }
    Some(info)
}

/// Decodes an image (format sniffed from the bytes: JPEG, PNG, WebP, GIF, BMP) and converts
/// it to 8-bit RGB as transformers' processors do with a PIL image from `Image.open`:
/// images with alpha or transparency are alpha-composited onto white (Pillow's integer
/// `alpha_composite`), everything else goes through Pillow's `convert("RGB")`.
///
/// Pillow's conversions are reproduced where they differ from the `image` crate's: 16-bit
/// greyscale PNG (`I;16`) saturates at 255 instead of scaling; 16-bit colour and
/// grey+alpha PNG keep the high byte (truncation, not rounding); a greyscale `tRNS` colour
/// key is compared as Pillow does (the raw key against the 8-bit value: unscaled for 2- and
/// 4-bit images, saturated for 16-bit); a 16-bit RGB key is compared against the 8-bit
/// high bytes. Decoded pixels equal Pillow's for PNG, BMP, GIF and WebP (lossless, and
/// lossy on every file tried); JPEG decoders differ by a few levels (zune-jpeg vs
/// libjpeg-turbo; see the fixtures' README). EXIF orientation and ICC profiles are ignored,
/// as with `Image.open`.
pub fn decode_rgb(bytes: &[u8]) -> Result<RgbImage, PreprocessError> {
    decode_rgb_with(bytes, Alpha::OverWhite)
}

/// Whether a JPEG stream stops before its end-of-image marker: the marker segments are
/// walked by their lengths (so an EXIF thumbnail inside APP1 is skipped) up to the first
/// start-of-scan, after which an EOI (`FF D9`, which byte stuffing keeps out of scan data)
/// must follow. Pillow raises on such files, even when only the EOI is missing.
fn jpeg_is_truncated(b: &[u8]) -> bool {
    let mut i = 2; // after SOI
    loop {
        while i < b.len() && b[i] != 0xFF {
            i += 1;
        }
        while i < b.len() && b[i] == 0xFF {
            i += 1;
        }
        let Some(&marker) = b.get(i) else {
            return true;
        };
        i += 1;
        match marker {
            0xD9 => return false,
            0x01 | 0xD0..=0xD7 => {}
            _ => {
                let Some(len) = b.get(i..i + 2) else {
                    return true;
                };
                let len = u16::from_be_bytes([len[0], len[1]]) as usize;
                if marker == 0xDA {
                    let scan = b.get(i + len..).unwrap_or(&[]);
                    return !scan.windows(2).any(|w| w == [0xFF, 0xD9]);
                }
                i += len;
            }
        }
    }
}

/// What becomes of transparency when an image is converted to RGB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpha {
    /// Composited onto opaque white, as transformers 5's `convert_rgb` does.
    OverWhite,
    /// Dropped, as Pillow's `Image.convert("RGB")` does (the colour under a transparent
    /// pixel shows): what GME's own image loading (`fetch_image`) gives its processor.
    Drop,
}

/// [`decode_rgb`] with the given treatment of transparency.
pub fn decode_rgb_with(bytes: &[u8], alpha: Alpha) -> Result<RgbImage, PreprocessError> {
    let format = image::guess_format(bytes).map_err(|_| PreprocessError::UnknownFormat)?;
    if format == ImageFormat::Jpeg && jpeg_is_truncated(bytes) {
        return Err(PreprocessError::Truncated);
    }
    let png = if format == ImageFormat::Png {
        png_info(bytes)
    } else {
        None
    };
    let img = image::load_from_memory_with_format(bytes, format)?;
    Ok(to_rgb_like_pil(img, png, alpha))
}

/// Converts a decoded image to RGB as Pillow would have opened and transformers converted
/// it. `png` is the header info when the image was a PNG.
fn to_rgb_like_pil(img: DynamicImage, png: Option<PngInfo>, alpha: Alpha) -> RgbImage {
    let composite_rgba =
        |w: u32, h: u32, pixel: &dyn Fn(u32, u32) -> Rgba<u8>| composite_rgba(w, h, pixel, alpha);
    let (w, h) = (img.width(), img.height());
    let key = png.and_then(|p| p.trns_key);
    let color_type = png.map(|p| p.color_type);
    match img {
        DynamicImage::ImageRgb8(rgb) => rgb,
        DynamicImage::ImageLuma8(l) => RgbImage::from_fn(w, h, |x, y| {
            let v = l.get_pixel(x, y)[0];
            image::Rgb([v, v, v])
        }),
        DynamicImage::ImageLumaA8(la) => {
            // A real grey+alpha image, or greyscale with a tRNS key (alpha recomputed the
            // way Pillow compares the key: raw key against the scaled 8-bit value, and a
            // 1-bit key of 1 means white).
            let pil_key = match (color_type, key) {
                (Some(0), Some(k)) => {
                    let depth = png.map(|p| p.bit_depth).unwrap_or(8);
                    Some(if depth == 1 {
                        if k[0] != 0 { 255 } else { 0 }
                    } else {
                        k[0]
                    })
                }
                _ => None,
            };
            composite_rgba(w, h, &|x, y| {
                let p = la.get_pixel(x, y);
                let a = match pil_key {
                    Some(k) => {
                        if p[0] as u16 == k {
                            0
                        } else {
                            255
                        }
                    }
                    None => p[1],
                };
                Rgba([p[0], p[0], p[0], a])
            })
        }
        DynamicImage::ImageRgba8(rgba) => {
            // PNG colour-key and palette tRNS, GIF transparency, WebP/PNG alpha: the
            // decoder's alpha is the one Pillow's convert("RGBA") gives.
            composite_rgba(w, h, &|x, y| *rgba.get_pixel(x, y))
        }
        DynamicImage::ImageLuma16(l) => RgbImage::from_fn(w, h, |x, y| {
            let v = l.get_pixel(x, y)[0].min(255) as u8;
            image::Rgb([v, v, v])
        }),
        DynamicImage::ImageLumaA16(la) => {
            if let (Some(0), Some(k)) = (color_type, key) {
                // 16-bit greyscale with a tRNS key: Pillow opens it as I;16, and
                // convert("RGBA") compares the saturated 8-bit value with the raw key.
                composite_rgba(w, h, &|x, y| {
                    let v = la.get_pixel(x, y)[0].min(255) as u8;
                    Rgba([v, v, v, if v as u16 == k[0] { 0 } else { 255 }])
                })
            } else {
                composite_rgba(w, h, &|x, y| {
                    let p = la.get_pixel(x, y);
                    let v = (p[0] >> 8) as u8;
                    Rgba([v, v, v, (p[1] >> 8) as u8])
                })
            }
        }
        DynamicImage::ImageRgb16(rgb) => RgbImage::from_fn(w, h, |x, y| {
            let p = rgb.get_pixel(x, y);
            image::Rgb([(p[0] >> 8) as u8, (p[1] >> 8) as u8, (p[2] >> 8) as u8])
        }),
        DynamicImage::ImageRgba16(rgba) => {
            let rgb_key = match (color_type, key) {
                (Some(2), Some(k)) => Some(k),
                _ => None,
            };
            composite_rgba(w, h, &|x, y| {
                let p = rgba.get_pixel(x, y);
                let (r, g, b) = ((p[0] >> 8) as u8, (p[1] >> 8) as u8, (p[2] >> 8) as u8);
                let a = match rgb_key {
                    // Pillow compares the 8-bit pixel with the raw 16-bit key.
                    Some(k) => {
                        if [r as u16, g as u16, b as u16] == k {
                            0
                        } else {
                            255
                        }
                    }
                    None => (p[3] >> 8) as u8,
                };
                Rgba([r, g, b, a])
            })
        }
        other => other.to_rgb8(),
    }
}

/// Builds the image pixel by pixel and composites each onto opaque white (or drops alpha).
fn composite_rgba(w: u32, h: u32, pixel: &dyn Fn(u32, u32) -> Rgba<u8>, alpha: Alpha) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let p = pixel(x, y);
        let a = match alpha {
            Alpha::OverWhite => p[3],
            Alpha::Drop => 255,
        };
        image::Rgb([
            over_white(p[0], a),
            over_white(p[1], a),
            over_white(p[2], a),
        ])
    })
}

/// Pillow's `ImagingAlphaComposite` of `(c, a)` over an opaque white background
/// (`libImaging/AlphaComposite.c`, 7 extra bits of precision, rounded divisions by 255).
#[inline]
pub fn over_white(c: u8, a: u8) -> u8 {
    const BITS: u32 = 7;
    if a == 0 {
        return 255;
    }
    let (c, a) = (c as u32, a as u32);
    let (dst_c, dst_a) = (255u32, 255u32);
    let blend = dst_a * (255 - a);
    let outa255 = a * 255 + blend;
    let coef1 = a * 255 * 255 * (1 << BITS) / outa255;
    let coef2 = 255 * (1 << BITS) - coef1;
    let tmp = c * coef1 + dst_c * coef2 + (0x80 << BITS);
    ((((tmp >> 8) + tmp) >> 8) >> BITS) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pil_codes_round_trip() {
        for code in 0..6 {
            assert_eq!(
                Resample::from_pil_code(code).unwrap().pil_code() as i64,
                code
            );
        }
        assert_eq!(Resample::from_pil_code(6), None);
        assert_eq!(Resample::from_pil_code(7), None);
    }

    #[test]
    fn bicubic_kernel_values() {
        let k = |x| Resample::Bicubic.kernel(x);
        assert_eq!(k(0.0), 1.0);
        assert_eq!(k(1.0), 0.0);
        assert_eq!(k(2.0), 0.0);
        assert_eq!(k(0.5), 0.5625);
        assert_eq!(k(-1.5), -0.0625);
    }

    #[test]
    fn fixed_point_rounds_half_away_from_zero() {
        assert_eq!(fixed_point(1.0), 1 << 22);
        assert_eq!(fixed_point(0.5), 1 << 21);
        assert_eq!(fixed_point(-0.0625), -(1 << 18));
        // 2^-23 is half a unit: rounds away from zero both ways.
        assert_eq!(fixed_point(2f64.powi(-23)), 1);
        assert_eq!(fixed_point(-(2f64.powi(-23))), -1);
    }

    #[test]
    fn bicubic_2x_upscale_coefficients() {
        // Upscaling 4 -> 8: support stays 2, ksize 5; the first output centre is at 0.25,
        // so input pixels 0 and 1 (centres 0.5, 1.5) are used, the others fall outside.
        let c = Coeffs::new(4, 8, Resample::Bicubic, 0, 8);
        assert_eq!(c.ksize, 5);
        let (xmin, k) = c.get(0);
        assert_eq!((xmin, k.len()), (0, 2));
        let raw = [0.25f64, 1.25].map(|d| Resample::Bicubic.kernel(d));
        let sum: f64 = raw.iter().sum();
        let want: Vec<i32> = raw.iter().map(|w| fixed_point(w / sum)).collect();
        assert_eq!(k, want.as_slice());
        // Interior: all taps used, fixed-point weights sum to about 1.
        let (xmin, k) = c.get(4);
        assert_eq!((xmin, k.len()), (0, 4));
        let s: i32 = k.iter().sum();
        assert!((s - (1 << 22)).abs() <= 2, "{s}");
    }

    #[test]
    fn downscale_widens_support() {
        // 100 -> 10 bicubic: support 2 * 10 = 20, ksize 41; centre of output 5 is 55.
        let c = Coeffs::new(100, 10, Resample::Bicubic, 5, 1);
        assert_eq!(c.ksize, 41);
        assert_eq!(c.bounds[0], (35, 40));
    }

    #[test]
    fn shortest_edge_sizes_truncate() {
        let r = Resize::ShortestEdge(224);
        assert_eq!(r.output_size(480, 640), (224, 298)); // 298.67 -> 298
        assert_eq!(r.output_size(640, 480), (298, 224));
        assert_eq!(r.output_size(12, 1000), (224, 18666));
        assert_eq!(r.output_size(5, 3), (373, 224));
        assert_eq!(r.output_size(1, 1), (224, 224));
        assert_eq!(Resize::ShortestEdge(32).output_size(61, 97), (32, 50));
    }

    #[test]
    fn output_sizes() {
        assert_eq!(ImageProcessor::clip(336).output_size(), (336, 336));
        assert_eq!(ImageProcessor::siglip(384).output_size(), (384, 384));
        let mut p = ImageProcessor::siglip(224);
        p.resize = Resize::ShortestEdge(224);
        assert_eq!(p.fixed_output_size(), None);
        assert_eq!(p.output_size_for(100, 50), (448, 224));
    }

    #[test]
    fn center_crop_pads_like_transformers() {
        // 1x3 image, no resize, crop 3x5: the row lands at top ceil(2/2) = 1, left 1.
        let img = RgbImage::from_fn(3, 1, |x, _| image::Rgb([x as u8 + 1; 3]));
        let mut p = ImageProcessor::clip(3);
        p.do_resize = false;
        p.crop = (3, 5);
        let out = p.resize_and_crop(&img);
        let row: Vec<u8> = (0..5).map(|x| out.get_pixel(x, 1)[0]).collect();
        assert_eq!(row, [0, 1, 2, 3, 0]);
        assert!((0..5).all(|x| out.get_pixel(x, 0)[0] == 0 && out.get_pixel(x, 2)[0] == 0));
        // Odd excess: (3 - 6) // 2 = -2, i.e. padding 2 before, 1 after.
        p.crop = (1, 6);
        let out = p.resize_and_crop(&img);
        let row: Vec<u8> = (0..6).map(|x| out.get_pixel(x, 0)[0]).collect();
        assert_eq!(row, [0, 0, 1, 2, 3, 0]);
    }

    #[test]
    fn composite_over_white() {
        assert_eq!(over_white(17, 0), 255);
        assert_eq!(over_white(17, 255), 17);
        assert_eq!(over_white(0, 128), 127);
        assert_eq!(over_white(200, 1), 255);
    }

    #[test]
    fn value_table_matches_formula() {
        let t = ImageProcessor::clip(224).value_table();
        let want = ((128f64 * (1.0 / 255.0)) as f32 - OPENAI_CLIP_MEAN[1]) / OPENAI_CLIP_STD[1];
        assert_eq!(t[1][128], want);
        let s = ImageProcessor::siglip(224).value_table();
        assert_eq!(s[0][0], -1.0);
        assert_eq!(s[2][255], 1.0);
    }

    #[test]
    fn config_parsing() {
        let p = ImageProcessor::from_config_json(
            r#"{"feature_extractor_type": "CLIPFeatureExtractor", "size": 336, "crop_size": 336,
                "resample": 3, "do_center_crop": true}"#,
        )
        .unwrap();
        assert_eq!(p, ImageProcessor::clip(336));
        let p = ImageProcessor::from_config_json(
            r#"{"image_processor_type": "SiglipImageProcessor", "size": {"height": 384, "width": 384},
                "rescale_factor": 0.00392156862745098, "image_mean": [0.5, 0.5, 0.5]}"#,
        )
        .unwrap();
        assert_eq!(p, ImageProcessor::siglip(384));
        let p = ImageProcessor::from_config_json(
            r#"{"image_processor_type": "SiglipImageProcessor", "size": 224}"#,
        )
        .unwrap();
        assert_eq!(p.resize, Resize::ShortestEdge(224));
        assert_eq!(p.fixed_output_size(), None);
        let p = ImageProcessor::from_config_json(
            r#"{"image_processor_type": "CLIPImageProcessorFast", "image_mean": 0.5, "size": [20, 30], "do_center_crop": null}"#,
        )
        .unwrap();
        assert_eq!(p.mean, [0.5; 3]);
        assert_eq!(
            p.resize,
            Resize::Exact {
                height: 20,
                width: 30
            }
        );
        assert!(!p.do_center_crop);

        let err = |text: &str| match ImageProcessor::from_config_json(text) {
            Err(PreprocessError::Config { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(r#"{"image_processor_type": "ViTImageProcessor"}"#),
            "image_processor_type"
        );
        assert_eq!(
            err(r#"{"processor_class": "CLIPProcessor"}"#),
            "image_processor_type"
        );
        assert_eq!(
            err(r#"{"image_processor_type": "CLIPImageProcessor", "resample": 7}"#),
            "resample"
        );
        assert_eq!(
            err(r#"{"image_processor_type": "CLIPImageProcessor", "size": {"longest_edge": 5}}"#),
            "size"
        );
        assert_eq!(
            err(r#"{"image_processor_type": "CLIPImageProcessor", "crop_size": null}"#),
            "crop_size"
        );
        assert_eq!(
            err(r#"{"image_processor_type": "CLIPImageProcessor", "size": 30.0}"#),
            "size"
        );
        assert_eq!(
            err(r#"{"image_processor_type": "CLIPImageProcessor", "image_std": [1, 2]}"#),
            "image_std"
        );
        assert!(matches!(
            ImageProcessor::from_config_json("[1]"),
            Err(PreprocessError::Json(_))
        ));
    }

    #[test]
    fn nearest_table_matches_pillow_rule() {
        // 3 -> 7: positions 3/14, 9/14, ... truncated.
        let t = nearest_table(3, 7);
        let got: Vec<usize> = t.iter().map(|x| x.unwrap()).collect();
        assert_eq!(got, [0, 0, 1, 1, 1, 2, 2]);
    }
}
