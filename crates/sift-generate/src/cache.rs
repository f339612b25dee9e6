//! A resumable store of generations: one JSON object a line, appended as each generation
//! arrives, keyed by everything that decides the output ([`CacheKey`]).
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::request::{Generation, Part, Request, Sampling};
use crate::{Error, Result};

/// Everything that decides a generation; its [`CacheKey::digest`] keys the cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheKey {
    /// The generator's model ([`crate::Generator::model_id`]).
    pub model: String,
    /// The prompt template's name.
    pub template: String,
    /// The template's version: bumped when its wording changes.
    pub template_version: u32,
    /// How tokens are chosen.
    pub sampling: Sampling,
    /// The query the generation is for.
    pub query_id: String,
    /// SHA-256 of each image sent, in order.
    pub images: Vec<String>,
    /// SHA-256 of the prompt's text (every text part of every message, in order).
    pub prompt: String,
}

impl CacheKey {
    /// The key of `request` made from `template` (name, version) for `query_id` on `model`.
    pub fn new(model: &str, template: (&str, u32), query_id: &str, request: &Request) -> CacheKey {
        let mut text = Sha256::new();
        let mut images = Vec::new();
        for m in &request.messages {
            text.update(format!("\u{1e}{:?}\u{1f}", m.role));
            for p in &m.content {
                match p {
                    Part::Text(t) => {
                        text.update(t.as_bytes());
                        text.update([0x1f]);
                    }
                    Part::Image { bytes, .. } => {
                        images.push(hex(&Sha256::digest(bytes)));
                        text.update([0x1d]);
                    }
                }
            }
        }
        CacheKey {
            model: model.to_string(),
            template: template.0.to_string(),
            template_version: template.1,
            sampling: request.sampling.clone(),
            query_id: query_id.to_string(),
            images,
            prompt: hex(&text.finalize()),
        }
    }

    /// SHA-256 (hex) of the key's canonical JSON.
    pub fn digest(&self) -> String {
        let json = serde_json::to_vec(self).expect("a key serialises");
        hex(&Sha256::digest(json))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One line of the cache file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedGeneration {
    /// [`CacheKey::digest`].
    pub key: String,
    /// The query.
    pub query_id: String,
    /// The model.
    pub model: String,
    /// The template and its version.
    pub template: String,
    /// The template's version.
    pub template_version: u32,
    /// The generation.
    pub generation: Generation,
}

/// What opening a cache found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheOpen {
    /// Generations read.
    pub entries: usize,
    /// An unfinished last line (a run killed while writing it), dropped from the file.
    pub truncated: usize,
    /// Complete lines that are not an entry, skipped (kept in the file).
    pub malformed: usize,
    /// Keys stored more than once (the last one kept).
    pub duplicates: usize,
}

/// Generations by key, backed by an append-only JSONL file. Each entry is written with one
/// `write` call on a file opened for appending, so a run killed at any moment leaves at most
/// one unfinished last line, which the next open drops (and counts) before appending.
#[derive(Debug)]
pub struct GenerationCache {
    path: PathBuf,
    entries: Mutex<HashMap<String, CachedGeneration>>,
    file: Mutex<File>,
    opened: CacheOpen,
    /// Entries held at most ([`GenerationCache::with_max_entries`]).
    max_entries: usize,
    /// New entries not stored because the cache was full.
    not_stored: std::sync::atomic::AtomicU64,
}

impl GenerationCache {
    /// Opens (or creates) the cache at `path`.
    pub fn open(path: &Path) -> Result<GenerationCache> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        // guarded: a FIFO or device named as the cache is refused, not read forever
        let bytes = sift_core::read_regular_file_if_exists(path, u64::MAX)?.unwrap_or_default();
        let mut opened = CacheOpen::default();
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if complete < bytes.len() {
            opened.truncated = 1;
        }
        let mut entries = HashMap::new();
        for line in bytes[..complete].split(|&b| b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<CachedGeneration>(line) {
                Ok(e) => {
                    if entries.insert(e.key.clone(), e).is_some() {
                        opened.duplicates += 1;
                    }
                }
                Err(_) => opened.malformed += 1,
            }
        }
        opened.entries = entries.len();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        if opened.truncated > 0 {
            // drop the unfinished line so the next entry starts on a line of its own
            file.set_len(complete as u64).map_err(io)?;
        }
        Ok(GenerationCache {
            path: path.to_path_buf(),
            entries: Mutex::new(entries),
            file: Mutex::new(file),
            opened,
            max_entries: usize::MAX,
            not_stored: Default::default(),
        })
    }

    /// Holds at most `n` entries: once full, a new key is not stored (in memory or in the
    /// file; [`GenerationCache::not_stored`] counts them), so a long-running service's cache
    /// stops growing. Entries already in the file are all kept.
    pub fn with_max_entries(mut self, n: usize) -> GenerationCache {
        self.max_entries = n;
        self
    }

    /// New entries [`GenerationCache::put`] did not store because the cache was full.
    pub fn not_stored(&self) -> u64 {
        self.not_stored.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What [`GenerationCache::open`] found.
    pub fn opened(&self) -> CacheOpen {
        self.opened
    }

    /// Generations held.
    pub fn len(&self) -> usize {
        self.entries.lock().expect("not poisoned").len()
    }

    /// True when no generation is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The generation stored under `key` ([`CacheKey::digest`]).
    pub fn get(&self, key: &str) -> Option<CachedGeneration> {
        self.entries.lock().expect("not poisoned").get(key).cloned()
    }

    /// Stores `entry` (appended to the file at once, then held); not when the cache holds
    /// its [`GenerationCache::with_max_entries`] already and `entry` is a new key.
    pub fn put(&self, entry: CachedGeneration) -> Result<()> {
        {
            let held = self.entries.lock().expect("not poisoned");
            if held.len() >= self.max_entries && !held.contains_key(&entry.key) {
                self.not_stored
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(());
            }
        }
        let mut line = serde_json::to_vec(&entry).expect("an entry serialises");
        line.push(b'\n');
        {
            let mut f = self.file.lock().expect("not poisoned");
            f.write_all(&line).map_err(|source| Error::Io {
                path: self.path.clone(),
                source,
            })?;
        }
        self.entries
            .lock()
            .expect("not poisoned")
            .insert(entry.key.clone(), entry);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str) -> CachedGeneration {
        CachedGeneration {
            key: key.into(),
            query_id: "q".into(),
            model: "m".into(),
            template: "t".into(),
            template_version: 1,
            generation: Generation {
                text: "0.5".into(),
                finish_reason: None,
                usage: Default::default(),
            },
        }
    }

    #[test]
    fn a_bounded_cache_stops_growing_and_counts_what_it_did_not_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        let c = GenerationCache::open(&path).unwrap().with_max_entries(2);
        for k in ["a", "b", "c", "d", "a"] {
            c.put(entry(k)).unwrap();
        }
        assert_eq!(c.len(), 2);
        assert_eq!(c.not_stored(), 2);
        assert!(c.get("c").is_none() && c.get("a").is_some());
        // the file holds what is held (a stored twice: its replacement is allowed)
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines, 3);
    }
}
