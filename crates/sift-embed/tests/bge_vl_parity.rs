//! BGE-VL against its published modelling code (`modeling_MMRet_CLIP.py`, vendored in
//! `models/fixtures/bge_vl/vendor/`, run by `models/fixtures/bge_vl/make_tiny_bge_vl.py` on a
//! tiny random CLIP checkpoint): text ids and vectors, image vectors, the joint
//! `encode(images, text)` (the raw features summed), and, in the reference profile, the text
//! MM-BRIGHT's reference code embeds for each document (150 characters at a word boundary,
//! shorter until the tower accepts it) with its vector.
use std::path::PathBuf;

use sift_embed::{Embedder, EmbedderOptions, JointInput, Profile, ReferenceModel, Role};

#[derive(serde::Deserialize)]
struct Reference {
    texts: Vec<TextItem>,
    images: Vec<ImageItem>,
    joint: Vec<JointItem>,
    reference_documents: Vec<DocItem>,
}

#[derive(serde::Deserialize)]
struct TextItem {
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct ImageItem {
    file: String,
    embedding: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct JointItem {
    text: String,
    file: String,
    embedding: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct DocItem {
    text: String,
    embedded_text: String,
    embedding: Vec<f32>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures")
}

fn reference() -> Reference {
    let path = root().join("bge_vl/reference.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn load(profile: Profile) -> Embedder {
    let dir = root().join("bge_vl/tiny-bge-vl");
    Embedder::load(
        dir.to_str().unwrap(),
        &EmbedderOptions {
            profile,
            ..Default::default()
        },
    )
    .unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn image(file: &str) -> Vec<u8> {
    std::fs::read(root().join("vision/images").join(file)).unwrap()
}

#[test]
fn bge_vl_is_told_from_its_config_and_composes_text_with_images() {
    let m = load(Profile::Default);
    assert_eq!(m.reference_model(), ReferenceModel::BgeVl);
    assert!(m.capabilities().joint && m.capabilities().images);
    // the plain CLIP checkpoint it was made from is not BGE-VL
    let clip = Embedder::load(
        root().join("vision/tiny-clip-quickgelu").to_str().unwrap(),
        &EmbedderOptions::default(),
    )
    .unwrap();
    assert_eq!(clip.reference_model(), ReferenceModel::Clip);
    assert!(!clip.capabilities().joint);
}

#[test]
fn bge_vl_texts_images_and_joint_inputs_match_the_published_code() {
    let r = reference();
    let m = load(Profile::Default);
    let mut worst = 1.0f64;
    for item in &r.texts {
        let ids = m.as_vision().unwrap().tokenize(&[&item.text]).unwrap();
        assert_eq!(ids[0].0, item.input_ids, "ids of {:?}", item.text);
        let v = m
            .embed_texts(&[&item.text], Role::Passage)
            .unwrap()
            .pop()
            .unwrap();
        let c = cosine(&v, &item.embedding);
        assert!(c >= 0.9999, "text {:?}: cosine {c}", item.text);
        worst = worst.min(c);
    }
    let bytes: Vec<Vec<u8>> = r.images.iter().map(|i| image(&i.file)).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let prepared: Vec<_> = m
        .prepare_images(&refs)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    for (item, v) in r.images.iter().zip(m.embed_images(&prepared).unwrap()) {
        let c = cosine(&v, &item.embedding);
        assert!(c >= 0.9999, "image {}: cosine {c}", item.file);
        worst = worst.min(c);
    }
    for item in &r.joint {
        let img = m
            .prepare_images(&[&image(&item.file)])
            .pop()
            .unwrap()
            .unwrap();
        let v = m
            .embed_joint(
                &[JointInput {
                    text: Some(&item.text),
                    images: &[&img],
                }],
                Role::Query,
            )
            .unwrap()
            .pop()
            .unwrap();
        let c = cosine(&v, &item.embedding);
        assert!(c >= 0.9999, "joint {:?}: cosine {c}", item.text);
        worst = worst.min(c);
    }
    eprintln!("BGE-VL: worst cosine {worst}");
    assert!(worst >= 0.9999, "worst cosine {worst}");
}

#[test]
fn bge_vl_reference_profile_embeds_the_reference_codes_document_text() {
    let r = reference();
    let reference = load(Profile::Reference);
    let default = load(Profile::Default);
    let mut shortened = 0;
    for item in &r.reference_documents {
        let v = reference
            .embed_texts(&[&item.text], Role::Passage)
            .unwrap()
            .pop()
            .unwrap();
        let c = cosine(&v, &item.embedding);
        assert!(
            c >= 0.9999,
            "reference document {:?}: cosine {c}",
            item.text
        );
        // the text it embeds is the reference's cut: the default profile's vector of that
        // cut is the same vector
        let cut = default
            .embed_texts(&[&item.embedded_text], Role::Passage)
            .unwrap()
            .pop()
            .unwrap();
        assert!(cosine(&v, &cut) >= 0.99999, "{:?}", item.text);
        if item.embedded_text.chars().count() < 150 && item.text.chars().count() > 150 {
            shortened += 1;
        }
    }
    // the fixture holds texts the retry loop had to shorten below 150 characters
    assert!(shortened >= 2, "{shortened}");
    assert_ne!(
        reference.fingerprint(sift_embed::Input::Text(Role::Passage)),
        default.fingerprint(sift_embed::Input::Text(Role::Passage))
    );
}
