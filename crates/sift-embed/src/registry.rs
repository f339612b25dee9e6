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
    /// Maximum tokens per input, special tokens included.
    pub max_seq_len: usize,
    /// Maximum tokens of a query when it differs from `max_seq_len` (GritLM: 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_max_seq_len: Option<usize>,
    /// Prepended to queries.
    pub query_prefix: String,
    /// Prepended to passages.
    pub passage_prefix: String,
    /// Licence of the weights.
    pub license: String,
}

static REGISTRY: LazyLock<Vec<ModelInfo>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../../../models/registry.json"))
        .expect("models/registry.json is valid (checked by a test)")
});

/// Every supported model.
pub fn all() -> &'static [ModelInfo] {
    &REGISTRY
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
        // GritLM as MM-BRIGHT's reference runs it: empty instructions, queries at 256 tokens
        let grit = find("gritlm").unwrap();
        assert_eq!(
            (grit.pooling, grit.max_seq_len, grit.query_max_seq_len),
            (Pooling::Mean, 2048, Some(256))
        );
        assert_eq!(grit.query_prefix, "<|embed|>\n");
        assert_eq!(find("e5-mistral").unwrap().query_max_seq_len, None);
    }
}
