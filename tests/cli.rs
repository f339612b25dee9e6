//! End-to-end tests of the `sift` binary: the README quickstart on the bundled sample, the
//! Cranfield acceptance check, and bad input of every kind (each must give a clear error
//! naming file and line/row, or a counted warning; never a panic or a half-written index).
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::Value;

mod common;
use common::*;

#[test]
fn quickstart_on_the_sample_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let run = tmp.path().join("run.txt");
    let out = json(&ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--json",
    ]));
    assert_eq!(out["passages"], 46);
    let out = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "1",
        "--retriever",
        "bm25",
        "--run-out",
        s(&run),
        "--json",
    ]));
    let per_domain = out["per_domain"].as_object().unwrap();
    assert_eq!(
        per_domain.keys().collect::<Vec<_>>(),
        ["biology", "gis", "physics"]
    );
    for key in ["ndcg@10", "recall@100", "mrr", "map@10", "p@5"] {
        assert!(out["metrics"][key].is_number(), "missing {key}");
    }
    let mean = out["metrics"]["ndcg@10"].as_f64().unwrap();
    let by_hand: f64 = per_domain
        .values()
        .map(|m| m["ndcg@10"].as_f64().unwrap())
        .sum::<f64>()
        / 3.0;
    assert!(
        (mean - by_hand).abs() < 1e-12,
        "mean is the unweighted mean over domains"
    );
    assert!(
        mean > 0.5,
        "BM25 should find the sample's gold passages: {mean}"
    );

    // the run and qrels written by --run-out / --qrels-out, scored in run mode (trec_eval
    // semantics, -c), give the task's numbers: one evaluator, two entry points
    let qrels = tmp.path().join("qrels.txt");
    let one = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--run-out",
        s(&run),
        "--qrels-out",
        s(&qrels),
        "--json",
    ]));
    assert_eq!(one["per_domain"]["gis"], out["per_domain"]["gis"]);
    let exclusions = tmp.path().join("qrels.txt.exclusions");
    assert!(
        fs::read_to_string(&exclusions).unwrap().lines().count() > 0,
        "sample has negative_ids"
    );
    let scored = json(&ok(&[
        "eval",
        "--run",
        s(&run),
        "--qrels",
        s(&qrels),
        "--exclude",
        s(&exclusions),
        "--complete",
        "--json",
    ]));
    for (k, v) in one["metrics"].as_object().unwrap() {
        let got = scored["metrics"][k].as_f64().unwrap();
        assert!(
            (got - v.as_f64().unwrap()).abs() < 1e-9,
            "{k}: {got} vs {v}"
        );
    }

    // search: a query for photosynthesis finds a biology passage first
    let hits = json(&ok(&[
        "search",
        "--index",
        s(&index),
        "--domain",
        "biology",
        "--query",
        "photosynthesis chlorophyll light",
        "--top-k",
        "3",
        "--json",
    ]));
    let hits = hits["hits"].as_array().unwrap();
    assert!(!hits.is_empty() && hits.len() <= 3);
    assert!(hits[0]["id"].as_str().unwrap().starts_with("biology/"));
    // no --domain: every domain searched, merged into one ranking (each hit names its own)
    let merged = json(&ok(&[
        "search",
        "--index",
        s(&index),
        "--query",
        "photosynthesis chlorophyll light shock wave map projection",
        "--top-k",
        "30",
        "--json",
    ]));
    assert!(merged["domain"].is_null(), "{merged}");
    assert_eq!(
        merged["domains"],
        serde_json::json!(["biology", "gis", "physics"])
    );
    let domains: std::collections::BTreeSet<&str> = merged["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["domain"].as_str().unwrap())
        .collect();
    assert!(domains.len() > 1, "{merged}");
}

#[test]
fn check_counts_the_sample_oddities() {
    let out = json(&ok(&["check", "--corpus", s(&sample()), "--json"]));
    assert_eq!(out["warnings"]["undecodable_image"], 1);
    assert_eq!(out["warnings"]["orphan_positive_image"], 1);
    assert_eq!(out["domains"]["physics"]["undecodable_images"], 1);
    assert_eq!(out["domains"]["gis"]["orphan_positive_images"], 1);
    // backslash and ./ annotations resolve to corpus images: nothing unknown
    assert!(out["warnings"].get("unknown_doc_id").is_none(), "{out}");
}

/// Acceptance: BM25 (k1 = 0.9, b = 0.4) on the real Cranfield collection reaches
/// nDCG@10 >= 0.35 (bm25s, Lucene variant with Snowball stemming: 0.352).
#[test]
#[ignore = "needs the Cranfield collection ($SIFT_CRANFIELD): scripts/test runs it when present"]
fn cranfield_bm25_ndcg10_at_least_035() {
    let cranfield = PathBuf::from(
        std::env::var_os("SIFT_CRANFIELD").expect("set SIFT_CRANFIELD to the Cranfield collection"),
    );
    assert!(
        cranfield.join("corpus.jsonl").is_file(),
        "no Cranfield collection at {} (set SIFT_CRANFIELD)",
        cranfield.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("cranfield");
    ok(&[
        "index",
        "--corpus",
        s(&cranfield),
        "--index",
        s(&index),
        "--k1",
        "0.9",
        "--b",
        "0.4",
        "-q",
    ]);
    // Lucene's BM25 (Anserini's nDCG@10 on Cranfield is 0.3510), then the MM-BRIGHT reference
    // scoring, whose query-side saturation costs some nDCG on Cranfield's short queries
    let eval = |scoring: &str| {
        let out = json(&ok(&[
            "eval",
            "--corpus",
            s(&cranfield),
            "--index",
            s(&index),
            "--bm25",
            scoring,
            "--json",
        ]));
        assert!(out["per_domain"]["cranfield"].is_object());
        assert_eq!(out["queries"]["cranfield"], 225);
        out["metrics"]["ndcg@10"].as_f64().unwrap()
    };
    let lucene = eval("lucene");
    assert!(lucene >= 0.35, "Cranfield nDCG@10 = {lucene}");
    let reference = eval("reference");
    assert!(reference >= 0.30 && reference < lucene, "{reference}");
}

#[test]
fn beir_unknown_qrels_ids_and_empty_queries_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let qrels = format!("{QRELS}q1\tnope\t1\nq9\td1\t1\n");
    let corpus = beir(tmp.path(), CORPUS, QUERIES, &qrels);
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let out = json(&ok(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--json",
    ]));
    assert_eq!(out["warnings"]["unknown_doc_id"], 1);
    assert_eq!(out["warnings"]["unknown_query_id"], 1);
    assert_eq!(out["warnings"]["empty_query"], 1);
    assert_eq!(out["queries"]["beir"], 2);
    // the unknown relevant doc stays judged: q1 can reach at most recall 1/2
    assert!(out["metrics"]["recall@100"].as_f64().unwrap() <= 0.75 + 1e-12);
    // numeric _id 3 is found as "3"
    let hits = json(&ok(&[
        "search",
        "--index",
        s(&index),
        "--query",
        "buckling shells",
        "--json",
    ]));
    assert_eq!(hits["hits"][0]["id"], "3");
}

#[test]
fn malformed_jsonl_is_an_error_with_file_and_line_and_keeps_the_old_index() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(tmp.path(), CORPUS, QUERIES, QRELS);
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let manifest_before = fs::read(index.join("manifest.json")).unwrap();
    let gens_before = generations(&index);

    fs::write(
        corpus.join("corpus.jsonl"),
        format!("{CORPUS}{{\"_id\": \"d4\", \"text\": \n"),
    )
    .unwrap();
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    assert!(err.contains("corpus.jsonl:4"), "{err}");
    assert!(err.contains("malformed JSON"), "{err}");
    // the failed build left nothing behind and the old index still answers
    assert_eq!(
        fs::read(index.join("manifest.json")).unwrap(),
        manifest_before
    );
    assert_eq!(generations(&index), gens_before);
    let hits = json(&ok(&[
        "search",
        "--index",
        s(&index),
        "--query",
        "boundary layer",
        "--json",
    ]));
    assert_eq!(hits["hits"][0]["id"], "d1");
    // but evaluating it against the changed corpus is refused
    let err = fails(&["eval", "--corpus", s(&corpus), "--index", s(&index)]);
    assert!(err.contains("rebuild"), "{err}");
}

#[test]
fn invalid_utf8_duplicate_ids_and_missing_text_name_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(tmp.path(), CORPUS, QUERIES, QRELS);
    let index = tmp.path().join("idx");
    let mut bad = CORPUS.as_bytes().to_vec();
    bad.extend_from_slice(b"{\"_id\": \"d9\", \"text\": \"caf\xe9\"}\n");
    fs::write(corpus.join("corpus.jsonl"), &bad).unwrap();
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index)]);
    assert!(
        err.contains("corpus.jsonl:4") && err.contains("UTF-8"),
        "{err}"
    );

    fs::write(
        corpus.join("corpus.jsonl"),
        format!("{CORPUS}{{\"_id\": \"d1\", \"text\": \"again\"}}\n"),
    )
    .unwrap();
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index)]);
    assert!(
        err.contains("corpus.jsonl")
            && err.contains("line 4")
            && err.contains("\"d1\"")
            && err.contains("line 1"),
        "{err}"
    );

    fs::write(corpus.join("corpus.jsonl"), "{\"_id\": \"x\"}\n").unwrap();
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index)]);
    assert!(
        err.contains("corpus.jsonl:1") && err.contains("no \"text\""),
        "{err}"
    );
    // none of the failed builds created an index
    assert!(!index.join("manifest.json").exists());
    assert!(generations(&index).is_empty());
}

#[test]
fn empty_corpus_is_an_error_and_writes_no_index() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(tmp.path(), "\n", QUERIES, QRELS);
    let index = tmp.path().join("idx");
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index)]);
    assert!(
        err.contains("corpus.jsonl") && err.contains("no passages"),
        "{err}"
    );
    assert!(!index.join("manifest.json").exists());
    assert!(generations(&index).is_empty());
}

#[test]
fn truncated_parquet_is_an_error_naming_the_file_and_keeps_the_old_index() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("sample");
    copy_dir(&sample(), &corpus);
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let before = json(&ok(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--json",
    ]));

    let file = corpus.join("documents/gis.parquet");
    let bytes = fs::read(&file).unwrap();
    fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    assert!(err.contains("documents/gis.parquet"), "{err}");
    assert_eq!(generations(&index).len(), 1);
    // the previous index is intact (eval of the untouched domains still works)
    let after = json(&ok(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--domains",
        "biology",
        "--json",
    ]));
    assert_eq!(
        after["per_domain"]["biology"],
        before["per_domain"]["biology"]
    );
    // a truncated examples file is also named
    fs::write(&file, &bytes).unwrap();
    let ex = corpus.join("examples/physics.parquet");
    let exb = fs::read(&ex).unwrap();
    fs::write(&ex, &exb[..exb.len() - 10]).unwrap();
    let err = fails(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--domains",
        "physics",
    ]);
    assert!(err.contains("examples/physics.parquet"), "{err}");
}

#[test]
fn parquet_with_a_missing_column_or_null_id_names_file_and_row() {
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mm");
    fs::create_dir_all(root.join("documents")).unwrap();
    let write = |name: &str, cols: Vec<(&str, ArrayRef)>| {
        let batch = RecordBatch::try_from_iter(cols).unwrap();
        let f = fs::File::create(root.join("documents").join(name)).unwrap();
        let mut w = ArrowWriter::try_new(f, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    };
    write(
        "chem.parquet",
        vec![
            (
                "id",
                Arc::new(StringArray::from(vec!["chem/ab_0.txt"])) as ArrayRef,
            ),
            (
                "text",
                Arc::new(StringArray::from(vec!["no content column"])) as ArrayRef,
            ),
        ],
    );
    let index = tmp.path().join("idx");
    let err = fails(&["index", "--corpus", s(&root), "--index", s(&index)]);
    assert!(
        err.contains("documents/chem.parquet") && err.contains("missing column \"content\""),
        "{err}"
    );

    write(
        "chem.parquet",
        vec![
            (
                "id",
                Arc::new(StringArray::from(vec![Some("chem/ab_0.txt"), None])) as ArrayRef,
            ),
            (
                "content",
                Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
            ),
            (
                "unknown_extra",
                Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
            ),
        ],
    );
    let err = fails(&["index", "--corpus", s(&root), "--index", s(&index)]);
    assert!(
        err.contains("documents/chem.parquet: row 1") && err.contains("null"),
        "{err}"
    );
    assert!(!index.join("manifest.json").exists());
}

#[test]
fn mismatched_settings_and_versions_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(tmp.path(), CORPUS, QUERIES, QRELS);
    let index = tmp.path().join("idx");
    ok(&[
        "index",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--stemmer",
        "none",
        "-q",
    ]);
    let err = fails(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--stemmer",
        "porter",
    ]);
    assert!(err.contains("analyzer") && err.contains("rebuild"), "{err}");
    let err = fails(&[
        "search",
        "--index",
        s(&index),
        "--domain",
        "beir",
        "--analyzer",
        "snowball",
        "--query",
        "x",
    ]);
    assert!(err.contains("analyzer") && err.contains("rebuild"), "{err}");
    // BM25 parameters are applied at search time: overriding them is fine, bad values are not
    ok(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--k1",
        "1.2",
        "--b",
        "0.75",
    ]);
    assert!(
        fails(&[
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--b",
            "1.5"
        ])
        .contains("b must be")
    );
    // a domain the index lacks
    assert!(
        fails(&[
            "search",
            "--index",
            s(&index),
            "--domain",
            "nope",
            "--query",
            "x"
        ])
        .contains("no domain \"nope\"")
    );
    // another format version
    let m = index.join("manifest.json");
    let text = fs::read_to_string(&m).unwrap().replace(
        &format!("\"format_version\": {}", sift_index::FORMAT_VERSION),
        "\"format_version\": 99",
    );
    fs::write(&m, text).unwrap();
    assert!(fails(&["search", "--index", s(&index), "--query", "x"]).contains("format version 99"));
    // not an index at all
    assert!(
        fails(&["search", "--index", s(tmp.path()), "--query", "x"]).contains("not a Sift index")
    );
}

#[test]
fn leftovers_of_a_crashed_build_do_not_matter_and_are_cleaned_up() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(tmp.path(), CORPUS, QUERIES, QRELS);
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    // what a build killed mid-way leaves: a partial generation and a temporary manifest
    fs::create_dir_all(index.join("gen-dead/bm25/beir")).unwrap();
    fs::write(index.join("gen-dead/bm25/beir/meta.json"), "{ partial").unwrap();
    fs::write(index.join(".manifest.json.tmp-1"), "{ partial").unwrap();
    let hits = json(&ok(&[
        "search",
        "--index",
        s(&index),
        "--query",
        "boundary layer",
        "--json",
    ]));
    assert_eq!(hits["hits"][0]["id"], "d1");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let gens = generations(&index);
    assert_eq!(gens.len(), 1);
    assert_ne!(gens[0], "gen-dead");
    assert!(!index.join(".manifest.json.tmp-1").exists());
    // refuses to write into a directory that holds something else
    let other = tmp.path().join("other");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("precious.txt"), "x").unwrap();
    assert!(fails(&["index", "--corpus", s(&corpus), "--index", s(&other)]).contains("refusing"));
}

#[test]
fn run_files_with_bad_lines_name_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run.txt");
    let qrels = tmp.path().join("qrels.txt");
    fs::write(&qrels, "q1 0 d1 1\n").unwrap();
    fs::write(&run, "q1 Q0 d1 1 1.5 t\nq1 Q0 d2 2 abc t\n").unwrap();
    let err = fails(&["eval", "--run", s(&run), "--qrels", s(&qrels)]);
    assert!(
        err.contains("run.txt:2") && err.contains("bad score"),
        "{err}"
    );
    fs::write(&run, "q1 Q0 d1 1 1.5 t\nq1 Q0 d1 2 1.0 t\n").unwrap();
    assert!(fails(&["eval", "--run", s(&run), "--qrels", s(&qrels)]).contains("listed twice"));
    fs::write(&run, "q1 Q0 d1 1 1.5\n").unwrap();
    assert!(
        fails(&["eval", "--run", s(&run), "--qrels", s(&qrels)])
            .contains("run.txt:1: expected 6 fields")
    );
    // both modes at once, or neither: usage error from clap (exit 2) or a clear message
    let out = sift(&["eval", "--index", "x"]);
    assert!(!out.status.success());
}

#[test]
fn every_command_has_help() {
    for cmd in [
        &["--help"][..],
        &["index", "--help"],
        &["search", "--help"],
        &["eval", "--help"],
        &["check", "--help"],
    ] {
        let out = ok(cmd);
        assert!(out.contains("Usage"), "{cmd:?}");
    }
}

#[test]
fn killing_a_build_midway_leaves_the_previous_index_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(tmp.path(), CORPUS, QUERIES, QRELS);
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let manifest_before = fs::read(index.join("manifest.json")).unwrap();
    // a corpus big enough that the rebuild is still running when it is killed
    let mut big = String::from(CORPUS);
    let words = [
        "flow", "shock", "wing", "heat", "plate", "shell", "mach", "drag", "lift", "wave",
    ];
    for i in 0..60_000 {
        let text: Vec<&str> = (0..40)
            .map(|j| words[(i * 7 + j * 3) % words.len()])
            .collect();
        big.push_str(&format!(
            "{{\"_id\": \"x{i}\", \"text\": \"{} n{i}\"}}\n",
            text.join(" ")
        ));
    }
    fs::write(corpus.join("corpus.jsonl"), big).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sift"))
        .args(["index", "--corpus", s(&corpus), "--index", s(&index), "-q"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    let finished = child.try_wait().unwrap().is_some();
    child.kill().ok();
    child.wait().unwrap();
    if !finished {
        // killed mid-build: the old manifest and generation still answer
        assert_eq!(
            fs::read(index.join("manifest.json")).unwrap(),
            manifest_before
        );
        let hits = json(&ok(&[
            "search",
            "--index",
            s(&index),
            "--query",
            "boundary layer",
            "--json",
        ]));
        assert_eq!(hits["hits"][0]["id"], "d1");
    }
    // a new build succeeds and removes what the killed one left
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    assert_eq!(generations(&index).len(), 1);
    let hits = json(&ok(&[
        "search",
        "--index",
        s(&index),
        "--query",
        "n123",
        "--json",
    ]));
    assert_eq!(hits["hits"][0]["id"], "x123");
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 weights: scripts/test installs them and runs it"]
fn dense_and_hybrid_retrieval_on_the_sample() {
    let model = minilm();
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let out = json(&ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&model),
        "--vector-dtype",
        "f16",
        "--json",
    ]));
    let dense = &out["manifest"]["dense"]["minilm"];
    assert_eq!(dense["dim"], 384);
    assert_eq!(
        dense["embedded"].as_u64().unwrap() + dense["cached"].as_u64().unwrap(),
        46
    );
    // a rebuild takes every vector from the embedding cache
    let again = json(&ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&model),
        "--vector-dtype",
        "f16",
        "--json",
    ]));
    assert_eq!(again["manifest"]["dense"]["minilm"]["embedded"], 0);
    assert_eq!(again["manifest"]["dense"]["minilm"]["cached"], 46);
    let mut ndcg = std::collections::BTreeMap::new();
    for r in [
        "bm25",
        "dense:minilm",
        "hybrid:bm25+dense:minilm",
        "hybrid:bm25+dense:minilm:0.4,0.6",
    ] {
        let e = json(&ok(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--retriever",
            r,
            "--json",
        ]));
        assert_eq!(e["per_domain"].as_object().unwrap().len(), 3, "{r}");
        ndcg.insert(r, e["metrics"]["ndcg@10"].as_f64().unwrap());
    }
    assert!(ndcg["dense:minilm"] > 0.5, "{ndcg:?}");
    // exact and HNSW search agree on this small corpus
    let exact = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--retriever",
        "dense:minilm",
        "--ann",
        "exact",
        "--json",
    ]));
    let hnsw = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--retriever",
        "dense:minilm",
        "--ann",
        "hnsw",
        "--json",
    ]));
    assert_eq!(exact["metrics"], hnsw["metrics"]);
    // clear errors
    assert!(
        fails(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--retriever",
            "dense:nope"
        ])
        .contains("no dense index \"nope\"")
    );
    assert!(
        fails(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--retriever",
            "hybrid:bm25"
        ])
        .contains("two or more")
    );
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 weights: scripts/test installs them and runs it"]
fn embed_writes_jsonl_and_npy_and_loads_from_the_hub_cache() {
    let model = minilm();
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    fs::write(
        &input,
        "first line\n\n{\"_id\": 42, \"title\": \"T\", \"text\": \"second\"}\n",
    )
    .unwrap();
    let jsonl = tmp.path().join("v.jsonl");
    ok(&[
        "embed",
        "--model",
        s(&model),
        "--input",
        s(&input),
        "--out",
        s(&jsonl),
        "-q",
    ]);
    let rows: Vec<Value> = fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], "1");
    assert_eq!(rows[1]["id"], "42");
    let v: Vec<f64> = rows[0]["vector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(v.len(), 384);
    assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-4);
    let npy = tmp.path().join("v.npy");
    ok(&[
        "embed",
        "--model",
        s(&model),
        "--input",
        s(&input),
        "--kind",
        "query",
        "--out",
        s(&npy),
        "-q",
    ]);
    let bytes = fs::read(&npy).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 64, 0);
    assert!(String::from_utf8_lossy(&bytes[10..10 + header_len]).contains("'shape': (2, 384)"));
    assert_eq!(bytes.len(), 10 + header_len + 2 * 384 * 4);
    // MiniLM has no query prefix: query and passage vectors agree
    let first: Vec<f32> = bytes[10 + header_len..10 + header_len + 384 * 4]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(
        first
            .iter()
            .zip(&v)
            .all(|(a, b)| (*a as f64 - b).abs() < 1e-6)
    );
    assert_eq!(
        fs::read_to_string(tmp.path().join("v.npy.ids.txt")).unwrap(),
        "1\n42\n"
    );

    // by hub id, from a populated hf-hub cache, with no network
    let hf = tmp.path().join("hf");
    let snap = hf.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/0123abcd");
    copy_dir(&model, &snap);
    fs::create_dir_all(hf.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/refs"))
        .unwrap();
    fs::write(
        hf.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/refs/main"),
        "0123abcd",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sift"))
        .args(["models", "info", "minilm", "--json"])
        .env("HF_HOME", &hf)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(info["name"], "sentence-transformers/all-MiniLM-L6-v2");
    assert!(
        info["config"]
            .as_str()
            .unwrap()
            .contains("snapshots/0123abcd")
    );
    // bad input names the line
    fs::write(&input, "ok\n{\"text\": 5}\n").unwrap();
    assert!(
        fails(&[
            "embed",
            "--model",
            s(&model),
            "--input",
            s(&input),
            "--out",
            s(&jsonl)
        ])
        .contains("in.txt:2")
    );
}

/// `sift eval --task all` on the sample: BM25, MiniLM (when installed) and the tiny CLIP and
/// SigLIP checkpoints, all four tasks, both query-fusion modes; the Task 4 qrels it writes
/// equal the independent script's (`eval/reference/mmbright_qrels.py`).
#[test]
fn all_four_tasks_on_the_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let sample = sample();
    let index = tmp.path().join("index");
    let out_dir = tmp.path().join("eval");
    let fixtures = repo().join("models/fixtures/vision");
    let clip = fixtures.join("tiny-clip-quickgelu");
    let siglip = fixtures.join("tiny-siglip");
    let gme = repo().join("models/fixtures/gme/tiny-gme");
    let args = vec![
        "index",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "--dense",
        s(&siglip),
        "--dense",
        s(&gme),
        "--json",
    ];
    let built = json(&ok(&args));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    // 33 corpus images, one deliberately undecodable: counted and skipped
    assert_eq!(
        images["images"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        32
    );
    assert_eq!(images["undecodable"]["physics"], 1);
    let gme_images = &built["manifest"]["dense"]["tiny-gme"]["images"];
    assert_eq!(gme_images["undecodable"]["physics"], 1);
    let args = vec![
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "bm25",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--retriever",
        "dense:tiny-siglip",
        "--retriever",
        "dense:tiny-gme",
        "--query-fusion",
        "both",
        "--out",
        s(&out_dir),
        "--json",
    ];
    let e = json(&ok(&args));
    let reports = e["reports"].as_array().unwrap();
    let count = |task: &str| {
        reports
            .iter()
            .filter(|r| r["task"].as_str().unwrap().starts_with(task))
            .count()
    };
    let text_models = 1; // bm25 (dense text models: dense_and_hybrid_retrieval_on_the_sample)
    // task 1: every retriever once; tasks 2 and 4: text retrievers once, vision ones per
    // fusion mode; task 3: vision retrievers only
    // (three vision-language models: CLIP, SigLIP, GME)
    assert_eq!(count("1"), text_models + 3);
    assert_eq!(count("2"), text_models + 6);
    assert_eq!(count("3"), 6);
    assert_eq!(count("4"), text_models + 6);
    for r in reports {
        assert_eq!(
            r["per_domain"].as_object().unwrap().len(),
            3,
            "{}",
            r["label"]
        );
        let v = r["metrics"]["ndcg@10"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&v), "{}", r["label"]);
    }
    assert_eq!(e["orphan_positive_images"], 1);
    assert!(out_dir.join("results.md").is_file());
    assert!(
        out_dir
            .join("runs/task3.dense_tiny-siglip__query_images__first_.trec")
            .is_file()
    );
    let reference = repo().join("eval/reference/sample_qrels");
    let lines = |p: &Path| {
        let mut v: Vec<String> = fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        v.sort();
        v
    };
    for (ours, theirs) in [
        ("task4.qrels", "task4.paper.qrels"),
        ("task4.exclusions", "task4.paper.exclusions"),
        ("task3.qrels", "task3.qrels"),
        ("task2.qrels", "task2.qrels"),
    ] {
        assert_eq!(
            lines(&out_dir.join("qrels").join(ours)),
            lines(&reference.join(theirs)),
            "{ours}"
        );
    }
    // Task 4 with BM25: every pair scores as its passage does in Task 2 (same query text);
    // the run is in trec_eval order (ties: pair id descending), and a smaller top-k is its
    // prefix, so the selection on (score, pair index) cuts where the full sort would
    let read_run = |p: &Path| -> BTreeMap<String, Vec<(String, f64)>> {
        let mut run: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
        for l in fs::read_to_string(p).unwrap().lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            run.entry(f[0].to_string())
                .or_default()
                .push((f[2].to_string(), f[4].parse().unwrap()));
        }
        run
    };
    let t2 = read_run(&out_dir.join("runs/task2.bm25.trec"));
    let t4 = read_run(&out_dir.join("runs/task4.bm25.trec"));
    let excluded2: std::collections::HashSet<String> =
        fs::read_to_string(out_dir.join("qrels/task2.exclusions"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
    assert!(!t4.is_empty());
    let mut pairs_with_images = 0;
    for (q, ranking) in &t4 {
        let passage_scores: HashMap<&str, f64> =
            t2[q].iter().map(|(d, sc)| (d.as_str(), *sc)).collect();
        for w in ranking.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!(
                a.1 as f32 > b.1 as f32 || (a.1 as f32 == b.1 as f32 && a.0 > b.0),
                "{q}: {a:?} before {b:?}"
            );
        }
        for (pair, score) in ranking {
            let (pid, img) = pair.split_once("|||").unwrap();
            pairs_with_images += usize::from(img != "__NO_IMAGE__");
            match passage_scores.get(pid) {
                Some(p) => assert_eq!(p, score, "{q} {pair}"),
                // Task 2 removes the query's negative passages; Task 4 keeps them
                None => assert!(excluded2.contains(&format!("{q} {pid}")), "{q} {pair}"),
            }
        }
    }
    assert!(pairs_with_images > 0);
    let short = tmp.path().join("task4.top7.trec");
    ok(&[
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "4",
        "--retriever",
        "bm25",
        "--top-k",
        "7",
        "--run-out",
        s(&short),
        "--json",
    ]);
    let t4_short = read_run(&short);
    for (q, ranking) in &t4 {
        let n = ranking.len().min(7);
        assert_eq!(t4_short[q], ranking[..n].to_vec(), "{q}");
    }
    // the legacy protocol judges every gold-passage pair 1 and excludes nothing
    let legacy = tmp.path().join("legacy.qrels");
    ok(&[
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "4",
        "--protocol",
        "legacy",
        "--qrels-out",
        s(&legacy),
        "--json",
    ]);
    assert_eq!(lines(&legacy), lines(&reference.join("task4.legacy.qrels")));
    // BM25 cannot rank images
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "3",
    ]);
    assert!(err.contains("cannot rank images"), "{err}");
}

/// `sift embed --image` runs decoding, preprocessing and the image tower end to end: its
/// vectors are the normalised transformers features of the same image files
/// (`models/fixtures/vision/*/reference.json`), and text and image vectors share a space.
#[test]
fn embed_images_matches_transformers_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = repo().join("models/fixtures/vision");
    for model in [
        "tiny-clip-quickgelu",
        "tiny-clip-gelu",
        "tiny-siglip",
        "tiny-siglip2-style",
    ] {
        let dir = fixtures.join(model);
        let reference: Value = json(&fs::read_to_string(dir.join("reference.json")).unwrap());
        // the reference images, listed in its order
        let list = tmp.path().join(format!("{model}.txt"));
        let files: Vec<String> = reference["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let f = i["file"].as_str().unwrap();
                dir.join(f).canonicalize().unwrap().display().to_string()
            })
            .collect();
        fs::write(&list, files.join("\n")).unwrap();
        let out = tmp.path().join(format!("{model}.jsonl"));
        ok(&[
            "embed",
            "--model",
            s(&dir),
            "--image",
            "--input",
            s(&list),
            "--out",
            s(&out),
            "-q",
        ]);
        let got: Vec<Value> = fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(json)
            .collect();
        let want = reference["image_embeds"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{model}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let cos = cosine(&g["vector"], w);
            assert!(cos >= 0.9999, "{model} image {i}: cosine {cos}");
        }
    }
    // a text model cannot embed images
    let err = fails(&[
        "embed",
        "--model",
        s(&fixtures.join("tiny-clip-quickgelu")),
        "--image",
        "--input",
        s(&tmp.path().join("missing")),
        "--out",
        s(&tmp.path().join("x.jsonl")),
    ]);
    assert!(err.contains("missing"), "{err}");
}

/// `sift embed --image` with GME: decoding, GME's two resizes, patches, the vision tower,
/// the prompt and the language model end to end give transformers' vectors for the image
/// files (models/fixtures/gme/expected.json, image-only candidate cases; PNG files, since
/// JPEG decoders differ slightly).
#[test]
fn embed_images_with_gme_matches_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let root = repo().join("models/fixtures/gme");
    let expected: Value = json(&fs::read_to_string(root.join("expected.json")).unwrap());
    let cases: Vec<&Value> = expected["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["kind"] == "image" && c["images"][0].as_str().is_some_and(|p| p.ends_with(".png"))
        })
        .collect();
    assert!(cases.len() >= 4);
    let list = tmp.path().join("images.txt");
    let files: Vec<String> = cases
        .iter()
        .map(|c| s(&root.join(c["images"][0].as_str().unwrap())).to_string())
        .collect();
    fs::write(&list, files.join("\n")).unwrap();
    let out = tmp.path().join("gme.jsonl");
    ok(&[
        "embed",
        "--model",
        s(&root.join("tiny-gme")),
        "--image",
        "--input",
        s(&list),
        "--out",
        s(&out),
        "-q",
    ]);
    let got: Vec<Value> = fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    assert_eq!(got.len(), cases.len());
    for (g, c) in got.iter().zip(&cases) {
        let cos = cosine(&g["vector"], &c["embedding_gme"]);
        assert!(cos >= 0.9999, "{}: cosine {cos}", c["name"]);
    }
}

/// `sift embed --kind query --query-instruction` gives GME's query vectors with that
/// instruction (transformers' vectors from models/fixtures/gme/expected.json); without it,
/// GME's default instruction.
#[test]
fn gme_query_instruction_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let root = repo().join("models/fixtures/gme");
    let expected: Value = json(&fs::read_to_string(root.join("expected.json")).unwrap());
    let case = |name: &str| -> Value {
        expected["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let model = root.join("tiny-gme");
    for (name, instruction) in [
        (
            "q_text_instruction",
            Some("Find the passage that answers the question."),
        ),
        ("q_text_short", None),
    ] {
        let c = case(name);
        let input = tmp.path().join(format!("{name}.txt"));
        fs::write(&input, c["text"].as_str().unwrap()).unwrap();
        let out = tmp.path().join(format!("{name}.jsonl"));
        let mut args = vec![
            "embed",
            "--model",
            s(&model),
            "--input",
            s(&input),
            "--kind",
            "query",
            "--out",
            s(&out),
            "-q",
        ];
        if let Some(i) = instruction {
            args.extend(["--query-instruction", i]);
        }
        ok(&args);
        let got = json(fs::read_to_string(&out).unwrap().lines().next().unwrap());
        let cos = cosine(&got["vector"], &c["embedding_gme"]);
        assert!(cos >= 0.9999, "{name}: cosine {cos}");
    }
}

/// Corpus images may come as a folder (`document_images/<domain>/...`) instead of parquet:
/// the same ids, the same vectors.
#[test]
fn corpus_images_from_a_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    copy_dir(&sample(), &corpus);
    // write physics' images out as files and drop its parquet
    let sample_corpus = sift_core::Corpus::open(sample()).unwrap();
    for r in sample_corpus.images("physics").unwrap() {
        let r = r.unwrap();
        let p = corpus.join("document_images").join(&r.path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, &r.bytes).unwrap();
    }
    fs::remove_file(corpus.join("document_images/physics.parquet")).unwrap();
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let vectors = |corpus: &Path, name: &str| -> Value {
        let index = tmp.path().join(name);
        let out = json(&ok(&[
            "index",
            "--corpus",
            s(corpus),
            "--index",
            s(&index),
            "--domains",
            "physics",
            "--dense",
            s(&clip),
            "--json",
        ]));
        out["manifest"]["dense"]["tiny-clip-quickgelu"]["images"].clone()
    };
    let from_parquet = vectors(&sample(), "a");
    let from_folder = vectors(&corpus, "b");
    assert_eq!(from_folder["images"], from_parquet["images"]);
    assert_eq!(from_folder["undecodable"], from_parquet["undecodable"]);
    let e = json(&ok(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&tmp.path().join("b")),
        "--task",
        "3",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--json",
    ]));
    assert_eq!(e["per_domain"].as_object().unwrap().len(), 1);
}

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
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "-q",
    ]);
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
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "-q",
    ]);
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

/// `sift search` with any retriever, query images, and images or passage+image pairs as
/// results.
#[test]
fn search_with_dense_hybrid_images_and_pairs() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "-q",
    ]);
    let image = repo().join("models/fixtures/vision/images/shapes_rgb_50x37.png");
    let search = |extra: &[&str]| -> Value {
        let mut a = vec![
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--json",
            "--top-k",
            "5",
        ];
        a.extend_from_slice(extra);
        json(&ok(&a))
    };
    let dense = search(&[
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--query",
        "map projection",
    ]);
    let hits = dense["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 5);
    assert!(
        hits.iter()
            .all(|h| h["id"].as_str().unwrap().starts_with("gis/"))
    );
    assert!(
        hits.windows(2)
            .all(|w| w[0]["score"].as_f64() >= w[1]["score"].as_f64())
    );
    // an image changes a vision model's query vector
    let with_image = search(&[
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--query",
        "map projection",
        "--image",
        s(&image),
    ]);
    assert_ne!(with_image["hits"], dense["hits"]);
    let images = search(&[
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--image",
        s(&image),
        "--candidates",
        "images",
    ]);
    assert!(images["hits"].as_array().unwrap().iter().all(|h| {
        let id = h["id"].as_str().unwrap();
        id.starts_with("gis/gis_") && !id.contains(".txt")
    }));
    let pairs = search(&[
        "--retriever",
        "hybrid:bm25+dense:tiny-clip-quickgelu",
        "--query",
        "map projection",
        "--candidates",
        "pairs",
    ]);
    for h in pairs["hits"].as_array().unwrap() {
        assert!(h["passage"].as_str().unwrap().ends_with(".txt"), "{h}");
        assert!(h["id"].as_str().unwrap().contains("|||"), "{h}");
    }
    // BM25 alone cannot take images or rank them
    assert!(
        fails(&[
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--image",
            s(&image)
        ])
        .contains("--image: bm25 takes no query images")
    );
    assert!(
        fails(&[
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--query",
            "x",
            "--candidates",
            "images",
        ])
        .contains("cannot rank images")
    );
}

/// A list column of `{image_path, source_passage_id}` structs, one list per row.
fn image_annotations(rows: &[&[(&str, &str)]]) -> arrow_array::ArrayRef {
    use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
    use arrow_schema::{DataType, Field};
    let fields = vec![
        Field::new("image_path", DataType::Utf8, true),
        Field::new("source_passage_id", DataType::Utf8, true),
    ];
    let mut b = ListBuilder::new(StructBuilder::from_fields(fields, rows.len()));
    for row in rows {
        for (img, pid) in *row {
            let s = b.values();
            s.field_builder::<StringBuilder>(0)
                .unwrap()
                .append_value(img);
            s.field_builder::<StringBuilder>(1)
                .unwrap()
                .append_value(pid);
            s.append(true);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

/// Task 4 linking on chunked passage ids (`biology/fec40b40_1635_4.txt`, which the reference
/// code's regex cannot key): `--pair-link regex` pairs only the keyed passage and reports the
/// rest unlinked; `--pair-link source-id` links what the annotations' source_passage_id
/// names, so the positive image is judged (rel 2) and the negative one excluded.
#[test]
fn task4_pair_links_by_regex_and_by_source_id_on_chunked_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let c = tmp.path().join("corpus");
    let p4 = "biology/fec40b40_1635_4.txt";
    let p5 = "biology/fec40b40_1635_5.txt";
    let keyed = "biology/aa11bb22_1.txt";
    let other = "biology/cc33dd44_2.txt";
    let img_chunked = "biology/biology_fec40b40_0001/image_1.png";
    let img_keyed = "biology/biology_aa11bb22_0001/image_1.png";
    write_parquet(
        &c.join("documents/biology.parquet"),
        vec![
            ("id", strings(&[p4, p5, keyed, other])),
            (
                "content",
                strings(&[
                    "cell membrane lipid bilayer",
                    "membrane proteins pump ions",
                    "lipid rafts in the membrane",
                    "photosynthesis in leaves",
                ]),
            ),
        ],
    );
    let png = {
        let mut bytes = Vec::new();
        image::RgbImage::from_pixel(4, 4, image::Rgb([200, 10, 10]))
            .write_to(
                &mut std::io::Cursor::new(&mut bytes),
                image::ImageFormat::Png,
            )
            .unwrap();
        bytes
    };
    write_parquet(
        &c.join("document_images/biology.parquet"),
        vec![
            ("path", strings(&[img_chunked, img_keyed])),
            (
                "bytes",
                Arc::new(arrow_array::BinaryArray::from(vec![&png[..], &png[..]])),
            ),
        ],
    );
    let list = |v: &[&str]| -> arrow_array::ArrayRef {
        let mut b =
            arrow_array::builder::ListBuilder::new(arrow_array::builder::StringBuilder::new());
        for x in v {
            b.values().append_value(x);
        }
        b.append(true);
        Arc::new(b.finish())
    };
    let example_columns = |multimodal: bool| {
        let mut cols = vec![
            ("id", strings(&["q1"])),
            ("query", strings(&["membrane lipid question"])),
            ("gold_ids", list(&[p4])),
            ("negative_ids", list(&[])),
            ("image_paths", list(&[])),
        ];
        if multimodal {
            cols.push((
                "positive_images",
                image_annotations(&[&[(img_chunked, p4)]]),
            ));
            cols.push((
                "negative_images",
                image_annotations(&[&[(img_keyed, keyed)]]),
            ));
        }
        cols
    };
    write_parquet(&c.join("examples/biology.parquet"), example_columns(false));
    write_parquet(
        &c.join("examples_multimodal/biology.parquet"),
        example_columns(true),
    );
    write_parquet(
        &c.join("examples_images/biology.parquet"),
        vec![
            ("path", strings(&[])),
            (
                "bytes",
                Arc::new(arrow_array::BinaryArray::from(Vec::<&[u8]>::new())),
            ),
        ],
    );
    let index = tmp.path().join("index");
    ok(&["index", "--corpus", s(&c), "--index", s(&index), "-q"]);
    let eval = |link: &str| {
        let qrels = tmp.path().join(format!("{link}.qrels"));
        let run = tmp.path().join(format!("{link}.run"));
        let out = json(&ok(&[
            "eval",
            "--corpus",
            s(&c),
            "--index",
            s(&index),
            "--task",
            "4",
            "--pair-link",
            link,
            "--qrels-out",
            s(&qrels),
            "--run-out",
            s(&run),
            "--json",
        ]));
        let read = |p: &Path| fs::read_to_string(p).unwrap();
        let mut x = qrels.as_os_str().to_owned();
        x.push(".exclusions");
        (out, read(&qrels), read(Path::new(&x)), read(&run))
    };

    let (out, qrels, exclusions, run) = eval("regex");
    let l = &out["pair_links"]["biology"];
    assert_eq!(l["link"], "regex");
    assert_eq!(l["passages_unkeyed"], 2, "{l}");
    assert_eq!(l["image_pairs"], 1, "{l}");
    assert_eq!(l["images_unlinked"], 1, "{l}");
    // the positive image of the chunked gold passage is an orphan: no rel-2 pair
    assert!(!qrels.contains(" 2"), "{qrels}");
    assert!(
        qrels.contains(&format!("q1 0 {p4}|||__NO_IMAGE__ 1")),
        "{qrels}"
    );
    assert!(
        exclusions.contains(&format!("q1 {keyed}|||{img_keyed}")),
        "{exclusions}"
    );
    assert!(!run.contains(&format!("{p4}|||{img_chunked}")), "{run}");

    let (out, qrels, exclusions, run) = eval("source-id");
    let l = &out["pair_links"]["biology"];
    assert_eq!(l["link"], "source-id");
    assert_eq!(l["passages_unkeyed"], 0, "{l}");
    assert_eq!(l["image_pairs"], 2, "{l}");
    assert_eq!(l["images_unlinked"], 0, "{l}");
    assert!(
        qrels.contains(&format!("q1 0 {p4}|||{img_chunked} 2")),
        "{qrels}"
    );
    assert!(
        exclusions.contains(&format!("q1 {keyed}|||{img_keyed}")),
        "{exclusions}"
    );
    assert!(run.contains(&format!("{p4}|||{img_chunked}")), "{run}");
    assert!(
        !run.contains(&format!("{keyed}|||{img_keyed}")),
        "excluded: {run}"
    );
    // only what the annotations name: the other chunk of the page gets no image
    assert!(!run.contains(&format!("{p5}|||{img_chunked}")), "{run}");
    // sift check counts the orphan under the rule it is given
    for (link, orphans) in [("regex", 1), ("source-id", 0)] {
        let chk = json(&ok(&[
            "check",
            "--corpus",
            s(&c),
            "--pair-link",
            link,
            "--json",
        ]));
        assert_eq!(
            chk["domains"]["biology"]["orphan_positive_images"], orphans,
            "{link}: {chk}"
        );
    }
}

/// A Contriever-layout checkpoint (vocab.txt and pytorch_model.bin only) indexes and
/// evaluates like any dense model.
#[test]
fn contriever_layout_checkpoint_indexes_and_evaluates() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let model = repo().join("models/fixtures/contriever/tiny-contriever");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&model),
        "-q",
    ]);
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
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&mistral),
        "--dense",
        s(&qwen2),
        "--dense",
        s(&qwen3),
        "--dense",
        s(&llama),
        "-q",
    ]);
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
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&model),
        "-q",
    ]);
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
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&vision),
        "-q",
    ]);
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
        let built = json(&ok(&[
            "index",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--dense",
            s(&model),
            "--profile",
            "reference",
            "--json",
            "-q",
        ]));
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
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&default),
        "--dense",
        s(&clip),
        "-q",
    ]);
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
        let built = json(&ok(&[
            "index",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--dense",
            s(&repo().join(model)),
            "--json",
            "-q",
        ]));
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

/// A tiny PNG of one colour.
fn png_of(rgb: [u8; 3]) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::from_pixel(6, 5, image::Rgb(rgb))
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

/// The ids of a `sift search --json` answer's hits.
fn hit_ids(out: &Value) -> Vec<String> {
    out["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect()
}

/// "Bring your own knowledge base": a JSONL file of {id | qid, text, image_path} rows with
/// images beside it indexes (BM25, a dense text model, CLIP's text and image towers) and
/// searches as one domain named after the file; a row links its passage and its image in
/// Task 4 pairs; a missing image is skipped and counted; eval refuses a knowledge base; a
/// Parquet file with the same columns reads the same.
#[test]
fn knowledge_base_jsonl_and_parquet_index_and_search() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kb");
    fs::create_dir_all(dir.join("images")).unwrap();
    fs::write(dir.join("images/red.png"), png_of([220, 30, 20])).unwrap();
    fs::write(dir.join("images/green.png"), png_of([20, 200, 40])).unwrap();
    fs::write(dir.join("images/blue.png"), png_of([20, 40, 230])).unwrap();
    let file = dir.join("kb.jsonl");
    fs::write(
        &file,
        concat!(
            r#"{"id": "volcano", "text": "lava flows from an erupting volcano", "image_path": "images/red.png", "source": "x"}"#,
            "\n",
            r#"{"qid": 7, "text": "green leaves of a fern in the forest", "image_path": "./images/green.png"}"#,
            "\n",
            r#"{"id": "ocean", "text": "blue waves on the ocean shore", "image_path": null}"#,
            "\n",
            r#"{"id": "sky-photo", "image_path": "images/blue.png"}"#,
            "\n",
            r#"{"id": "lava-again", "text": "a second caption of the lava picture", "image_path": "images/red.png"}"#,
            "\n",
            r#"{"id": "lost", "text": "a caption whose picture is missing", "image_path": "images/gone.png"}"#,
            "\n",
        ),
    )
    .unwrap();
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let contriever = repo().join("models/fixtures/contriever/tiny-contriever");
    let index = tmp.path().join("index");
    let out = sift(&[
        "index",
        "--corpus",
        s(&file),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "--dense",
        s(&contriever),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 x missing_image_file"), "{stderr}");
    let built = json(&String::from_utf8(out.stdout).unwrap());
    let m = &built["manifest"];
    assert_eq!(m["layout"], "kb");
    assert_eq!(m["domains"]["kb"]["passages"], 5, "{m}");
    assert_eq!(
        m["dense"]["tiny-clip-quickgelu"]["images"]["images"]["kb"], 3,
        "{m}"
    );

    let search = |args: &[&str]| -> Value {
        let mut all = vec!["search", "--index", s(&index), "--json"];
        all.extend_from_slice(args);
        json(&ok(&all))
    };
    // BM25
    let out = search(&["--query", "erupting volcano lava"]);
    assert_eq!(out["domain"], "kb");
    assert_eq!(hit_ids(&out)[0], "volcano", "{out}");
    let out = search(&["--query", "fern forest"]);
    assert_eq!(hit_ids(&out), ["7"], "an integer qid is its decimal string");
    // a dense text model and CLIP's text tower rank every passage
    for model in ["dense:tiny-contriever", "dense:tiny-clip-quickgelu"] {
        let out = search(&["--query", "lava", "--retriever", model, "--top-k", "50"]);
        let mut ids = hit_ids(&out);
        ids.sort();
        assert_eq!(
            ids,
            ["7", "lava-again", "lost", "ocean", "volcano"],
            "{model}"
        );
    }
    // CLIP's image tower: the three images, each once
    let out = search(&[
        "--query",
        "red",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "images",
    ]);
    let mut ids = hit_ids(&out);
    ids.sort();
    assert_eq!(
        ids,
        ["images/blue.png", "images/green.png", "images/red.png"]
    );
    // pairs: a row's passage with its image, which needs the rows
    let err = fails(&[
        "search",
        "--index",
        s(&index),
        "--query",
        "lava",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "pairs",
    ]);
    assert!(err.contains("give --corpus"), "{err}");
    let out = search(&[
        "--query",
        "lava",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "pairs",
        "--corpus",
        s(&file),
        "--top-k",
        "50",
    ]);
    let mut ids = hit_ids(&out);
    ids.sort();
    assert_eq!(
        ids,
        [
            "7|||__NO_IMAGE__",
            "7|||images/green.png",
            "lava-again|||__NO_IMAGE__",
            "lava-again|||images/red.png",
            "lost|||__NO_IMAGE__",
            "ocean|||__NO_IMAGE__",
            "volcano|||__NO_IMAGE__",
            "volcano|||images/red.png",
        ],
        "{out}"
    );

    // check counts what the rows hold; eval refuses a knowledge base
    let out = json(&ok(&["check", "--corpus", s(&file), "--json"]));
    assert_eq!(out["layout"], "kb");
    assert_eq!(out["domains"]["kb"]["passages"], 5);
    assert_eq!(out["domains"]["kb"]["images"], 3);
    assert_eq!(out["warnings"]["missing_image_file"], 1, "{out}");
    let err = fails(&[
        "eval",
        "--corpus",
        s(&file),
        "--index",
        s(&index),
        "--task",
        "1",
        "--retriever",
        "bm25",
    ]);
    assert!(err.contains("a knowledge base has no queries"), "{err}");
    // the directory holding kb.jsonl is the same corpus
    let out = json(&ok(&["check", "--corpus", s(&dir), "--json"]));
    assert_eq!(out["domains"]["kb"]["passages"], 5);

    // Parquet, the same columns (ids from "id", else the integer "qid")
    let parquet = dir.join("shop.parquet");
    let nullable = |v: &[Option<&str>]| -> arrow_array::ArrayRef {
        Arc::new(arrow_array::StringArray::from(v.to_vec()))
    };
    write_parquet(
        &parquet,
        vec![
            (
                "qid",
                Arc::new(arrow_array::Int64Array::from(vec![1, 7, 3, 4])),
            ),
            (
                "id",
                nullable(&[Some("volcano"), None, Some("ocean"), Some("sky-photo")]),
            ),
            (
                "text",
                nullable(&[
                    Some("lava flows from an erupting volcano"),
                    Some("green leaves of a fern in the forest"),
                    Some("blue waves on the ocean shore"),
                    None,
                ]),
            ),
            (
                "image_path",
                nullable(&[
                    Some("images/red.png"),
                    Some("images/green.png"),
                    None,
                    Some("images/blue.png"),
                ]),
            ),
            ("extra", strings(&["a", "b", "c", "d"])),
        ],
    );
    let pindex = tmp.path().join("pindex");
    let built = json(&ok(&[
        "index",
        "--corpus",
        s(&parquet),
        "--index",
        s(&pindex),
        "--dense",
        s(&clip),
        "--json",
    ]));
    let m = &built["manifest"];
    assert_eq!(m["layout"], "kb");
    assert_eq!(m["domains"]["shop"]["passages"], 3, "{m}");
    assert_eq!(
        m["dense"]["tiny-clip-quickgelu"]["images"]["images"]["shop"], 3,
        "{m}"
    );
    let out = json(&ok(&[
        "search",
        "--index",
        s(&pindex),
        "--query",
        "fern forest",
        "--json",
    ]));
    assert_eq!(out["domain"], "shop");
    assert_eq!(hit_ids(&out), ["7"]);
    let out = json(&ok(&[
        "search",
        "--index",
        s(&pindex),
        "--query",
        "lava",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "pairs",
        "--corpus",
        s(&parquet),
        "--json",
    ]));
    let ids = hit_ids(&out);
    assert!(
        ids.contains(&"volcano|||images/red.png".to_string()),
        "{out}"
    );
    assert!(ids.contains(&"7|||images/green.png".to_string()), "{out}");
    assert_eq!(ids.len(), 5, "{out}");
}
