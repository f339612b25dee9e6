//! Cross-encoders against sentence-transformers' `CrossEncoder` on tiny random BERT and
//! XLM-RoBERTa sequence classifiers (`models/fixtures/cross_encoder/`, made by
//! `make_fixtures.py`): each pair's token ids and types (truncation longest-first at 48 and
//! at the model's own length), raw logit and `predict()` score (the activation the
//! checkpoint's config names: the legacy Identity key for the BERT one, the sigmoid
//! default for the XLM-R one) within 1e-5, and `rank()`'s order.
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use serde_json::Value;
use sift_embed::{CrossEncoder, CrossEncoderOptions, ScoreActivation};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn expected() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(repo().join("models/fixtures/cross_encoder/expected.json"))
            .unwrap(),
    )
    .unwrap()
}

fn load(m: &Value, max_length: Option<usize>, batch: usize) -> CrossEncoder {
    let dir = repo().join(m["dir"].as_str().unwrap());
    CrossEncoder::load(
        dir.to_str().unwrap(),
        &Device::Cpu,
        &CrossEncoderOptions {
            max_length,
            dtype: DType::F32,
            batch,
        },
    )
    .unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn scores_equal_sentence_transformers_cross_encoder_predict() {
    let exp = expected();
    for (name, m) in exp["models"].as_object().unwrap() {
        let pairs = m["pairs"].as_array().unwrap();
        let texts: Vec<(&str, &str)> = pairs
            .iter()
            .map(|p| (p["query"].as_str().unwrap(), p["passage"].as_str().unwrap()))
            .collect();
        let max_length = m["max_length"].as_u64().unwrap() as usize;
        // batches of 1, 3 and all: packing must not change a score
        for batch in [1, 3, 32] {
            let ce = load(m, Some(max_length), batch);
            let want_act = m["activation_fn"].as_str().unwrap();
            assert_eq!(
                ce.activation(),
                if want_act.ends_with("Identity") {
                    ScoreActivation::Identity
                } else {
                    ScoreActivation::Sigmoid
                },
                "{name}"
            );
            let tokens = ce.tokenize_pairs(&texts).unwrap();
            let logits = ce.logits(&texts).unwrap();
            let scores = ce.score(&texts).unwrap();
            for (i, p) in pairs.iter().enumerate() {
                assert_eq!(tokens[i].0, ids(&p["input_ids"]), "{name} pair {i}");
                if let Some(t) = p.get("token_type_ids") {
                    assert_eq!(tokens[i].1, ids(t), "{name} pair {i} types");
                }
                let (l, s) = (p["logit"].as_f64().unwrap(), p["score"].as_f64().unwrap());
                assert!(
                    (logits[i] as f64 - l).abs() < 1e-5,
                    "{name} pair {i}: logit {} vs {l}",
                    logits[i]
                );
                assert!(
                    (scores[i] as f64 - s).abs() < 1e-5,
                    "{name} pair {i}: score {} vs {s}",
                    scores[i]
                );
            }
        }
        // the model's own length (tokenizer_config's model_max_length, else its positions)
        let ce = load(m, None, 32);
        assert_eq!(
            ce.max_length(),
            m["default_max_length"].as_u64().unwrap() as usize,
            "{name}"
        );
        let tokens = ce.tokenize_pairs(&texts).unwrap();
        let scores = ce.score(&texts).unwrap();
        for (i, p) in pairs.iter().enumerate() {
            let d = &p["default_max_length"];
            assert_eq!(
                tokens[i].0,
                ids(&d["input_ids"]),
                "{name} pair {i} (default length)"
            );
            let s = d["score"].as_f64().unwrap();
            assert!(
                (scores[i] as f64 - s).abs() < 1e-5,
                "{name} pair {i} (default length)"
            );
        }
        // rank(): one query over every passage
        let rank = &m["rank"];
        let q = rank["query"].as_str().unwrap();
        let docs: Vec<(&str, &str)> = texts.iter().map(|&(_, p)| (q, p)).collect();
        let ce = load(m, Some(max_length), 32);
        let s = ce.score(&docs).unwrap();
        let mut order: Vec<usize> = (0..s.len()).collect();
        order.sort_by(|&a, &b| s[b].total_cmp(&s[a]));
        let want: Vec<usize> = rank["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["corpus_id"].as_u64().unwrap() as usize)
            .collect();
        assert_eq!(order, want, "{name} rank");
    }
}

#[test]
fn a_classifier_with_two_labels_or_another_architecture_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = repo().join("models/fixtures/cross_encoder/tiny-bert-ce");
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
    }
    let cfg_path = dir.path().join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["id2label"] = serde_json::json!({"0": "no", "1": "yes"});
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let e = CrossEncoder::load(
        dir.path().to_str().unwrap(),
        &Device::Cpu,
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("2 labels") && e.contains("config.json"), "{e}");
    cfg["id2label"] = serde_json::json!({"0": "LABEL_0"});
    cfg["model_type"] = "gpt2".into();
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let e = CrossEncoder::load(
        dir.path().to_str().unwrap(),
        &Device::Cpu,
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("gpt2"), "{e}");
}

#[test]
fn bf16_logits_stay_within_five_percent_of_f32() {
    // bfloat16 weights on the packed kernels, attention's products included
    let exp = expected();
    for (name, m) in exp["models"].as_object().unwrap() {
        let texts: Vec<(&str, &str)> = m["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["query"].as_str().unwrap(), p["passage"].as_str().unwrap()))
            .collect();
        let dir = repo().join(m["dir"].as_str().unwrap());
        let load = |dtype| {
            CrossEncoder::load(
                dir.to_str().unwrap(),
                &Device::Cpu,
                &CrossEncoderOptions {
                    max_length: Some(48),
                    dtype,
                    batch: 32,
                },
            )
            .unwrap()
        };
        let (a, b) = (
            load(DType::F32).logits(&texts).unwrap(),
            load(DType::BF16).logits(&texts).unwrap(),
        );
        let scale = a.iter().fold(0f32, |s, x| s.max(x.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0f32, |s, (x, y)| s.max((x - y).abs()));
        eprintln!("{name}: bf16 logits within {worst} of f32 (largest {scale})");
        // measured: 0.051 of 6.7 (BERT), 0.030 of 1.03 (XLM-R)
        assert!(worst <= 0.05 * scale, "{name}: {worst} of {scale}");
    }
}

/// A copy of the BERT fixture in a temporary directory, its `config.json` edited by `edit`.
fn bert_copy(edit: impl FnOnce(&mut Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = repo().join("models/fixtures/cross_encoder/tiny-bert-ce");
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
    }
    let cfg_path = dir.path().join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    dir
}

#[test]
fn a_sentence_transformers_6_save_keeps_its_activation_in_its_own_config() {
    // sentence-transformers 6 saves a CrossEncoder's activation only in
    // config_sentence_transformers.json (read before config.json's keys, as its
    // CrossEncoder does); the fixture's logits are its predict() scores under Identity
    let exp = expected();
    let m = &exp["models"]["tiny-bert-ce"];
    assert!(m["activation_fn"].as_str().unwrap().ends_with("Identity"));
    let texts: Vec<(&str, &str)> = m["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["query"].as_str().unwrap(), p["passage"].as_str().unwrap()))
        .collect();
    let st6 = |activation: &str, legacy: Option<&str>| {
        let dir = bert_copy(|c| {
            c.as_object_mut()
                .unwrap()
                .remove("sbert_ce_default_activation_function");
            if let Some(l) = legacy {
                c["sbert_ce_default_activation_function"] = l.into();
            }
        });
        std::fs::write(
            dir.path().join("config_sentence_transformers.json"),
            serde_json::json!({
                "__version__": {"sentence_transformers": "6.3.0", "transformers": "5.24.0",
                    "pytorch": "2.15.0"},
                "model_type": "CrossEncoder",
                "activation_fn": activation,
                "default_prompt_name": null,
                "prompts": {},
            })
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("modules.json"),
            r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.cross_encoder.modules.Transformer"}]"#,
        )
        .unwrap();
        let ce = CrossEncoder::load(
            dir.path().to_str().unwrap(),
            &Device::Cpu,
            &CrossEncoderOptions {
                max_length: Some(m["max_length"].as_u64().unwrap() as usize),
                dtype: DType::F32,
                batch: 32,
            },
        )
        .unwrap();
        (ce.activation(), ce.score(&texts).unwrap())
    };
    let (act, scores) = st6("torch.nn.modules.linear.Identity", None);
    assert_eq!(act, ScoreActivation::Identity);
    for (i, p) in m["pairs"].as_array().unwrap().iter().enumerate() {
        let s = p["score"].as_f64().unwrap();
        assert!(
            (scores[i] as f64 - s).abs() < 1e-5,
            "pair {i}: {} vs {s}",
            scores[i]
        );
    }
    // its own config wins over config.json's legacy key
    let (act, _) = st6(
        "torch.nn.modules.activation.Sigmoid",
        Some("torch.nn.modules.linear.Identity"),
    );
    assert_eq!(act, ScoreActivation::Sigmoid);
    // an activation it cannot apply names the file
    let dir = bert_copy(|_| {});
    let st = dir.path().join("config_sentence_transformers.json");
    std::fs::write(
        &st,
        r#"{"activation_fn": "torch.nn.modules.activation.GELU"}"#,
    )
    .unwrap();
    let e = CrossEncoder::load(
        dir.path().to_str().unwrap(),
        &Device::Cpu,
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("config_sentence_transformers.json") && e.contains("GELU"),
        "{e}"
    );
}

#[test]
fn a_two_label_classifier_without_id2label_is_refused_by_its_label_count() {
    // transformers 5 writes no id2label (nor num_labels) for two labels: the count comes
    // from the scoring layer's weight, and the message is the labels', not a shape error
    let dir = bert_copy(|c| {
        let c = c.as_object_mut().unwrap();
        c.remove("id2label");
        c.remove("label2id");
        c.remove("num_labels");
    });
    let weights = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    let w = tensors["classifier.weight"].clone();
    let b = tensors["classifier.bias"].clone();
    tensors.insert(
        "classifier.weight".into(),
        candle_core::Tensor::cat(&[&w, &w], 0).unwrap(),
    );
    tensors.insert(
        "classifier.bias".into(),
        candle_core::Tensor::cat(&[&b, &b], 0).unwrap(),
    );
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    let e = CrossEncoder::load(
        dir.path().to_str().unwrap(),
        &Device::Cpu,
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("2 labels") && e.contains("config.json"), "{e}");
    assert!(!e.contains("shape"), "{e}");
    // the one-label original without id2label still loads (the weight has one row)
    let dir = bert_copy(|c| {
        let c = c.as_object_mut().unwrap();
        c.remove("id2label");
        c.remove("label2id");
    });
    assert!(
        CrossEncoder::load(
            dir.path().to_str().unwrap(),
            &Device::Cpu,
            &Default::default()
        )
        .is_ok()
    );
}
