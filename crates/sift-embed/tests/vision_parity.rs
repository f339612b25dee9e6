//! CLIP and SigLIP towers against transformers on tiny random-initialised checkpoints.
//!
//! Fixtures: `models/fixtures/vision/<model>/` (weights, tokenizer, configs and
//! `reference.json` with transformers' token ids, pixel values and features), made by
//! `python3 models/fixtures/vision/make_vision_fixtures.py` (versions in its README).
//! Every checkpoint directory there is tested, so other configurations can be dropped in.
//! Criterion: per text / image, cosine >= 0.9999 and max abs diff <= 1e-4 against the
//! unnormalised transformers features.
mod common;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::Deserialize;
use sift_embed::{ModelFiles, VisionEmbedder, VisionOptions};

#[derive(Deserialize)]
struct Reference {
    texts: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    text_embeds: Vec<Vec<f32>>,
    #[serde(default)]
    text_embeds_with_attention_mask: Option<Vec<Vec<f32>>>,
    pixel_values: Vec<Vec<Vec<Vec<f32>>>>,
    image_embeds: Vec<Vec<f32>>,
}

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/vision");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        // checkpoints only (siglip-spm/ is a tokenizer-only fixture: siglip_tokenizer.rs)
        .filter(|p| p.join("reference.json").is_file() && p.join("config.json").is_file())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 4, "fixtures missing under {}", root.display());
    dirs
}

fn compare(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what} {i}: dimension");
        let dot: f64 = g.iter().zip(w).map(|(a, b)| *a as f64 * *b as f64).sum();
        let ng: f64 = g.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let nw: f64 = w.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let cos = dot / (ng * nw);
        let diff = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            cos >= common::min_cosine(0.9999) && diff <= common::max_abs_diff(1e-4),
            "{what} {i}: cosine {cos}, max abs diff {diff}"
        );
    }
}

fn load(dir: &Path, mask: bool) -> VisionEmbedder {
    let files = ModelFiles::from_dir(dir).unwrap();
    let options = VisionOptions {
        siglip_text_mask: mask,
        dtype: common::dtype(),
        ..VisionOptions::default()
    };
    VisionEmbedder::load(&files, &Device::Cpu, options).unwrap()
}

#[test]
fn text_and_image_towers_match_transformers() {
    for dir in fixtures() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let r: Reference =
            serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
                .unwrap();
        let model = load(&dir, false);
        // tokenisation identical to the transformers tokenizer
        let texts: Vec<&str> = r.texts.iter().map(String::as_str).collect();
        let tokens = model.tokenize(&texts).unwrap();
        for (i, ((ids, _), want)) in tokens.iter().zip(&r.input_ids).enumerate() {
            assert_eq!(ids, want, "{name}: token ids of text {i} {:?}", r.texts[i]);
        }
        // text features, in one packed batch
        let got = model
            .text_features(&tokens)
            .unwrap()
            .to_dtype(candle_core::DType::F32)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        compare(&format!("{name} text"), &got, &r.text_embeds);
        if let Some(masked) = &r.text_embeds_with_attention_mask {
            let model = load(&dir, true);
            let got = model
                .text_features(&tokens)
                .unwrap()
                .to_dtype(candle_core::DType::F32)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            compare(&format!("{name} text (attention mask)"), &got, masked);
        }
        // image features from transformers' own pixel values
        let n = r.pixel_values.len();
        let flat: Vec<f32> = r
            .pixel_values
            .iter()
            .flatten()
            .flatten()
            .flatten()
            .copied()
            .collect();
        let side = r.pixel_values[0][0].len();
        let pixels = Tensor::from_vec(flat, (n, 3, side, side), &Device::Cpu).unwrap();
        let got = model
            .image_features(&pixels)
            .unwrap()
            .to_dtype(candle_core::DType::F32)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        compare(&format!("{name} image"), &got, &r.image_embeds);
        // the normalised vectors are the unit versions of the features
        let unit = model.embed_texts(&texts[..2]).unwrap();
        let norm: f32 = unit[0].iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-5, "{name}: unit vectors");
    }
}

#[test]
fn missing_weights_are_an_error_not_a_random_fill() {
    let src = &fixtures()[0];
    let tmp = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(src).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            std::fs::copy(&f, tmp.path().join(f.file_name().unwrap())).unwrap();
        }
    }
    // drop one tensor from the checkpoint
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| !n.ends_with("final_layer_norm.weight"))
        .collect();
    safetensors::serialize_to_file(kept, None, &tmp.path().join("model.safetensors")).unwrap();
    let files = ModelFiles::from_dir(tmp.path()).unwrap();
    let err = VisionEmbedder::load(&files, &Device::Cpu, VisionOptions::default())
        .err()
        .expect("loading must fail");
    assert!(err.to_string().contains("final_layer_norm"), "{err}");
}
