//! Errors of the generation back ends and the cache.
use std::path::PathBuf;

/// A generation or cache error; each names the endpoint, file or key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint answered with an error status (after any retries).
    #[error("{url}: HTTP {status} after {attempts} attempt(s): {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// The last status.
        status: u16,
        /// The start of the last response body.
        body: String,
        /// Requests made.
        attempts: u32,
    },
    /// The connection failed or timed out (after any retries).
    #[error("{url}: {message} after {attempts} attempt(s)")]
    Transport {
        /// The endpoint.
        url: String,
        /// What went wrong.
        message: String,
        /// Requests made.
        attempts: u32,
    },
    /// The endpoint answered 200 with a body that is not a chat completion (after retries).
    #[error("{url}: not a chat completion ({message}) after {attempts} attempt(s): {body}")]
    Malformed {
        /// The endpoint.
        url: String,
        /// What is missing or wrong.
        message: String,
        /// The start of the last response body.
        body: String,
        /// Requests made.
        attempts: u32,
    },
    /// The caller's deadline ([`crate::with_deadline`]) passed before the request could be
    /// (re)sent.
    #[error("{url}: gave up after {attempts} attempt(s): the caller's time limit passed")]
    Deadline {
        /// The endpoint.
        url: String,
        /// Requests made.
        attempts: u32,
    },
    /// A request that cannot be sent as given.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// `--offline` and the cache holds no generation for this key.
    #[error("offline: no cached generation for query {query_id} (key {key})")]
    Offline {
        /// The query.
        query_id: String,
        /// The cache key.
        key: String,
    },
    /// A local model could not be loaded or run.
    #[error("model {model}: {message}")]
    Model {
        /// The model.
        model: String,
        /// What went wrong.
        message: String,
    },
    /// Reading the corpus.
    #[error(transparent)]
    Corpus(#[from] sift_core::Error),
    /// Reading or writing a file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;
