//! The index directory: opening an index (read-only, with a lease on its generation),
//! what it holds, and removing generations nobody uses any more. Building is in `build.rs`.
use std::fs;
use std::path::{Path, PathBuf};

use crate::analyzer::AnalyzerConfig;
use crate::bm25::Bm25Domain;
use crate::dense::DenseDomain;
use crate::manifest::{DenseInfo, Manifest};
use crate::paths::{self, GEN_PREFIX, MANIFEST_TMP_PREFIX};
use crate::source::PassageSource;
use crate::{Error, Result};

/// How many times a reader re-reads the manifest when the generation it named was replaced
/// between reading the manifest and taking the lease.
const OPEN_ATTEMPTS: usize = 50;

/// An index directory with a readable manifest.
///
/// While an `IndexDir` (or a clone) lives, its generation is leased: a concurrent rebuild of
/// the same directory swaps the manifest but leaves this generation's files in place.
#[derive(Debug, Clone)]
pub struct IndexDir {
    root: PathBuf,
    manifest: Manifest,
    _lease: Option<std::sync::Arc<fs::File>>,
}

impl IndexDir {
    /// Opens an existing index, read-only: nothing in the directory is written or locked
    /// exclusively, so a read-only copy (or one owned by another user) opens too.
    pub fn open(root: impl AsRef<Path>) -> Result<IndexDir> {
        let root = root.as_ref().to_path_buf();
        for _ in 0..OPEN_ATTEMPTS {
            let manifest = Manifest::read(&root)?;
            let gen_dir = root.join(&manifest.generation);
            match take_lease(&gen_dir)? {
                Lease::Held(lease) => {
                    return Ok(IndexDir {
                        root,
                        manifest,
                        _lease: Some(std::sync::Arc::new(lease)),
                    });
                }
                // replaced by a build between reading the manifest and taking the lease
                Lease::Gone if Manifest::read(&root)?.generation != manifest.generation => {
                    continue;
                }
                Lease::Gone => {
                    return Err(Error::Corrupt {
                        path: gen_dir,
                        message: "the generation named by manifest.json is missing".into(),
                    });
                }
            }
        }
        Err(Error::Corrupt {
            path: root,
            message: format!(
                "the index was replaced {OPEN_ATTEMPTS} times while opening it; try again"
            ),
        })
    }

    /// The index root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Checks that the index was built with `analyzer` (when given): analysis happens at
    /// indexing time, so another analyzer cannot be applied to an existing index.
    pub fn check_analyzer(&self, analyzer: &AnalyzerConfig) -> Result<()> {
        let built = &self.manifest.analyzer;
        if built != analyzer {
            return Err(Error::Mismatch {
                path: self.root.clone(),
                what: "analyzer".into(),
                built: serde_json::to_string(built).expect("serialises"),
                requested: serde_json::to_string(analyzer).expect("serialises"),
            });
        }
        Ok(())
    }

    /// The directory of the live generation.
    pub(crate) fn gen_dir(&self) -> PathBuf {
        self.root.join(&self.manifest.generation)
    }

    /// Checks that `domain` is indexed and, when `source` is given (the corpus), that its
    /// passages have not changed since.
    pub fn check_domain(&self, domain: &str, source: Option<&dyn PassageSource>) -> Result<()> {
        let Some(info) = self.manifest.domains.get(domain) else {
            return Err(Error::MissingDomain {
                path: self.root.clone(),
                domain: domain.to_string(),
                available: self
                    .manifest
                    .domains
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if let Some(source) = source {
            let now = source.fingerprint(domain)?;
            if now != info.fingerprint {
                return Err(Error::CorpusChanged {
                    path: self.root.clone(),
                    domain: domain.to_string(),
                    built: info.fingerprint.clone(),
                    now,
                });
            }
        }
        Ok(())
    }

    /// The dense index named `name` (slug, model name or spec).
    pub fn dense_info(&self, name: &str) -> Result<(&str, &DenseInfo)> {
        self.manifest
            .dense
            .iter()
            .find(|(slug, d)| *slug == name || d.model == name || d.spec == name)
            .map(|(s, d)| (s.as_str(), d))
            .ok_or_else(|| Error::MissingDense {
                path: self.root.clone(),
                name: name.to_string(),
                available: self
                    .manifest
                    .dense
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Opens the dense vectors (and their passage ids) of `domain` for the index named
    /// `slug`.
    pub fn dense(&self, slug: &str, domain: &str) -> Result<DenseDomain> {
        self.check_domain(domain, None)?;
        DenseDomain::open(&paths::dense(&self.gen_dir(), slug, domain))
    }

    /// Opens the image vectors (and their image paths) of `domain` for the dense index
    /// named `slug`.
    pub fn images(&self, slug: &str, domain: &str) -> Result<DenseDomain> {
        self.check_domain(domain, None)?;
        let dir = paths::images(&self.gen_dir(), slug, domain);
        if !dir.is_dir() {
            return Err(Error::MissingDense {
                path: self.root.clone(),
                name: format!("{slug} (images)"),
                available: self
                    .manifest
                    .dense
                    .iter()
                    .filter(|(_, d)| d.images.is_some())
                    .map(|(s, _)| s.clone())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        DenseDomain::open(&dir)
    }

    /// Opens the BM25 index of `domain`.
    pub fn bm25(&self, domain: &str) -> Result<Bm25Domain> {
        self.check_domain(domain, None)?;
        Bm25Domain::open(
            &paths::bm25(&self.gen_dir(), domain),
            &self.manifest.analyzer,
        )
    }
}

/// Removes generation directories other than `live` (left by crashed or replaced builds),
/// except those a reader still holds a lease on (a later build removes them).
pub(crate) fn remove_stale_generations(root: &Path, live: Option<&str>) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let stale_gen = name.starts_with(GEN_PREFIX) && Some(name.as_ref()) != live;
        let stale_tmp = name.starts_with(MANIFEST_TMP_PREFIX);
        if stale_gen {
            remove_unleased(&entry.path());
        } else if stale_tmp {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Removes a generation directory unless a reader holds its lease. The exclusive lock is held
/// while the files are removed, so a reader that opened the lease file just before sees it
/// gone once it gets its shared lock ([`take_lease`]).
fn remove_unleased(dir: &Path) {
    match fs::File::open(paths::lease(dir)) {
        Ok(lease) => {
            if lease.try_lock().is_ok() {
                let _ = fs::remove_dir_all(dir);
            }
        }
        // a build that crashed before writing its lease
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let _ = fs::remove_dir_all(dir);
        }
        Err(_) => {}
    }
}

enum Lease {
    /// The lease file, shared-locked.
    Held(fs::File),
    /// The generation is not there (any more).
    Gone,
}

/// Takes a shared lock on the lease of the generation `gen_dir`. Works on read-only files
/// and file systems: the lease file is opened for reading, and `flock` needs no write access.
fn take_lease(gen_dir: &Path) -> Result<Lease> {
    let path = paths::lease(gen_dir);
    let file = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lease::Gone),
        Err(e) => return Err(Error::io(&path, e)),
    };
    file.lock_shared().map_err(|e| Error::io(&path, e))?;
    // A build removing this generation held the exclusive lock while it deleted the files:
    // if the path no longer names the file locked, the generation is gone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let held = file.metadata().map_err(|e| Error::io(&path, e))?;
        match fs::metadata(&path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {}
            Ok(_) => return Ok(Lease::Gone),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lease::Gone),
            Err(e) => return Err(Error::io(&path, e)),
        }
    }
    Ok(Lease::Held(file))
}
