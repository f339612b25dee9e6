use std::path::PathBuf;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors building, opening or searching an index.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the corpus failed.
    #[error(transparent)]
    Corpus(#[from] sift_core::Error),
    /// A file of the index could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// File at fault.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// tantivy failed on an index directory.
    #[error("{path}: {source}")]
    Tantivy {
        /// Directory at fault.
        path: PathBuf,
        /// Underlying error.
        source: tantivy::TantivyError,
    },
    /// The directory has no manifest.
    #[error("{path}: not a Sift index (no manifest.json); build one with `sift index`")]
    NotAnIndex {
        /// Index directory.
        path: PathBuf,
    },
    /// The manifest cannot be used.
    #[error("{path}: {message}")]
    Manifest {
        /// Manifest file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Precomputed vectors (`sift index --vectors`) cannot be used.
    #[error("{path}: {message}")]
    Vectors {
        /// The vectors directory or file at fault.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The index was built with settings other than those asked for.
    #[error(
        "{path}: index was built with {what} = {built}, but {requested} was requested; rebuild it with `sift index` or drop the option"
    )]
    Mismatch {
        /// Index directory.
        path: PathBuf,
        /// Setting name.
        what: String,
        /// Value in the index.
        built: String,
        /// Value requested.
        requested: String,
    },
    /// The corpus changed since the index was built.
    #[error(
        "{path}: domain {domain:?} was indexed from other passages (index {built}, corpus now {now}); rebuild with `sift index`"
    )]
    CorpusChanged {
        /// Index directory.
        path: PathBuf,
        /// Domain.
        domain: String,
        /// Fingerprint stored in the manifest.
        built: String,
        /// Fingerprint of the corpus now.
        now: String,
    },
    /// The index has no such domain.
    #[error("{path}: the index has no domain {domain:?} (indexed: {available})")]
    MissingDomain {
        /// Index directory.
        path: PathBuf,
        /// Requested domain.
        domain: String,
        /// Domains present.
        available: String,
    },
    /// The index has no dense vectors of that name.
    #[error(
        "{path}: no dense index {name:?} (built: {available}); add one with `sift index --dense MODEL`"
    )]
    MissingDense {
        /// Index directory.
        path: PathBuf,
        /// Requested name.
        name: String,
        /// Dense indexes present.
        available: String,
    },
    /// The embedding model failed.
    #[error("embedding {what} with {model}: {source}")]
    Embed {
        /// Model name.
        model: String,
        /// What was being embedded.
        what: String,
        /// The embedder's error.
        source: crate::BoxError,
    },
    /// The embedding model returned something unusable (wrong count or dimension, a vector
    /// that is not finite).
    #[error("embedding with {model}: {message}")]
    EmbedOutput {
        /// Model name.
        model: String,
        /// What is wrong.
        message: String,
    },
    /// Another process is building into the same directory.
    #[error("{path}: another `sift index` is writing this index")]
    Locked {
        /// Lock file.
        path: PathBuf,
    },
    /// A parameter is out of range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// The index was built by a Sift with another on-disk format.
    #[error(
        "{path}: index format version {found} is not supported by this Sift (expects {expected}); rebuild the index"
    )]
    FormatVersion {
        /// Manifest file.
        path: PathBuf,
        /// Version in the manifest.
        found: u32,
        /// Version this Sift reads and writes.
        expected: u32,
    },
    /// A build would replace an index whose manifest cannot be read (its generations might
    /// be the only copy of a long build), and replacing was not asked for.
    #[error("{path}: the existing index is unreadable ({message}); it was left as it is")]
    UnreadableIndex {
        /// Manifest file.
        path: PathBuf,
        /// Why it cannot be read.
        message: String,
    },
    /// A build would leave out parts of the existing index, and replacing was not asked for.
    #[error("{path}: the new index would drop {}", dropped.join("; "))]
    WouldDrop {
        /// Index directory.
        path: PathBuf,
        /// What would be dropped (`dense:<slug>`, `domain <name> (why)`).
        dropped: Vec<String>,
    },
    /// The index files disagree with each other.
    #[error("{path}: index is corrupt: {message}")]
    Corrupt {
        /// File or directory at fault.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn tantivy(path: impl Into<PathBuf>, source: tantivy::TantivyError) -> Self {
        Error::Tantivy {
            path: path.into(),
            source,
        }
    }
}
