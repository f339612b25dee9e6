//! Usage errors and messages: they name the real problem, meaningless and absurd values are
//! refused, every numeric flag has a range, odd judgements and edited analyzers are
//! reported.
use super::*;

/// Messages say what is wrong, where.
#[test]
fn error_messages_name_the_real_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    // a model path that does not exist is not looked up on the hub
    let err = index_fails(&sample(), &index, &["--dense", "/nonexistent/dir", "-q"]);
    assert!(
        err.contains("no such directory") && !err.contains("lookup"),
        "{err}"
    );
    // a non-integer numeric _id
    let root = beir(
        tmp.path(),
        "{\"_id\": 1e30, \"text\": \"x\"}\n{\"_id\": 1.0e30, \"text\": \"y\"}\n",
        QUERIES,
        QRELS,
    );
    let err = index_fails(&root, &index, &["-q"]);
    assert!(
        err.contains("corpus.jsonl:1") && err.contains("not an integer"),
        "{err}"
    );
    // hybrid weights that are not numbers
    index_ok(&sample(), &index, &["-q"]);
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--retriever",
        "hybrid:bm25+dense:x:a,b",
    ]);
    assert!(
        err.contains("hybrid weights \"a,b\" are not numbers"),
        "{err}"
    );
    // model configs: an unknown model_type, none at all, garbage
    let model = tmp.path().join("m");
    copy_dir(&tiny_clip(), &model);
    let texts = tmp.path().join("t.txt");
    fs::write(&texts, "x\n").unwrap();
    let out = tmp.path().join("v.jsonl");
    set_config(&model, "model_type", "mamba".into());
    let err = fails(&[
        "embed",
        "--model",
        s(&model),
        "--input",
        s(&texts),
        "--out",
        s(&out),
    ]);
    assert!(
        err.contains("\"mamba\"") && err.contains("clip") && err.contains("qwen2_vl"),
        "{err}"
    );
    let mut config = json(&fs::read_to_string(model.join("config.json")).unwrap());
    config.as_object_mut().unwrap().remove("model_type");
    fs::write(model.join("config.json"), config.to_string()).unwrap();
    let err = fails(&[
        "embed",
        "--model",
        s(&model),
        "--input",
        s(&texts),
        "--out",
        s(&out),
    ]);
    assert!(
        err.contains("no model_type") && err.contains("config.json"),
        "{err}"
    );
    fs::write(model.join("config.json"), "{ not json").unwrap();
    let err = fails(&["models", "info", s(&model)]);
    assert!(
        err.contains("config.json") && err.contains("invalid JSON"),
        "{err}"
    );
    // an I/O error is said once
    let err = fails(&[
        "eval",
        "--run",
        "/nonexistent/run.txt",
        "--qrels",
        "/nonexistent/q",
    ]);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

/// Values that cannot mean anything are usage errors (exit 2), as is `eval` without either
/// mode.
#[test]
fn meaningless_values_are_usage_errors() {
    let corpus = sample();
    for args in [
        vec!["eval"],
        vec!["eval", "--run", "r", "--qrels", "q", "--top-k", "0"],
        vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            "i",
            "--ef-search",
            "0",
        ],
        vec!["search", "--index", "i", "--query", "q", "--top-k", "0"],
    ] {
        let out = sift(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    index_ok(&corpus, &index, &["-q"]);
    let err = fails(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--retriever",
        "hybrid:bm25+bm25:0,0",
    ]);
    assert!(err.contains("not all zero"), "{err}");
}

/// `--threads` past any machine's size is a usage error, not a hang (99999999999 threads) or
/// an abort.
#[test]
fn absurd_thread_counts_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    for n in ["99999999999", "18446744073709551615", "1025", "0"] {
        let out = sift_within(
            &[
                "index",
                "--corpus",
                s(&sample()),
                "--index",
                s(&index),
                "--threads",
                n,
            ],
            60,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--threads {n}: {stderr}");
        assert!(stderr.contains("--threads"), "{stderr}");
    }
    assert!(!index.exists());
    index_ok(&sample(), &index, &["--threads", "1024", "-q"]);
}

/// The smaller silent answers of the reliability round, each now said: a gold id that is also
/// a negative id and negative ids naming no passage are counted (check and eval), an edited
/// analyzer in the manifest is detected, `--domains ''` is a usage error.
#[test]
fn odd_judgements_edited_analyzers_and_empty_domain_lists_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let mm = tmp.path().join("mm");
    copy_dir(&sample(), &mm);
    let list = |items: &[&[&str]]| {
        let mut b =
            arrow_array::builder::ListBuilder::new(arrow_array::builder::StringBuilder::new());
        for row in items {
            for v in *row {
                b.values().append_value(v);
            }
            b.append(true);
        }
        std::sync::Arc::new(b.finish()) as arrow_array::ArrayRef
    };
    write_parquet(
        &mm.join("examples/gis.parquet"),
        vec![
            ("id", strings(&["gis_a", "gis_b"])),
            ("query", strings(&["map projection", "raster data"])),
            (
                "gold_ids",
                list(&[&["gis/1f3a9c2e_0.txt"], &["gis/1f3a9c2e_0.txt"]]),
            ),
            (
                "negative_ids",
                list(&[&["gis/1f3a9c2e_0.txt", "gis/not-a-passage.txt"], &[]]),
            ),
        ],
    );
    let checked = json(&ok(&[
        "check",
        "--corpus",
        s(&mm),
        "--domains",
        "gis",
        "--json",
    ]));
    assert_eq!(checked["warnings"]["gold_also_negative"], 1, "{checked}");
    assert_eq!(checked["warnings"]["unknown_negative_id"], 1, "{checked}");
    let index = tmp.path().join("idx");
    index_ok(&mm, &index, &["-q"]);
    let ev = json(&ok(&[
        "eval",
        "--corpus",
        s(&mm),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--json",
    ]));
    assert_eq!(ev["warnings"]["gold_also_negative"], 1, "{ev}");
    assert_eq!(ev["warnings"]["unknown_negative_id"], 1, "{ev}");

    // the manifest's analyzer edited by hand: the BM25 domains record their own
    let manifest = index.join("manifest.json");
    let text = fs::read_to_string(&manifest).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let stemmer = m["analyzer"]["stemmer"].clone();
    assert!(stemmer.is_string(), "{}", m["analyzer"]);
    m["analyzer"]["stemmer"] = if stemmer == "none" { "porter" } else { "none" }.into();
    fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let err = fails(&[
        "search",
        "--index",
        s(&index),
        "--domain",
        "gis",
        "--query",
        "map projection",
    ]);
    assert!(
        err.contains("analyzer.json") && err.contains("the manifest was edited"),
        "{err}"
    );

    for cmd in [
        vec![
            "index",
            "--corpus",
            s(&mm),
            "--index",
            s(&index),
            "--domains",
            "",
        ],
        vec![
            "eval",
            "--corpus",
            s(&mm),
            "--index",
            s(&index),
            "--domains",
            " , ",
        ],
        vec!["check", "--corpus", s(&mm), "--domains", ""],
    ] {
        let out = sift(&cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {stderr}");
        assert!(stderr.contains("give one or more domain names"), "{stderr}");
    }
}

/// Every numeric flag has a range: values past it are usage errors naming the flag (exit 2),
/// never a panic (`--resamples 18446744073709551615` was a capacity overflow, `sift generate
/// --timeout 18446744073709551615` an instant overflow) or work that never ends.
#[test]
fn every_numeric_flag_has_a_range() {
    let max = "18446744073709551615";
    let cases: &[(&[&str], &str)] = &[
        (&["report", "d", "--out", "o"], "--resamples"),
        (&["report", "d", "--out", "o"], "--top"),
        (&["report", "d", "--out", "o"], "--max-mb"),
        (&["report", "d", "--out", "o"], "--thumbnail-mb"),
        (&["eval", "--run", "r", "--qrels", "q"], "--resamples"),
        (
            &[
                "generate",
                "captions",
                "--corpus",
                "c",
                "--generator",
                "g",
                "--out",
                "o",
            ],
            "--timeout",
        ),
        (
            &[
                "generate",
                "captions",
                "--corpus",
                "c",
                "--generator",
                "g",
                "--out",
                "o",
            ],
            "--concurrency",
        ),
        (
            &[
                "generate",
                "captions",
                "--corpus",
                "c",
                "--generator",
                "g",
                "--out",
                "o",
            ],
            "--max-new-tokens",
        ),
        (&["index", "--corpus", "c", "--index", "i"], "--hnsw-m"),
        (
            &["index", "--corpus", "c", "--index", "i"],
            "--ef-construction",
        ),
        (
            &["index", "--corpus", "c", "--index", "i"],
            "--max-image-pixels",
        ),
        (&["index", "--corpus", "c", "--index", "i"], "--batch-size"),
        (&["eval", "--corpus", "c", "--index", "i"], "--rerank-depth"),
        (
            &["eval", "--corpus", "c", "--index", "i"],
            "--rerank-window",
        ),
    ];
    for (args, flag) in cases {
        let mut a: Vec<&str> = args.to_vec();
        a.extend([*flag, max]);
        let out = sift(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(2) && err.contains(flag) && err.contains("out of range"),
            "{a:?}: {:?} {err}",
            out.status
        );
    }
    // (--k1 and --b are checked where BM25's parameters are applied, for every door:
    // tests/cli/bad_input.rs mismatched_settings_and_versions_are_refused_clearly)
    for (flag, bad) in [
        ("--top-p", "NaN"),
        ("--top-p", "1.5"),
        ("--temperature", "inf"),
    ] {
        let mut a = vec![
            "generate",
            "captions",
            "--corpus",
            "c",
            "--generator",
            "g",
            "--out",
            "o",
        ];
        a.extend([flag, bad]);
        let out = sift(&a);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{a:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
