use serde::{Deserialize, Serialize};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};

/// Stop-word removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum StopWords {
    /// The Snowball English stop-word list.
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
    /// Snowball English (Porter2) stemmer.
    #[default]
    English,
    /// No stemming.
    None,
}

/// The text analysis applied to passages and queries alike: split on non-alphanumeric
/// characters, drop tokens longer than `max_token_len` bytes, lowercase, remove stop words,
/// stem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnalyzerConfig {
    /// Lowercase tokens.
    pub lowercase: bool,
    /// Stop-word list.
    pub stopwords: StopWords,
    /// Stemmer.
    pub stemmer: Stemming,
    /// Longer tokens (in bytes) are dropped.
    pub max_token_len: usize,
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        AnalyzerConfig {
            lowercase: true,
            stopwords: StopWords::English,
            stemmer: Stemming::English,
            max_token_len: 40,
        }
    }
}

impl AnalyzerConfig {
    /// The tantivy analyzer for this configuration.
    pub fn build(&self) -> TextAnalyzer {
        let mut b = TextAnalyzer::builder(SimpleTokenizer::default())
            .dynamic()
            .filter_dynamic(RemoveLongFilter::limit(self.max_token_len));
        if self.lowercase {
            b = b.filter_dynamic(LowerCaser);
        }
        if self.stopwords == StopWords::English
            && let Some(f) = StopWordFilter::new(Language::English)
        {
            b = b.filter_dynamic(f);
        }
        if self.stemmer == Stemming::English {
            b = b.filter_dynamic(Stemmer::new(Language::English));
        }
        b.build()
    }

    /// The terms of `text` in order, as indexed.
    pub fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut stream = analyzer.token_stream(text);
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_analyzer_lowercases_stops_and_stems() {
        let mut a = AnalyzerConfig::default().build();
        assert_eq!(
            AnalyzerConfig::tokens(&mut a, "The Flows of BOUNDARY layers, running!"),
            vec!["flow", "boundari", "layer", "run"]
        );
        let mut plain = AnalyzerConfig {
            stopwords: StopWords::None,
            stemmer: Stemming::None,
            ..AnalyzerConfig::default()
        }
        .build();
        assert_eq!(
            AnalyzerConfig::tokens(&mut plain, "The Flows"),
            vec!["the", "flows"]
        );
    }
}
