//! The HTTP service: the JSON API, the Serper-compatible and OpenAI-compatible endpoints,
//! pyserini's REST shape, MCP over streamable HTTP, and the operational parts (limits,
//! timeouts, access logs, health).
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::api::{Health, SearchRequest};
use crate::error::{ApiError, ErrorKind};
use crate::pages::{self};
use crate::server::LONGEST;
use crate::service::Service;
use crate::shapes::{self, LocalTool};

/// How requests are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccessLog {
    /// Not at all.
    Off,
    /// One text line per request on standard error.
    #[default]
    Text,
    /// One JSON object per line on standard error.
    Json,
}

/// Operational settings.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Requests worked on at once (each on a blocking thread); the rest wait.
    pub max_concurrency: usize,
    /// Time limit of a request, waiting included.
    pub timeout: Duration,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Access logs.
    pub access_log: AccessLog,
    /// Serve MCP over streamable HTTP at `/mcp`.
    pub mcp: bool,
    /// Time a client has to send a request's headers, counted from when the connection is
    /// ready for them: accepted, or its previous answer written (so a kept-alive connection
    /// left idle this long is closed too).
    pub header_timeout: Duration,
    /// Time a client has to send a request's body, counted from the end of its headers
    /// (408 after it, and the connection is closed).
    pub body_timeout: Duration,
    /// After the shutdown signal: how long requests in flight have to finish before the
    /// connections still open are closed.
    pub shutdown_grace: Duration,
    /// MCP sessions over HTTP open at once; a new one past it is refused (503) until one is
    /// closed or expires (after 5 minutes idle).
    pub max_mcp_sessions: usize,
    /// An API key every request but `/healthz` must carry (`X-API-KEY`, `Authorization:
    /// Bearer`, or the `api_key` query parameter); `None`: keys are accepted and ignored.
    pub api_key: Option<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_concurrency: std::thread::available_parallelism().map_or(4, |n| n.get()),
            timeout: Duration::from_secs(60),
            max_body_bytes: 32 << 20,
            access_log: AccessLog::Text,
            mcp: true,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
            max_mcp_sessions: 256,
            api_key: None,
        }
    }
}

/// The service with its worker permits, shared by every handler.
pub struct Shared {
    service: Arc<Service>,
    permits: Arc<Semaphore>,
    timeout: Duration,
    body_timeout: Duration,
    max_body_bytes: usize,
    in_flight: AtomicUsize,
    access_log: AccessLog,
    api_key: Option<String>,
}

impl Shared {
    /// Wraps `service` with `options`' concurrency limit and time limits (a concurrency
    /// above [`Semaphore::MAX_PERMITS`] is cut to it; durations above a year to a year).
    pub fn new(service: Service, options: &HttpOptions) -> Arc<Shared> {
        Arc::new(Shared {
            service: Arc::new(service),
            permits: Arc::new(Semaphore::new(
                options.max_concurrency.clamp(1, Semaphore::MAX_PERMITS),
            )),
            timeout: options.timeout.min(LONGEST),
            body_timeout: options.body_timeout.min(LONGEST),
            max_body_bytes: options.max_body_bytes,
            in_flight: AtomicUsize::new(0),
            access_log: options.access_log,
            api_key: options.api_key.clone().filter(|k| !k.is_empty()),
        })
    }

    /// The service.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The largest request body, bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// Runs `f` on a blocking thread once a worker permit is free, within the time limit:
    /// 503 when no permit frees in time, 504 when the work runs past it (the work then
    /// finishes in the background, holding its permit, so overload stays bounded).
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(self.timeout).unwrap_or(now + LONGEST);
        let permit = tokio::time::timeout_at(deadline, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| {
                ApiError::new(
                    ErrorKind::Overloaded,
                    format!(
                        "every worker was busy for {:?}: try again later",
                        self.timeout
                    ),
                )
            })?
            .map_err(|_| ApiError::new(ErrorKind::Overloaded, "the service is shutting down"))?;
        let service = self.service.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f(&service)
        });
        match tokio::time::timeout_at(deadline, task).await {
            Err(_) => Err(ApiError::new(
                ErrorKind::Timeout,
                format!("the request ran past the {:?} limit", self.timeout),
            )),
            Ok(Err(e)) => Err(ApiError::new(
                ErrorKind::Internal,
                format!("the request failed inside the service: {e}"),
            )),
            Ok(Ok(r)) => r,
        }
    }
}

/// The router of every endpoint; `mcp`: the MCP service to mount at `/mcp`.
pub fn router(
    shared: Arc<Shared>,
    max_body_bytes: usize,
    mcp: Option<Router<Arc<Shared>>>,
) -> Router {
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .route("/v1/indexes", get(indexes))
        .route("/v1/search", json_post(Service::search))
        .route("/v1/reverse_image_search", post(upload_search))
        .route("/v1/fuse", json_post(Service::fuse))
        .route("/v1/eval", json_post(Service::eval))
        .route(
            "/v1/local_text_search",
            json_post(|svc, r| shapes::local(svc, r, LocalTool::Text)),
        )
        .route(
            "/v1/local_text_to_image_search",
            json_post(|svc, r| shapes::local(svc, r, LocalTool::TextToImage)),
        )
        .route(
            "/v1/local_image_search",
            json_post(|svc, r| shapes::local(svc, r, LocalTool::Image)),
        )
        .route("/v1/models", get(models))
        .route("/v1/embeddings", json_post(Service::embed))
        .route("/v1/chat/completions", json_post(Service::chat))
        .route("/v1/{domain}/search", get(rest_search))
        .route("/v1/{domain}/doc/{*id}", get(document))
        .route("/v1/{domain}/page/{*id}", get(page))
        .route("/v1/{domain}/image/{*id}", get(image))
        .route("/search", get(search_get).post(serper_search))
        .route("/search.json", get(serpapi_get))
        .route("/images", serper::endpoint(shapes::serper_images))
        .route("/lens", serper::endpoint(shapes::serper_lens))
        .route("/videos", serper::endpoint(serper::videos))
        .route("/news", serper::endpoint(serper::news))
        .route("/r/{*url}", get(reader));
    if let Some(mcp) = mcp {
        app = app.merge(mcp);
    }
    app.fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(
            max_body_bytes,
            reject_oversized,
        ))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            body_deadline,
        ))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn_with_state(shared.clone(), check_key))
        .layer(middleware::from_fn_with_state(shared.clone(), access_log))
        .with_state(shared)
}

/// Unknown paths: a page URL written after the host (`GET /https://...`, Jina Reader's own
/// form, for a harness whose reader host points here) is read as `/r/{url}` is; anything
/// else is a 404.
async fn fallback(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let path = req.uri().path();
    if req.method() == axum::http::Method::GET && pages::is_web_url(&path[1..]) {
        let url = reader_url(&path[1..], req.uri().query());
        let headers = req.headers().clone();
        return read_page(s, headers, url).await;
    }
    ApiError::new(
        ErrorKind::NotFound,
        format!("no endpoint {path} (see /openapi.json)"),
    )
    .into_response()
}

/// With `--api-key`: every request but `/healthz` carries the key (`X-API-KEY`,
/// `Authorization: Bearer`, or `?api_key=`), else 401 (SerpAPI's `{"error"}` on its routes).
async fn check_key(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let Some(key) = &s.api_key else {
        return next.run(req).await;
    };
    if req.uri().path() == "/healthz" {
        return next.run(req).await;
    }
    let headers = req.headers();
    let given = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = given("authorization").and_then(|v| {
        v.strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
    });
    let query = query_pairs(req.uri().query());
    let param = query
        .iter()
        .find(|(k, _)| k == "api_key")
        .map(|(_, v)| v.as_str());
    let ok = [given("x-api-key"), bearer, param]
        .into_iter()
        .flatten()
        .any(|k| k.trim() == key);
    if ok {
        return next.run(req).await;
    }
    let serpapi = req.uri().path() == "/search.json"
        || (req.uri().path() == "/search" && query.iter().any(|(k, _)| k == "engine"));
    if serpapi {
        return (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({
                "error": "Invalid API key. Give this service's key (sift serve --api-key) as api_key."
            })),
        )
            .into_response();
    }
    ApiError::new(
        ErrorKind::Unauthorized,
        "this service wants an API key: send it as X-API-KEY, Authorization: Bearer, or api_key",
    )
    .into_response()
}

/// A query string's parameters, decoded (`+` as space), in order.
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        ErrorKind::MethodNotAllowed,
        format!("{} does not take {}", req.uri().path(), req.method()),
    )
}

/// Counts requests in flight and writes one access-log line per request.
async fn access_log(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    s.in_flight.fetch_add(1, Ordering::Relaxed);
    let response = next.run(req).await;
    s.in_flight.fetch_sub(1, Ordering::Relaxed);
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let status = response.status().as_u16();
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    match s.access_log {
        AccessLog::Off => {}
        AccessLog::Text => eprintln!("{ts:.3} {method} {path} {status} {ms:.1}ms"),
        AccessLog::Json => eprintln!(
            "{}",
            serde_json::json!({
                "ts": ts, "method": method.as_str(), "path": path, "status": status,
                "ms": (ms * 1000.0).round() / 1000.0,
            })
        ),
    }
    response
}

async fn healthz(State(s): State<Arc<Shared>>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        in_flight: s.in_flight.load(Ordering::Relaxed),
    })
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document().to_string(),
    )
        .into_response()
}

/// A POST whose JSON body `call` answers on the service's workers ([`Shared::run`]).
fn json_post<Req, Res>(
    call: fn(&Service, &Req) -> Result<Res, ApiError>,
) -> MethodRouter<Arc<Shared>>
where
    Req: DeserializeOwned + Send + 'static,
    Res: Serialize + Send + 'static,
{
    post(
        move |State(s): State<Arc<Shared>>, JsonBody(req): JsonBody<Req>| async move {
            s.run(move |svc| call(svc, &req)).await.map(Json)
        },
    )
}

async fn indexes(State(s): State<Arc<Shared>>) -> Json<crate::api::IndexInfo> {
    Json(s.service().info())
}

/// An image file as the body (any image content type), the rest in the query string.
async fn upload_search(
    State(s): State<Arc<Shared>>,
    query: Result<Query<crate::api::UploadQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<crate::api::SearchResponse>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let body = body.map_err(bad_body)?;
    if body.is_empty() {
        return Err(ApiError::invalid(
            "body",
            "send the image file as the request body",
        ));
    }
    let bbox = match q.bbox.as_deref() {
        None => None,
        Some(b) => {
            let v: Vec<u32> = b
                .split(',')
                .map(|x| x.trim().parse().ok())
                .collect::<Option<_>>()
                .ok_or_else(|| ApiError::invalid("bbox", format!("{b:?}: give x1,y1,x2,y2")))?;
            let arr: [u32; 4] = v
                .try_into()
                .map_err(|_| ApiError::invalid("bbox", format!("{b:?}: give four numbers")))?;
            Some(arr)
        }
    };
    let req = SearchRequest {
        query: q.query.unwrap_or_default(),
        images: vec![crate::api::ImageInput {
            bytes: Some(body.to_vec()),
            bbox,
            ..Default::default()
        }],
        retriever: q.retriever,
        domain: q.domain,
        top_k: q.top_k.unwrap_or(crate::api::DEFAULT_TOP_K),
        candidates: q.candidates.unwrap_or(crate::api::CandidateKind::Images),
        max_text_chars: q.max_text_chars,
        ..SearchRequest::default()
    };
    s.run(move |svc| svc.search(&req)).await.map(Json)
}

async fn models(State(s): State<Arc<Shared>>) -> Json<crate::api::ModelList> {
    Json(s.service().models())
}

/// pyserini's REST query: `?query=&hits=`.
#[derive(Deserialize)]
struct RestQuery {
    query: Option<String>,
    hits: Option<String>,
    retriever: Option<String>,
}

/// A path whose segments do not parse, as a JSON 400.
fn bad_path(e: PathRejection) -> ApiError {
    ApiError::new(
        ErrorKind::InvalidRequest,
        format!("the path: {}", e.body_text()),
    )
}

async fn rest_search(
    State(s): State<Arc<Shared>>,
    domain: Result<Path<String>, PathRejection>,
    query: Result<Query<RestQuery>, QueryRejection>,
) -> Result<Json<crate::api::SearchResponse>, ApiError> {
    let Path(domain) = domain.map_err(bad_path)?;
    let Query(q) = query.map_err(bad_query)?;
    let hits = match q.hits.as_deref() {
        None => crate::api::DEFAULT_TOP_K,
        Some(h) => h
            .parse()
            .map_err(|_| ApiError::invalid("hits", format!("{h:?} is not a whole number")))?,
    };
    let req = SearchRequest {
        query: q
            .query
            .ok_or_else(|| ApiError::invalid("query", "missing: give ?query="))?,
        domain: Some(domain),
        top_k: hits,
        retriever: q.retriever,
        ..SearchRequest::default()
    };
    s.run(move |svc| svc.search(&req)).await.map(Json)
}

mod body;
mod reading;
mod serper;

use body::*;
pub use body::{JsonBody, parse_json};
use reading::*;
use serper::*;
