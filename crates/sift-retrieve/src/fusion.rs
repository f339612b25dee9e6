//! Rank fusion: several rankings of the same query combined into one (hybrid retrieval).
use std::collections::HashMap;

use sift_eval::{RunEntry, trec_order};

/// Sorts best first, ties by document id descending (trec_eval's order), and keeps `k`.
pub fn sort_and_cut(mut entries: Vec<RunEntry>, k: usize) -> Vec<RunEntry> {
    entries.sort_by(trec_order);
    entries.truncate(k);
    entries
}

/// Reciprocal rank fusion (Cormack et al. 2009): score(d) = sum over rankings of
/// 1 / (k + rank(d)), ranks from 1 in each ranking's own order; `k` is usually 60.
pub fn rrf(rankings: &[Vec<RunEntry>], k: f64, top_k: usize) -> Vec<RunEntry> {
    let mut scores: HashMap<String, f64> = HashMap::new();
    for ranking in rankings {
        for (i, e) in sort_and_cut(ranking.clone(), usize::MAX)
            .into_iter()
            .enumerate()
        {
            *scores.entry(e.doc).or_insert(0.0) += 1.0 / (k + (i + 1) as f64);
        }
    }
    let fused = scores
        .into_iter()
        .map(|(doc, score)| RunEntry { doc, score })
        .collect();
    sort_and_cut(fused, top_k)
}

/// Weighted score fusion: each ranking's scores are min-max normalised to [0, 1] per query,
/// multiplied by its weight and summed; a document missing from a ranking gets 0 there.
/// Finite scores of any size normalise without overflow; the fused scores are finite when
/// the weights' absolute values sum to a finite number.
pub fn weighted(rankings: &[Vec<RunEntry>], weights: &[f64], top_k: usize) -> Vec<RunEntry> {
    let mut scores: HashMap<&str, f64> = HashMap::new();
    for (ranking, &w) in rankings.iter().zip(weights) {
        let (lo, hi) = ranking
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), e| {
                (lo.min(e.score), hi.max(e.score))
            });
        // halves: the span of two finite scores (say -1e308 and 1e308) overflows, their
        // halves' does not, and the ratio is the same
        let span = hi / 2.0 - lo / 2.0;
        for e in ranking {
            let norm = if span > 0.0 {
                ((e.score / 2.0 - lo / 2.0) / span).clamp(0.0, 1.0)
            } else {
                1.0
            };
            *scores.entry(e.doc.as_str()).or_insert(0.0) += w * norm;
        }
    }
    let fused = scores
        .into_iter()
        .map(|(doc, score)| RunEntry {
            doc: doc.to_string(),
            score,
        })
        .collect();
    sort_and_cut(fused, top_k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[(&str, f64)]) -> Vec<RunEntry> {
        items
            .iter()
            .map(|(d, s)| RunEntry {
                doc: d.to_string(),
                score: *s,
            })
            .collect()
    }

    #[test]
    fn rrf_rewards_agreement() {
        let a = list(&[("x", 9.0), ("y", 8.0), ("z", 7.0)]);
        let b = list(&[("y", 0.9), ("z", 0.8), ("w", 0.7)]);
        let fused = rrf(&[a, b], 60.0, 10);
        assert_eq!(fused[0].doc, "y"); // ranks 2 and 1
        assert!((fused[0].score - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert_eq!(fused.len(), 4);
        assert_eq!(rrf(&[list(&[("a", 1.0), ("b", 2.0)])], 60.0, 1)[0].doc, "b");
    }

    #[test]
    fn weighted_normalises_each_ranking() {
        let a = list(&[("x", 30.0), ("y", 10.0)]); // x 1, y 0
        let b = list(&[("y", 0.9), ("x", 0.5)]); // y 1, x 0
        let fused = weighted(&[a.clone(), b.clone()], &[0.25, 0.75], 10);
        assert_eq!(fused[0].doc, "y");
        assert!((fused[0].score - 0.75).abs() < 1e-12);
        let fused = weighted(&[a, b], &[0.75, 0.25], 10);
        assert_eq!(fused[0].doc, "x");
    }

    #[test]
    fn weighted_normalises_extreme_finite_scores_without_overflow() {
        let a = list(&[("x", f64::MAX), ("y", 0.0), ("z", -f64::MAX)]);
        let b = list(&[("z", 1e-300), ("y", -1e-300)]);
        let fused = weighted(&[a, b], &[1.0, 1.0], 10);
        let score = |d: &str| fused.iter().find(|e| e.doc == d).unwrap().score;
        assert!(fused.iter().all(|e| e.score.is_finite()), "{fused:?}");
        assert_eq!((score("x"), score("y"), score("z")), (1.0, 0.5, 1.0));
    }
}
