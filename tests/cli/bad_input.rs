//! Bad input of every kind: a clear error naming file and line or row, or a counted warning;
//! never a panic or a half-written index.
use super::*;

#[test]
fn beir_unknown_qrels_ids_and_empty_queries_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let qrels = format!("{QRELS}q1\tnope\t1\nq9\td1\t1\n");
    let corpus = beir(tmp.path(), CORPUS, QUERIES, &qrels);
    let index = tmp.path().join("idx");
    index_ok(&corpus, &index, &["-q"]);
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
    index_ok(&corpus, &index, &["-q"]);
    let manifest_before = fs::read(index.join("manifest.json")).unwrap();
    let gens_before = generations(&index);

    fs::write(
        corpus.join("corpus.jsonl"),
        format!("{CORPUS}{{\"_id\": \"d4\", \"text\": \n"),
    )
    .unwrap();
    let err = index_fails(&corpus, &index, &["-q"]);
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
    let err = index_fails(&corpus, &index, &[]);
    assert!(
        err.contains("corpus.jsonl:4") && err.contains("UTF-8"),
        "{err}"
    );

    fs::write(
        corpus.join("corpus.jsonl"),
        format!("{CORPUS}{{\"_id\": \"d1\", \"text\": \"again\"}}\n"),
    )
    .unwrap();
    let err = index_fails(&corpus, &index, &[]);
    assert!(
        err.contains("corpus.jsonl")
            && err.contains("line 4")
            && err.contains("\"d1\"")
            && err.contains("line 1"),
        "{err}"
    );

    fs::write(corpus.join("corpus.jsonl"), "{\"_id\": \"x\"}\n").unwrap();
    let err = index_fails(&corpus, &index, &[]);
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
    let err = index_fails(&corpus, &index, &[]);
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
    index_ok(&corpus, &index, &["-q"]);
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
    let err = index_fails(&corpus, &index, &["-q"]);
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
    let err = index_fails(&root, &index, &[]);
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
    let err = index_fails(&root, &index, &[]);
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
    index_ok(&corpus, &index, &["--stemmer", "none", "-q"]);
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
    index_ok(&corpus, &index, &["-q"]);
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
    index_ok(&corpus, &index, &["-q"]);
    let gens = generations(&index);
    assert_eq!(gens.len(), 1);
    assert_ne!(gens[0], "gen-dead");
    assert!(!index.join(".manifest.json.tmp-1").exists());
    // refuses to write into a directory that holds something else
    let other = tmp.path().join("other");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("precious.txt"), "x").unwrap();
    assert!(index_fails(&corpus, &other, &[]).contains("refusing"));
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
fn killing_a_build_midway_leaves_the_previous_index_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(tmp.path(), CORPUS, QUERIES, QRELS);
    let index = tmp.path().join("idx");
    index_ok(&corpus, &index, &["-q"]);
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
    index_ok(&corpus, &index, &["-q"]);
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
