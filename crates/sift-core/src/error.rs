use std::path::PathBuf;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading a corpus. Each variant names the file at fault and,
/// where there is one, the 1-based line (text formats) or 0-based row (parquet).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// File at fault.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A line of a JSONL or TSV file is malformed.
    #[error("{path}:{line}: {message}")]
    Line {
        /// File at fault.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A parquet file cannot be read (truncated, corrupt, unsupported encoding).
    #[error("{path}: cannot read parquet: {message}")]
    Parquet {
        /// File at fault.
        path: PathBuf,
        /// What the parquet reader said.
        message: String,
    },
    /// A parquet row holds a value the reader cannot use.
    #[error("{path}: row {row}: {message}")]
    Row {
        /// File at fault.
        path: PathBuf,
        /// 0-based row number in the file.
        row: u64,
        /// What is wrong.
        message: String,
    },
    /// A parquet file lacks a column or has one of an unusable type.
    #[error("{path}: {message}")]
    Schema {
        /// File at fault.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The same id appears twice.
    #[error("{path}: {location}: duplicate id {id:?} (first seen at {first})")]
    DuplicateId {
        /// File at fault.
        path: PathBuf,
        /// Where the second occurrence is (`line N` or `row N`).
        location: String,
        /// Where the first occurrence is.
        first: String,
        /// The id.
        id: String,
    },
    /// The directory is neither a BEIR nor an MM-BRIGHT corpus.
    #[error(
        "{path}: not a corpus: expected corpus.jsonl (BEIR layout) or documents/*.parquet (MM-BRIGHT layout)"
    )]
    UnknownLayout {
        /// Directory at fault.
        path: PathBuf,
    },
    /// A domain was asked for that the corpus does not have.
    #[error("{path}: no domain {domain:?} (available: {available})")]
    UnknownDomain {
        /// Corpus directory.
        path: PathBuf,
        /// The requested domain.
        domain: String,
        /// Comma-separated list of the domains present.
        available: String,
    },
    /// A domain has no passages at all.
    #[error("{path}: the corpus has no passages")]
    EmptyCorpus {
        /// File at fault.
        path: PathBuf,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn line(path: impl Into<PathBuf>, line: u64, message: impl Into<String>) -> Self {
        Error::Line {
            path: path.into(),
            line,
            message: message.into(),
        }
    }
    pub(crate) fn row(path: impl Into<PathBuf>, row: u64, message: impl Into<String>) -> Self {
        Error::Row {
            path: path.into(),
            row,
            message: message.into(),
        }
    }
    pub(crate) fn schema(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Schema {
            path: path.into(),
            message: message.into(),
        }
    }
    pub(crate) fn parquet(path: impl Into<PathBuf>, message: impl ToString) -> Self {
        Error::Parquet {
            path: path.into(),
            message: message.to_string(),
        }
    }
}
