//! The tiny Qwen2-VL-Instruct checkpoint the generation tests run (also included by the
//! workspace's end-to-end tests, `tests/common`).
use std::path::{Path, PathBuf};

/// The repository root.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("models/fixtures/gme/tiny-gme").is_dir())
        .expect("the repository root")
        .to_path_buf()
}

/// Assembles the tiny Qwen2-VL-Instruct checkpoint in `dir` (created if missing): the GME
/// fixture's random weights, tokenizer and processor settings with
/// `models/fixtures/qwen2_vl_instruct/chat_template.jinja`.
pub fn tiny_qwen2_vl_instruct(dir: &Path) {
    let root = repository();
    std::fs::create_dir_all(dir).unwrap();
    for f in std::fs::read_dir(root.join("models/fixtures/gme/tiny-gme")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    std::fs::copy(
        root.join("models/fixtures/qwen2_vl_instruct/chat_template.jinja"),
        dir.join("chat_template.jinja"),
    )
    .unwrap();
}

/// Assembles the tiny jina-reranker-m0-shaped checkpoint in `dir` (created if missing):
/// the GME fixture's random Qwen2-VL weights as the first shard, tokenizer and processor
/// settings, and `models/fixtures/jina_reranker_m0`'s relevance head (second shard), config
/// and shard index.
#[allow(dead_code)] // the reranking tests use it, the generation tests do not
pub fn tiny_jina_reranker_m0(dir: &Path) {
    let root = repository();
    let (gme, fixture) = (
        root.join("models/fixtures/gme/tiny-gme"),
        root.join("models/fixtures/jina_reranker_m0"),
    );
    std::fs::create_dir_all(dir).unwrap();
    for f in ["tokenizer.json", "preprocessor_config.json"] {
        std::fs::copy(gme.join(f), dir.join(f)).unwrap();
    }
    std::fs::copy(
        gme.join("model.safetensors"),
        dir.join("model-00001-of-00002.safetensors"),
    )
    .unwrap();
    for f in [
        "config.json",
        "model.safetensors.index.json",
        "model-00002-of-00002.safetensors",
    ] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
}
