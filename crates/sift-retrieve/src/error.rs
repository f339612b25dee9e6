/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of retrieval and evaluation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the corpus failed.
    #[error(transparent)]
    Corpus(#[from] sift_core::Error),
    /// The index failed.
    #[error(transparent)]
    Index(#[from] sift_index::Error),
    /// A model failed.
    #[error(transparent)]
    Embed(#[from] sift_embed::Error),
    /// Evaluation inputs failed.
    #[error(transparent)]
    Eval(#[from] sift_eval::Error),
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// File at fault.
        path: std::path::PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A retriever spec cannot be parsed.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A model does not fit the dense index it should search.
    #[error("dense:{slug}: {message}")]
    Model {
        /// The dense index.
        slug: String,
        /// What is wrong.
        message: String,
    },
    /// What was asked cannot be done with these retrievers, tasks or corpus.
    #[error("{0}")]
    Unsupported(String),
    /// A query image cannot be embedded ([`crate::encode_query`]).
    #[error("images[{index}]: {message}")]
    QueryImage {
        /// Its position among the query's images.
        index: usize,
        /// Why.
        message: String,
    },
}

/// A retriever spec that cannot be parsed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("retriever {spec:?}: {message}")]
pub struct SpecError {
    /// The spec as given.
    pub spec: String,
    /// What is wrong.
    pub message: String,
}
