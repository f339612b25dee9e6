//! `sift bench` and `sift eval`.
use super::*;

/// `sift bench embed` measures text and image embedding, per batch size, as valid JSON.
#[test]
fn bench_embed_prints_valid_json() {
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    for modality in ["text", "image"] {
        let out = json(&ok(&[
            "bench",
            "embed",
            "--model",
            s(&clip),
            "--modality",
            modality,
            "--batch-size",
            "2,4",
            "--items",
            "8",
            "--warmup",
            "2",
            "--json",
        ]));
        let results = out["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{modality}");
        for r in results {
            assert!(r["items_per_s"].as_f64().unwrap() > 0.0);
            let share = r["prepare_share"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&share));
            assert!(
                r["batch_latency_ms_p99"].as_f64().unwrap()
                    >= r["batch_latency_ms_p50"].as_f64().unwrap()
            );
        }
        assert_eq!(out["modality"], modality);
        // the fixture's projection_dim, both towers
        assert_eq!(out["dim"], 24, "{modality}");
        assert!(out["best"]["batch_size"].as_u64().is_some());
    }
}

/// `sift bench embed` refuses images for a text model.
#[test]
#[ignore = "needs the all-MiniLM-L6-v2 weights: scripts/test installs them and runs it"]
fn bench_embed_refuses_images_for_a_text_model() {
    let err = fails(&[
        "bench",
        "embed",
        "--model",
        s(&minilm()),
        "--modality",
        "image",
    ]);
    assert!(err.contains("text model"), "{err}");
}

/// `sift bench index` reports BM25 and HNSW build rates.
#[test]
fn bench_index_reports_build_rates() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    index_ok(&sample(), &index, &["--dense", s(&clip), "-q"]);
    let out = json(&ok(&[
        "bench",
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        "tiny-clip-quickgelu",
        "--json",
    ]));
    assert_eq!(out["bm25"]["passages"], 46);
    assert!(out["bm25"]["passages_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(out["hnsw"]["vectors"], 46);
    assert!(out["hnsw"]["vectors_per_s"].as_f64().unwrap() > 0.0);
    // the scratch index is gone, the real one untouched
    assert!(index.join("manifest.json").is_file());
}

/// `sift eval --task all` reports exactly what the library API computes on the same index
/// (the CLI only parses flags and prints; `crates/sift-retrieve/tests` runs the library
/// alone).
#[test]
fn eval_reports_what_the_library_computes() {
    use sift_retrieve::{EvalConfig, ModelSet, QueryImages, RetrieverSpec};
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    index_ok(&sample(), &index, &["--dense", s(&clip), "-q"]);
    let cli = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "bm25",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--retriever",
        "hybrid:bm25+dense:tiny-clip-quickgelu",
        "--query-fusion",
        "both",
        "--json",
    ]));
    let corpus = sift_core::Corpus::open(sample()).unwrap();
    let opened = sift_index::IndexDir::open(&index).unwrap();
    let retrievers: Vec<RetrieverSpec> = [
        "bm25",
        "dense:tiny-clip-quickgelu",
        "hybrid:bm25+dense:tiny-clip-quickgelu",
    ]
    .iter()
    .map(|r| r.parse().unwrap())
    .collect();
    let mut models = ModelSet::new();
    for r in &retrievers {
        models
            .load_for(&opened, r, &sift_embed::EmbedderOptions::default(), None)
            .unwrap();
    }
    let config = EvalConfig {
        tasks: sift_eval::Task::ALL.to_vec(),
        retrievers,
        query_images: vec![QueryImages::All, QueryImages::First],
        ..Default::default()
    };
    let lib = sift_retrieve::evaluate(&corpus, &opened, &models, &config, &sift_index::NoProgress)
        .unwrap()
        .to_json();
    // the same up to the last digit a JSON float round trip may change
    fn same(a: &Value, b: &Value, at: &str) {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!(
                    (x - y).abs() <= 1e-12 * x.abs().max(1.0),
                    "{at}: {x} vs {y}"
                );
            }
            (Value::Object(x), Value::Object(y)) => {
                assert_eq!(
                    x.keys().collect::<Vec<_>>(),
                    y.keys().collect::<Vec<_>>(),
                    "{at}"
                );
                for (k, v) in x {
                    same(v, &y[k], &format!("{at}.{k}"));
                }
            }
            (Value::Array(x), Value::Array(y)) => {
                assert_eq!(x.len(), y.len(), "{at}");
                for (i, (v, w)) in x.iter().zip(y).enumerate() {
                    same(v, w, &format!("{at}[{i}]"));
                }
            }
            _ => assert_eq!(a, b, "{at}"),
        }
    }
    same(&cli["reports"], &lib["reports"], "reports");
    assert_eq!(cli["reports"].as_array().unwrap().len(), 15);
}
