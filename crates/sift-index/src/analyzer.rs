//! Text analysis for BM25: the same for passages and queries.
//!
//! Two analyzers, named by [`AnalyzerPreset`]:
//! - `lucene` (the default): Lucene's English analysis as pyserini / Anserini run it, and so
//!   as the BRIGHT / MM-BRIGHT BM25 reference does: UAX#29 `StandardTokenizer`, possessive
//!   filter, lowercase, Lucene's 33 English stop words, the original Porter stemmer. Token
//!   streams are identical to Lucene's (see [`crate::lucene`]).
//! - `snowball`: tantivy's simple tokenizer (runs of letters and digits; tokens over 40 bytes
//!   dropped), lowercase, the same stop words, the Snowball English (Porter2) stemmer: Sift's
//!   analyzer before the Lucene one, kept for comparison.
//!
//! The parts can also be combined freely through [`AnalyzerConfig`].
use serde::{Deserialize, Serialize};
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer};

use crate::lucene::{self, PorterStemmer, StandardTokenizer};

/// How text is split into tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TokenizerKind {
    /// Lucene's StandardTokenizer (Unicode UAX#29 word breaks; tokens over 255 UTF-16 units
    /// are cut), then Lucene's English possessive filter (`'s` removed) and Java's
    /// per-character lowercasing.
    #[default]
    Lucene,
    /// tantivy's simple tokenizer: maximal runs of alphanumeric characters, tokens over 40
    /// bytes dropped, then lowercased.
    Simple,
}

/// Stop-word removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum StopWords {
    /// Lucene's English stop set (33 words: a, an, and, are, as, at, be, ...).
    #[default]
    English,
    /// Keep every token.
    None,
}

/// Stemming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Stemming {
    /// The original Porter stemmer, as Lucene's PorterStemFilter runs it.
    #[default]
    Porter,
    /// The Snowball English (Porter2) stemmer.
    Snowball,
    /// No stemming.
    None,
}

/// A named analyzer: sets all of [`AnalyzerConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum AnalyzerPreset {
    /// Lucene's English analysis (pyserini / Anserini's default): the MM-BRIGHT reference.
    #[default]
    Lucene,
    /// tantivy's simple tokenizer, Lucene's stop words, the Snowball English stemmer.
    Snowball,
}

/// The text analysis applied to passages and queries alike. Stored in the index manifest: a
/// search analyzes its query as the index analyzed its passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnalyzerConfig {
    /// Tokenizer.
    pub tokenizer: TokenizerKind,
    /// Stop-word list.
    pub stopwords: StopWords,
    /// Stemmer.
    pub stemmer: Stemming,
}

impl Default for AnalyzerConfig {
    /// Lucene's English analysis.
    fn default() -> Self {
        AnalyzerPreset::Lucene.config()
    }
}

impl AnalyzerPreset {
    /// The configuration this preset names.
    pub fn config(self) -> AnalyzerConfig {
        match self {
            AnalyzerPreset::Lucene => AnalyzerConfig {
                tokenizer: TokenizerKind::Lucene,
                stopwords: StopWords::English,
                stemmer: Stemming::Porter,
            },
            AnalyzerPreset::Snowball => AnalyzerConfig {
                tokenizer: TokenizerKind::Simple,
                stopwords: StopWords::English,
                stemmer: Stemming::Snowball,
            },
        }
    }
}

impl AnalyzerConfig {
    /// An analyzer for this configuration (it holds reusable buffers: one per thread).
    pub fn analyzer(&self) -> Analyzer {
        Analyzer {
            config: *self,
            standard: StandardTokenizer::default(),
            simple: (self.tokenizer == TokenizerKind::Simple).then(|| {
                TextAnalyzer::builder(SimpleTokenizer::default())
                    .filter(RemoveLongFilter::limit(40))
                    .filter(LowerCaser)
                    .build()
            }),
            snowball: (self.stemmer == Stemming::Snowball)
                .then(|| frostem::Stemmer::new(frostem::Algorithm::English)),
            porter: PorterStemmer::default(),
            term: String::new(),
            simple_tokens: Vec::new(),
        }
    }

    /// A short description, e.g. for reports: `lucene` or `snowball` when the configuration
    /// is a preset's, else its parts.
    pub fn describe(&self) -> String {
        for p in [AnalyzerPreset::Lucene, AnalyzerPreset::Snowball] {
            if p.config() == *self {
                return format!("{p:?}").to_lowercase();
            }
        }
        format!(
            "tokenizer {:?}, stop words {:?}, stemmer {:?}",
            self.tokenizer, self.stopwords, self.stemmer
        )
        .to_lowercase()
    }
}

/// Analyzes texts; see [`AnalyzerConfig::analyzer`].
pub struct Analyzer {
    config: AnalyzerConfig,
    standard: StandardTokenizer,
    simple: Option<TextAnalyzer>,
    snowball: Option<frostem::Stemmer>,
    porter: PorterStemmer,
    term: String,
    simple_tokens: Vec<String>,
}

impl Analyzer {
    /// The configuration.
    pub fn config(&self) -> &AnalyzerConfig {
        &self.config
    }

    /// Calls `f` with each term of `text`, in order.
    pub fn for_each_term(&mut self, text: &str, mut f: impl FnMut(&str)) {
        let Analyzer {
            config,
            standard,
            simple,
            snowball,
            porter,
            term,
            simple_tokens,
        } = self;
        let mut finish = |term: &mut String| {
            if config.stopwords == StopWords::English && lucene::is_english_stop_word(term) {
                return;
            }
            match config.stemmer {
                Stemming::Porter => porter.stem(term),
                Stemming::Snowball => {
                    if let Some(s) = snowball.as_ref()
                        && let std::borrow::Cow::Owned(stemmed) = s.stem(term)
                    {
                        *term = stemmed;
                    }
                }
                Stemming::None => {}
            }
            f(term);
        };
        match simple {
            None => standard.tokenize(text, |token| {
                lucene::lowercase_into(lucene::strip_possessive(token), term);
                finish(term);
            }),
            Some(a) => {
                simple_tokens.clear();
                let mut stream = a.token_stream(text);
                while stream.advance() {
                    simple_tokens.push(std::mem::take(&mut stream.token_mut().text));
                }
                for t in simple_tokens.iter_mut() {
                    finish(t);
                }
            }
        }
    }

    /// The terms of `text` in order, as indexed.
    pub fn terms(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_term(text, |t| out.push(t.to_string()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_analyze_as_named() {
        let mut lucene = AnalyzerConfig::default().analyzer();
        assert_eq!(
            lucene.terms("The Flows of BOUNDARY layers, running! John's e-mail"),
            vec!["flow", "boundari", "layer", "run", "john", "e", "mail"]
        );
        let mut snowball = AnalyzerPreset::Snowball.config().analyzer();
        assert_eq!(
            snowball.terms("The Flows of BOUNDARY layers, running! John's"),
            vec!["flow", "boundari", "layer", "run", "john", "s"]
        );
        let mut plain = AnalyzerConfig {
            stopwords: StopWords::None,
            stemmer: Stemming::None,
            ..AnalyzerConfig::default()
        }
        .analyzer();
        assert_eq!(plain.terms("The Flows"), vec!["the", "flows"]);
        assert_eq!(AnalyzerConfig::default().describe(), "lucene");
    }
}
