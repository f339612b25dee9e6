//! Dense indexes of a build: the embedder traits the index builder takes (so this crate
//! depends on no model runtime), and the pipelines that embed a domain's passages and
//! images through the embedding cache into vectors and HNSW graphs.
use std::any::Any;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use crate::cache::EmbedCache;
use crate::dense::{self, HnswParams, VectorDtype};
use crate::faiss::FaissFile;
use crate::manifest::{DenseInfo, ImageIndexInfo};
use crate::paths;
use crate::precomputed::Precomputed;
use crate::progress::Progress;
use crate::source::PassageSource;
use crate::{Error, Result};

/// An error of an embedder, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What names the vectors of an embedder (either side): shared by [`PassageEmbedder`] and
/// [`ImageEmbedder`].
pub trait EmbedderInfo: Sync {
    /// Model name recorded in the manifest.
    fn name(&self) -> &str;
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Everything that determines the vectors besides the input (the model's weights and
    /// files, prefix, pooling, maximum length, dtype, device kind): the embedding cache is
    /// keyed by it, so it must change whenever a vector could.
    fn fingerprint(&self) -> String;
}

/// Turns passages into unit vectors for a dense index.
pub trait PassageEmbedder: EmbedderInfo {
    /// What can go wrong embedding.
    type Error: std::error::Error + Send + Sync + 'static;
    /// A hash of the model's files alone (weights, tokenizer, configs), recorded in the
    /// manifest so that a search can check it loads the same model; empty when unknown.
    fn model_hash(&self) -> String {
        String::new()
    }
    /// The embedding profile the vectors are made with when it is not the model's default
    /// (recorded, so that a search embeds queries the same way).
    fn profile(&self) -> Option<String> {
        None
    }
    /// One unit vector per text, in order.
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, Self::Error>;
}

/// Turns encoded images into unit vectors for an image index, in two stages so that the
/// build can decode and preprocess the next batch while the model embeds the current one.
pub trait ImageEmbedder: EmbedderInfo {
    /// An image decoded and preprocessed for the model.
    type Prepared: Send + 'static;
    /// Why an image cannot be prepared (it is counted and skipped).
    type PrepareError: std::error::Error + Send + Sync + 'static;
    /// What can go wrong embedding prepared images (the build stops).
    type Error: std::error::Error + Send + Sync + 'static;
    /// Decodes and preprocesses encoded images: the model input of each, or why it cannot
    /// be embedded.
    fn prepare(
        &self,
        images: &[&[u8]],
    ) -> Vec<std::result::Result<Self::Prepared, Self::PrepareError>>;
    /// One unit vector per prepared image, in order.
    fn embed_prepared(
        &self,
        images: &[Self::Prepared],
    ) -> std::result::Result<Vec<Vec<f32>>, Self::Error>;
}

/// [`PassageEmbedder`] with its error type erased, so that builds of different embedders
/// fit in one list.
trait DynPassageEmbedder: EmbedderInfo {
    fn model_hash(&self) -> String;
    fn profile(&self) -> Option<String>;
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, BoxError>;
}

impl<E: PassageEmbedder> DynPassageEmbedder for E {
    fn model_hash(&self) -> String {
        PassageEmbedder::model_hash(self)
    }
    fn profile(&self) -> Option<String> {
        PassageEmbedder::profile(self)
    }
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, BoxError> {
        PassageEmbedder::embed(self, texts).map_err(Into::into)
    }
}

type Erased = Box<dyn Any + Send>;

/// [`ImageEmbedder`] with its associated types erased.
trait DynImageEmbedder: EmbedderInfo {
    fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Erased, String>>;
    fn embed_prepared(&self, images: Vec<Erased>) -> std::result::Result<Vec<Vec<f32>>, BoxError>;
}

impl<E: ImageEmbedder> DynImageEmbedder for E {
    fn prepare(&self, images: &[&[u8]]) -> Vec<std::result::Result<Erased, String>> {
        ImageEmbedder::prepare(self, images)
            .into_iter()
            .map(|r| r.map(|p| Box::new(p) as Erased).map_err(|e| e.to_string()))
            .collect()
    }
    fn embed_prepared(&self, images: Vec<Erased>) -> std::result::Result<Vec<Vec<f32>>, BoxError> {
        let typed: Vec<E::Prepared> = images
            .into_iter()
            .map(|b| {
                *b.downcast::<E::Prepared>()
                    .expect("prepared by this embedder")
            })
            .collect();
        ImageEmbedder::embed_prepared(self, &typed).map_err(Into::into)
    }
}

/// A dense index to build beside BM25: passage vectors of a model, and, for models that
/// embed images too, an image index of the corpus images under the same slug.
pub struct DenseBuild<'a> {
    /// Name of the index (`dense:<slug>`).
    pub slug: String,
    /// How to load the model again at query time (a directory or hub id).
    pub spec: String,
    /// Storage precision.
    pub dtype: VectorDtype,
    /// HNSW parameters.
    pub hnsw: HnswParams,
    passages: &'a dyn DynPassageEmbedder,
    images: Option<&'a dyn DynImageEmbedder>,
    vectors: Option<&'a Precomputed>,
}

impl<'a> DenseBuild<'a> {
    /// A dense index `slug` of `embedder`'s passage vectors (f32, default HNSW settings).
    pub fn new<E: PassageEmbedder>(
        slug: impl Into<String>,
        spec: impl Into<String>,
        embedder: &'a E,
    ) -> DenseBuild<'a> {
        DenseBuild {
            slug: slug.into(),
            spec: spec.into(),
            dtype: VectorDtype::F32,
            hnsw: HnswParams::default(),
            passages: embedder,
            images: None,
            vectors: None,
        }
    }

    /// Indexes the passage vectors of `vectors` (made elsewhere by the same model) instead
    /// of embedding the passages: every passage of a built domain must have one, and no
    /// other id may; the index records the vectors' fingerprint.
    pub fn precomputed(mut self, vectors: &'a Precomputed) -> DenseBuild<'a> {
        self.vectors = Some(vectors);
        self
    }

    /// Also embeds the domains' images with `images` (the image side of the same model).
    pub fn with_images<I: ImageEmbedder>(mut self, images: &'a I) -> DenseBuild<'a> {
        self.images = Some(images);
        self
    }

    /// Stores vectors in `dtype`.
    pub fn dtype(mut self, dtype: VectorDtype) -> DenseBuild<'a> {
        self.dtype = dtype;
        self
    }

    /// Builds the HNSW graphs with `hnsw`.
    pub fn hnsw(mut self, hnsw: HnswParams) -> DenseBuild<'a> {
        self.hnsw = hnsw;
        self
    }

    /// The passage embedder's cache key (a build keeps the domains it does not rebuild
    /// only when this has not changed).
    pub fn fingerprint(&self) -> String {
        match self.vectors {
            Some(v) => v.manifest().fingerprint.clone(),
            None => self.passages.fingerprint(),
        }
    }

    /// Whether this build has an image side.
    pub fn has_images(&self) -> bool {
        self.images.is_some()
    }
}

/// What a dense build reads and where it writes: the index `root` (its embedding cache),
/// the generation `gen_dir` being written, the corpus and the `domains` to embed (with their
/// passage counts).
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub root: &'a Path,
    pub gen_dir: &'a Path,
    pub source: &'a dyn PassageSource,
    pub domains: &'a [(String, u64)],
    pub progress: &'a dyn Progress,
}

impl Target<'_> {
    /// Writes one domain's vectors and their HNSW graph to `dir`, shown as `label` while
    /// the graph is built.
    fn write_graph(
        &self,
        dir: &Path,
        label: &str,
        (dim, vectors, ids): (usize, &[f32], &[String]),
        build: &DenseBuild<'_>,
    ) -> Result<()> {
        self.progress.start(label, None);
        let model = build.passages.name();
        let written = dense::write(dir, model, dim, vectors, ids, build.dtype, build.hnsw);
        self.progress.finish();
        written.map(|_| ())
    }
}

/// Builds the dense index `build` of `target`: its passages' vectors and graphs and, for a
/// model with an image side, its image index.
pub(crate) fn build_dense(target: Target<'_>, build: &DenseBuild<'_>) -> Result<DenseInfo> {
    let mut info = build_passages(target, build)?;
    info.images = build_images(target, build)?;
    Ok(info)
}

/// Embeds every passage of the target's domains (through the cache) and writes vectors, ids
/// and graphs into its generation.
fn build_passages(t: Target<'_>, build: &DenseBuild<'_>) -> Result<DenseInfo> {
    if let Some(vectors) = build.vectors {
        return index_precomputed(t, build, vectors);
    }
    let embedder = build.passages;
    let dim = embedder.dim();
    let fingerprint = embedder.fingerprint();
    let mut cache = EmbedCache::open(&paths::text_cache(t.root, &build.slug), &fingerprint, dim)?;
    let (mut embedded, mut cached) = (0u64, 0u64);
    let output_err = |message: String| Error::EmbedOutput {
        model: embedder.name().to_string(),
        message,
    };
    const CHUNK: usize = 512;
    for (domain, count) in t.domains {
        let mut vectors: Vec<f32> = Vec::with_capacity(*count as usize * dim);
        let mut ids: Vec<String> = Vec::with_capacity(*count as usize);
        t.progress
            .start(&format!("{domain} {}", build.slug), Some(*count));
        let mut passages = t.source.passages(domain)?;
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
                embedder.embed(&texts).map_err(|source| Error::Embed {
                    model: embedder.name().to_string(),
                    what: format!(
                        "{} passages of domain {domain} from {:?}",
                        texts.len(),
                        chunk[missing[0]].id
                    ),
                    source,
                })?
            };
            check_output(&fresh, texts.len(), dim, |j| {
                format!(
                    "the vector of passage {:?} is not finite (NaN or infinity): the model's weights or settings are broken",
                    chunk[missing[j]].id
                )
            })
            .map_err(output_err)?;
            let entries: Vec<(u128, &[f32])> = missing
                .iter()
                .zip(&fresh)
                .map(|(&i, v)| (keys[i], v.as_slice()))
                .collect();
            cache.insert(&entries)?;
            embedded += fresh.len() as u64;
            cached += (chunk.len() - fresh.len()) as u64;
            t.progress.inc(chunk.len() as u64);
            for (key, p) in keys.iter().zip(chunk) {
                vectors.extend(cache.get(*key).expect("inserted above"));
                ids.push(p.id);
            }
        }
        t.progress.finish();
        if ids.len() as u64 != *count {
            return Err(Error::Corrupt {
                path: t.source.location(domain),
                message: format!(
                    "domain {domain}: {} passages embedded but {count} indexed (passages changed during the build?)",
                    ids.len()
                ),
            });
        }
        let dir = paths::dense(t.gen_dir, &build.slug, domain);
        let label = format!("{domain} hnsw");
        t.write_graph(&dir, &label, (dim, &vectors, &ids), build)?;
    }
    Ok(DenseInfo {
        model: embedder.name().to_string(),
        spec: build.spec.clone(),
        model_hash: embedder.model_hash(),
        profile: embedder.profile(),
        fingerprint,
        dim,
        dtype: build.dtype,
        hnsw: build.hnsw,
        embedded,
        cached,
        precomputed: 0,
        cache_rejected: cache.rejected(),
        images: None,
    })
}

/// Writes vectors, ids and graphs of the target's domains from precomputed passage vectors.
fn index_precomputed(
    t: Target<'_>,
    build: &DenseBuild<'_>,
    vectors: &Precomputed,
) -> Result<DenseInfo> {
    let embedder = build.passages;
    let (hash, profile) = (embedder.model_hash(), embedder.profile());
    vectors.check(embedder.name(), embedder.dim(), &hash, profile.as_deref())?;
    let dim = embedder.dim();
    let total = match vectors.faiss() {
        Some(faiss) => index_faiss(t, build, faiss)?,
        None => index_table(t, build, vectors, dim)?,
    };
    Ok(DenseInfo {
        model: embedder.name().to_string(),
        spec: build.spec.clone(),
        model_hash: hash,
        profile,
        fingerprint: vectors.manifest().fingerprint.clone(),
        dim,
        dtype: build.dtype,
        hnsw: build.hnsw,
        embedded: 0,
        cached: 0,
        precomputed: total,
        cache_rejected: 0,
        images: None,
    })
}

/// Writes the vectors, ids and graphs of the target's domains from a directory of vectors
/// by passage id; returns the number of vectors.
fn index_table(
    t: Target<'_>,
    build: &DenseBuild<'_>,
    vectors: &Precomputed,
    dim: usize,
) -> Result<u64> {
    let mut total = 0u64;
    for (domain, count) in t.domains {
        t.progress.start(
            &format!("{domain} {} (precomputed)", build.slug),
            Some(*count),
        );
        let table = vectors.passages(domain)?;
        let mut data: Vec<f32> = Vec::with_capacity(*count as usize * dim);
        let mut ids: Vec<String> = Vec::with_capacity(*count as usize);
        for p in t.source.passages(domain)? {
            let p = p?;
            let v = table.get(&p.id).ok_or_else(|| Error::Vectors {
                path: vectors.passages_dir(domain),
                message: format!("no vector for passage {:?} of domain {domain}", p.id),
            })?;
            data.extend_from_slice(v);
            ids.push(p.id);
            if ids.len().is_multiple_of(4096) {
                t.progress.inc(4096);
            }
        }
        t.progress.finish();
        if ids.len() != table.len() {
            let known: HashSet<&str> = ids.iter().map(String::as_str).collect();
            let stray = table
                .ids()
                .iter()
                .find(|id| !known.contains(id.as_str()))
                .cloned()
                .unwrap_or_default();
            return Err(Error::Vectors {
                path: vectors.passages_dir(domain),
                message: format!(
                    "{} vectors for the {} passages of domain {domain}: ids not in the corpus, such as {stray:?} (vectors of another corpus or version?)",
                    table.len(),
                    ids.len()
                ),
            });
        }
        total += ids.len() as u64;
        let dir = paths::dense(t.gen_dir, &build.slug, domain);
        t.write_graph(&dir, &format!("{domain} hnsw"), (dim, &data, &ids), build)?;
    }
    Ok(total)
}

/// Writes the vectors, ids and graph of the target's one domain from a FAISS file whose row
/// `i` is the domain's passage `i` (in the corpus's order); returns the number of vectors.
/// Sift builds its own HNSW graph over them (an `IndexHNSWFlat`'s graph is not read).
fn index_faiss(t: Target<'_>, build: &DenseBuild<'_>, faiss: &FaissFile) -> Result<u64> {
    let err = |message: String| Error::Vectors {
        path: faiss.path().to_path_buf(),
        message,
    };
    let [(domain, count)] = t.domains else {
        let names: Vec<&str> = t.domains.iter().map(|(d, _)| d.as_str()).collect();
        return Err(err(format!(
            "a FAISS index holds the vectors of one domain (row i = passage i), but the build indexes {} domains ({}): pick one with --domains",
            names.len(),
            names.join(", ")
        )));
    };
    if faiss.ntotal() != *count {
        return Err(err(format!(
            "{} vectors (ntotal) for the {count} passages of domain {domain} in {}: row i must be passage i (the index of another corpus or version?)",
            faiss.ntotal(),
            t.source.location(domain).display()
        )));
    }
    t.progress.start(
        &format!("{domain} {} (FAISS {})", build.slug, faiss.kind()),
        Some(*count),
    );
    let data = faiss.read_vectors(t.progress)?;
    t.progress.finish();
    let mut ids: Vec<String> = Vec::with_capacity(*count as usize);
    for p in t.source.passages(domain)? {
        let p = p?;
        if ids.len() as u64 == *count {
            return Err(err(format!(
                "domain {domain} has more than {count} passages now (the corpus changed during the build?)"
            )));
        }
        ids.push(p.id);
    }
    if ids.len() as u64 != *count {
        return Err(err(format!(
            "domain {domain} has {} passages now, not {count} (the corpus changed during the build?)",
            ids.len()
        )));
    }
    let dir = paths::dense(t.gen_dir, &build.slug, domain);
    t.write_graph(
        &dir,
        &format!("{domain} hnsw"),
        (faiss.dim(), &data, &ids),
        build,
    )?;
    Ok(*count)
}

/// A chunk of images read and prepared ahead of the model.
struct Prepared {
    records: Vec<sift_core::ImageRecord>,
    keys: Vec<u128>,
    /// (index into records, model input or why it cannot be embedded) of the images not in
    /// the cache
    inputs: Vec<(usize, std::result::Result<Erased, String>)>,
    /// reader warnings, sent with the final (empty) chunk
    warnings: sift_core::Warnings,
}

/// The reader side of an image build: reads `images` in chunks of [`IMAGE_CHUNK`],
/// prepares the images whose keys are not in `known` for `embedder`, and sends each chunk
/// (then an empty one with the reader's warnings; a read error ends the stream).
fn read_ahead(
    images: &mut dyn crate::ImageStream,
    embedder: &dyn DynImageEmbedder,
    known: &HashSet<u128>,
    key_of: impl Fn(&[u8]) -> u128,
    tx: std::sync::mpsc::SyncSender<Result<Prepared>>,
) {
    loop {
        let chunk: Vec<sift_core::ImageRecord> = match (&mut *images)
            .take(IMAGE_CHUNK)
            .collect::<sift_core::Result<_>>()
        {
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
                warnings: images.warnings(),
            }));
            return;
        }
        let keys: Vec<u128> = chunk.iter().map(|r| key_of(&r.bytes)).collect();
        let todo: Vec<usize> = (0..chunk.len())
            .filter(|&i| !known.contains(&keys[i]))
            .collect();
        let bytes: Vec<&[u8]> = todo.iter().map(|&i| chunk[i].bytes.as_slice()).collect();
        let prepared = embedder.prepare(&bytes);
        let inputs = todo.into_iter().zip(prepared).collect();
        let sent = tx.send(Ok(Prepared {
            records: chunk,
            keys,
            inputs,
            warnings: sift_core::Warnings::new(),
        }));
        if sent.is_err() {
            return;
        }
    }
}

/// Images read and prepared per chunk.
const IMAGE_CHUNK: usize = 64;

/// Embeds the images of the target's domains (through the cache; images that cannot be
/// prepared are counted and skipped) and writes their vectors, ids and graphs into its
/// generation.
fn build_images(t: Target<'_>, build: &DenseBuild<'_>) -> Result<Option<ImageIndexInfo>> {
    let Some(embedder) = build.images else {
        return Ok(None);
    };
    let dim = embedder.dim();
    let fingerprint = embedder.fingerprint();
    let mut cache = EmbedCache::open(&paths::image_cache(t.root, &build.slug), &fingerprint, dim)?;
    let mut info = ImageIndexInfo {
        fingerprint: fingerprint.clone(),
        cache_rejected: cache.rejected(),
        ..ImageIndexInfo::default()
    };
    let output_err = |message: String| Error::EmbedOutput {
        model: embedder.name().to_string(),
        message,
    };
    for (domain, _) in t.domains {
        t.progress
            .start(&format!("{domain} {} images", build.slug), None);
        let mut ids: Vec<String> = Vec::new();
        let mut vectors: Vec<f32> = Vec::new();
        let mut skipped = 0u64;
        let mut images = t.source.images(domain)?;
        // a reader thread decodes and preprocesses chunk i + 1 while the model runs on chunk i
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Prepared>>(1);
            // keys cached before this domain started (the main thread inserts meanwhile)
            let known: HashSet<u128> = cache.keys();
            let key_of = |bytes: &[u8]| EmbedCache::key_bytes_with(&fingerprint, bytes);
            scope.spawn(move || read_ahead(&mut *images, embedder, &known, key_of, tx));
            for prepared in rx {
                let p = prepared?;
                if p.records.is_empty() {
                    for (kind, n) in p.warnings.counts() {
                        *info.warnings.entry(kind.name().to_string()).or_default() += n;
                    }
                    break;
                }
                let mut ok: Vec<(usize, Erased)> = Vec::new();
                let mut bad: HashSet<usize> = HashSet::new();
                for (i, r) in p.inputs {
                    match r {
                        Ok(x) => ok.push((i, x)),
                        Err(why) => {
                            skipped += 1;
                            bad.insert(i);
                            if info.undecodable_examples.len() < 10 {
                                let rec = &p.records[i];
                                info.undecodable_examples.push(format!(
                                    "{}: row {}: {}: {why}",
                                    rec.file.display(),
                                    rec.row,
                                    rec.path
                                ));
                            }
                        }
                    }
                }
                let (positions, inputs): (Vec<usize>, Vec<Erased>) = ok.into_iter().unzip();
                let fresh = if inputs.is_empty() {
                    Vec::new()
                } else {
                    let n = inputs.len();
                    embedder
                        .embed_prepared(inputs)
                        .map_err(|source| Error::Embed {
                            model: embedder.name().to_string(),
                            what: format!(
                                "{n} images of domain {domain} from {:?}",
                                p.records[positions[0]].path
                            ),
                            source,
                        })?
                };
                check_output(&fresh, positions.len(), dim, |j| {
                    format!(
                        "the vector of image {:?} is not finite (NaN or infinity): the model's weights or preprocessing settings are broken",
                        p.records[positions[j]].path
                    )
                })
                .map_err(output_err)?;
                let entries: Vec<(u128, &[f32])> = positions
                    .iter()
                    .zip(&fresh)
                    .map(|(i, v)| (p.keys[*i], v.as_slice()))
                    .collect();
                cache.insert(&entries)?;
                info.embedded += fresh.len() as u64;
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
                t.progress.inc(p.records.len() as u64);
            }
            Ok(())
        })?;
        t.progress.finish();
        let dir = paths::images(t.gen_dir, &build.slug, domain);
        let label = format!("{domain} image hnsw");
        t.write_graph(&dir, &label, (dim, &vectors, &ids), build)?;
        info.images.insert(domain.clone(), ids.len() as u64);
        if skipped > 0 {
            info.undecodable.insert(domain.clone(), skipped);
        }
    }
    Ok(Some(info))
}

/// The passage-count map the dense builders take, from the BM25 build's domain facts.
pub(crate) fn counts(
    domains: &BTreeMap<String, crate::DomainInfo>,
    only: &[String],
) -> Vec<(String, u64)> {
    only.iter()
        .map(|d| (d.clone(), domains.get(d).map_or(0, |i| i.passages)))
        .collect()
}

/// Whether a model returned `n` vectors of `dim` finite values; else the message: the count
/// or shape, or `non_finite(j)` for the first vector `j` holding a NaN or infinity.
fn check_output(
    fresh: &[Vec<f32>],
    n: usize,
    dim: usize,
    non_finite: impl FnOnce(usize) -> String,
) -> std::result::Result<(), String> {
    if fresh.len() != n || fresh.iter().any(|v| v.len() != dim) {
        return Err(format!("expected {n} vectors of {dim} dimensions"));
    }
    match fresh.iter().position(|v| v.iter().any(|x| !x.is_finite())) {
        Some(j) => Err(non_finite(j)),
        None => Ok(()),
    }
}
