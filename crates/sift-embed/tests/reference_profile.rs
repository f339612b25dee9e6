//! The reference profile's text and image rules (MM-BRIGHT's reference code, model by
//! model; docs/src/reference-profile.md): what each model embeds for a document or query in
//! `Profile::Reference`, against the default profile's vector of the text the reference
//! code would have fed it.
use sift_embed::{Embedder, EmbedderOptions, Input, Profile, ReferenceModel, Role};

fn fixture(rel: &str) -> String {
    format!("{}/../../models/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn load(rel: &str, profile: Profile) -> Embedder {
    let options = EmbedderOptions {
        profile,
        ..Default::default()
    };
    Embedder::load(&fixture(rel), &options).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

/// A document of `chars` characters: `word` (one token of the tiny tokenizer, so the text
/// stays under the model's token limit and a character cut changes its tokens) repeated,
/// with a different ending after the cut.
fn long_document(word: &str, chars: usize) -> String {
    let mut s = String::new();
    while s.chars().count() < chars {
        s.push_str(word);
    }
    for _ in 0..100 {
        s.push_str(" 9");
    }
    s
}

#[test]
fn nomic_documents_are_their_first_8000_characters_without_search_document() {
    let reference = load("nomic/tiny-nomic-embed-vision-v1.5", Profile::Reference);
    let default = load("nomic/tiny-nomic-embed-vision-v1.5", Profile::Default);
    assert_eq!(reference.reference_model(), ReferenceModel::Nomic);
    let doc = long_document("clustering ", 9000);
    let got = reference.embed_texts(&[&doc], Role::Passage).unwrap();
    // what the reference embeds: the text tower on the first 8,000 characters, no prefix
    let cut: String = doc.chars().take(8000).collect();
    let files = sift_embed::ModelFiles::from_dir(std::path::Path::new(&fixture(
        "nomic/tiny-nomic-embed-text-v1.5",
    )))
    .unwrap();
    let tower =
        sift_embed::TextEmbedder::load(&files, &candle_core::Device::Cpu, Default::default())
            .unwrap();
    let want = tower
        .embed_tokens(&tower.tokenize_with_prefix(&[&cut], "").unwrap())
        .unwrap();
    assert!(cosine(&got[0], &want[0]) > 0.99999);
    // and not what the default profile embeds (prefix, no cut)
    let plain = default.embed_texts(&[&doc], Role::Passage).unwrap();
    let c = cosine(&got[0], &plain[0]);
    assert!(c < 0.9999, "{c}");
    // queries keep `search_query: ` and are not cut
    let q = reference.embed_texts(&[&doc], Role::Query).unwrap();
    let dq = default.embed_texts(&[&doc], Role::Query).unwrap();
    assert!(cosine(&q[0], &dq[0]) > 0.99999);
    assert_ne!(
        reference.fingerprint(Input::Text(Role::Passage)),
        default.fingerprint(Input::Text(Role::Passage))
    );
}

#[test]
fn gme_texts_are_their_first_4000_characters() {
    // the tiny checkpoint reads 128 tokens: a copy reading 1,024, so that 4,000 characters
    // fit and the cut shows
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::PathBuf::from(fixture("gme/tiny-gme"));
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let config = dir.path().join("config.json");
    let mut c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    c["max_length"] = 1024.into();
    std::fs::write(&config, serde_json::to_vec(&c).unwrap()).unwrap();
    let load = |profile| {
        let options = EmbedderOptions {
            profile,
            ..Default::default()
        };
        Embedder::load(dir.path().to_str().unwrap(), &options).unwrap()
    };
    let reference = load(Profile::Reference);
    let default = load(Profile::Default);
    assert_eq!(reference.reference_model(), ReferenceModel::Gme);
    let doc = long_document(" domesticated", 4500);
    let cut: String = doc.chars().take(4000).collect();
    for role in [Role::Passage, Role::Query] {
        let got = reference.embed_texts(&[&doc], role).unwrap();
        let want = default.embed_texts(&[&cut], role).unwrap();
        assert!(cosine(&got[0], &want[0]) > 0.99999, "{role:?}");
        let plain = default.embed_texts(&[&doc], role).unwrap();
        let c = cosine(&got[0], &plain[0]);
        assert!(
            c < 0.9999,
            "{role:?}: {c} (max {} tokens)",
            default.max_text_tokens()
        );
    }
}

#[test]
fn clip_texts_are_unchanged_and_transparency_is_dropped() {
    let reference = load("vision/tiny-clip-quickgelu", Profile::Reference);
    let default = load("vision/tiny-clip-quickgelu", Profile::Default);
    let doc = long_document("a map ", 500);
    let a = reference.embed_texts(&[&doc], Role::Passage).unwrap();
    let b = default.embed_texts(&[&doc], Role::Passage).unwrap();
    assert!(cosine(&a[0], &b[0]) > 0.999999);
    assert_eq!(
        reference.fingerprint(Input::Text(Role::Passage)),
        default.fingerprint(Input::Text(Role::Passage))
    );
    // the reference converts every image with Pillow's convert("RGB") before the processor:
    // an RGBA image's colours under transparent pixels show (not composited onto white)
    let rgba = std::fs::read(fixture("vision/images/stripes_rgba_40x40.png")).unwrap();
    let dropped =
        sift_embed::image::decode_rgb_with(&rgba, sift_embed::image::Alpha::Drop).unwrap();
    let v = default.as_vision().unwrap();
    let want = v
        .embed_prepared(&[v.processor().preprocess(&dropped)])
        .unwrap();
    let got_ref = reference
        .embed_images(
            &reference
                .prepare_images(&[&rgba])
                .pop()
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let got_default = default
        .embed_images(
            &default
                .prepare_images(&[&rgba])
                .pop()
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
        )
        .unwrap();
    assert!(cosine(&got_ref[0], &want[0]) > 0.99999);
    assert!(cosine(&got_default[0], &want[0]) < 0.9999);
    assert_ne!(
        reference.fingerprint(Input::Image),
        default.fingerprint(Input::Image)
    );
}

/// GME's prompts in the reference profiles are cut where the sentence-transformers module
/// the released code runs cuts them (`custom_st.py:118`, `max_length=self.max_seq_length`):
/// `sentence_bert_config.json`'s `max_seq_length`, else min(config
/// `max_position_embeddings`, tokenizer `model_max_length`), not the checkpoint's own
/// `max_length` (the tiny one: 128) that the default profile keeps.
#[test]
fn gme_length_limit_is_sentence_transformers_in_the_reference_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::PathBuf::from(fixture("gme/tiny-gme"));
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let load = |profile| {
        let options = EmbedderOptions {
            profile,
            ..Default::default()
        };
        Embedder::load(dir.path().to_str().unwrap(), &options).unwrap()
    };
    assert_eq!(load(Profile::Default).max_text_tokens(), 128);
    // config.json: max_position_embeddings 32768; tokenizer_config.json: model_max_length 32768
    assert_eq!(load(Profile::Reference).max_text_tokens(), 32768);
    assert_eq!(load(Profile::ReferenceIntended).max_text_tokens(), 32768);
    std::fs::write(
        dir.path().join("sentence_bert_config.json"),
        br#"{"max_seq_length": 512, "do_lower_case": false}"#,
    )
    .unwrap();
    assert_eq!(load(Profile::Reference).max_text_tokens(), 512);
    // a text longer than the checkpoint's 128 tokens is cut by the default profile only
    let long = long_document(" domesticated", 2000);
    let reference = load(Profile::Reference);
    let default = load(Profile::Default);
    let a = reference.embed_texts(&[&long], Role::Query).unwrap();
    let b = default.embed_texts(&[&long], Role::Query).unwrap();
    assert!(cosine(&a[0], &b[0]) < 0.9999);
}
