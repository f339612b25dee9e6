//! The local retrieval servers that search-agent training and deep-research harnesses call:
//! Search-R1's `POST /retrieve` (also verl's `SearchTool`; BrowseComp-Plus's single `query`
//! on the same path) and R1-Searcher's `POST /queries`.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The body of `POST /retrieve`: Search-R1's (`queries`, `topk`, `return_scores`) or
/// BrowseComp-Plus's (`query`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RetrieveRequest {
    /// Search-R1: the queries, answered in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<Vec<String>>,
    /// BrowseComp-Plus: one query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Passages per query (absent or null: the service's default, 3 as Search-R1's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk: Option<i64>,
    /// Search-R1: each hit as `{"document", "score"}` (true) or the document alone.
    #[serde(default)]
    pub return_scores: bool,
    /// Sift's extension: the domain to search (default: every domain, merged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// A passage as Search-R1's corpus rows are: its id and `contents`, the title on the first
/// line and the text after it; and, as ASearcher's corpus rows carry, the `url` of its page
/// (which `POST /access` reads).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RetrievedDocument {
    /// The passage id.
    pub id: String,
    /// `"Title"\ntext`: the title (the passage id where the corpus has none) quoted on the
    /// first line, as Search-R1's wiki corpus writes it; a passage of a Search-R1 corpus
    /// (`contents` rows) is its `contents` as they are.
    pub contents: String,
    /// The passage's readable page on this service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One hit of `POST /retrieve` with `return_scores`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScoredDocument {
    /// The passage.
    pub document: RetrievedDocument,
    /// Its retrieval score.
    pub score: f64,
}

/// A query's hits: scored, or the documents alone (`return_scores: false`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RetrievedHits {
    /// With scores.
    Scored(Vec<ScoredDocument>),
    /// The documents alone.
    Documents(Vec<RetrievedDocument>),
}

/// A BrowseComp-Plus hit: `{"document": {"title", "text"}, "docid"}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BrowseCompHit {
    /// The passage's title and text.
    pub document: BrowseCompDocument,
    /// The passage id.
    pub docid: String,
    /// Its retrieval score.
    pub score: f64,
}

/// A BrowseComp-Plus document.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BrowseCompDocument {
    /// The title (the passage id where the corpus has none).
    pub title: String,
    /// The text.
    pub text: String,
}

/// The answer of `POST /retrieve`: one list per query (Search-R1), or the one query's hits
/// (BrowseComp-Plus).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RetrieveResponse {
    /// Search-R1's `{"result": [[...], ...]}`.
    Batch {
        /// Per query, in order.
        result: Vec<RetrievedHits>,
    },
    /// BrowseComp-Plus's `{"result": [...]}`.
    Single {
        /// The query's hits.
        result: Vec<BrowseCompHit>,
    },
}

/// R1-Searcher's `POST /queries` body.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct QueriesRequest {
    /// The queries.
    pub queries: Vec<String>,
    /// Passages per query (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<i64>,
}

/// R1-Searcher's answer: the queries and, per query, its passages' texts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct QueriesResponse {
    /// The queries, as sent.
    pub queries: Vec<String>,
    /// Per query, its passages' texts, best first.
    pub answers: Vec<Vec<String>>,
}

/// text-embeddings-inference's `POST /embed` body.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TeiEmbedRequest {
    /// A text or a list of texts.
    pub inputs: crate::api::EmbeddingInput,
    /// Unit vectors (the default, and the only kind Sift's models give: false is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<bool>,
    /// Cut inputs past the model's length (Sift always does: accepted either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
    /// Sift's extension: `passage` (default) or `query` (the model's query prefix or
    /// instruction format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_type: Option<String>,
}

/// `GET /v1/stats`: what the service's query encoder has done.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ServiceStats {
    /// Text queries encoded in batches across requests.
    pub query_batches: crate::BatchStats,
    /// Most texts in one batch (`--query-batch`).
    pub max_batch: usize,
    /// Longest wait for a batch to fill, milliseconds (`--query-batch-wait-ms`).
    pub max_wait_ms: f64,
    /// Most texts queued at once (`--max-queued-queries`).
    pub max_queued: usize,
}

/// ASearcher's `POST /access` body: pages to read.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AccessRequest {
    /// Links of this service's pages (as `/retrieve` gives them in `url`); any other URL is
    /// answered with null.
    pub urls: Vec<String>,
}

/// A page `POST /access` read.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AccessPage {
    /// The URL as asked.
    pub url: String,
    /// The passage (or image) id the page is for.
    pub id: String,
    /// Its title: the passage's, else its id.
    pub title: String,
    /// The page's text: its passage's (as `/retrieve`'s `contents`), then its images' links,
    /// one a line.
    pub contents: String,
}

/// ASearcher's answer: per URL, in order, its page or null.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AccessResponse {
    /// The pages.
    pub result: Vec<Option<AccessPage>>,
}

/// One image of VRAG's `GET /search?queries=` answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct VragHit {
    /// Its rank, from 0.
    pub idx: usize,
    /// The image's file, which VRAG's clients open (they run beside the service); its URL on
    /// this service for an image the corpus holds in a parquet file.
    pub image_file: String,
    /// The image id.
    pub id: String,
    /// The domain holding it.
    pub domain: String,
    /// Its retrieval score.
    pub score: f64,
    /// The image on this service.
    pub image_url: String,
}
