//! The HTTP service: the JSON API, the Serper-compatible and OpenAI-compatible endpoints,
//! pyserini's REST shape, MCP over streamable HTTP, and the operational parts (limits,
//! timeouts, access logs, health).
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use crate::api::{
    EmbeddingsRequest, EvalRequest, FuseRequest, Health, LocalSearchRequest, SearchRequest,
    SerperLens, SerperNewsResponse, SerperQuery, SerperVideosResponse,
};
use crate::error::{ApiError, ErrorKind};
use crate::pages::{self, Format, Link};
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(self.body())).into_response();
        if self.kind == ErrorKind::RequestTimeout {
            // the rest of the body may never come: the connection cannot be reused
            response.headers_mut().insert(
                header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// A JSON body whose faults are 4xx JSON errors naming the field (`images[0].data`).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        parse_json(&json_bytes(req, state).await?).map(JsonBody)
    }
}

/// A request's body when its content type (if it gives one) is JSON; else a 415.
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        let essence = ct.split(';').next().unwrap_or("").trim();
        if !(essence == "application/json" || essence.ends_with("+json")) {
            return Err(ApiError::new(
                ErrorKind::UnsupportedMediaType,
                format!("content type {essence:?}: send application/json"),
            ));
        }
    }
    Bytes::from_request(req, state).await.map_err(bad_body)
}

/// Bodies declared larger than the limit are still read (and discarded) up to this size before
/// the 413 is sent: a client that writes its whole body before reading the answer then gets
/// the JSON error instead of a reset connection (hyper closes a connection whose body it
/// did not read).
const DRAIN_MAX_BYTES: u64 = 64 << 20;
/// ... and for at most this long.
const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);

/// Requests whose declared body length is over `limit` are answered 413 before any handler
/// runs (every endpoint, uploads and MCP included), their body drained first.
async fn reject_oversized(State(limit): State<usize>, req: Request, next: Next) -> Response {
    match content_length(req.headers()) {
        Some(declared) if declared > limit as u64 => {
            drain(req.into_body(), declared).await;
            too_large().into_response()
        }
        _ => next.run(req).await,
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Reads and drops `body` when its declared length is within [`DRAIN_MAX_BYTES`].
async fn drain(body: Body, declared: u64) {
    use http_body_util::BodyExt;
    if declared > DRAIN_MAX_BYTES {
        return;
    }
    let mut body = body;
    let _ = tokio::time::timeout(DRAIN_MAX_TIME, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
}

fn too_large() -> ApiError {
    ApiError::new(
        ErrorKind::PayloadTooLarge,
        "the request body is larger than the service's limit",
    )
}

/// Requests with a body get it within the body timeout, counted from here (the end of their
/// headers): past it, reading the body fails, whoever reads it (the JSON extractor, an
/// upload, the drain of an oversized body, MCP), and the answer is a 408 that closes the
/// connection.
async fn body_deadline(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let expired = Arc::new(AtomicBool::new(false));
    let timeout = s.body_timeout;
    let flag = expired.clone();
    let req = req.map(|body| Body::new(DeadlineBody::new(body, timeout, flag)));
    let response = next.run(req).await;
    if expired.load(Ordering::Relaxed) {
        return ApiError::new(
            ErrorKind::RequestTimeout,
            format!(
                "the request body did not arrive within {} (the service's body timeout)",
                seconds(timeout)
            ),
        )
        .into_response();
    }
    response
}

/// `d` as seconds for messages (`1.5 s`).
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// A request body that fails once its deadline passes.
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    expired: Arc<AtomicBool>,
}

impl DeadlineBody {
    fn new(inner: Body, timeout: Duration, expired: Arc<AtomicBool>) -> DeadlineBody {
        DeadlineBody {
            inner,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            expired,
        }
    }
}

/// The error of a [`DeadlineBody`] past its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
struct BodyTimedOut(Duration);

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Error answers that are not JSON (MCP's transport answers in plain text) get the
/// service's JSON error body, their text as its message and their status kept.
async fn json_errors(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(response.headers()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text =
        match tokio::time::timeout(Duration::from_secs(1), axum::body::to_bytes(body, 64 << 10))
            .await
        {
            Ok(Ok(b)) => String::from_utf8_lossy(&b).trim().to_string(),
            _ => String::new(),
        };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let error = ApiError::new(ErrorKind::from_status(status.as_u16()), message);
    let mut out = (status, Json(error.body())).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE
            && name != header::CONTENT_LENGTH
            && name != header::TRANSFER_ENCODING
        {
            out.headers_mut().append(name, value.clone());
        }
    }
    out
}

/// The content type is JSON (`application/json`, `application/*+json`).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|ct| {
            let ct = ct.to_ascii_lowercase();
            let essence = ct.split(';').next().unwrap_or("").trim().to_string();
            essence == "application/json" || essence.ends_with("+json")
        })
        .unwrap_or(false)
}

/// A body that could not be read (too large, or cut off), as a JSON error.
fn bad_body(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        ApiError::new(ErrorKind::InvalidRequest, format!("reading the body: {e}"))
    }
}

/// A query string that does not parse, as a JSON 400.
fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::new(
        ErrorKind::InvalidRequest,
        format!("the query string: {}", e.body_text()),
    )
}

/// Parses a JSON body, naming the field at fault.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        ApiError {
            kind: ErrorKind::InvalidRequest,
            field: (path != ".").then_some(path),
            message: e.inner().to_string(),
        }
    })?;
    de.end()
        .map_err(|e| ApiError::new(ErrorKind::InvalidRequest, format!("after the JSON: {e}")))?;
    Ok(value)
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
        .route("/v1/search", post(search))
        .route("/v1/reverse_image_search", post(upload_search))
        .route("/v1/fuse", post(fuse))
        .route("/v1/eval", post(eval))
        .route("/v1/local_text_search", post(local_text))
        .route("/v1/local_text_to_image_search", post(local_text_to_image))
        .route("/v1/local_image_search", post(local_image))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/{domain}/search", get(rest_search))
        .route("/v1/{domain}/doc/{*id}", get(document))
        .route("/v1/{domain}/page/{*id}", get(page))
        .route("/v1/{domain}/image/{*id}", get(image))
        .route("/search", get(search_get).post(serper_search))
        .route("/search.json", get(serpapi_get))
        .route("/images", get(serper_images_get).post(serper_images))
        .route("/lens", get(serper_lens_get).post(serper_lens))
        .route("/videos", get(serper_videos_get).post(serper_videos))
        .route("/news", get(serper_news_get).post(serper_news))
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

async fn indexes(State(s): State<Arc<Shared>>) -> Json<crate::api::IndexInfo> {
    Json(s.service().info())
}

async fn search(
    State(s): State<Arc<Shared>>,
    JsonBody(req): JsonBody<SearchRequest>,
) -> Result<Json<crate::api::SearchResponse>, ApiError> {
    s.run(move |svc| svc.search(&req)).await.map(Json)
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
        candidates: q.candidates.unwrap_or(crate::api::Candidates::Images),
        max_text_chars: q.max_text_chars,
        ..SearchRequest::default()
    };
    s.run(move |svc| svc.search(&req)).await.map(Json)
}

async fn fuse(
    State(s): State<Arc<Shared>>,
    JsonBody(req): JsonBody<FuseRequest>,
) -> Result<Json<crate::api::FuseResponse>, ApiError> {
    s.run(move |svc| svc.fuse(&req)).await.map(Json)
}

async fn eval(
    State(s): State<Arc<Shared>>,
    JsonBody(req): JsonBody<EvalRequest>,
) -> Result<Json<crate::api::EvalResponse>, ApiError> {
    s.run(move |svc| svc.eval(&req)).await.map(Json)
}

async fn local(
    s: Arc<Shared>,
    req: LocalSearchRequest,
    tool: LocalTool,
) -> Result<Json<crate::api::LocalResponse>, ApiError> {
    s.run(move |svc| shapes::local(svc, &req, tool))
        .await
        .map(Json)
}

async fn local_text(
    State(s): State<Arc<Shared>>,
    JsonBody(req): JsonBody<LocalSearchRequest>,
) -> Result<Json<crate::api::LocalResponse>, ApiError> {
    local(s, req, LocalTool::Text).await
}

async fn local_text_to_image(
    State(s): State<Arc<Shared>>,
    JsonBody(req): JsonBody<LocalSearchRequest>,
) -> Result<Json<crate::api::LocalResponse>, ApiError> {
    local(s, req, LocalTool::TextToImage).await
}

async fn local_image(
    State(s): State<Arc<Shared>>,
    JsonBody(req): JsonBody<LocalSearchRequest>,
) -> Result<Json<crate::api::LocalResponse>, ApiError> {
    local(s, req, LocalTool::Image).await
}

async fn models(State(s): State<Arc<Shared>>) -> Json<crate::api::ModelList> {
    Json(s.service().models())
}

async fn embeddings(
    State(s): State<Arc<Shared>>,
    JsonBody(req): JsonBody<EmbeddingsRequest>,
) -> Result<Json<crate::api::EmbeddingsResponse>, ApiError> {
    s.run(move |svc| svc.embed(&req)).await.map(Json)
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

/// A passage as JSON, or as its readable page when the request's `Accept` prefers HTML,
/// Markdown or text.
async fn document(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path((domain, id)) = path.map_err(bad_path)?;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match pages::negotiate(accept, Format::Json) {
        Format::Json => s
            .run(move |svc| svc.document(&domain, &id))
            .await
            .map(|d| Json(d).into_response()),
        format => render_page(&s, &headers, domain, id, format).await,
    }
}

/// `?format=` of a page.
#[derive(Deserialize)]
struct PageQuery {
    format: Option<String>,
}

/// A passage's or image's readable page: HTML, or Markdown, text or JSON as `?format=` or
/// `Accept` asks.
async fn page(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path((domain, id)) = path.map_err(bad_path)?;
    let Query(q) = query.map_err(bad_query)?;
    let format = match q.format.as_deref() {
        Some(f) => Format::parse(f).ok_or_else(|| {
            ApiError::invalid(
                "format",
                format!("{f:?}: give html, markdown, text or json"),
            )
        })?,
        None => pages::negotiate(
            headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
            Format::Html,
        ),
    };
    render_page(&s, &headers, domain, id, format).await
}

async fn render_page(
    s: &Shared,
    headers: &HeaderMap,
    domain: String,
    id: String,
    format: Format,
) -> Result<Response, ApiError> {
    let base = base_url(headers);
    let page = s.run(move |svc| svc.page(&domain, &id)).await?;
    let body = match format {
        Format::Html => pages::html(&page, &base),
        Format::Markdown => pages::markdown(&page, &base),
        Format::Text => pages::text(&page, &base),
        Format::Json => serde_json::json!({
            "domain": page.domain,
            "id": page.id,
            "passage_id": page.passage,
            "text": page.text,
            "image_ids": page.images,
        })
        .to_string(),
    };
    Ok((
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "Accept"),
        ],
        body,
    )
        .into_response())
}

/// The URL a reader request names: the path's rest, its query string appended (a URL's own
/// `?` arrives as the request's), an escaped URL (`http%3A%2F%2F...`) decoded.
fn reader_url(path: &str, query: Option<&str>) -> String {
    let mut url = if path.len() > 7 && path[..7].eq_ignore_ascii_case("http%3A") {
        pages::percent_decode(path)
    } else {
        path.to_string()
    };
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    url
}

/// Jina Reader's `GET /r/{url}` for this service's own links: the page as Markdown in
/// Jina's text form (`Title:`, `URL Source:`, `Markdown Content:`), or Jina's JSON on
/// `Accept: application/json`; `X-Return-Format: html|text|markdown` gives that form alone.
async fn reader(State(s): State<Arc<Shared>>, headers: HeaderMap, req: Request) -> Response {
    let path = req.uri().path();
    let rest = path.strip_prefix("/r/").unwrap_or("");
    let url = reader_url(rest, req.uri().query());
    read_page(s, headers, url).await
}

async fn read_page(s: Arc<Shared>, headers: HeaderMap, url: String) -> Response {
    let result: Result<Response, ApiError> = async {
        let (domain, id) = match pages::own_link(&url) {
            Some(Link::Page { domain, id } | Link::Image { domain, id }) => (domain, id),
            None => {
                return Err(ApiError::invalid(
                    "url",
                    format!(
                        "{url:?} is not a link of this service: it reads only its own pages \
                         (links in its results) and fetches nothing from outside"
                    ),
                ));
            }
        };
        let format = headers
            .get("x-return-format")
            .and_then(|v| v.to_str().ok())
            .map(|f| {
                Format::parse(f).ok_or_else(|| {
                    ApiError::invalid(
                        "X-Return-Format",
                        format!("{f:?}: give markdown, html or text"),
                    )
                })
            })
            .transpose()?;
        if let Some(format) = format {
            return render_page(&s, &headers, domain, id, format).await;
        }
        let base = base_url(&headers);
        let page = s.run(move |svc| svc.page(&domain, &id)).await?;
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        Ok(match pages::negotiate(accept, Format::Text) {
            Format::Json => Json(pages::reader_json(&page, &url, &base)).into_response(),
            _ => (
                [(header::CONTENT_TYPE, Format::Text.content_type())],
                pages::reader_text(&page, &url, &base),
            )
                .into_response(),
        })
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn image(
    State(s): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path((domain, id)) = path.map_err(bad_path)?;
    let (ct, bytes) = s.run(move |svc| svc.image(&domain, &id)).await?;
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, ct)
        .header(header::CACHE_CONTROL, "public, max-age=86400")
        .body(Body::from(Bytes::from_owner(bytes)))
        .expect("a valid response"))
}

/// The base URL links point to: the request's `Host`, else the loopback.
fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// A Serper body: one query, or a JSON array of them (Serper's batch form, answered with an
/// array of answers).
enum Batch<T> {
    One(T),
    Many(Vec<T>),
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Batch<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = json_bytes(req, state).await?;
        // parsed once: as a list when the JSON starts with `[`
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            parse_json::<Vec<T>>(&bytes).map(Batch::Many)
        } else {
            parse_json::<T>(&bytes).map(Batch::One)
        }
    }
}

/// A GET's query string as the JSON object of a Serper body (every value a string).
fn serper_params<T: DeserializeOwned>(query: Option<&str>) -> Result<T, ApiError> {
    let map: serde_json::Map<String, serde_json::Value> = query_pairs(query)
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    parse_json(serde_json::Value::Object(map).to_string().as_bytes())
}

/// Answers each query of a batch with `f` (a failing one fails the batch).
async fn batch<T, R>(
    s: Arc<Shared>,
    headers: &HeaderMap,
    body: Batch<T>,
    f: fn(&crate::service::Service, &T, &str) -> Result<R, ApiError>,
) -> Result<Response, ApiError>
where
    T: Send + 'static,
    R: serde::Serialize + Send + 'static,
{
    let base = base_url(headers);
    match body {
        Batch::One(q) => s
            .run(move |svc| f(svc, &q, &base))
            .await
            .map(|r| Json(r).into_response()),
        Batch::Many(qs) => {
            if qs.len() > 100 {
                return Err(ApiError::invalid(
                    "body",
                    format!("{} queries in one batch: at most 100", qs.len()),
                ));
            }
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
        }
    }
}

async fn serper_search(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Batch<SerperQuery>,
) -> Result<Response, ApiError> {
    batch(s, &headers, body, shapes::serper_search).await
}

/// `GET /search`: SerpAPI's when it names an `engine`, else Serper's (smolagents'
/// `GoogleSearchTool(provider="serper")` sends `?q=&api_key=`).
async fn search_get(State(s): State<Arc<Shared>>, headers: HeaderMap, req: Request) -> Response {
    let query = req.uri().query().map(str::to_string);
    if query_pairs(query.as_deref())
        .iter()
        .any(|(k, _)| k == "engine")
    {
        return serpapi_answer(s, &headers, query).await;
    }
    let result: Result<Response, ApiError> = async {
        let q: SerperQuery = serper_params(query.as_deref())?;
        batch(s, &headers, Batch::One(q), shapes::serper_search).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /search.json`: SerpAPI (`engine` defaults to `google`).
async fn serpapi_get(State(s): State<Arc<Shared>>, headers: HeaderMap, req: Request) -> Response {
    let query = req.uri().query().map(str::to_string);
    serpapi_answer(s, &headers, query).await
}

async fn serpapi_answer(s: Arc<Shared>, headers: &HeaderMap, query: Option<String>) -> Response {
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

async fn serper_images(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Batch<SerperQuery>,
) -> Result<Response, ApiError> {
    batch(s, &headers, body, shapes::serper_images).await
}

async fn serper_images_get(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let q: SerperQuery = serper_params(req.uri().query())?;
    batch(s, &headers, Batch::One(q), shapes::serper_images).await
}

async fn serper_lens(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Batch<SerperLens>,
) -> Result<Response, ApiError> {
    batch(s, &headers, body, shapes::serper_lens).await
}

async fn serper_lens_get(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let q: SerperLens = serper_params(req.uri().query())?;
    batch(s, &headers, Batch::One(q), shapes::serper_lens).await
}

fn videos(
    _: &crate::service::Service,
    q: &SerperQuery,
    _: &str,
) -> Result<SerperVideosResponse, ApiError> {
    Ok(SerperVideosResponse {
        search_parameters: shapes::serper_nothing(q, "videos")?,
        videos: Vec::new(),
    })
}

fn news(
    _: &crate::service::Service,
    q: &SerperQuery,
    _: &str,
) -> Result<SerperNewsResponse, ApiError> {
    Ok(SerperNewsResponse {
        search_parameters: shapes::serper_nothing(q, "news")?,
        news: Vec::new(),
    })
}

async fn serper_videos(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Batch<SerperQuery>,
) -> Result<Response, ApiError> {
    batch(s, &headers, body, videos).await
}

async fn serper_videos_get(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let q: SerperQuery = serper_params(req.uri().query())?;
    batch(s, &headers, Batch::One(q), videos).await
}

async fn serper_news(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Batch<SerperQuery>,
) -> Result<Response, ApiError> {
    batch(s, &headers, body, news).await
}

async fn serper_news_get(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Result<Response, ApiError> {
    let q: SerperQuery = serper_params(req.uri().query())?;
    batch(s, &headers, Batch::One(q), news).await
}
