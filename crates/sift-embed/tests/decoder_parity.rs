//! Mistral, Qwen2, Qwen3 and Llama (3.1 rotary scaling) decoders as last-token embedders against E5-Mistral's model-card code
//! run through transformers 5.24 (eager attention, f32) on tiny random checkpoints
//! (`models/fixtures/decoder/make_tiny_decoders.py`): identical token ids with the EOS
//! appended (truncated input included), cosine >= 0.9999, in a packed batch and alone.
mod common;
use std::path::PathBuf;

use candle_core::Device;
use sift_embed::{DecoderEmbedder, DecoderOptions, DecoderPooling, ModelFiles, Role};

#[derive(serde::Deserialize)]
struct Reference {
    max_length: usize,
    models: std::collections::BTreeMap<String, Model>,
    gritlm: Grit,
    gritlm_no_instruction: Vec<Item>,
    reasonir: Grit,
    gte_qwen2: Vec<Item>,
    mistral_window: Vec<Item>,
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
    let (root, reference) = load_reference();
    assert_eq!(reference.models.len(), 4);
    for (name, m) in &reference.models {
        let files = ModelFiles::from_dir(&root.join(name)).unwrap();
        let model = DecoderEmbedder::load(
            &files,
            &Device::Cpu,
            DecoderOptions {
                batch_size: 3,
                dtype: common::dtype(),
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
            assert!(
                c >= common::min_cosine(0.9999),
                "{name}: cosine {c} for {:?}",
                item.text
            );
        }
        // a text alone gives the vector it gets in a packed batch
        let alone = model.embed(&texts[1..2], Role::Passage).unwrap();
        assert!(
            cosine(&alone[0], &vectors[1]) > common::min_cosine(0.999999),
            "{name}"
        );
        eprintln!("{name}: worst cosine over {} texts {worst}", vectors.len());
    }
}

/// bf16 on the CPU (the linear layers' bfloat16 weights packed for the processor's bf16
/// kernels, f32 elsewhere; half the weight memory of f32): vectors within cosine 0.999 of
/// the f32 reference.
#[test]
fn bf16_on_the_cpu_stays_within_its_bound() {
    let (root, reference) = load_reference();
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
    let (root, reference) = load_reference();
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
    check(&model, &g.query, Role::Query, "gritlm");
    check(&model, &g.passage, Role::Passage, "gritlm");
}

fn load_reference() -> (PathBuf, Reference) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/decoder");
    let reference: Reference =
        serde_json::from_slice(&std::fs::read(root.join("reference.json")).unwrap()).unwrap();
    (root, reference)
}

/// Ids identical and cosine >= 0.9999 for every item of `role`.
fn check(model: &DecoderEmbedder, items: &[Item], role: Role, what: &str) {
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
    let ids = model.tokenize(&texts, role).unwrap();
    for (item, got) in items.iter().zip(&ids) {
        assert_eq!(
            got, &item.input_ids,
            "{what} {role:?}: ids of {:?}",
            item.text
        );
    }
    let vectors = model.embed(&texts, role).unwrap();
    let mut worst = 1.0f64;
    for (item, v) in items.iter().zip(&vectors) {
        let c = cosine(v, &item.embedding);
        worst = worst.min(c);
        assert!(
            c >= 0.9999,
            "{what} {role:?}: cosine {c} for {:?}",
            item.text
        );
    }
    eprintln!("{what} {role:?}: worst cosine {worst}");
}

/// GritLM as MM-BRIGHT's reference calls it (`instruction=""`): nothing masked, the mean
/// over every token with BOS; and ReasonIR's encode (GritLM's) on a Llama 3.1-style
/// decoder, queries with an instruction, documents without.
#[test]
fn mean_pooling_with_and_without_instructions_matches_encode() {
    let (root, reference) = load_reference();
    let options = |dir: &str, prefixes: (String, String)| {
        let files = ModelFiles::from_dir(&root.join(dir)).unwrap();
        DecoderEmbedder::load(
            &files,
            &Device::Cpu,
            DecoderOptions {
                batch_size: 3,
                pooling: Some(DecoderPooling::MeanAfterPrefix),
                prefixes: Some(prefixes),
                ..Default::default()
            },
        )
        .unwrap()
    };
    let grit = options("tiny-gritlm", (String::new(), String::new()));
    check(
        &grit,
        &reference.gritlm_no_instruction,
        Role::Passage,
        "gritlm, no instruction",
    );
    check(
        &grit,
        &reference.gritlm_no_instruction,
        Role::Query,
        "gritlm, no instruction",
    );
    let r = &reference.reasonir;
    let rir = options(
        "tiny-llama",
        (r.query_prefix.clone(), r.passage_prefix.clone()),
    );
    assert!(!rir.causal());
    check(&rir, &r.query, Role::Query, "reasonir");
    check(&rir, &r.passage, Role::Passage, "reasonir");
}

/// gte-Qwen2's remote code: bidirectional attention with last-token pooling; the causal
/// run of the same weights differs (the fixture script checks), so attention is tested.
#[test]
fn bidirectional_last_token_matches_gte_qwen2_style() {
    let (root, reference) = load_reference();
    let files = ModelFiles::from_dir(&root.join("tiny-qwen2")).unwrap();
    let model = DecoderEmbedder::load(
        &files,
        &Device::Cpu,
        DecoderOptions {
            batch_size: 4,
            causal: Some(false),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(model.pooling(), DecoderPooling::LastToken);
    check(
        &model,
        &reference.gte_qwen2,
        Role::Passage,
        "gte-qwen2 style",
    );
}

/// A task instruction goes into the registry's prompt format: tiny-gritlm under GritLM's
/// registry name with the fixture's instruction makes exactly the reference's GritLM
/// query prefix, at load (`query_instruction`) and per call (`Embedder::embed_queries`).
#[test]
fn query_instructions_use_the_registry_prompt_format() {
    let (root, reference) = load_reference();
    let g = &reference.gritlm;
    let instruction = g
        .query_prefix
        .strip_prefix("<|user|>\n")
        .and_then(|s| s.strip_suffix("\n<|embed|>\n"))
        .unwrap();
    let mut files = ModelFiles::from_dir(&root.join("tiny-gritlm")).unwrap();
    files.name = "GritLM/GritLM-7B".into();
    let model = DecoderEmbedder::load(
        &files,
        &Device::Cpu,
        DecoderOptions {
            query_instruction: Some(instruction.to_string()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(model.prefix(Role::Query), g.query_prefix);
    assert_eq!(model.prefix(Role::Passage), "");
    check(&model, &g.query, Role::Query, "gritlm, instruction at load");

    let embedder = sift_embed::Embedder::from_files(&files, &Default::default()).unwrap();
    assert!(embedder.takes_instruction());
    assert_eq!(
        embedder.bright_instruction(),
        Some("Given a {domain} post, retrieve relevant passages that help answer the post")
    );
    let texts: Vec<&str> = g.query.iter().map(|i| i.text.as_str()).collect();
    let vectors = embedder.embed_queries(&texts, Some(instruction)).unwrap();
    for (item, v) in g.query.iter().zip(&vectors) {
        let c = cosine(v, &item.embedding);
        assert!(
            c >= 0.9999,
            "per-call instruction: cosine {c} for {:?}",
            item.text
        );
    }
    // without one, queries are embedded as MM-BRIGHT's reference does (no prefix)
    let plain = embedder.embed_queries(&texts, None).unwrap();
    let ref_plain = model
        .embed_tokens_after(
            &model.tokenize_with_prefix(&texts, Role::Query, "").unwrap(),
            0,
        )
        .unwrap();
    for (a, b) in plain.iter().zip(&ref_plain) {
        assert!(cosine(a, b) > 0.999999);
    }
    assert!(
        cosine(&plain[0], &vectors[0]) < 0.9999,
        "the instruction changes the vector"
    );
}

/// Mistral's sliding window shorter than the input (8 tokens over inputs up to 64) against
/// transformers' sliding-window causal mask; the fixture script checks the window changes
/// the vectors.
#[test]
fn mistral_sliding_window_matches_transformers() {
    let (root, reference) = load_reference();
    let files = ModelFiles::from_dir(&root.join("tiny-mistral-window")).unwrap();
    let model = DecoderEmbedder::load(
        &files,
        &Device::Cpu,
        DecoderOptions {
            batch_size: 3,
            ..Default::default()
        },
    )
    .unwrap();
    check(
        &model,
        &reference.mistral_window,
        Role::Passage,
        "mistral, window 8",
    );
    // bidirectional attention over a window is refused, not run wrongly
    let err = DecoderEmbedder::load(
        &files,
        &Device::Cpu,
        DecoderOptions {
            causal: Some(false),
            ..Default::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("sliding window of 8 tokens"), "{err}");
}
