use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sift_core::Corpus;

use crate::analyzer::AnalyzerConfig;
use crate::bm25::{self, Bm25Domain, Bm25Params};
use crate::manifest::{DomainInfo, FORMAT_VERSION, Manifest, sync_dir};
use crate::progress::Progress;
use crate::{Error, Result};

const LOCK_FILE: &str = ".lock";
const GEN_PREFIX: &str = "gen-";

/// Settings of a build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Text analysis.
    pub analyzer: AnalyzerConfig,
    /// Default BM25 parameters recorded in the manifest.
    pub bm25: Bm25Params,
    /// Indexing threads.
    pub threads: usize,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            analyzer: AnalyzerConfig::default(),
            bm25: Bm25Params::default(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// An index directory with a readable manifest.
#[derive(Debug, Clone)]
pub struct IndexDir {
    root: PathBuf,
    manifest: Manifest,
}

impl IndexDir {
    /// Opens an existing index.
    pub fn open(root: impl AsRef<Path>) -> Result<IndexDir> {
        let root = root.as_ref().to_path_buf();
        let manifest = Manifest::read(&root)?;
        let gen_dir = root.join(&manifest.generation);
        if !gen_dir.is_dir() {
            return Err(Error::Corrupt {
                path: gen_dir,
                message: "the generation named by manifest.json is missing".into(),
            });
        }
        Ok(IndexDir { root, manifest })
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

    /// Checks that `domain` is indexed and, when `corpus` is given, that its passages have
    /// not changed since.
    pub fn check_domain(&self, domain: &str, corpus: Option<&Corpus>) -> Result<()> {
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
        if let Some(corpus) = corpus {
            let now = corpus.fingerprint(domain)?;
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

    /// Opens the BM25 index of `domain`.
    pub fn bm25(&self, domain: &str) -> Result<Bm25Domain> {
        self.check_domain(domain, None)?;
        Bm25Domain::open(
            &self
                .root
                .join(&self.manifest.generation)
                .join("bm25")
                .join(domain),
            &self.manifest.analyzer,
        )
    }

    /// Builds an index of `domains` of `corpus` at `root`, replacing any index there only once
    /// the new one is complete. Returns the new index.
    pub fn build(
        root: impl AsRef<Path>,
        corpus: &Corpus,
        domains: &[String],
        options: &BuildOptions,
        progress: &dyn Progress,
    ) -> Result<IndexDir> {
        options.bm25.validate()?;
        let root = root.as_ref().to_path_buf();
        if root.exists() && !root.is_dir() {
            return Err(Error::io(
                &root,
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "exists and is not a directory",
                ),
            ));
        }
        if root.is_dir() && !root.join("manifest.json").exists() {
            let foreign = fs::read_dir(&root)
                .map_err(|e| Error::io(&root, e))?
                .filter_map(|e| e.ok())
                .any(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    !(name.starts_with(GEN_PREFIX) || name.starts_with('.'))
                });
            if foreign {
                return Err(Error::io(
                    &root,
                    std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        "directory is not empty and holds no Sift index: refusing to write into it",
                    ),
                ));
            }
        }
        fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        let lock_path = root.join(LOCK_FILE);
        let lock = fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(Error::Locked { path: lock_path }),
            Err(fs::TryLockError::Error(e)) => return Err(Error::io(&lock_path, e)),
        }
        let live = Manifest::read(&root).ok().map(|m| m.generation);
        remove_stale_generations(&root, live.as_deref());

        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let generation = format!("{GEN_PREFIX}{:x}-{}", now.as_nanos(), std::process::id());
        let gen_dir = root.join(&generation);
        let result = build_generation(&gen_dir, corpus, domains, options, progress);
        let domain_infos = match result {
            Ok(d) => d,
            Err(e) => {
                let _ = fs::remove_dir_all(&gen_dir);
                return Err(e);
            }
        };
        sync_dir(&gen_dir)?;
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            sift_version: env!("CARGO_PKG_VERSION").to_string(),
            generation,
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            corpus: corpus.root().display().to_string(),
            layout: corpus.layout(),
            analyzer: options.analyzer.clone(),
            bm25: options.bm25,
            domains: domain_infos,
        };
        manifest.write_atomic(&root)?;
        remove_stale_generations(&root, Some(&manifest.generation));
        drop(lock);
        Ok(IndexDir { root, manifest })
    }
}

fn build_generation(
    gen_dir: &Path,
    corpus: &Corpus,
    domains: &[String],
    options: &BuildOptions,
    progress: &dyn Progress,
) -> Result<BTreeMap<String, DomainInfo>> {
    let mut out = BTreeMap::new();
    for domain in domains {
        let fingerprint = corpus.fingerprint(domain)?;
        let mut passages = corpus.passages(domain)?;
        progress.start(domain, passages.len_hint());
        let dir = gen_dir.join("bm25").join(domain);
        let stats = bm25::build(
            &dir,
            &mut passages,
            &options.analyzer,
            options.threads,
            progress,
        );
        progress.finish();
        let stats = match stats {
            Err(Error::Corpus(sift_core::Error::EmptyCorpus { .. })) => {
                return Err(Error::Corpus(sift_core::Error::EmptyCorpus {
                    path: corpus.passage_files(domain)?.remove(0),
                }));
            }
            other => other?,
        };
        let warnings = passages.warnings();
        let mut counts = BTreeMap::new();
        for (kind, n) in warnings.counts() {
            counts.insert(kind.name().to_string(), n);
        }
        out.insert(
            domain.clone(),
            DomainInfo {
                fingerprint,
                passages: stats.passages,
                tokens: stats.tokens,
                warnings: counts,
            },
        );
    }
    Ok(out)
}

/// Removes generation directories other than `live` (left by crashed or replaced builds).
fn remove_stale_generations(root: &Path, live: Option<&str>) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let stale_gen = name.starts_with(GEN_PREFIX) && Some(name.as_ref()) != live;
        let stale_tmp = name.starts_with(".manifest.json.tmp-");
        if stale_gen {
            let _ = fs::remove_dir_all(entry.path());
        } else if stale_tmp {
            let _ = fs::remove_file(entry.path());
        }
    }
}
