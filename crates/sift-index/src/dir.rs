use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sift_core::Corpus;

use crate::analyzer::AnalyzerConfig;
use crate::bm25::{self, Bm25Domain, Bm25Params};
use crate::cache::EmbedCache;
use crate::dense::{self, DenseDomain, HnswParams, VectorDtype};
use crate::manifest::{DenseInfo, DomainInfo, FORMAT_VERSION, ImageIndexInfo, Manifest, sync_dir};
use crate::progress::Progress;
use crate::{Error, Result};

const LOCK_FILE: &str = ".lock";
pub(crate) const GEN_PREFIX: &str = "gen-";
/// A file in each generation that readers hold a shared lock on while they use it; a build
/// removes an old generation only when it can lock this file exclusively.
const LEASE_FILE: &str = ".lease";
/// The embedding caches, kept across builds.
const CACHE_DIR: &str = "embed-cache";
/// How many times a reader re-reads the manifest when the generation it named was replaced
/// between reading the manifest and taking the lease.
const OPEN_ATTEMPTS: usize = 50;

/// Settings of a build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Text analysis.
    pub analyzer: AnalyzerConfig,
    /// Default BM25 parameters recorded in the manifest.
    pub bm25: Bm25Params,
    /// Indexing threads.
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

/// Turns passages into unit vectors for a dense index (implemented by the CLI over
/// `sift-embed`, so this crate stays independent of any model runtime).
pub trait PassageEmbedder: Sync {
    /// Model name recorded in the manifest.
    fn name(&self) -> &str;
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Everything that determines the vectors besides the text (the model's weights and
    /// files, prefix, pooling, maximum length, dtype, device kind): the embedding cache is
    /// keyed by it, so it must change whenever a vector could.
    fn fingerprint(&self) -> String;
    /// A hash of the model's files alone (weights, tokenizer, configs), recorded in the
    /// manifest so that a search can check it loads the same model; empty when unknown.
    fn model_hash(&self) -> String {
        String::new()
    }
    /// One unit vector per text, in order.
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, String>;
}

/// Turns encoded images into unit vectors for an image index, in two stages so that the
/// build can decode and preprocess the next batch while the model embeds the current one.
pub trait ImageEmbedder: Sync {
    /// Model name recorded in the manifest.
    fn name(&self) -> &str;
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Everything besides the image bytes that determines the vectors (the cache key).
    fn fingerprint(&self) -> String;
    /// Decodes and preprocesses encoded images: model input per image, or why the image
    /// cannot be decoded.
    fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Vec<f32>, String>>;
    /// One unit vector per prepared input, in order.
    fn embed_prepared(&self, inputs: &[Vec<f32>]) -> std::result::Result<Vec<Vec<f32>>, String>;
}

/// A dense index to build beside BM25.
pub struct DenseBuild<'a> {
    /// Name of the index (`dense:<slug>`).
    pub slug: String,
    /// How to load the model again at query time.
    pub spec: String,
    /// The embedder.
    pub embedder: &'a dyn PassageEmbedder,
    /// The image tower of the same model (vision-language models): the domain's
    /// `document_images` are embedded into an image index under the same slug.
    pub images: Option<&'a dyn ImageEmbedder>,
    /// Storage precision.
    pub dtype: VectorDtype,
    /// HNSW parameters.
    pub hnsw: HnswParams,
}

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

    /// Opens the dense vectors of `domain` for the index named `slug`.
    pub fn dense(&self, slug: &str, domain: &str) -> Result<DenseDomain> {
        self.check_domain(domain, None)?;
        DenseDomain::open(&dense::domain_dir(
            &self.root.join(&self.manifest.generation),
            slug,
            domain,
        ))
    }

    /// Opens the image vectors of `domain` for the dense index named `slug`, with the image
    /// path of each vector ordinal.
    pub fn images(&self, slug: &str, domain: &str) -> Result<(DenseDomain, Vec<String>)> {
        self.check_domain(domain, None)?;
        let dir = image_dir(&self.root.join(&self.manifest.generation), slug, domain);
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
        let vectors = DenseDomain::open(&dir)?;
        let ids_path = dir.join(IMAGE_IDS);
        let bytes = fs::read(&ids_path).map_err(|e| Error::io(&ids_path, e))?;
        let ids: Vec<String> = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
            path: ids_path.clone(),
            message: format!("not a JSON list of image ids: {e}"),
        })?;
        if ids.len() != vectors.len() {
            return Err(Error::Corrupt {
                path: ids_path,
                message: format!("{} ids for {} vectors", ids.len(), vectors.len()),
            });
        }
        Ok((vectors, ids))
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
    ///
    /// Everything runs on `options.threads` threads (tantivy's indexing, at most 8, and a
    /// thread pool for embedding and the HNSW graphs). With one thread the HNSW graphs are
    /// reproducible bit for bit; with several, points are inserted concurrently and the
    /// graphs (not the stored vectors or exact search) can differ slightly between builds.
    pub fn build(
        root: impl AsRef<Path>,
        corpus: &Corpus,
        domains: &[String],
        options: &BuildOptions,
        dense: &[DenseBuild<'_>],
        progress: &dyn Progress,
    ) -> Result<IndexDir> {
        let threads = options.threads.max(1);
        let root = root.as_ref();
        if rayon::current_num_threads() == threads {
            return Self::build_here(root, corpus, domains, options, dense, progress);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| Error::InvalidParameter(format!("{threads} threads: {e}")))?;
        pool.install(|| Self::build_here(root, corpus, domains, options, dense, progress))
    }

    fn build_here(
        root: &Path,
        corpus: &Corpus,
        domains: &[String],
        options: &BuildOptions,
        dense: &[DenseBuild<'_>],
        progress: &dyn Progress,
    ) -> Result<IndexDir> {
        options.bm25.validate()?;
        for d in dense {
            d.hnsw.validate()?;
        }
        let root = root.to_path_buf();
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
                    // what a build that failed before its first manifest leaves behind
                    !(name.starts_with(GEN_PREFIX) || name.starts_with('.') || name == CACHE_DIR)
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
        let previous = match Manifest::read(&root) {
            Ok(m) => Some(m),
            // nothing there, or an index this version cannot read anyway: replaced
            Err(Error::NotAnIndex { .. } | Error::FormatVersion { .. }) => None,
            Err(_) if options.replace => None,
            Err(e) => {
                return Err(Error::UnreadableIndex {
                    path: root.join("manifest.json"),
                    message: e.to_string(),
                });
            }
        };
        let carried = match &previous {
            Some(old) if !options.replace => carry_over(&root, old, domains, options, dense)?,
            _ => Vec::new(),
        };
        if previous.is_some() || options.replace {
            remove_stale_generations(&root, previous.as_ref().map(|m| m.generation.as_str()));
        }

        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let generation = format!("{GEN_PREFIX}{:x}-{}", now.as_nanos(), std::process::id());
        let gen_dir = root.join(&generation);
        let result = create_generation(&gen_dir)
            .and_then(|()| build_generation(&gen_dir, corpus, domains, options, progress))
            .and_then(|d| {
                let mut infos = BTreeMap::new();
                for build in dense {
                    let mut info =
                        build_dense(&root, &gen_dir, corpus, domains, &d, build, progress)?;
                    if let Some(images) = build.images {
                        info.images = Some(build_images(
                            &root, &gen_dir, corpus, domains, build, images, progress,
                        )?);
                    }
                    infos.insert(build.slug.clone(), info);
                }
                Ok((d, infos))
            })
            .and_then(|(mut d, mut infos)| {
                if let Some(old) = &previous {
                    link_domains(&root, old, &gen_dir, &carried, &mut d, &mut infos)?;
                }
                Ok((d, infos))
            });
        let (domain_infos, dense_infos) = match result {
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
            dense: dense_infos,
        };
        manifest.write_atomic(&root)?;
        remove_stale_generations(&root, Some(&manifest.generation));
        drop(lock);
        IndexDir::open(&root)
    }
}

/// Creates an empty generation directory with its lease file.
fn create_generation(gen_dir: &Path) -> Result<()> {
    fs::create_dir_all(gen_dir).map_err(|e| Error::io(gen_dir, e))?;
    let lease = gen_dir.join(LEASE_FILE);
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
                    if info.fingerprint != d.embedder.fingerprint()
                        || info.dtype != d.dtype
                        || info.hnsw != d.hnsw
                        || info.images.is_some() != d.images.is_some() =>
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

/// Links the files of the `carried` domains of the `old` generation into the new one and
/// records them in the new manifest's entries.
fn link_domains(
    root: &Path,
    old: &Manifest,
    gen_dir: &Path,
    carried: &[String],
    domains: &mut BTreeMap<String, DomainInfo>,
    dense: &mut BTreeMap<String, DenseInfo>,
) -> Result<()> {
    let old_gen = root.join(&old.generation);
    for domain in carried {
        link_tree(
            &old_gen.join("bm25").join(domain),
            &gen_dir.join("bm25").join(domain),
        )?;
        domains.insert(domain.clone(), old.domains[domain].clone());
        for (slug, info) in dense.iter_mut() {
            link_tree(
                &dense::domain_dir(&old_gen, slug, domain),
                &dense::domain_dir(gen_dir, slug, domain),
            )?;
            let (Some(new), Some(was)) = (&mut info.images, &old.dense[slug].images) else {
                continue;
            };
            link_tree(
                &image_dir(&old_gen, slug, domain),
                &image_dir(gen_dir, slug, domain),
            )?;
            if let Some(n) = was.images.get(domain) {
                new.images.insert(domain.clone(), *n);
            }
            if let Some(n) = was.undecodable.get(domain) {
                new.undecodable.insert(domain.clone(), *n);
            }
        }
    }
    Ok(())
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

/// Embeds every passage of `domains` (through the cache) and writes vectors and graphs.
fn build_dense(
    root: &Path,
    gen_dir: &Path,
    corpus: &Corpus,
    domains: &[String],
    infos: &BTreeMap<String, DomainInfo>,
    build: &DenseBuild<'_>,
    progress: &dyn Progress,
) -> Result<DenseInfo> {
    let embedder = build.embedder;
    let dim = embedder.dim();
    let fingerprint = embedder.fingerprint();
    let cache_path = root.join(CACHE_DIR).join(format!("{}.bin", build.slug));
    let mut cache = EmbedCache::open(&cache_path, &fingerprint, dim)?;
    let (mut embedded, mut cached) = (0u64, 0u64);
    const CHUNK: usize = 512;
    for domain in domains {
        let mut vectors: Vec<f32> = Vec::with_capacity(infos[domain].passages as usize * dim);
        progress.start(
            &format!("{domain} {}", build.slug),
            Some(infos[domain].passages),
        );
        let mut passages = corpus.passages(domain)?;
        loop {
            let chunk: Vec<sift_core::Passage> = passages
                .by_ref()
                .take(CHUNK)
                .collect::<sift_core::Result<_>>()?;
            if chunk.is_empty() {
                break;
            }
            let keys: Vec<u128> = chunk.iter().map(|p| cache.key(&p.text)).collect();
            let missing: Vec<usize> = (0..chunk.len())
                .filter(|&i| cache.get(keys[i]).is_none())
                .collect();
            let texts: Vec<&str> = missing.iter().map(|&i| chunk[i].text.as_str()).collect();
            let fresh = if texts.is_empty() {
                Vec::new()
            } else {
                embedder.embed(&texts).map_err(|message| Error::Embed {
                    model: embedder.name().to_string(),
                    message: format!(
                        "{message} (embedding {} passages of domain {domain} from {:?})",
                        texts.len(),
                        chunk[missing[0]].id
                    ),
                })?
            };
            if fresh.len() != texts.len() || fresh.iter().any(|v| v.len() != dim) {
                return Err(Error::Embed {
                    model: embedder.name().to_string(),
                    message: format!("expected {} vectors of {dim} dimensions", texts.len()),
                });
            }
            if let Some(j) = fresh.iter().position(|v| v.iter().any(|x| !x.is_finite())) {
                return Err(Error::Embed {
                    model: embedder.name().to_string(),
                    message: format!(
                        "the vector of passage {:?} is not finite (NaN or infinity): the model's weights or settings are broken",
                        chunk[missing[j]].id
                    ),
                });
            }
            let entries: Vec<(u128, &[f32])> = missing
                .iter()
                .zip(&fresh)
                .map(|(&i, v)| (keys[i], v.as_slice()))
                .collect();
            cache.insert(&entries)?;
            embedded += fresh.len() as u64;
            cached += (chunk.len() - fresh.len()) as u64;
            for key in &keys {
                vectors.extend(cache.get(*key).expect("inserted above"));
            }
            progress.inc(chunk.len() as u64);
        }
        progress.finish();
        let count = vectors.len() / dim;
        if count as u64 != infos[domain].passages {
            return Err(Error::Corrupt {
                path: corpus.root().to_path_buf(),
                message: format!(
                    "domain {domain}: {count} passages embedded but {} indexed (corpus changed during the build?)",
                    infos[domain].passages
                ),
            });
        }
        progress.start(&format!("{domain} hnsw"), None);
        let written = dense::write(
            &dense::domain_dir(gen_dir, &build.slug, domain),
            embedder.name(),
            dim,
            &vectors,
            build.dtype,
            build.hnsw,
        );
        progress.finish();
        written?;
    }
    let _ = cache.len();
    Ok(DenseInfo {
        model: embedder.name().to_string(),
        spec: build.spec.clone(),
        model_hash: embedder.model_hash(),
        fingerprint,
        dim,
        dtype: build.dtype,
        hnsw: build.hnsw,
        embedded,
        cached,
        images: None,
    })
}

/// Ids of the vectors of an image index: a JSON list of normalised image paths (JSON, so
/// that no character of an id can break the list).
const IMAGE_IDS: &str = "ids.json";

/// Embeds the `document_images` of `domains` (through the cache; undecodable images are
/// counted and skipped) and writes their vectors, graphs and ids.
fn build_images(
    root: &Path,
    gen_dir: &Path,
    corpus: &Corpus,
    domains: &[String],
    build: &DenseBuild<'_>,
    embedder: &dyn ImageEmbedder,
    progress: &dyn Progress,
) -> Result<ImageIndexInfo> {
    let dim = embedder.dim();
    let fingerprint = embedder.fingerprint();
    let cache_path = root
        .join("embed-cache")
        .join(format!("{}.images.bin", build.slug));
    let mut cache = EmbedCache::open(&cache_path, &fingerprint, dim)?;
    let mut info = ImageIndexInfo {
        fingerprint: fingerprint.clone(),
        ..ImageIndexInfo::default()
    };
    const CHUNK: usize = 64;
    let embed_err = |message: String| Error::Embed {
        model: embedder.name().to_string(),
        message,
    };
    for domain in domains {
        progress.start(&format!("{domain} {} images", build.slug), None);
        let mut ids: Vec<String> = Vec::new();
        let mut vectors: Vec<f32> = Vec::new();
        let mut skipped = 0u64;
        let mut images = corpus.images(domain)?;
        // a reader thread decodes and preprocesses chunk i + 1 while the model runs on chunk i
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Prepared>>(1);
            // keys cached before this domain started (the main thread inserts meanwhile)
            let known = cache.keys();
            let key_of = |bytes: &[u8]| EmbedCache::key_bytes_with(&fingerprint, bytes);
            scope.spawn(move || {
                loop {
                    let chunk: Vec<sift_core::ImageRecord> = match images
                        .by_ref()
                        .take(CHUNK)
                        .collect::<sift_core::Result<_>>(
                    ) {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = tx.send(Err(e.into()));
                            return;
                        }
                    };
                    if chunk.is_empty() {
                        let _ = tx.send(Ok(Prepared {
                            records: Vec::new(),
                            keys: Vec::new(),
                            inputs: Vec::new(),
                            warnings: images.warnings().clone(),
                        }));
                        return;
                    }
                    let keys: Vec<u128> = chunk.iter().map(|r| key_of(&r.bytes)).collect();
                    let todo: Vec<usize> = (0..chunk.len())
                        .filter(|&i| !known.contains(&keys[i]))
                        .collect();
                    let bytes: Vec<&[u8]> =
                        todo.iter().map(|&i| chunk[i].bytes.as_slice()).collect();
                    let prepared = embedder.prepare(&bytes);
                    let mut inputs: Vec<(usize, std::result::Result<Vec<f32>, String>)> =
                        todo.into_iter().zip(prepared).collect();
                    inputs.sort_by_key(|(i, _)| *i);
                    if tx
                        .send(Ok(Prepared {
                            records: chunk,
                            keys,
                            inputs,
                            warnings: sift_core::Warnings::new(),
                        }))
                        .is_err()
                    {
                        return;
                    }
                }
            });
            for prepared in rx {
                let p = prepared?;
                if p.records.is_empty() {
                    for (kind, n) in p.warnings.counts() {
                        *info.warnings.entry(kind.name().to_string()).or_default() += n;
                    }
                    break;
                }
                let (ok, bad): (Vec<_>, Vec<_>) =
                    p.inputs.into_iter().partition(|(_, r)| r.is_ok());
                for (i, r) in &bad {
                    skipped += 1;
                    if info.undecodable_examples.len() < 10 {
                        let why = r.as_ref().err().cloned().unwrap_or_default();
                        let rec = &p.records[*i];
                        info.undecodable_examples.push(format!(
                            "{}: row {}: {}: {why}",
                            rec.file.display(),
                            rec.row,
                            rec.path
                        ));
                    }
                }
                let ok: Vec<(usize, Vec<f32>)> = ok
                    .into_iter()
                    .map(|(i, r)| (i, r.expect("partitioned")))
                    .collect();
                let inputs: Vec<Vec<f32>> = ok.iter().map(|(_, x)| x.clone()).collect();
                let fresh = if inputs.is_empty() {
                    Vec::new()
                } else {
                    embedder.embed_prepared(&inputs).map_err(|message| {
                        embed_err(format!(
                            "{message} (embedding {} images of domain {domain} from {:?})",
                            inputs.len(),
                            p.records[ok[0].0].path
                        ))
                    })?
                };
                if fresh.len() != inputs.len() || fresh.iter().any(|v| v.len() != dim) {
                    return Err(embed_err(format!(
                        "expected {} vectors of {dim} dimensions",
                        inputs.len()
                    )));
                }
                if let Some(j) = fresh.iter().position(|v| v.iter().any(|x| !x.is_finite())) {
                    return Err(embed_err(format!(
                        "the vector of image {:?} is not finite (NaN or infinity): the model's weights or preprocessing settings are broken",
                        p.records[ok[j].0].path
                    )));
                }
                let entries: Vec<(u128, &[f32])> = ok
                    .iter()
                    .zip(&fresh)
                    .map(|((i, _), v)| (p.keys[*i], v.as_slice()))
                    .collect();
                cache.insert(&entries)?;
                info.embedded += fresh.len() as u64;
                let bad: std::collections::HashSet<usize> = bad.iter().map(|(i, _)| *i).collect();
                for (i, r) in p.records.iter().enumerate() {
                    if bad.contains(&i) {
                        continue;
                    }
                    let Some(v) = cache.get(p.keys[i]) else {
                        continue;
                    };
                    vectors.extend(v);
                    ids.push(r.path.clone());
                }
                info.cached += (p.records.len() - bad.len() - fresh.len()) as u64;
                progress.inc(p.records.len() as u64);
            }
            Ok(())
        })?;
        progress.finish();
        let dir = image_dir(gen_dir, &build.slug, domain);
        progress.start(&format!("{domain} image hnsw"), None);
        let written = dense::write(
            &dir,
            embedder.name(),
            dim,
            &vectors,
            build.dtype,
            build.hnsw,
        );
        progress.finish();
        written?;
        let ids_path = dir.join(IMAGE_IDS);
        let json = serde_json::to_vec(&ids).expect("strings serialise");
        fs::write(&ids_path, json).map_err(|e| Error::io(&ids_path, e))?;
        info.images.insert(domain.clone(), ids.len() as u64);
        if skipped > 0 {
            info.undecodable.insert(domain.clone(), skipped);
        }
    }
    Ok(info)
}

/// A chunk of corpus images read and prepared ahead of the model.
struct Prepared {
    records: Vec<sift_core::ImageRecord>,
    keys: Vec<u128>,
    /// (index into records, model input or decode error) of the images not in the cache
    inputs: Vec<(usize, std::result::Result<Vec<f32>, String>)>,
    /// reader warnings, sent with the final (empty) chunk
    warnings: sift_core::Warnings,
}

fn image_dir(gen_dir: &Path, slug: &str, domain: &str) -> PathBuf {
    gen_dir.join("images").join(slug).join(domain)
}

/// Removes generation directories other than `live` (left by crashed or replaced builds),
/// except those a reader still holds a lease on (a later build removes them).
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
    match fs::File::open(dir.join(LEASE_FILE)) {
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
    let path = gen_dir.join(LEASE_FILE);
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
