//! [`Service`]: an index, its models and (optionally) its corpus, loaded once and searched
//! by every request. Everything here is synchronous and CPU-bound; the HTTP and MCP layers
//! run it on blocking threads.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sift_core::Warnings;
use sift_embed::EmbedderOptions;
use sift_eval::Links;
use sift_index::{IndexDir, Scratch};
use sift_retrieve::{
    DomainSearcher, Instructions, ModelSet, PairCandidates, PairTable, RetrieverSpec,
    SearchSettings,
};

use crate::api::{CandidateKind, Document, DomainInfo, ImageInput, IndexInfo, RetrieverInfo};
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
    /// Queries of one batch request (`POST /retrieve`, `POST /queries`).
    pub max_batch_queries: usize,
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
            max_batch_queries: 4096,
            image: ImageLimits::default(),
        }
    }
}

/// What to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Index directory; none: a service that only generates
    /// ([`ServeConfig::generator`]) and reranks given pairs ([`ServeConfig::rerank`]).
    pub index: Option<PathBuf>,
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
    /// How Task 4's pairs link passages and images: equal base keys (the reference code),
    /// or the annotations' `source_passage_id` (needs the corpus).
    pub pair_link: sift_eval::PairLink,
    /// Prepare the reference code's query rule for images and pairs
    /// ([`Fusion::Reference`](crate::api::Fusion::Reference)) at load: its white stand-in
    /// images and, for a reference-profile index, the pair vectors it embeds (which read
    /// the corpus's passages and images once).
    pub reference_fusion: bool,
    /// Load the dense models from here instead of the location the index recorded.
    pub model_dir: Option<String>,
    /// Read corpus domains whose parquet shard sets are incomplete as they are.
    pub allow_partial_shards: bool,
    /// How text queries are batched across requests.
    pub batch: BatchOptions,
}

impl ServeConfig {
    /// Serving `index` with its defaults.
    pub fn new(index: impl Into<PathBuf>) -> ServeConfig {
        ServeConfig {
            index: Some(index.into()),
            corpus: None,
            retrievers: Vec::new(),
            domains: Vec::new(),
            model_options: EmbedderOptions::default(),
            bm25: None,
            settings: SearchSettings::default(),
            limits: Limits::default(),
            generator: None,
            rerank: None,
            pair_link: sift_eval::PairLink::Regex,
            reference_fusion: false,
            model_dir: None,
            allow_partial_shards: false,
            batch: BatchOptions::default(),
        }
    }

    /// Serving no index: only a generator and a reranker (set them after).
    pub fn without_index() -> ServeConfig {
        ServeConfig {
            index: None,
            ..ServeConfig::new(PathBuf::new())
        }
    }
}

/// A retriever the service serves.
struct Served {
    spec: RetrieverSpec,
    name: String,
    ranks_images: bool,
    takes_images: bool,
    /// The reference's white image, standing in for every corpus image of the models
    /// whose reference code ranks images so ([`ServeConfig::reference_fusion`]).
    uniform: sift_retrieve::PairStandIns,
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
    /// Their titles, where the corpus gives them.
    titles: Vec<Option<String>>,
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
    index: Option<IndexDir>,
    index_name: String,
    created: u64,
    domains: Vec<Domain>,
    retrievers: Vec<Served>,
    models: Arc<ModelSet>,
    /// Encodes the text queries of concurrent requests together (none without an index).
    batcher: Option<QueryBatcher>,
    model_ids: Vec<String>,
    settings: SearchSettings,
    limits: Limits,
    has_corpus: bool,
    /// The chat generator and the name it answers to.
    generator: Option<NamedGenerator>,
    /// The reranker every search goes through.
    rerank: Option<sift_retrieve::RerankStage>,
    /// Whether [`ServeConfig::reference_fusion`] prepared the reference's stand-ins.
    reference_ready: bool,
}

/// A generator and the name it answers to.
type NamedGenerator = (String, Box<dyn sift_generate::Generator>);

/// What a request that searches or reads the index is told by a service without one.
const NO_INDEX: &str = "this service serves no index (start it with --index)";

/// A domain's pairs where there are none (no served retriever ranks images).
static NO_PAIRS: std::sync::LazyLock<PairCandidates> =
    std::sync::LazyLock::new(PairCandidates::default);

impl Service {
    /// The limits requests are held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What the query encoder has done (all zero for a service without an index).
    pub fn stats(&self) -> crate::api::ServiceStats {
        let options = self
            .batcher
            .as_ref()
            .map_or_else(BatchOptions::default, |b| b.options());
        crate::api::ServiceStats {
            query_batches: self.batcher.as_ref().map(|b| b.stats()).unwrap_or_default(),
            max_batch: options.max_batch,
            max_wait_ms: options.max_wait.as_secs_f64() * 1e3,
            max_queued: options.max_queued,
        }
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
        if self.index.is_none() {
            return Err(ApiError::not_found(field, NO_INDEX));
        }
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
        if self.index.is_none() {
            return format!("none: {NO_INDEX}");
        }
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
        if self.index.is_none() {
            return Err(ApiError::not_found("retriever", NO_INDEX));
        }
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
            // the first that fits; for pairs, one that ranks images before one that ranks
            // them by their passages alone
            None => {
                let fits = |r: &Served, images: bool| {
                    (!images || r.ranks_images) && (!with_images || r.takes_images)
                };
                let ranked = candidates != CandidateKind::Passages;
                let first = self.retrievers.iter().position(|r| fits(r, ranked));
                first
                    .or_else(|| {
                        let pairs = candidates == CandidateKind::Pairs;
                        pairs
                            .then(|| self.retrievers.iter().position(|r| fits(r, false)))
                            .flatten()
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
                    })?
            }
        };
        let r = &self.retrievers[i];
        if candidates == CandidateKind::Images && !r.ranks_images {
            return Err(ApiError::invalid(
                "candidates",
                format!(
                    "{} cannot rank images: every part must be a model that embeds images",
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

    /// The file of corpus image `id` of `domain`, when the corpus holds it as one (an image
    /// folder or a knowledge base, not parquet).
    pub(crate) fn image_file(&self, domain: &str, id: &str) -> Option<PathBuf> {
        let c = self.domain("domain", domain).ok()?.corpus.as_ref()?;
        match c.images.get(*c.image_ord.get(id)? as usize)? {
            ImageSource::File(f) => Some(f.path().to_path_buf()),
            ImageSource::Bytes(_) => None,
        }
    }

    /// The title the corpus gives passage `id` of `domain`, if any.
    pub(crate) fn passage_title(&self, domain: &str, id: &str) -> Option<String> {
        let d = self.domain("domain", domain).ok()?;
        let ord = d.searchers[0].passage_ord(id)?;
        d.corpus
            .as_ref()?
            .titles
            .get(ord as usize)
            .cloned()
            .flatten()
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

mod batch;
mod chat;
mod embed;
mod load;
mod rerank;
mod score;
mod search;
mod training;
mod urls;

use sift_core::VettedFile;

/// Largest corpus file read on request, bytes (the corpus reader's own limit for image
/// files).
const MAX_CORPUS_FILE_BYTES: u64 = 256 << 20;
use batch::QueryBatcher;
pub use batch::{BatchOptions, BatchStats};
pub use search::query_task;
use urls::cut;
pub use urls::{document_path, encode_path, image_path, page_path};
