//! transformers' CLIP and SigLIP image processors (PIL backend): their settings, read from
//! `preprocessor_config.json` as transformers reads them, and the resize + centre crop +
//! rescale + normalise they apply.
use super::resample::{Resample, Window, resample_window};
use image::RgbImage;
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
    /// the JPEG decoder here would fill the rest with grey): a JPEG without its end-of-image
    /// marker, or an uncompressed BMP short of pixel data.
    #[error("cannot decode image: the file is truncated (Pillow refuses it)")]
    Truncated,
    /// The image's header gives more pixels than the limit (`--max-image-pixels`).
    #[error("a {width}x{height} image, over the limit of {limit} pixels (--max-image-pixels)")]
    TooManyPixels {
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
        /// The limit.
        limit: u64,
    },
    /// A BMP that Pillow refuses too (header type, depth, compression, palette size, or an
    /// image larger than Pillow's decompression-bomb limit).
    #[error("cannot decode BMP: {0}")]
    Bmp(String),
    /// The image cannot be brought to a size the model takes (e.g. an aspect ratio GME's
    /// resize refuses).
    #[error("cannot resize image: {0}")]
    Size(String),
    /// The image needs more tokens than the model's prompt has room for.
    #[error("the image needs {needed} tokens, more than fit in max_length {max_length}")]
    TooManyTokens {
        /// Image tokens the image becomes.
        needed: usize,
        /// The model's prompt limit.
        max_length: usize,
    },
    /// A prepared image does not have the shape this model takes.
    #[error("prepared image of {got} values, expected {expected}")]
    Shape {
        /// Values given.
        got: usize,
        /// Values the model takes.
        expected: usize,
    },
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
    /// Convert to RGB. [`decode_rgb`](super::decode_rgb) always does (as transformers does by default); with an
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

    /// Decodes (as [`super::decode_rgb`]) and preprocesses encoded images in parallel: each
    /// one's model input, or why it does not decode.
    pub fn prepare_all(&self, images: &[&[u8]]) -> Vec<Result<Vec<f32>, PreprocessError>> {
        self.prepare_all_with(images, super::Alpha::OverWhite)
    }

    /// [`ImageProcessor::prepare_all`] with the given treatment of transparency.
    pub fn prepare_all_with(
        &self,
        images: &[&[u8]],
        alpha: super::Alpha,
    ) -> Vec<Result<Vec<f32>, PreprocessError>> {
        use rayon::prelude::*;
        images
            .par_iter()
            .map(|bytes| Ok(self.preprocess(&super::decode_rgb_with(bytes, alpha)?)))
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn value_table_matches_formula() {
        let t = ImageProcessor::clip(224).value_table();
        let want = ((128f64 * (1.0 / 255.0)) as f32 - OPENAI_CLIP_MEAN[1]) / OPENAI_CLIP_STD[1];
        assert_eq!(t[1][128], want);
        let s = ImageProcessor::siglip(224).value_table();
        assert_eq!(s[0][0], -1.0);
        assert_eq!(s[2][255], 1.0);
    }
}
