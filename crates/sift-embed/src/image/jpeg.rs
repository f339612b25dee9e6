//! A JPEG's header walked marker segment by marker segment, as libjpeg walks it (read by the
//! decoder's fix-ups and by the EXIF orientation).

/// One marker segment of a JPEG's header.
pub(crate) struct JpegSegment<'a> {
    /// The marker (the byte after `FF`).
    pub(crate) marker: u8,
    /// Where its data starts in the file.
    pub(crate) data_at: usize,
    /// Its data (after the two length bytes), cut short where the file ends.
    pub(crate) data: &'a [u8],
    /// Whether the file holds all of the data its length announces.
    pub(crate) complete: bool,
}

/// The marker segments of a JPEG up to its first start-of-scan (or end-of-image): fill
/// bytes and parameterless markers (SOI, TEM, RST) are stepped over, each segment by its
/// length, as libjpeg walks them.
pub(crate) fn jpeg_header_segments(b: &[u8]) -> impl Iterator<Item = JpegSegment<'_>> {
    let mut i = 2;
    std::iter::from_fn(move || {
        while i + 4 <= b.len() {
            if b[i] != 0xFF {
                i += 1;
                continue;
            }
            let marker = b[i + 1];
            match marker {
                0xFF => {
                    i += 1;
                    continue;
                }
                0x01 | 0xD0..=0xD8 => {
                    i += 2;
                    continue;
                }
                0xD9 | 0xDA => return None,
                _ => {}
            }
            let len = u16::from_be_bytes([b[i + 2], b[i + 3]]) as usize;
            let (from, to) = (i + 4, i + 2 + len.max(2));
            let seg = JpegSegment {
                marker,
                data_at: from,
                data: &b[from.min(b.len())..to.min(b.len())],
                complete: to <= b.len(),
            };
            i = to;
            return Some(seg);
        }
        None
    })
}
