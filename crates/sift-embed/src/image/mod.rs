//! Image preprocessing that reproduces Hugging Face's CLIP and SigLIP image processors.
//!
//! The reference is what `CLIPImageProcessor`, `SiglipImageProcessor` and
//! `AutoImageProcessor.from_pretrained(dir)` do in transformers 5.24 with Pillow 13 when
//! torchvision is not installed: they fall back to the PIL backend (`CLIPImageProcessorPil`,
//! `SiglipImageProcessorPil`). For every output value the result here equals that backend's
//! `pixel_values` (bit for bit on the tested images; the parity test allows 1e-5):
//!
//! 1. [`decode_rgb`]: decode as Pillow decodes (and apply the EXIF orientation as
//!    transformers' `load_image` does with `ImageOps.exif_transpose`), then convert to RGB
//!    as transformers' `convert_to_rgb` does: an
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

mod bmp;
mod decode;
mod exif;
mod jpeg;
mod process;
mod resample;

pub use decode::{
    Alpha, DECODER, DEFAULT_MAX_PIXELS, Decode, decode_image, decode_rgb, decode_rgb_with,
    orientation, over_white,
};
pub use process::{
    IMAGENET_STANDARD_MEAN_STD, ImageProcessor, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, PreprocessError,
    Resize,
};
pub use resample::{PRECISION_BITS, Resample, resize_rgb8};
