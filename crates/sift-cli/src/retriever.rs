//! Retriever specs (`bm25`, `dense:<model>`, `hybrid:<a>+<b>[:w1,w2]`) and running them over
//! one domain.
use std::collections::{HashMap, HashSet};

use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use sift_core::{Example, WarningKind, Warnings};
use sift_embed::Kind;
use sift_eval::{Pairs, RunEntry, fusion, pair_id};
use sift_index::{AnnMode, Bm25Domain, Bm25Params, DenseDomain, IndexDir, dot};

use crate::models::{Model, ModelFlags, load_model};

/// Reciprocal-rank-fusion constant.
pub const RRF_K: f64 = 60.0;

/// A parsed retriever spec.
#[derive(Debug, Clone, PartialEq)]
pub enum Retriever {
    /// BM25 over the domain's passages.
    Bm25,
    /// A dense index by name (slug, model name or spec).
    Dense(String),
    /// Fusion of several retrievers: reciprocal rank fusion, or weighted min-max-normalised
    /// score fusion when weights are given.
    Hybrid {
        /// Components.
        parts: Vec<Retriever>,
        /// Weights, one per component.
        weights: Option<Vec<f64>>,
    },
}

impl Retriever {
    /// Parses `bm25`, `dense:NAME` or `hybrid:A+B[:W1,W2]`.
    pub fn parse(spec: &str) -> Result<Retriever> {
        if spec == "bm25" {
            return Ok(Retriever::Bm25);
        }
        if let Some(name) = spec.strip_prefix("dense:") {
            if name.is_empty() {
                bail!("dense retriever needs a model: dense:<model>");
            }
            return Ok(Retriever::Dense(name.to_string()));
        }
        if let Some(rest) = spec.strip_prefix("hybrid:") {
            // a last `:part` holding a comma (or only a number) is the weights
            let (body, weights) = match rest.rsplit_once(':') {
                Some((body, w)) if w.contains(',') || w.trim().parse::<f64>().is_ok() => {
                    let weights = w
                        .split(',')
                        .map(|x| x.trim().parse::<f64>())
                        .collect::<std::result::Result<Vec<f64>, _>>()
                        .map_err(|_| {
                            anyhow::anyhow!(
                                "hybrid weights {w:?} are not numbers: give one weight per part, e.g. hybrid:bm25+dense:minilm:0.3,0.7"
                            )
                        })?;
                    (body, Some(weights))
                }
                _ => (rest, None),
            };
            let parts = body
                .split('+')
                .map(Retriever::parse)
                .collect::<Result<Vec<_>>>()?;
            if parts.len() < 2 {
                bail!("hybrid retriever needs two or more parts: hybrid:bm25+dense:<model>");
            }
            if let Some(w) = &weights
                && (w.len() != parts.len()
                    || w.iter().any(|x| !x.is_finite() || *x < 0.0)
                    || w.iter().all(|x| *x == 0.0))
            {
                bail!(
                    "hybrid weights: give one non-negative weight per part ({} parts), not all zero",
                    parts.len()
                );
            }
            return Ok(Retriever::Hybrid { parts, weights });
        }
        bail!("unknown retriever {spec:?}: expected bm25, dense:<model> or hybrid:<a>+<b>[:w1,w2]")
    }

    /// Dense names used anywhere in this retriever.
    pub fn dense_names(&self) -> Vec<String> {
        match self {
            Retriever::Bm25 => Vec::new(),
            Retriever::Dense(n) => vec![n.clone()],
            Retriever::Hybrid { parts, .. } => parts.iter().flat_map(|p| p.dense_names()).collect(),
        }
    }

    /// Whether every part can rank images (Task 3): only dense vision-language models can.
    pub fn ranks_images(&self, models: &Models) -> bool {
        match self {
            Retriever::Bm25 => false,
            Retriever::Dense(n) => models.get(n).is_some_and(|m| m.has_images()),
            Retriever::Hybrid { parts, .. } => parts.iter().all(|p| p.ranks_images(models)),
        }
    }

    /// Whether any part embeds query images (a vision-language model).
    pub fn sees_images(&self, models: &Models) -> bool {
        match self {
            Retriever::Bm25 => false,
            Retriever::Dense(n) => models.get(n).is_some_and(|m| m.has_images()),
            Retriever::Hybrid { parts, .. } => parts.iter().any(|p| p.sees_images(models)),
        }
    }

    /// Human-readable description.
    pub fn describe(&self, bm25: &Bm25Params) -> String {
        match self {
            Retriever::Bm25 => format!(
                "bm25(k1={}, b={}, {})",
                bm25.k1,
                bm25.b,
                serde_json::to_value(bm25.weighting)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            ),
            Retriever::Dense(n) => format!("dense:{n}"),
            Retriever::Hybrid { parts, weights } => {
                let inner: Vec<String> = parts.iter().map(|p| p.describe(bm25)).collect();
                match weights {
                    None => format!("hybrid-rrf(k={RRF_K}: {})", inner.join(" + ")),
                    Some(w) => format!(
                        "hybrid-weighted({})",
                        inner
                            .iter()
                            .zip(w)
                            .map(|(p, w)| format!("{w}*{p}"))
                            .collect::<Vec<_>>()
                            .join(" + ")
                    ),
                }
            }
        }
    }
}

/// Search settings.
#[derive(Debug, Clone)]
pub struct SearchSettings {
    /// BM25 parameters.
    pub bm25: Bm25Params,
    /// Results per query (and per fused component).
    pub top_k: usize,
    /// Exact or HNSW; `None` = exact up to `AUTO_EXACT_MAX` vectors, HNSW above.
    pub ann: Option<AnnMode>,
    /// ef_search for HNSW (automatic mode).
    pub ef_search: usize,
}

/// Corpora up to this size are searched exactly in automatic mode.
pub const AUTO_EXACT_MAX: usize = 20_000;

/// How a vision-language model combines a query's text and images into one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QueryFusion {
    /// Text and images weighted equally: the text vector plus the mean of the vectors of all
    /// the query's images, renormalised; a query without images uses its text vector.
    All,
    /// The reference code's rule: normalise((text + first image) / 2), a blank white image
    /// standing in when the query has none.
    First,
}

impl QueryFusion {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            QueryFusion::All => "all",
            QueryFusion::First => "first",
        }
    }
}

/// Loaded models, shared across domains.
#[derive(Default)]
pub struct Models {
    by_name: HashMap<String, (String, Model)>,
}

impl Models {
    /// Loads the models of every dense index `retriever` uses.
    pub fn load(
        &mut self,
        index: &IndexDir,
        retriever: &Retriever,
        flags: &ModelFlags,
        model_override: Option<&str>,
    ) -> Result<()> {
        for name in retriever.dense_names() {
            if self.by_name.contains_key(&name) {
                continue;
            }
            let (slug, info) = index.dense_info(&name)?;
            let spec = model_override.unwrap_or(&info.spec);
            let model = load_model(spec, flags).with_context(|| {
                format!("the index's dense:{slug} was built with {}", info.spec)
            })?;
            if model.dim() != info.dim {
                bail!(
                    "model {spec} has {} dimensions, the index dense:{slug} {}",
                    model.dim(),
                    info.dim
                );
            }
            if !info.model_hash.is_empty() && model.content_hash() != info.model_hash {
                bail!(
                    "model {spec} is not the model dense:{slug} was built with ({}): its files \
                     differ (hash {} vs {}); give the same model, or rebuild the index",
                    info.spec,
                    model.content_hash(),
                    info.model_hash
                );
            }
            self.by_name.insert(name, (slug.to_string(), model));
        }
        Ok(())
    }

    /// A loaded model by the name a retriever used.
    pub fn get(&self, name: &str) -> Option<&Model> {
        self.by_name.get(name).map(|(_, m)| m)
    }
}

/// What a task ranks.
pub enum Candidates<'p> {
    /// The domain's passages (Tasks 1 and 2).
    Passages,
    /// The domain's corpus images (Task 3).
    Images,
    /// Passage+image pairs (Task 4), over the passages in BM25 ordinal order and the corpus
    /// image paths given.
    Pairs {
        /// The candidate pairs.
        pairs: &'p Pairs,
        /// Corpus image paths the pairs index into.
        images: &'p [String],
    },
}

/// The image index of a vision model in one domain.
struct ImageIndex {
    vectors: DenseDomain,
    ids: Vec<String>,
}

/// One domain ready to search.
pub struct Domain<'a> {
    bm25: Bm25Domain,
    dense: HashMap<String, (DenseDomain, &'a Model)>,
    images: HashMap<String, ImageIndex>,
}

/// Query vectors per dense retriever name, one per query.
pub type QueryVectors = HashMap<String, Vec<Vec<f32>>>;

impl<'a> Domain<'a> {
    /// Opens what `retriever` needs of `domain`; `images`: also the image indexes of its
    /// vision-language models (Tasks 3 and 4).
    pub fn open(
        index: &IndexDir,
        domain: &str,
        retriever: &Retriever,
        models: &'a Models,
        images: bool,
    ) -> Result<Domain<'a>> {
        // BM25 holds the passage ids every retriever reports, so it is always opened.
        let bm25 = index.bm25(domain)?;
        let mut dense = HashMap::new();
        let mut image_indexes = HashMap::new();
        for name in retriever.dense_names() {
            let (slug, model) = models.by_name.get(&name).context("model loaded")?;
            let d = index.dense(slug, domain)?;
            if d.len() != bm25.len() {
                bail!(
                    "domain {domain}: dense:{slug} has {} vectors for {} passages",
                    d.len(),
                    bm25.len()
                );
            }
            if images && model.has_images() {
                let (vectors, ids) = index.images(slug, domain).with_context(|| {
                    format!("dense:{slug} has no image index (rebuild without --no-images)")
                })?;
                image_indexes.insert(name.clone(), ImageIndex { vectors, ids });
            }
            dense.insert(name, (d, model));
        }
        Ok(Domain {
            bm25,
            dense,
            images: image_indexes,
        })
    }

    /// The BM25 index (passage ids live there).
    pub fn bm25(&self) -> &Bm25Domain {
        &self.bm25
    }

    /// Dense retrievers whose image index of this domain holds no image (the domain has no
    /// corpus images, or none decoded): Task 3 has no candidates there.
    pub fn empty_image_indexes(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .images
            .iter()
            .filter(|(_, idx)| idx.ids.is_empty())
            .map(|(name, _)| name.as_str())
            .collect();
        names.sort_unstable();
        names
    }

    /// Query vectors of every dense retriever. With `fusion` (Tasks 2-4), vision-language
    /// models combine each query's text with its images (`query_images`: path -> encoded
    /// bytes); text models and Task 1 use the text alone. Query images that are missing or
    /// do not decode are skipped and counted in `warnings`.
    pub fn query_vectors(
        &self,
        queries: &[Example],
        fusion: Option<QueryFusion>,
        query_images: &HashMap<String, Vec<u8>>,
        warnings: &mut Warnings,
        source: &std::path::Path,
    ) -> Result<QueryVectors> {
        let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
        let mut out = QueryVectors::new();
        for (name, (_, model)) in &self.dense {
            if let (Model::Gme(gme), Some(fusion)) = (model, fusion) {
                let v = gme_query_vectors(gme, queries, fusion, query_images, warnings, source)?;
                out.insert(name.clone(), v);
                continue;
            }
            let text = model.embed(&texts, Kind::Query)?;
            let (Some(vision), Some(fusion)) = (model.vision(), fusion) else {
                out.insert(name.clone(), text);
                continue;
            };
            // embed each distinct query image once
            let mut paths: Vec<&str> = queries
                .iter()
                .flat_map(|q| q.image_paths.iter().map(String::as_str))
                .collect();
            paths.sort_unstable();
            paths.dedup();
            let mut bytes: Vec<&[u8]> = Vec::new();
            let mut present: Vec<&str> = Vec::new();
            for p in &paths {
                match query_images.get(*p) {
                    Some(b) => {
                        bytes.push(b);
                        present.push(p);
                    }
                    None => warnings.push(
                        WarningKind::MissingImageBytes,
                        source,
                        String::new(),
                        format!("query image {p:?} is not in examples_images: skipped"),
                    ),
                }
            }
            let prepared = vision.prepare(&bytes);
            let mut ok_paths = Vec::new();
            let mut inputs = Vec::new();
            for (p, r) in present.iter().zip(prepared) {
                match r {
                    Ok(x) => {
                        ok_paths.push(*p);
                        inputs.push(x);
                    }
                    Err(e) => warnings.push(
                        WarningKind::UndecodableImage,
                        source,
                        String::new(),
                        format!("query image {p:?}: {e}: skipped"),
                    ),
                }
            }
            let vecs = vision.embed_prepared(&inputs)?;
            let by_path: HashMap<&str, &Vec<f32>> = ok_paths.into_iter().zip(&vecs).collect();
            let blank = match fusion {
                QueryFusion::First => Some(white_image_vector(vision)?),
                QueryFusion::All => None,
            };
            let fused = queries
                .iter()
                .zip(text)
                .map(|(q, t)| {
                    let imgs: Vec<&Vec<f32>> = q
                        .image_paths
                        .iter()
                        .filter_map(|p| by_path.get(p.as_str()).copied())
                        .collect();
                    match fusion {
                        QueryFusion::First => {
                            // the first query image; the blank image when it is absent
                            let first = q
                                .image_paths
                                .first()
                                .and_then(|p| by_path.get(p.as_str()).copied())
                                .unwrap_or_else(|| blank.as_ref().expect("set for first"));
                            normalized_sum(&t, first)
                        }
                        QueryFusion::All if imgs.is_empty() => t,
                        QueryFusion::All => {
                            let mut mean = vec![0f32; t.len()];
                            for v in &imgs {
                                mean.iter_mut().zip(v.iter()).for_each(|(m, x)| *m += x);
                            }
                            let n = imgs.len() as f32;
                            mean.iter_mut().for_each(|m| *m /= n);
                            normalized_sum(&t, &mean)
                        }
                    }
                })
                .collect();
            out.insert(name.clone(), fused);
        }
        Ok(out)
    }

    /// Runs `retriever` over `candidates` for every query; returns (query id, ranking) in
    /// query order. `exclusions(query id)` names candidates to drop before the cut-off.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        retriever: &Retriever,
        candidates: &Candidates<'_>,
        queries: &[Example],
        qvecs: &QueryVectors,
        exclusions: &(dyn Fn(&str) -> Vec<String> + Sync),
        settings: &SearchSettings,
        on_query: &(dyn Fn() + Sync),
    ) -> Result<Vec<(String, Vec<RunEntry>)>> {
        let bm25 = self.bm25();
        let pair_geometry = match candidates {
            Candidates::Pairs { pairs, images } => Some(self.pair_geometry(pairs, images)?),
            _ => None,
        };
        (0..queries.len())
            .into_par_iter()
            .map_init(
                || bm25.scratch(),
                |scratch, i| -> Result<(String, Vec<RunEntry>)> {
                    let q = &queries[i];
                    let excluded = exclusions(&q.id);
                    let query = Query {
                        index: i,
                        text: &q.query,
                        vectors: qvecs,
                    };
                    let ranking = match candidates {
                        Candidates::Passages => {
                            let exclude: Vec<u32> =
                                excluded.iter().filter_map(|id| bm25.ord(id)).collect();
                            self.rank_passages(retriever, scratch, &query, &exclude, settings)?
                        }
                        Candidates::Images => {
                            let exclude: HashSet<&str> =
                                excluded.iter().map(String::as_str).collect();
                            self.rank_images(retriever, &query, &exclude, settings)?
                        }
                        Candidates::Pairs { pairs, images } => {
                            let exclude: HashSet<&str> =
                                excluded.iter().map(String::as_str).collect();
                            let geometry = pair_geometry.as_ref().expect("computed for pairs");
                            self.rank_pairs(
                                retriever, scratch, &query, &exclude, settings, pairs, images,
                                geometry,
                            )?
                        }
                    };
                    on_query();
                    Ok((q.id.clone(), ranking))
                },
            )
            .collect()
    }

    fn dense_mode(&self, len: usize, settings: &SearchSettings) -> AnnMode {
        settings.ann.unwrap_or(if len <= AUTO_EXACT_MAX {
            AnnMode::Exact
        } else {
            AnnMode::Hnsw(settings.ef_search)
        })
    }

    fn rank_passages(
        &self,
        retriever: &Retriever,
        scratch: &mut sift_index::Scratch,
        q: &Query<'_>,
        exclude: &[u32],
        settings: &SearchSettings,
    ) -> Result<Vec<RunEntry>> {
        let bm25 = self.bm25();
        let entries = |hits: Vec<sift_index::Hit>| -> Vec<RunEntry> {
            hits.into_iter()
                .map(|h| RunEntry {
                    doc: bm25.id(h.ord).to_string(),
                    score: h.score as f64,
                })
                .collect()
        };
        Ok(match retriever {
            Retriever::Bm25 => {
                entries(bm25.search(scratch, q.text, settings.top_k, &settings.bm25, exclude)?)
            }
            Retriever::Dense(name) => {
                let (dense, _) = &self.dense[name];
                let mode = self.dense_mode(dense.len(), settings);
                entries(dense.search(q.vector(name), settings.top_k, mode, exclude)?)
            }
            Retriever::Hybrid { parts, weights } => {
                let lists = parts
                    .iter()
                    .map(|p| self.rank_passages(p, scratch, q, exclude, settings))
                    .collect::<Result<Vec<_>>>()?;
                fuse(&lists, weights.as_deref(), settings.top_k)
            }
        })
    }

    fn rank_images(
        &self,
        retriever: &Retriever,
        q: &Query<'_>,
        exclude: &HashSet<&str>,
        settings: &SearchSettings,
    ) -> Result<Vec<RunEntry>> {
        Ok(match retriever {
            Retriever::Bm25 => bail!("bm25 cannot rank images (Task 3)"),
            Retriever::Dense(name) => {
                let Some(idx) = self.images.get(name) else {
                    bail!("dense:{name} is a text model: it cannot rank images (Task 3)")
                };
                let ords: Vec<u32> = (0..idx.ids.len() as u32)
                    .filter(|&o| exclude.contains(idx.ids[o as usize].as_str()))
                    .collect();
                let mode = self.dense_mode(idx.vectors.len(), settings);
                idx.vectors
                    .search(q.vector(name), settings.top_k, mode, &ords)?
                    .into_iter()
                    .map(|h| RunEntry {
                        doc: idx.ids[h.ord as usize].clone(),
                        score: h.score as f64,
                    })
                    .collect()
            }
            Retriever::Hybrid { parts, weights } => {
                let lists = parts
                    .iter()
                    .map(|p| self.rank_images(p, q, exclude, settings))
                    .collect::<Result<Vec<_>>>()?;
                fuse(&lists, weights.as_deref(), settings.top_k)
            }
        })
    }

    /// For every vision model: the image-index ordinal of each corpus image and the cosine
    /// of each pair's passage and image vectors.
    fn pair_geometry(&self, pairs: &Pairs, images: &[String]) -> Result<PairGeometry> {
        let mut out = PairGeometry::default();
        for (name, idx) in &self.images {
            let (dense, _) = &self.dense[name];
            let ord_of: HashMap<&str, u32> = idx
                .ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i as u32))
                .collect();
            let ords: Vec<Option<u32>> = images
                .iter()
                .map(|p| ord_of.get(p.as_str()).copied())
                .collect();
            let cos: Vec<f32> = pairs
                .pairs
                .par_iter()
                .map(|&(p, img)| match img.and_then(|i| ords[i as usize]) {
                    Some(o) => dot(dense.vector(p), idx.vectors.vector(o)),
                    None => 0.0,
                })
                .collect();
            out.models.insert(name.clone(), (ords, cos));
        }
        Ok(out)
    }

    /// Task 4: scores every candidate pair. A passage shown without an image scores as the
    /// passage; with an image, a vision-language model scores the pair's vector
    /// normalise(passage + image) (text and image weighted equally, as queries are fused);
    /// BM25 and text models see only the passage. Pairs whose image was not indexed
    /// (undecodable) cannot be scored and are left out.
    #[allow(clippy::too_many_arguments)]
    fn rank_pairs(
        &self,
        retriever: &Retriever,
        scratch: &mut sift_index::Scratch,
        q: &Query<'_>,
        exclude: &HashSet<&str>,
        settings: &SearchSettings,
        pairs: &Pairs,
        images: &[String],
        geometry: &PairGeometry,
    ) -> Result<Vec<RunEntry>> {
        let bm25 = self.bm25();
        let n = bm25.len();
        let mut scored: Vec<(f32, u32)> = Vec::new(); // (score, pair index)
        match retriever {
            Retriever::Bm25 => {
                let hits = bm25.search(scratch, q.text, n, &settings.bm25, &[])?;
                let mut by_ord = vec![f32::NAN; n];
                for h in hits {
                    by_ord[h.ord as usize] = h.score;
                }
                for (i, &(p, _)) in pairs.pairs.iter().enumerate() {
                    let s = by_ord[p as usize];
                    if !s.is_nan() {
                        scored.push((s, i as u32));
                    }
                }
            }
            Retriever::Dense(name) => {
                let (dense, _) = &self.dense[name];
                let qv = q.vector(name);
                let sp: Vec<f32> = (0..n as u32).map(|o| dot(qv, dense.vector(o))).collect();
                match (self.images.get(name), geometry.models.get(name)) {
                    (Some(idx), Some((ords, cos))) => {
                        for (i, &(p, img)) in pairs.pairs.iter().enumerate() {
                            let s = match img {
                                None => sp[p as usize],
                                Some(im) => match ords[im as usize] {
                                    Some(o) => {
                                        let si = dot(qv, idx.vectors.vector(o));
                                        (sp[p as usize] + si)
                                            / (2.0 + 2.0 * cos[i]).max(1e-12).sqrt()
                                    }
                                    None => continue,
                                },
                            };
                            scored.push((s, i as u32));
                        }
                    }
                    _ => {
                        for (i, &(p, _)) in pairs.pairs.iter().enumerate() {
                            scored.push((sp[p as usize], i as u32));
                        }
                    }
                }
            }
            Retriever::Hybrid { parts, weights } => {
                let lists = parts
                    .iter()
                    .map(|p| {
                        self.rank_pairs(p, scratch, q, exclude, settings, pairs, images, geometry)
                    })
                    .collect::<Result<Vec<_>>>()?;
                return Ok(fuse(&lists, weights.as_deref(), settings.top_k));
            }
        }
        let id = |i: u32| {
            let (p, img) = pairs.pairs[i as usize];
            pair_id(bm25.id(p), img.map(|im| images[im as usize].as_str()))
        };
        let mut entries: Vec<RunEntry> = scored
            .into_iter()
            .map(|(s, i)| RunEntry {
                doc: id(i),
                score: s as f64,
            })
            .filter(|e| !exclude.contains(e.doc.as_str()))
            .collect();
        // trec_eval order (score descending, then doc id descending) before the cut-off
        entries.sort_by(sift_eval::trec_order);
        entries.truncate(settings.top_k);
        Ok(entries)
    }
}

/// Pair geometry per vision model: image ordinals of the corpus images, pair cosines.
#[derive(Default)]
struct PairGeometry {
    models: HashMap<String, (Vec<Option<u32>>, Vec<f32>)>,
}

/// One query as the rankers see it.
struct Query<'q> {
    index: usize,
    text: &'q str,
    vectors: &'q QueryVectors,
}

impl Query<'_> {
    fn vector(&self, name: &str) -> &[f32] {
        &self.vectors[name][self.index]
    }
}

fn fuse(lists: &[Vec<RunEntry>], weights: Option<&[f64]>, top_k: usize) -> Vec<RunEntry> {
    match weights {
        None => fusion::rrf(lists, RRF_K, top_k),
        Some(w) => fusion::weighted(lists, w, top_k),
    }
}

/// `normalise(a + b)`.
fn normalized_sum(a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut v: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// GME query vectors: each query's text and images in one prompt (the model fuses them
/// itself): every image with [`QueryFusion::All`], the first with [`QueryFusion::First`];
/// a query without images is its text alone. When a query has several images each gets at
/// most an equal share of the prompt length (GME's own bound for a single image).
fn gme_query_vectors(
    gme: &sift_embed::GmeEmbedder,
    queries: &[Example],
    fusion: QueryFusion,
    query_images: &HashMap<String, Vec<u8>>,
    warnings: &mut Warnings,
    source: &std::path::Path,
) -> Result<Vec<Vec<f32>>> {
    let mut prepared: Vec<Vec<sift_embed::GmeImage>> = Vec::with_capacity(queries.len());
    for q in queries {
        let paths: &[String] = match fusion {
            QueryFusion::All => &q.image_paths,
            QueryFusion::First => &q.image_paths[..q.image_paths.len().min(1)],
        };
        let budget = (gme.max_length().saturating_sub(128) / paths.len().max(1)) as u64;
        let mut imgs = Vec::new();
        for p in paths {
            let Some(bytes) = query_images.get(p) else {
                warnings.push(
                    WarningKind::MissingImageBytes,
                    source,
                    q.id.clone(),
                    format!("query image {p:?} is not in examples_images: skipped"),
                );
                continue;
            };
            match gme.processor().prepare(bytes, Some(budget)) {
                Ok(img) => imgs.push(img),
                Err(e) => warnings.push(
                    WarningKind::UndecodableImage,
                    source,
                    q.id.clone(),
                    format!("query image {p:?}: {e}: skipped"),
                ),
            }
        }
        prepared.push(imgs);
    }
    let refs: Vec<Vec<&sift_embed::GmeImage>> =
        prepared.iter().map(|v| v.iter().collect()).collect();
    let inputs: Vec<sift_embed::GmeInput<'_>> = queries
        .iter()
        .zip(&refs)
        .map(|(q, imgs)| sift_embed::GmeInput {
            instruction: gme.query_instruction(),
            images: imgs,
            text: Some(q.query.as_str()),
        })
        .collect();
    Ok(gme.embed(&inputs)?)
}

/// The vector of a blank white 224x224 image (the reference's stand-in for a query without
/// images).
fn white_image_vector(model: &sift_embed::VisionEmbedder) -> Result<Vec<f32>> {
    let img = image::RgbImage::from_pixel(224, 224, image::Rgb([255, 255, 255]));
    let pixels = model.processor().preprocess(&img);
    model.embed_prepared(&[pixels])?.pop().context("one vector")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(Retriever::parse("bm25").unwrap(), Retriever::Bm25);
        assert_eq!(
            Retriever::parse("dense:minilm").unwrap(),
            Retriever::Dense("minilm".into())
        );
        assert_eq!(
            Retriever::parse("hybrid:bm25+dense:minilm").unwrap(),
            Retriever::Hybrid {
                parts: vec![Retriever::Bm25, Retriever::Dense("minilm".into())],
                weights: None
            }
        );
        assert_eq!(
            Retriever::parse("hybrid:bm25+dense:minilm:0.3,0.7").unwrap(),
            Retriever::Hybrid {
                parts: vec![Retriever::Bm25, Retriever::Dense("minilm".into())],
                weights: Some(vec![0.3, 0.7])
            }
        );
        assert!(Retriever::parse("hybrid:bm25").is_err());
        assert!(Retriever::parse("hybrid:bm25+dense:x:1").is_err());
        assert!(Retriever::parse("tfidf").is_err());
        assert!(Retriever::parse("dense:").is_err());
        let err = Retriever::parse("hybrid:bm25+dense:x:a,b").unwrap_err();
        assert!(err.to_string().contains("are not numbers"), "{err}");
        assert!(Retriever::parse("hybrid:bm25+dense:x:0,0").is_err());
    }
}
