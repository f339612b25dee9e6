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
}
