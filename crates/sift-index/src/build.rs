//! Building an index: a complete new generation is written beside the live one, then the
//! manifest is swapped atomically. [`IndexDir::build`] indexes domains (BM25 and dense
//! models), keeping the domains it does not rebuild; [`IndexDir::add_dense`] adds dense
//! models to an existing index, keeping everything else.
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::analyzer::AnalyzerConfig;
use crate::bm25::{self, Bm25Params};
use crate::dir::{IndexDir, remove_stale_generations};
use crate::embedding::{DenseBuild, Target, build_dense, counts};
use crate::manifest::{DenseInfo, DomainInfo, FORMAT_VERSION, Manifest, sync_dir};
use crate::paths::{self, GEN_PREFIX};
use crate::progress::Progress;
use crate::source::PassageSource;
use crate::{Error, Result};

/// Settings of a build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Text analysis.
    pub analyzer: AnalyzerConfig,
    /// Default BM25 parameters recorded in the manifest.
    pub bm25: Bm25Params,
    /// Threads for the whole build: tantivy's indexing (at most 8), embedding and HNSW.
    pub threads: usize,
    /// Replace the index even when the new one would lack domains or dense indexes the
    /// existing one has, or when the existing manifest is unreadable (its generations are then
    /// removed). Without it such a build is refused ([`Error::WouldDrop`],
    /// [`Error::UnreadableIndex`]).
    pub replace: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            analyzer: AnalyzerConfig::default(),
            bm25: Bm25Params::default(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            replace: false,
        }
    }
}

/// What a new generation holds and where each part comes from.
struct Plan<'a> {
    /// Domains whose BM25 index is built now.
    build: Vec<String>,
    /// Domains whose BM25 index is linked from the old generation.
    keep: Vec<String>,
    /// Dense indexes built now, for `build` (and, in `add_dense`, the kept domains too).
    dense: &'a [DenseBuild<'a>],
    /// The domains each dense build embeds.
    dense_domains: Vec<String>,
    /// Dense indexes of the old generation kept whole (slugs).
    keep_dense: Vec<String>,
}

impl IndexDir {
    /// Builds an index of `domains` of `source` (a [`sift_core::Corpus`], a
    /// [`crate::MemorySource`], ...) at `root`, with BM25 and the `dense` models, replacing
    /// any index there only once the new one is complete. Domains of an existing index that
    /// are not in `domains` are kept as they are when the dense indexes are built the same
    /// way; a build that would drop a domain or a dense index needs
    /// [`BuildOptions::replace`].
    ///
    /// Everything runs on `options.threads` threads (tantivy's indexing, at most 8, and a
    /// thread pool for embedding and the HNSW graphs). With one thread the HNSW graphs are
    /// reproducible bit for bit; with several, points are inserted concurrently and the
    /// graphs (not the stored vectors or exact search) can differ slightly between builds.
    pub fn build(
        root: impl AsRef<Path>,
        source: &dyn PassageSource,
        domains: &[String],
        options: &BuildOptions,
        dense: &[DenseBuild<'_>],
        progress: &dyn Progress,
    ) -> Result<IndexDir> {
        options.bm25.validate()?;
        for d in dense {
            d.hnsw.validate()?;
        }
        check_names(domains, dense)?;
        let root = root.as_ref();
        in_pool(options.threads, || {
            let lock = lock_index(root)?;
            let previous = read_previous(root, options.replace)?;
            let keep = match &previous {
                Some(old) if !options.replace => carry_over(root, old, domains, options, dense)?,
                _ => Vec::new(),
            };
            let plan = Plan {
                build: domains.to_vec(),
                keep,
                dense,
                dense_domains: domains.to_vec(),
                keep_dense: Vec::new(),
            };
            let manifest_base = ManifestBase {
                analyzer: options.analyzer,
                bm25: options.bm25,
            };
            write_generation(
                root,
                source,
                previous.as_ref(),
                &plan,
                &manifest_base,
                options,
                progress,
                lock,
            )
        })
    }

    /// Adds (or rebuilds) the dense indexes `dense` for every domain of the index at `root`,
    /// whose passages `source` gives again (they must not have changed: their fingerprints
    /// are checked). BM25 and every other dense index are kept as they are.
    pub fn add_dense(
        root: impl AsRef<Path>,
        source: &dyn PassageSource,
        dense: &[DenseBuild<'_>],
        threads: usize,
        progress: &dyn Progress,
    ) -> Result<IndexDir> {
        for d in dense {
            d.hnsw.validate()?;
        }
        check_names(&[], dense)?;
        let root = root.as_ref();
        in_pool(threads, || {
            let lock = lock_index(root)?;
            let old = match Manifest::read(root) {
                Ok(m) => m,
                Err(Error::NotAnIndex { .. }) => {
                    return Err(Error::NotAnIndex {
                        path: root.to_path_buf(),
                    });
                }
                Err(e) => return Err(e),
            };
            for (domain, info) in &old.domains {
                let now = source.fingerprint(domain)?;
                if now != info.fingerprint {
                    return Err(Error::CorpusChanged {
                        path: root.to_path_buf(),
                        domain: domain.clone(),
                        built: info.fingerprint.clone(),
                        now,
                    });
                }
            }
            let domains: Vec<String> = old.domains.keys().cloned().collect();
            let plan = Plan {
                build: Vec::new(),
                keep: domains.clone(),
                dense,
                dense_domains: domains,
                keep_dense: old
                    .dense
                    .keys()
                    .filter(|slug| !dense.iter().any(|d| &d.slug == *slug))
                    .cloned()
                    .collect(),
            };
            let base = ManifestBase {
                analyzer: old.analyzer,
                bm25: old.bm25,
            };
            let options = BuildOptions {
                analyzer: old.analyzer,
                bm25: old.bm25,
                threads,
                replace: false,
            };
            write_generation(
                root,
                source,
                Some(&old),
                &plan,
                &base,
                &options,
                progress,
                lock,
            )
        })
    }
}

/// Domains and dense slugs become directory names of the generation: each must be one plain
/// name ([`sift_core::domain_problem`]), never `..` or a path.
fn check_names(domains: &[String], dense: &[DenseBuild<'_>]) -> Result<()> {
    let names = (domains.iter().map(|d| ("domain", d)))
        .chain(dense.iter().map(|d| ("dense index", &d.slug)));
    for (what, name) in names {
        if let Some(problem) = sift_core::domain_problem(name) {
            return Err(Error::InvalidParameter(format!(
                "{what} {name:?} {problem}: it names a directory of the index"
            )));
        }
    }
    Ok(())
}

/// Runs `f` on a thread pool of `threads` threads (the current one when it has that many).
fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let threads = threads.max(1);
    if rayon::current_num_threads() == threads {
        return f();
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::InvalidParameter(format!("{threads} threads: {e}")))?
        .install(f)
}

/// Creates the index directory if needed (refusing a directory that holds something else)
/// and takes the build lock.
fn lock_index(root: &Path) -> Result<fs::File> {
    if root.exists() && !root.is_dir() {
        return Err(Error::io(
            root,
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a directory",
            ),
        ));
    }
    if root.is_dir() && !paths::manifest(root).exists() {
        let foreign = fs::read_dir(root)
            .map_err(|e| Error::io(root, e))?
            .filter_map(|e| e.ok())
            .any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                // what a build that failed before its first manifest leaves behind
                !(name.starts_with(GEN_PREFIX) || name.starts_with('.') || name == paths::CACHE_DIR)
            });
        if foreign {
            return Err(Error::io(
                root,
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "directory is not empty and holds no Sift index: refusing to write into it",
                ),
            ));
        }
    }
    fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
    let lock_path = paths::lock(root);
    let lock = fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(fs::TryLockError::WouldBlock) => Err(Error::Locked { path: lock_path }),
        Err(fs::TryLockError::Error(e)) => Err(Error::io(&lock_path, e)),
    }
}

/// The manifest of the index being replaced: `None` when there is none (or one of another
/// format version, which this Sift cannot use anyway); an unreadable one stops the build
/// unless `replace`.
fn read_previous(root: &Path, replace: bool) -> Result<Option<Manifest>> {
    match Manifest::read(root) {
        Ok(m) => Ok(Some(m)),
        Err(Error::NotAnIndex { .. } | Error::FormatVersion { .. }) => Ok(None),
        Err(_) if replace => Ok(None),
        Err(e) => Err(Error::UnreadableIndex {
            path: paths::manifest(root),
            message: e.to_string(),
        }),
    }
}

/// The settings the new manifest records.
struct ManifestBase {
    analyzer: AnalyzerConfig,
    bm25: Bm25Params,
}

/// Writes a new generation as `plan` says, swaps the manifest and removes unleased old
/// generations.
#[allow(clippy::too_many_arguments)]
fn write_generation(
    root: &Path,
    source: &dyn PassageSource,
    old: Option<&Manifest>,
    plan: &Plan<'_>,
    base: &ManifestBase,
    options: &BuildOptions,
    progress: &dyn Progress,
    lock: fs::File,
) -> Result<IndexDir> {
    // leftovers of crashed builds (and, with --replace over an unreadable manifest, the old
    // generations) go first: a reader may still hold one, which is then kept
    remove_stale_generations(root, old.map(|m| m.generation.as_str()));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let generation = format!("{GEN_PREFIX}{:x}-{}", now.as_nanos(), std::process::id());
    let gen_dir = root.join(&generation);
    let result = create_generation(&gen_dir).and_then(|()| {
        let mut domains = build_bm25(&gen_dir, source, &plan.build, options, progress)?;
        if let Some(old) = old {
            for domain in &plan.keep {
                link_tree(
                    &paths::bm25(&root.join(&old.generation), domain),
                    &paths::bm25(&gen_dir, domain),
                )?;
                domains.insert(domain.clone(), old.domains[domain].clone());
            }
        }
        let mut dense = BTreeMap::new();
        for build in plan.dense {
            let todo = counts(&domains, &plan.dense_domains);
            let target = Target {
                root,
                gen_dir: &gen_dir,
                source,
                domains: &todo,
                progress,
            };
            dense.insert(build.slug.clone(), build_dense(target, build)?);
        }
        if let Some(old) = old {
            link_kept_dense(root, old, &gen_dir, plan, &mut dense)?;
        }
        Ok((domains, dense))
    });
    let (domain_infos, dense_infos) = match result {
        Ok(d) => d,
        Err(e) => {
            let _ = fs::remove_dir_all(&gen_dir);
            return Err(e);
        }
    };
    if let Err(e) = umask_modes(&gen_dir) {
        let _ = fs::remove_dir_all(&gen_dir);
        return Err(e);
    }
    sync_dir(&gen_dir)?;
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        sift_version: env!("CARGO_PKG_VERSION").to_string(),
        generation,
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs(),
        corpus: source.description(),
        layout: source.layout(),
        analyzer: base.analyzer,
        bm25: base.bm25,
        domains: domain_infos,
        dense: dense_infos,
    };
    manifest.write_atomic(root)?;
    remove_stale_generations(root, Some(&manifest.generation));
    drop(lock);
    IndexDir::open(root)
}

/// Links into the new generation the dense data the plan keeps: for every dense index built
/// now, its files of the domains kept from the old generation (and their image counts); and
/// the old dense indexes kept whole.
fn link_kept_dense(
    root: &Path,
    old: &Manifest,
    gen_dir: &Path,
    plan: &Plan<'_>,
    dense: &mut BTreeMap<String, DenseInfo>,
) -> Result<()> {
    let old_gen = root.join(&old.generation);
    let kept_domains: Vec<&String> = plan
        .keep
        .iter()
        .filter(|d| !plan.dense_domains.contains(d))
        .collect();
    for (slug, info) in dense.iter_mut() {
        for domain in &kept_domains {
            link_tree(
                &paths::dense(&old_gen, slug, domain),
                &paths::dense(gen_dir, slug, domain),
            )?;
            let (Some(new), Some(was)) = (&mut info.images, &old.dense[slug].images) else {
                continue;
            };
            link_tree(
                &paths::images(&old_gen, slug, domain),
                &paths::images(gen_dir, slug, domain),
            )?;
            if let Some(n) = was.images.get(*domain) {
                new.images.insert((*domain).clone(), *n);
            }
            if let Some(n) = was.undecodable.get(*domain) {
                new.undecodable.insert((*domain).clone(), *n);
            }
        }
    }
    for slug in &plan.keep_dense {
        let info = old.dense[slug].clone();
        for domain in old.domains.keys() {
            link_tree(
                &paths::dense(&old_gen, slug, domain),
                &paths::dense(gen_dir, slug, domain),
            )?;
            if info.images.is_some() {
                link_tree(
                    &paths::images(&old_gen, slug, domain),
                    &paths::images(gen_dir, slug, domain),
                )?;
            }
        }
        dense.insert(slug.clone(), info);
    }
    Ok(())
}

/// Gives every file and directory of the generation the mode the process's umask gives a
/// new one (the lease file's and the generation directory's, created with
/// `File::create` / `create_dir`): tantivy writes its `meta.json` and `.managed.json`
/// through temporary files of mode 0600, which another user (a service account, a shared
/// lab directory) could not read.
#[cfg(unix)]
fn umask_modes(gen_dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode_of = |p: &Path| {
        fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o7777)
            .map_err(|e| Error::io(p, e))
    };
    let lease = paths::lease(gen_dir);
    let (file_mode, dir_mode) = (mode_of(&lease)?, mode_of(gen_dir)?);
    let mut stack = vec![gen_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
            let want = if kind.is_dir() {
                stack.push(path.clone());
                dir_mode
            } else if kind.is_file() {
                file_mode
            } else {
                continue;
            };
            if mode_of(&path)? != want {
                fs::set_permissions(&path, fs::Permissions::from_mode(want))
                    .map_err(|e| Error::io(&path, e))?;
            }
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn umask_modes(_gen_dir: &Path) -> Result<()> {
    Ok(())
}

/// Creates an empty generation directory with its lease file.
fn create_generation(gen_dir: &Path) -> Result<()> {
    fs::create_dir_all(gen_dir).map_err(|e| Error::io(gen_dir, e))?;
    let lease = paths::lease(gen_dir);
    fs::File::create(&lease).map_err(|e| Error::io(&lease, e))?;
    Ok(())
}

/// The domains of the `old` index that this build does not rebuild and keeps, unchanged.
/// That is possible only when the new index has the same dense indexes, built the same way
/// (so the kept domains have every vector index the new manifest lists) and the same
/// analyzer; otherwise the build would drop them, which needs [`BuildOptions::replace`].
/// Dense indexes of the old index that this build lacks are likewise refused.
fn carry_over(
    root: &Path,
    old: &Manifest,
    domains: &[String],
    options: &BuildOptions,
    dense: &[DenseBuild<'_>],
) -> Result<Vec<String>> {
    let mut dropped = Vec::new();
    for slug in old.dense.keys() {
        if !dense.iter().any(|d| &d.slug == slug) {
            dropped.push(format!("dense:{slug}"));
        }
    }
    let kept: Vec<String> = old
        .domains
        .keys()
        .filter(|d| !domains.contains(d))
        .cloned()
        .collect();
    if !kept.is_empty() {
        let mut why = Vec::new();
        if old.analyzer != options.analyzer {
            why.push("another analyzer".to_string());
        }
        for d in dense {
            match old.dense.get(&d.slug) {
                None => why.push(format!("dense:{} is new", d.slug)),
                Some(info)
                    if info.fingerprint != d.fingerprint()
                        || info.dtype != d.dtype
                        || info.hnsw != d.hnsw
                        || info.images.is_some() != d.has_images() =>
                {
                    why.push(format!("dense:{} is built differently", d.slug))
                }
                Some(_) => {}
            }
        }
        if !why.is_empty() {
            for k in &kept {
                dropped.push(format!("domain {k} (not rebuilt, and {})", why.join(", ")));
            }
        }
    }
    if !dropped.is_empty() {
        return Err(Error::WouldDrop {
            path: root.to_path_buf(),
            dropped,
        });
    }
    Ok(kept)
}

/// Recreates the directory tree `from` at `to`, hard-linking the files (index files are never
/// modified in place), or copying them where links are not possible.
fn link_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
    for entry in fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(|e| Error::io(&src, e))?;
        if kind.is_dir() {
            link_tree(&src, &dst)?;
        } else if fs::hard_link(&src, &dst).is_err() {
            fs::copy(&src, &dst).map_err(|e| Error::io(&src, e))?;
        }
    }
    Ok(())
}

/// Builds the BM25 index of each of `domains` into the generation.
fn build_bm25(
    gen_dir: &Path,
    source: &dyn PassageSource,
    domains: &[String],
    options: &BuildOptions,
    progress: &dyn Progress,
) -> Result<BTreeMap<String, DomainInfo>> {
    let mut out = BTreeMap::new();
    for domain in domains {
        let fingerprint = source.fingerprint(domain)?;
        let mut passages = source.passages(domain)?;
        progress.start(domain, passages.len_hint());
        let stats = bm25::build(
            &paths::bm25(gen_dir, domain),
            &mut passages,
            &options.analyzer,
            options.threads,
            progress,
        );
        progress.finish();
        let stats = match stats {
            Err(Error::Corpus(sift_core::Error::EmptyCorpus { .. })) => {
                return Err(Error::Corpus(sift_core::Error::EmptyCorpus {
                    path: source.location(domain),
                }));
            }
            other => other?,
        };
        let counts = passages
            .warnings()
            .counts()
            .map(|(kind, n)| (kind.name().to_string(), n))
            .collect();
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
