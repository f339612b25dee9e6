//! The evaluator against trec_eval 9.0.8 (through pytrec_eval). The fixtures and the script
//! that made them are in `eval/reference/` (regenerate: `python3
//! eval/reference/make_trec_eval_fixture.py`); they cover graded qrels, score ties across
//! cut-offs, rank columns that disagree with scores, f32 score collisions, exclusions,
//! queries judged only 0, and queries present in only one of run and qrels.
use std::collections::BTreeMap;
use std::path::PathBuf;

use sift_core::Warnings;
use sift_eval::{read_exclusions, read_qrels, read_run, score_run};

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../eval/reference/trec_eval")
}

/// pytrec_eval measure name -> Sift metric name.
fn sift_name(measure: &str) -> String {
    if let Some(k) = measure.strip_prefix("ndcg_cut_") {
        format!("ndcg@{k}")
    } else if let Some(k) = measure.strip_prefix("map_cut_") {
        format!("map@{k}")
    } else if let Some(k) = measure.strip_prefix("recall_") {
        format!("recall@{k}")
    } else if let Some(k) = measure.strip_prefix("P_") {
        format!("p@{k}")
    } else if measure == "recip_rank" {
        "mrr".into()
    } else {
        measure.to_string()
    }
}

fn check_case(prefix: &str) {
    let dir = reference_dir();
    let run = read_run(&dir.join(format!("{prefix}run.txt"))).expect("run");
    let qrels = read_qrels(
        &dir.join(format!("{prefix}qrels.txt")),
        &mut Warnings::new(),
    )
    .expect("qrels");
    let exclusions =
        read_exclusions(&dir.join(format!("{prefix}exclusions.txt"))).expect("exclusions");
    let expected: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("{prefix}expected.json"))).expect("expected.json"),
    )
    .expect("json");

    let ev = score_run(&run, &qrels, &exclusions, false);
    let per_query = expected["per_query"].as_object().expect("per_query");
    assert_eq!(
        ev.per_query.keys().collect::<Vec<_>>(),
        per_query.keys().collect::<Vec<_>>(),
        "{prefix}: evaluated queries differ from trec_eval's"
    );
    let mut compared = 0;
    let mut failures = Vec::new();
    for (qid, measures) in per_query {
        for (measure, value) in measures.as_object().expect("measures") {
            let want = value.as_f64().expect("number");
            let got = ev.per_query[qid][&sift_name(measure)];
            compared += 1;
            if (got - want).abs() > 1e-6 {
                failures.push(format!("{qid} {measure}: sift {got} trec_eval {want}"));
            }
        }
    }
    let mean: BTreeMap<String, f64> =
        serde_json::from_value(expected["mean"].clone()).expect("mean");
    for (measure, want) in &mean {
        let got = ev.mean[&sift_name(measure)];
        compared += 1;
        if (got - want).abs() > 1e-6 {
            failures.push(format!("mean {measure}: sift {got} trec_eval {want}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{prefix}: {} of {compared} values differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(compared > 20, "nothing compared");
}

#[test]
fn matches_trec_eval_on_the_synthetic_case() {
    check_case("");
}

#[test]
fn matches_trec_eval_on_the_hand_checked_case() {
    check_case("tiny_");
}
