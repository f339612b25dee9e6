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
    SerperLens, SerperQuery,
};
use crate::error::{ApiError, ErrorKind};
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
        let bytes = Bytes::from_request(req, state).await.map_err(bad_body)?;
        parse_json(&bytes).map(JsonBody)
    }
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
        .route("/v1/{domain}/image/{*id}", get(image))
        .route("/search", post(serper_search))
        .route("/images", post(serper_images))
        .route("/lens", post(serper_lens));
    if let Some(mcp) = mcp {
        app = app.merge(mcp);
    }
    app.fallback(not_found)
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
        .layer(middleware::from_fn_with_state(shared.clone(), access_log))
        .with_state(shared)
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("no endpoint {} (see /openapi.json)", req.uri().path()),
    )
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

async fn document(
    State(s): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<crate::api::Document>, ApiError> {
    let Path((domain, id)) = path.map_err(bad_path)?;
    s.run(move |svc| svc.document(&domain, &id)).await.map(Json)
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

async fn serper_search(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<SerperQuery>,
) -> Result<Json<crate::api::SerperSearchResponse>, ApiError> {
    let base = base_url(&headers);
    s.run(move |svc| shapes::serper_search(svc, &req, &base))
        .await
        .map(Json)
}

async fn serper_images(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<SerperQuery>,
) -> Result<Json<crate::api::SerperImagesResponse>, ApiError> {
    let base = base_url(&headers);
    s.run(move |svc| shapes::serper_images(svc, &req, &base))
        .await
        .map(Json)
}

async fn serper_lens(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<SerperLens>,
) -> Result<Json<crate::api::SerperLensResponse>, ApiError> {
    let base = base_url(&headers);
    s.run(move |svc| shapes::serper_lens(svc, &req, &base))
        .await
        .map(Json)
}
