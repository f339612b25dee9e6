//! Embedding cache: `INDEX/embed-cache/<slug>.bin`, outside the generations so that
//! rebuilding an index re-embeds only passages whose text (or model settings) changed.
//!
//! The file is a header (`SIFTVEC2`, the dimension as a little-endian u32) and a sequence
//! of records `key (16 bytes, xxh3-128 of embedder fingerprint and text) | dim little-endian
//! f32 | checksum (8 bytes, the low half of xxh3-128 of key and vector)`. It is only appended to; a record
//! cut short by a crash is ignored (and overwritten) on the next load. A record whose
//! checksum does not match (flipped bits, a file edited or damaged) or whose vector is not
//! finite is rejected: it is counted ([`EmbedCache::rejected`]), its passage or image is
//! embedded again, and the file is rewritten without it. A file with another header (an
//! older format, another dimension, a damaged header) is started afresh.
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// First bytes of a cache file of this format.
const MAGIC: &[u8; 8] = b"SIFTVEC2";
/// Header: magic and dimension.
const HEADER: usize = 12;

/// Cached vectors of one embedder.
pub(crate) struct EmbedCache {
    path: PathBuf,
    dim: usize,
    fingerprint: String,
    data: Vec<u8>,
    index: HashMap<u128, usize>,
    file: File,
    rejected: u64,
}

fn header(dim: usize) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&(dim as u32).to_le_bytes());
    h
}

/// The low 64 bits of xxh3-128 (the variant already in the build) of a record's key and
/// vector.
fn checksum(key_and_vector: &[u8]) -> u64 {
    twox_hash::XxHash3_128::oneshot(key_and_vector) as u64
}

impl EmbedCache {
    pub(crate) fn open(path: &Path, fingerprint: &str, dim: usize) -> Result<EmbedCache> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let record = 16 + 4 * dim + 8;
        let head = header(dim);
        // guarded: a FIFO or device in the cache's place is refused, not read forever
        let mut data = sift_core::read_regular_file_if_exists(path, u64::MAX)?.unwrap_or_default();
        if !data.starts_with(&head) {
            data.clear();
        }
        let whole = if data.is_empty() {
            0
        } else {
            HEADER + (data.len() - HEADER) / record * record
        };
        data.truncate(whole);
        // every record checked once: a damaged one is left out and the file rewritten
        let mut good = Vec::with_capacity(data.len().max(HEADER));
        good.extend_from_slice(&head);
        let mut rejected = 0u64;
        let mut index = HashMap::with_capacity(data.len() / record);
        for rec in data.get(HEADER..).unwrap_or(&[]).chunks_exact(record) {
            let (body, sum) = rec.split_at(16 + 4 * dim);
            let sum_ok = checksum(body) == u64::from_le_bytes(sum.try_into().expect("8 bytes"));
            let finite = body[16..]
                .chunks_exact(4)
                .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite());
            if !(sum_ok && finite) {
                rejected += 1;
                continue;
            }
            let key = u128::from_le_bytes(body[..16].try_into().expect("16 bytes"));
            index.insert(key, good.len() + 16);
            good.extend_from_slice(rec);
        }
        let rewrite = good.len() != whole;
        let file = if rewrite {
            // the checked records, written beside the cache and renamed over it
            let tmp = path.with_extension("bin.tmp");
            fs::write(&tmp, &good).map_err(|e| Error::io(&tmp, e))?;
            fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
            OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| Error::io(path, e))?
        } else {
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(path)
                .map_err(|e| Error::io(path, e))?;
            file.set_len(whole as u64).map_err(|e| Error::io(path, e))?;
            file
        };
        let mut cache = EmbedCache {
            path: path.to_path_buf(),
            dim,
            fingerprint: fingerprint.to_string(),
            data: good,
            index,
            file,
            rejected,
        };
        cache
            .file
            .seek(std::io::SeekFrom::End(0))
            .map_err(|e| Error::io(path, e))?;
        Ok(cache)
    }

    /// Records found damaged (checksum or non-finite values) when the cache was opened; their
    /// passages or images are embedded again.
    pub(crate) fn rejected(&self) -> u64 {
        self.rejected
    }

    pub(crate) fn key(&self, text: &str) -> u128 {
        let mut h = twox_hash::XxHash3_128::new();
        h.write(self.fingerprint.as_bytes());
        h.write(&[0]);
        h.write(text.as_bytes());
        h.finish_128()
    }

    /// Key of binary content (an encoded image) under embedder `fingerprint`.
    pub(crate) fn key_bytes_with(fingerprint: &str, bytes: &[u8]) -> u128 {
        let mut h = twox_hash::XxHash3_128::new();
        h.write(fingerprint.as_bytes());
        h.write(&[1]);
        h.write(bytes);
        h.finish_128()
    }

    /// Every key present.
    pub(crate) fn keys(&self) -> std::collections::HashSet<u128> {
        self.index.keys().copied().collect()
    }

    pub(crate) fn get(&self, key: u128) -> Option<impl Iterator<Item = f32> + '_> {
        let at = *self.index.get(&key)?;
        Some(
            self.data[at..at + 4 * self.dim]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        )
    }

    /// Appends new vectors (durably enough: flushed, not fsynced; a lost tail is re-embedded).
    pub(crate) fn insert(&mut self, entries: &[(u128, &[f32])]) -> Result<()> {
        let record = 16 + 4 * self.dim + 8;
        // `open` leaves the header in place (and in `data`), so records follow it directly
        let mut buf = Vec::with_capacity(entries.len() * record);
        for (key, v) in entries {
            if self.index.contains_key(key) || v.len() != self.dim {
                continue;
            }
            let start = buf.len();
            let at = self.data.len() + start + 16;
            buf.extend_from_slice(&key.to_le_bytes());
            for x in v.iter() {
                buf.extend_from_slice(&x.to_le_bytes());
            }
            let sum = checksum(&buf[start..]);
            buf.extend_from_slice(&sum.to_le_bytes());
            self.index.insert(*key, at);
        }
        self.file
            .write_all(&buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.data.extend_from_slice(&buf);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(seed: f32) -> Vec<f32> {
        (0..4).map(|i| seed + i as f32 / 10.0).collect()
    }

    #[test]
    fn damaged_records_are_rejected_counted_and_dropped_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.bin");
        let mut cache = EmbedCache::open(&path, "fp", 4).unwrap();
        let keys: Vec<u128> = ["a", "b", "c"].iter().map(|t| cache.key(t)).collect();
        let vs: Vec<Vec<f32>> = (0..3).map(|i| vector(i as f32)).collect();
        let entries: Vec<(u128, &[f32])> = keys
            .iter()
            .zip(&vs)
            .map(|(k, v)| (*k, v.as_slice()))
            .collect();
        cache.insert(&entries).unwrap();
        drop(cache);
        let record = 16 + 16 + 8;
        let mut bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), HEADER + 3 * record);
        // one bit of b's vector flipped: an exponent bit, so the value becomes huge
        bytes[HEADER + record + 16 + 3] ^= 0x40;
        // c's vector becomes NaN with a matching checksum (written by a broken build)
        let c = HEADER + 2 * record;
        bytes[c + 16..c + 20].copy_from_slice(&f32::NAN.to_le_bytes());
        let sum = checksum(&bytes[c..c + 32]);
        bytes[c + 32..c + 40].copy_from_slice(&sum.to_le_bytes());
        fs::write(&path, &bytes).unwrap();

        let cache = EmbedCache::open(&path, "fp", 4).unwrap();
        assert_eq!(cache.rejected(), 2);
        assert_eq!(cache.get(keys[0]).unwrap().collect::<Vec<_>>(), vs[0]);
        assert!(cache.get(keys[1]).is_none() && cache.get(keys[2]).is_none());
        drop(cache);
        // rewritten without them: the next open finds nothing to reject
        assert_eq!(fs::read(&path).unwrap().len(), HEADER + record);
        let mut cache = EmbedCache::open(&path, "fp", 4).unwrap();
        assert_eq!(cache.rejected(), 0);
        cache.insert(&[(keys[1], vs[1].as_slice())]).unwrap();
        drop(cache);
        let cache = EmbedCache::open(&path, "fp", 4).unwrap();
        assert_eq!(cache.get(keys[1]).unwrap().collect::<Vec<_>>(), vs[1]);
    }

    #[test]
    fn a_file_of_another_format_or_dimension_starts_afresh_and_a_cut_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.bin");
        fs::write(&path, vec![7u8; 100]).unwrap();
        let mut cache = EmbedCache::open(&path, "fp", 4).unwrap();
        assert!(cache.keys().is_empty());
        let k = cache.key("a");
        cache.insert(&[(k, vector(1.0).as_slice())]).unwrap();
        drop(cache);
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        fs::write(&path, &bytes).unwrap();
        let cache = EmbedCache::open(&path, "fp", 4).unwrap();
        assert_eq!((cache.keys().len(), cache.rejected()), (1, 0));
        drop(cache);
        assert!(EmbedCache::open(&path, "fp", 8).unwrap().keys().is_empty());
    }
}
