//! The JSON shapes of the service: requests, responses and errors, shared by the HTTP API,
//! the Serper-compatible endpoints and the MCP tools. Every type derives a JSON Schema, from
//! which the OpenAPI document and the MCP tool schemas are made.
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use sift_eval::CandidateKind;

mod bounded;
mod compat;
mod json;
mod rerank;
mod training;

pub use bounded::{AtMost, MAX_PARSED_IMAGES, MAX_PARSED_INPUTS};
pub use compat::*;
pub use json::{parse_json, parse_json_seed};
pub use rerank::{
    RerankDocument, RerankRequest, RerankResponse, RerankResult, TeiRank, TeiRerankRequest,
};
pub use training::*;

/// Results per search when a request names none.
pub const DEFAULT_TOP_K: usize = 10;

pub(crate) fn default_top_k() -> usize {
    DEFAULT_TOP_K
}

/// How a query's text and images become one vector, for models that embed images.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// The text vector plus the mean of the images' vectors, renormalised (GME: one prompt
    /// with every image).
    #[default]
    All,
    /// normalise(text + first image); a blank white image when the query has none.
    First,
    /// MM-BRIGHT's reference code's rule for the model and the task the candidates make
    /// (passages Task 2, images Task 3, pairs Task 4; see `query_task`): for images and
    /// pairs the service must have prepared the reference's stand-in images at start
    /// (`sift serve --query-fusion reference`).
    Reference,
}

/// An image in a request: a corpus image by id, or the encoded bytes (PNG, JPEG, WebP, GIF,
/// BMP) as base64 or a `data:image/...;base64,` URL. Exactly one of `image_id` and `data`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageInput {
    /// A corpus image id of the searched domain (as search results give them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Encoded image bytes: base64, or a data URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// A region to keep, `[x1, y1, x2, y2]` on a 0-1000 scale of the image's width and
    /// height (InterLV-Search's convention): the crop is what is searched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbox: Option<[u32; 4]>,
    /// Encoded bytes uploaded as they are (`POST /v1/reverse_image_search`), not JSON.
    #[serde(skip)]
    #[schemars(skip)]
    pub bytes: Option<Vec<u8>>,
}

/// `POST /v1/reverse_image_search`'s query string (the body is the image file).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    /// Domain (default: every domain served).
    #[serde(default)]
    pub domain: Option<String>,
    /// What to rank: images (default), passages or pairs.
    #[serde(default)]
    pub candidates: Option<CandidateKind>,
    /// Number of results.
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Retriever.
    #[serde(default)]
    pub retriever: Option<String>,
    /// Query text to search with the image.
    #[serde(default)]
    pub query: Option<String>,
    /// A region, `x1,y1,x2,y2` on the 0-1000 scale.
    #[serde(default)]
    pub bbox: Option<String>,
    /// Cut each text to this many characters.
    #[serde(default)]
    pub max_text_chars: Option<usize>,
}

/// A search over one domain, or every domain the service serves.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Query text (may be empty when images are given).
    #[serde(default)]
    pub query: String,
    /// Query images (for retrievers whose models embed images).
    #[serde(default, deserialize_with = "bounded::images")]
    pub images: Vec<ImageInput>,
    /// Retriever, one the service serves (`GET /v1/indexes`); default: the first served
    /// that can rank the candidates asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retriever: Option<String>,
    /// Domain (`index_name` as pyserini calls it); without it, every domain the service
    /// serves is searched and the hits merged into one ranking, scored as one index over all
    /// of them would score them (see the README).
    #[serde(default, alias = "index_name", skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Number of results (1 to the service's limit, 1000 unless it says otherwise; `k` as
    /// pyserini calls it).
    #[serde(default = "default_top_k", alias = "k")]
    #[schemars(range(min = 1, max = 1000))]
    pub top_k: usize,
    /// What to rank.
    #[serde(default)]
    pub candidates: CandidateKind,
    /// How query text and images combine.
    #[serde(default)]
    pub fusion: Fusion,
    /// Cut each result's text to this many characters (default: the service's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_text_chars: Option<usize>,
    /// BM25's k1 for this search (default: the service's; >= 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k1: Option<f32>,
    /// BM25's b for this search (default: the service's; 0 to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<f32>,
    /// HNSW's ef for this search, where a domain is searched with HNSW (1 to 100000;
    /// default: the service's `--ef-search`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub ef_search: Option<usize>,
}

/// pyserini's query of its MCP `search` tool: a text, or `{query_txt, query_img_path}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PyseriniQuery {
    /// The query text.
    Text(String),
    /// Text and an image.
    Parts {
        /// The query text.
        #[serde(default)]
        query_txt: Option<String>,
        /// The query image: a link this service gave out, a corpus image id, a data URL or
        /// base64 (no local path is read).
        #[serde(default)]
        query_img_path: Option<String>,
    },
}

impl Default for PyseriniQuery {
    fn default() -> Self {
        PyseriniQuery::Text(String::new())
    }
}

/// The MCP `search` tool's arguments: [`SearchRequest`]'s, and the ones pyserini's MCP
/// server takes (`query` as text or `{query_txt, query_img_path}`, `index_name`, `k`,
/// `ef_search`; `encoder`, `query_generator`, `intruction_config` and `parse` are accepted
/// and ignored: the service's retrievers are fixed at start).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct McpSearchRequest {
    /// Query text, or pyserini's `{query_txt, query_img_path}`.
    #[serde(default)]
    pub query: PyseriniQuery,
    /// Query images.
    #[serde(default, deserialize_with = "bounded::images")]
    pub images: Vec<ImageInput>,
    /// Retriever (default: the first served that fits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retriever: Option<String>,
    /// Domain (`index_name`; default: every domain served, merged).
    #[serde(default, alias = "index_name", skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Number of results (`k`).
    #[serde(default = "default_top_k", alias = "k")]
    #[schemars(range(min = 1, max = 1000))]
    pub top_k: usize,
    /// What to rank.
    #[serde(default)]
    pub candidates: CandidateKind,
    /// How query text and images combine.
    #[serde(default)]
    pub fusion: Fusion,
    /// Cut each result's text to this many characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_text_chars: Option<usize>,
    /// BM25's k1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k1: Option<f32>,
    /// BM25's b.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<f32>,
    /// HNSW's ef.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub ef_search: Option<usize>,
    /// pyserini's; ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoder: Option<serde_json::Value>,
    /// pyserini's; ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_generator: Option<serde_json::Value>,
    /// pyserini's (spelt so); ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intruction_config: Option<serde_json::Value>,
    /// pyserini's; ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse: Option<serde_json::Value>,
    /// Any other argument: ignored, and named in the answer (`ignored_arguments`), as
    /// FastMCP's servers (pyserini's, BrowseComp-Plus's) ignore arguments they do not know.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// One result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Hit {
    /// 1-based rank.
    pub rank: usize,
    /// Candidate id: a passage id, a corpus image id, or a pair id (`passage|image`).
    pub id: String,
    /// The domain holding it.
    pub domain: String,
    /// Retrieval score (higher is better).
    pub score: f64,
    /// The passage of a passage or pair result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passage_id: Option<String>,
    /// The image of an image or pair result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Whether the result carries an image.
    pub has_image: bool,
    /// The passage text, cut to `max_text_chars` (when the service has the corpus).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The passage's title, where the corpus gives one (BEIR's `title`, a knowledge base's
    /// `title`, the first line of Search-R1's `contents`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Where the service serves the readable page of the hit (path): its passage's page
    /// with the page's images, or an image's page (HTML; Markdown or text on request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_url: Option<String>,
    /// Where the service serves the passage as JSON (path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passage_url: Option<String>,
    /// Where the service serves the image (path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
}

/// The results of a search.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SearchResponse {
    /// The domain searched, when the request named one (or only one is served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Every domain searched.
    pub domains: Vec<String>,
    /// Retriever used.
    pub retriever: String,
    /// The reranker the hits went through, when the service has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reranker: Option<String>,
    /// What was ranked.
    pub candidates: CandidateKind,
    /// Results, best first.
    pub hits: Vec<Hit>,
}

/// A passage.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Document {
    /// Passage id.
    pub id: String,
    /// Domain.
    pub domain: String,
    /// The passage text (title and text joined, as indexed).
    pub contents: String,
    /// Corpus images of the passage's page.
    pub image_ids: Vec<String>,
}

/// A domain the service searches.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DomainInfo {
    /// Domain name.
    pub name: String,
    /// Passages indexed.
    pub passages: usize,
    /// Corpus images the service can return (0 without the corpus).
    pub images: usize,
}

/// A retriever the service serves.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RetrieverInfo {
    /// Spec, as requests name it.
    pub name: String,
    /// Whether it ranks corpus images and pairs (every part a model that embeds images).
    pub ranks_images: bool,
    /// Whether it takes query images.
    pub takes_images: bool,
}

/// What the service serves.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct IndexInfo {
    /// Service name and version.
    pub service: String,
    /// Index directory name.
    pub index: String,
    /// Domains.
    pub domains: Vec<DomainInfo>,
    /// Retrievers, the default first.
    pub retrievers: Vec<RetrieverInfo>,
    /// Embedding models (`/v1/embeddings`).
    pub models: Vec<String>,
    /// Whether passage texts and images are served (the corpus was given).
    pub has_corpus: bool,
    /// Largest `top_k`.
    pub max_top_k: usize,
    /// Images in one request (search, embeddings).
    pub max_images: usize,
    /// Pixels of one image (from its header).
    pub max_image_pixels: u64,
    /// Pixels of all the images of one request together.
    pub max_request_pixels: u64,
    /// Inputs of one embeddings request.
    pub max_inputs: usize,
}

/// One scored id in a list to fuse.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScoredId {
    /// Candidate id.
    pub id: String,
    /// Score (higher is better).
    pub score: f64,
}

/// Rank fusion of several result lists.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FuseRequest {
    /// The lists (two or more), each a ranking of scored ids.
    pub lists: Vec<Vec<ScoredId>>,
    /// `rrf` (reciprocal rank fusion, k = 60), `rrf:<k>`, or `weighted:<w1>,<w2>,...`
    /// (min-max normalised scores, one weight per list).
    #[serde(default = "default_fusion")]
    pub method: String,
    /// Number of fused results.
    #[serde(default = "default_top_k")]
    #[schemars(range(min = 1, max = 1000))]
    pub top_k: usize,
}

fn default_fusion() -> String {
    "rrf".into()
}

/// A fused list.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FuseResponse {
    /// Fused results, best first.
    pub hits: Vec<ScoredId>,
}

/// Scoring result lists against relevance judgements, as trec_eval scores them.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalRequest {
    /// Query id -> its results (any order; ranks follow from the scores). A query id given
    /// twice, or a document listed twice for a query, is an error (as in a TREC run file).
    #[schemars(with = "BTreeMap<String, Vec<ScoredId>>")]
    pub run: KeyedEntries<Vec<ScoredId>>,
    /// Query id -> document id -> relevance grade (graded: 0 not relevant). A judgement given
    /// twice keeps its last grade and is counted in the answer's `warnings` (as in a qrels
    /// file).
    #[schemars(with = "BTreeMap<String, BTreeMap<String, i32>>")]
    pub qrels: KeyedEntries<KeyedEntries<i32>>,
}

/// A JSON object read with every member kept in order, repeated keys included, so that a
/// request that names a key twice is told so instead of one value silently winning.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedEntries<V>(pub Vec<(String, V)>);

impl<V> Default for KeyedEntries<V> {
    fn default() -> Self {
        KeyedEntries(Vec::new())
    }
}

impl<V, K: Into<String>> FromIterator<(K, V)> for KeyedEntries<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        KeyedEntries(iter.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl<V: Serialize> Serialize for KeyedEntries<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for KeyedEntries<V> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Visit<V> {
            type Value = KeyedEntries<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    out.push((k, v));
                }
                Ok(KeyedEntries(out))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// Metrics of a run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct EvalResponse {
    /// Mean of each metric over the judged queries (`ndcg@10`, `recall@100`, ...).
    pub mean: BTreeMap<String, f64>,
    /// Query id -> metrics.
    pub per_query: BTreeMap<String, BTreeMap<String, f64>>,
    /// Queries scored (those with judgements).
    pub queries: usize,
    /// Recoverable problems, counted by kind (`duplicate_qrel`, `unjudged_query`:
    /// queries of the run without judgements, left out of the means), as `sift eval` counts
    /// them; absent when there were none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub warnings: BTreeMap<String, u64>,
}

/// OpenAI's `POST /v1/embeddings` body.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddingsRequest {
    /// Model id (`GET /v1/models`).
    pub model: String,
    /// A text or a list of texts; with a model that embeds images, an item may be an image
    /// as a `data:image/...;base64,` URL.
    pub input: EmbeddingInput,
    /// `float` (default) or `base64` (little-endian float32, as OpenAI's clients ask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<String>,
    /// Must equal the model's dimension when given (vectors are not shortened).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
    /// Sift's extension: `passage` (default, as `sift embed`) or `query` (the model's query
    /// prefix or instruction format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_type: Option<String>,
    /// Ignored (OpenAI's end-user id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Texts to embed (an array is read up to [`MAX_PARSED_INPUTS`] elements, then refused).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// One text.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// One vector.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Embedding {
    /// Always `embedding`.
    pub object: String,
    /// Position in the input.
    pub index: usize,
    /// The unit vector: floats, or a base64 string of little-endian float32.
    pub embedding: serde_json::Value,
}

/// Token counts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Tokens read (0 where the model does not say: GME, images).
    pub prompt_tokens: usize,
    /// The same.
    pub total_tokens: usize,
}

/// OpenAI's embeddings answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddingsResponse {
    /// Always `list`.
    pub object: String,
    /// Vectors, in input order.
    pub data: Vec<Embedding>,
    /// Model id.
    pub model: String,
    /// Token counts.
    pub usage: Usage,
}

/// An OpenAI model entry.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ModelEntry {
    /// Model id.
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// Seconds since the epoch when the index was built.
    pub created: u64,
    /// Always `sift`.
    pub owned_by: String,
}

/// OpenAI's `GET /v1/models` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    /// Models.
    pub data: Vec<ModelEntry>,
}

/// An error answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// Machine-readable kind: `invalid_request` (400), `unauthorized` (401), `forbidden`
    /// (403), `not_found`
    /// (404), `method_not_allowed` (405), `not_acceptable` (406), `request_timeout` (408),
    /// `payload_too_large` (413), `uri_too_long` (414), `unsupported_media_type` (415),
    /// `headers_too_large` (431), `overloaded` (503), `timeout` (504), `internal` (500).
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, as a path (`images[0].data`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Human-readable message.
    pub message: String,
}

/// `GET /healthz` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// Requests running now.
    pub in_flight: usize,
}

/// OpenAI's `POST /v1/chat/completions` body, for the service's local generator
/// (`sift serve --generator`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChatRequest {
    /// The generator's name (`GET /v1/models`).
    pub model: String,
    /// The chat so far.
    pub messages: Vec<ChatMessage>,
    /// At most this many new tokens (default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// OpenAI's newer name for `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// 0 (the default) for greedy decoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling's mass (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// The sampler's seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Generation stops before any of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopStrings>,
    /// Choices to generate: 1 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Streaming is not served: false or absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Ignored (OpenAI's end-user id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// One stop string or several.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum StopStrings {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// One message of a chat.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Text, or a list of `text` and `image_url` parts (images as `data:` URLs).
    pub content: ChatContent,
}

/// A message's content.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ChatContent {
    /// Plain text.
    Text(String),
    /// Parts.
    Parts(Vec<ChatPart>),
}

/// A part of a message.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChatPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    ImageUrl {
        /// Where it is: a `data:image/...;base64,` URL (the service fetches nothing).
        image_url: ImageUrl,
    },
}

/// An image reference.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ImageUrl {
    /// A `data:` URL.
    pub url: String,
}

/// OpenAI's chat completion.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChatResponse {
    /// `chatcmpl-<n>`.
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The generator.
    pub model: String,
    /// One choice.
    pub choices: Vec<ChatChoice>,
    /// Tokens used.
    pub usage: ChatUsage,
}

/// The generated message.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChatChoice {
    /// 0.
    pub index: u32,
    /// `{"role": "assistant", "content": ...}`.
    pub message: ChatAnswer,
    /// `stop` (an end token or stop string) or `length`.
    pub finish_reason: String,
}

/// The assistant's message.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChatAnswer {
    /// Always `assistant`.
    pub role: String,
    /// The generated text.
    pub content: String,
}

/// Tokens of a chat completion.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChatUsage {
    /// Prompt tokens (text and image tokens).
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub completion_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
}
