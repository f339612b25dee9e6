//! The training harnesses' batch searches: Search-R1's `POST /retrieve` (verl's
//! `SearchTool`, BrowseComp-Plus's single query) and R1-Searcher's `POST /queries`, each
//! query searched through [`Service::search`] as any other door searches it.
use crate::api::{
    BrowseCompDocument, BrowseCompHit, QueriesRequest, QueriesResponse, RetrieveRequest,
    RetrieveResponse, RetrievedDocument, RetrievedHits, ScoredDocument, SearchRequest,
};
use crate::error::{ApiError, ErrorKind};

use super::*;

/// Passages per query when a request does not say (Search-R1's and R1-Searcher's default).
pub const DEFAULT_TRAINING_TOP_K: usize = 3;

impl Service {
    /// Search-R1's `POST /retrieve`: every query's passages, in order; or, for a body with
    /// `query` alone, BrowseComp-Plus's answer.
    pub fn retrieve(&self, req: &RetrieveRequest) -> Result<RetrieveResponse, ApiError> {
        let top_k = self.training_top_k("topk", req.topk)?;
        match (&req.queries, &req.query) {
            (Some(_), Some(_)) => Err(ApiError::invalid(
                "query",
                "give queries (Search-R1) or query (BrowseComp-Plus), not both",
            )),
            (None, None) => Err(ApiError::invalid(
                "queries",
                "missing: give queries (a list) or query",
            )),
            (None, Some(q)) => {
                let hits = self.training_search(q, req.domain.as_deref(), top_k)?;
                Ok(RetrieveResponse::Single {
                    result: hits
                        .into_iter()
                        .map(|h| BrowseCompHit {
                            document: BrowseCompDocument {
                                title: h.id.clone(),
                                text: h.text.unwrap_or_default(),
                            },
                            docid: h.id,
                            score: h.score,
                        })
                        .collect(),
                })
            }
            (Some(queries), None) => {
                self.check_batch("queries", queries.len())?;
                let mut result = Vec::with_capacity(queries.len());
                for (i, q) in queries.iter().enumerate() {
                    let hits = self
                        .training_search(q, req.domain.as_deref(), top_k)
                        .map_err(|e| name_query(e, "queries", i))?;
                    let docs = hits.into_iter().map(|h| {
                        let score = h.score;
                        let doc = RetrievedDocument {
                            contents: format!("\"{}\"\n{}", h.id, h.text.unwrap_or_default()),
                            id: h.id,
                        };
                        (doc, score)
                    });
                    result.push(if req.return_scores {
                        RetrievedHits::Scored(
                            docs.map(|(document, score)| ScoredDocument { document, score })
                                .collect(),
                        )
                    } else {
                        RetrievedHits::Documents(docs.map(|(d, _)| d).collect())
                    });
                }
                Ok(RetrieveResponse::Batch { result })
            }
        }
    }

    /// R1-Searcher's `POST /queries`: each query's passage texts, best first.
    pub fn queries(&self, req: &QueriesRequest) -> Result<QueriesResponse, ApiError> {
        let top_k = self.training_top_k("k", req.k)?;
        self.check_batch("queries", req.queries.len())?;
        let mut answers = Vec::with_capacity(req.queries.len());
        for (i, q) in req.queries.iter().enumerate() {
            let hits = self
                .training_search(q, None, top_k)
                .map_err(|e| name_query(e, "queries", i))?;
            answers.push(
                hits.into_iter()
                    .map(|h| h.text.unwrap_or_default())
                    .collect(),
            );
        }
        Ok(QueriesResponse {
            queries: req.queries.clone(),
            answers,
        })
    }

    /// A request's passages per query: 1 to the service's `max_top_k`, else the default.
    fn training_top_k(&self, field: &str, k: Option<i64>) -> Result<usize, ApiError> {
        match k {
            None => Ok(DEFAULT_TRAINING_TOP_K.min(self.limits.max_top_k)),
            Some(k) if k >= 1 && (k as u64) <= self.limits.max_top_k as u64 => Ok(k as usize),
            Some(k) => Err(ApiError::invalid(
                field,
                format!("{k}: give 1 to {}", self.limits.max_top_k),
            )),
        }
    }

    /// More queries in one request than the limit: a 413 naming it.
    fn check_batch(&self, field: &str, n: usize) -> Result<(), ApiError> {
        if n > self.limits.max_batch_queries {
            return Err(ApiError {
                kind: ErrorKind::PayloadTooLarge,
                field: Some(field.to_string()),
                message: format!(
                    "{n} queries: at most {} a request (--max-batch-queries)",
                    self.limits.max_batch_queries
                ),
            });
        }
        Ok(())
    }

    /// One query's passages, whole texts.
    fn training_search(
        &self,
        query: &str,
        domain: Option<&str>,
        top_k: usize,
    ) -> Result<Vec<crate::api::Hit>, ApiError> {
        let res = self.search(&SearchRequest {
            query: query.to_string(),
            domain: domain.map(str::to_string),
            top_k,
            max_text_chars: Some(usize::MAX),
            ..SearchRequest::default()
        })?;
        Ok(res.hits)
    }
}

/// An error of query `i` named as `field[i]` (its own field kept after it).
fn name_query(e: ApiError, field: &str, i: usize) -> ApiError {
    ApiError {
        field: Some(match &e.field {
            Some(f) if f != "query" => format!("{field}[{i}].{f}"),
            _ => format!("{field}[{i}]"),
        }),
        ..e
    }
}

impl Service {
    /// text-embeddings-inference's `POST /embed`: the vectors of the service's first dense
    /// model, as `/v1/embeddings` gives them (the same call).
    pub fn tei_embed(&self, req: &crate::api::TeiEmbedRequest) -> Result<Vec<Vec<f32>>, ApiError> {
        if req.normalize == Some(false) {
            return Err(ApiError::invalid(
                "normalize",
                "the vectors are unit length: send true or leave it out",
            ));
        }
        let Some(model) = self.model_ids.first() else {
            return Err(ApiError::not_found(
                "inputs",
                "this service has no dense model to embed with",
            ));
        };
        let res = self.embed(&crate::api::EmbeddingsRequest {
            model: model.clone(),
            input: req.inputs.clone(),
            encoding_format: None,
            dimensions: None,
            input_type: req.input_type.clone(),
            user: None,
        })?;
        res.data
            .into_iter()
            .map(|e| {
                serde_json::from_value(e.embedding)
                    .map_err(|e| ApiError::new(ErrorKind::Internal, format!("an embedding: {e}")))
            })
            .collect()
    }
}
