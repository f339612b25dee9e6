//! `POST /v1/rerank`: Cohere's, Jina's, vLLM's and infinity's rerank body, answered with a
//! reranker's raw scores of the request's own documents (not the index's).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The body of `POST /v1/rerank`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RerankRequest {
    /// The reranker's name (`GET /v1/models`); absent: the service's reranker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The query.
    pub query: String,
    /// The documents to score: texts, or objects with a `text` and (Sift's extension, for a
    /// reranker that sees images) an `image` as a `data:` URL.
    pub documents: Vec<RerankDocument>,
    /// Return the best this many (default: every document).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_n: Option<usize>,
    /// Return each document with its score (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_documents: Option<bool>,
}

/// One document to score.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RerankDocument {
    /// Its text.
    Text(String),
    /// Its text and/or image.
    Parts {
        /// Its text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Its image as a `data:` URL (a reranker that sees images).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<String>,
    },
}

/// The answer of `POST /v1/rerank`: the documents' scores, best first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RerankResponse {
    /// The reranker that scored them.
    pub model: String,
    /// Best first (ties in the request's order), at most `top_n`.
    pub results: Vec<RerankResult>,
}

/// One document's score.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RerankResult {
    /// Its position in the request's `documents`.
    pub index: usize,
    /// The reranker's raw score (a cross-encoder's `predict()` value), higher is better.
    pub relevance_score: f64,
    /// The document, with `return_documents`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankDocument>,
}

/// text-embeddings-inference's `POST /rerank` body.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TeiRerankRequest {
    /// The query.
    pub query: String,
    /// The texts to score.
    pub texts: Vec<String>,
    /// The reranker's logits instead of probabilities (default false).
    #[serde(default)]
    pub raw_scores: bool,
    /// Each result with its text (default false).
    #[serde(default)]
    pub return_text: bool,
    /// Cut texts past the model's length (Sift always does: accepted either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
}

/// One text's score in text-embeddings-inference's answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TeiRank {
    /// Its position in the request's `texts`.
    pub index: usize,
    /// A probability (the sigmoid of the reranker's logit), or the logit with `raw_scores`.
    pub score: f64,
    /// The text, with `return_text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}
