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
