//! Passage vectors made elsewhere, by a cluster job (`sift_ir.ray.embed_corpus`): a dense
//! build indexes them instead of embedding the passages again.
//!
//! Layout of the directory:
//!
//! ```text
//! sift-vectors.json            what made the vectors (VectorsManifest)
//! <domain>/passages/*.parquet  rows of id (string) and vector (list of float32)
//! ```
//!
//! Or a FAISS index file (`sift index --faiss`, [`Precomputed::open_faiss`]): row `i` is the
//! vector of the domain's passage `i`, in the corpus's order.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sift_core::vectors::VectorTable;

use crate::faiss::FaissFile;
use crate::{Error, Result};

/// The manifest's file name.
pub const VECTORS_MANIFEST: &str = "sift-vectors.json";

/// What made a directory of precomputed vectors: the embedder's facts as it reported them
/// where it ran.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VectorsManifest {
    /// Layout version (1).
    pub format: u32,
    /// Model name.
    pub model: String,
    /// The passage side's fingerprint (model files, prefix, pooling, length, dtype, device
    /// kind): recorded in the index as the vectors' fingerprint.
    pub fingerprint: String,
    /// Hash of the model's files: must equal the model the index loads for queries.
    #[serde(default)]
    pub model_hash: String,
    /// The embedding profile when not the model's default.
    #[serde(default)]
    pub profile: Option<String>,
    /// Vector length.
    pub dim: usize,
    /// Vectors written per domain (passages).
    #[serde(default)]
    pub domains: BTreeMap<String, VectorsDomain>,
}

/// A domain's count in a [`VectorsManifest`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VectorsDomain {
    /// Passage vectors written.
    pub passages: u64,
}

/// Precomputed passage vectors, opened: a directory with a manifest, or a FAISS file.
#[derive(Debug, Clone)]
pub struct Precomputed {
    dir: PathBuf,
    manifest: VectorsManifest,
    faiss: Option<FaissFile>,
}

impl Precomputed {
    /// Reads `dir`'s manifest.
    pub fn open(dir: impl AsRef<Path>) -> Result<Precomputed> {
        let dir = dir.as_ref().to_path_buf();
        let path = dir.join(VECTORS_MANIFEST);
        let text = sift_core::read_regular_text(&path, sift_core::TEXT_FILE_LIMIT)?;
        let manifest: VectorsManifest =
            serde_json::from_str(&text).map_err(|e| Error::Manifest {
                path: path.clone(),
                message: format!("not a vectors manifest: {e}"),
            })?;
        if manifest.format != 1 {
            return Err(Error::Manifest {
                path,
                message: format!("vectors format {} (this Sift reads 1)", manifest.format),
            });
        }
        Ok(Precomputed {
            dir,
            manifest,
            faiss: None,
        })
    }

    /// Opens a FAISS index file (`IndexFlatIP`, `IndexFlatL2` or `IndexHNSWFlat`, as
    /// faiss's `write_index` writes them; [`FaissFile::open`] checks its layout) whose row
    /// `i` is the vector of passage `i`. The file does not say which model made it, so only
    /// the dimension is checked against the model; its fingerprint is the file's xxh3-128
    /// (read once here).
    pub fn open_faiss(path: impl AsRef<Path>) -> Result<Precomputed> {
        let path = path.as_ref();
        let faiss = FaissFile::open(path)?;
        let mut hasher = twox_hash::XxHash3_128::new();
        let mut file = sift_core::open_regular_file(path)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = std::io::Read::read(&mut file, &mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            hasher.write(&buf[..n]);
        }
        let manifest = VectorsManifest {
            format: 1,
            model: format!("a FAISS index ({})", faiss.kind()),
            fingerprint: format!("faiss-xxh3-128:{:032x}", hasher.finish_128()),
            model_hash: String::new(),
            profile: None,
            dim: faiss.dim(),
            domains: BTreeMap::new(),
        };
        Ok(Precomputed {
            dir: path.to_path_buf(),
            manifest,
            faiss: Some(faiss),
        })
    }

    /// The FAISS file the vectors are in, if they are in one.
    pub fn faiss(&self) -> Option<&FaissFile> {
        self.faiss.as_ref()
    }

    /// The directory (or the FAISS file).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What made the vectors.
    pub fn manifest(&self) -> &VectorsManifest {
        &self.manifest
    }

    /// Where a domain's passage vectors are.
    pub fn passages_dir(&self, domain: &str) -> PathBuf {
        self.dir.join(domain).join("passages")
    }

    /// A domain's passage vectors, checked against the manifest's dimension.
    pub fn passages(&self, domain: &str) -> Result<VectorTable> {
        if let Some(f) = &self.faiss {
            return Err(Error::Vectors {
                path: self.dir.clone(),
                message: format!(
                    "a FAISS file ({}) holds rows, not vectors by passage id",
                    f.kind()
                ),
            });
        }
        let dir = self.passages_dir(domain);
        if !dir.is_dir() {
            return Err(Error::Vectors {
                path: self.dir.clone(),
                message: format!(
                    "no vectors for domain {domain:?} (expected {}); it holds {}",
                    dir.display(),
                    self.manifest
                        .domains
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        let table = VectorTable::read_dir(&dir)?;
        if !table.is_empty() && table.dim() != self.manifest.dim {
            return Err(Error::Vectors {
                path: dir,
                message: format!(
                    "{}-dimensional vectors, but the manifest says {}",
                    table.dim(),
                    self.manifest.dim
                ),
            });
        }
        Ok(table)
    }

    /// Whether vectors made as the manifest says can stand for `embedder`'s: the same model
    /// files, vector length and profile (dtype and device may differ: the index records
    /// the vectors' own fingerprint). The message says what differs.
    pub fn check(&self, name: &str, dim: usize, hash: &str, profile: Option<&str>) -> Result<()> {
        let m = &self.manifest;
        if let Some(f) = &self.faiss {
            if f.dim() == dim {
                return Ok(());
            }
            return Err(Error::Vectors {
                path: self.dir.clone(),
                message: format!(
                    "{}-dimensional vectors ({}), but {name} makes {dim}-dimensional ones: vectors of another model",
                    f.dim(),
                    f.kind()
                ),
            });
        }
        let mut problems = Vec::new();
        if m.dim != dim {
            problems.push(format!("dimension {} vs {dim}", m.dim));
        }
        if !m.model_hash.is_empty() && !hash.is_empty() && m.model_hash != hash {
            problems.push(format!(
                "model files {} vs {} (another model, or other weights)",
                m.model_hash, hash
            ));
        }
        if m.profile.as_deref() != profile {
            problems.push(format!(
                "profile {:?} vs {:?}",
                m.profile.as_deref().unwrap_or("default"),
                profile.unwrap_or("default")
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::Vectors {
            path: self.dir.join(VECTORS_MANIFEST),
            message: format!(
                "the vectors were made by {} and cannot stand for {}: {}",
                m.model,
                name,
                problems.join("; ")
            ),
        })
    }
}
