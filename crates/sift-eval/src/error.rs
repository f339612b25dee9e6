use std::path::PathBuf;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors reading evaluation inputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a file failed: the corpus, or a run, qrels or exclusions file that could not
    /// be read ([`sift_core::Error::Io`]) or has a malformed line ([`sift_core::Error::Line`]).
    #[error(transparent)]
    Corpus(#[from] sift_core::Error),
    /// A run or qrels file holds no entry at all.
    #[error("{path}: no {what} in the file: nothing to score")]
    Empty {
        /// File at fault.
        path: PathBuf,
        /// What is missing (`run entries`, `judgements`).
        what: &'static str,
    },
    /// An evaluation directory `sift report` cannot use (a malformed results.json or run
    /// file), or a figure it cannot render.
    #[error("{0}")]
    Report(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Corpus(sift_core::Error::io(path, source))
    }
    pub(crate) fn line(path: impl Into<PathBuf>, line: u64, message: impl Into<String>) -> Self {
        Error::Corpus(sift_core::Error::line(path, line, message))
    }
}
