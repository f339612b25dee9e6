//! A Contriever-layout checkpoint (facebook/contriever-msmarco ships config.json,
//! pytorch_model.bin, vocab.txt and tokenizer_config.json: no tokenizer.json, no safetensors)
//! loads, tokenises as transformers' BertTokenizerFast does from vocab.txt, and embeds as
//! sentence-transformers' mean pooling does. Fixture and script:
//! `models/fixtures/contriever/` (`make_tiny_contriever.py`: tiny random BERT, seed 0).
mod common;

use std::path::PathBuf;

use candle_core::Device;
use sift_embed::{ModelFiles, Pooling, Role, TextEmbedder, TextEmbedderOptions};

#[derive(serde::Deserialize)]
struct Reference {
    max_seq_length: usize,
    items: Vec<Item>,
}

#[derive(serde::Deserialize)]
struct Item {
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
}

#[test]
fn tiny_contriever_matches_sentence_transformers() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/contriever");
    let dir = root.join("tiny-contriever");
    let reference: Reference =
        serde_json::from_slice(&std::fs::read(root.join("reference.json")).unwrap()).unwrap();
    let files = ModelFiles::from_dir(&dir).unwrap();
    assert!(
        files.tokenizer.ends_with("vocab.txt"),
        "{:?}",
        files.tokenizer
    );
    assert!(files.weights[0].ends_with("pytorch_model.bin"));
    let model = TextEmbedder::load(
        &files,
        &Device::Cpu,
        TextEmbedderOptions {
            batch_size: 4,
            dtype: common::dtype(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(model.pooling(), Pooling::Mean);
    assert_eq!(model.max_seq_len(), reference.max_seq_length);
    let texts: Vec<&str> = reference.items.iter().map(|i| i.text.as_str()).collect();
    let ids = model.tokenize(&texts, Role::Passage).unwrap();
    for (item, got) in reference.items.iter().zip(&ids) {
        assert_eq!(got, &item.input_ids, "token ids differ for {:?}", item.text);
    }
    assert!(ids.iter().any(|i| i.len() == 512), "one text is truncated");
    let vectors = model.embed(&texts, Role::Passage).unwrap();
    let mut worst = 1.0f64;
    for (item, v) in reference.items.iter().zip(&vectors) {
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
    }
    eprintln!("worst cosine over {} texts: {worst}", vectors.len());
}

/// The registry knows Contriever as the paper's reference code runs it: mean pooling, no
/// prefixes, 512 tokens.
#[test]
fn contriever_is_registered() {
    let m = sift_embed::registry::find("contriever").unwrap();
    assert_eq!(m.id, "facebook/contriever-msmarco");
    assert_eq!(m.pooling, Pooling::Mean);
    assert_eq!(
        (m.query_prefix.as_str(), m.passage_prefix.as_str()),
        ("", "")
    );
    assert_eq!(m.max_seq_len, 512);
}
