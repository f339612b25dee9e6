use std::collections::BTreeMap;

/// A text passage of the corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// Unique id within its domain (MM-BRIGHT: `domain/key_n.txt`; BEIR: `_id`).
    pub id: String,
    /// The text to index (BEIR: title and text joined by a space).
    pub text: String,
    /// The title, where the corpus gives one (BEIR's `title`, a knowledge base's `title`
    /// or the first line of Search-R1's `contents`).
    pub title: Option<String>,
}

/// Image annotations of a multimodal query (MM-BRIGHT `examples_multimodal`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageLabels {
    /// Corpus images annotated relevant, normalised paths.
    pub positive: Vec<String>,
    /// Corpus images annotated non-relevant, normalised paths.
    pub negative: Vec<String>,
    /// `(image path, passage id)` for every annotated image (positive or negative) whose
    /// annotation names the passage it comes from (`source_passage_id`, as MTEB's port of
    /// MM-BRIGHT links them); empty when the annotations carry no such field.
    pub sources: Vec<(String, String)>,
}

/// A query with its judgements, as MM-BRIGHT `examples` rows carry them. BEIR queries are
/// read into the same shape with empty `gold_ids` (their judgements come from [`Qrels`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Example {
    /// Query id.
    pub id: String,
    /// Query text.
    pub query: String,
    /// Passage ids judged relevant (relevance 1 in Tasks 1 and 2).
    pub gold_ids: Vec<String>,
    /// Passage ids removed from this query's ranking before scoring (Tasks 1 and 2).
    pub negative_ids: Vec<String>,
    /// Reference answers (MM-BRIGHT's `gold_answers`), what generated answers are judged
    /// against (`sift rag`); empty where the corpus has none (BEIR).
    pub gold_answers: Vec<String>,
    /// Query images (normalised paths into `examples_images`).
    pub image_paths: Vec<String>,
    /// Image annotations; present only for multimodal examples.
    pub images: Option<ImageLabels>,
}

/// Relevance judgements: query id -> doc id -> grade. Ordered maps keep output stable.
pub type Qrels = BTreeMap<String, BTreeMap<String, i32>>;
