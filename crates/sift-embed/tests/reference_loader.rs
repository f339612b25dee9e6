//! The reference profile's image loading against what Pillow does with the same bytes:
//! MM-BRIGHT's released data loader (`Image.open(BytesIO(b)).convert("RGB")` with
//! `ImageFile.LOAD_TRUNCATED_IMAGES = True`), and Task 4's `ImageOps.exif_transpose`.
//! Fixtures: `models/fixtures/reference_code/` (made by its `make_reference_code_fixtures.py`
//! with Pillow 13.0.0, which also records the Pillow facts the reference rules rest on).
use sift_embed::image::{Decode, decode_image, decode_rgb};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../models/fixtures/reference_code/images/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn facts() -> serde_json::Value {
    let path = format!(
        "{}/../../models/fixtures/reference_code/pillow_facts.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Mean absolute difference per channel value, and the largest.
fn diff(a: &image::RgbImage, b: &image::RgbImage) -> (f64, u8) {
    assert_eq!(a.dimensions(), b.dimensions());
    let mut sum = 0u64;
    let mut max = 0u8;
    for (x, y) in a.as_raw().iter().zip(b.as_raw()) {
        let d = x.abs_diff(*y);
        sum += d as u64;
        max = max.max(d);
    }
    (sum as f64 / a.as_raw().len() as f64, max)
}

#[test]
fn pillow_facts_the_reference_rules_rest_on() {
    let f = facts();
    // Task 3 (Nomic, Jina-CLIP): Image.open(<PIL image>) raises, a white image instead
    assert_eq!(f["open_pil_image_raises"], "AttributeError");
    // Task 4 (BGE-VL, GME): str(<PIL image>) names no file, the blank image instead
    assert_eq!(f["str_pil_image_is_a_file"], false);
    // the loader's RGB images keep their EXIF (Task 4 turns them upright) ...
    assert_eq!(f["convert_keeps_orientation"], 6);
    assert_eq!(
        f["exif_transpose_size_after_convert"],
        serde_json::json!([20, 30])
    );
    // ... which a temporary PNG drops (BGE-VL's and GME's queries)
    assert!(f["png_save_keeps_orientation"].is_null());
    for (name, case) in f["truncated"].as_object().unwrap() {
        assert_eq!(case["default"], "OSError", "{name}");
        assert_eq!(case["load_truncated_images"], "decodes", "{name}");
    }
}

#[test]
fn truncated_files_are_refused_by_default_and_decode_as_pillow_decodes_them_in_the_reference_profile()
 {
    // PNG rows are exact (palette images: index 0 after the cut); JPEG decoders differ by a
    // few levels (zune-jpeg vs libjpeg-turbo), the MCUs after the break are mid-grey as
    // libjpeg leaves them, and the chroma smoothing around the break differs most
    for (name, mean_bound, max_bound) in [
        ("png_rgb_cut_half", 0.0, 0),
        ("png_palette_cut_half", 0.0, 0),
        ("png_gray_cut_late", 0.0, 0),
        ("jpeg_baseline_cut_half", 1.0, 64),
        ("jpeg_no_eoi", 1.5, 40),
        ("jpeg_progressive_no_eoi", 1.5, 40),
    ] {
        let bytes = fixture(&format!("{name}.bin"));
        assert!(decode_rgb(&bytes).is_err(), "{name}: refused by default");
        let ours = decode_image(&bytes, Decode::REFERENCE_LOADER)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let pillow = decode_rgb(&fixture(&format!("{name}.pillow.png"))).unwrap();
        let (mean, max) = diff(&ours, &pillow);
        assert!(
            mean <= mean_bound && max <= max_bound,
            "{name}: mean {mean:.3}, max {max} (bounds {mean_bound}, {max_bound})"
        );
    }
}

#[test]
fn the_orientation_is_applied_only_when_asked() {
    let bytes = fixture("jpeg_orientation_6.bin");
    assert_eq!(sift_embed::image::orientation(&bytes), 6);
    let stored = decode_image(&bytes, Decode::REFERENCE_LOADER).unwrap();
    let upright = decode_image(
        &bytes,
        Decode {
            orient: true,
            ..Decode::REFERENCE_LOADER
        },
    )
    .unwrap();
    for (ours, name) in [(stored, "stored"), (upright, "upright")] {
        let pillow =
            decode_rgb(&fixture(&format!("jpeg_orientation_6.{name}.pillow.png"))).unwrap();
        assert_eq!(ours.dimensions(), pillow.dimensions(), "{name}");
        let (mean, _) = diff(&ours, &pillow);
        assert!(mean < 1.5, "{name}: {mean}");
    }
}
