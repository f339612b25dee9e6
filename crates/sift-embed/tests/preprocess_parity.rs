//! Parity of `sift_embed::image` with Hugging Face's CLIP/SigLIP image processors
//! (transformers' PIL backend), on the fixtures of `models/fixtures/vision/preprocess`
//! (see its README.md; regenerate with `make_preprocess_fixtures.py`).
//!
//! For every image and processor config: decode with `decode_rgb`, run
//! `ImageProcessor::preprocess`, and compare with HF's `pixel_values`, which the fixtures
//! hold as the uint8 image after resize + crop (PNG, or its CRC-32 for the large configs of
//! most images) plus the float32 value of every 8-bit level (the generator asserts that these
//! reproduce HF's float output bit for bit), and as full float32 arrays for two small configs.
//! JPEG and lossy WebP decoders differ from Pillow's: for those, the decoder difference is
//! checked against the tolerance in the manifest, and the preprocessing is checked exactly
//! starting from Pillow's decoded pixels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use image::RgbImage;
use serde_json::Value;
use sift_embed::image::{ImageProcessor, decode_rgb};

/// Max abs difference allowed per output value.
const TOL: f32 = 1e-5;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fixtures/vision/preprocess")
}

fn read(rel: &str) -> Vec<u8> {
    let path = fixtures().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn manifest() -> Value {
    serde_json::from_slice(&read("manifest.json")).expect("manifest.json")
}

fn load_png(rel: &str) -> RgbImage {
    match image::load_from_memory_with_format(&read(rel), image::ImageFormat::Png).expect(rel) {
        image::DynamicImage::ImageRgb8(img) => img,
        other => panic!("{rel}: expected an 8-bit RGB PNG, got {:?}", other.color()),
    }
}

/// A little-endian float32, C-order `.npy` file: `(shape, values)`.
fn read_npy_f32(rel: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = read(rel);
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{rel}: not an .npy file");
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len]).expect("npy header");
    assert!(header.contains("'descr': '<f4'"), "{rel}: {header}");
    assert!(header.contains("'fortran_order': False"), "{rel}: {header}");
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("npy shape");
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("npy shape"))
        .collect();
    let data = &bytes[start + header_len..];
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(values.len(), shape.iter().product::<usize>(), "{rel}: size");
    (shape, values)
}

/// CRC-32 (IEEE, as zlib.crc32).
fn crc32(bytes: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *t = c;
    }
    let mut crc = !0u32;
    for &b in bytes {
        crc = table[((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

type Lut = Vec<Vec<f32>>;

/// HF's float output for a uint8 image (HWC) given the per-level table: channels first.
fn apply_lut(img: &RgbImage, lut: &Lut) -> Vec<f32> {
    let n = (img.width() * img.height()) as usize;
    let mut out = vec![0f32; 3 * n];
    for (i, p) in img.pixels().enumerate() {
        for c in 0..3 {
            out[c * n + i] = lut[c][p[c] as usize];
        }
    }
    out
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
        .fold(0.0, f32::max)
}

fn max_pixel_diff(a: &RgbImage, b: &RgbImage) -> u8 {
    assert_eq!(a.dimensions(), b.dimensions());
    a.as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap_or(0)
}

struct Config {
    processor: ImageProcessor,
    lut: Lut,
}

fn configs(manifest: &Value) -> BTreeMap<String, Config> {
    manifest["configs"]
        .as_object()
        .expect("configs")
        .iter()
        .map(|(name, c)| {
            let text = String::from_utf8(read(c["file"].as_str().unwrap())).unwrap();
            let processor = ImageProcessor::from_config_json(&text)
                .unwrap_or_else(|e| panic!("config {name}: {e}"));
            let lut: Lut = c["lut"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| {
                    row.as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_f64().unwrap() as f32)
                        .collect()
                })
                .collect();
            (name.clone(), Config { processor, lut })
        })
        .collect()
}

#[test]
fn value_tables_match_transformers() {
    let manifest = manifest();
    for (name, config) in configs(&manifest) {
        let table = config.processor.value_table();
        for (c, (ours, hf)) in table.iter().zip(&config.lut).enumerate() {
            let d = max_abs_diff(ours, hf);
            assert!(d <= TOL, "{name}: channel {c}: max abs diff {d:e}");
        }
    }
}

#[test]
fn preprocess_matches_transformers() {
    let manifest = manifest();
    let configs = configs(&manifest);
    let mut failures = Vec::new();
    let (mut cases, mut worst) = (0usize, 0f32);

    for entry in manifest["images"].as_array().expect("images") {
        let file = entry["file"].as_str().unwrap();
        let decoded = match decode_rgb(&read(file)) {
            Ok(img) => img,
            Err(e) => {
                failures.push(format!("{file}: decode_rgb failed: {e}"));
                continue;
            }
        };
        // Lossy formats: compare the decoders, then preprocess Pillow's pixels.
        let input = match entry["decoded"].as_str() {
            Some(pil_rel) => {
                let pil = load_png(pil_rel);
                let tol = entry["decode_tolerance"].as_u64().unwrap() as u8;
                if pil.dimensions() != decoded.dimensions() {
                    failures.push(format!(
                        "{file}: decoded {:?}, Pillow {:?}",
                        decoded.dimensions(),
                        pil.dimensions()
                    ));
                    continue;
                }
                let d = max_pixel_diff(&decoded, &pil);
                if d > tol {
                    failures.push(format!(
                        "{file}: decoded pixels differ from Pillow's by {d} > {tol} levels"
                    ));
                }
                pil
            }
            None => decoded,
        };

        for case in entry["cases"].as_array().unwrap() {
            cases += 1;
            let cname = case["config"].as_str().unwrap();
            let config = &configs[cname];
            let p = &config.processor;
            let what = format!("{file} / {cname}");
            let shape: Vec<usize> = case["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            let (h, w) = p.output_size_for(input.height(), input.width());
            if shape != [3, h as usize, w as usize] {
                failures.push(format!("{what}: output shape (3, {h}, {w}), HF {shape:?}"));
                continue;
            }
            let out = p.preprocess(&input);
            if out.len() != 3 * (h * w) as usize {
                failures.push(format!("{what}: {} values, expected 3x{h}x{w}", out.len()));
                continue;
            }

            // Against HF's uint8 image + value table (exactly HF's float output).
            let ours_u8 = p.resize_and_crop(&input);
            let crc = crc32(ours_u8.as_raw());
            let want_crc = case["crc32"].as_u64().unwrap() as u32;
            let expected = match case["uint8"].as_str() {
                Some(rel) => {
                    let hf = load_png(rel);
                    if hf.dimensions() == ours_u8.dimensions() && crc != want_crc {
                        let d = max_pixel_diff(&ours_u8, &hf);
                        failures.push(format!("{what}: uint8 after resize+crop differs by {d}"));
                    }
                    apply_lut(&hf, &config.lut)
                }
                None => {
                    if crc != want_crc {
                        failures.push(format!(
                            "{what}: uint8 after resize+crop differs from HF's (CRC-32 {crc:08x}, \
                             HF {want_crc:08x})"
                        ));
                    }
                    // Equal CRCs: HF's float output is the table applied to our pixels.
                    apply_lut(&ours_u8, &config.lut)
                }
            };
            let d = max_abs_diff(&out, &expected);
            worst = worst.max(d);
            if d > TOL {
                failures.push(format!("{what}: max abs diff {d:e} > {TOL:e}"));
            }

            // Against HF's full float32 output, where stored.
            if let Some(rel) = case["float32"].as_str() {
                let (fshape, hf) = read_npy_f32(rel);
                if fshape != shape {
                    failures.push(format!("{what}: {rel} has shape {fshape:?}"));
                    continue;
                }
                let d = max_abs_diff(&out, &hf);
                worst = worst.max(d);
                if d > TOL {
                    failures.push(format!(
                        "{what}: max abs diff {d:e} > {TOL:e} (float32 file)"
                    ));
                }
            }
        }
    }
    println!("{cases} cases, max abs diff {worst:e}");
    assert!(cases > 0, "no fixture cases");
    assert!(
        failures.is_empty(),
        "{} of {cases} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Lossy formats end to end (our decoder + preprocessing against HF on Pillow's decoding):
/// reported, not asserted beyond the decoder tolerance checked above.
#[test]
fn lossy_end_to_end_report() {
    let manifest = manifest();
    let configs = configs(&manifest);
    for entry in manifest["images"].as_array().unwrap() {
        let Some(pil_rel) = entry["decoded"].as_str() else {
            continue;
        };
        let file = entry["file"].as_str().unwrap();
        let ours = decode_rgb(&read(file)).expect(file);
        let pil = load_png(pil_rel);
        let mut line = format!(
            "{file}: decoder max diff {} levels;",
            max_pixel_diff(&ours, &pil)
        );
        for (name, config) in &configs {
            let a = config.processor.preprocess(&ours);
            let b = config.processor.preprocess(&pil);
            line += &format!(" {name} {:.3}", max_abs_diff(&a, &b));
        }
        println!("{line}");
    }
}
