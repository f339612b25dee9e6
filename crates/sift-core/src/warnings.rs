use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// The kinds of recoverable problems a reader counts instead of failing on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// A query with empty (or whitespace-only) text: skipped.
    EmptyQuery,
    /// A passage with empty text: indexed, but it can only be found by id.
    EmptyPassage,
    /// A qrels entry naming a query that does not exist: skipped.
    UnknownQueryId,
    /// A qrels entry naming a passage that does not exist: kept (it counts in the ideal
    /// ranking, as in trec_eval) but it can never be retrieved.
    UnknownDocId,
    /// An image whose bytes do not decode: skipped.
    UndecodableImage,
    /// An image row with no bytes, or an empty image file: skipped.
    MissingImageBytes,
    /// The same image path twice: the later row is skipped.
    DuplicateImage,
    /// A qrels entry given twice for the same (query, doc): the last grade wins.
    DuplicateQrel,
    /// A positive image whose source page has no gold passage (MM-BRIGHT Task 4 orphan).
    OrphanPositiveImage,
    /// A null element in a list of ids (`gold_ids`, `negative_ids`, image lists): skipped.
    NullListElement,
    /// A query whose judgements are all missing (every `gold_ids` element null or absent):
    /// it cannot be scored.
    QueryWithoutJudgements,
    /// A file below an image folder (or named by a knowledge-base row) that is not read: a
    /// symbolic link (or, in a knowledge base, a path) leading outside the corpus or in a
    /// loop, or not a regular file (FIFO, device, socket), or too large.
    SkippedImageFile,
    /// A query's `negative_ids` naming one of its own gold passages: it is removed from the
    /// ranking as the reference code removes it, and still counts in the ideal ranking.
    GoldAlsoNegative,
    /// A `negative_ids` element naming no passage of the domain: nothing to remove.
    UnknownNegativeId,
    /// A knowledge-base row with neither text nor an image path: skipped.
    EmptyRow,
    /// A knowledge-base row naming an image file that does not exist: the image is skipped
    /// (the row's text is still a passage).
    MissingImageFile,
    /// A part of the corpus a report could not read (a domain it lacks, a bad row): its
    /// texts or images are not shown.
    UnreadableCorpus,
}

impl WarningKind {
    /// Stable snake_case name, as used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            WarningKind::EmptyQuery => "empty_query",
            WarningKind::EmptyPassage => "empty_passage",
            WarningKind::UnknownQueryId => "unknown_query_id",
            WarningKind::UnknownDocId => "unknown_doc_id",
            WarningKind::UndecodableImage => "undecodable_image",
            WarningKind::MissingImageBytes => "missing_image_bytes",
            WarningKind::DuplicateImage => "duplicate_image",
            WarningKind::DuplicateQrel => "duplicate_qrel",
            WarningKind::OrphanPositiveImage => "orphan_positive_image",
            WarningKind::NullListElement => "null_list_element",
            WarningKind::QueryWithoutJudgements => "query_without_judgements",
            WarningKind::SkippedImageFile => "skipped_image_file",
            WarningKind::GoldAlsoNegative => "gold_also_negative",
            WarningKind::UnknownNegativeId => "unknown_negative_id",
            WarningKind::EmptyRow => "empty_row",
            WarningKind::MissingImageFile => "missing_image_file",
            WarningKind::UnreadableCorpus => "unreadable_corpus",
        }
    }
}

/// One recorded warning.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Warning {
    /// What kind of problem.
    pub kind: WarningKind,
    /// The file it was found in.
    pub path: PathBuf,
    /// `line N` / `row N`, or empty.
    pub location: String,
    /// Human-readable detail (usually the id at fault).
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(
                f,
                "{}: {}: {}",
                self.path.display(),
                self.location,
                self.message
            )
        }
    }
}

/// Counts recoverable problems by kind and keeps the first few of each as examples.
#[derive(Debug, Default, Clone)]
pub struct Warnings {
    counts: BTreeMap<WarningKind, u64>,
    examples: Vec<Warning>,
}

/// How many examples of each kind are kept.
const EXAMPLES_PER_KIND: u64 = 5;

impl Warnings {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one warning.
    pub fn push(
        &mut self,
        kind: WarningKind,
        path: impl Into<PathBuf>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) {
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        if *n <= EXAMPLES_PER_KIND {
            self.examples.push(Warning {
                kind,
                path: path.into(),
                location: location.into(),
                message: message.into(),
            });
        }
    }

    /// Adds every warning of `other` to `self`.
    pub fn extend(&mut self, other: Warnings) {
        for (kind, n) in other.counts {
            let have = self.counts.entry(kind).or_insert(0);
            let room = EXAMPLES_PER_KIND.saturating_sub(*have);
            *have += n;
            self.examples.extend(
                other
                    .examples
                    .iter()
                    .filter(|w| w.kind == kind)
                    .take(room as usize)
                    .cloned(),
            );
        }
    }

    /// Number of warnings of `kind`.
    pub fn count(&self, kind: WarningKind) -> u64 {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// Total number of warnings.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Counts per kind, in a stable order.
    pub fn counts(&self) -> impl Iterator<Item = (WarningKind, u64)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }

    /// The first few warnings of each kind.
    pub fn examples(&self) -> &[Warning] {
        &self.examples
    }

    /// Counts as a JSON-friendly map `kind name -> count`.
    pub fn to_map(&self) -> BTreeMap<&'static str, u64> {
        self.counts.iter().map(|(k, v)| (k.name(), *v)).collect()
    }
}
