//! `POST /v1/rerank`: the service's reranker scoring a request's own documents, through
//! [`rerank_documents`] as `sift rerank` and Python's `Reranker` score them.
use crate::api::{RerankRequest, RerankResponse};
use crate::error::ApiError;
use crate::rerank::rerank_documents;

use super::*;

impl Service {
    /// The reranker's scores of the request's documents for its query, best first.
    pub fn rerank_documents(&self, req: &RerankRequest) -> Result<RerankResponse, ApiError> {
        let Some(stage) = &self.rerank else {
            return Err(ApiError::not_found(
                "model",
                "this service has no reranker (start it with --rerank)",
            ));
        };
        let name = stage.reranker.name();
        if let Some(m) = &req.model
            && m != name
        {
            return Err(ApiError::not_found(
                "model",
                format!("no reranker {m:?} (served: {name})"),
            ));
        }
        rerank_documents(stage.reranker.as_ref(), req, &self.limits)
    }

    /// text-embeddings-inference's `POST /rerank`: the texts' scores for the query, best
    /// first, as probabilities (the sigmoid of the reranker's logit) or, with `raw_scores`,
    /// logits. A reranker whose own scores are probabilities (a sigmoid-activated
    /// cross-encoder) gives them as they are, and their logit as the raw score; any other
    /// gives its score as the logit.
    pub fn tei_rerank(
        &self,
        req: &crate::api::TeiRerankRequest,
    ) -> Result<Vec<crate::api::TeiRank>, ApiError> {
        let res = self
            .rerank_documents(&RerankRequest {
                model: None,
                query: req.query.clone(),
                documents: req
                    .texts
                    .iter()
                    .cloned()
                    .map(crate::api::RerankDocument::Text)
                    .collect(),
                top_n: None,
                return_documents: None,
            })
            .map_err(|e| match e.field.as_deref() {
                Some(f) if f.starts_with("documents") => ApiError {
                    field: Some(f.replacen("documents", "texts", 1)),
                    ..e
                },
                _ => e,
            })?;
        let probabilities = self
            .rerank
            .as_ref()
            .is_some_and(|s| s.reranker.probabilities());
        Ok(res
            .results
            .into_iter()
            .map(|r| {
                let s = r.relevance_score;
                let score = match (probabilities, req.raw_scores) {
                    (false, false) => 1.0 / (1.0 + (-s).exp()),
                    (true, true) => {
                        let p = s.clamp(f64::MIN_POSITIVE, 1.0 - f64::EPSILON);
                        (p / (1.0 - p)).ln()
                    }
                    _ => s,
                };
                crate::api::TeiRank {
                    index: r.index,
                    score,
                    text: req.return_text.then(|| req.texts[r.index].clone()),
                }
            })
            .collect())
    }
}
