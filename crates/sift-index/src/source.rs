//! Where an index's passages and images come from: a [`Corpus`] on disk, passages held in
//! memory ([`MemorySource`]), or anything else implementing [`PassageSource`].
use std::collections::BTreeMap;

use sift_core::{Corpus, ImageRecord, Passage, Warnings};

use crate::{Error, Result};

/// A stream of passages; its warnings (empty passages, ...) are read once it is done.
pub trait PassageStream: Iterator<Item = sift_core::Result<Passage>> {
    /// Problems counted while reading.
    fn warnings(&self) -> Warnings {
        Warnings::new()
    }
    /// Number of passages, when known in advance (progress bars).
    fn len_hint(&self) -> Option<u64> {
        None
    }
}

/// A stream of images; its warnings (missing bytes, repeated paths, skipped files) are read
/// once it is done.
pub trait ImageStream: Iterator<Item = sift_core::Result<ImageRecord>> + Send {
    /// Problems counted while reading.
    fn warnings(&self) -> Warnings {
        Warnings::new()
    }
}

/// Passages (and images) of the domains of an index. Each call starts a fresh stream: a
/// build reads the passages once for BM25 and once per dense model.
pub trait PassageSource: Sync {
    /// Where the passages come from, for the manifest (a corpus directory, ...).
    fn description(&self) -> String;
    /// The corpus layout, for the manifest; `None` for sources that are not a corpus.
    fn layout(&self) -> Option<sift_core::Layout> {
        None
    }
    /// The passages of `domain`.
    fn passages(&self, domain: &str) -> Result<Box<dyn PassageStream + '_>>;
    /// The images of `domain` (none by default).
    fn images(&self, _domain: &str) -> Result<Box<dyn ImageStream + '_>> {
        Ok(Box::new(NoImages))
    }
    /// A fingerprint of `domain`'s passages, to tell later whether they changed.
    fn fingerprint(&self, domain: &str) -> Result<String>;
    /// What errors about `domain`'s passages name (its first file, ...).
    fn location(&self, domain: &str) -> std::path::PathBuf {
        std::path::Path::new(&self.description()).join(domain)
    }
}

struct NoImages;

impl Iterator for NoImages {
    type Item = sift_core::Result<ImageRecord>;
    fn next(&mut self) -> Option<Self::Item> {
        None
    }
}

impl ImageStream for NoImages {}

impl PassageStream for sift_core::Passages {
    fn warnings(&self) -> Warnings {
        sift_core::Passages::warnings(self).clone()
    }
    fn len_hint(&self) -> Option<u64> {
        sift_core::Passages::len_hint(self)
    }
}

impl ImageStream for sift_core::Images {
    fn warnings(&self) -> Warnings {
        sift_core::Images::warnings(self).clone()
    }
}

impl PassageSource for Corpus {
    fn description(&self) -> String {
        self.root().display().to_string()
    }
    fn layout(&self) -> Option<sift_core::Layout> {
        Some(Corpus::layout(self))
    }
    fn passages(&self, domain: &str) -> Result<Box<dyn PassageStream + '_>> {
        Ok(Box::new(Corpus::passages(self, domain)?))
    }
    fn images(&self, domain: &str) -> Result<Box<dyn ImageStream + '_>> {
        Ok(Box::new(Corpus::images(self, domain)?))
    }
    fn fingerprint(&self, domain: &str) -> Result<String> {
        Ok(Corpus::fingerprint(self, domain)?)
    }
    fn location(&self, domain: &str) -> std::path::PathBuf {
        self.passage_files(domain)
            .ok()
            .and_then(|f| f.into_iter().next())
            .unwrap_or_else(|| self.root().join(domain))
    }
}

/// Passages held in memory, by domain: index anything without writing a corpus first.
///
/// ```
/// use sift_index::MemorySource;
/// let mut source = MemorySource::new("my passages");
/// source.add("physics", "p1", "Shock waves heat the gas behind them.");
/// source.add("physics", "p2", "A boundary layer forms along the wall.");
/// assert_eq!(source.domains(), ["physics"]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    name: String,
    domains: BTreeMap<String, Vec<Passage>>,
}

impl MemorySource {
    /// An empty source, described as `name` in the manifest.
    pub fn new(name: impl Into<String>) -> MemorySource {
        MemorySource {
            name: name.into(),
            domains: BTreeMap::new(),
        }
    }

    /// Adds a passage to `domain`.
    pub fn add(&mut self, domain: &str, id: impl Into<String>, text: impl Into<String>) {
        self.domains
            .entry(domain.to_string())
            .or_default()
            .push(Passage {
                id: id.into(),
                text: text.into(),
                title: None,
            });
    }

    /// The domains, sorted.
    pub fn domains(&self) -> Vec<String> {
        self.domains.keys().cloned().collect()
    }
}

struct MemoryPassages<'a> {
    iter: std::slice::Iter<'a, Passage>,
    seen: std::collections::HashSet<&'a str>,
    len: u64,
}

impl Iterator for MemoryPassages<'_> {
    type Item = sift_core::Result<Passage>;
    fn next(&mut self) -> Option<Self::Item> {
        let p = self.iter.next()?;
        if let Some(problem) = sift_core::id_problem(&p.id) {
            return Some(Err(sift_core::Error::BadId {
                path: "memory".into(),
                location: String::new(),
                what: "passage id".into(),
                id: p.id.clone(),
                problem,
            }));
        }
        if !self.seen.insert(&p.id) {
            return Some(Err(sift_core::Error::DuplicateId {
                path: "memory".into(),
                location: String::new(),
                first: "an earlier passage".into(),
                id: p.id.clone(),
            }));
        }
        Some(Ok(p.clone()))
    }
}

impl PassageStream for MemoryPassages<'_> {
    fn len_hint(&self) -> Option<u64> {
        Some(self.len)
    }
}

impl PassageSource for MemorySource {
    fn description(&self) -> String {
        self.name.clone()
    }
    fn passages(&self, domain: &str) -> Result<Box<dyn PassageStream + '_>> {
        let passages = self.domains.get(domain).ok_or_else(|| {
            Error::Corpus(sift_core::Error::UnknownDomain {
                path: self.name.clone().into(),
                domain: domain.to_string(),
                available: self.domains().join(", "),
            })
        })?;
        Ok(Box::new(MemoryPassages {
            iter: passages.iter(),
            seen: Default::default(),
            len: passages.len() as u64,
        }))
    }
    fn fingerprint(&self, domain: &str) -> Result<String> {
        let mut hasher = twox_hash::XxHash3_128::new();
        for p in self.domains.get(domain).into_iter().flatten() {
            hasher.write(p.id.as_bytes());
            hasher.write(&[0]);
            hasher.write(p.text.as_bytes());
            hasher.write(&[0]);
        }
        Ok(format!("xxh3-128:{:032x}", hasher.finish_128()))
    }
}
