use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sift_core::Layout;

use crate::analyzer::AnalyzerConfig;
use crate::bm25::Bm25Params;
use crate::{Error, Result};

/// Version of the on-disk format; an index of another version is refused. Version 4: BM25
/// stores exact passage lengths and the analyzer has a tokenizer (Lucene's by default).
/// Version 5: each BM25 domain records its analyzer (`analyzer.json`), and embedding-cache
/// records carry checksums.
pub const FORMAT_VERSION: u32 = 5;

/// What was built, from what, with which settings. Stored as `manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// On-disk format version ([`FORMAT_VERSION`]).
    pub format_version: u32,
    /// Version of Sift that built the index.
    pub sift_version: String,
    /// Directory of the live generation, relative to the index root.
    pub generation: String,
    /// Seconds since the Unix epoch when the build finished.
    pub created_unix: u64,
    /// Where the passages came from (the corpus directory as given to the build).
    pub corpus: String,
    /// Corpus layout; `None` for passages that did not come from a corpus on disk.
    #[serde(default)]
    pub layout: Option<Layout>,
    /// Text analysis used for BM25.
    pub analyzer: AnalyzerConfig,
    /// BM25 parameters used by default at search time.
    pub bm25: Bm25Params,
    /// Per-domain facts.
    pub domains: BTreeMap<String, DomainInfo>,
    /// Dense vector indexes, by slug (the name used in `dense:<slug>` retrievers).
    #[serde(default)]
    pub dense: BTreeMap<String, DenseInfo>,
}

/// A dense model indexed for every domain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DenseInfo {
    /// Model name (hub id or directory name).
    pub model: String,
    /// How to load the model again (directory or hub id, as given to the build).
    pub spec: String,
    /// Embedding settings that affect vectors (model files, prefixes, pooling, length, dtype,
    /// device kind): the embedding cache key.
    pub fingerprint: String,
    /// Hash of the model's files (weights, tokenizer, configs): a search loads the model again
    /// and checks it is the same one. Empty when the embedder did not say.
    #[serde(default)]
    pub model_hash: String,
    /// The embedding profile of the vectors when it is not the model's default
    /// (`reference`: MM-BRIGHT's reference code's handling of the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Dimension.
    pub dim: usize,
    /// Storage precision.
    pub dtype: crate::dense::VectorDtype,
    /// HNSW build parameters.
    pub hnsw: crate::dense::HnswParams,
    /// Passages embedded during the build (the rest came from the embedding cache).
    pub embedded: u64,
    /// Passages taken from the embedding cache.
    pub cached: u64,
    /// Passage vectors indexed as made elsewhere (`sift index --vectors`), not embedded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub precomputed: u64,
    /// Embedding-cache records found damaged (checksum mismatch, non-finite values) and
    /// embedded again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_rejected: u64,
    /// The image index of a vision-language model, when one was built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageIndexInfo>,
}

/// The corpus images embedded by a vision-language model.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ImageIndexInfo {
    /// Image embedding settings (model, preprocessing).
    pub fingerprint: String,
    /// Images indexed per domain.
    pub images: BTreeMap<String, u64>,
    /// Images that could not be decoded, skipped, per domain.
    pub undecodable: BTreeMap<String, u64>,
    /// The first few undecodable images: file, row, path and the decoder's message.
    pub undecodable_examples: Vec<String>,
    /// Images embedded during the build.
    pub embedded: u64,
    /// Images taken from the embedding cache.
    pub cached: u64,
    /// Embedding-cache records found damaged and embedded again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_rejected: u64,
    /// Reader warnings (missing bytes, repeated paths) by kind.
    pub warnings: BTreeMap<String, u64>,
}

/// Facts about one indexed domain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DomainInfo {
    /// Fingerprint of the domain's passage files when indexed.
    pub fingerprint: String,
    /// Number of passages.
    pub passages: u64,
    /// Number of indexed tokens (after analysis).
    pub tokens: u64,
    /// Warnings counted while reading the passages, by kind.
    #[serde(default)]
    pub warnings: BTreeMap<String, u64>,
}

impl Manifest {
    /// Reads `dir/manifest.json`.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = crate::paths::manifest(dir);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotAnIndex {
                    path: dir.to_path_buf(),
                });
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        #[derive(Deserialize)]
        struct Version {
            format_version: u32,
        }
        let version: Version = serde_json::from_str(&text).map_err(|e| Error::Manifest {
            path: path.clone(),
            message: format!("corrupt manifest: {e}"),
        })?;
        if version.format_version != FORMAT_VERSION {
            return Err(Error::FormatVersion {
                path,
                found: version.format_version,
                expected: FORMAT_VERSION,
            });
        }
        let manifest: Manifest = serde_json::from_str(&text).map_err(|e| Error::Manifest {
            path: path.clone(),
            message: format!("corrupt manifest: {e}"),
        })?;
        // the generation is a directory of the index itself, never a path elsewhere
        if !crate::paths::is_generation_name(&manifest.generation) {
            return Err(Error::Manifest {
                path,
                message: format!(
                    "corrupt manifest: generation {:?} is not a generation directory name",
                    manifest.generation
                ),
            });
        }
        // domains and dense slugs name directories of the generation: one plain name each
        let names = (manifest.domains.keys().map(|d| ("domain", d)))
            .chain(manifest.dense.keys().map(|d| ("dense index", d)));
        for (what, name) in names {
            if let Some(problem) = sift_core::domain_problem(name) {
                return Err(Error::Manifest {
                    path,
                    message: format!("corrupt manifest: {what} {name:?} {problem}"),
                });
            }
        }
        Ok(manifest)
    }

    /// Writes `dir/manifest.json` atomically: a temporary file is written and synced, then
    /// renamed over the old manifest, and the directory is synced.
    pub fn write_atomic(&self, dir: &Path) -> Result<()> {
        let path = crate::paths::manifest(dir);
        let tmp = crate::paths::manifest_tmp(dir);
        let json = serde_json::to_vec_pretty(self).expect("manifest serialises");
        let mut f = fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        f.write_all(&json).map_err(|e| Error::io(&tmp, e))?;
        f.write_all(b"\n").map_err(|e| Error::io(&tmp, e))?;
        f.sync_all().map_err(|e| Error::io(&tmp, e))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
        sync_dir(dir)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Makes a rename in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
