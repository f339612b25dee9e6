//! Jina-CLIP v1 against `JinaCLIPModel.encode_text` / `encode_image` of jina-clip-implementation's
//! `modeling_clip.py` (vendored in `models/fixtures/jina_clip/vendor/`, run by
//! `models/fixtures/jina_clip/make_tiny_jina_clip.py` on a tiny random checkpoint; the README
//! there says which parts of the reference are published code and which are not): token ids
//! and text vectors (mean of JinaBERT's states, L2) including a text truncated at 512 tokens,
//! and the pixels and vectors of four awkward images (torchvision's resize and rounded centre
//! crop, EVA02 with 2-D rotary positions), all through `Embedder::load`.
use std::path::PathBuf;

mod common;

use candle_core::Device;
use sift_embed::{
    Embedder, EmbedderOptions, Family, JinaClipEmbedder, ModelFiles, PreparedImage, Role,
};

#[derive(serde::Deserialize)]
struct Reference {
    text: Text,
    vision: Vision,
}

#[derive(serde::Deserialize)]
struct Text {
    max_seq_length: usize,
    alibi_slopes: Vec<f32>,
    items: Vec<TextItem>,
}

#[derive(serde::Deserialize)]
struct TextItem {
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Vision {
    images: Vec<Image>,
    pixel_values_file: String,
    embeddings: Vec<Vec<f32>>,
}

#[derive(serde::Deserialize)]
struct Image {
    file: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/jina_clip")
}

fn checkpoint() -> String {
    root()
        .join("tiny-jina-clip-v1")
        .to_string_lossy()
        .into_owned()
}

fn reference() -> Reference {
    serde_json::from_slice(&std::fs::read(root().join("reference.json")).unwrap()).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
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

/// The text tower in the suites' dtype (`SIFT_TEST_DTYPE`; see `common`).
fn text_options() -> EmbedderOptions {
    EmbedderOptions {
        dtype: common::precision(),
        ..Default::default()
    }
}

#[test]
fn jina_clip_texts_match_the_published_code() {
    let r = reference();
    let e = Embedder::load(&checkpoint(), &text_options()).unwrap();
    assert_eq!(e.family(), Family::JinaClip);
    assert_eq!(e.max_text_tokens(), r.text.max_seq_length);
    assert!(!e.takes_instruction());
    let texts: Vec<&str> = r.text.items.iter().map(|i| i.text.as_str()).collect();
    // the ids, as the published tokenizer call makes them (truncated at 512)
    let files = ModelFiles::from_dir(&root().join("tiny-jina-clip-v1")).unwrap();
    let model = JinaClipEmbedder::load(&files, &Device::Cpu, Default::default()).unwrap();
    let ids = model.tokenize(&texts).unwrap();
    for (item, got) in r.text.items.iter().zip(&ids) {
        assert_eq!(got, &item.input_ids, "ids of {:?}", item.text);
    }
    assert!(ids.iter().any(|i| i.len() == r.text.max_seq_length));
    // ALiBi's slopes for the tiny model's 6 heads (not a power of two, like the real 12)
    let slopes = sift_nn::models::jina_bert::alibi_slopes(r.text.alibi_slopes.len());
    for (got, want) in slopes.iter().zip(&r.text.alibi_slopes) {
        assert_eq!(*got as f32, *want);
    }
    // the vectors, through the uniform API, for both roles (the model has no prefixes)
    for role in [Role::Query, Role::Passage] {
        let vectors = e.embed_texts(&texts, role).unwrap();
        let mut worst = 1.0f64;
        for (item, v) in r.text.items.iter().zip(&vectors) {
            let c = cosine(v, &item.embedding);
            worst = worst.min(c);
            assert!(
                c >= common::min_cosine(0.9999)
                    && max_diff(v, &item.embedding) <= common::max_abs_diff(1e-4),
                "cosine {c} for {:?}",
                item.text
            );
        }
        eprintln!("jina-clip text ({role:?}): worst cosine {worst}");
    }
    // one at a time equals the batch
    for item in &r.text.items {
        let v = e.embed_texts(&[&item.text], Role::Query).unwrap();
        assert!(
            cosine(&v[0], &item.embedding) >= common::min_cosine(0.9999),
            "{:?}",
            item.text
        );
    }
    // an instruction is refused: the model takes none
    assert!(e.embed_queries(&["x"], Some("Find it")).is_err());
}

#[test]
fn jina_clip_images_match_the_published_code() {
    let r = reference();
    let e = Embedder::load(&checkpoint(), &EmbedderOptions::default()).unwrap();
    assert!(e.capabilities().images && !e.capabilities().joint);
    let bytes: Vec<Vec<u8>> = r
        .vision
        .images
        .iter()
        .map(|i| std::fs::read(root().join(&i.file)).unwrap())
        .collect();
    let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let prepared: Vec<PreparedImage> = e
        .prepare_images(&refs)
        .into_iter()
        .map(|p| p.unwrap())
        .collect();
    // pixels as the published processor makes them
    let want =
        candle_core::safetensors::load(root().join(&r.vision.pixel_values_file), &Device::Cpu)
            .unwrap();
    let want = want["pixel_values"]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let got: Vec<f32> = prepared
        .iter()
        .flat_map(|p| match p {
            PreparedImage::Pixels(v) => v.clone(),
            other => panic!("not pixels: {other:?}"),
        })
        .collect();
    assert!(
        max_diff(&got, &want) < 1e-5,
        "pixels differ by {}",
        max_diff(&got, &want)
    );
    let vectors = e.embed_images(&prepared).unwrap();
    assert_eq!(vectors.len(), r.vision.embeddings.len());
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
            c >= 0.9999 && max_diff(v, want) < 1e-4,
            "cosine {c} for {}",
            img.file
        );
    }
    eprintln!("jina-clip images: worst cosine {worst}");
    // one at a time equals the batch
    let one = e.embed_images(&prepared[2..3]).unwrap();
    assert!(cosine(&one[0], &vectors[2]) > 0.999999);
    assert_eq!(e.dim(), vectors[0].len());
}

#[test]
fn jina_clip_bad_configs_are_clear_errors() {
    let dir = std::env::temp_dir().join(format!("sift-jina-clip-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = root().join("tiny-jina-clip-v1");
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    let load_with = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut c = config.clone();
        edit(&mut c);
        std::fs::write(dir.join("config.json"), serde_json::to_vec(&c).unwrap()).unwrap();
        Embedder::load(&dir.to_string_lossy(), &EmbedderOptions::default())
            .err()
            .map(|e| e.to_string())
    };
    let pooler = load_with(&|c| c["text_config"]["pooler_type"] = "max_pooler".into()).unwrap();
    assert!(
        pooler.contains("config.json") && pooler.contains("max_pooler"),
        "{pooler}"
    );
    let tower = load_with(&|c| {
        c["text_config"]["hf_model_name_or_path"] = "jinaai/jina-embeddings-v3".into()
    })
    .unwrap();
    assert!(tower.contains("hf_model_name_or_path"), "{tower}");
    // a text tower of the wrong width does not match the weights
    let width =
        load_with(&|c| c["text_config"]["hf_model_config_kwargs"]["hidden_size"] = 60.into())
            .unwrap();
    assert!(width.contains("JinaBERT"), "{width}");
    let heads = load_with(&|c| c["vision_config"]["head_width"] = 7.into()).unwrap();
    assert!(heads.contains("vision_config"), "{heads}");
    // a checkpoint missing one tensor does not load
    load_with(&|_| {});
    let weights = src.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    assert!(
        tensors
            .remove("vision_model.blocks.1.attn.v_bias")
            .is_some()
    );
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    let missing = Embedder::load(&dir.to_string_lossy(), &EmbedderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap();
    assert!(missing.contains("v_bias"), "{missing}");
    let _ = std::fs::remove_dir_all(&dir);
}
