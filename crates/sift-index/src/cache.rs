//! Embedding cache: `INDEX/embed-cache/<slug>.bin`, outside the generations so that
//! rebuilding an index re-embeds only passages whose text (or model settings) changed.
//!
//! The file is a sequence of records `key (16 bytes, xxh3-128 of embedder fingerprint and
//! text) | dim little-endian f32`. It is only appended to; a record cut short by a crash is
//! ignored (and overwritten) on the next load.
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Cached vectors of one embedder.
pub(crate) struct EmbedCache {
    path: PathBuf,
    dim: usize,
    fingerprint: String,
    data: Vec<u8>,
    index: HashMap<u128, usize>,
    file: File,
}

impl EmbedCache {
    pub(crate) fn open(path: &Path, fingerprint: &str, dim: usize) -> Result<EmbedCache> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let record = 16 + 4 * dim;
        let mut data = match fs::read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::io(path, e)),
        };
        let whole = data.len() / record * record;
        data.truncate(whole);
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        file.set_len(whole as u64).map_err(|e| Error::io(path, e))?;
        let mut index = HashMap::with_capacity(whole / record);
        for (i, rec) in data.chunks_exact(record).enumerate() {
            let key = u128::from_le_bytes(rec[..16].try_into().expect("16 bytes"));
            index.insert(key, i * record + 16);
        }
        let mut cache = EmbedCache {
            path: path.to_path_buf(),
            dim,
            fingerprint: fingerprint.to_string(),
            data,
            index,
            file,
        };
        use std::io::Seek;
        cache
            .file
            .seek(std::io::SeekFrom::End(0))
            .map_err(|e| Error::io(path, e))?;
        Ok(cache)
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
        let mut buf = Vec::with_capacity(entries.len() * (16 + 4 * self.dim));
        for (key, v) in entries {
            if self.index.contains_key(key) {
                continue;
            }
            let at = self.data.len() + buf.len() + 16;
            buf.extend_from_slice(&key.to_le_bytes());
            for x in v.iter() {
                buf.extend_from_slice(&x.to_le_bytes());
            }
            self.index.insert(*key, at);
        }
        self.file
            .write_all(&buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.data.extend_from_slice(&buf);
        Ok(())
    }
}
