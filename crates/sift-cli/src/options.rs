//! Flags shared by several commands.
use clap::Args;
use sift_index::{
    AnalyzerConfig, AnalyzerPreset, Bm25Params, Bm25Scoring, Stemming, StopWords, TokenizerKind,
};

/// BM25 scoring flags; unset ones come from the index manifest.
#[derive(Args, Debug, Clone, Default)]
pub struct Bm25Flags {
    /// BM25 k1 (term-frequency saturation) [default: 0.9, or the index's].
    #[arg(long)]
    pub k1: Option<f32>,
    /// BM25 b (length normalisation) [default: 0.4, or the index's].
    #[arg(long)]
    pub b: Option<f32>,
    /// BM25 formula [default: reference, or the index's]: `reference` is the BRIGHT /
    /// MM-BRIGHT reference code's (gensim LuceneBM25Model on passage and query, exact
    /// lengths); `lucene` is Lucene's BM25Similarity as Anserini / pyserini run it.
    #[arg(long = "bm25", value_enum, value_name = "SCORING")]
    pub scoring: Option<Bm25Scoring>,
}

impl Bm25Flags {
    /// `base` with the flags that were given applied.
    pub fn apply(&self, base: Bm25Params) -> Bm25Params {
        Bm25Params {
            k1: self.k1.unwrap_or(base.k1),
            b: self.b.unwrap_or(base.b),
            scoring: self.scoring.unwrap_or(base.scoring),
        }
    }
}

/// Analyzer flags; at search time they are only checked against the index.
#[derive(Args, Debug, Clone, Default)]
pub struct AnalyzerFlags {
    /// Analyzer [default: lucene]: `lucene` is Lucene's English analysis as pyserini /
    /// Anserini run it (UAX#29 StandardTokenizer, possessives, lowercase, Lucene's 33 stop
    /// words, Porter stemmer), the MM-BRIGHT reference's; `snowball` is a simple
    /// letters-and-digits tokenizer with the same stop words and the Snowball English stemmer.
    #[arg(long, value_enum)]
    pub analyzer: Option<AnalyzerPreset>,
    /// Tokenizer, overriding the analyzer's.
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerKind>,
    /// Stemmer, overriding the analyzer's.
    #[arg(long, value_enum)]
    pub stemmer: Option<Stemming>,
    /// Stop-word list, overriding the analyzer's.
    #[arg(long, value_enum)]
    pub stopwords: Option<StopWords>,
}

impl AnalyzerFlags {
    /// True when any flag was given.
    pub fn any(&self) -> bool {
        self.analyzer.is_some()
            || self.tokenizer.is_some()
            || self.stemmer.is_some()
            || self.stopwords.is_some()
    }

    /// `base` with the flags that were given applied.
    pub fn apply(&self, base: &AnalyzerConfig) -> AnalyzerConfig {
        let mut c = self.analyzer.map_or(*base, AnalyzerPreset::config);
        c.tokenizer = self.tokenizer.unwrap_or(c.tokenizer);
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
