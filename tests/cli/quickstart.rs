//! The README quickstart on the bundled sample, `sift check`, the Cranfield acceptance check
//! and every command's help.
use super::*;

#[test]
fn quickstart_on_the_sample_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let run = tmp.path().join("run.txt");
    let out = json(&index_ok(&sample(), &index, &["--json"]));
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
    index_ok(&cranfield, &index, &["--k1", "0.9", "--b", "0.4", "-q"]);
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
