//! Flags shared by several commands.
use clap::Args;
use sift_index::{AnalyzerConfig, Bm25Params, QueryWeighting, Stemming, StopWords};

/// BM25 scoring flags; unset ones come from the index manifest.
#[derive(Args, Debug, Clone, Default)]
pub struct Bm25Flags {
    /// BM25 k1 (term-frequency saturation) [default: 0.9, or the index's].
    #[arg(long)]
    pub k1: Option<f32>,
    /// BM25 b (length normalisation) [default: 0.4, or the index's].
    #[arg(long)]
    pub b: Option<f32>,
    /// Query-side weighting [default: lucene, or the index's].
    #[arg(long, value_enum)]
    pub query_weighting: Option<QueryWeighting>,
}

impl Bm25Flags {
    /// `base` with the flags that were given applied.
    pub fn apply(&self, base: Bm25Params) -> Bm25Params {
        Bm25Params {
            k1: self.k1.unwrap_or(base.k1),
            b: self.b.unwrap_or(base.b),
            weighting: self.query_weighting.unwrap_or(base.weighting),
        }
    }
}

/// Analyzer flags; at search time they are only checked against the index.
#[derive(Args, Debug, Clone, Default)]
pub struct AnalyzerFlags {
    /// Stemmer [default: english].
    #[arg(long, value_enum)]
    pub stemmer: Option<Stemming>,
    /// Stop-word list [default: english].
    #[arg(long, value_enum)]
    pub stopwords: Option<StopWords>,
}

impl AnalyzerFlags {
    /// True when any flag was given.
    pub fn any(&self) -> bool {
        self.stemmer.is_some() || self.stopwords.is_some()
    }

    /// `base` with the flags that were given applied.
    pub fn apply(&self, base: &AnalyzerConfig) -> AnalyzerConfig {
        let mut c = base.clone();
        c.stemmer = self.stemmer.unwrap_or(c.stemmer);
        c.stopwords = self.stopwords.unwrap_or(c.stopwords);
        c
    }
}

/// Parses `a,b,c` into a list (empty entries dropped).
pub fn split_list(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

/// Flags for reading a corpus.
#[derive(Args, Debug, Clone, Default)]
pub struct CorpusFlags {
    /// Read domains whose parquet shards are incomplete (e.g. `-00000-of-00002` without
    /// `-00001-`) as they are, with a warning; by default that is an error.
    #[arg(long)]
    pub allow_partial: bool,
}

impl CorpusFlags {
    /// Opens the corpus at `dir`; with --allow-partial, says on stderr which shard sets are
    /// incomplete.
    pub fn open(&self, dir: &std::path::Path) -> anyhow::Result<sift_core::Corpus> {
        let corpus = sift_core::Corpus::open(dir)?.allow_partial_shards(self.allow_partial);
        if self.allow_partial {
            for problem in corpus.shard_problems()? {
                eprintln!(
                    "warning: {}: {problem} (read as it is: --allow-partial)",
                    dir.display()
                );
            }
        }
        Ok(corpus)
    }
}

/// Parses a count that must be at least 1 (`--top-k`, `--ef-search`, ...).
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
