//! Errors: [`Error`] for starting the service, [`ApiError`] for answering a request.
use std::path::PathBuf;

use crate::api::{ErrorBody, ErrorDetail};

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The index.
    #[error(transparent)]
    Index(#[from] sift_index::Error),
    /// Retrieval (retriever specs, models, domains); boxed, it is large.
    #[error(transparent)]
    Retrieve(Box<sift_retrieve::Error>),
    /// The corpus.
    #[error(transparent)]
    Corpus(#[from] sift_core::Error),
    /// A retriever spec.
    #[error(transparent)]
    Spec(#[from] sift_retrieve::SpecError),
    /// A setting that cannot be served.
    #[error("{0}")]
    Config(String),
    /// The corpus does not hold what the index was built from.
    #[error("{path}: {message}")]
    CorpusMismatch {
        /// The corpus directory.
        path: PathBuf,
        /// What does not match.
        message: String,
    },
}

impl From<sift_retrieve::Error> for Error {
    fn from(e: sift_retrieve::Error) -> Error {
        Error::Retrieve(Box::new(e))
    }
}

/// What kind of failure an [`ApiError`] is; its HTTP status follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request is wrong.
    InvalidRequest,
    /// 401: the service wants an API key (`--api-key`) and the request has none, or
    /// another.
    Unauthorized,
    /// 403: refused (MCP over HTTP: a `Host` or `Origin` it does not serve).
    Forbidden,
    /// 404: no such route, domain, passage or image.
    NotFound,
    /// 405: the route takes another method.
    MethodNotAllowed,
    /// 406: the client does not accept what the endpoint answers (MCP over HTTP).
    NotAcceptable,
    /// 408: the request's body did not arrive within the body timeout.
    RequestTimeout,
    /// 413: the body or an image is too large.
    PayloadTooLarge,
    /// 414: the request's URI is too long.
    UriTooLong,
    /// 415: the body is not JSON.
    UnsupportedMediaType,
    /// 431: the request's headers are too large.
    HeadersTooLarge,
    /// 503: every worker is busy and the queue is full, or the service is at its MCP
    /// session limit.
    Overloaded,
    /// 504: the request ran past the service's time limit.
    Timeout,
    /// 500: a fault of the service.
    Internal,
}

impl ErrorKind {
    /// The HTTP status code.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::NotAcceptable => 406,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::UriTooLong => 414,
            ErrorKind::UnsupportedMediaType => 415,
            ErrorKind::HeadersTooLarge => 431,
            ErrorKind::Overloaded => 503,
            ErrorKind::Timeout => 504,
            ErrorKind::Internal => 500,
        }
    }

    /// The `type` of the JSON error.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::NotAcceptable => "not_acceptable",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::UriTooLong => "uri_too_long",
            ErrorKind::UnsupportedMediaType => "unsupported_media_type",
            ErrorKind::HeadersTooLarge => "headers_too_large",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind of an HTTP error status; statuses without a kind of their own get their
    /// class's (4xx: [`ErrorKind::InvalidRequest`], 5xx: [`ErrorKind::Internal`]).
    pub fn from_status(status: u16) -> ErrorKind {
        const ALL: [ErrorKind; 14] = [
            ErrorKind::InvalidRequest,
            ErrorKind::Unauthorized,
            ErrorKind::Forbidden,
            ErrorKind::NotFound,
            ErrorKind::MethodNotAllowed,
            ErrorKind::NotAcceptable,
            ErrorKind::RequestTimeout,
            ErrorKind::PayloadTooLarge,
            ErrorKind::UriTooLong,
            ErrorKind::UnsupportedMediaType,
            ErrorKind::HeadersTooLarge,
            ErrorKind::Overloaded,
            ErrorKind::Timeout,
            ErrorKind::Internal,
        ];
        ALL.into_iter()
            .find(|k| k.status() == status)
            .unwrap_or(if status < 500 {
                ErrorKind::InvalidRequest
            } else {
                ErrorKind::Internal
            })
    }
}

/// A request that cannot be answered: a kind (the status), the field at fault and a message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}{message}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct ApiError {
    /// Kind (HTTP status).
    pub kind: ErrorKind,
    /// The request field at fault.
    pub field: Option<String>,
    /// Message.
    pub message: String,
}

impl ApiError {
    /// A bad value of `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            kind: ErrorKind::InvalidRequest,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// `field` names something the service does not have.
    pub fn not_found(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            kind: ErrorKind::NotFound,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// Any other kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            field: None,
            message: message.into(),
        }
    }

    /// The error as a client is told it. A 500's message (a file path, a remote endpoint's
    /// URL and answer, a panic) is the service's business: it is written to the log on
    /// standard error under a short id, and the client gets that id alone. Other kinds are
    /// the client's own request and are answered as they are. Every way out (HTTP, MCP,
    /// SerpAPI's shape) goes through here.
    pub fn for_client(self) -> ApiError {
        if self.kind != ErrorKind::Internal {
            return self;
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // unique within the log: the process and a count
        let id = format!(
            "e{:x}-{n}",
            (started ^ u64::from(std::process::id())) & 0x00ff_ffff
        );
        eprintln!("sift serve: internal error {id}: {self}");
        ApiError {
            kind: ErrorKind::Internal,
            field: None,
            message: format!(
                "internal error {id}: the service could not answer; its log has the details"
            ),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                kind: self.kind.name().to_string(),
                field: self.field.clone(),
                message: self.message.clone(),
            },
        }
    }
}

impl From<sift_retrieve::Error> for ApiError {
    /// A retrieval failure while answering is the service's fault (requests are checked
    /// before they reach the searcher).
    fn from(e: sift_retrieve::Error) -> ApiError {
        ApiError::new(ErrorKind::Internal, e.to_string())
    }
}

impl From<sift_embed::Error> for ApiError {
    fn from(e: sift_embed::Error) -> ApiError {
        ApiError::new(ErrorKind::Internal, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 500 echoed its detail (an internal endpoint's URL and its answer) to the client.
    #[test]
    fn internal_errors_reach_clients_as_an_id_alone() {
        let e = ApiError::new(
            ErrorKind::Internal,
            "rerank: http://10.0.0.7:9000/v1/rerank answered 500: secret body",
        )
        .for_client();
        assert_eq!(e.kind, ErrorKind::Internal);
        assert!(!e.message.contains("10.0.0.7"), "{e}");
        assert!(!e.message.contains("secret"), "{e}");
        assert!(e.message.starts_with("internal error e"), "{e}");
        let a = ApiError::new(ErrorKind::Internal, "x").for_client().message;
        let b = ApiError::new(ErrorKind::Internal, "x").for_client().message;
        assert_ne!(a, b, "each 500 has its own id");
        let bad = ApiError::invalid("top_k", "0: give 1 to 1000").for_client();
        assert_eq!(bad.message, "0: give 1 to 1000");
        assert_eq!(bad.field.as_deref(), Some("top_k"));
    }
}
