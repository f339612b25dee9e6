//! Each model family indexed and evaluated through the command line: Contriever, decoders,
//! query instructions and bf16, Nomic, the reference profile, BGE-VL and Jina CLIP.
use super::*;

/// A Contriever-layout checkpoint (vocab.txt and pytorch_model.bin only) indexes and
/// evaluates like any dense model.
#[test]
fn contriever_layout_checkpoint_indexes_and_evaluates() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let model = repo().join("models/fixtures/contriever/tiny-contriever");
    index_ok(&sample(), &index, &["--dense", s(&model), "-q"]);
    let e = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "1",
        "--retriever",
        "dense:tiny-contriever",
        "--json",
    ]));
    let v = e["metrics"]["ndcg@10"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&v), "{e}");
    assert_eq!(e["per_domain"].as_object().unwrap().len(), 3);
}

/// Decoder LM embedders (tiny random Mistral, Qwen2, Qwen3, Llama) index the sample and run Task 1,
/// Task 2 as text and Task 4 as passages; `sift embed` gives their unit vectors.
#[test]
fn decoder_embedders_index_and_evaluate() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let root = repo().join("models/fixtures/decoder");
    let (mistral, qwen2) = (root.join("tiny-mistral"), root.join("tiny-qwen2"));
    let (qwen3, llama) = (root.join("tiny-qwen3"), root.join("tiny-llama"));
    index_ok(
        &sample(),
        &index,
        &[
            "--dense",
            s(&mistral),
            "--dense",
            s(&qwen2),
            "--dense",
            s(&qwen3),
            "--dense",
            s(&llama),
            "-q",
        ],
    );
    let e = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "dense:tiny-mistral",
        "--retriever",
        "dense:tiny-qwen2",
        "--retriever",
        "dense:tiny-qwen3",
        "--retriever",
        "dense:tiny-llama",
        "--json",
    ]));
    let reports = e["reports"].as_array().unwrap();
    // tasks 1, 2 and 4 for each (text models rank no images: task 3 is not applicable)
    assert_eq!(reports.len(), 12, "{e}");
    for r in reports {
        let v = r["metrics"]["ndcg@10"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&v), "{}", r["label"]);
    }
    let input = tmp.path().join("texts.txt");
    fs::write(&input, "shock waves\nboundary layer separation\n").unwrap();
    let out = tmp.path().join("v.jsonl");
    ok(&[
        "embed",
        "--model",
        s(&mistral),
        "--input",
        s(&input),
        "--out",
        s(&out),
        "--kind",
        "query",
    ]);
    let rows: Vec<Value> = fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    let v: Vec<f64> = rows[0]["vector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(v.len(), 64);
    let norm: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
}

/// Query instructions on a decoder the registry knows (tiny-mistral's weights under E5-Mistral's
/// name, so its prompt format "Instruct: {instruction}\nQuery: " applies): `--instructions
/// reference` (none), `bright` (BRIGHT's per-domain sentence), `--query-instruction` and an
/// `--instructions-file` each change the rankings, the same instruction by flag or file gives
/// the same run, a file without the domain is an error naming both; `sift embed` takes the
/// instruction for a model with a format and refuses it for one without; `--dtype bf16`
/// embeds within the bf16 bound of f32.
#[test]
fn query_instructions_and_bf16_through_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("e5-mistral-7b-instruct");
    copy_dir(&repo().join("models/fixtures/decoder/tiny-mistral"), &model);
    let index = tmp.path().join("index");
    index_ok(&sample(), &index, &["--dense", s(&model), "-q"]);
    let corpus = sample();
    let run = |name: &str, extra: &[&str]| -> String {
        let out = tmp.path().join(format!("{name}.trec"));
        let mut args = vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--task",
            "1",
            "--retriever",
            "dense:e5-mistral-7b-instruct",
            "--run-out",
            s(&out),
            "-q",
        ];
        args.extend_from_slice(extra);
        ok(&args);
        fs::read_to_string(&out).unwrap()
    };
    let reference = run("reference", &[]);
    let bright = run("bright", &["--instructions", "bright"]);
    let text = run(
        "text",
        &["--query-instruction", "Find passages about {domain}"],
    );
    let file = tmp.path().join("instructions.json");
    fs::write(&file, r#"{"*": "Find passages about {domain}"}"#).unwrap();
    let from_file = run("file", &["--instructions-file", s(&file)]);
    assert_ne!(
        reference, bright,
        "BRIGHT's instruction changes the rankings"
    );
    assert_ne!(reference, text);
    assert_ne!(bright, text);
    assert_eq!(text, from_file, "the same instruction by flag and by file");
    fs::write(&file, r#"{"no-such-domain": "x"}"#).unwrap();
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "1",
        "--retriever",
        "dense:e5-mistral-7b-instruct",
        "--instructions-file",
        s(&file),
    ]);
    assert!(
        err.contains("instructions.json") && err.contains("no instruction for domain"),
        "{err}"
    );

    let input = tmp.path().join("q.txt");
    fs::write(&input, "why do shock waves heat the flow\n").unwrap();
    let embed = |model: &Path, extra: &[&str]| -> Vec<f64> {
        let out = tmp.path().join("v.jsonl");
        let mut args = vec![
            "embed",
            "--model",
            s(model),
            "--input",
            s(&input),
            "--out",
            s(&out),
            "--kind",
            "query",
        ];
        args.extend_from_slice(extra);
        ok(&args);
        let row: Value =
            serde_json::from_str(fs::read_to_string(&out).unwrap().lines().next().unwrap())
                .unwrap();
        row["vector"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let cos = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let plain = embed(&model, &[]);
    let instructed = embed(
        &model,
        &[
            "--query-instruction",
            "Given a physics post, retrieve relevant passages",
        ],
    );
    assert!(
        cos(&plain, &instructed) < 0.9999,
        "the instruction changes the query vector"
    );
    let bf16 = embed(&model, &["--dtype", "bf16"]);
    let c = cos(&plain, &bf16);
    assert!((0.999..1.0).contains(&c), "bf16 against f32: cosine {c}");
    let unknown = repo().join("models/fixtures/decoder/tiny-qwen2");
    let err = fails(&[
        "embed",
        "--model",
        s(&unknown),
        "--input",
        s(&input),
        "--out",
        s(&tmp.path().join("never.jsonl")),
        "--kind",
        "query",
        "--query-instruction",
        "x",
    ]);
    assert!(err.contains("takes no query instruction"), "{err}");
}

/// Nomic Embed v1.5 (tiny random text + vision checkpoints side by side): the vision
/// checkpoint indexes the sample's passages with its text tower and its images with the
/// image tower, and every task runs, Task 3 (images) included.
#[test]
fn nomic_embed_indexes_and_evaluates_every_task() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let vision = repo().join("models/fixtures/nomic/tiny-nomic-embed-vision-v1.5");
    index_ok(&sample(), &index, &["--dense", s(&vision), "-q"]);
    let e = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "dense:tiny-nomic-embed-vision-v1.5",
        "--json",
    ]));
    let reports = e["reports"].as_array().unwrap();
    let tasks: Vec<&str> = reports
        .iter()
        .map(|r| r["task"].as_str().unwrap())
        .collect();
    for t in ["1", "2", "3", "4"] {
        assert!(
            tasks.iter().any(|x| x.starts_with(t)),
            "task {t} missing: {tasks:?}"
        );
    }
    for r in reports {
        let v = r["metrics"]["ndcg@10"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&v), "{}", r["label"]);
    }
}

/// `--profile reference` end to end for every model the reference code treats in its own way
/// (CLIP, Nomic, GME, BGE-VL, Jina-CLIP): the index records the profile, `sift eval --profile
/// reference` runs all four tasks with the reference's query rules, and mixing profiles is
/// refused (the rules themselves are tested in sift-embed's `reference_profile` and
/// sift-retrieve's `query` tests).
#[test]
fn reference_profile_indexes_and_evaluates_every_task_for_each_model() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, slug) in [
        (
            "models/fixtures/vision/tiny-clip-quickgelu",
            "tiny-clip-quickgelu",
        ),
        (
            "models/fixtures/nomic/tiny-nomic-embed-vision-v1.5",
            "tiny-nomic-embed-vision-v1.5",
        ),
        ("models/fixtures/gme/tiny-gme", "tiny-gme"),
        ("models/fixtures/bge_vl/tiny-bge-vl", "tiny-bge-vl"),
        (
            "models/fixtures/jina_clip/tiny-jina-clip-v1",
            "tiny-jina-clip-v1",
        ),
        (
            "models/fixtures/jina_clip_v2/tiny-jina-clip-v2",
            "tiny-jina-clip-v2",
        ),
    ] {
        let model = repo().join(model);
        let index = tmp.path().join(slug);
        let built = json(&index_ok(
            &sample(),
            &index,
            &[
                "--dense",
                s(&model),
                "--profile",
                "reference",
                "--json",
                "-q",
            ],
        ));
        let dense = &built["manifest"]["dense"][slug];
        assert_eq!(dense["profile"], "reference", "{slug}: {dense}");
        let retriever = format!("dense:{slug}");
        let e = json(&ok(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--task",
            "all",
            "--retriever",
            &retriever,
            "--profile",
            "reference",
            "--json",
        ]));
        let reports = e["reports"].as_array().unwrap();
        for t in ["1", "2", "3", "4"] {
            assert!(
                reports
                    .iter()
                    .any(|r| r["task"].as_str().unwrap().starts_with(t)),
                "{slug}: task {t} missing"
            );
        }
        // Tasks 2-4 fuse query images by the reference's rule
        for r in reports.iter().filter(|r| r["task"] != "1") {
            let label = r["label"].as_str().unwrap();
            assert!(
                label.ends_with("[query images: reference]"),
                "{slug}: {label}"
            );
            let v = r["metrics"]["ndcg@10"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{slug}: {label}");
        }
        // Task 4 is scored as the released code scores it, and the report says which of
        // its rules were in force for each task
        assert!(
            reports.iter().any(|r| r["task"] == "4 (legacy)"),
            "{slug}: {reports:?}"
        );
        let rules = e["reference_rules"].as_array().unwrap();
        for t in [2, 3, 4] {
            assert!(
                rules
                    .iter()
                    .any(|r| r["task"] == t && r["profile"] == "reference"),
                "{slug}: task {t}: {rules:?}"
            );
        }
        // the same index serves the intended profile, and --protocol still decides
        let intended = json(&ok(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--task",
            "4",
            "--retriever",
            &retriever,
            "--profile",
            "reference-intended",
            "--protocol",
            "paper",
            "--json",
        ]));
        assert_eq!(intended["task"], "4 (paper)", "{slug}");
        assert_eq!(
            intended["reference_rules"][0]["profile"], "reference-intended",
            "{slug}"
        );
        // a search of the index embeds queries with the profile it was built with
        ok(&[
            "search",
            "--index",
            s(&index),
            "--retriever",
            &retriever,
            "--domain",
            "gis",
            "--query",
            "map projection",
            "--query-fusion",
            "reference",
            "--json",
        ]);
    }
    // the reference profile's queries against vectors made with the default one: refused
    let default = tmp.path().join("default");
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    index_ok(&sample(), &default, &["--dense", s(&clip), "-q"]);
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&default),
        "--task",
        "2",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--profile",
        "reference",
    ]);
    assert!(err.contains("default profile"), "{err}");
}

/// BGE-VL and Jina-CLIP v1 and v2 in the default profile: indexed with their image indexes and evaluated
/// on all four tasks (BGE-VL's queries with images are its joint input).
#[test]
fn bge_vl_and_jina_clip_index_and_evaluate_every_task() {
    let tmp = tempfile::tempdir().unwrap();
    for (model, slug) in [
        ("models/fixtures/bge_vl/tiny-bge-vl", "tiny-bge-vl"),
        (
            "models/fixtures/jina_clip/tiny-jina-clip-v1",
            "tiny-jina-clip-v1",
        ),
        (
            "models/fixtures/jina_clip_v2/tiny-jina-clip-v2",
            "tiny-jina-clip-v2",
        ),
    ] {
        let index = tmp.path().join(slug);
        let built = json(&index_ok(
            &sample(),
            &index,
            &["--dense", s(&repo().join(model)), "--json", "-q"],
        ));
        let dense = &built["manifest"]["dense"][slug];
        assert!(
            dense["images"].is_object(),
            "{slug}: no image index: {dense}"
        );
        assert!(dense.get("profile").is_none(), "{slug}: {dense}");
        let retriever = format!("dense:{slug}");
        let e = json(&ok(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--task",
            "all",
            "--retriever",
            &retriever,
            "--json",
        ]));
        let reports = e["reports"].as_array().unwrap();
        for t in ["1", "2", "3", "4"] {
            assert!(
                reports
                    .iter()
                    .any(|r| r["task"].as_str().unwrap().starts_with(t)),
                "{slug}: task {t} missing"
            );
        }
        for r in reports {
            let v = r["metrics"]["ndcg@10"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{slug}: {}", r["label"]);
        }
    }
}
