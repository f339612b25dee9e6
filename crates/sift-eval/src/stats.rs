//! Significance of differences between two retrievers' per-query scores, as papers report
//! them: a paired t-test (scipy's `ttest_rel`), a paired randomisation test (scipy's
//! `permutation_test` with `permutation_type="samples"`: sign flips of the differences,
//! exact when every flip can be enumerated), the percentile bootstrap of a mean, and Holm's
//! step-down correction across several tests (domains).
use std::collections::BTreeMap;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Default resamples of the randomisation test and the bootstrap.
pub const RESAMPLES: usize = 10_000;
/// Default seed of the randomisation test and the bootstrap.
pub const SEED: u64 = 42;

/// A paired comparison of scores `a` and `b` over the same queries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// Queries compared.
    pub n: usize,
    /// Mean of `a`.
    pub mean_a: f64,
    /// Mean of `b`.
    pub mean_b: f64,
    /// Queries where `a` scores higher.
    pub wins: usize,
    /// Queries where both score the same.
    pub ties: usize,
    /// Queries where `b` scores higher.
    pub losses: usize,
    /// The paired t statistic (NaN when every difference is the same and zero).
    pub t: f64,
    /// Its two-sided p-value.
    pub t_p: f64,
    /// The randomisation test's two-sided p-value.
    pub perm_p: f64,
    /// Whether it enumerated every sign flip (else `resamples` random ones).
    pub perm_exact: bool,
    /// Random resamples when not exact.
    pub resamples: usize,
}

/// The paired comparison of `a` and `b` (same length, same query order): means,
/// wins/ties/losses, the t-test and the randomisation test (`resamples` flips from `seed`
/// unless 2^n of them fit in `resamples`).
pub fn paired(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Paired {
    assert_eq!(a.len(), b.len(), "paired scores of the same queries");
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let (t, t_p) = paired_t(&d);
    let (perm_p, perm_exact) = permutation(&d, resamples, seed);
    Paired {
        n: d.len(),
        mean_a: mean(a),
        mean_b: mean(b),
        wins: d.iter().filter(|&&x| x > 0.0).count(),
        ties: d.iter().filter(|&&x| x == 0.0).count(),
        losses: d.iter().filter(|&&x| x < 0.0).count(),
        t,
        t_p,
        perm_p,
        perm_exact,
        resamples: if perm_exact { 0 } else { resamples },
    }
}

/// The mean (NaN of nothing).
pub fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// scipy's `ttest_rel` of the differences `d`: (t, two-sided p). All differences equal:
/// t = ±infinity with p = 0 when they are not zero, NaN with p NaN when they are (as scipy).
pub fn paired_t(d: &[f64]) -> (f64, f64) {
    let n = d.len();
    if n < 2 {
        return (f64::NAN, f64::NAN);
    }
    let m = mean(d);
    let var = d.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64;
    let t = m / (var / n as f64).sqrt();
    if t.is_nan() {
        return (f64::NAN, f64::NAN);
    }
    if t.is_infinite() {
        return (t, 0.0);
    }
    let dist = StudentsT::new(0.0, 1.0, (n - 1) as f64).expect("n - 1 > 0 degrees of freedom");
    (t, (2.0 * dist.sf(t.abs())).min(1.0))
}

/// The two-sided randomisation test of the mean difference: each pair's difference keeps
/// or flips its sign. Exact (every one of the 2^n flips, the observed one included) when
/// 2^n <= `resamples`, as scipy's `permutation_test`; else `resamples` random flips and the
/// observed statistic counted once (scipy's adjustment). p = 2 min(P(null <= obs),
/// P(null >= obs)), at most 1, comparisons with scipy's relative tolerance (100 ulps).
pub fn permutation(d: &[f64], resamples: usize, seed: u64) -> (f64, bool) {
    let n = d.len();
    if n == 0 {
        return (f64::NAN, true);
    }
    let observed = mean(d);
    let gamma = (observed * f64::EPSILON * 100.0).abs();
    let (mut less, mut greater) = (0usize, 0usize);
    let mut count = |stat: f64| {
        less += (stat <= observed + gamma) as usize;
        greater += (stat >= observed - gamma) as usize;
    };
    let exact = n < 63 && (1u64 << n) <= resamples as u64;
    let (total, adjustment) = if exact {
        for mask in 0..(1u64 << n) {
            let s: f64 = d
                .iter()
                .enumerate()
                .map(|(i, x)| if mask >> i & 1 == 1 { -x } else { *x })
                .sum();
            count(s / n as f64);
        }
        ((1u64 << n) as f64, 0.0)
    } else {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // one random bit per pair (pair i: bit i % 64 of word i / 64), 64 flips from each
        // u64 the generator gives; the sum of each block of 8 pairs under each of its 256
        // flips is tabled, so a resample costs n / 8 lookups
        let blocks = n.div_ceil(8);
        let mut table = vec![0f64; blocks * 256];
        for (b, t) in table.chunks_mut(256).enumerate() {
            let xs = &d[8 * b..(8 * b + 8).min(n)];
            t[0] = xs.iter().sum();
            for m in 1..256usize {
                let (j, rest) = (m.trailing_zeros() as usize, m & (m - 1));
                t[m] = t[rest] - xs.get(j).map_or(0.0, |x| 2.0 * x);
            }
        }
        let mut bits = vec![0u64; n.div_ceil(64)];
        for _ in 0..resamples {
            bits.iter_mut().for_each(|w| *w = rng.next_u64());
            let s: f64 = table
                .chunks(256)
                .enumerate()
                .map(|(b, t)| t[(bits[b / 8] >> (8 * (b % 8))) as usize & 0xff])
                .sum();
            count(s / n as f64);
        }
        (resamples as f64, 1.0)
    };
    let p_less = (less as f64 + adjustment) / (total + adjustment);
    let p_greater = (greater as f64 + adjustment) / (total + adjustment);
    ((2.0 * p_less.min(p_greater)).min(1.0), exact)
}

/// The percentile bootstrap's `level` (0.95) confidence interval of the mean of `x`:
/// `resamples` resamples with replacement from `seed`. (NaN, NaN) of nothing.
pub fn bootstrap_ci(x: &[f64], level: f64, resamples: usize, seed: u64) -> (f64, f64) {
    if x.is_empty() || resamples == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = x.len();
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| x[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let alpha = (1.0 - level) / 2.0;
    (quantile(&means, alpha), quantile(&means, 1.0 - alpha))
}

/// The `q` quantile of sorted values, linear between order statistics (numpy's default).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Holm's step-down adjusted p-values of `p` (same order; NaN stays NaN): the family-wise
/// error rate is controlled across the tests (statsmodels' `multipletests(method="holm")`).
pub fn holm(p: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let m = order.len();
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 0.0f64;
    for (k, &i) in order.iter().enumerate() {
        running = running.max(((m - k) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

/// A paired comparison within one domain (or `"all"`: every domain's queries pooled),
/// with Holm-adjusted p-values across the domains of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainComparison {
    /// Domain, or `"all"`.
    pub domain: String,
    /// The test results.
    #[serde(flatten)]
    pub paired: Paired,
    /// The t-test's p-value adjusted by Holm across the domains (`None` for `"all"`).
    pub t_p_holm: Option<f64>,
    /// The randomisation test's p-value adjusted by Holm across the domains.
    pub perm_p_holm: Option<f64>,
}

/// Per-query values of one metric, by domain then query id.
pub type PerQuery = BTreeMap<String, BTreeMap<String, crate::Metrics>>;

/// Compares `a` and `b` on `metric` domain by domain over the queries both scored (in
/// query-id order), then over every domain's queries pooled (`"all"`, last); p-values
/// are also given Holm-adjusted across the domains.
pub fn compare_domains(
    a: &PerQuery,
    b: &PerQuery,
    metric: &str,
    resamples: usize,
    seed: u64,
) -> Vec<DomainComparison> {
    let mut out = Vec::new();
    let (mut all_a, mut all_b) = (Vec::new(), Vec::new());
    for (domain, qa) in a {
        let Some(qb) = b.get(domain) else { continue };
        let (mut xa, mut xb) = (Vec::new(), Vec::new());
        for (q, ma) in qa {
            if let (Some(va), Some(vb)) = (ma.get(metric), qb.get(q).and_then(|m| m.get(metric))) {
                xa.push(*va);
                xb.push(*vb);
            }
        }
        if xa.is_empty() {
            continue;
        }
        all_a.extend(&xa);
        all_b.extend(&xb);
        out.push(DomainComparison {
            domain: domain.clone(),
            paired: paired(&xa, &xb, resamples, seed),
            t_p_holm: None,
            perm_p_holm: None,
        });
    }
    let t = holm(&out.iter().map(|c| c.paired.t_p).collect::<Vec<_>>());
    let perm = holm(&out.iter().map(|c| c.paired.perm_p).collect::<Vec<_>>());
    for (c, (t, p)) in out.iter_mut().zip(t.into_iter().zip(perm)) {
        c.t_p_holm = Some(t);
        c.perm_p_holm = Some(p);
    }
    if !all_a.is_empty() {
        out.push(DomainComparison {
            domain: "all".into(),
            paired: paired(&all_a, &all_b, resamples, seed),
            t_p_holm: None,
            perm_p_holm: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_steps_down_and_keeps_order() {
        let adj = holm(&[0.01, 0.04, 0.03, f64::NAN, 0.5]);
        // sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1, made monotone
        assert_eq!(adj[0], 0.04);
        assert!(
            (adj[2] - 0.09).abs() < 1e-15 && (adj[1] - 0.09).abs() < 1e-15,
            "{adj:?}"
        );
        assert!(adj[3].is_nan());
        assert_eq!(adj[4], 0.5);
    }

    #[test]
    fn exact_permutation_counts_every_flip() {
        // d = (1, 1, 1): of 8 flips, only (+,+,+) reaches the observed mean 1 and only
        // (-,-,-) its mirror: p = 2 * 1/8
        let (p, exact) = permutation(&[1.0, 1.0, 1.0], RESAMPLES, SEED);
        assert!(exact);
        assert_eq!(p, 0.25);
        // all zero differences: every flip ties the observed 0: p = 1
        assert_eq!(permutation(&[0.0, 0.0], RESAMPLES, SEED).0, 1.0);
    }

    #[test]
    fn tabled_random_flips_equal_flipping_each_pair() {
        // 101 pairs (not a multiple of 8 or 64): the same random words, flipped one pair at
        // a time and summed, give the same p-value
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let d: Vec<f64> = (0..101).map(|_| rng.random_range(-0.3..0.4)).collect();
        let (p, exact) = permutation(&d, 500, SEED);
        assert!(!exact);
        let observed = mean(&d);
        let gamma = (observed * f64::EPSILON * 100.0).abs();
        let mut rng = ChaCha8Rng::seed_from_u64(SEED);
        let (mut less, mut greater) = (0.0, 0.0);
        for _ in 0..500 {
            let bits: Vec<u64> = (0..2).map(|_| rng.next_u64()).collect();
            let s: f64 = d
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    if bits[i / 64] >> (i % 64) & 1 == 1 {
                        -x
                    } else {
                        *x
                    }
                })
                .sum();
            less += (s / 101.0 <= observed + gamma) as u8 as f64;
            greater += (s / 101.0 >= observed - gamma) as u8 as f64;
        }
        let want = (2.0 * ((less + 1.0) / 501.0).min((greater + 1.0) / 501.0)).min(1.0);
        assert_eq!(p, want);
        assert!(p > 0.0 && p < 1.0, "{p}");
    }

    #[test]
    fn t_test_edge_cases_follow_scipy() {
        assert!(paired_t(&[0.0, 0.0, 0.0]).0.is_nan());
        let (t, p) = paired_t(&[0.5, 0.5]);
        assert!(t.is_infinite() && p == 0.0);
        assert!(paired_t(&[0.5]).1.is_nan());
    }
}
