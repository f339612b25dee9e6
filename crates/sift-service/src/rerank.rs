//! Scoring given (query, passage[, image]) pairs with a reranker: the one way to get a
//! reranker's raw scores, for `sift rerank --pairs`, `POST /v1/rerank` and Python's
//! `Reranker`. Pairs of one query go to the reranker together (one batch of candidates);
//! the scores come back in the pairs' order, unchanged (a cross-encoder's `predict()`
//! values: its logits, or their sigmoid where the checkpoint says so).
use std::collections::HashMap;

use sift_retrieve::Reranker;
use sift_retrieve::rerank::{RerankDoc, RerankQuery};

use crate::api::{RerankDocument, RerankRequest, RerankResponse, RerankResult};
use crate::error::{ApiError, ErrorKind};
use crate::images;
use crate::service::Limits;

/// One pair to score.
#[derive(Debug, Clone, Default)]
pub struct ScorePair {
    /// The query text.
    pub query: String,
    /// The candidate passage's text (none: an image alone).
    pub passage: Option<String>,
    /// The candidate image (an encoded file), for rerankers that see images.
    pub image: Option<Vec<u8>>,
}

/// The score of each pair, in the pairs' order. A pair with an image needs a reranker that
/// sees images; a pair with neither text nor image is refused (`pairs[i]` names it).
pub fn score_pairs(reranker: &dyn Reranker, pairs: &[ScorePair]) -> Result<Vec<f64>, ApiError> {
    for (i, p) in pairs.iter().enumerate() {
        if p.passage.is_none() && p.image.is_none() {
            return Err(ApiError::invalid(
                format!("pairs[{i}]"),
                "give a passage, an image or both",
            ));
        }
        if p.image.is_some() && !reranker.sees_images() {
            return Err(ApiError::invalid(
                format!("pairs[{i}].image"),
                format!("the reranker {} does not see images", reranker.name()),
            ));
        }
    }
    // the pairs of each query, in order of first appearance
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut group_of: HashMap<&str, usize> = HashMap::new();
    for (i, p) in pairs.iter().enumerate() {
        let g = *group_of.entry(p.query.as_str()).or_insert_with(|| {
            groups.push((p.query.as_str(), Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push(i);
    }
    let mut scores = vec![0.0; pairs.len()];
    let ids: Vec<String> = (0..pairs.len()).map(|i| format!("pairs[{i}]")).collect();
    for (query, members) in &groups {
        let docs: Vec<RerankDoc> = members
            .iter()
            .map(|&i| RerankDoc {
                id: &ids[i],
                text: pairs[i].passage.as_deref(),
                image: pairs[i].image.as_deref(),
            })
            .collect();
        let q = RerankQuery {
            id: "query",
            text: query,
            images: &[],
        };
        let got = reranker.scores(&q, &docs).map_err(|e| {
            ApiError::new(
                ErrorKind::Internal,
                format!("rerank:{}: {e}", reranker.name()),
            )
        })?;
        if got.len() != members.len() {
            return Err(ApiError::new(
                ErrorKind::Internal,
                format!(
                    "rerank:{} gave {} scores for {} pairs",
                    reranker.name(),
                    got.len(),
                    members.len()
                ),
            ));
        }
        for (&i, s) in members.iter().zip(got) {
            if !s.is_finite() {
                return Err(ApiError::new(
                    ErrorKind::Internal,
                    format!("rerank:{}: pairs[{i}] got the score {s}", reranker.name()),
                ));
            }
            scores[i] = s;
        }
    }
    Ok(scores)
}

/// A rerank request's documents scored by `reranker` for its query ([`score_pairs`]), best
/// first (ties in the request's order), at most `top_n`; images held to `limits`.
pub fn rerank_documents(
    reranker: &dyn Reranker,
    req: &RerankRequest,
    limits: &Limits,
) -> Result<RerankResponse, ApiError> {
    if req.documents.is_empty() {
        return Err(ApiError::invalid("documents", "no documents"));
    }
    if req.documents.len() > limits.max_inputs {
        return Err(ApiError::invalid(
            "documents",
            format!(
                "{} documents: at most {} a request",
                req.documents.len(),
                limits.max_inputs
            ),
        ));
    }
    if req.top_n == Some(0) {
        return Err(ApiError::invalid("top_n", "give at least 1"));
    }
    let mut budget = images::PixelBudget::new(limits.max_request_pixels);
    let mut pairs = Vec::with_capacity(req.documents.len());
    for (i, d) in req.documents.iter().enumerate() {
        let (passage, image) = match d {
            RerankDocument::Text(t) => (Some(t.clone()), None),
            RerankDocument::Parts { text, image } => {
                let image = match image {
                    None => None,
                    Some(url) => {
                        let field = format!("documents[{i}].image");
                        let bytes = images::decode_data(&field, url, &limits.image)?;
                        budget.charge(&field, &bytes, &limits.image)?;
                        Some(bytes)
                    }
                };
                (text.clone(), image)
            }
        };
        pairs.push(ScorePair {
            query: req.query.clone(),
            passage,
            image,
        });
    }
    let scores = score_pairs(reranker, &pairs).map_err(|e| ApiError {
        field: e.field.map(|f| f.replace("pairs[", "documents[")),
        ..e
    })?;
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(req.top_n.unwrap_or(usize::MAX));
    let with_documents = req.return_documents == Some(true);
    Ok(RerankResponse {
        model: reranker.name().to_string(),
        results: order
            .into_iter()
            .map(|i| RerankResult {
                index: i,
                relevance_score: scores[i],
                document: with_documents.then(|| req.documents[i].clone()),
            })
            .collect(),
    })
}
