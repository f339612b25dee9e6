//! Hostile-user tests of the `sift` binary: one test per class of failure an adversarial
//! campaign found (many threads, stale caches, missing shards, bad ids, non-finite vectors,
//! read-only indexes, concurrent rebuilds, symlinks, panics, silent successes, misleading
//! messages). Each asserts the clear error, counted warning or correct result.

mod common;
use common::*;

/// More indexing threads than cores (and than tantivy's own maximum of 8): tantivy's
/// background merges used to race Sift's explicit merge and fail most builds.
#[test]
fn index_builds_with_16_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    for _ in 0..3 {
        let out = json(&ok(&[
            "index",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--threads",
            "16",
            "--json",
        ]));
        assert_eq!(out["passages"], 46);
    }
    let big = generated_beir(tmp.path(), 20_000);
    let index = tmp.path().join("big");
    let out = json(&ok(&[
        "index",
        "--corpus",
        s(&big),
        "--index",
        s(&index),
        "--threads",
        "16",
        "--json",
    ]));
    assert_eq!(out["passages"], 20_000);
    let ev = json(&ok(&[
        "eval",
        "--corpus",
        s(&big),
        "--index",
        s(&index),
        "--json",
    ]));
    assert!(ev["metrics"]["ndcg@10"].as_f64().unwrap() > 0.5, "{ev}");
}
