//! [`Service`]: an index, its models and (optionally) its corpus, loaded once and searched
//! by every request. Everything here is synchronous and CPU-bound; the HTTP and MCP layers
//! run it on blocking threads.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sift_core::Warnings;
use sift_embed::EmbedderOptions;
use sift_eval::{Links, RunEntry, Task};
use sift_index::{IndexDir, Scratch};
use sift_retrieve::{
    Candidates, DomainPart, DomainSearcher, Instructions, ModelSet, PairCandidates, PairTable,
    QueryImages, QueryVectors, RetrieverSpec, SearchSettings, search_domains,
};

use crate::api::{
    CandidateKind, Document, DomainInfo, Fusion, Hit, ImageInput, IndexInfo, RetrieverInfo,
    SearchRequest, SearchResponse,
};
use crate::error::{ApiError, ErrorKind};
use crate::images::{self, ImageLimits};

/// Request limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest `top_k`.
    pub max_top_k: usize,
    /// Text of each hit, characters, when a request does not say.
    pub text_chars: usize,
    /// Images in one request (a search's query images, an embeddings request's image
    /// inputs).
    pub max_images: usize,
    /// Pixels of all the images of one request together (each read from its header before
    /// anything is decoded).
    pub max_request_pixels: u64,
    /// Inputs of one embeddings request.
    pub max_inputs: usize,
    /// New tokens of one chat completion.
    pub max_new_tokens: u32,
    /// Request images.
    pub image: ImageLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_top_k: 1000,
            text_chars: 1200,
            max_images: 8,
            max_request_pixels: 100_000_000,
            max_inputs: 256,
            max_new_tokens: 4096,
            image: ImageLimits::default(),
        }
    }
}

/// What to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Index directory.
    pub index: PathBuf,
    /// The corpus the index was built from: passage texts, images and page links come from
    /// it (without it, hits carry ids and scores only).
    pub corpus: Option<PathBuf>,
    /// Retriever specs, the default first; empty: `bm25` and every dense index.
    pub retrievers: Vec<String>,
    /// Domains to serve; empty: every domain of the index.
    pub domains: Vec<String>,
    /// How models load (device, dtype, batch size).
    pub model_options: EmbedderOptions,
    /// BM25 parameters; `None`: the index's.
    pub bm25: Option<sift_index::Bm25Params>,
    /// Dense search mode (`bm25` above, `top_k` per request).
    pub settings: SearchSettings,
    /// Request limits.
    pub limits: Limits,
    /// A local generator for `POST /v1/chat/completions` (a Qwen2-VL- or Qwen2.5-VL-Instruct checkpoint:
    /// directory or hub id, loaded on `model_options`' device); none when `None`.
    pub generator: Option<String>,
    /// A reranker applied to every search: the top `depth` merged hits rescored (it needs
    /// the corpus's texts and images, [`ServeConfig::corpus`]).
    pub rerank: Option<sift_retrieve::RerankStage>,
}

impl ServeConfig {
    /// Serving `index` with its defaults.
    pub fn new(index: impl Into<PathBuf>) -> ServeConfig {
        ServeConfig {
            index: index.into(),
            corpus: None,
            retrievers: Vec::new(),
            domains: Vec::new(),
            model_options: EmbedderOptions::default(),
            bm25: None,
            settings: SearchSettings::default(),
            limits: Limits::default(),
            generator: None,
            rerank: None,
        }
    }
}

/// A retriever the service serves.
struct Served {
    spec: RetrieverSpec,
    name: String,
    ranks_images: bool,
    takes_images: bool,
}

/// Where a corpus image's bytes are.
enum ImageSource {
    /// Held in memory (images read from parquet).
    Bytes(Arc<[u8]>),
    /// An image file of the corpus folder or knowledge base (its path found by listing the
    /// corpus, never made from a request), vetted at load: re-read on request only while it
    /// is still that regular file ([`VettedFile`]).
    File(VettedFile),
}

/// What the corpus gives one domain: passage texts, images, and which go together.
struct DomainCorpus {
    /// Passage texts by ordinal of the index's passage ids.
    texts: Vec<String>,
    image_ids: Vec<String>,
    image_ord: HashMap<String, u32>,
    images: Vec<ImageSource>,
    /// Page links between passages and images (equal base keys, MM-BRIGHT's rule).
    links: Links,
}

impl DomainCorpus {
    /// The corpus images of the page of the passage with ordinal `ord`.
    fn page_images(&self, ord: u32) -> Vec<String> {
        self.links
            .images_of(ord)
            .iter()
            .map(|&i| self.image_ids[i as usize].clone())
            .collect()
    }
}

/// One domain, open for every served retriever.
struct Domain {
    name: String,
    searchers: Vec<DomainSearcher>,
    /// Task 4 pairs over the domain's passages and images (when a retriever ranks images).
    pairs: Option<PairCandidates>,
    /// Per served retriever: what ranking the pairs needs that no query changes, made at
    /// load (retrievers that rank images).
    tables: Vec<Option<PairTable<'static>>>,
    /// Per served retriever: BM25 working memory, kept between requests (one per request
    /// in flight at most).
    scratch: Vec<Mutex<Vec<Option<Scratch>>>>,
    corpus: Option<DomainCorpus>,
}

impl Domain {
    /// BM25 working memory for retriever `r`: a kept one, else a new one.
    fn take_scratch(&self, r: usize) -> Option<Scratch> {
        let kept = self.scratch[r].lock().ok().and_then(|mut v| v.pop());
        kept.unwrap_or_else(|| self.searchers[r].scratch())
    }

    /// Keeps `scratch` for the next request.
    fn keep_scratch(&self, r: usize, scratch: Option<Scratch>) {
        if scratch.is_some()
            && let Ok(mut v) = self.scratch[r].lock()
        {
            v.push(scratch);
        }
    }
}

/// A page an agent can read: a passage with the images of its page, or a corpus image with
/// its page's text.
#[derive(Debug, Clone)]
pub struct Page {
    /// Domain.
    pub domain: String,
    /// The passage or image id the page is for.
    pub id: String,
    /// The passage whose text the page shows, if any.
    pub passage: Option<String>,
    /// The text.
    pub text: String,
    /// Corpus images shown, by id.
    pub images: Vec<String>,
}

/// The service: everything loaded once and shared by all requests.
pub struct Service {
    /// The index, held open for the service's life: its lease keeps a rebuild of the same
    /// directory from removing the generation being served.
    _index: IndexDir,
    index_name: String,
    created: u64,
    domains: Vec<Domain>,
    retrievers: Vec<Served>,
    models: ModelSet,
    model_ids: Vec<String>,
    settings: SearchSettings,
    limits: Limits,
    has_corpus: bool,
    /// The chat generator and the name it answers to.
    generator: Option<(String, Box<dyn sift_generate::Generator>)>,
    /// The reranker every search goes through.
    rerank: Option<sift_retrieve::RerankStage>,
}

/// A domain's pairs where there are none (no served retriever ranks images).
static NO_PAIRS: std::sync::LazyLock<PairCandidates> =
    std::sync::LazyLock::new(PairCandidates::default);

impl Service {
    /// The limits requests are held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What the service serves.
    pub fn info(&self) -> IndexInfo {
        IndexInfo {
            service: format!("sift {}", env!("CARGO_PKG_VERSION")),
            index: self.index_name.clone(),
            domains: self
                .domains
                .iter()
                .map(|d| DomainInfo {
                    name: d.name.clone(),
                    passages: d.searchers[0].passage_ids().len(),
                    images: d.corpus.as_ref().map_or(0, |c| c.image_ids.len()),
                })
                .collect(),
            retrievers: self
                .retrievers
                .iter()
                .map(|r| RetrieverInfo {
                    name: r.name.clone(),
                    ranks_images: r.ranks_images,
                    takes_images: r.takes_images,
                })
                .collect(),
            models: self.model_ids.clone(),
            has_corpus: self.has_corpus,
            max_top_k: self.limits.max_top_k,
            max_images: self.limits.max_images,
            max_image_pixels: self.limits.image.max_pixels,
            max_request_pixels: self.limits.max_request_pixels,
            max_inputs: self.limits.max_inputs,
        }
    }

    fn domain(&self, field: &str, name: &str) -> Result<&Domain, ApiError> {
        self.domains.iter().find(|d| d.name == name).ok_or_else(|| {
            ApiError::not_found(
                field,
                format!("no domain {name:?} (served: {})", self.domain_names()),
            )
        })
    }

    /// The domains a request searches: the one it names, else every one served.
    fn targets(&self, field: &str, name: Option<&str>) -> Result<Vec<&Domain>, ApiError> {
        match name {
            Some(n) => Ok(vec![self.domain(field, n)?]),
            None => Ok(self.domains.iter().collect()),
        }
    }

    /// The domain holding passage `id`: the one named, else the first served that has it.
    pub fn domain_of_passage(&self, name: Option<&str>, id: &str) -> Result<String, ApiError> {
        if let Some(n) = name {
            return Ok(self.domain("domain", n)?.name.clone());
        }
        self.domains
            .iter()
            .find(|d| d.searchers[0].passage_ord(id).is_some())
            .map(|d| d.name.clone())
            .ok_or_else(|| {
                ApiError::not_found(
                    "id",
                    format!("no passage {id:?} in any domain ({})", self.domain_names()),
                )
            })
    }

    fn domain_names(&self) -> String {
        let names: Vec<&str> = self.domains.iter().map(|d| d.name.as_str()).collect();
        names.join(", ")
    }

    /// The served retriever a request names, or the first that fits.
    fn retriever(
        &self,
        name: Option<&str>,
        candidates: CandidateKind,
        with_images: bool,
    ) -> Result<usize, ApiError> {
        let served = || {
            let names: Vec<&str> = self.retrievers.iter().map(|r| r.name.as_str()).collect();
            names.join(", ")
        };
        let i = match name {
            Some(n) => {
                let spec: RetrieverSpec = n.parse().map_err(|e: sift_retrieve::SpecError| {
                    ApiError::invalid("retriever", e.to_string())
                })?;
                self.retrievers
                    .iter()
                    .position(|r| r.spec == spec || r.name == n)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "retriever",
                            format!("{n} is not served (served: {})", served()),
                        )
                    })?
            }
            None => self
                .retrievers
                .iter()
                .position(|r| {
                    (candidates == CandidateKind::Passages || r.ranks_images)
                        && (!with_images || r.takes_images)
                })
                .ok_or_else(|| {
                    ApiError::invalid(
                        "retriever",
                        format!(
                            "no served retriever {} (served: {})",
                            if candidates == CandidateKind::Passages {
                                "takes query images"
                            } else {
                                "ranks images"
                            },
                            served()
                        ),
                    )
                })?,
        };
        let r = &self.retrievers[i];
        if candidates != CandidateKind::Passages && !r.ranks_images {
            return Err(ApiError::invalid(
                "candidates",
                format!(
                    "{} cannot rank images or pairs: every part must be a model that embeds images",
                    r.name
                ),
            ));
        }
        if with_images && !r.takes_images {
            return Err(ApiError::invalid(
                "images",
                format!(
                    "{} takes no query images (no model of it embeds images)",
                    r.name
                ),
            ));
        }
        Ok(i)
    }

    /// The bytes of a request image: a corpus image of `domain`, or decoded data, cropped
    /// to its box.
    fn image_bytes(
        &self,
        targets: &[&Domain],
        field: &str,
        input: &ImageInput,
        budget: &mut images::PixelBudget,
    ) -> Result<Vec<u8>, ApiError> {
        let bytes = match (&input.image_id, &input.data) {
            _ if input.bytes.is_some() => {
                let bytes = input.bytes.clone().unwrap_or_default();
                images::check_encoded(field, &bytes, &self.limits.image)?;
                bytes
            }
            (Some(id), None) => {
                // the searched domain holding the image (ids are unique within a domain)
                let domain = targets
                    .iter()
                    .find(|d| {
                        d.corpus
                            .as_ref()
                            .is_some_and(|c| c.image_ord.contains_key(id))
                    })
                    .copied()
                    .unwrap_or(targets[0]);
                let bytes = self.corpus_image(domain, &format!("{field}.image_id"), id)?;
                images::check(field, &bytes, &self.limits.image)?;
                bytes.to_vec()
            }
            (None, Some(data)) => {
                images::decode_data(&format!("{field}.data"), data, &self.limits.image)?
            }
            _ => {
                return Err(ApiError::invalid(
                    field,
                    "give exactly one of image_id and data",
                ));
            }
        };
        budget.charge(field, &bytes, &self.limits.image)?;
        match input.bbox {
            Some(bbox) => images::crop(field, &bytes, bbox, &self.limits.image),
            None => Ok(bytes),
        }
    }

    fn corpus_image(&self, domain: &Domain, field: &str, id: &str) -> Result<Arc<[u8]>, ApiError> {
        let corpus = domain.corpus.as_ref().ok_or_else(|| {
            ApiError::not_found(field, "the service has no corpus (start it with --corpus)")
        })?;
        let ord = corpus.image_ord.get(id).ok_or_else(|| {
            ApiError::not_found(field, format!("no image {id:?} in domain {}", domain.name))
        })?;
        match &corpus.images[*ord as usize] {
            ImageSource::Bytes(b) => Ok(b.clone()),
            ImageSource::File(file) => {
                file.read(MAX_CORPUS_FILE_BYTES)
                    .map(Arc::from)
                    .map_err(|e| {
                        ApiError::new(ErrorKind::Internal, format!("reading image {id:?}: {e}"))
                    })
            }
        }
    }

    /// The images a request may still decode, when it has `count` of them (field `field`):
    /// at most [`Limits::max_images`], of [`Limits::max_request_pixels`] together. Every
    /// request that takes images (search, embeddings) goes through here.
    pub fn image_budget(&self, field: &str, count: usize) -> Result<images::PixelBudget, ApiError> {
        if count > self.limits.max_images {
            return Err(ApiError::invalid(
                field,
                format!(
                    "{count} images: at most {} per request",
                    self.limits.max_images
                ),
            ));
        }
        Ok(images::PixelBudget::new(self.limits.max_request_pixels))
    }

    fn check_top_k(&self, top_k: usize) -> Result<(), ApiError> {
        if top_k == 0 || top_k > self.limits.max_top_k {
            return Err(ApiError::invalid(
                "top_k",
                format!("{top_k}: give 1 to {}", self.limits.max_top_k),
            ));
        }
        Ok(())
    }

    /// Searches the domain the request names, or every domain served, merged into one
    /// ranking ([`sift_retrieve::search_domains`]: BM25 scored with the statistics of all
    /// the searched domains summed, dense scores as the cosines they are), so that scores
    /// compare across domains as within one.
    pub fn search(&self, req: &SearchRequest) -> Result<SearchResponse, ApiError> {
        let targets = self.targets("domain", req.domain.as_deref())?;
        self.check_top_k(req.top_k)?;
        let mut budget = self.image_budget("images", req.images.len())?;
        if req.query.trim().is_empty() && req.images.is_empty() {
            return Err(ApiError::invalid(
                "query",
                "give a query text, images, or both",
            ));
        }
        let ri = self.retriever(
            req.retriever.as_deref(),
            req.candidates,
            !req.images.is_empty(),
        )?;
        let served = &self.retrievers[ri];
        let images: Vec<Vec<u8>> = req
            .images
            .iter()
            .enumerate()
            .map(|(i, input)| {
                self.image_bytes(&targets, &format!("images[{i}]"), input, &mut budget)
            })
            .collect::<Result<_, _>>()?;
        let task = match req.candidates {
            CandidateKind::Passages if images.is_empty() => Task::Passages,
            CandidateKind::Passages => Task::MultimodalPassages,
            CandidateKind::Images => Task::Images,
            CandidateKind::Pairs => Task::Pairs,
        };
        // the service's queries carry no per-domain instruction: one set of vectors serves
        // every domain
        let vectors = self.query_vectors(
            served,
            &targets[0].name,
            task,
            &req.query,
            &images,
            req.fusion,
        )?;
        let parts: Vec<DomainPart> = targets
            .iter()
            .map(|d| DomainPart {
                searcher: &d.searchers[ri],
                candidates: match req.candidates {
                    CandidateKind::Passages => Candidates::Passages,
                    CandidateKind::Images => Candidates::Images,
                    CandidateKind::Pairs => d.pairs.as_ref().unwrap_or(&NO_PAIRS).candidates(false),
                },
                table: match req.candidates {
                    CandidateKind::Pairs => d.tables[ri].as_ref(),
                    _ => None,
                },
                exclude: &[],
            })
            .collect();
        let mut settings = SearchSettings {
            // a reranker reads its depth of first-stage hits
            top_k: self
                .rerank
                .as_ref()
                .map_or(req.top_k, |r| r.depth.max(req.top_k)),
            ..self.settings.clone()
        };
        if let Some(k1) = req.k1 {
            settings.bm25.k1 = k1;
        }
        if let Some(b) = req.b {
            settings.bm25.b = b;
        }
        if let Err(e) = settings.bm25.validate() {
            let field = if req.b.is_some() && !(0.0..=1.0).contains(&settings.bm25.b) {
                "b"
            } else {
                "k1"
            };
            return Err(ApiError::invalid(field, e.to_string()));
        }
        if let Some(ef) = req.ef_search {
            if !(1..=100_000).contains(&ef) {
                return Err(ApiError::invalid(
                    "ef_search",
                    format!("{ef}: give 1 to 100000"),
                ));
            }
            settings.ef_search = ef;
        }
        let mut scratches: Vec<Option<Scratch>> =
            targets.iter().map(|d| d.take_scratch(ri)).collect();
        let ranked = search_domains(
            &parts,
            &served.spec,
            &req.query,
            &vectors,
            &settings,
            &mut scratches,
        );
        for (d, s) in targets.iter().zip(scratches) {
            d.keep_scratch(ri, s);
        }
        let mut ranked = ranked?;
        if let Some(stage) = &self.rerank {
            ranked = self.rerank(stage, &targets, task, &req.query, &images, ranked)?;
            ranked.truncate(req.top_k);
        }
        let chars = req.max_text_chars.unwrap_or(self.limits.text_chars);
        let hits = ranked
            .iter()
            .enumerate()
            .map(|(i, (d, h))| self.hit(targets[*d], req.candidates, i + 1, h, chars))
            .collect();
        Ok(SearchResponse {
            domain: (targets.len() == 1).then(|| targets[0].name.clone()),
            domains: targets.iter().map(|d| d.name.clone()).collect(),
            retriever: served.name.clone(),
            reranker: self.rerank.as_ref().map(|r| r.reranker.name().to_string()),
            candidates: req.candidates,
            hits,
        })
    }

    /// The merged hits `ranked` (domain, entry) reranked by `stage`: the top `depth`
    /// rescored with their texts and images from the corpus, the rest below in order.
    fn rerank(
        &self,
        stage: &sift_retrieve::RerankStage,
        targets: &[&Domain],
        task: Task,
        query: &str,
        images: &[Vec<u8>],
        ranked: Vec<(usize, RunEntry)>,
    ) -> Result<Vec<(usize, RunEntry)>, ApiError> {
        use sift_retrieve::rerank::{RerankDoc, RerankQuery};
        if !stage.reranker.ranks(task) {
            return Err(ApiError::invalid(
                "candidates",
                format!("the reranker {} cannot rank images", stage.reranker.name()),
            ));
        }
        let sees = stage.reranker.sees_images();
        let depth = stage.depth.min(ranked.len());
        // texts and image bytes of the top hits (an image read from a file lives here)
        let mut texts: Vec<Option<&str>> = Vec::with_capacity(depth);
        let mut bytes: Vec<Option<Arc<[u8]>>> = Vec::with_capacity(depth);
        for (d, h) in &ranked[..depth] {
            let domain = targets[*d];
            let corpus = domain.corpus.as_ref().ok_or_else(|| {
                ApiError::new(
                    ErrorKind::Internal,
                    "the reranker needs the corpus (start the service with --corpus)",
                )
            })?;
            let (passage, image) = task.doc_parts(&h.doc);
            texts.push(match passage {
                Some(p) => {
                    let ord = domain.searchers[0].passage_ord(p).ok_or_else(|| {
                        ApiError::new(ErrorKind::Internal, format!("passage {p:?} not indexed"))
                    })?;
                    Some(corpus.texts[ord as usize].as_str())
                }
                None => None,
            });
            bytes.push(match image {
                Some(i) if sees => Some(self.corpus_image(domain, "hits", i)?),
                _ => None,
            });
        }
        let docs: Vec<RerankDoc> = ranked[..depth]
            .iter()
            .zip(texts.iter().zip(&bytes))
            .map(|((_, h), (t, b))| RerankDoc {
                id: &h.doc,
                text: *t,
                image: b.as_deref(),
            })
            .collect();
        let refs: Vec<&[u8]> = if sees {
            images.iter().map(Vec::as_slice).collect()
        } else {
            Vec::new()
        };
        let q = RerankQuery {
            id: "query",
            text: query,
            images: &refs,
        };
        let mut out: Vec<(usize, RunEntry)> =
            sift_retrieve::rerank::rescore(stage, &q, &docs, ranked.len())
                .map_err(|e| ApiError::new(ErrorKind::Internal, format!("rerank: {e}")))?
                .into_iter()
                .map(|(i, score)| {
                    let (d, h) = &ranked[i];
                    (
                        *d,
                        RunEntry {
                            doc: h.doc.clone(),
                            score,
                        },
                    )
                })
                .collect();
        out.sort_by(|a, b| sift_eval::trec_order(&a.1, &b.1));
        Ok(out)
    }

    fn hit(
        &self,
        domain: &Domain,
        candidates: CandidateKind,
        rank: usize,
        h: &RunEntry,
        chars: usize,
    ) -> Hit {
        let (passage, image) = match candidates {
            CandidateKind::Passages => (Some(h.doc.clone()), None),
            CandidateKind::Images => (None, Some(h.doc.clone())),
            CandidateKind::Pairs => {
                let (p, i) = sift_eval::split_pair_id(&h.doc);
                (Some(p.to_string()), i.map(str::to_string))
            }
        };
        let corpus = domain.corpus.as_ref();
        // an image's text: its page's first passage
        let text_of = passage
            .clone()
            .or_else(|| page_of(domain, image.as_deref()?));
        let text = match (corpus, &text_of) {
            (Some(c), Some(pid)) => domain.searchers[0]
                .passage_ord(pid)
                .and_then(|o| c.texts.get(o as usize))
                .map(|t| cut(t, chars)),
            _ => None,
        };
        // the page a hit opens as: its passage's, else its image's page (or the image's own)
        let page = text_of
            .as_deref()
            .or(image.as_deref())
            .map(|id| page_path(&domain.name, id));
        Hit {
            rank,
            id: h.doc.clone(),
            domain: domain.name.clone(),
            score: h.score,
            has_image: image.is_some(),
            text,
            page_url: page,
            passage_url: passage.as_ref().map(|p| document_path(&domain.name, p)),
            image_url: image.as_ref().map(|i| image_path(&domain.name, i)),
            passage_id: passage,
            image_id: image,
        }
    }

    /// Query vectors of every dense index `served` uses.
    fn query_vectors(
        &self,
        served: &Served,
        domain: &str,
        task: Task,
        text: &str,
        images: &[Vec<u8>],
        fusion: Fusion,
    ) -> Result<QueryVectors, ApiError> {
        let mode = match fusion {
            Fusion::All => QueryImages::All,
            Fusion::First => QueryImages::First,
        };
        let refs: Vec<&[u8]> = images.iter().map(Vec::as_slice).collect();
        let mut warnings = Warnings::new();
        // text and images as the evaluator encodes a query; images alone: their mean
        let vectors = sift_retrieve::encode_query(
            &self.models,
            &served.spec,
            task,
            text,
            &refs,
            (!images.is_empty()).then_some(mode),
            &Instructions::Reference,
            domain,
            &mut warnings,
        )
        .map_err(|e| match e {
            sift_retrieve::Error::QueryImage { index, message } => {
                ApiError::invalid(format!("images[{index}]"), message)
            }
            e => ApiError::from(e),
        })?;
        if let Some(w) = warnings.examples().first() {
            return Err(ApiError::invalid("images", w.message.clone()));
        }
        Ok(vectors)
    }

    /// Whether `domain` (or any served domain) has a corpus image `id`.
    pub fn knows_image(&self, domain: Option<&str>, id: &str) -> bool {
        self.domains
            .iter()
            .filter(|d| domain.is_none_or(|n| n == d.name))
            .filter_map(|d| d.corpus.as_ref())
            .any(|c| c.image_ord.contains_key(id))
    }

    /// Corpus images of a passage's page.
    pub fn page_image_count(&self, domain: &str, passage: &str) -> usize {
        let Ok(d) = self.domain("domain", domain) else {
            return 0;
        };
        match (&d.corpus, d.searchers[0].passage_ord(passage)) {
            (Some(c), Some(o)) => c.links.images_of(o).len(),
            _ => 0,
        }
    }

    /// A passage by id.
    pub fn document(&self, domain: &str, id: &str) -> Result<Document, ApiError> {
        let d = self.domain("domain", domain)?;
        let corpus = d.corpus.as_ref().ok_or_else(|| {
            ApiError::not_found("id", "the service has no corpus (start it with --corpus)")
        })?;
        let ord = d.searchers[0].passage_ord(id).ok_or_else(|| {
            ApiError::not_found("id", format!("no passage {id:?} in domain {domain}"))
        })?;
        Ok(Document {
            id: id.to_string(),
            domain: domain.to_string(),
            contents: corpus.texts[ord as usize].clone(),
            image_ids: corpus.page_images(ord),
        })
    }

    /// A corpus image's bytes and content type.
    pub fn image(&self, domain: &str, id: &str) -> Result<(&'static str, Arc<[u8]>), ApiError> {
        let d = self.domain("domain", domain)?;
        let bytes = self.corpus_image(d, "id", id)?;
        Ok((images::content_type(&bytes), bytes))
    }

    /// The readable page of `id` in `domain`: a passage with its page's images, or a corpus
    /// image with the text of its page's first passage.
    pub fn page(&self, domain: &str, id: &str) -> Result<Page, ApiError> {
        let d = self.domain("domain", domain)?;
        let corpus = d.corpus.as_ref().ok_or_else(|| {
            ApiError::not_found("id", "the service has no corpus (start it with --corpus)")
        })?;
        if let Some(ord) = d.searchers[0].passage_ord(id) {
            return Ok(Page {
                domain: d.name.clone(),
                id: id.to_string(),
                passage: Some(id.to_string()),
                text: corpus.texts[ord as usize].clone(),
                images: corpus.page_images(ord),
            });
        }
        if corpus.image_ord.contains_key(id) {
            let passage = page_of(d, id);
            let text = passage
                .as_deref()
                .and_then(|p| d.searchers[0].passage_ord(p))
                .map(|o| corpus.texts[o as usize].clone())
                .unwrap_or_default();
            return Ok(Page {
                domain: d.name.clone(),
                id: id.to_string(),
                passage,
                text,
                images: vec![id.to_string()],
            });
        }
        Err(ApiError::not_found(
            "id",
            format!("no passage or image {id:?} in domain {domain}"),
        ))
    }
}

/// The first passage of a corpus image's page.
fn page_of(domain: &Domain, image: &str) -> Option<String> {
    let c = domain.corpus.as_ref()?;
    let i = *c.image_ord.get(image)?;
    let p = *c.links.passages_of(i).first()?;
    domain.searchers[0].passage_ids().get(p as usize).cloned()
}

mod chat;
mod embed;
mod load;
mod score;
mod urls;

use sift_core::VettedFile;

/// Largest corpus file read on request, bytes (the corpus reader's own limit for image
/// files).
const MAX_CORPUS_FILE_BYTES: u64 = 256 << 20;
use urls::cut;
pub use urls::{document_path, encode_path, image_path, page_path};
