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

use crate::server::LONGEST;
use crate::shapes::{self, LocalTool};
use sift_service::Service;
use sift_service::api::{Health, SearchRequest};
use sift_service::pages::{self};
use sift_service::{ApiError, ErrorKind};

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
    /// Batch searches worked on at once (`POST /retrieve`, `POST /queries`): beside
    /// `max_concurrency`, and larger, since such a request mostly waits for its queries'
    /// shared encoding batch ([`sift_service::BatchOptions`]) rather than using a CPU.
    pub max_batched_requests: usize,
    /// Requests waiting for a worker at once; one more is refused at once (503 with
    /// `Retry-After`) instead of joining a queue it would time out in.
    pub max_waiting: usize,
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
            max_batched_requests: 256,
            max_waiting: 4096,
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
    /// Heavy work (embeddings, chat completions) takes one of these before a worker
    /// permit: it never holds more than its share of the workers, the rest stay free for
    /// searches.
    heavy: Arc<Semaphore>,
    /// Batch searches' permits ([`HttpOptions::max_batched_requests`]).
    batched: Arc<Semaphore>,
    /// Requests waiting for a permit now, and the most that may.
    waiting: AtomicUsize,
    max_waiting: usize,
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
        let workers = options.max_concurrency.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Shared {
            service: Arc::new(service),
            permits: Arc::new(Semaphore::new(workers)),
            heavy: Arc::new(Semaphore::new(heavy_share(workers))),
            batched: Arc::new(Semaphore::new(
                options
                    .max_batched_requests
                    .clamp(1, Semaphore::MAX_PERMITS),
            )),
            waiting: AtomicUsize::new(0),
            max_waiting: options.max_waiting.max(1),
            timeout: options.timeout.min(LONGEST),
            body_timeout: options.body_timeout.min(LONGEST),
            max_body_bytes: options.max_body_bytes,
            in_flight: AtomicUsize::new(0),
            access_log: options.access_log,
            // as [`check_api_key`] reads it (`sift serve` refuses an empty key there and warns
            // about a trimmed one; here an empty one is no key)
            api_key: options
                .api_key
                .as_deref()
                .and_then(|k| check_api_key(k).ok())
                .map(|(k, _)| k),
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
        self.run_as(Work::Light, f).await
    }

    /// [`Shared::run`] for heavy work (embeddings, chat completions): it waits for one of
    /// the heavy share's permits too (half the workers, at least one), so that heavy
    /// requests never take every worker and searches keep the rest.
    pub async fn run_heavy<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.run_as(Work::Heavy, f).await
    }

    /// [`Shared::run`] for batch searches: on the batch searches' own permits
    /// ([`HttpOptions::max_batched_requests`]) instead of the workers'.
    pub async fn run_batched<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.run_as(Work::Batched, f).await
    }

    async fn run_as<T: Send + 'static>(
        &self,
        work: Work,
        f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let waiting = Waiting::enter(&self.waiting, self.max_waiting)?;
        let r = self.admit(work).await;
        drop(waiting);
        let (deadline, permits) = r?;
        let service = self.service.clone();
        let std_deadline = deadline.into_std();
        let task = tokio::task::spawn_blocking(move || {
            let _permits = permits;
            // endpoints the work calls (a remote reranker) give up at the request's deadline,
            // so a hung one cannot keep this worker, and its permit, past it
            sift_generate::with_deadline(std_deadline, || f(&service))
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

    /// The request's deadline and the permits `work` runs on, once they are free.
    async fn admit(
        &self,
        work: Work,
    ) -> Result<(tokio::time::Instant, Vec<tokio::sync::OwnedSemaphorePermit>), ApiError> {
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(self.timeout).unwrap_or(now + LONGEST);
        let busy = |what: &str| {
            ApiError::new(
                ErrorKind::Overloaded,
                format!("{what} busy for {:?}: try again later", self.timeout),
            )
        };
        let closed = |_| ApiError::new(ErrorKind::Overloaded, "the service is shutting down");
        let mut permits = Vec::with_capacity(2);
        if work == Work::Heavy {
            permits.push(
                tokio::time::timeout_at(deadline, self.heavy.clone().acquire_owned())
                    .await
                    .map_err(|_| {
                        busy("every worker that takes embeddings and chat completions was")
                    })?
                    .map_err(closed)?,
            );
        }
        let (pool, what) = match work {
            Work::Batched => (&self.batched, "every batch search's worker was"),
            _ => (&self.permits, "every worker was"),
        };
        permits.push(
            tokio::time::timeout_at(deadline, pool.clone().acquire_owned())
                .await
                .map_err(|_| busy(what))?
                .map_err(closed)?,
        );
        Ok((deadline, permits))
    }
}

/// What a request's work is, for the permits it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// A search or a read: a worker.
    Light,
    /// Embeddings, chat completions: a worker and one of the heavy share.
    Heavy,
    /// A batch search: one of the batch searches' permits.
    Batched,
}

/// A request counted as waiting for its permits, until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    /// Counts one more waiting request, or refuses it (503) when `max` already wait.
    fn enter(count: &'a AtomicUsize, max: usize) -> Result<Waiting<'a>, ApiError> {
        let before = count.fetch_add(1, Ordering::AcqRel);
        let this = Waiting(count);
        if before >= max {
            return Err(ApiError::new(
                ErrorKind::Overloaded,
                format!("{before} requests are already waiting for a worker: try again later"),
            ));
        }
        Ok(this)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Workers heavy work may hold at once, of `workers`: half, at least one.
fn heavy_share(workers: usize) -> usize {
    (workers / 2).max(1)
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
        .route("/v1/embeddings", heavy_json_post(Service::embed))
        .route("/v1/chat/completions", heavy_json_post(Service::chat))
        .route("/v1/rerank", heavy_json_post(Service::rerank_documents))
        .route("/retrieve", with_base(Service::retrieve, Work::Batched))
        .route("/access", with_base(Service::access, Work::Light))
        .route("/queries", batched_json_post(Service::queries))
        .route("/v1/stats", get(stats))
        .route("/embed", heavy_json_post(Service::tei_embed))
        .route("/rerank", heavy_json_post(Service::tei_rerank))
        .route("/v1/{domain}/search", get(rest_search))
        .route("/v1/{domain}/doc/{*id}", get(document))
        .route("/v1/{domain}/page/{*id}", get(page))
        .route("/v1/{domain}/image/{*id}", get(image))
        .route("/search", get(search_get).post(serper_search))
        .route("/search.json", get(serpapi_get))
        .route("/v7.0/search", get(bing_get))
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
        .layer(middleware::from_fn(security_headers))
        .with_state(shared)
}

/// The policy of the service's HTML pages: no script, style, frame, form or plugin; images
/// from the service itself or `data:` URLs only.
pub const PAGE_CSP: &str = "default-src 'none'; img-src 'self' data:; base-uri 'none'; \
                            form-action 'none'; frame-ancestors 'none'";

/// Every answer says `X-Content-Type-Options: nosniff` (a browser takes the content type
/// it is given: a corpus image or a passage is never run as HTML or script), and every
/// HTML answer carries [`PAGE_CSP`].
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| pages::starts_with_ignore_case(ct.trim_start(), "text/html"));
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    if is_html {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            header::HeaderValue::from_static(PAGE_CSP),
        );
    }
    response
}

/// Unknown paths: a page URL written after the host (`GET /https://...`, Jina Reader's own
/// form, for a harness whose reader host points here) is read as `/r/{url}` is; anything
/// else is a 404.
async fn fallback(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let path = req.uri().path();
    let rest = path.strip_prefix('/').unwrap_or(path);
    if req.method() == axum::http::Method::GET && pages::is_web_url(rest) {
        let url = reader_url(rest, req.uri().query());
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
/// `Ocp-Apim-Subscription-Key`, `Authorization: Bearer`, or `?api_key=`), else 401 (SerpAPI's `{"error"}` on its routes).
async fn check_key(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let Some(key) = &s.api_key else {
        return next.run(req).await;
    };
    if req.uri().path() == "/healthz" {
        return next.run(req).await;
    }
    let headers = req.headers();
    let given = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = given("authorization").and_then(bearer_token);
    let query = query_pairs(req.uri().query());
    let param = query
        .iter()
        .find(|(k, _)| k == "api_key")
        .map(|(_, v)| v.as_str());
    // every way is compared (no early exit), each in constant time
    // Bing's clients send theirs as Ocp-Apim-Subscription-Key
    let ok = [
        given("x-api-key"),
        given("ocp-apim-subscription-key"),
        bearer,
        param,
    ]
    .into_iter()
    .flatten()
    .fold(false, |ok, k| ok | same_key(k.trim(), key));
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

/// The token of an `Authorization: Bearer <token>` header, the scheme in any case
/// (RFC 9110: auth schemes are case-insensitive).
fn bearer_token(value: &str) -> Option<&str> {
    let value = value.trim_start();
    let (scheme, token) = value.split_once([' ', '\t'])?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether `given` equals `key`, in time that depends on `key`'s length only (not on
/// where, or whether, `given` differs): a client cannot find the key byte by byte by
/// timing its answers.
fn same_key(given: &str, key: &str) -> bool {
    let (given, key) = (given.as_bytes(), key.as_bytes());
    let mut diff = given.len() ^ key.len();
    for (i, &k) in key.iter().enumerate() {
        diff |= usize::from(given.get(i).copied().unwrap_or(!k) ^ k);
    }
    std::hint::black_box(diff) == 0
}

/// A configured API key (`--api-key`, `SIFT_API_KEY`) as the service compares it: trimmed,
/// as clients' keys are (`true` when that changed it); an empty or all-whitespace key is an
/// error, not "no key".
pub fn check_api_key(key: &str) -> Result<(String, bool), sift_service::Error> {
    let trimmed = key.trim();
    if trimmed.is_empty() {
        return Err(sift_service::Error::Config(
            "the API key (--api-key or SIFT_API_KEY) is empty: give a key, or set neither to \
             accept requests without one"
                .into(),
        ));
    }
    Ok((trimmed.to_string(), trimmed.len() != key.len()))
}

/// A query string's parameters, decoded (`+` as space), in order.
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

async fn method_not_allowed(req: Request) -> HttpError {
    HttpError(ApiError::new(
        ErrorKind::MethodNotAllowed,
        format!("{} does not take {}", req.uri().path(), req.method()),
    ))
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
    json_post_on(call, Work::Light)
}

/// [`json_post`] for heavy work ([`Shared::run_heavy`]).
fn heavy_json_post<Req, Res>(
    call: fn(&Service, &Req) -> Result<Res, ApiError>,
) -> MethodRouter<Arc<Shared>>
where
    Req: DeserializeOwned + Send + 'static,
    Res: Serialize + Send + 'static,
{
    json_post_on(call, Work::Heavy)
}

/// [`json_post_on`] for calls that also take the base URL their links start with (the
/// request's `Host`).
fn with_base<Req, Res>(
    call: fn(&Service, &Req, &str) -> Result<Res, ApiError>,
    work: Work,
) -> MethodRouter<Arc<Shared>>
where
    Req: DeserializeOwned + Send + 'static,
    Res: Serialize + Send + 'static,
{
    post(
        move |State(s): State<Arc<Shared>>,
              headers: axum::http::HeaderMap,
              JsonBody(req): JsonBody<Req>| async move {
            let base = reading::base_url(&headers);
            s.run_as(work, move |svc| call(svc, &req, &base))
                .await
                .map(Json)
                .map_err(HttpError)
        },
    )
}

/// [`json_post`] for batch searches ([`Shared::run_batched`]).
fn batched_json_post<Req, Res>(
    call: fn(&Service, &Req) -> Result<Res, ApiError>,
) -> MethodRouter<Arc<Shared>>
where
    Req: DeserializeOwned + Send + 'static,
    Res: Serialize + Send + 'static,
{
    json_post_on(call, Work::Batched)
}

fn json_post_on<Req, Res>(
    call: fn(&Service, &Req) -> Result<Res, ApiError>,
    work: Work,
) -> MethodRouter<Arc<Shared>>
where
    Req: DeserializeOwned + Send + 'static,
    Res: Serialize + Send + 'static,
{
    post(
        move |State(s): State<Arc<Shared>>, JsonBody(req): JsonBody<Req>| async move {
            s.run_as(work, move |svc| call(svc, &req))
                .await
                .map(Json)
                .map_err(HttpError)
        },
    )
}

async fn stats(State(s): State<Arc<Shared>>) -> Json<sift_service::api::ServiceStats> {
    Json(s.service().stats())
}

async fn indexes(State(s): State<Arc<Shared>>) -> Json<sift_service::api::IndexInfo> {
    Json(s.service().info())
}

/// An image file as the body (any image content type), the rest in the query string.
async fn upload_search(
    State(s): State<Arc<Shared>>,
    query: Result<Query<sift_service::api::UploadQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<sift_service::api::SearchResponse>, HttpError> {
    let Query(q) = query.map_err(bad_query)?;
    let body = body.map_err(bad_body)?;
    if body.is_empty() {
        return Err(ApiError::invalid("body", "send the image file as the request body").into());
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
        images: vec![sift_service::api::ImageInput {
            bytes: Some(body.to_vec()),
            bbox,
            ..Default::default()
        }],
        retriever: q.retriever,
        domain: q.domain,
        top_k: q.top_k.unwrap_or(sift_service::api::DEFAULT_TOP_K),
        candidates: q
            .candidates
            .unwrap_or(sift_service::api::CandidateKind::Images),
        max_text_chars: q.max_text_chars,
        ..SearchRequest::default()
    };
    s.run(move |svc| svc.search(&req))
        .await
        .map(Json)
        .map_err(HttpError)
}

async fn models(State(s): State<Arc<Shared>>) -> Json<sift_service::api::ModelList> {
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
) -> Result<Json<sift_service::api::SearchResponse>, HttpError> {
    let Path(domain) = domain.map_err(bad_path)?;
    let Query(q) = query.map_err(bad_query)?;
    let hits = match q.hits.as_deref() {
        None => sift_service::api::DEFAULT_TOP_K,
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
    s.run(move |svc| svc.search(&req))
        .await
        .map(Json)
        .map_err(HttpError)
}

mod body;
mod reading;
mod serper;

use body::*;
pub use body::{ApiErrorResponse, HttpError, JsonBody};

use reading::*;
use serper::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_compare_whole_and_bearer_in_any_case() {
        assert!(same_key("k3y", "k3y"));
        assert!(!same_key("k3", "k3y") && !same_key("k3yy", "k3y") && !same_key("", "k3y"));
        assert!(!same_key("k3x", "k3y"));
        // a byte of !k where the given key is short must not match a key of that byte
        assert!(!same_key("a", "a\u{0}"));
        for v in [
            "Bearer k",
            "bearer k",
            "BEARER k",
            "bEaReR   k ",
            " Bearer\tk",
        ] {
            assert_eq!(bearer_token(v), Some("k"), "{v:?}");
        }
        assert_eq!(bearer_token("Basic k"), None);
        assert_eq!(bearer_token("Bearerk"), None);
        assert_eq!(check_api_key(" k ").unwrap(), ("k".to_string(), true));
        assert_eq!(check_api_key("k").unwrap(), ("k".to_string(), false));
        for empty in ["", "  ", "\t\n"] {
            let e = check_api_key(empty).unwrap_err().to_string();
            assert!(e.contains("--api-key") && e.contains("SIFT_API_KEY"), "{e}");
        }
    }
}
