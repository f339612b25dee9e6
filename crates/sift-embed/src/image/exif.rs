//! The orientation `PIL.ImageOps.exif_transpose` applies (transformers' `load_image` calls it
//! on every image it opens): the EXIF Orientation tag of IFD0, else the first
//! `tiff:Orientation` of the XMP packet, read where Pillow's plugins put them in `info`.
//!
//! - JPEG: APP1 `Exif\0\0` segments (concatenated, as Pillow does), the last APP1 XMP packet.
//! - PNG: the last `eXIf` chunk, else the hex dump of a `Raw profile type exif` text chunk
//!   (tEXt, zTXt or iTXt, ImageMagick's way); XMP from the `XML:com.adobe.xmp` iTXt chunk.
//! - WebP: the `EXIF` and `XMP ` chunks.
//!
//! GIF and BMP carry no orientation Pillow reads (GIF's XMP application extension aside).
use image::ImageFormat;
use std::io::Read;

/// The tag Pillow reads (`ExifTags.Base.Orientation`).
const ORIENTATION: u16 = 0x0112;

/// What Pillow's `info` holds that decides the orientation.
#[derive(Default)]
struct Meta {
    exif: Option<Vec<u8>>,
    /// PNG's `Raw profile type exif` text (only looked at without `exif`).
    raw_profile: Option<Vec<u8>>,
    /// PNG's `XML:com.adobe.xmp` iTXt value, read before `xmp`.
    png_xmp: Option<Vec<u8>>,
    xmp: Option<Vec<u8>>,
}

/// EXIF orientation 1-8 as `exif_transpose` reads it; 1 (nothing to do) when absent or
/// unreadable.
pub(super) fn orientation(bytes: &[u8], format: ImageFormat) -> u8 {
    let meta = match format {
        ImageFormat::Jpeg => jpeg_meta(bytes),
        ImageFormat::Png => png_meta(bytes),
        ImageFormat::WebP => webp_meta(bytes),
        _ => return 1,
    };
    let mut exif = meta.exif;
    if exif.is_none() {
        exif = meta.raw_profile.as_deref().and_then(raw_profile_hex);
    }
    let tag = exif.as_deref().and_then(tiff_orientation).or_else(|| {
        let xmp = meta.png_xmp.as_deref().or(meta.xmp.as_deref())?;
        xmp_orientation(xmp)
    });
    match tag {
        Some(v @ 1..=8) => v as u8,
        _ => 1,
    }
}

fn jpeg_meta(b: &[u8]) -> Meta {
    let mut meta = Meta::default();
    for seg in super::jpeg::jpeg_header_segments(b) {
        if !seg.complete {
            break;
        }
        let s = seg.data;
        if seg.marker == 0xE1 {
            if s.starts_with(b"Exif\0\0") {
                match &mut meta.exif {
                    Some(e) => e.extend_from_slice(&s[6..]),
                    None => meta.exif = Some(s.to_vec()),
                }
            } else if let Some(x) = s.strip_prefix(b"http://ns.adobe.com/xap/1.0/\0") {
                meta.xmp = Some(x.to_vec());
            }
        }
    }
    meta
}

fn png_meta(b: &[u8]) -> Meta {
    let mut meta = Meta::default();
    let mut pos = 8;
    while pos + 8 <= b.len() {
        let len = u32::from_be_bytes([b[pos], b[pos + 1], b[pos + 2], b[pos + 3]]) as usize;
        let kind = &b[pos + 4..pos + 8];
        let Some(data) = b.get(pos + 8..(pos + 8).saturating_add(len)) else {
            break;
        };
        match kind {
            b"IEND" => break,
            b"eXIf" => {
                let mut e = b"Exif\0\0".to_vec();
                e.extend_from_slice(data);
                meta.exif = Some(e);
            }
            b"tEXt" | b"zTXt" | b"iTXt" => {
                if let Some((key, value)) = png_text(kind, data) {
                    match key {
                        b"Raw profile type exif" => meta.raw_profile = Some(value),
                        b"exif" if kind == b"tEXt" => meta.exif = Some(value),
                        b"XML:com.adobe.xmp" if kind == b"iTXt" => {
                            meta.png_xmp =
                                std::str::from_utf8(&value).is_ok().then(|| value.clone());
                            meta.xmp = Some(value);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        pos = pos + 12 + len;
    }
    meta
}

/// Key and (decompressed) value of a PNG text chunk, as Pillow reads them.
fn png_text<'a>(kind: &[u8], data: &'a [u8]) -> Option<(&'a [u8], Vec<u8>)> {
    let nul = data.iter().position(|&c| c == 0);
    let (key, rest) = match nul {
        Some(n) => (&data[..n], &data[n + 1..]),
        None if kind == b"tEXt" => (data, &[][..]),
        None => return None,
    };
    let value = match kind {
        b"tEXt" => rest.to_vec(),
        b"zTXt" => {
            let (&method, z) = rest.split_first()?;
            if method != 0 {
                return None;
            }
            inflate(z).unwrap_or_default()
        }
        _ => {
            // iTXt: compression flag and method, language tag, translated keyword, text
            let (&flag, rest) = rest.split_first()?;
            let (&method, rest) = rest.split_first()?;
            let mut parts = rest.splitn(3, |&c| c == 0);
            let (_lang, _tk, text) = (parts.next()?, parts.next()?, parts.next()?);
            match (flag, method) {
                (0, _) => text.to_vec(),
                (_, 0) => inflate(text)?,
                _ => return None,
            }
        }
    };
    Some((key, value))
}

/// zlib data, at most Pillow's `MAX_TEXT_CHUNK` (1 MiB) of it.
fn inflate(z: &[u8]) -> Option<Vec<u8>> {
    const MAX_TEXT_CHUNK: u64 = 1 << 20;
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(z)
        .take(MAX_TEXT_CHUNK + 1)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() as u64 <= MAX_TEXT_CHUNK).then_some(out)
}

/// `bytes.fromhex("".join(value.split("\n")[3:]))`: ImageMagick's "\nexif\n  len\nhex...".
fn raw_profile_hex(value: &[u8]) -> Option<Vec<u8>> {
    let mut lines = value.split(|&c| c == b'\n');
    for _ in 0..3 {
        lines.next()?;
    }
    let digits: Vec<u8> = lines
        .flatten()
        .copied()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    digits
        .chunks_exact(2)
        .map(|p| Some(hex(p[0])? << 4 | hex(p[1])?))
        .collect()
}

fn webp_meta(b: &[u8]) -> Meta {
    let mut meta = Meta::default();
    if b.len() < 12 || &b[..4] != b"RIFF" || &b[8..12] != b"WEBP" {
        return meta;
    }
    let mut pos = 12;
    while pos + 8 <= b.len() {
        let len = u32::from_le_bytes([b[pos + 4], b[pos + 5], b[pos + 6], b[pos + 7]]) as usize;
        let Some(data) = b.get(pos + 8..(pos + 8).saturating_add(len)) else {
            break;
        };
        match &b[pos..pos + 4] {
            b"EXIF" => meta.exif = Some(data.to_vec()),
            b"XMP " => meta.xmp = Some(data.to_vec()),
            _ => {}
        }
        pos = pos + 8 + len + (len & 1);
    }
    meta
}

/// The Orientation entry of IFD0 of EXIF data (`Exif\0\0` prefixes stripped, as
/// `Image.Exif.load` does); entries read before the directory is cut short count, as in
/// Pillow. Only a single SHORT / LONG / SSHORT / SLONG value is a number there.
fn tiff_orientation(mut data: &[u8]) -> Option<u32> {
    while let Some(rest) = data.strip_prefix(b"Exif\0\0") {
        data = rest;
    }
    let big = match data.get(..4)? {
        b"II*\0" => false,
        b"MM\0*" => true,
        _ => return None,
    };
    let u16_at = |at: usize| {
        let b = data.get(at..at + 2)?;
        Some(if big {
            u16::from_be_bytes([b[0], b[1]])
        } else {
            u16::from_le_bytes([b[0], b[1]])
        })
    };
    let u32_at = |at: usize| {
        let b = data.get(at..at + 4)?;
        let b = [b[0], b[1], b[2], b[3]];
        Some(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let ifd = u32_at(4)? as usize;
    let count = u16_at(ifd)? as usize;
    let mut found = None;
    for k in 0..count {
        let e = ifd + 2 + 12 * k;
        let (Some(tag), Some(typ), Some(n)) = (u16_at(e), u16_at(e + 2), u32_at(e + 4)) else {
            break;
        };
        if tag != ORIENTATION {
            continue;
        }
        found = match (typ, n) {
            (3, 1) => u16_at(e + 8).map(u32::from),
            (8, 1) => u16_at(e + 8).map(|v| v as i16 as i32 as u32),
            (4 | 9, 1) => u32_at(e + 8),
            _ => None,
        };
    }
    found
}

/// Pillow's `tiff:Orientation(="|>)([0-9])`, first match.
fn xmp_orientation(xmp: &[u8]) -> Option<u32> {
    const KEY: &[u8] = b"tiff:Orientation";
    let mut from = 0;
    while let Some(at) = xmp[from..].windows(KEY.len()).position(|w| w == KEY) {
        let rest = &xmp[from + at + KEY.len()..];
        let digit = match rest {
            [b'=', b'"', d, ..] | [b'>', d, ..] if d.is_ascii_digit() => Some(d),
            _ => None,
        };
        if let Some(d) = digit {
            return Some((d - b'0') as u32);
        }
        from += at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiff(big: bool, entries: &[(u16, u16, u32, u32)]) -> Vec<u8> {
        type Put16 = fn(u16) -> [u8; 2];
        type Put32 = fn(u32) -> [u8; 4];
        let (w16, w32): (Put16, Put32) = if big {
            (u16::to_be_bytes, u32::to_be_bytes)
        } else {
            (u16::to_le_bytes, u32::to_le_bytes)
        };
        let mut t = if big {
            b"MM\0*".to_vec()
        } else {
            b"II*\0".to_vec()
        };
        t.extend(w32(8));
        t.extend(w16(entries.len() as u16));
        for &(tag, typ, n, v) in entries {
            t.extend(w16(tag));
            t.extend(w16(typ));
            t.extend(w32(n));
            if typ == 3 {
                t.extend(w16(v as u16));
                t.extend([0, 0]);
            } else {
                t.extend(w32(v));
            }
        }
        t
    }

    #[test]
    fn exif_orientation_in_either_byte_order() {
        for big in [false, true] {
            let t = tiff(big, &[(0x010F, 2, 4, 0), (ORIENTATION, 3, 1, 6)]);
            assert_eq!(tiff_orientation(&t), Some(6));
            let mut e = b"Exif\0\0".to_vec();
            e.extend(&t);
            assert_eq!(tiff_orientation(&e), Some(6));
            // two values: not a number to Pillow
            assert_eq!(
                tiff_orientation(&tiff(big, &[(ORIENTATION, 3, 2, 6)])),
                None
            );
            assert_eq!(
                tiff_orientation(&tiff(big, &[(ORIENTATION, 4, 1, 8)])),
                Some(8)
            );
        }
        // a directory cut short keeps the entries before the cut
        let mut t = tiff(false, &[(ORIENTATION, 3, 1, 3), (0x0110, 2, 4, 0)]);
        t.truncate(t.len() - 6);
        assert_eq!(tiff_orientation(&t), Some(3));
        assert_eq!(tiff_orientation(b"Exif\0\0XX"), None);
    }

    #[test]
    fn jpeg_png_webp_sources() {
        let t = tiff(true, &[(ORIENTATION, 3, 1, 5)]);
        // JPEG: APP1 Exif after APP0
        let mut j = vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xE1];
        j.extend(((t.len() + 8) as u16).to_be_bytes());
        j.extend(b"Exif\0\0");
        j.extend(&t);
        j.extend([0xFF, 0xDA, 0, 2]);
        assert_eq!(orientation(&j, ImageFormat::Jpeg), 5);
        // JPEG: XMP only
        let x = b"http://ns.adobe.com/xap/1.0/\0<x tiff:Orientation=\"7\"/>";
        let mut j = vec![0xFF, 0xD8, 0xFF, 0xE1];
        j.extend(((x.len() + 2) as u16).to_be_bytes());
        j.extend(x);
        assert_eq!(orientation(&j, ImageFormat::Jpeg), 7);
        // PNG: ImageMagick's raw profile, after IDAT
        let hex: String = t.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("Raw profile type exif\0\nexif\n{:8}\n{hex}\n", t.len());
        let mut p = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in [(&b"IDAT"[..], &b""[..]), (b"tEXt", text.as_bytes())] {
            p.extend((data.len() as u32).to_be_bytes());
            p.extend(kind);
            p.extend(data);
            p.extend([0; 4]);
        }
        assert_eq!(orientation(&p, ImageFormat::Png), 5);
        // WebP: EXIF chunk
        let mut w = b"RIFF\0\0\0\0WEBPEXIF".to_vec();
        w.extend((t.len() as u32).to_le_bytes());
        w.extend(&t);
        assert_eq!(orientation(&w, ImageFormat::WebP), 5);
        assert_eq!(orientation(&w[..w.len() - 1], ImageFormat::WebP), 1);
    }

    #[test]
    fn xmp_patterns() {
        assert_eq!(
            xmp_orientation(b"<tiff:Orientation>3</tiff:Orientation>"),
            Some(3)
        );
        assert_eq!(
            xmp_orientation(b"tiff:Orientation=\"x\" tiff:Orientation=\"2\""),
            Some(2)
        );
        assert_eq!(xmp_orientation(b"tiff:Orientation"), None);
    }
}
