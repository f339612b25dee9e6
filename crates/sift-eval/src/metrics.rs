//! Metrics exactly as trec_eval 9 computes them (`ndcg_cut`, `map_cut`, `recall`, `P`,
//! `recip_rank`, `ndcg`), checked against pytrec_eval in `tests/trec_eval_parity.rs`.
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use sift_core::Qrels;

/// Cut-offs reported for nDCG, MAP, recall and precision.
pub const CUTOFFS: [usize; 6] = [1, 5, 10, 25, 50, 100];

/// Metric name -> value (`ndcg@10`, `map@100`, `recall@5`, `p@1`, `mrr`, `ndcg`).
pub type Metrics = BTreeMap<String, f64>;

/// Every metric name, in report order.
pub fn metric_names() -> Vec<String> {
    let mut names = Vec::new();
    for family in ["ndcg", "map", "recall", "p"] {
        for k in CUTOFFS {
            names.push(format!("{family}@{k}"));
        }
    }
    names.push("mrr".into());
    names.push("ndcg".into());
    names
}

/// One retrieved document.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEntry {
    /// Document id.
    pub doc: String,
    /// Retrieval score (higher is better).
    pub score: f64,
}

/// A run: query id -> retrieved documents (any order; ranks come from the scores).
pub type Run = BTreeMap<String, Vec<RunEntry>>;

/// Per-query documents to remove from the run before scoring.
pub type Exclusions = BTreeMap<String, BTreeSet<String>>;

/// trec_eval's order: score descending, compared as 32-bit floats (trec_eval stores scores
/// in a C `float`, and `-0.0 == 0.0`), then document id descending in byte order.
pub fn trec_order(a: &RunEntry, b: &RunEntry) -> Ordering {
    trec_score_key(b.score)
        .total_cmp(&trec_score_key(a.score))
        .then_with(|| b.doc.as_bytes().cmp(a.doc.as_bytes()))
}

/// The key [`trec_order`] sorts scores by (descending, with `f32::total_cmp`): the score as
/// a 32-bit float, -0 as 0 (they compare equal in trec_eval), NaN as -infinity (below every
/// real score), so that the order is total (sorting with a partial one can panic).
pub fn trec_score_key(score: f64) -> f32 {
    let s = score as f32;
    if s.is_nan() {
        f32::NEG_INFINITY
    } else if s == 0.0 {
        0.0
    } else {
        s
    }
}

/// Metrics of one query. `ranking` is sorted here; `excluded` documents are removed first.
pub fn evaluate_query(
    ranking: &[RunEntry],
    judgments: &BTreeMap<String, i32>,
    excluded: Option<&BTreeSet<String>>,
) -> Metrics {
    let mut ranked: Vec<&RunEntry> = ranking
        .iter()
        .filter(|e| excluded.is_none_or(|x| !x.contains(&e.doc)))
        .collect();
    ranked.sort_by(|a, b| trec_order(a, b));

    let num_rel = judgments.values().filter(|&&g| g >= 1).count();
    let mut ideal: Vec<i32> = judgments.values().copied().filter(|&g| g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let discount = |rank: usize| (rank as f64 + 1.0).log2(); // rank is 1-based

    let grades: Vec<i32> = ranked
        .iter()
        .map(|e| judgments.get(&e.doc).copied().unwrap_or(0))
        .collect();

    let mut out = Metrics::new();
    for k in CUTOFFS {
        let mut rel_ret = 0usize;
        let mut ap = 0.0;
        let mut dcg = 0.0;
        for (i, &g) in grades.iter().take(k).enumerate() {
            let rank = i + 1;
            if g >= 1 {
                rel_ret += 1;
                ap += rel_ret as f64 / rank as f64;
            }
            if g > 0 {
                dcg += g as f64 / discount(rank);
            }
        }
        let idcg: f64 = ideal
            .iter()
            .take(k)
            .enumerate()
            .map(|(i, &g)| g as f64 / discount(i + 1))
            .sum();
        let ratio = |x: f64, d: f64| if d > 0.0 { x / d } else { 0.0 };
        out.insert(format!("ndcg@{k}"), ratio(dcg, idcg));
        out.insert(format!("map@{k}"), ratio(ap, num_rel as f64));
        out.insert(format!("recall@{k}"), ratio(rel_ret as f64, num_rel as f64));
        out.insert(format!("p@{k}"), rel_ret as f64 / k as f64);
    }
    let first = grades.iter().position(|&g| g >= 1);
    out.insert("mrr".into(), first.map_or(0.0, |i| 1.0 / (i + 1) as f64));
    let dcg: f64 = grades
        .iter()
        .enumerate()
        .filter(|(_, g)| **g > 0)
        .map(|(i, &g)| g as f64 / discount(i + 1))
        .sum();
    let idcg: f64 = ideal
        .iter()
        .enumerate()
        .map(|(i, &g)| g as f64 / discount(i + 1))
        .sum();
    out.insert("ndcg".into(), if idcg > 0.0 { dcg / idcg } else { 0.0 });
    out
}

/// Per-query metrics and their mean.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Query id -> metrics.
    pub per_query: BTreeMap<String, Metrics>,
    /// Mean of each metric over the evaluated queries.
    pub mean: Metrics,
}

/// Evaluates `run` against `qrels`.
///
/// Which queries count follows trec_eval: a query is evaluated when it has at least one
/// judgement (of any grade); queries without judgements are ignored. With `complete = false`
/// (trec_eval's default) a judged query absent from the run is ignored too; with
/// `complete = true` (trec_eval `-c`) it is evaluated with an empty ranking and scores 0.
pub fn score_run(run: &Run, qrels: &Qrels, exclusions: &Exclusions, complete: bool) -> Evaluation {
    let empty = Vec::new();
    let mut per_query = BTreeMap::new();
    for (qid, judgments) in qrels {
        if judgments.is_empty() {
            continue;
        }
        let ranking = match run.get(qid) {
            Some(r) => r,
            None if complete => &empty,
            None => continue,
        };
        per_query.insert(
            qid.clone(),
            evaluate_query(ranking, judgments, exclusions.get(qid)),
        );
    }
    let mean = mean_of(per_query.values());
    Evaluation { per_query, mean }
}

/// Unweighted mean of each metric; empty input gives an empty map.
pub(crate) fn mean_of<'a>(items: impl Iterator<Item = &'a Metrics>) -> Metrics {
    let mut sums = Metrics::new();
    let mut n = 0usize;
    for m in items {
        n += 1;
        for (k, v) in m {
            *sums.entry(k.clone()).or_insert(0.0) += v;
        }
    }
    if n > 0 {
        for v in sums.values_mut() {
            *v /= n as f64;
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &[(&str, f64)]) -> Vec<RunEntry> {
        list.iter()
            .map(|(d, s)| RunEntry {
                doc: d.to_string(),
                score: *s,
            })
            .collect()
    }

    #[test]
    fn hand_computed_query() {
        let judgments: BTreeMap<String, i32> = [("a", 2), ("b", 0), ("c", 1)]
            .map(|(d, g)| (d.to_string(), g))
            .into();
        // ranking: x(1.0), a(0.5), c(0.5) -> ties broken by id descending: c before a
        let m = evaluate_query(
            &entries(&[("a", 0.5), ("x", 1.0), ("c", 0.5)]),
            &judgments,
            None,
        );
        // order: x, c, a
        assert_eq!(m["p@1"], 0.0);
        assert_eq!(m["mrr"], 0.5);
        let dcg = 1.0 / 3f64.log2() + 2.0 / 4f64.log2();
        let idcg = 2.0 + 1.0 / 3f64.log2();
        assert!((m["ndcg@5"] - dcg / idcg).abs() < 1e-12);
        assert!((m["map@5"] - (0.5 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
        assert_eq!(m["recall@1"], 0.0);
        assert_eq!(m["recall@5"], 1.0);
        assert_eq!(m["p@5"], 2.0 / 5.0);
    }

    #[test]
    fn exclusions_apply_before_the_cutoff() {
        let judgments: BTreeMap<String, i32> = [("b".to_string(), 1)].into();
        let excluded: BTreeSet<String> = ["a".to_string()].into();
        let m = evaluate_query(
            &entries(&[("a", 2.0), ("b", 1.0)]),
            &judgments,
            Some(&excluded),
        );
        assert_eq!(m["p@1"], 1.0);
        assert_eq!(m["ndcg@1"], 1.0);
    }

    #[test]
    fn scores_compare_as_f32() {
        let judgments: BTreeMap<String, i32> = [("a".to_string(), 1)].into();
        // 1.0000000001 and 1.0 are the same f32: tie -> id descending puts "b" first
        let m = evaluate_query(
            &entries(&[("a", 1.0000000001), ("b", 1.0)]),
            &judgments,
            None,
        );
        assert_eq!(m["mrr"], 0.5);
    }

    #[test]
    fn query_selection_follows_trec_eval() {
        let mut qrels = Qrels::new();
        qrels.insert("judged".into(), [("d".to_string(), 1)].into());
        qrels.insert("no_run".into(), [("d".to_string(), 1)].into());
        qrels.insert("empty".into(), BTreeMap::new());
        let mut run = Run::new();
        run.insert("judged".into(), entries(&[("d", 1.0)]));
        run.insert("unjudged".into(), entries(&[("d", 1.0)]));
        let ev = score_run(&run, &qrels, &Exclusions::new(), false);
        assert_eq!(ev.per_query.keys().collect::<Vec<_>>(), ["judged"]);
        let ev = score_run(&run, &qrels, &Exclusions::new(), true);
        assert_eq!(
            ev.per_query.keys().collect::<Vec<_>>(),
            ["judged", "no_run"]
        );
        assert_eq!(ev.mean["ndcg@10"], 0.5);
    }

    /// Callers that sort (score, something) pairs themselves (Task 4's pair selection) use
    /// the key: it orders scores exactly as trec_order does.
    #[test]
    fn the_score_key_orders_like_trec_order() {
        let scores = [
            f32::NAN,
            f32::NEG_INFINITY,
            -1.0,
            -0.0,
            0.0,
            1.0,
            f32::INFINITY,
        ];
        for &a in &scores {
            for &b in &scores {
                let ea = RunEntry {
                    doc: "x".into(),
                    score: a as f64,
                };
                let eb = RunEntry {
                    doc: "x".into(),
                    score: b as f64,
                };
                assert_eq!(
                    trec_score_key(b as f64).total_cmp(&trec_score_key(a as f64)),
                    trec_order(&ea, &eb),
                    "{a} {b}"
                );
            }
        }
    }

    #[test]
    fn trec_order_is_total_with_nan_zeros_and_infinities() {
        let mut v = entries(&[
            ("a", f64::NAN),
            ("b", 0.0),
            ("c", -0.0),
            ("d", f64::INFINITY),
            ("e", f64::NEG_INFINITY),
            ("f", 1.0),
            ("g", f64::NAN),
        ]);
        // many permutations: sorting with a non-total order can panic or disagree
        for shift in 0..v.len() {
            v.rotate_left(shift);
            let mut sorted = v.clone();
            sorted.sort_by(trec_order);
            let ids: Vec<&str> = sorted.iter().map(|e| e.doc.as_str()).collect();
            // -0 == 0 (ties by id descending), NaN ranks with -inf (ties by id descending)
            assert_eq!(ids, ["d", "f", "c", "b", "g", "e", "a"]);
        }
    }
}
