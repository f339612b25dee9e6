//! Query encoding under each rule, against vectors computed from the towers directly.
use super::*;
use sift_embed::{EmbedderOptions, Profile};

fn fixture(rel: &str) -> String {
    format!("{}/../../models/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn load(rel: &str) -> Embedder {
    load_with(rel, Profile::Reference)
}

fn load_with(rel: &str, profile: Profile) -> Embedder {
    let options = EmbedderOptions {
        profile,
        ..Default::default()
    };
    Embedder::load(&fixture(rel), &options).unwrap()
}

fn reference_of(
    model: &Embedder,
    task: Task,
    examples: &[Example],
    bytes: &HashMap<String, Vec<u8>>,
) -> Vec<Vec<f32>> {
    let mut warnings = Warnings::new();
    let v = reference_vectors(
        model,
        task,
        &mut Batch {
            queries: examples,
            query_images: bytes,
            instruction: None,
            warnings: &mut warnings,
            source: Path::new("t"),
        },
    )
    .unwrap();
    assert!(warnings.is_empty());
    v
}

fn image(name: &str) -> Vec<u8> {
    std::fs::read(fixture(&format!("vision/images/{name}"))).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

/// Two queries: one with an image, one without.
fn queries() -> (Vec<Example>, HashMap<String, Vec<u8>>) {
    let q = |id: &str, text: &str, images: &[&str]| Example {
        id: id.into(),
        query: text.into(),
        image_paths: images.iter().map(|s| s.to_string()).collect(),
        ..Example::default()
    };
    let examples = vec![
        q(
            "a",
            "why does the circuit oscillate",
            &["shapes", "gradient"],
        ),
        q("b", "a map projection", &[]),
    ];
    let bytes = HashMap::from([
        ("shapes".to_string(), image("shapes_rgb_50x37.png")),
        ("gradient".to_string(), image("gradient_rgb_64x64.png")),
    ]);
    (examples, bytes)
}

fn reference(model: &Embedder, task: Task) -> Vec<Vec<f32>> {
    let (examples, bytes) = queries();
    let mut warnings = Warnings::new();
    let v = reference_vectors(
        model,
        task,
        &mut Batch {
            queries: &examples,
            query_images: &bytes,
            instruction: None,
            warnings: &mut warnings,
            source: Path::new("t"),
        },
    )
    .unwrap();
    assert!(warnings.is_empty());
    v
}

/// normalise(raw text features + raw image features) computed from the towers directly.
fn raw_sum(model: &Embedder, text: &str, pixels: Vec<f32>) -> Vec<f32> {
    let v = model.as_vision().unwrap();
    let t = v.text_feature_rows(&v.tokenize(&[text]).unwrap()).unwrap();
    let i = v.image_feature_rows(&[pixels]).unwrap();
    normalized_sum(&t[0], &i[0])
}

/// The text vectors of the two test queries (the first has the shapes image, the second
/// none).
fn query_texts(e: &Embedder) -> Vec<Vec<f32>> {
    e.embed_texts(
        &["why does the circuit oscillate", "a map projection"],
        Role::Query,
    )
    .unwrap()
}

/// The unit vector of the first test query's image.
fn shapes_vector(e: &Embedder) -> Vec<f32> {
    let shapes = e
        .prepare_images(&[&image("shapes_rgb_50x37.png")])
        .pop()
        .unwrap()
        .unwrap();
    e.embed_images(&[shapes]).unwrap().pop().unwrap()
}

#[test]
fn clip_queries_sum_raw_features_with_a_white_image_for_none() {
    let clip = load("vision/tiny-clip-quickgelu");
    let v = clip.as_vision().unwrap();
    for task in [Task::MultimodalPassages, Task::Images, Task::Pairs] {
        let got = reference(&clip, task);
        // the FIRST image only (the second is ignored)
        let shapes = v.prepare(&[&image("shapes_rgb_50x37.png")]).pop().unwrap();
        let want_a = raw_sum(&clip, "why does the circuit oscillate", shapes.unwrap());
        let white = image::RgbImage::from_pixel(224, 224, image::Rgb([255, 255, 255]));
        let want_b = raw_sum(&clip, "a map projection", v.processor().preprocess(&white));
        assert!(cosine(&got[0], &want_a) > 0.99999, "{task:?}");
        assert!(cosine(&got[1], &want_b) > 0.99999, "{task:?}");
        // not the unit vectors' mean (the `first` mode): the raw norms differ
        let text = clip
            .embed_texts(&["a map projection"], Role::Query)
            .unwrap();
        let unit_mean = normalized_sum(&text[0], &clip.blank_image_vector().unwrap());
        assert!(cosine(&got[1], &unit_mean) < 0.9999, "{task:?}");
    }
    // Task 1 has no image rule: the text alone
    let t1 = reference(&clip, Task::Passages);
    let text = clip
        .embed_texts(&["a map projection"], Role::Query)
        .unwrap();
    assert!(cosine(&t1[1], &text[0]) > 0.99999);
}

/// The released data loader filters a query's images to those that load, then takes the
/// first (a transcription of MM-BRIGHT `src/data.py`'s `get_query_pil_images`): a missing
/// or undecodable first image is passed over for the next, and counted.
#[test]
fn the_first_image_is_the_first_that_loads() {
    let clip = load("vision/tiny-clip-quickgelu");
    let (mut examples, mut bytes) = queries();
    examples[0].image_paths = vec!["absent".into(), "broken".into(), "gradient".into()];
    bytes.insert("broken".into(), b"\x89PNG not really".to_vec());
    let mut warnings = Warnings::new();
    let got = reference_vectors(
        &clip,
        Task::MultimodalPassages,
        &mut Batch {
            queries: &examples,
            query_images: &bytes,
            instruction: None,
            warnings: &mut warnings,
            source: Path::new("t"),
        },
    )
    .unwrap();
    assert_eq!(warnings.count(WarningKind::MissingImageBytes), 1);
    assert_eq!(warnings.count(WarningKind::UndecodableImage), 1);
    let v = clip.as_vision().unwrap();
    let gradient = v
        .prepare(&[&image("gradient_rgb_64x64.png")])
        .pop()
        .unwrap();
    let want = raw_sum(&clip, "why does the circuit oscillate", gradient.unwrap());
    assert!(cosine(&got[0], &want) > 0.99999);
    // none loads: the rule's stand-in (CLIP: the white image), as for a query without one
    examples[0].image_paths = vec!["absent".into(), "broken".into()];
    let mut warnings = Warnings::new();
    let none = reference_vectors(
        &clip,
        Task::MultimodalPassages,
        &mut Batch {
            queries: &examples,
            query_images: &bytes,
            instruction: None,
            warnings: &mut warnings,
            source: Path::new("t"),
        },
    )
    .unwrap();
    let white = image::RgbImage::from_pixel(224, 224, image::Rgb([255, 255, 255]));
    let want = raw_sum(
        &clip,
        "why does the circuit oscillate",
        v.processor().preprocess(&white),
    );
    assert!(cosine(&none[0], &want) > 0.99999);
}

#[test]
fn nomic_queries_without_an_image_are_their_text_except_in_task_3() {
    let nomic = load("nomic/tiny-nomic-embed-vision-v1.5");
    let text = query_texts(&nomic);
    let img = shapes_vector(&nomic);
    for task in [Task::MultimodalPassages, Task::Pairs] {
        let got = reference(&nomic, task);
        assert!(cosine(&got[0], &normalized_sum(&text[0], &img)) > 0.99999);
        assert!(
            cosine(&got[1], &text[1]) > 0.99999,
            "{task:?}: a zero image"
        );
    }
    // Task 4 queries are cut to 8,000 characters before the prefix
    let long = Example {
        id: "long".into(),
        query: "clustering ".repeat(800) + &" 9".repeat(300),
        ..Example::default()
    };
    let mut w = Warnings::new();
    let got = reference_vectors(
        &nomic,
        Task::Pairs,
        &mut Batch {
            queries: std::slice::from_ref(&long),
            query_images: &HashMap::new(),
            instruction: None,
            warnings: &mut w,
            source: Path::new("t"),
        },
    )
    .unwrap();
    let cut: String = long.query.chars().take(8000).collect();
    let want = nomic.embed_texts(&[&cut], Role::Query).unwrap();
    assert!(cosine(&got[0], &want[0]) > 0.99999);
    let whole = nomic.embed_texts(&[&long.query], Role::Query).unwrap();
    assert!(cosine(&got[0], &whole[0]) < 0.9999);
    let got = reference(&nomic, Task::Images);
    let white = normalized_sum(&text[1], &nomic.blank_image_vector().unwrap());
    assert!(cosine(&got[1], &white) > 0.99999, "Task 3: a white image");
    assert!(cosine(&got[1], &text[1]) < 0.9999);
}

#[test]
fn gme_queries_are_one_input_with_the_first_image_or_the_text_alone() {
    let gme = load("gme/tiny-gme");
    let got = reference(&gme, Task::MultimodalPassages);
    let shapes = gme
        .prepare_query_image(&image("shapes_rgb_50x37.png"), 1)
        .unwrap();
    let want = gme
        .embed_joint(
            &[JointInput {
                text: Some("why does the circuit oscillate"),
                images: &[&shapes],
            }],
            Role::Query,
        )
        .unwrap();
    assert!(cosine(&got[0], &want[0]) > 0.99999);
    let text = gme.embed_texts(&["a map projection"], Role::Query).unwrap();
    assert!(cosine(&got[1], &text[0]) > 0.99999);
}

#[test]
fn bge_vl_is_joint_in_tasks_2_and_4_and_unit_vectors_in_task_3() {
    let bge = load("bge_vl/tiny-bge-vl");
    let shapes = bge
        .prepare_images(&[&image("shapes_rgb_50x37.png")])
        .pop()
        .unwrap()
        .unwrap();
    let joint = raw_sum(
        &bge,
        "why does the circuit oscillate",
        match &shapes {
            PreparedImage::Pixels(p) => p.clone(),
            PreparedImage::Patches(_) => unreachable!(),
        },
    );
    let text = query_texts(&bge);
    let unit = normalized_sum(&text[0], &bge.embed_images(&[shapes]).unwrap()[0]);
    for task in [Task::MultimodalPassages, Task::Pairs] {
        let got = reference(&bge, task);
        assert!(cosine(&got[0], &joint) > 0.99999, "{task:?}");
        assert!(cosine(&got[1], &text[1]) > 0.99999, "{task:?}");
    }
    let got = reference(&bge, Task::Images);
    assert!(cosine(&got[0], &unit) > 0.99999);
    assert!(cosine(&got[1], &text[1]) > 0.99999);
}

/// BGE-VL's query texts are cut per task: a blank query is `query` in Tasks 3 and 4
/// (task3_image.py:707-720, task4_pair.py:814-828) and stays blank in Task 2.
#[test]
fn bge_vl_query_texts_are_cut_by_each_tasks_rule() {
    let bge = load("bge_vl/tiny-bge-vl");
    let blank = Example {
        id: "blank".into(),
        query: "   ".into(),
        ..Example::default()
    };
    let run = |task| {
        let mut w = Warnings::new();
        reference_vectors(
            &bge,
            task,
            &mut Batch {
                queries: std::slice::from_ref(&blank),
                query_images: &HashMap::new(),
                instruction: None,
                warnings: &mut w,
                source: Path::new("t"),
            },
        )
        .unwrap()
        .pop()
        .unwrap()
    };
    let word = bge
        .embed_texts(&["query"], Role::Query)
        .unwrap()
        .pop()
        .unwrap();
    let empty = bge.embed_texts(&[""], Role::Query).unwrap().pop().unwrap();
    assert!(
        cosine(&empty, &word) < 0.9999,
        "the fixture tells them apart"
    );
    for task in [Task::Images, Task::Pairs] {
        assert!(cosine(&run(task), &word) > 0.99999, "{task:?}");
    }
    assert!(cosine(&run(Task::MultimodalPassages), &empty) > 0.99999);
}

#[test]
fn jina_clip_queries_without_an_image_are_their_text_except_in_task_4() {
    let jina = load_with("jina_clip/tiny-jina-clip-v1", Profile::ReferenceIntended);
    assert_eq!(jina.reference_model(), ReferenceModel::JinaClip);
    let text = query_texts(&jina);
    let img = shapes_vector(&jina);
    for task in [Task::MultimodalPassages, Task::Images] {
        let got = reference(&jina, task);
        assert!(cosine(&got[0], &normalized_sum(&text[0], &img)) > 0.99999);
        assert!(
            cosine(&got[1], &text[1]) > 0.99999,
            "{task:?}: a zero image"
        );
    }
    let got = reference(&jina, Task::Pairs);
    let white = normalized_sum(&text[1], &jina.blank_image_vector().unwrap());
    assert!(cosine(&got[1], &white) > 0.99999, "Task 4: a white image");
}

/// Task 3 as the released code runs it for Nomic and Jina-CLIP: `Image.open` on the
/// query's PIL image raises and the bare `except` embeds a white image instead
/// (task3_image.py:526-536, 621-629): a query with an image is normalise(text + white);
/// without one, Jina's is its text (a zero image vector) and Nomic's text + white. A
/// transcription of those lines; `reference-intended` embeds the query's own image.
#[test]
fn task_3_queries_of_nomic_and_jina_see_the_white_image_as_the_released_code_runs() {
    for (rel, zero_without) in [
        ("jina_clip/tiny-jina-clip-v1", true),
        ("nomic/tiny-nomic-embed-vision-v1.5", false),
    ] {
        let released = load_with(rel, Profile::Reference);
        let intended = load_with(rel, Profile::ReferenceIntended);
        let text = query_texts(&released);
        let white = released.blank_image_vector().unwrap();
        let own = shapes_vector(&released);
        let got = reference(&released, Task::Images);
        assert!(
            cosine(&got[0], &normalized_sum(&text[0], &white)) > 0.99999,
            "{rel}"
        );
        assert!(
            cosine(&got[0], &normalized_sum(&text[0], &own)) < 0.9999,
            "{rel}"
        );
        let without = if zero_without {
            text[1].clone()
        } else {
            normalized_sum(&text[1], &white)
        };
        assert!(cosine(&got[1], &without) > 0.99999, "{rel}");
        let meant = reference(&intended, Task::Images);
        assert!(
            cosine(&meant[0], &normalized_sum(&text[0], &own)) > 0.99999,
            "{rel}"
        );
        assert!(cosine(&meant[1], &without) > 0.99999, "{rel}");
        // Tasks 2 and 4 are not touched by it
        for task in [Task::MultimodalPassages, Task::Pairs] {
            let a = reference(&released, task);
            let b = reference(&intended, task);
            assert!(cosine(&a[0], &b[0]) > 0.999999, "{rel} {task:?}");
        }
    }
}

/// The query image's orientation: Task 4 turns CLIP's, SigLIP's, Jina-CLIP's and
/// Nomic's query images upright (`_safe_open_image`'s `ImageOps.exif_transpose`,
/// task4_pair.py:75, 314); Tasks 2-3 embed the loader's image as stored, and BGE-VL's and
/// GME's Task 4 queries go through a temporary PNG, which keeps no EXIF
/// (pillow_facts.json).
#[test]
fn query_images_are_turned_upright_in_task_4_only() {
    let rotated = std::fs::read(fixture("reference_code/images/jpeg_orientation_6.bin")).unwrap();
    let examples = vec![Example {
        id: "r".into(),
        query: "a rotated photo".into(),
        image_paths: vec!["rot".into()],
        ..Example::default()
    }];
    let bytes = HashMap::from([("rot".to_string(), rotated.clone())]);
    let clip = load("vision/tiny-clip-quickgelu");
    let v = clip.as_vision().unwrap();
    let decode = |orient: bool| {
        sift_embed::image::decode_image(
            &rotated,
            Decode {
                orient,
                ..Decode::REFERENCE_LOADER
            },
        )
        .unwrap()
    };
    let stored = raw_sum(
        &clip,
        "a rotated photo",
        v.processor().preprocess(&decode(false)),
    );
    let upright = raw_sum(
        &clip,
        "a rotated photo",
        v.processor().preprocess(&decode(true)),
    );
    assert!(
        cosine(&stored, &upright) < 0.99999,
        "the fixture tells them apart"
    );
    for task in [Task::MultimodalPassages, Task::Images] {
        let got = reference_of(&clip, task, &examples, &bytes);
        assert!(cosine(&got[0], &stored) > 0.99999, "{task:?}");
    }
    let got = reference_of(&clip, Task::Pairs, &examples, &bytes);
    assert!(cosine(&got[0], &upright) > 0.99999);
    // BGE-VL's Task 4 query: a temporary PNG, stored orientation
    let bge = load("bge_vl/tiny-bge-vl");
    let vb = bge.as_vision().unwrap();
    let got = reference_of(&bge, Task::Pairs, &examples, &bytes);
    let stored = raw_sum(
        &bge,
        "a rotated photo",
        vb.processor().preprocess(&decode(false)),
    );
    assert!(cosine(&got[0], &stored) > 0.99999);
}

/// SigLIP's Task 3 query images are resized to 384 x 384 by Pillow (bicubic) before the
/// processor (task3_image.py:421-422); Tasks 2 and 4 hand the processor the image.
#[test]
fn siglip_task_3_query_images_are_first_resized_to_384() {
    let siglip = load("vision/tiny-siglip");
    let v = siglip.as_vision().unwrap();
    let (examples, bytes) = queries();
    let img =
        sift_embed::image::decode_image(&image("shapes_rgb_50x37.png"), Decode::REFERENCE_LOADER)
            .unwrap();
    let square =
        sift_embed::image::resize_rgb8(&img, 384, 384, sift_embed::image::Resample::Bicubic);
    let text = "why does the circuit oscillate";
    let want = raw_sum(&siglip, text, v.processor().preprocess(&square));
    let plain = raw_sum(&siglip, text, v.processor().preprocess(&img));
    assert!(
        cosine(&want, &plain) < 0.99999,
        "the fixture tells them apart"
    );
    let got = reference_of(&siglip, Task::Images, &examples, &bytes);
    assert!(cosine(&got[0], &want) > 0.99999);
    let got = reference_of(&siglip, Task::MultimodalPassages, &examples, &bytes);
    assert!(cosine(&got[0], &plain) > 0.99999);
}

#[test]
fn every_rule_names_its_source() {
    use ReferenceModel::*;
    for model in [Clip, Siglip, Nomic, BgeVl, Gme, JinaClip] {
        assert!(reference_rule(model, Task::Passages, Profile::Reference).is_none());
        for task in [Task::MultimodalPassages, Task::Images, Task::Pairs] {
            let r = reference_rule(model, task, Profile::Reference).unwrap();
            assert!(r.source.contains(".py:"), "{model:?} {task:?}");
        }
    }
    assert!(reference_rule(Other, Task::Images, Profile::Reference).is_none());
}
