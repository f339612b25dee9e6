//! Images that come with requests: base64 and data URLs decoded, sizes checked before any
//! pixel is decoded (decompression bombs are refused from their headers), and crops.
use std::io::Cursor;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::error::{ApiError, ErrorKind};

/// Limits on request images.
#[derive(Debug, Clone, Copy)]
pub struct ImageLimits {
    /// Largest encoded image, bytes.
    pub max_bytes: usize,
    /// Largest image, pixels (width x height, read from the header before decoding).
    pub max_pixels: u64,
}

impl Default for ImageLimits {
    fn default() -> Self {
        ImageLimits {
            max_bytes: 16 << 20,
            max_pixels: 40_000_000,
        }
    }
}

/// Standard base64, padded or not.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Decodes `data` (base64, or a `data:image/...;base64,` URL) of request field `field`.
pub fn decode_data(field: &str, data: &str, limits: &ImageLimits) -> Result<Vec<u8>, ApiError> {
    let payload = match data.strip_prefix("data:") {
        Some(rest) => {
            let (header, payload) = rest.split_once(',').ok_or_else(|| {
                ApiError::invalid(field, "a data URL needs a `,` before its payload")
            })?;
            if !header.ends_with(";base64") {
                return Err(ApiError::invalid(
                    field,
                    format!("data URL {header:?}: only base64 data URLs are taken"),
                ));
            }
            payload
        }
        None => data,
    };
    // base64 is 4/3 the size of its bytes: refuse before allocating
    if payload.len() / 4 * 3 > limits.max_bytes.saturating_add(3) {
        return Err(too_large(field, payload.len() / 4 * 3, limits.max_bytes));
    }
    let payload: String = payload.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = BASE64
        .decode(payload.as_bytes())
        .map_err(|e| ApiError::invalid(field, format!("not base64: {e}")))?;
    check_encoded(field, &bytes, limits)?;
    Ok(bytes)
}

/// Checks encoded image bytes of request field `field`: at most `limits.max_bytes`, and
/// what [`check`] checks.
pub fn check_encoded(field: &str, bytes: &[u8], limits: &ImageLimits) -> Result<(), ApiError> {
    if bytes.len() > limits.max_bytes {
        return Err(too_large(field, bytes.len(), limits.max_bytes));
    }
    check(field, bytes, limits).map(|_| ())
}

fn too_large(field: &str, len: usize, max: usize) -> ApiError {
    ApiError {
        kind: ErrorKind::PayloadTooLarge,
        field: Some(field.to_string()),
        message: format!("image of {len} bytes: the limit is {max}"),
    }
}

/// Checks that `bytes` are an image of a known format whose header gives at most
/// `limits.max_pixels` pixels; returns (width, height). Nothing is decoded.
pub fn check(field: &str, bytes: &[u8], limits: &ImageLimits) -> Result<(u32, u32), ApiError> {
    let reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| ApiError::invalid(field, format!("cannot read the image: {e}")))?;
    if reader.format().is_none() {
        return Err(ApiError::invalid(
            field,
            "not an image of a known format (PNG, JPEG, WebP, GIF, BMP)",
        ));
    }
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| ApiError::invalid(field, format!("the image does not decode: {e}")))?;
    let pixels = u64::from(w) * u64::from(h);
    if pixels > limits.max_pixels {
        return Err(ApiError {
            kind: ErrorKind::PayloadTooLarge,
            field: Some(field.to_string()),
            message: format!(
                "a {w}x{h} image ({pixels} pixels): the limit is {} pixels",
                limits.max_pixels
            ),
        });
    }
    if pixels == 0 {
        return Err(ApiError::invalid(field, "the image has no pixels"));
    }
    Ok((w, h))
}

/// The pixels one request's images may have together, charged image by image from their
/// headers before any is decoded: past it, a 413 naming the image.
#[derive(Debug, Clone)]
pub struct PixelBudget {
    max: u64,
    used: u64,
}

impl PixelBudget {
    /// `max` pixels in all.
    pub fn new(max: u64) -> PixelBudget {
        PixelBudget { max, used: 0 }
    }

    /// Charges the image `bytes` of request field `field` (checked as [`check`] does).
    pub fn charge(
        &mut self,
        field: &str,
        bytes: &[u8],
        limits: &ImageLimits,
    ) -> Result<(), ApiError> {
        let (w, h) = check(field, bytes, limits)?;
        let used = self
            .used
            .saturating_add(u64::from(w).saturating_mul(u64::from(h)));
        if used > self.max {
            return Err(ApiError {
                kind: ErrorKind::PayloadTooLarge,
                field: Some(field.to_string()),
                message: format!(
                    "the request's images have {used} pixels with this one: the limit is {} \
                     pixels per request",
                    self.max
                ),
            });
        }
        self.used = used;
        Ok(())
    }
}

/// The region `bbox` (`[x1, y1, x2, y2]` on a 0-1000 scale) of the image `bytes`, as PNG.
pub fn crop(
    field: &str,
    bytes: &[u8],
    bbox: [u32; 4],
    limits: &ImageLimits,
) -> Result<Vec<u8>, ApiError> {
    let [x1, y1, x2, y2] = bbox;
    if x1 >= x2 || y1 >= y2 || x2 > 1000 || y2 > 1000 {
        return Err(ApiError::invalid(
            format!("{field}.bbox"),
            format!(
                "[{x1}, {y1}, {x2}, {y2}]: a box is [x1, y1, x2, y2] with x1 < x2 <= 1000 and \
                 y1 < y2 <= 1000"
            ),
        ));
    }
    let (w, h) = check(field, bytes, limits)?;
    let mut reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| ApiError::invalid(field, format!("cannot read the image: {e}")))?;
    let mut decode_limits = image::Limits::default();
    decode_limits.max_image_width = Some(w);
    decode_limits.max_image_height = Some(h);
    reader.limits(decode_limits);
    let img = reader
        .decode()
        .map_err(|e| ApiError::invalid(field, format!("the image does not decode: {e}")))?;
    let scale = |v: u32, n: u32| (u64::from(v) * u64::from(n) / 1000) as u32;
    let (px1, py1) = (scale(x1, w), scale(y1, h));
    let (px2, py2) = (scale(x2, w).max(px1 + 1), scale(y2, h).max(py1 + 1));
    let cropped = img.crop_imm(px1, py1, (px2 - px1).min(w - px1), (py2 - py1).min(h - py1));
    let mut out = Cursor::new(Vec::new());
    cropped
        .write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| ApiError::new(ErrorKind::Internal, format!("encoding the crop: {e}")))?;
    Ok(out.into_inner())
}

/// The MIME type of an encoded image.
pub fn content_type(bytes: &[u8]) -> &'static str {
    image::guess_format(bytes)
        .map(|f| f.to_mime_type())
        .unwrap_or("application/octet-stream")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_pixel(w, h, image::Rgb([10, 200, 30]));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn data_urls_and_plain_base64_decode() {
        let bytes = png(4, 3);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let limits = ImageLimits::default();
        assert_eq!(decode_data("data", &b64, &limits).unwrap(), bytes);
        let url = format!("data:image/png;base64,{b64}");
        assert_eq!(decode_data("data", &url, &limits).unwrap(), bytes);
        let e = decode_data("images[0].data", "data:image/png,abc", &limits).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("images[0].data"));
        let e = decode_data("data", "!!!", &limits).unwrap_err();
        assert!(e.message.contains("base64"), "{e}");
        let e = decode_data("data", "aGVsbG8=", &limits).unwrap_err();
        assert!(e.message.contains("known format"), "{e}");
    }

    #[test]
    fn oversized_headers_are_refused_before_decoding() {
        // a 1x1 PNG whose header claims 100,000 x 100,000 pixels
        let mut bytes = png(1, 1);
        bytes[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        bytes[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        // the IHDR chunk's CRC (over its type and data, bytes 12..29)
        let crc = crc32fast::hash(&bytes[12..29]);
        bytes[29..33].copy_from_slice(&crc.to_be_bytes());
        let e = check("data", &bytes, &ImageLimits::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::PayloadTooLarge, "{e}");
        let small = ImageLimits {
            max_bytes: 10,
            max_pixels: 1,
        };
        let e = decode_data(
            "data",
            &base64::engine::general_purpose::STANDARD.encode(png(2, 2)),
            &small,
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::PayloadTooLarge, "{e}");
    }

    #[test]
    fn a_request_budget_bounds_the_pixels_of_all_its_images() {
        let limits = ImageLimits::default();
        let mut budget = PixelBudget::new(250);
        budget.charge("input[0]", &png(10, 10), &limits).unwrap();
        budget.charge("input[1]", &png(10, 10), &limits).unwrap();
        let e = budget
            .charge("input[2]", &png(10, 10), &limits)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::PayloadTooLarge);
        assert_eq!(e.field.as_deref(), Some("input[2]"));
        assert!(e.message.contains("250 pixels per request"), "{e}");
        // a refused image is not counted
        budget.charge("input[3]", &png(5, 10), &limits).unwrap();
    }

    #[test]
    fn crops_follow_the_thousandths_box() {
        let bytes = png(200, 100);
        let out = crop("data", &bytes, [0, 0, 500, 1000], &ImageLimits::default()).unwrap();
        let img = image::load_from_memory(&out).unwrap();
        assert_eq!((img.width(), img.height()), (100, 100));
        let e = crop("img", &bytes, [500, 0, 500, 10], &ImageLimits::default()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("img.bbox"));
        let e = crop("img", &bytes, [0, 0, 1001, 10], &ImageLimits::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidRequest);
    }
}
