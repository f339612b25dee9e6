//! Mistral, Qwen2, Qwen3 and Llama (3.1 rotary scaling) decoders as last-token embedders against E5-Mistral's model-card code
//! run through transformers 5.24 (eager attention, f32) on tiny random checkpoints
//! (`models/fixtures/decoder/make_tiny_decoders.py`): identical token ids with the EOS
//! appended (truncated input included), cosine >= 0.9999, in a packed batch and alone.
use std::path::PathBuf;

use candle_core::Device;
use sift_embed::{DecoderEmbedder, DecoderOptions, DecoderPooling, ModelFiles, Role};

#[derive(serde::Deserialize)]
struct Reference {
    max_length: usize,
    models: std::collections::BTreeMap<String, Model>,
    gritlm: Grit,
}

#[derive(serde::Deserialize)]
struct Grit {
    query_prefix: String,
    passage_prefix: String,
    query: Vec<Item>,
    passage: Vec<Item>,
}

#[derive(serde::Deserialize)]
struct Model {
    items: Vec<Item>,
}

#[derive(serde::Deserialize)]
struct Item {
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn decoders_match_the_model_card_code() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/decoder");
    let reference: Reference =
        serde_json::from_slice(&std::fs::read(root.join("reference.json")).unwrap()).unwrap();
    assert_eq!(reference.models.len(), 4);
    for (name, m) in &reference.models {
        let files = ModelFiles::from_dir(&root.join(name)).unwrap();
        let model = DecoderEmbedder::load(
            &files,
            &Device::Cpu,
            DecoderOptions {
                batch_size: 3,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(model.max_seq_len(), reference.max_length);
        let texts: Vec<&str> = m.items.iter().map(|i| i.text.as_str()).collect();
        let ids = model.tokenize(&texts, Role::Passage).unwrap();
        for (item, got) in m.items.iter().zip(&ids) {
            assert_eq!(got, &item.input_ids, "{name}: ids of {:?}", item.text);
        }
        assert!(
            ids.iter().any(|i| i.len() == reference.max_length),
            "{name}: a text is cut"
        );
        let vectors = model.embed(&texts, Role::Passage).unwrap();
        let mut worst = 1.0f64;
        for (item, v) in m.items.iter().zip(&vectors) {
            let c = cosine(v, &item.embedding);
            worst = worst.min(c);
            assert!(c >= 0.9999, "{name}: cosine {c} for {:?}", item.text);
        }
        // a text alone gives the vector it gets in a packed batch
        let alone = model.embed(&texts[1..2], Role::Passage).unwrap();
        assert!(cosine(&alone[0], &vectors[1]) > 0.999999, "{name}");
        eprintln!("{name}: worst cosine over {} texts {worst}", vectors.len());
    }
}

/// bf16 weights and activations on the CPU (candle's generic ops; half the memory of f32):
/// the same ids, and vectors within cosine 0.999 of the f32 reference.
#[test]
fn bf16_on_the_cpu_stays_within_its_bound() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/decoder");
    let reference: Reference =
        serde_json::from_slice(&std::fs::read(root.join("reference.json")).unwrap()).unwrap();
    for (name, m) in &reference.models {
        let files = ModelFiles::from_dir(&root.join(name)).unwrap();
        let model = DecoderEmbedder::load(
            &files,
            &Device::Cpu,
            DecoderOptions {
                dtype: candle_core::DType::BF16,
                ..Default::default()
            },
        )
        .unwrap();
        let texts: Vec<&str> = m.items.iter().map(|i| i.text.as_str()).collect();
        let vectors = model.embed(&texts, Role::Passage).unwrap();
        let mut worst = 1.0f64;
        for (item, v) in m.items.iter().zip(&vectors) {
            let c = cosine(v, &item.embedding);
            worst = worst.min(c);
            assert!(c >= 0.999, "{name} bf16: cosine {c} for {:?}", item.text);
        }
        eprintln!("{name} bf16: worst cosine {worst}");
    }
}

/// GritLM's embedding mode (bidirectional attention, mean over the tokens after the
/// instruction) against GritLM's published `encode`, for queries with an instruction and
/// documents with `<|embed|>\n`, on tiny-mistral's weights.
#[test]
fn gritlm_mode_matches_gritlm_encode() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/decoder");
    let reference: Reference =
        serde_json::from_slice(&std::fs::read(root.join("reference.json")).unwrap()).unwrap();
    let g = &reference.gritlm;
    let files = ModelFiles::from_dir(&root.join("tiny-gritlm")).unwrap();
    let model = DecoderEmbedder::load(
        &files,
        &Device::Cpu,
        DecoderOptions {
            batch_size: 3,
            pooling: Some(DecoderPooling::MeanAfterPrefix),
            prefixes: Some((g.query_prefix.clone(), g.passage_prefix.clone())),
            ..Default::default()
        },
    )
    .unwrap();
    for (role, items) in [(Role::Query, &g.query), (Role::Passage, &g.passage)] {
        let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
        let ids = model.tokenize(&texts, role).unwrap();
        for (item, got) in items.iter().zip(&ids) {
            assert_eq!(got, &item.input_ids, "{role:?}: ids of {:?}", item.text);
        }
        let vectors = model.embed(&texts, role).unwrap();
        let mut worst = 1.0f64;
        for (item, v) in items.iter().zip(&vectors) {
            let c = cosine(v, &item.embedding);
            worst = worst.min(c);
            assert!(c >= 0.9999, "{role:?}: cosine {c} for {:?}", item.text);
        }
        eprintln!("gritlm {role:?}: worst cosine {worst}");
    }
}
