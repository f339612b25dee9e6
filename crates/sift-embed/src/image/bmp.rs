//! Palette BMPs (1, 4 and 8 bits per pixel: uncompressed, RLE8, RLE4) read as Pillow's
//! `BmpImagePlugin` reads them, where the `image` crate refuses or differs: the planes field
//! is ignored, OS/2 v2 (64-byte) headers are read, a pixel-data offset that points at the
//! palette is moved past it, RLE bitmaps may be top-down, and the pixels an RLE stream skips
//! (delta, end of line, end of bitmap) are palette index 0 rather than transparent. Other
//! depths (16, 24, 32 bits, bit fields) are left to the `image` crate, which reads them as
//! Pillow does.
use image::RgbImage;

use super::PreprocessError;

/// Pillow's `MAX_IMAGE_PIXELS * 2`: larger images are refused (`DecompressionBombError`).
pub(super) const MAX_PIXELS: u64 = 2 * 89_478_485;

fn err(msg: impl Into<String>) -> PreprocessError {
    PreprocessError::Bmp(msg.into())
}

fn le16(b: &[u8], at: usize) -> u32 {
    u16::from_le_bytes([b[at], b[at + 1]]) as u32
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decodes `bytes` (a `BM` file) when it is a palette image; `Ok(None)` for the depths the
/// `image` crate reads. Errors where Pillow raises.
pub(super) fn decode_palette_bmp(bytes: &[u8]) -> Result<Option<RgbImage>, PreprocessError> {
    if bytes.len() < 18 || &bytes[..2] != b"BM" {
        return Err(err("not a BMP file"));
    }
    let offset = le32(bytes, 10) as usize;
    let header_size = le32(bytes, 14) as usize;
    let header = bytes
        .get(18..14usize.saturating_add(header_size.max(4)))
        .ok_or_else(|| err("truncated header"))?;
    let (width, height, bits, compression, colors, padding, top_down);
    match header_size {
        12 => {
            width = le16(header, 0);
            height = le16(header, 2);
            bits = le16(header, 6);
            compression = 0;
            colors = 0;
            padding = 3;
            top_down = false;
        }
        40 | 52 | 56 | 64 | 108 | 124 => {
            top_down = header[7] == 0xFF;
            width = le32(header, 0);
            let h = le32(header, 4);
            height = if top_down { h.wrapping_neg() } else { h };
            bits = le16(header, 10);
            compression = le32(header, 12);
            colors = le32(header, 28);
            padding = 4;
        }
        n => return Err(err(format!("unsupported BMP header type ({n})"))),
    }
    if width == 0 || height == 0 {
        return Err(err("empty image"));
    }
    if width as u64 * height as u64 > MAX_PIXELS {
        return Err(err(format!(
            "image of {width} x {height} pixels is too large"
        )));
    }
    match bits {
        1 | 4 | 8 => {}
        16 | 24 | 32 if compression != 3 || bitfields_supported(bytes, header, bits) => {
            // the image crate reads these as Pillow does
            return Ok(None);
        }
        16 | 24 | 32 => return Err(err("unsupported BMP bitfields layout")),
        b => return Err(err(format!("unsupported BMP pixel depth ({b})"))),
    }
    let colors = if colors == 0 { 1u32 << bits } else { colors };
    let rle4 = match compression {
        0 => None,
        1 => Some(false),
        2 => Some(true),
        3 => return Err(err("unsupported BMP bitfields layout")),
        c => return Err(err(format!("unsupported BMP compression ({c})"))),
    };
    if !(1..=65536).contains(&colors) {
        return Err(err(format!("unsupported BMP palette size ({colors})")));
    }
    // The palette follows the header; Pillow reads what there is of it.
    let pal_start = (14 + header_size).min(bytes.len());
    let pal_end = pal_start
        .saturating_add(padding * colors as usize)
        .min(bytes.len());
    let palette = &bytes[pal_start..pal_end];
    let entries = palette.len() / padding;
    if entries > 256 {
        return Err(err("invalid palette size"));
    }
    // Pillow keeps a palette of grey levels i (or black and white for two colours) as an
    // "L" (or "1") image of the raw indices; otherwise unlisted indices are black.
    let ramp: Vec<u8> = if colors == 2 {
        vec![0, 255]
    } else {
        (0..colors).map(|i| i as u8).collect()
    };
    let grey = ramp
        .iter()
        .enumerate()
        .all(|(i, &v)| palette.get(i * padding..i * padding + 3) == Some(&[v, v, v][..]));
    let mut table = [[0u8; 3]; 256];
    for (i, t) in table.iter_mut().enumerate() {
        if grey {
            let v = if colors <= 2 && i != 0 { 255 } else { i as u8 };
            *t = [v, v, v];
        } else if i < entries {
            let p = &palette[i * padding..];
            *t = [p[2], p[1], p[0]];
        }
    }
    // Pixel data: Pillow moves an offset that points just past the header over the palette.
    let mut data_at = if offset == 0 { pal_end } else { offset };
    if offset == 14 + header_size {
        data_at = data_at.saturating_add(padding * colors as usize);
    }
    let (w, h) = (width as usize, height as usize);
    let indices = match rle4 {
        None => unpack_raw(bytes, data_at, w, h, bits)?,
        Some(rle4) => decode_rle(bytes, data_at, w, h, rle4),
    };
    let mut img = RgbImage::new(width, height);
    for (y, row) in indices.chunks_exact(w.max(1)).take(h).enumerate() {
        // rows are stored bottom-up unless the height was negative
        let y = if top_down { y } else { h - 1 - y };
        for (x, &i) in row.iter().enumerate() {
            img.put_pixel(x as u32, y as u32, image::Rgb(table[i as usize]));
        }
    }
    Ok(Some(img))
}

/// Whether Pillow reads a BI_BITFIELDS image of `bits` with its masks: the masks follow a
/// 40-byte header (no alpha mask) or sit in a longer one.
fn bitfields_supported(bytes: &[u8], header: &[u8], bits: u32) -> bool {
    let masks: [u32; 4] = if header.len() >= 48 {
        let a = if header.len() >= 52 {
            le32(header, 48)
        } else {
            0
        };
        [le32(header, 36), le32(header, 40), le32(header, 44), a]
    } else {
        let Some(m) = bytes.get(14 + 4 + header.len()..14 + 4 + header.len() + 12) else {
            return false;
        };
        [le32(m, 0), le32(m, 4), le32(m, 8), 0]
    };
    let rgb = [masks[0], masks[1], masks[2]];
    match bits {
        32 => [
            [0xFF0000, 0xFF00, 0xFF, 0x0],
            [0xFF000000, 0xFF0000, 0xFF00, 0x0],
            [0xFF000000, 0xFF00, 0xFF, 0x0],
            [0xFF000000, 0xFF0000, 0xFF00, 0xFF],
            [0xFF, 0xFF00, 0xFF0000, 0xFF000000],
            [0xFF0000, 0xFF00, 0xFF, 0xFF000000],
            [0xFF000000, 0xFF00, 0xFF, 0xFF0000],
            [0x0, 0x0, 0x0, 0x0],
        ]
        .contains(&masks),
        24 => rgb == [0xFF0000, 0xFF00, 0xFF],
        _ => rgb == [0xF800, 0x7E0, 0x1F] || rgb == [0x7C00, 0x3E0, 0x1F],
    }
}

/// Uncompressed rows (padded to 4 bytes) unpacked to one index per pixel, in file order.
fn unpack_raw(
    bytes: &[u8],
    at: usize,
    w: usize,
    h: usize,
    bits: u32,
) -> Result<Vec<u8>, PreprocessError> {
    let stride = ((w as u64 * bits as u64 + 31) >> 3) & !3;
    // Pillow's raw decoder does not wait for the last row's padding
    let need = stride * (h as u64 - 1) + (w as u64 * bits as u64).div_ceil(8);
    let data = bytes.get(at..).unwrap_or(&[]);
    if (data.len() as u64) < need {
        return Err(PreprocessError::Truncated);
    }
    let stride = stride as usize;
    let mut out = Vec::with_capacity(w * h);
    for y in 0..h {
        let row = &data[y * stride..];
        match bits {
            8 => out.extend_from_slice(&row[..w]),
            4 => out.extend((0..w).map(|x| (row[x / 2] >> (4 - 4 * (x % 2))) & 0x0F)),
            _ => out.extend((0..w).map(|x| (row[x / 8] >> (7 - x % 8)) & 1)),
        }
    }
    out.resize(w * h, 0);
    Ok(out)
}

/// Pillow's `BmpRleDecoder`: the indices in file order (bottom row first unless top-down),
/// index 0 where the stream skips pixels or ends early. Word alignment after an absolute run
/// is relative to the start of the file, as Pillow's file position is.
fn decode_rle(bytes: &[u8], at: usize, w: usize, h: usize, rle4: bool) -> Vec<u8> {
    let dest = w * h;
    let mut data: Vec<u8> = Vec::with_capacity(dest);
    let mut pos = at.min(bytes.len());
    let mut x = 0usize;
    while data.len() < dest {
        let (Some(&n), Some(&byte)) = (bytes.get(pos), bytes.get(pos + 1)) else {
            break;
        };
        pos += 2;
        let n = n as usize;
        if n != 0 {
            // encoded run, cut at the end of the row
            let n = if x + n > w { w.saturating_sub(x) } else { n };
            if rle4 {
                let pair = [byte >> 4, byte & 0x0F];
                data.extend((0..n).map(|i| pair[i % 2]));
            } else {
                data.extend(std::iter::repeat_n(byte, n));
            }
            x += n;
        } else {
            match byte {
                0 => {
                    // end of line
                    let rem = data.len() % w.max(1);
                    if rem != 0 {
                        data.resize(data.len() + w - rem, 0);
                    }
                    x = 0;
                }
                1 => break,
                2 => {
                    let (Some(&right), Some(&up)) = (bytes.get(pos), bytes.get(pos + 1)) else {
                        break;
                    };
                    pos += 2;
                    let skip = (right as usize + up as usize * w).min(dest - data.len());
                    data.resize(data.len() + skip, 0);
                    x = data.len() % w.max(1);
                }
                count => {
                    // absolute run (not cut at the end of the row)
                    let count_px = (count as usize).min(dest - data.len());
                    let want = if rle4 { count_px.div_ceil(2) } else { count_px };
                    let end = pos.saturating_add(want).min(bytes.len());
                    let run = &bytes[pos..end];
                    pos = end;
                    if rle4 {
                        for (i, &b) in run.iter().enumerate() {
                            data.push(b >> 4);
                            if i * 2 + 1 < count_px {
                                data.push(b & 0x0F);
                            }
                        }
                    } else {
                        data.extend_from_slice(run);
                    }
                    if run.len() < want || data.len() == dest {
                        break;
                    }
                    x += count as usize;
                    if !pos.is_multiple_of(2) {
                        pos += 1;
                    }
                }
            }
        }
    }
    data.resize(dest, 0);
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `BM` file with a BITMAPINFOHEADER, the given palette (BGRX) and pixel data.
    fn bmp(w: i32, h: i32, bits: u16, compression: u32, palette: &[[u8; 3]], px: &[u8]) -> Vec<u8> {
        let off = 14 + 40 + 4 * palette.len();
        let mut b = b"BM".to_vec();
        b.extend((off + px.len()).to_le_bytes()[..4].iter());
        b.extend([0; 4]);
        b.extend((off as u32).to_le_bytes());
        b.extend(40u32.to_le_bytes());
        b.extend(w.to_le_bytes());
        b.extend(h.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(bits.to_le_bytes());
        b.extend(compression.to_le_bytes());
        b.extend((px.len() as u32).to_le_bytes());
        b.extend([0; 8]);
        b.extend((palette.len() as u32).to_le_bytes());
        b.extend([0; 4]);
        for p in palette {
            b.extend([p[2], p[1], p[0], 0]);
        }
        b.extend(px);
        b
    }

    const PAL: [[u8; 3]; 3] = [[10, 20, 30], [200, 0, 0], [0, 0, 250]];

    fn rows(img: &RgbImage) -> Vec<Vec<[u8; 3]>> {
        (0..img.height())
            .map(|y| (0..img.width()).map(|x| img.get_pixel(x, y).0).collect())
            .collect()
    }

    #[test]
    fn rle8_runs_deltas_and_end_of_line_as_pillow() {
        // 5 x 2, bottom-up: row 1 (bottom) = run of 3 x index 1, end of line; row 0 = delta
        // right 1, absolute [2, 1, 2] (padded to a word), end of bitmap (the rest index 0).
        let px = [3, 1, 0, 0, 0, 2, 1, 0, 0, 3, 2, 1, 2, 0, 0, 1];
        let img = decode_palette_bmp(&bmp(5, 2, 8, 1, &PAL, &px))
            .unwrap()
            .unwrap();
        let [a, r, b] = PAL;
        assert_eq!(rows(&img), vec![vec![a, b, r, b, a], vec![r, r, r, a, a]]);
        // top-down: the same stream fills the top row first
        let img = decode_palette_bmp(&bmp(5, -2, 8, 1, &PAL, &px))
            .unwrap()
            .unwrap();
        assert_eq!(rows(&img), vec![vec![r, r, r, a, a], vec![a, b, r, b, a]]);
    }

    #[test]
    fn rle4_alternates_nibbles_and_cuts_runs_at_the_row_end() {
        // 3 x 1: run of 5 (cut to 3) of nibbles 1, 2 -> [1, 2, 1]
        let img = decode_palette_bmp(&bmp(3, 1, 4, 2, &PAL, &[5, 0x12, 0, 1]))
            .unwrap()
            .unwrap();
        let [_, r, b] = PAL;
        assert_eq!(rows(&img), vec![vec![r, b, r]]);
        // absolute run of 3 nibbles in 2 bytes: [2, 1, 2]
        let img = decode_palette_bmp(&bmp(3, 1, 4, 2, &PAL, &[0, 3, 0x21, 0x20, 0, 1]))
            .unwrap()
            .unwrap();
        assert_eq!(rows(&img), vec![vec![b, r, b]]);
    }

    #[test]
    fn raw_palette_rows_planes_ignored_offset_past_palette() {
        // 2 x 2, 1 bit: bottom row [1, 0], top row [0, 1], rows padded to 4 bytes
        let mut b = bmp(2, 2, 1, 0, &PAL[1..], &[0x80, 0, 0, 0, 0x40, 0, 0, 0]);
        b[26] = 7; // planes: Pillow ignores them
        let img = decode_palette_bmp(&b).unwrap().unwrap();
        let [_, r, bl] = PAL;
        assert_eq!(rows(&img), vec![vec![r, bl], vec![bl, r]]);
        // an offset pointing at the palette is moved past it
        b[10] = 54;
        assert_eq!(rows(&decode_palette_bmp(&b).unwrap().unwrap()), rows(&img));
        // the last row's padding may be missing, not more (Pillow: "image file is truncated")
        let img2 = decode_palette_bmp(&b[..b.len() - 3]).unwrap().unwrap();
        assert_eq!(rows(&img2), rows(&img));
        let short = &b[..b.len() - 4];
        assert!(matches!(
            decode_palette_bmp(short),
            Err(PreprocessError::Truncated)
        ));
    }

    #[test]
    fn grey_ramp_palette_reads_indices_as_grey_and_others_go_to_the_image_crate() {
        let ramp: Vec<[u8; 3]> = (0..4).map(|i| [i, i, i]).collect();
        let img = decode_palette_bmp(&bmp(2, 1, 8, 0, &ramp, &[9, 3, 0, 0]))
            .unwrap()
            .unwrap();
        assert_eq!(rows(&img), vec![vec![[9, 9, 9], [3, 3, 3]]]);
        assert!(
            decode_palette_bmp(&bmp(1, 1, 24, 0, &[], &[1, 2, 3, 0]))
                .unwrap()
                .is_none()
        );
        assert!(decode_palette_bmp(&bmp(1, 1, 8, 3, &PAL, &[0; 4])).is_err());
        assert!(decode_palette_bmp(&bmp(1, 1, 2, 0, &PAL, &[0; 4])).is_err());
        // bit fields Pillow does not know (5-6-5 swapped), as Pillow refuses them
        let mut b = bmp(1, 1, 16, 3, &[], &[0; 16]);
        b[54..58].copy_from_slice(&0x1Fu32.to_le_bytes());
        assert!(decode_palette_bmp(&b).is_err());
        b[54..66].copy_from_slice(&[0, 0xF8, 0, 0, 0xE0, 0x07, 0, 0, 0x1F, 0, 0, 0]);
        assert!(decode_palette_bmp(&b).unwrap().is_none());
        assert!(decode_palette_bmp(&bmp(70_000, 70_000, 8, 1, &PAL, &[0, 1])).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let base = bmp(
            5,
            3,
            4,
            2,
            &PAL,
            &[0, 2, 9, 9, 4, 0x12, 0, 7, 0xAB, 0, 0, 0, 0, 1],
        );
        for cut in 0..base.len() {
            let _ = decode_palette_bmp(&base[..cut]);
        }
        for i in 0..base.len() {
            for v in [0u8, 1, 2, 0x7F, 0xFF] {
                let mut b = base.clone();
                b[i] = v;
                let _ = decode_palette_bmp(&b);
            }
        }
    }
}
