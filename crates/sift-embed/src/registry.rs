//! Supported models (`models/registry.json`, compiled in).
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

/// Token pooling of a sentence encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean of the token states under the attention mask.
    Mean,
    /// The first token's state.
    Cls,
    /// The end-of-text token's state (CLIP's text tower).
    Eos,
    /// The last position's state, padding included (SigLIP's text tower).
    Last,
}

/// Attention of a decoder embedder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// Each token sees the ones before it (the language model's own).
    Causal,
    /// Every token sees the whole input (GritLM, ReasonIR, gte-Qwen2's remote code).
    Bidirectional,
}

/// A registry entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Hub id.
    pub id: String,
    /// Short name accepted wherever an id is.
    pub alias: String,
    /// Architecture family (`bert`, `clip`, `siglip`).
    pub arch: String,
    /// Pooling.
    pub pooling: Pooling,
    /// Embedding dimension.
    pub dim: usize,
    /// Decoders' attention, when it is not what the pooling implies (last token: causal;
    /// mean: bidirectional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<Attention>,
    /// Maximum tokens per input, special tokens included.
    pub max_seq_len: usize,
    /// Passages cut to this many characters before the prefix is added and they are
    /// tokenised (RaDeR's reference code: `text[:8192]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passage_max_chars: Option<usize>,
    /// Maximum tokens of a query when it differs from `max_seq_len` (GritLM: 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_max_seq_len: Option<usize>,
    /// Prepended to queries.
    pub query_prefix: String,
    /// Prepended to passages.
    pub passage_prefix: String,
    /// How a task instruction enters a query in the model's prompt format: the query
    /// prefix with `{instruction}` standing for it (E5-Mistral: `Instruct:
    /// {instruction}\nQuery: `). Absent: the model takes no instruction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_template: Option<String>,
    /// BRIGHT's task instruction for the model (its per-task configs), `{domain}` standing
    /// for the domain's name; absent where BRIGHT gives the model none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bright_instruction: Option<String>,
    /// The text checkpoint that goes with an image-only checkpoint (Nomic Embed Vision's
    /// nomic-embed-text-v1.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_model: Option<String>,
    /// Licence of the weights.
    pub license: String,
}

impl ModelInfo {
    /// The query prefix carrying `instruction` in the model's prompt format, when it takes
    /// one ([`ModelInfo::query_template`]).
    pub fn instruction_prefix(&self, instruction: &str) -> Option<String> {
        self.query_template
            .as_ref()
            .map(|t| t.replace("{instruction}", instruction))
    }
}

static REGISTRY: LazyLock<Vec<ModelInfo>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../../../models/registry.json"))
        .expect("models/registry.json is valid (checked by a test)")
});

/// Every supported model.
pub fn all() -> &'static [ModelInfo] {
    &REGISTRY
}

/// A supported reranker or generator (`models/rerankers-and-generators.json`, compiled in):
/// what `sift models list` shows next to the embedders.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineModel {
    /// Hub id (or what the entry stands for, e.g. an endpoint).
    pub id: String,
    /// Short name.
    pub alias: String,
    /// Rerankers: `cross-encoder`, `pointwise` (yes/no), `pointwise-head` (its own
    /// relevance head) or `listwise`; generators: `local` or `endpoint`.
    pub kind: String,
    /// `model_type`, or `endpoint`.
    pub arch: String,
    /// Whether it reads images.
    pub images: bool,
    /// How to name it (`--rerank`, `--generator`).
    pub spec: String,
    /// Licence.
    pub license: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PipelineModels {
    rerankers: Vec<PipelineModel>,
    generators: Vec<PipelineModel>,
}

static PIPELINE: LazyLock<PipelineModels> = LazyLock::new(|| {
    serde_json::from_str(include_str!(
        "../../../models/rerankers-and-generators.json"
    ))
    .expect("models/rerankers-and-generators.json is valid (checked by a test)")
});

/// The supported rerankers.
pub fn rerankers() -> &'static [PipelineModel] {
    &PIPELINE.rerankers
}

/// The supported generators.
pub fn generators() -> &'static [PipelineModel] {
    &PIPELINE.generators
}

/// The entry whose id, alias, or id's last path component equals `name` (case-insensitive).
pub fn find(name: &str) -> Option<&'static ModelInfo> {
    let n = name.trim_end_matches('/').to_ascii_lowercase();
    let last = n.rsplit('/').next().unwrap_or(&n).to_string();
    REGISTRY.iter().find(|m| {
        let id = m.id.to_ascii_lowercase();
        id == n || m.alias == n || id.rsplit('/').next() == Some(last.as_str()) || m.alias == last
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rerankers_and_generators_parse_with_known_kinds() {
        assert!(rerankers().iter().any(|m| m.kind == "cross-encoder"));
        for m in rerankers() {
            assert!(
                ["cross-encoder", "pointwise", "pointwise-head", "listwise"]
                    .contains(&m.kind.as_str()),
                "{}: kind {}",
                m.id,
                m.kind
            );
        }
        for m in generators() {
            assert!(
                ["local", "endpoint"].contains(&m.kind.as_str()),
                "{}: kind {}",
                m.id,
                m.kind
            );
        }
    }

    #[test]
    fn registry_parses_and_resolves_names() {
        assert!(all().len() >= 8);
        assert_eq!(
            find("minilm").unwrap().id,
            "sentence-transformers/all-MiniLM-L6-v2"
        );
        assert_eq!(find("models/local/all-MiniLM-L6-v2").unwrap().dim, 384);
        assert_eq!(find("intfloat/e5-base-v2").unwrap().query_prefix, "query: ");
        assert_eq!(
            find("BAAI/bge-small-en-v1.5").unwrap().pooling,
            Pooling::Cls
        );
        assert!(find("no-such-model").is_none());
        let clip = find("clip-b32").unwrap();
        assert_eq!((clip.arch.as_str(), clip.dim), ("clip", 512));
        assert_eq!(find("google/siglip-so400m-patch14-384").unwrap().dim, 1152);
        // GritLM as MM-BRIGHT's reference runs it: `encode(..., instruction="")` on both
        // sides (no `<|embed|>`), queries at 256 tokens; an instruction goes into its format
        let grit = find("gritlm").unwrap();
        assert_eq!(
            (grit.pooling, grit.max_seq_len, grit.query_max_seq_len),
            (Pooling::Mean, 2048, Some(256))
        );
        assert_eq!(
            (grit.query_prefix.as_str(), grit.passage_prefix.as_str()),
            ("", "")
        );
        assert_eq!(
            grit.instruction_prefix("Find it").as_deref(),
            Some("<|user|>\nFind it\n<|embed|>\n")
        );
        assert_eq!(
            find("gte-qwen2").unwrap().attention,
            Some(Attention::Bidirectional)
        );
        assert_eq!(find("rader").unwrap().passage_max_chars, Some(8192));
        assert!(find("rader").unwrap().query_template.is_none());
        // Qwen3-Embedding's format has no space after "Query:"
        assert_eq!(
            find("diver").unwrap().instruction_prefix("x").as_deref(),
            Some("Instruct: x\nQuery:")
        );
        assert_eq!(find("e5-mistral").unwrap().query_max_seq_len, None);
        assert_eq!(find("BAAI/BGE-VL-large").unwrap().alias, "bge-vl-large");
        assert_eq!(find("jina-clip-v2").unwrap().dim, 1024);
    }
}
