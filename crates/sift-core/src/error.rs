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
    /// An id cannot be used (empty, whitespace or control characters).
    #[error("{path}: {location}: {what} {id:?} {problem}")]
    BadId {
        /// File at fault.
        path: PathBuf,
        /// `line N` or `row N` (empty for a file of an image folder).
        location: String,
        /// What the id names (`passage id`, `query id`, `image path`, ...).
        what: String,
        /// The id.
        id: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The directory is neither a BEIR nor an MM-BRIGHT corpus nor holds a knowledge base.
    #[error(
        "{path}: not a corpus: expected corpus.jsonl (BEIR layout), documents/*.parquet (MM-BRIGHT layout) or kb.jsonl / kb.parquet (a knowledge base)"
    )]
    UnknownLayout {
        /// Directory at fault.
        path: PathBuf,
    },
    /// A directory holds both `kb.jsonl` and `kb.parquet`.
    #[error("{path}: holds both kb.jsonl and kb.parquet: give the knowledge-base file to read")]
    AmbiguousKb {
        /// Directory at fault.
        path: PathBuf,
    },
    /// A file given as a corpus is not a knowledge base (`.jsonl` or `.parquet`).
    #[error(
        "{path}: not a corpus: a corpus file is a knowledge base ending in .jsonl or .parquet (rows of \"id\" or \"qid\", \"text\", \"image_path\"); BEIR and MM-BRIGHT corpora are directories"
    )]
    NotACorpusFile {
        /// File at fault.
        path: PathBuf,
    },
    /// Queries or qrels were asked of a knowledge base, which has none.
    #[error(
        "{path}: a knowledge base has no queries or qrels: it can be indexed, checked, searched and served, not evaluated"
    )]
    NoQueries {
        /// The knowledge-base file.
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
    /// A domain's parquet shards are not a complete set.
    #[error("{path}: domain {domain:?}: incomplete shards: {problem}")]
    IncompleteShards {
        /// Config directory (`documents`, `examples`, ...).
        path: PathBuf,
        /// The domain.
        domain: String,
        /// What is missing or inconsistent.
        problem: String,
    },
    /// A file names a domain that cannot be one (`..`, a path separator, ...).
    #[error("{path}: domain {domain:?} {problem}: a domain must be one plain directory name")]
    BadDomain {
        /// File whose name (or content) gives the domain.
        path: PathBuf,
        /// The domain name.
        domain: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A path that must name a regular file names something else.
    #[error("{path}: is {kind}, not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is (a FIFO, a character device, a directory, ...).
        kind: &'static str,
    },
    /// A file vetted earlier ([`crate::VettedFile`]) is not the same file any more.
    #[error("{path}: replaced since it was vetted (another file is there now)")]
    Replaced {
        /// The file.
        path: PathBuf,
    },
    /// A file is larger than the limit for its kind.
    #[error("{path}: {size} bytes, over the limit of {limit} bytes")]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (or the bytes read before stopping).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A domain has no passages at all.
    #[error("{path}: the corpus has no passages")]
    EmptyCorpus {
        /// File at fault.
        path: PathBuf,
    },
}

impl Error {
    /// A file that could not be read or written.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    /// A malformed line (1-based) of a text file.
    pub fn line(path: impl Into<PathBuf>, line: u64, message: impl Into<String>) -> Self {
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
    /// Checks an id read at `location` of `path` ([`crate::id_problem`]).
    pub(crate) fn check_id(
        path: &std::path::Path,
        location: impl FnOnce() -> String,
        what: &str,
        id: &str,
    ) -> Result<(), Error> {
        match crate::paths::id_problem(id) {
            None => Ok(()),
            Some(problem) => Err(Error::BadId {
                path: path.to_path_buf(),
                location: location(),
                what: what.to_string(),
                id: id.to_string(),
                problem,
            }),
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
