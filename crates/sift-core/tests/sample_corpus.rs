//! Reading the bundled sample corpus (`corpora/sample`, made by `corpora/sample/generate.py`),
//! which holds both forms of image annotations, backslash paths and an undecodable image.
use std::path::PathBuf;

use sift_core::{Corpus, Layout, WarningKind, Warnings};

fn sample() -> Corpus {
    Corpus::open(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../corpora/sample"))
        .expect("sample corpus")
}

#[test]
fn detects_layout_and_domains() {
    let c = sample();
    assert_eq!(c.layout(), Layout::MmBright);
    assert_eq!(c.domains().unwrap(), ["biology", "gis", "physics"]);
    assert!(c.select_domains(&["chemistry".into()]).is_err());
}

#[test]
fn streams_passages_with_ids() {
    let c = sample();
    let mut passages = c.passages("biology").unwrap();
    assert_eq!(passages.len_hint(), Some(16));
    let all: Vec<_> = passages.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(all.len(), 16);
    assert!(
        all.iter()
            .all(|p| p.id.starts_with("biology/") && p.id.ends_with(".txt"))
    );
    assert!(passages.warnings().is_empty());
}

#[test]
fn reads_string_and_struct_image_annotations_and_normalises_paths() {
    let c = sample();
    let mut w = Warnings::new();
    // gis: list<string>, with `\` and `./` paths
    let gis = c.examples("gis", true, &mut w).unwrap();
    let g1 = gis.iter().find(|e| e.id == "gis-1").unwrap();
    let pos = &g1.images.as_ref().unwrap().positive;
    assert!(
        pos.contains(&"gis/gis_1f3a9c2e_0001/image_1.png".to_string()),
        "{pos:?}"
    );
    assert!(
        pos.contains(&"gis/gis_1f3a9c2e_0002/image_1.webp".to_string()),
        "{pos:?}"
    );
    let g2 = gis.iter().find(|e| e.id == "gis-2").unwrap();
    assert!(
        g2.images
            .as_ref()
            .unwrap()
            .negative
            .contains(&"gis/gis_0a5d9b71_0001/image_1.png".to_string())
    );
    // physics: list<struct<image_path, caption>>
    let physics = c.examples("physics", true, &mut w).unwrap();
    let n_pos: usize = physics
        .iter()
        .map(|e| e.images.as_ref().unwrap().positive.len())
        .sum();
    assert!(n_pos > 0);
    assert!(
        physics
            .iter()
            .flat_map(|e| &e.images.as_ref().unwrap().positive)
            .all(|p| p.starts_with("physics/"))
    );
    // Task 1 examples carry no image labels but do carry gold and negative ids
    let t1 = c.examples("biology", false, &mut w).unwrap();
    assert!(
        t1.iter()
            .all(|e| e.images.is_none() && !e.gold_ids.is_empty())
    );
    assert!(t1.iter().any(|e| !e.negative_ids.is_empty()));
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn images_stream_and_the_broken_one_fails_to_decode() {
    let c = sample();
    let mut images = c.images("physics").unwrap();
    let mut undecodable = Vec::new();
    let mut n = 0;
    for img in images.by_ref() {
        let img = img.unwrap();
        n += 1;
        if image::load_from_memory(&img.bytes).is_err() {
            undecodable.push(img.path);
        }
    }
    assert_eq!(n, 11);
    assert_eq!(undecodable, ["physics/physics_95c2e7d1_0002/image_1.png"]);
    assert_eq!(images.warnings().count(WarningKind::DuplicateImage), 0);
    // every other format in the sample (webp, png 8/16-bit, jpeg, gif, bmp) decodes
    for domain in ["biology", "gis"] {
        for img in c.images(domain).unwrap() {
            let img = img.unwrap();
            assert!(image::load_from_memory(&img.bytes).is_ok(), "{}", img.path);
        }
    }
}

#[test]
fn fingerprints_are_stable_and_per_domain() {
    let c = sample();
    assert_eq!(c.fingerprint("gis").unwrap(), c.fingerprint("gis").unwrap());
    assert_ne!(
        c.fingerprint("gis").unwrap(),
        c.fingerprint("physics").unwrap()
    );
}

#[test]
fn image_paths_list_what_images_yields_without_the_bytes() {
    let c = sample();
    for domain in ["biology", "gis", "physics"] {
        let mut full = c.images(domain).unwrap();
        let want: Vec<String> = full.by_ref().map(|r| r.unwrap().path).collect();
        let mut paths = c.image_paths(domain).unwrap();
        let got: Vec<_> = paths.by_ref().map(|r| r.unwrap()).collect();
        assert!(got.iter().all(|r| r.bytes.is_empty()), "{domain}");
        let got: Vec<String> = got.into_iter().map(|r| r.path).collect();
        assert_eq!(got, want, "{domain}");
        assert_eq!(
            paths.warnings().counts().collect::<Vec<_>>(),
            full.warnings().counts().collect::<Vec<_>>(),
            "{domain}"
        );
    }
}
