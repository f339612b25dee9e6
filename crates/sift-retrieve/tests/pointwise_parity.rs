//! The pointwise yes/no reranker against transformers on the tiny Qwen2-VL-Instruct
//! checkpoint (`models/fixtures/qwen2_vl_instruct/rerank_expected.json`, made by
//! `make_rerank_fixture.py`): for a text-only candidate, query images with a passage, a
//! corpus image, and a passage with its image, the rendered prompt, its token ids, the
//! answer tokens, and the score log P(yes) against no (from the last position's logits).
#[path = "../../sift-generate/tests/common/mod.rs"]
mod generation;

use candle_core::Device;
use serde_json::Value;
use sift_generate::{LocalQwen2Vl, Part};
use sift_retrieve::rerank::{PointwiseReranker, RerankDoc, RerankQuery};

/// A fixture case's query images and candidate image (`models/fixtures/gme/images`).
fn case_images(case: &Value) -> (Vec<Vec<u8>>, Option<Vec<u8>>) {
    let image = |name: &str| {
        let dir = generation::repository().join("models/fixtures/gme/images");
        std::fs::read(dir.join(name)).unwrap()
    };
    let query_images = case["query_images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| image(n.as_str().unwrap()))
        .collect();
    (query_images, case["image"].as_str().map(image))
}

/// The query and the candidate of a fixture case, with its images.
fn rerank_inputs<'a>(
    case: &'a Value,
    query_images: &'a [&'a [u8]],
    doc_image: Option<&'a [u8]>,
) -> (RerankQuery<'a>, RerankDoc<'a>) {
    let q = RerankQuery {
        id: "q",
        text: case["query"].as_str().unwrap(),
        images: query_images,
    };
    let d = RerankDoc {
        id: "d",
        text: case["text"].as_str(),
        image: doc_image,
    };
    (q, d)
}

#[test]
fn yes_no_scores_equal_transformers_logits() {
    let root = generation::repository();
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(
            root.join("models/fixtures/qwen2_vl_instruct/rerank_expected.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    generation::tiny_qwen2_vl_instruct(dir.path());
    let model = LocalQwen2Vl::load(dir.path().to_str().unwrap(), &Device::Cpu).unwrap();
    let r = PointwiseReranker::new(model, 2000).unwrap();
    assert_eq!(
        r.answer_tokens(),
        (
            exp["yes_id"].as_u64().unwrap() as u32,
            exp["no_id"].as_u64().unwrap() as u32
        )
    );
    for case in exp["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let (query_images, doc_image) = case_images(case);
        let refs: Vec<&[u8]> = query_images.iter().map(Vec::as_slice).collect();
        let (q, d) = rerank_inputs(case, &refs, doc_image.as_deref());
        let msgs = r.messages(&q, &d);
        let prompt = r.model().chat_prompt(&msgs).unwrap();
        assert_eq!(prompt, case["prompt"].as_str().unwrap(), "{name}");
        let images: Vec<&[u8]> = msgs
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|p| match p {
                Part::Image { bytes, .. } => Some(bytes.as_slice()),
                Part::Text(_) => None,
            })
            .collect();
        let prepared = r.model().prepare_images(&images).unwrap();
        let ids = r
            .model()
            .expand_image_tokens(&r.model().tokenize(&prompt).unwrap(), &prepared)
            .unwrap();
        let want: Vec<u32> = serde_json::from_value(case["input_ids"].clone()).unwrap();
        assert_eq!(ids, want, "{name}");
        let logits = r.model().next_token_logits(&ids, &prepared).unwrap();
        let (y, n) = r.answer_tokens();
        for (got, key) in [
            (logits[y as usize], "logit_yes"),
            (logits[n as usize], "logit_no"),
        ] {
            let w = case[key].as_f64().unwrap();
            assert!((got as f64 - w).abs() < 1e-4, "{name}: {key} {got} vs {w}");
        }
        let score = r.score(&q, &d).unwrap();
        let w = case["score"].as_f64().unwrap();
        assert!((score - w).abs() < 1e-4, "{name}: score {score} vs {w}");
    }
}

#[test]
fn scores_are_cached_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    generation::tiny_qwen2_vl_instruct(&dir.path().join("m"));
    let spec = dir.path().join("m");
    let cache_path = dir.path().join("scores.jsonl");
    let open = || {
        let model = LocalQwen2Vl::load(spec.to_str().unwrap(), &Device::Cpu).unwrap();
        PointwiseReranker::new(model, 2000)
            .unwrap()
            .with_cache(sift_generate::GenerationCache::open(&cache_path).unwrap())
    };
    let q = RerankQuery {
        id: "q1",
        text: "why is the sky blue",
        images: &[],
    };
    let docs: Vec<RerankDoc> = ["scattering of light", "a recipe for bread"]
        .iter()
        .map(|t| RerankDoc {
            id: t,
            text: Some(t),
            image: None,
        })
        .collect();
    use sift_retrieve::Reranker;
    let first = open().scores(&q, &docs).unwrap();
    let lines = std::fs::read_to_string(&cache_path)
        .unwrap()
        .lines()
        .count();
    assert_eq!(lines, 2);
    // a second reranker reads the same scores back, adding nothing
    let second = open().scores(&q, &docs).unwrap();
    assert_eq!(first, second);
    assert_eq!(
        std::fs::read_to_string(&cache_path)
            .unwrap()
            .lines()
            .count(),
        2
    );
}

/// jina-reranker-m0's relevance head on the tiny Qwen2-VL
/// (`models/fixtures/jina_reranker_m0`, made by its `make_fixture.py`): the plain prompt, its
/// token ids with the score token, the head's output and the score, against transformers for
/// a text-only candidate, query images with a passage, a corpus image, and a passage with its
/// image. The checkpoint is found by `open_reranker` as a model with its own head.
#[test]
fn score_head_equals_transformers() {
    use sift_retrieve::rerank::{
        ListwiseSettings, PointwisePrompt, RerankOptions, ScoreHeadReranker, open_reranker,
    };
    let root = generation::repository();
    let fixture = root.join("models/fixtures/jina_reranker_m0");
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    generation::tiny_jina_reranker_m0(dir.path());
    let spec = dir.path().to_str().unwrap();
    let r = ScoreHeadReranker::load(spec, &Device::Cpu, candle_core::DType::F32, 2000).unwrap();
    let mut scores = Vec::new();
    for e in exp.as_array().unwrap() {
        let (name, case) = (e["name"].as_str().unwrap(), &e["case"]);
        let (query_images, doc_image) = case_images(case);
        let refs: Vec<&[u8]> = query_images.iter().map(Vec::as_slice).collect();
        let (q, d) = rerank_inputs(case, &refs, doc_image.as_deref());
        assert_eq!(r.prompt(&q, &d).0, e["prompt"].as_str().unwrap(), "{name}");
        let want: Vec<u32> = serde_json::from_value(e["ids"].clone()).unwrap();
        assert_eq!(r.inputs(&q, &d).unwrap().0, want, "{name}");
        let logit = r.logit(&q, &d).unwrap();
        let want = e["logit"].as_f64().unwrap();
        assert!(
            (logit - want).abs() < 1e-4,
            "{name}: head {logit} vs {want}"
        );
        let score = r.score(&q, &d).unwrap();
        let want = e["score"].as_f64().unwrap();
        assert!(
            (score - want).abs() < 1e-5,
            "{name}: score {score} vs {want}"
        );
        scores.push((score, q.text.to_string(), d.text.map(str::to_string)));
    }
    // the four cases score differently (the head is not constant)
    let mut s: Vec<f64> = scores.iter().map(|x| x.0).collect();
    s.sort_by(f64::total_cmp);
    s.dedup_by(|a, b| (*a - *b).abs() < 1e-6);
    assert_eq!(s.len(), 4, "{scores:?}");
    // `--rerank pointwise:DIR` and `--rerank DIR` pick the head
    let options = RerankOptions {
        device: Device::Cpu,
        dtype: candle_core::DType::F32,
        batch: 8,
        max_length: None,
        model: None,
        remote: sift_generate::RemoteSettings {
            api_key_env: "OPENAI_API_KEY".into(),
            timeout: std::time::Duration::from_secs(5),
            retry: sift_generate::RetryPolicy::default(),
        },
        listwise: ListwiseSettings::default(),
        pointwise_max_chars: 2000,
        pointwise_prompt: PointwisePrompt::default(),
        cache: None,
        cache_max_entries: usize::MAX,
    };
    for spec in [format!("pointwise:{spec}"), spec.to_string()] {
        let opened = open_reranker(&spec, &options).unwrap();
        assert!(
            opened.name().starts_with("score-head:"),
            "{}",
            opened.name()
        );
    }
}
