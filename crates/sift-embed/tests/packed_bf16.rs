//! bf16 on the CPU for every family: each fixture checkpoint loaded with `Precision::Bf16`
//! runs its linear layers on the packed bfloat16 kernel (the report says so, and the
//! vectors differ from f32's), within cosine 0.999 of its f32 vectors on texts and images
//! (Jina-CLIP, which `auto` keeps in f32, within 0.995); `Precision::Auto` picks bf16
//! exactly where the processor has AVX512-BF16 and the family holds the bound.
//!
//! The parity suites (`SIFT_TEST_DTYPE=bf16`) hold the same models to their references;
//! this suite checks the switch itself, through the one `Embedder` API users load with.
use std::path::{Path, PathBuf};

use sift_embed::{Embedder, EmbedderOptions, Family, Kernels, Precision, Role};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/fixtures")
        .join(rel)
}

fn load(dir: &Path, dtype: Precision) -> Embedder {
    let files = sift_embed::ModelFiles::from_dir(dir).unwrap();
    let options = EmbedderOptions {
        dtype,
        ..Default::default()
    };
    Embedder::from_files(&files, &options).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

const TEXTS: [&str; 4] = [
    "How do I compute the eigenvalues of a sparse symmetric matrix?",
    "a photo of a cat",
    "Why does the circuit oscillate when the feedback capacitor is removed? The op-amp is \
     powered from a single 5 V rail and the load is a long cable.",
    "x",
];

fn images() -> Vec<Vec<u8>> {
    let dir = fixture("vision/images");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// Worst cosine between the f32 and bf16 vectors of `rows`, and whether any value differs.
fn compare(what: &str, f32_rows: &[Vec<f32>], bf16_rows: &[Vec<f32>], bound: f64) {
    assert_eq!(f32_rows.len(), bf16_rows.len());
    let mut worst = 1.0f64;
    let mut differs = false;
    for (a, b) in f32_rows.iter().zip(bf16_rows) {
        worst = worst.min(cosine(a, b));
        differs |= a != b;
    }
    eprintln!("{what}: worst cosine bf16 vs f32 {worst}");
    assert!(worst >= bound, "{what}: cosine {worst} < {bound}");
    assert!(
        differs,
        "{what}: bf16 vectors equal f32's: the packed path did not run"
    );
}

fn check(dir: &Path, bound: f64) {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let f32_model = load(dir, Precision::F32);
    let bf16_model = load(dir, Precision::Bf16);
    assert_eq!(bf16_model.precision(), Precision::Bf16);
    let fused = Kernels::current() == Kernels::Auto;
    if !fused {
        eprintln!("{name}: SIFT_KERNELS=generic: bf16 runs candle's generic operations");
        return;
    }
    let want = match sift_simd::bf16::Kernel::best() {
        sift_simd::bf16::Kernel::Amx => "packed-bf16-amx",
        sift_simd::bf16::Kernel::DotBf16 => "packed-bf16-avx512",
        sift_simd::bf16::Kernel::F32 => "packed-bf16-widened",
    };
    assert_eq!(bf16_model.linear_kernel(), want, "{name}");
    assert_eq!(f32_model.linear_kernel(), "fused-f32", "{name}");
    let (a, b) = (
        f32_model.embed_texts(&TEXTS, Role::Query).unwrap(),
        bf16_model.embed_texts(&TEXTS, Role::Query).unwrap(),
    );
    compare(&format!("{name} texts"), &a, &b, bound);
    if f32_model.capabilities().images {
        let bytes = images();
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let prepared = |m: &Embedder| -> Vec<_> {
            m.prepare_images(&refs)
                .into_iter()
                .map(|p| p.unwrap())
                .collect()
        };
        let (a, b) = (
            f32_model.embed_images(&prepared(&f32_model)).unwrap(),
            bf16_model.embed_images(&prepared(&bf16_model)).unwrap(),
        );
        compare(&format!("{name} images"), &a, &b, bound);
    }
    // auto: bf16 where the processor has the instructions and the family holds 0.999
    let auto = load(dir, Precision::Auto);
    let holds = auto.family() != Family::JinaClip;
    let expect = if sift_simd::bf16::has_dot_bf16() && holds {
        Precision::Bf16
    } else {
        Precision::F32
    };
    assert_eq!(auto.precision(), expect, "{name}: auto");
}

#[test]
fn clip_in_bf16_stays_within_its_bound() {
    check(&fixture("vision/tiny-clip-gelu"), 0.999);
    check(&fixture("vision/tiny-clip-quickgelu"), 0.999);
}

#[test]
fn siglip_in_bf16_stays_within_its_bound() {
    check(&fixture("vision/tiny-siglip-ragged"), 0.999);
}

#[test]
fn bert_in_bf16_stays_within_its_bound() {
    check(&fixture("contriever/tiny-contriever"), 0.999);
    match std::env::var("SIFT_MINILM_DIR") {
        Ok(dir) if Path::new(&dir).join("model.safetensors").is_file() => {
            check(Path::new(&dir), 0.999)
        }
        _ => eprintln!("skipped: all-MiniLM-L6-v2 in bf16 (SIFT_MINILM_DIR not set)"),
    }
}

#[test]
fn nomic_in_bf16_stays_within_its_bound() {
    check(&fixture("nomic/tiny-nomic-embed-vision-v1.5"), 0.999);
    check(&fixture("nomic/tiny-nomic-embed-text-v1.5"), 0.999);
}

#[test]
fn jina_clip_in_bf16_stays_within_its_bound() {
    check(&fixture("jina_clip/tiny-jina-clip-v1"), 0.995);
}

#[test]
fn gme_in_bf16_stays_within_its_bound() {
    check(&fixture("gme/tiny-gme"), 0.999);
}
