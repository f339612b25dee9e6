use std::path::PathBuf;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors reading evaluation inputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the corpus failed.
    #[error(transparent)]
    Corpus(#[from] sift_core::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// File at fault.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A run or qrels file holds no entry at all.
    #[error("{path}: no {what} in the file: nothing to score")]
    Empty {
        /// File at fault.
        path: PathBuf,
        /// What is missing (`run entries`, `judgements`).
        what: &'static str,
    },
    /// A line of a run, qrels or exclusions file is malformed.
    #[error("{path}:{line}: {message}")]
    Line {
        /// File at fault.
        path: PathBuf,
        /// 1-based line.
        line: u64,
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
    pub(crate) fn line(path: impl Into<PathBuf>, line: u64, message: impl Into<String>) -> Self {
        Error::Line {
            path: path.into(),
            line,
            message: message.into(),
        }
    }
}
