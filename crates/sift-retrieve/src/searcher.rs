//! [`DomainSearcher`]: one domain of an index, open for searching with any retriever over
//! its passages, its corpus images or its passage+image pairs.
use std::collections::{HashMap, HashSet};

use rayon::prelude::*;
use sift_eval::{NO_IMAGE, PAIR_SEP, Pairs, RunEntry, trec_score_key};
use sift_index::{AnnMode, Bm25Domain, Bm25Params, Bm25Stats, DenseDomain, IndexDir, Scratch, dot};

use crate::fusion;
use crate::models::ModelSet;
use crate::query::QueryVectors;
use crate::spec::{RankFusion, RetrieverSpec};
use crate::{Error, Result};

/// Corpora up to this size are searched exactly in automatic mode.
pub const AUTO_EXACT_MAX: usize = 20_000;

/// How dense indexes are searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Ann {
    /// Exactly up to [`AUTO_EXACT_MAX`] vectors, with HNSW above.
    #[default]
    Auto,
    /// Exactly: every vector is scored.
    Exact,
    /// With the HNSW graph.
    Hnsw,
}

impl Ann {
    /// How an index of `len` vectors is searched under this choice, HNSW with `ef_search`.
    pub fn mode(self, len: usize, ef_search: usize) -> AnnMode {
        match self {
            Ann::Auto if len <= AUTO_EXACT_MAX => AnnMode::Exact,
            Ann::Exact => AnnMode::Exact,
            Ann::Auto | Ann::Hnsw => AnnMode::Hnsw(ef_search),
        }
    }
}

/// How to search.
#[derive(Debug, Clone)]
pub struct SearchSettings {
    /// BM25 parameters.
    pub bm25: Bm25Params,
    /// Results per query (and per fused component).
    pub top_k: usize,
    /// Exact or HNSW ([`Ann::mode`]).
    pub ann: Ann,
    /// The HNSW candidate list size.
    pub ef_search: usize,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            bm25: Bm25Params::default(),
            top_k: 1000,
            ann: Ann::Auto,
            ef_search: 128,
        }
    }
}

/// Image vectors standing in for the missing image of text-only Task 4 pairs, by dense
/// index name ([`Candidates::Pairs`]).
pub type PairStandIns = HashMap<String, Vec<f32>>;

/// What a search ranks.
#[derive(Debug, Clone, Copy)]
pub enum Candidates<'p> {
    /// The domain's passages.
    Passages,
    /// The domain's corpus images.
    Images,
    /// The domain's corpus images, every one of which scores, for each dense index named,
    /// as the one vector given (MM-BRIGHT's reference code embeds every Task 3 corpus image
    /// of Nomic and Jina-CLIP as the same white image: task3_image.py:496-500, 586-590):
    /// all of them tie, and are ordered as trec_eval orders ties (id descending). Indexes
    /// not named rank their image vectors as [`Candidates::Images`] does.
    UniformImages {
        /// The vector standing in for every image, by dense index name.
        vectors: &'p PairStandIns,
    },
    /// Passage+image pairs (Task 4) over the domain's passages and the corpus image paths
    /// given; hits are pair ids ([`sift_eval::pair_id`]).
    Pairs {
        /// The candidate pairs.
        pairs: &'p Pairs,
        /// Unit vectors standing in for the missing image of text-only pairs, by the dense
        /// index name of a retriever (MM-BRIGHT's reference code embeds Jina-CLIP's text-only
        /// pairs with a white image: task4_pair.py:524-541); models not named score a
        /// text-only pair as its passage.
        stand_ins: &'p PairStandIns,
        /// Pair vectors computed outside the index, by dense index name
        /// ([`crate::reference_pair_vectors`]): a pair with one scores as its dot product
        /// with the query vector.
        vectors: &'p crate::PairVectors,
        /// Corpus image paths the pairs index into.
        images: &'p [String],
    },
}

/// One query as a search sees it: its text and its vectors (query `index` of `vectors`).
#[derive(Debug, Clone, Copy)]
pub struct Query<'q> {
    /// Position of the query in the vectors.
    pub index: usize,
    /// The text (for BM25).
    pub text: &'q str,
    /// The vectors of every dense index ([`crate::encode_queries`]).
    pub vectors: &'q QueryVectors,
    /// The collection statistics BM25 scores with (`None`: the searched domain's); several
    /// domains' summed make their scores comparable ([`crate::search_domains`] does this).
    pub bm25: Option<&'q Bm25Stats>,
}

impl Query<'_> {
    fn vector(&self, name: &str) -> Result<&[f32]> {
        self.vectors
            .get(name, self.index)
            .ok_or_else(|| Error::Unsupported(format!("no query vector for dense:{name}")))
    }
}

/// One domain of an index, opened for the retrievers it will serve.
pub struct DomainSearcher {
    domain: String,
    bm25: Option<Bm25Domain>,
    dense: HashMap<String, DenseDomain>,
    images: HashMap<String, DenseDomain>,
    /// Without BM25: passage id -> ordinal (BM25 has its own lookup).
    ord_of: Option<HashMap<String, u32>>,
}

impl DomainSearcher {
    /// Opens what `retriever` needs of `domain`, with `images` also the image indexes of its
    /// models that embed images (Tasks 3 and 4). BM25 is opened only when `retriever` uses it
    /// (or nothing else gives the passage ids).
    pub fn open(
        index: &IndexDir,
        domain: &str,
        retriever: &RetrieverSpec,
        models: &ModelSet,
        images: bool,
    ) -> Result<DomainSearcher> {
        let mut dense = HashMap::new();
        let mut image_indexes = HashMap::new();
        for name in retriever.dense_names() {
            let (slug, embedder) = models
                .entry(name)
                .ok_or_else(|| Error::Unsupported(format!("dense:{name} is not loaded")))?;
            let d = index.dense(slug, domain)?;
            if images && embedder.capabilities().images {
                image_indexes.insert(name.to_string(), index.images(slug, domain)?);
            }
            dense.insert(name.to_string(), d);
        }
        let bm25 = if uses_bm25(retriever) || dense.is_empty() {
            Some(index.bm25(domain)?)
        } else {
            None
        };
        let passage_ids: &[String] = match (&bm25, dense.values().next()) {
            (Some(b), _) => b.ids(),
            (None, Some(d)) => d.ids(),
            (None, None) => &[],
        };
        for (name, d) in &dense {
            if d.ids() != passage_ids {
                return Err(Error::Index(sift_index::Error::Corrupt {
                    path: index.root().to_path_buf(),
                    message: format!(
                        "domain {domain}: dense:{name} holds {} vectors of other passages than the \
                         index's {}",
                        d.len(),
                        passage_ids.len()
                    ),
                }));
            }
        }
        let ord_of = bm25.is_none().then(|| {
            passage_ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), i as u32))
                .collect()
        });
        Ok(DomainSearcher {
            domain: domain.to_string(),
            bm25,
            dense,
            images: image_indexes,
            ord_of,
        })
    }

    /// The domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The domain's passage ids, by ordinal.
    pub fn passage_ids(&self) -> &[String] {
        match (&self.bm25, self.dense.values().next()) {
            (Some(b), _) => b.ids(),
            (None, Some(d)) => d.ids(),
            (None, None) => &[],
        }
    }

    /// The ordinal of a passage id.
    pub fn passage_ord(&self, id: &str) -> Option<u32> {
        match (&self.bm25, &self.ord_of) {
            (Some(b), _) => b.ord(id),
            (None, Some(m)) => m.get(id).copied(),
            (None, None) => None,
        }
    }

    /// The image paths of the image index of the dense index a retriever called `name`.
    pub fn image_ids(&self, name: &str) -> Option<&[String]> {
        self.images.get(name).map(|d| d.ids())
    }

    /// Dense retrievers whose image index of this domain holds no image (the domain has no
    /// corpus images, or none decoded): Task 3 has no candidates there.
    pub fn empty_image_indexes(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .images
            .iter()
            .filter(|(_, idx)| idx.is_empty())
            .map(|(name, _)| name.as_str())
            .collect();
        names.sort_unstable();
        names
    }

    /// Working memory for [`DomainSearcher::search`] (one per thread).
    pub fn scratch(&self) -> Option<Scratch> {
        self.bm25.as_ref().map(Bm25Domain::scratch)
    }

    /// The best `settings.top_k` candidates for `query`, best first (trec_eval's order).
    /// `exclude` names candidates (passage ids, image paths or pair ids) dropped before the
    /// cut-off.
    pub fn search(
        &self,
        retriever: &RetrieverSpec,
        candidates: &Candidates<'_>,
        query: &Query<'_>,
        exclude: &[String],
        settings: &SearchSettings,
        scratch: &mut Option<Scratch>,
    ) -> Result<Vec<RunEntry>> {
        self.search_with_table(
            retriever, candidates, None, query, exclude, settings, scratch,
        )
    }

    /// What ranking Task 4 pairs needs that does not depend on the query, made once for
    /// every search of them ([`DomainSearcher::search_with_table`]), a pass over every pair:
    /// for every model with an image index, the image-index ordinal of each corpus image, the
    /// cosine of each pair's passage and image vectors, and (for models with a stand-in
    /// image) the stand-in and its cosine with each passage. The arguments are those of
    /// [`Candidates::Pairs`].
    pub fn pair_table<'v>(
        &self,
        pairs: &Pairs,
        images: &[String],
        stand_ins: &PairStandIns,
        vectors: &'v crate::PairVectors,
    ) -> Result<PairTable<'v>> {
        let mut out = PairGeometry {
            image_index: images
                .iter()
                .enumerate()
                .map(|(i, p)| (p.clone(), i as u32))
                .collect(),
            overrides: Some(vectors),
            ..PairGeometry::default()
        };
        for (name, idx) in &self.images {
            let dense = self.dense(name)?;
            let ord_of: HashMap<&str, u32> = idx
                .ids()
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
                    Some(o) => dot(dense.vector(p), idx.vector(o)),
                    None => 0.0,
                })
                .collect();
            let stand_in = stand_ins.get(name).map(|w| {
                let cos: Vec<f32> = (0..dense.len() as u32)
                    .into_par_iter()
                    .map(|o| dot(dense.vector(o), w))
                    .collect();
                (w.clone(), cos)
            });
            out.models.insert(
                name.clone(),
                ModelGeometry {
                    ords,
                    cos,
                    stand_in,
                },
            );
        }
        Ok(PairTable {
            geometry: out,
            pairs: pairs.pairs.len(),
            images: images.len(),
            domain: self.domain.clone(),
        })
    }

    /// [`DomainSearcher::search`] with the table [`DomainSearcher::pair_table`] made of the
    /// same `candidates` by this searcher (`None`: made here, for this search only).
    #[allow(clippy::too_many_arguments)]
    pub fn search_with_table(
        &self,
        retriever: &RetrieverSpec,
        candidates: &Candidates<'_>,
        table: Option<&PairTable<'_>>,
        query: &Query<'_>,
        exclude: &[String],
        settings: &SearchSettings,
        scratch: &mut Option<Scratch>,
    ) -> Result<Vec<RunEntry>> {
        match candidates {
            Candidates::Passages => {
                let exclude: Vec<u32> = exclude
                    .iter()
                    .filter_map(|id| self.passage_ord(id))
                    .collect();
                self.rank_passages(retriever, scratch, query, &exclude, settings)
            }
            Candidates::Images => {
                let exclude: HashSet<&str> = exclude.iter().map(String::as_str).collect();
                self.rank_images(retriever, query, &exclude, settings, &PairStandIns::new())
            }
            Candidates::UniformImages { vectors } => {
                let exclude: HashSet<&str> = exclude.iter().map(String::as_str).collect();
                self.rank_images(retriever, query, &exclude, settings, vectors)
            }
            Candidates::Pairs {
                pairs,
                images,
                stand_ins,
                vectors,
            } => {
                let exclude: HashSet<&str> = exclude.iter().map(String::as_str).collect();
                let own;
                let geometry = match table {
                    Some(t) => {
                        if t.pairs != pairs.pairs.len()
                            || t.images != images.len()
                            || t.domain != self.domain
                        {
                            return Err(Error::Unsupported(format!(
                                "the pair table was made for {} pairs of domain {}, not these {} \
                                 of {}",
                                t.pairs,
                                t.domain,
                                pairs.pairs.len(),
                                self.domain
                            )));
                        }
                        &t.geometry
                    }
                    None => {
                        own = self.pair_table(pairs, images, stand_ins, vectors)?.geometry;
                        &own
                    }
                };
                self.rank_pairs(
                    retriever, scratch, query, &exclude, settings, pairs, images, geometry,
                )
            }
        }
    }

    /// Runs `retriever` over `candidates` for every query in parallel; returns (query id,
    /// ranking) in query order. `exclusions(query id)` names candidates to drop before the
    /// cut-off; `on_query` is called after each query.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        retriever: &RetrieverSpec,
        candidates: &Candidates<'_>,
        queries: &[sift_core::Example],
        vectors: &QueryVectors,
        exclusions: &(dyn Fn(&str) -> Vec<String> + Sync),
        settings: &SearchSettings,
        on_query: &(dyn Fn() + Sync),
    ) -> Result<Vec<(String, Vec<RunEntry>)>> {
        let geometry = match candidates {
            Candidates::Pairs {
                pairs,
                images,
                stand_ins,
                vectors,
            } => Some(self.pair_table(pairs, images, stand_ins, vectors)?.geometry),
            _ => None,
        };
        (0..queries.len())
            .into_par_iter()
            .map_init(
                || self.scratch(),
                |scratch, i| -> Result<(String, Vec<RunEntry>)> {
                    let q = &queries[i];
                    let query = Query {
                        index: i,
                        text: &q.query,
                        vectors,
                        bm25: None,
                    };
                    let excluded = exclusions(&q.id);
                    let ranking = match (candidates, &geometry) {
                        (Candidates::Pairs { pairs, images, .. }, Some(g)) => {
                            let exclude: HashSet<&str> =
                                excluded.iter().map(String::as_str).collect();
                            self.rank_pairs(
                                retriever, scratch, &query, &exclude, settings, pairs, images, g,
                            )?
                        }
                        _ => self
                            .search(retriever, candidates, &query, &excluded, settings, scratch)?,
                    };
                    on_query();
                    Ok((q.id.clone(), ranking))
                },
            )
            .collect()
    }

    pub(crate) fn bm25(&self) -> Result<&Bm25Domain> {
        self.bm25
            .as_ref()
            .ok_or_else(|| Error::Unsupported("BM25 was not opened for this retriever".into()))
    }

    fn dense(&self, name: &str) -> Result<&DenseDomain> {
        self.dense
            .get(name)
            .ok_or_else(|| Error::Unsupported(format!("dense:{name} was not opened")))
    }

    fn dense_mode(&self, len: usize, settings: &SearchSettings) -> AnnMode {
        settings.ann.mode(len, settings.ef_search)
    }

    fn rank_passages(
        &self,
        retriever: &RetrieverSpec,
        scratch: &mut Option<Scratch>,
        q: &Query<'_>,
        exclude: &[u32],
        settings: &SearchSettings,
    ) -> Result<Vec<RunEntry>> {
        let ids = self.passage_ids();
        let entries = |hits: Vec<sift_index::Hit>| -> Vec<RunEntry> {
            hits.into_iter()
                .map(|h| RunEntry {
                    doc: ids[h.ord as usize].clone(),
                    score: h.score as f64,
                })
                .collect()
        };
        Ok(match retriever {
            RetrieverSpec::Bm25 => {
                let bm25 = self.bm25()?;
                let scratch = scratch.get_or_insert_with(|| bm25.scratch());
                entries(bm25.search_with(
                    scratch,
                    q.text,
                    settings.top_k,
                    &settings.bm25,
                    exclude,
                    q.bm25,
                )?)
            }
            RetrieverSpec::Dense(name) => {
                let dense = self.dense(name)?;
                let mode = self.dense_mode(dense.len(), settings);
                entries(dense.search(q.vector(name)?, settings.top_k, mode, exclude)?)
            }
            RetrieverSpec::Hybrid { parts, fusion } => {
                fuse_parts(parts, fusion, settings.top_k, |p| {
                    self.rank_passages(p, scratch, q, exclude, settings)
                })?
            }
        })
    }

    fn rank_images(
        &self,
        retriever: &RetrieverSpec,
        q: &Query<'_>,
        exclude: &HashSet<&str>,
        settings: &SearchSettings,
        uniform: &PairStandIns,
    ) -> Result<Vec<RunEntry>> {
        Ok(match retriever {
            RetrieverSpec::Bm25 => {
                return Err(Error::Unsupported(
                    "bm25 cannot rank images (Task 3)".into(),
                ));
            }
            RetrieverSpec::Dense(name) => {
                let Some(idx) = self.images.get(name) else {
                    return Err(Error::Unsupported(format!(
                        "dense:{name} has no image index here: it cannot rank images (Task 3)"
                    )));
                };
                if let Some(w) = uniform.get(name) {
                    // one score for all: trec_eval's order of ties, id descending
                    let score = dot(q.vector(name)?, w) as f64;
                    let mut ids: Vec<&str> = idx
                        .ids()
                        .iter()
                        .map(String::as_str)
                        .filter(|id| !exclude.contains(id))
                        .collect();
                    ids.sort_unstable_by(|a, b| b.cmp(a));
                    ids.truncate(settings.top_k);
                    return Ok(ids
                        .into_iter()
                        .map(|id| RunEntry {
                            doc: id.to_string(),
                            score,
                        })
                        .collect());
                }
                let ords: Vec<u32> = (0..idx.len() as u32)
                    .filter(|&o| exclude.contains(idx.id(o)))
                    .collect();
                let mode = self.dense_mode(idx.len(), settings);
                idx.search(q.vector(name)?, settings.top_k, mode, &ords)?
                    .into_iter()
                    .map(|h| RunEntry {
                        doc: idx.id(h.ord).to_string(),
                        score: h.score as f64,
                    })
                    .collect()
            }
            RetrieverSpec::Hybrid { parts, fusion } => {
                fuse_parts(parts, fusion, settings.top_k, |p| {
                    self.rank_images(p, q, exclude, settings, uniform)
                })?
            }
        })
    }

    /// Task 4: scores every candidate pair. A passage shown without an image scores as the
    /// passage (or, with a stand-in image for the model, as normalise(passage + stand-in));
    /// with an image, a model that embeds images scores the pair's vector
    /// normalise(passage + image) (text and image weighted equally, as queries are fused);
    /// BM25 and text models see only the passage. A pair with a vector of its own
    /// ([`Candidates::Pairs`]'s `vectors`) scores as that vector. Other pairs whose image was
    /// not indexed (undecodable) cannot be scored and are left out.
    #[allow(clippy::too_many_arguments)]
    fn rank_pairs(
        &self,
        retriever: &RetrieverSpec,
        scratch: &mut Option<Scratch>,
        q: &Query<'_>,
        exclude: &HashSet<&str>,
        settings: &SearchSettings,
        pairs: &Pairs,
        images: &[String],
        geometry: &PairGeometry<'_>,
    ) -> Result<Vec<RunEntry>> {
        let passage_ids = self.passage_ids();
        let n = passage_ids.len();
        let mut scored: Vec<(f32, u32)> = Vec::new(); // (score, pair index)
        match retriever {
            RetrieverSpec::Bm25 => {
                let bm25 = self.bm25()?;
                let scratch = scratch.get_or_insert_with(|| bm25.scratch());
                let hits = bm25.matching_with(scratch, q.text, &settings.bm25, q.bm25)?;
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
            RetrieverSpec::Dense(name) => {
                let dense = self.dense(name)?;
                let qv = q.vector(name)?;
                let sp: Vec<f32> = (0..n as u32).map(|o| dot(qv, dense.vector(o))).collect();
                let overrides = geometry.overrides.and_then(|o| o.get(name));
                let embedded = |i: usize| overrides.is_some_and(|pv| pv[i].is_some());
                match (self.images.get(name), geometry.models.get(name)) {
                    (Some(idx), Some(g)) => {
                        let (ords, cos) = (&g.ords, &g.cos);
                        let stand_in = g.stand_in.as_ref().map(|(w, cw)| (dot(qv, w), cw));
                        for (i, &(p, img)) in pairs.pairs.iter().enumerate() {
                            let s = match (img, stand_in) {
                                (None, None) => sp[p as usize],
                                (None, Some((sw, cw))) => {
                                    (sp[p as usize] + sw)
                                        / (2.0 + 2.0 * cw[p as usize]).max(1e-12).sqrt()
                                }
                                (Some(im), _) => match ords[im as usize] {
                                    Some(o) => {
                                        let si = dot(qv, idx.vector(o));
                                        (sp[p as usize] + si)
                                            / (2.0 + 2.0 * cos[i]).max(1e-12).sqrt()
                                    }
                                    // scored below from its own vector
                                    None if embedded(i) => 0.0,
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
                // pairs embedded outside the index score as their own vectors
                if let Some(pv) = overrides {
                    for (s, i) in scored.iter_mut() {
                        if let Some(v) = &pv[*i as usize] {
                            *s = dot(qv, v);
                        }
                    }
                }
            }
            RetrieverSpec::Hybrid { parts, fusion } => {
                return fuse_parts(parts, fusion, settings.top_k, |p| {
                    self.rank_pairs(p, scratch, q, exclude, settings, pairs, images, geometry)
                });
            }
        }
        if !exclude.is_empty() {
            let excluded: HashSet<u32> = exclude
                .iter()
                .filter_map(|id| self.pair_index(pairs, geometry, id))
                .collect();
            scored.retain(|(_, i)| !excluded.contains(i));
        }
        // trec_eval's order (score descending as f32, then pair id descending), selected on
        // (score, pair index): ids are compared without being built, and built for the k kept
        let half = |i: u32| {
            let (p, img) = pairs.pairs[i as usize];
            (
                passage_ids[p as usize].as_str(),
                img.map_or(NO_IMAGE, |im| images[im as usize].as_str()),
            )
        };
        let order = |a: &(f32, u32), b: &(f32, u32)| {
            trec_score_key(b.0 as f64)
                .total_cmp(&trec_score_key(a.0 as f64))
                .then_with(|| cmp_pair_ids(half(b.1), half(a.1)))
        };
        top_k(&mut scored, settings.top_k, order);
        Ok(scored
            .into_iter()
            .map(|(s, i)| {
                let (p, img) = half(i);
                RunEntry {
                    doc: format!("{p}{PAIR_SEP}{img}"),
                    score: s as f64,
                }
            })
            .collect())
    }

    /// The index of the pair called `id` (`passage|||image`), if it is a candidate.
    fn pair_index(&self, pairs: &Pairs, geometry: &PairGeometry, id: &str) -> Option<u32> {
        let (pid, img) = id.split_once(PAIR_SEP)?;
        let p = self.passage_ord(pid)?;
        let img = if img == NO_IMAGE {
            None
        } else {
            Some(*geometry.image_index.get(img)?)
        };
        pairs.find(p, img)
    }
}

/// Byte order of the pair ids `a.0|||a.1` and `b.0|||b.1`, without building them.
fn cmp_pair_ids<'a>(a: (&'a str, &'a str), b: (&'a str, &'a str)) -> std::cmp::Ordering {
    if a.0 == b.0 {
        return a.1.cmp(b.1);
    }
    fn bytes<'s>((p, i): (&'s str, &'s str)) -> impl Iterator<Item = u8> + 's {
        p.bytes().chain(PAIR_SEP.bytes()).chain(i.bytes())
    }
    bytes(a).cmp(bytes(b))
}

/// Whether any part of `retriever` is BM25.
pub(crate) fn uses_bm25(retriever: &RetrieverSpec) -> bool {
    match retriever {
        RetrieverSpec::Bm25 => true,
        RetrieverSpec::Dense(_) => false,
        RetrieverSpec::Hybrid { parts, .. } => parts.iter().any(uses_bm25),
    }
}

/// What ranking one domain's Task 4 pairs needs that no query changes
/// ([`DomainSearcher::pair_table`]): made once, it serves every search of those pairs.
pub struct PairTable<'v> {
    geometry: PairGeometry<'v>,
    /// What it was made for (checked at each use).
    pairs: usize,
    images: usize,
    domain: String,
}

/// Pair geometry per model with an image index: image ordinals of the corpus images, pair
/// cosines.
#[derive(Default)]
struct PairGeometry<'v> {
    models: HashMap<String, ModelGeometry>,
    /// Pair vectors computed outside the index ([`Candidates::Pairs`]'s `vectors`).
    overrides: Option<&'v crate::PairVectors>,
    /// Corpus image path -> its index in the pairs' image list.
    image_index: HashMap<String, u32>,
}

/// One model's pair geometry.
struct ModelGeometry {
    /// Image-index ordinal of each corpus image of the pairs.
    ords: Vec<Option<u32>>,
    /// Cosine of each pair's passage and image vectors (0 for text-only pairs).
    cos: Vec<f32>,
    /// The stand-in image of text-only pairs and its cosine with each passage.
    stand_in: Option<(Vec<f32>, Vec<f32>)>,
}

/// Keeps the `k` first of `items` by `order`, sorted (stable).
pub(crate) fn top_k<T>(items: &mut Vec<T>, k: usize, order: impl Fn(&T, &T) -> std::cmp::Ordering) {
    if k < items.len() {
        if k == 0 {
            items.clear();
            return;
        }
        items.select_nth_unstable_by(k - 1, &order);
        items.truncate(k);
    }
    items.sort_by(order);
}

/// Each of `parts` ranked by `rank`, the lists fused.
fn fuse_parts(
    parts: &[RetrieverSpec],
    fusion: &RankFusion,
    top_k: usize,
    rank: impl FnMut(&RetrieverSpec) -> Result<Vec<RunEntry>>,
) -> Result<Vec<RunEntry>> {
    let lists = parts.iter().map(rank).collect::<Result<Vec<_>>>()?;
    Ok(fuse(&lists, fusion, top_k))
}

/// Combines the rankings of a hybrid retriever's parts.
pub fn fuse(lists: &[Vec<RunEntry>], fusion: &RankFusion, top_k: usize) -> Vec<RunEntry> {
    match fusion {
        RankFusion::Rrf { k } => fusion::rrf(lists, *k, top_k),
        RankFusion::Weighted(w) => fusion::weighted(lists, w, top_k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_ids_compare_as_the_built_strings_do() {
        // ids sharing prefixes with each other and with the separator
        let parts = [
            "a",
            "a|",
            "a||",
            "a|||",
            "a|||b",
            "ab",
            "b",
            "",
            "é",
            "a/x_1.txt",
            "a/x_10.txt",
        ];
        for p1 in parts {
            for i1 in parts {
                for p2 in parts {
                    for i2 in parts {
                        let built =
                            format!("{p1}{PAIR_SEP}{i1}").cmp(&format!("{p2}{PAIR_SEP}{i2}"));
                        assert_eq!(
                            cmp_pair_ids((p1, i1), (p2, i2)),
                            built,
                            "{p1}/{i1} vs {p2}/{i2}"
                        );
                    }
                }
            }
        }
    }
}
