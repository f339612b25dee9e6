//! GME against transformers: a tiny random-initialised Qwen2-VL checkpoint and the vectors
//! transformers computes for it (models/fixtures/gme/, made by
//! `python3 -m models.fixtures.gme.make_gme_fixtures`, from the repository root).
//!
//! - Every case (text-only queries and candidates, image-only candidates, text + image,
//!   two images + text) gives the same token ids and patch grids, and vectors with a cosine
//!   of at least 0.9999 to transformers', with GME's sequential positions and with M-RoPE
//!   positions; embedding the cases in one batch gives the same vectors as one by one.
//! - Preprocessing: GME's two resizes give the processor's image exactly (pixel for pixel),
//!   and the flattened patches its `pixel_values` (sums and whole rows).
mod common;

use std::path::{Path, PathBuf};

use candle_core::Device;
use serde_json::Value;
use sift_embed::families::gme::{GmeProcessor, smart_resize_fetch, smart_resize_processor};
use sift_embed::{GmeEmbedder, GmeImage, GmeInput, GmeOptions, GmePositions, ModelFiles};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/gme")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(root().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("valid JSON")
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn load(positions: GmePositions) -> GmeEmbedder {
    let files = ModelFiles::from_dir(&root().join("tiny-gme")).expect("fixture model");
    GmeEmbedder::load(
        &files,
        &Device::Cpu,
        GmeOptions {
            batch_size: 4,
            positions,
            dtype: common::dtype(),
            ..Default::default()
        },
    )
    .expect("loads")
}

/// The processor's resized image of `path` as transformers made it (for the model's pixel
/// bounds), from the fixture.
fn pillow_resized(path: &str, model: &GmeEmbedder) -> image::RgbImage {
    let e = expected();
    let entry = e["preprocess"]
        .as_array()
        .expect("preprocess")
        .iter()
        .find(|p| {
            p["image"] == path && p["max_pixels"].as_u64() == Some(model.processor().max_pixels)
        })
        .expect("a preprocess entry for the image");
    image::open(root().join(entry["resized_png"].as_str().expect("png")))
        .expect("png")
        .to_rgb8()
}

struct Case {
    name: String,
    instruction: String,
    text: Option<String>,
    images: Vec<GmeImage>,
    ids: Vec<u32>,
    grids: Vec<[usize; 3]>,
    gme: Vec<f32>,
    mrope: Vec<f32>,
}

fn cases(model: &GmeEmbedder) -> Vec<Case> {
    expected()["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let images = c["images"]
                .as_array()
                .expect("images")
                .iter()
                .map(|p| {
                    let path = p.as_str().expect("path");
                    if path.ends_with(".jpg") {
                        // JPEG decoders differ by a few levels (zune-jpeg vs libjpeg-turbo):
                        // the model is checked on Pillow's pixels, the decoder on its own
                        return model.processor().patchify(&pillow_resized(path, model));
                    }
                    let bytes = std::fs::read(root().join(path)).expect("image");
                    model.processor().prepare(&bytes, None).expect("decodes")
                })
                .collect();
            Case {
                name: c["name"].as_str().expect("name").to_string(),
                instruction: c["instruction"].as_str().expect("instruction").to_string(),
                text: c["text"].as_str().map(str::to_string),
                images,
                ids: c["input_ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|x| x.as_u64().expect("id") as u32)
                    .collect(),
                grids: c["image_grid_thw"]
                    .as_array()
                    .expect("grids")
                    .iter()
                    .map(|g| {
                        let g: Vec<usize> = g
                            .as_array()
                            .expect("grid")
                            .iter()
                            .map(|x| x.as_u64().expect("int") as usize)
                            .collect();
                        [g[0], g[1], g[2]]
                    })
                    .collect(),
                gme: floats(&c["embedding_gme"]),
                mrope: floats(&c["embedding_mrope"]),
            }
        })
        .collect()
}

fn check(positions: GmePositions) {
    let model = load(positions);
    let cases = cases(&model);
    assert!(cases.len() >= 20, "fixture has its cases");
    let kinds: Vec<(Vec<&GmeImage>, &Case)> = cases
        .iter()
        .map(|c| (c.images.iter().collect(), c))
        .collect();
    let inputs: Vec<GmeInput<'_>> = kinds
        .iter()
        .map(|(imgs, c)| GmeInput {
            instruction: &c.instruction,
            images: imgs,
            text: c.text.as_deref(),
        })
        .collect();
    let mut worst = 1.0f64;
    for (input, c) in inputs.iter().zip(&cases) {
        let grids: Vec<[usize; 3]> = c.images.iter().map(|i| i.grid).collect();
        assert_eq!(grids, c.grids, "{}: patch grids", c.name);
        assert_eq!(
            model.tokenize(input).expect("tokenizes"),
            c.ids,
            "{}: token ids",
            c.name
        );
        let got = model
            .embed(std::slice::from_ref(input))
            .expect("embeds")
            .remove(0);
        let want = match positions {
            GmePositions::Sequential => &c.gme,
            GmePositions::Mrope => &c.mrope,
        };
        let cos = cosine(&got, want);
        let diff = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            cos >= common::min_cosine(0.9999) && diff <= common::max_abs_diff(1e-4),
            "{} ({positions:?}): cosine {cos}, max diff {diff}",
            c.name
        );
        worst = worst.min(cos);
    }
    // one batch (packed sequences, images of several inputs in one vision pass)
    let batched = model.embed(&inputs).expect("embeds");
    for (got, c) in batched.iter().zip(&cases) {
        let want = match positions {
            GmePositions::Sequential => &c.gme,
            GmePositions::Mrope => &c.mrope,
        };
        assert!(
            cosine(got, want) >= common::min_cosine(0.9999),
            "{} batched ({positions:?})",
            c.name
        );
    }
    eprintln!(
        "{positions:?}: {} cases, worst cosine {worst:.9}",
        cases.len()
    );
}

#[test]
fn gme_positions_match_transformers() {
    check(GmePositions::Sequential);
}

#[test]
fn mrope_positions_match_transformers() {
    check(GmePositions::Mrope);
}

#[test]
fn position_modes_differ_only_with_images() {
    let e = expected();
    for c in e["cases"].as_array().expect("cases") {
        let (a, b) = (floats(&c["embedding_gme"]), floats(&c["embedding_mrope"]));
        let has_images = !c["images"].as_array().expect("images").is_empty();
        let same = a == b;
        assert_eq!(same, !has_images, "{}", c["name"]);
    }
}

#[test]
fn preprocessing_matches_the_processor() {
    let e = expected();
    let entries = e["preprocess"].as_array().expect("preprocess");
    assert!(entries.len() >= 8);
    for p in entries {
        let name = p["image"].as_str().expect("image");
        let (min, max) = (
            p["min_pixels"].as_u64().expect("min"),
            p["max_pixels"].as_u64().expect("max"),
        );
        let proc = GmeProcessor::new(14, 2, 2, min / 784, max / 784);
        let bytes = std::fs::read(root().join(name)).expect("image");
        let img = sift_embed::image::decode_rgb_with(&bytes, sift_embed::image::Alpha::Drop)
            .expect("decodes");
        let size = |k: &str| -> (u32, u32) {
            let v = p[k].as_array().expect("size");
            (v[0].as_u64().unwrap() as u32, v[1].as_u64().unwrap() as u32)
        };
        let (ow, oh) = size("original");
        assert_eq!((img.width(), img.height()), (ow, oh), "{name}");
        let (fw, fh) = size("fetch_size");
        assert_eq!(
            smart_resize_fetch(oh, ow, 28, 4 * 784, 16384 * 784),
            (fh, fw),
            "{name}: fetch_image size"
        );
        let (pw, ph) = size("processor_size");
        assert_eq!(
            smart_resize_processor(fh, fw, 28, min, max).expect("resizes"),
            (ph, pw),
            "{name}: processor size"
        );
        let resized = proc.resize(img, None).expect("resizes");
        let want = image::open(root().join(p["resized_png"].as_str().expect("png")))
            .expect("png")
            .to_rgb8();
        assert_eq!((resized.width(), resized.height()), (pw, ph), "{name}");
        let differing = resized
            .as_raw()
            .iter()
            .zip(want.as_raw())
            .filter(|(a, b)| a != b)
            .count();
        // JPEG decoders differ by a few levels (zune-jpeg vs libjpeg-turbo)
        let lossy = name.ends_with(".jpg");
        let max_diff = resized
            .as_raw()
            .iter()
            .zip(want.as_raw())
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap_or(0);
        if lossy {
            assert!(
                max_diff <= 6,
                "{name}: decoded JPEG off by {max_diff} levels"
            );
        } else {
            assert_eq!(
                differing, 0,
                "{name}: resized pixels differ from the processor's"
            );
        }
        // patches of the processor's own resized image
        let img = proc.patchify(&want);
        let grid: Vec<usize> = p["grid_thw"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(img.grid.to_vec(), grid, "{name}: grid");
        let sum: f64 = img.patches.iter().map(|&x| x as f64).sum();
        let abs: f64 = img.patches.iter().map(|&x| (x as f64).abs()).sum();
        let want_sum = p["pixel_values_sum"].as_f64().unwrap();
        let want_abs = p["pixel_values_abs_sum"].as_f64().unwrap();
        assert!(
            (sum - want_sum).abs() <= 1e-6 * want_abs,
            "{name}: sum {sum} vs {want_sum}"
        );
        assert!(
            (abs - want_abs).abs() <= 1e-6 * want_abs,
            "{name}: abs sum {abs} vs {want_abs}"
        );
        let per = 3 * 2 * 14 * 14;
        for (row, values) in p["rows"].as_object().expect("rows") {
            let r: usize = row.parse().unwrap();
            let want = floats(values);
            assert_eq!(
                &img.patches[r * per..(r + 1) * per],
                &want[..],
                "{name}: row {r}"
            );
        }
        eprintln!(
            "{name} {min}..{max}: ok ({differing} resized values differ, by up to {max_diff})"
        );
    }
}
