//! Serper's API (POST and GET, batches, paging) and SerpAPI's engines on `GET /search`.
use std::sync::Arc;

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::shapes::{self};
use sift_service::ApiError;
use sift_service::api::{AtMost, parse_json, parse_json_seed};
use sift_service::api::{SerperNewsResponse, SerperQuery, SerperVideosResponse};

use super::*;

/// A Serper body: one query, or a JSON array of them (Serper's batch form, answered with an
/// array of answers).
pub(super) enum Batch<T> {
    One(T),
    Many(Vec<T>),
}

/// Queries in one Serper batch.
pub(super) const MAX_BATCH: usize = 100;

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Batch<T> {
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, HttpError> {
        let bytes = json_bytes(req, state).await?;
        // parsed once: as a list when the JSON starts with `[`
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            parse_batch(&bytes, MAX_BATCH)
                .map(Batch::Many)
                .map_err(HttpError)
        } else {
            parse_json::<T>(&bytes).map(Batch::One).map_err(HttpError)
        }
    }
}

/// Parses a JSON array of at most `max` queries ([`AtMost`]): past it the parse stops at
/// the next element (nothing more of the body is turned into values) and the answer is a
/// 400 naming the limit.
pub(super) fn parse_batch<T: DeserializeOwned>(
    bytes: &[u8],
    max: usize,
) -> Result<Vec<T>, ApiError> {
    let over = std::cell::Cell::new(false);
    parse_json_seed(bytes, AtMost::new(max, "queries").flagging(&over)).map_err(|e| {
        if over.get() {
            ApiError::invalid(
                "body",
                format!("more than {max} queries in one batch: at most {max}"),
            )
        } else {
            e
        }
    })
}

/// A GET's query string as the JSON object of a Serper body (every value a string).
pub(super) fn serper_params<T: DeserializeOwned>(query: Option<&str>) -> Result<T, ApiError> {
    let map: serde_json::Map<String, serde_json::Value> = query_pairs(query)
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    parse_json(serde_json::Value::Object(map).to_string().as_bytes())
}

/// Answers each query of a batch with `f` (a failing one fails the batch).
pub(super) async fn batch<T, R>(
    s: Arc<Shared>,
    headers: &HeaderMap,
    body: Batch<T>,
    f: fn(&sift_service::Service, &T, &str) -> Result<R, ApiError>,
) -> Result<Response, HttpError>
where
    T: Send + 'static,
    R: serde::Serialize + Send + 'static,
{
    let base = base_url(headers);
    match body {
        Batch::One(q) => s
            .run(move |svc| f(svc, &q, &base))
            .await
            .map(|r| Json(r).into_response())
            .map_err(HttpError),
        Batch::Many(qs) => {
            // (at most MAX_BATCH: parse_batch stops at the next)
            s.run(move |svc| {
                qs.iter()
                    .enumerate()
                    .map(|(i, q)| {
                        f(svc, q, &base).map_err(|mut e| {
                            e.field = Some(match e.field {
                                Some(f) => format!("[{i}].{f}"),
                                None => format!("[{i}]"),
                            });
                            e
                        })
                    })
                    .collect::<Result<Vec<R>, ApiError>>()
            })
            .await
            .map(|r| Json(r).into_response())
            .map_err(HttpError)
        }
    }
}

/// A Serper endpoint: POST of a query (or a batch of them) as JSON, and GET of one in the
/// query string, each answered by `answer`.
pub(super) fn endpoint<Q, R>(
    answer: fn(&sift_service::Service, &Q, &str) -> Result<R, ApiError>,
) -> MethodRouter<Arc<Shared>>
where
    Q: DeserializeOwned + Send + 'static,
    R: serde::Serialize + Send + 'static,
{
    get(
        move |State(s): State<Arc<Shared>>, headers: HeaderMap, req: Request| async move {
            let q: Q = serper_params(req.uri().query())?;
            batch(s, &headers, Batch::One(q), answer).await
        },
    )
    .post(
        move |State(s): State<Arc<Shared>>, headers: HeaderMap, body: Batch<Q>| async move {
            batch(s, &headers, body, answer).await
        },
    )
}

pub(super) async fn serper_search(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Batch<SerperQuery>,
) -> Result<Response, HttpError> {
    batch(s, &headers, body, shapes::serper_search).await
}

/// `GET /search`: SerpAPI's when it names an `engine`, else Serper's (smolagents'
/// `GoogleSearchTool(provider="serper")` sends `?q=&api_key=`).
pub(super) async fn search_get(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let query = req.uri().query().map(str::to_string);
    let pairs = query_pairs(query.as_deref());
    if pairs.iter().any(|(k, _)| k == "engine") {
        return serpapi_answer(s, &headers, query).await;
    }
    if pairs.iter().any(|(k, _)| k == "queries") {
        return vrag_answer(s, &headers, pairs).await;
    }
    let result: Result<Response, HttpError> = async {
        let q: SerperQuery = serper_params(query.as_deref())?;
        batch(s, &headers, Batch::One(q), shapes::serper_search).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// VRAG's `GET /search?queries=a&queries=b[&top_k=10]`: page images per query.
async fn vrag_answer(
    s: Arc<Shared>,
    headers: &HeaderMap,
    pairs: Vec<(String, String)>,
) -> Response {
    let base = base_url(headers);
    let result: Result<Response, HttpError> = async {
        let mut queries = Vec::new();
        let mut top_k = None;
        for (k, v) in pairs {
            match k.as_str() {
                "queries" => queries.push(v),
                "top_k" | "topk" => {
                    top_k = Some(v.parse::<i64>().map_err(|_| {
                        ApiError::invalid(k.clone(), format!("{v:?}: give a whole number"))
                    })?);
                }
                _ => {}
            }
        }
        s.run_batched(move |svc| svc.vrag_search(&queries, top_k, &base))
            .await
            .map(|r| Json(r).into_response())
            .map_err(HttpError)
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Bing Web Search v7's `GET /v7.0/search?q=&count=&offset=` (its key in
/// `Ocp-Apim-Subscription-Key`, checked as any key is).
pub(super) async fn bing_get(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let base = base_url(&headers);
    let query = req.uri().query().unwrap_or("").to_string();
    let result: Result<Response, HttpError> = async {
        let q: sift_service::api::BingQuery = serde_urlencoded_params(&query)?;
        s.run(move |svc| shapes::bing_search(svc, &q, &base, &query))
            .await
            .map(|r| Json(r).into_response())
            .map_err(HttpError)
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A query string as `T`: a 400 naming what is missing or wrong.
fn serde_urlencoded_params<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs: serde_json::Map<String, serde_json::Value> = query_pairs(Some(query))
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    serde_json::from_value(serde_json::Value::Object(pairs))
        .map_err(|e| ApiError::invalid("q", format!("the query string: {e}")))
}

/// `GET /search.json`: SerpAPI (`engine` defaults to `google`).
pub(super) async fn serpapi_get(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let query = req.uri().query().map(str::to_string);
    serpapi_answer(s, &headers, query).await
}

pub(super) async fn serpapi_answer(
    s: Arc<Shared>,
    headers: &HeaderMap,
    query: Option<String>,
) -> Response {
    let base = base_url(headers);
    let params: std::collections::BTreeMap<String, String> =
        query_pairs(query.as_deref()).into_iter().collect();
    let raw = query.unwrap_or_default();
    let result = s
        .run(move |svc| Ok(shapes::serpapi(svc, &params, &base, &raw)))
        .await
        .unwrap_or_else(|e| Err(e.into()));
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => (
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST),
            Json(serde_json::json!({ "error": e.message })),
        )
            .into_response(),
    }
}

pub(super) fn videos(
    _: &sift_service::Service,
    q: &SerperQuery,
    _: &str,
) -> Result<SerperVideosResponse, ApiError> {
    Ok(SerperVideosResponse {
        search_parameters: shapes::serper_nothing(q, "videos")?,
        videos: Vec::new(),
    })
}

pub(super) fn news(
    _: &sift_service::Service,
    q: &SerperQuery,
    _: &str,
) -> Result<SerperNewsResponse, ApiError> {
    Ok(SerperNewsResponse {
        search_parameters: shapes::serper_nothing(q, "news")?,
        news: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch past the limit is refused at its first element over it: the rest of the body
    /// is never parsed (here it is not even JSON), so no memory is spent on it.
    #[test]
    fn batches_stop_at_the_element_past_the_limit() {
        let ok: Vec<SerperQuery> =
            parse_batch(br#"[{"q": "a"}, {"q": "b", "num": "3"}]"#, MAX_BATCH).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].num, 3);
        let mut body = b"[".to_vec();
        for _ in 0..=MAX_BATCH {
            body.extend_from_slice(br#"{"q": "x"},"#);
        }
        body.extend_from_slice(b"this is never read");
        let e = parse_batch::<SerperQuery>(&body, MAX_BATCH).unwrap_err();
        assert_eq!(e.kind, sift_service::ErrorKind::InvalidRequest);
        assert_eq!(e.field.as_deref(), Some("body"));
        assert!(e.message.contains("at most 100"), "{e}");
        // exactly the limit is a batch; a bad element is named by its index
        let mut body = b"[".to_vec();
        for i in 0..MAX_BATCH {
            body.extend_from_slice(if i == 0 { b"" } else { b"," });
            body.extend_from_slice(br#"{"q": "x"}"#);
        }
        body.push(b']');
        assert_eq!(
            parse_batch::<SerperQuery>(&body, MAX_BATCH).unwrap().len(),
            MAX_BATCH
        );
        let e = parse_batch::<SerperQuery>(br#"[{"q": "x"}, {"num": 2}]"#, MAX_BATCH).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("[1]"), "{e}");
    }
}
