//! Pillow's own test images (`Tests/images/` of its source distribution), embedded with the
//! `tiny-clip-quickgelu` fixture by Sift and by transformers + Pillow: every image in a
//! format Sift reads (JPEG/MPO, PNG, GIF, BMP, WebP) that Pillow and transformers load must be
//! decoded by Sift, and its features must have cosine >= [`MIN_COSINE`] to transformers'.
//! The only files let off are in [`EXCEPTIONS`], each with its reason (the README's image
//! preprocessing paragraph lists them too); an exception that no longer applies fails the
//! test, so the list cannot go stale.
//!
//! The reference comes from `models/fixtures/vision/pillow_test_images.py`: it downloads the
//! sdist of the installed Pillow from PyPI (once, cached under the target directory's
//! `tmp/pillow-images/`), and runs `Image.open`, `ImageOps.exif_transpose` and the fixture's
//! image processor (PIL backend, which composites transparency onto white) on each file.
//! It needs python3 with torch, transformers, Pillow and numpy (`scripts/test` installs them
//! where they are missing) and PyPI the first time; without them the test says SKIPPED, with
//! the reason, and fails nothing.
mod common;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use sift_embed::{ModelFiles, VisionEmbedder, VisionOptions};

/// The lowest cosine to transformers' features an image may give.
const MIN_COSINE: f64 = 0.999;

/// Files Pillow decodes that Sift does not decode, or decodes differently, with the reason.
/// Paths are relative to `Tests/images/`.
const EXCEPTIONS: &[(&str, &str)] = &[
    (
        "app13.jpg",
        "a 4 x 4 JPEG with 4:2:0 chroma: libjpeg-turbo replicates chroma samples when a \
         subsampled component is at most 2 pixels wide, zune-jpeg interpolates them (its \
         fancy upsampling has no such exception); only images at most 4 pixels wide differ",
    ),
    (
        "hopper_bad_exif.jpg",
        "corrupt entropy-coded data: libjpeg-turbo decodes past each bad Huffman code to the \
         next restart marker, zune-jpeg stops at the first one and leaves the rest grey",
    ),
];

#[derive(Deserialize)]
struct Reference {
    pillow: String,
    images_dir: PathBuf,
    out_of_scope: BTreeMap<String, usize>,
    files: Vec<Record>,
}

#[derive(Deserialize)]
struct Record {
    file: String,
    format: Option<String>,
    mode: Option<String>,
    error: Option<String>,
    features: Option<Vec<f32>>,
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The reference features, or why they cannot be had here.
fn reference(repo: &Path) -> Result<Reference, String> {
    let peers = Command::new("python3")
        .args(["-c", "import torch, transformers, PIL, numpy"])
        .output();
    if !peers.is_ok_and(|o| o.status.success()) {
        return Err("python3 lacks torch, transformers, Pillow or numpy".into());
    }
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pillow-images");
    let out = cache.join("reference.json");
    let run = Command::new("python3")
        .arg(repo.join("models/fixtures/vision/pillow_test_images.py"))
        .arg("--cache")
        .arg(&cache)
        .arg("--out")
        .arg(&out)
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    if run.status.code() == Some(3) {
        // the script's exit status when PyPI cannot be reached (see the script)
        return Err(format!(
            "cannot download Pillow's sdist from PyPI: {}",
            stderr.trim()
        ));
    }
    assert!(
        run.status.success(),
        "pillow_test_images.py failed:\n{}\n{stderr}",
        String::from_utf8_lossy(&run.stdout)
    );
    Ok(serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap())
}

#[test]
#[ignore = "needs python3 with torch, transformers, Pillow and numpy, and PyPI once (scripts/test runs it)"]
fn pillow_test_images_decode_as_pillow_decodes_them() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let r = match reference(&repo) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let files =
        ModelFiles::from_dir(&repo.join("models/fixtures/vision/tiny-clip-quickgelu")).unwrap();
    let options = VisionOptions {
        dtype: common::dtype(),
        ..VisionOptions::default()
    };
    let model = VisionEmbedder::load(&files, &candle_core::Device::Cpu, options).unwrap();
    let exceptions: BTreeMap<&str, &str> = EXCEPTIONS.iter().copied().collect();
    let min_cosine = common::min_cosine(MIN_COSINE);

    let bytes: Vec<Vec<u8>> = r
        .files
        .iter()
        .map(|f| std::fs::read(r.images_dir.join(&f.file)).unwrap())
        .collect();
    let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let prepared = model.prepare(&refs);

    let (mut pillow_ok, mut sift_ok, mut excepted) = (0, 0, 0);
    let mut failures = Vec::new();
    let mut sift_only = Vec::new();
    let mut worst: Option<(f64, &str)> = None;
    for (rec, prep) in r.files.iter().zip(&prepared) {
        let what = format!(
            "{} ({} {})",
            rec.file,
            rec.format.as_deref().unwrap_or("?"),
            rec.mode.as_deref().unwrap_or("?")
        );
        let excepted_here = exceptions.get(rec.file.as_str());
        let Some(want) = &rec.features else {
            // Pillow or transformers refused it.
            if prep.is_ok() {
                sift_only.push(format!(
                    "{what}: Pillow: {}",
                    rec.error.as_deref().unwrap_or("")
                ));
            }
            if excepted_here.is_some() {
                failures.push(format!("{what}: excepted, but Pillow does not decode it"));
            }
            continue;
        };
        pillow_ok += 1;
        let outcome = match prep {
            Err(e) => Err(format!("not decoded: {e}")),
            Ok(pixels) => {
                sift_ok += 1;
                let got = model
                    .image_feature_rows(std::slice::from_ref(pixels))
                    .unwrap();
                let cos = cosine(&got[0], want);
                if cos >= min_cosine {
                    Ok(cos)
                } else {
                    Err(format!("cosine {cos:.6}"))
                }
            }
        };
        match (outcome, excepted_here) {
            (Ok(cos), None) => {
                if worst.is_none_or(|(w, _)| cos < w) {
                    worst = Some((cos, rec.file.as_str()));
                }
            }
            (Ok(cos), Some(_)) => failures.push(format!(
                "{what}: excepted, but decoded with cosine {cos:.6}: remove the exception"
            )),
            (Err(e), None) => failures.push(format!("{what}: {e}")),
            (Err(e), Some(why)) => {
                excepted += 1;
                eprintln!("excepted: {what}: {e} ({why})");
            }
        }
    }
    for f in exceptions.keys() {
        if !r.files.iter().any(|rec| rec.file == *f) {
            failures.push(format!("{f}: excepted, but not among Pillow's test images"));
        }
    }
    let (worst_cos, worst_file) = worst.unwrap_or((f64::NAN, ""));
    eprintln!(
        "Pillow {}: {} files in Sift's formats, {pillow_ok} decoded by Pillow + transformers, \
         {sift_ok} of them by Sift, {excepted} excepted; worst cosine {worst_cos:.6} ({worst_file}); \
         other formats Pillow reads (not Sift's): {:?}",
        r.pillow,
        r.files.len(),
        r.out_of_scope
    );
    for s in &sift_only {
        eprintln!("decoded by Sift, refused by Pillow: {s}");
    }
    assert!(pillow_ok > 500, "only {pillow_ok} reference images");
    assert!(
        failures.is_empty(),
        "{} of Pillow's test images are not decoded as Pillow decodes them:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
