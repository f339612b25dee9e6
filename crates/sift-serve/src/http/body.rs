//! Request bodies and their faults: JSON with the field at fault named, size limits
//! answered before reading, the body deadline, JSON error answers.
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use sift_service::api::parse_json;

use sift_service::{ApiError, ErrorKind};

use super::*;

/// An [`ApiError`] as an HTTP answer: its status and JSON body (a 500 names an error id,
/// not the internal message). Handlers return it; `?` turns an `ApiError` into one.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> HttpError {
        HttpError(e)
    }
}

/// `.into_response()` on an [`ApiError`] itself, where a handler answers one directly.
pub trait ApiErrorResponse {
    /// The error as an HTTP answer ([`HttpError`]).
    fn into_response(self) -> Response;
}

impl ApiErrorResponse for ApiError {
    fn into_response(self) -> Response {
        IntoResponse::into_response(HttpError(self))
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let this = self.0.for_client();
        let status =
            StatusCode::from_u16(this.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(this.body())).into_response();
        if this.kind == ErrorKind::Overloaded {
            // clients that retry (verl: 10 times on a 5xx) come back after a second
            response.headers_mut().insert(
                header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if this.kind == ErrorKind::RequestTimeout {
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
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, HttpError> {
        parse_json(&json_bytes(req, state).await?)
            .map(JsonBody)
            .map_err(HttpError)
    }
}

/// A request's body when its content type (if it gives one) is JSON; else a 415.
pub(super) async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
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
pub(super) const DRAIN_MAX_BYTES: u64 = 64 << 20;
/// ... and for at most this long.
pub(super) const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);

/// Requests whose declared body length is over `limit` are answered 413 before any handler
/// runs (every endpoint, uploads and MCP included), their body drained first.
pub(super) async fn reject_oversized(
    State(limit): State<usize>,
    req: Request,
    next: Next,
) -> Response {
    match content_length(req.headers()) {
        Some(declared) if declared > limit as u64 => {
            drain(req.into_body(), declared).await;
            too_large().into_response()
        }
        _ => next.run(req).await,
    }
}

pub(super) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Reads and drops `body` when its declared length is within [`DRAIN_MAX_BYTES`].
pub(super) async fn drain(body: Body, declared: u64) {
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

pub(super) fn too_large() -> ApiError {
    ApiError::new(
        ErrorKind::PayloadTooLarge,
        "the request body is larger than the service's limit",
    )
}

/// Requests with a body get it within the body timeout, counted from here (the end of their
/// headers): past it, reading the body fails, whoever reads it (the JSON extractor, an
/// upload, the drain of an oversized body, MCP), and the answer is a 408 that closes the
/// connection.
pub(super) async fn body_deadline(
    State(s): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
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
pub(super) fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// A request body that fails once its deadline passes.
pub(super) struct DeadlineBody {
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
pub(super) struct BodyTimedOut(Duration);

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
pub(super) async fn json_errors(req: Request, next: Next) -> Response {
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
    let error = ApiError::new(ErrorKind::from_status(status.as_u16()), message).for_client();
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
pub(super) fn is_json(headers: &HeaderMap) -> bool {
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
pub(super) fn bad_body(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        ApiError::new(ErrorKind::InvalidRequest, format!("reading the body: {e}"))
    }
}

/// A query string that does not parse, as a JSON 400.
pub(super) fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::new(
        ErrorKind::InvalidRequest,
        format!("the query string: {}", e.body_text()),
    )
}
