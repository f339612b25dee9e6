//! The training harnesses' batch searches: Search-R1's `POST /retrieve` (verl's
//! `SearchTool`, BrowseComp-Plus's single query) and R1-Searcher's `POST /queries`, each
//! query searched through [`Service::search`] as any other door searches it.
use crate::api::CandidateKind;
use crate::api::{
    BrowseCompDocument, BrowseCompHit, QueriesRequest, QueriesResponse, RetrieveRequest,
    RetrieveResponse, RetrievedDocument, RetrievedHits, ScoredDocument, SearchRequest,
};
use crate::error::{ApiError, ErrorKind};

const PASSAGES: CandidateKind = CandidateKind::Passages;
use rayon::prelude::*;
use sift_retrieve::QueryVectors;

use super::*;

/// Passages per query when a request does not say (Search-R1's and R1-Searcher's default).
pub const DEFAULT_TRAINING_TOP_K: usize = 3;

/// Images per query of VRAG's search when the request does not say (its server's).
pub const VRAG_TOP_K: usize = 10;

impl Service {
    /// Search-R1's `POST /retrieve`: every query's passages, in order; or, for a body with
    /// `query` alone, BrowseComp-Plus's answer.
    /// `base`: the scheme and host the documents' `url`s start with (empty: paths).
    pub fn retrieve(
        &self,
        req: &RetrieveRequest,
        base: &str,
    ) -> Result<RetrieveResponse, ApiError> {
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
                        .map(|h| {
                            let t = Titled::of(&h);
                            BrowseCompHit {
                                document: BrowseCompDocument {
                                    title: t.title.to_string(),
                                    text: t.body.to_string(),
                                },
                                docid: h.id.clone(),
                                score: h.score,
                            }
                        })
                        .collect(),
                })
            }
            (Some(queries), None) => {
                self.check_batch("queries", queries.len())?;
                let mut result = Vec::with_capacity(queries.len());
                let found = self.search_texts(queries, req.domain.as_deref(), top_k, PASSAGES);
                for (i, hits) in found.into_iter().enumerate() {
                    let hits = hits.map_err(|e| name_query(e, "queries", i))?;
                    let docs = hits.into_iter().map(|h| {
                        let doc = RetrievedDocument {
                            contents: Titled::of(&h).contents(),
                            url: h.page_url.as_ref().map(|p| format!("{base}{p}")),
                            id: h.id.clone(),
                        };
                        (doc, h.score)
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
        let found = self.search_texts(&req.queries, None, top_k, PASSAGES);
        for (i, hits) in found.into_iter().enumerate() {
            let hits = hits.map_err(|e| name_query(e, "queries", i))?;
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
        Ok(self
            .search(&training_request(query, domain, top_k, PASSAGES))?
            .hits)
    }

    /// Many queries' passages, each as [`Service::training_search`] finds them alone: the
    /// queries go through the encoder in chunks of its batch size (so a request of
    /// thousands holds one chunk's vectors at a time) and each chunk's searches run in
    /// parallel.
    pub(super) fn search_texts(
        &self,
        queries: &[String],
        domain: Option<&str>,
        top_k: usize,
        candidates: CandidateKind,
    ) -> Vec<Result<Vec<crate::api::Hit>, ApiError>> {
        let served = match self.retriever(None, candidates, false) {
            Ok(ri) => &self.retrievers[ri],
            Err(e) => return vec![Err(e); queries.len()],
        };
        let chunk = self.batcher.as_ref().map_or(64, |b| b.options().max_batch);
        let mut out = Vec::with_capacity(queries.len());
        for queries in queries.chunks(chunk) {
            // a blank query is refused by the search itself, as when it comes alone
            let texts: Vec<&str> = queries
                .iter()
                .map(String::as_str)
                .filter(|q| !q.trim().is_empty())
                .collect();
            let mut vectors = match self.text_vectors(served, &texts) {
                Ok(v) => v.into_iter(),
                Err(e) => {
                    out.extend(queries.iter().map(|_| Err(e.clone())));
                    continue;
                }
            };
            let jobs: Vec<(&String, Option<QueryVectors>)> = queries
                .iter()
                .map(|q| (q, (!q.trim().is_empty()).then(|| vectors.next()).flatten()))
                .collect();
            out.par_extend(jobs.into_par_iter().map(|(q, v)| {
                self.search_with(&training_request(q, domain, top_k, candidates), v)
                    .map(|r| r.hits)
            }));
        }
        out
    }
}

/// A hit's title and body as the training harnesses show them.
pub(crate) struct Titled<'a> {
    /// The passage's title, else its id.
    pub title: &'a str,
    /// The text without the title it begins with.
    pub body: &'a str,
    /// The text whole, when it is a Search-R1 `contents` (its first line is the title).
    verbatim: Option<&'a str>,
}

impl<'a> Titled<'a> {
    /// Splits `h`'s text: a Search-R1 `contents` (first line = the title, quoted or not) at
    /// its first newline; a text that begins with its title and a space (BEIR's and titled
    /// knowledge bases' joined texts) after them; any other text is the body whole.
    pub fn of(h: &'a crate::api::Hit) -> Titled<'a> {
        let text = h.text.as_deref().unwrap_or("");
        Titled::split(&h.id, h.title.as_deref(), text)
    }

    pub fn split(id: &'a str, title: Option<&'a str>, text: &'a str) -> Titled<'a> {
        let Some(title) = title else {
            return Titled {
                title: id,
                body: text,
                verbatim: None,
            };
        };
        if sift_core::contents_title(text).as_deref() == Some(title) {
            let body = text.split_once('\n').map_or("", |(_, b)| b);
            return Titled {
                title,
                body,
                verbatim: Some(text),
            };
        }
        let body = text
            .strip_prefix(title)
            .and_then(|r| r.strip_prefix(' '))
            .unwrap_or(text);
        Titled {
            title,
            body,
            verbatim: None,
        }
    }

    /// Search-R1's `contents`: the text as it is when it is one, else `"Title"\nbody`.
    pub fn contents(&self) -> String {
        match self.verbatim {
            Some(t) => t.to_string(),
            None => format!("\"{}\"\n{}", self.title, self.body),
        }
    }
}

/// A training harness's search: passages of `domain` (or every domain), whole texts.
fn training_request(
    query: &str,
    domain: Option<&str>,
    top_k: usize,
    candidates: CandidateKind,
) -> SearchRequest {
    SearchRequest {
        query: query.to_string(),
        domain: domain.map(str::to_string),
        top_k,
        candidates,
        max_text_chars: Some(usize::MAX),
        ..SearchRequest::default()
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
    /// VRAG's `GET /search?queries=a&queries=b`: per query, in order, its best `top_k`
    /// corpus images over every domain, `idx` their rank from 0 and `image_file` the image's
    /// file (VRAG's clients open it: they run beside the service), or its URL on this
    /// service (`base` + path) for an image held in a parquet file.
    pub fn vrag_search(
        &self,
        queries: &[String],
        top_k: Option<i64>,
        base: &str,
    ) -> Result<Vec<Vec<crate::api::VragHit>>, ApiError> {
        let top_k = match top_k {
            None => VRAG_TOP_K.min(self.limits.max_top_k),
            k => self.training_top_k("top_k", k)?,
        };
        self.check_batch("queries", queries.len())?;
        let found = self.search_texts(queries, None, top_k, CandidateKind::Images);
        let mut out = Vec::with_capacity(queries.len());
        for (i, hits) in found.into_iter().enumerate() {
            let hits = hits.map_err(|e| name_query(e, "queries", i))?;
            out.push(
                hits.into_iter()
                    .enumerate()
                    .map(|(idx, h)| {
                        let url = format!("{base}{}", h.image_url.clone().unwrap_or_default());
                        let file = self
                            .image_file(&h.domain, &h.id)
                            .map(|p| p.display().to_string());
                        crate::api::VragHit {
                            idx,
                            image_file: file.unwrap_or_else(|| url.clone()),
                            id: h.id,
                            domain: h.domain,
                            score: h.score,
                            image_url: url,
                        }
                    })
                    .collect(),
            );
        }
        Ok(out)
    }

    /// ASearcher's `POST /access`: the page of each of this service's links, in order; null
    /// for a URL that is not one, or whose page is not here. `base`: the scheme and host of
    /// the pages' image links (empty: paths).
    pub fn access(
        &self,
        req: &crate::api::AccessRequest,
        base: &str,
    ) -> Result<crate::api::AccessResponse, ApiError> {
        self.check_batch("urls", req.urls.len())?;
        let result = req
            .urls
            .iter()
            .map(|url| {
                let (domain, id) = match crate::pages::own_link(url)? {
                    crate::pages::Link::Page { domain, id }
                    | crate::pages::Link::Image { domain, id } => (domain, id),
                };
                let page = self.page(&domain, &id).ok()?;
                let title = page
                    .passage
                    .as_deref()
                    .and_then(|p| self.passage_title(&domain, p));
                let t = Titled::split(&page.id, title.as_deref(), &page.text);
                let mut contents = t.contents();
                for (_, link) in crate::pages::image_links(&page, base) {
                    contents.push('\n');
                    contents.push_str(&link);
                }
                Some(crate::api::AccessPage {
                    url: url.clone(),
                    id: page.id.clone(),
                    title: t.title.to_string(),
                    contents,
                })
            })
            .collect();
        Ok(crate::api::AccessResponse { result })
    }

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
