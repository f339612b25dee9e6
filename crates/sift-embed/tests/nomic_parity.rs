//! Nomic Embed v1.5 against its published modelling code (vendored in
//! `models/fixtures/nomic/vendor/`, run by `models/fixtures/nomic/make_tiny_nomic.py` on tiny
//! random checkpoints; transformers 5's own NomicBERT port agrees with it there): the text
//! tower's token ids and vectors (the model card's prefixes, mean, weightless layer norm,
//! Matryoshka cut, L2) including an input truncated at 8,192 tokens, and the image tower's
//! pixels and vectors (token 0 after the attention-pooling head) for four awkward images.
use std::path::PathBuf;

mod common;

use candle_core::Device;
use sift_embed::{
    Embedder, ModelFiles, NomicEmbedder, NomicOptions, PreparedImage, TextEmbedder,
    TextEmbedderOptions,
};

#[derive(serde::Deserialize)]
struct Reference {
    text: Text,
    vision: Vision,
}

#[derive(serde::Deserialize)]
struct Text {
    items: Vec<TextItem>,
}

#[derive(serde::Deserialize)]
struct TextItem {
    task: Option<String>,
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
    matryoshka: std::collections::BTreeMap<String, Vec<f32>>,
}

#[derive(serde::Deserialize)]
struct Vision {
    images: Vec<Image>,
    embeddings: Vec<Vec<f32>>,
}

#[derive(serde::Deserialize)]
struct Image {
    file: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/nomic")
}

fn reference() -> Reference {
    serde_json::from_slice(&std::fs::read(root().join("reference.json")).unwrap()).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn nomic_text_matches_the_published_code() {
    let r = reference();
    let files = ModelFiles::from_dir(&root().join("tiny-nomic-embed-text-v1.5")).unwrap();
    for dim in [None, Some(32), Some(16)] {
        let model = TextEmbedder::load(
            &files,
            &Device::Cpu,
            TextEmbedderOptions {
                batch_size: 4,
                dim,
                dtype: common::dtype(),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(model.max_seq_len(), 8192);
        let mut worst = 1.0f64;
        for item in &r.text.items {
            let prefix = item
                .task
                .as_ref()
                .map(|t| format!("{t}: "))
                .unwrap_or_default();
            let ids = model.tokenize_with_prefix(&[&item.text], &prefix).unwrap();
            assert_eq!(ids[0], item.input_ids, "ids of {:?}", item.text);
            let v = model.embed_tokens(&ids).unwrap().pop().unwrap();
            let want = match dim {
                None => &item.embedding,
                Some(d) => &item.matryoshka[&d.to_string()],
            };
            let c = cosine(&v, want);
            worst = worst.min(c);
            assert!(
                c >= common::min_cosine(0.9999) && max_diff(&v, want) < common::max_abs_diff(1e-4),
                "dim {dim:?}: cosine {c} for {:?}",
                item.text
            );
        }
        eprintln!("nomic text, dim {dim:?}: worst cosine {worst}");
    }
    // a batch (packed, sorted by length) gives the same vectors as one at a time
    let options = TextEmbedderOptions {
        dtype: common::dtype(),
        ..Default::default()
    };
    let model = TextEmbedder::load(&files, &Device::Cpu, options).unwrap();
    let short: Vec<&TextItem> = r
        .text
        .items
        .iter()
        .filter(|i| i.input_ids.len() < 100)
        .collect();
    let ids: Vec<Vec<u32>> = short.iter().map(|i| i.input_ids.clone()).collect();
    for (item, v) in short.iter().zip(model.embed_tokens(&ids).unwrap()) {
        assert!(
            cosine(&v, &item.embedding) >= common::min_cosine(0.9999),
            "batched: {:?}",
            item.text
        );
    }
}

#[test]
fn nomic_vision_matches_the_published_code() {
    let r = reference();
    let files = ModelFiles::from_dir(&root().join("tiny-nomic-embed-vision-v1.5")).unwrap();
    // the text checkpoint is found beside it (`vision` -> `text` in the directory name)
    let options = NomicOptions {
        dtype: common::dtype(),
        ..Default::default()
    };
    let model = NomicEmbedder::load(&files, &Device::Cpu, options).unwrap();
    assert_eq!(model.text().dim(), 64);
    let bytes: Vec<Vec<u8>> = r
        .vision
        .images
        .iter()
        .map(|i| std::fs::read(root().join(&i.file)).unwrap())
        .collect();
    let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let prepared: Vec<Vec<f32>> = model
        .prepare(&refs)
        .into_iter()
        .map(|p| p.unwrap())
        .collect();
    // pixels as the published processor makes them
    let want = candle_core::safetensors::load(
        root().join("vision_pixel_values.safetensors"),
        &Device::Cpu,
    )
    .unwrap();
    let want = want["pixel_values"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let got: Vec<f32> = prepared.iter().flatten().copied().collect();
    assert!(
        max_diff(&got, &want) < 1e-5,
        "pixels differ by {}",
        max_diff(&got, &want)
    );
    let vectors = model.embed_prepared(&prepared).unwrap();
    let mut worst = 1.0f64;
    for ((img, v), want) in r
        .vision
        .images
        .iter()
        .zip(&vectors)
        .zip(&r.vision.embeddings)
    {
        let c = cosine(v, want);
        worst = worst.min(c);
        assert!(
            c >= common::min_cosine(0.9999) && max_diff(v, want) < common::max_abs_diff(1e-4),
            "cosine {c} for {}",
            img.file
        );
    }
    eprintln!("nomic vision: worst cosine {worst}");
    // one at a time equals the batch
    let one = model.embed_prepared(&prepared[1..2]).unwrap();
    assert!(cosine(&one[0], &vectors[1]) > common::min_cosine(0.999999));

    // through the one Embedder API: the family, texts by role with the registry's prefixes
    // absent (the tiny names are not in it), images
    let e = Embedder::from_files(
        &files,
        &sift_embed::EmbedderOptions {
            dtype: common::precision(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(e.family(), sift_embed::Family::Nomic);
    assert!(e.capabilities().images);
    let p: Vec<PreparedImage> = e
        .prepare_images(&refs)
        .into_iter()
        .map(|p| p.unwrap())
        .collect();
    let v = e.embed_images(&p).unwrap();
    assert!(cosine(&v[0], &r.vision.embeddings[0]) >= common::min_cosine(0.9999));
    let t = e
        .embed_texts(&["who is the first president"], sift_embed::Role::Query)
        .unwrap();
    assert_eq!(t[0].len(), 64);
}
