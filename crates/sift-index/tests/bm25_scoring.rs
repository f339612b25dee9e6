//! BM25 scores from the index against a direct computation of the formula over the analysed
//! text (a second, independent implementation, in f64): every passage, several queries, both
//! scorings, several (k1, b), both analyzers.
use std::collections::HashMap;
use std::path::PathBuf;

use sift_core::Corpus;
use sift_index::lucene::{byte4_to_length, length_to_byte4};
use sift_index::{AnalyzerPreset, Bm25Params, Bm25Scoring, BuildOptions, IndexDir, NoProgress};

fn sample() -> Corpus {
    Corpus::open(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../corpora/sample")).unwrap()
}

/// BM25 by the book: documents as term lists.
fn brute_force(docs: &[Vec<String>], query: &[String], p: &Bm25Params) -> Vec<f32> {
    let n_all = docs.len() as f64;
    let total = docs.iter().map(|d| d.len()).sum::<usize>() as f64;
    let n_nonempty = docs.iter().filter(|d| !d.is_empty()).count() as f64;
    let mut df: HashMap<&str, f64> = HashMap::new();
    for d in docs {
        let mut seen: Vec<&str> = d.iter().map(String::as_str).collect();
        seen.sort();
        seen.dedup();
        for t in seen {
            *df.entry(t).or_default() += 1.0;
        }
    }
    let (k1, b) = (p.k1 as f64, p.b as f64);
    let mut qtf: HashMap<&str, f64> = HashMap::new();
    for t in query {
        *qtf.entry(t).or_default() += 1.0;
    }
    // the reference's query length counts the terms the corpus has
    let qlen: f64 = qtf
        .iter()
        .filter(|(t, _)| df.contains_key(*t))
        .map(|(_, n)| n)
        .sum();
    docs.iter()
        .map(|d| {
            let mut score = 0.0;
            for (t, &q) in &qtf {
                let Some(&df) = df.get(t) else { continue };
                let tf = d.iter().filter(|x| x.as_str() == *t).count() as f64;
                if tf == 0.0 {
                    continue;
                }
                score += match p.scoring {
                    Bm25Scoring::Lucene => {
                        let avgdl = total / n_nonempty;
                        let len = byte4_to_length(length_to_byte4(d.len() as u32)) as f64;
                        let idf = (1.0 + (n_all.min(n_nonempty) - df + 0.5) / (df + 0.5)).ln();
                        q * idf * tf / (tf + k1 * (1.0 - b + b * len / avgdl))
                    }
                    Bm25Scoring::Reference => {
                        let avgdl = total / n_all;
                        let idf = (n_all + 1.0).ln() - (df + 0.5).ln();
                        let w = |f: f64, len: f64| idf * f / (f + k1 * (1.0 - b + b * len / avgdl));
                        w(q, qlen) * w(tf, d.len() as f64)
                    }
                };
            }
            score as f32
        })
        .collect()
}

#[test]
fn scores_equal_the_formula() {
    let corpus = sample();
    let mut compared = 0;
    for preset in [AnalyzerPreset::Lucene, AnalyzerPreset::Snowball] {
        let config = preset.config();
        let tmp = tempfile::tempdir().unwrap();
        let index = IndexDir::build(
            tmp.path().join("i"),
            &corpus,
            &["physics".into()],
            &BuildOptions {
                analyzer: config,
                ..BuildOptions::default()
            },
            &[],
            &NoProgress,
        )
        .unwrap();
        let bm25 = index.bm25("physics").unwrap();
        let mut analyzer = config.analyzer();
        let passages: Vec<_> = corpus
            .passages("physics")
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let docs: Vec<Vec<String>> = passages.iter().map(|p| analyzer.terms(&p.text)).collect();
        for (p, d) in passages.iter().zip(&docs) {
            assert_eq!(bm25.length(bm25.ord(&p.id).unwrap()), d.len() as u32);
        }
        let queries = [
            "quantum tunnelling through a potential barrier",
            "entropy entropy heat engine efficiency",
            "light refraction lens optics focal length",
            "zzz-no-such-term",
        ];
        let mut scratch = bm25.scratch();
        for scoring in [Bm25Scoring::Lucene, Bm25Scoring::Reference] {
            for (k1, b) in [(0.9, 0.4), (1.2, 0.75), (2.0, 0.0), (0.0, 1.0)] {
                let params = Bm25Params { k1, b, scoring };
                for q in queries {
                    let qtokens = analyzer.terms(q);
                    let want = brute_force(&docs, &qtokens, &params);
                    let hits = bm25.search(&mut scratch, q, 1000, &params, &[]).unwrap();
                    let expected_hits = want.iter().filter(|&&s| s > 0.0).count();
                    assert_eq!(hits.len(), expected_hits, "{q} {params:?}");
                    for h in &hits {
                        let i = passages
                            .iter()
                            .position(|p| p.id == bm25.id(h.ord))
                            .unwrap();
                        let w = want[i];
                        assert!(
                            (h.score - w).abs() <= 1e-4 * w.abs().max(1.0),
                            "{q} {params:?} {}: {} vs {w}",
                            passages[i].id,
                            h.score
                        );
                        compared += 1;
                    }
                    // best first, ties by id descending
                    for pair in hits.windows(2) {
                        assert!(
                            pair[0].score > pair[1].score
                                || (pair[0].score == pair[1].score
                                    && bm25.id(pair[0].ord) > bm25.id(pair[1].ord))
                        );
                    }
                }
            }
        }
    }
    assert!(compared > 50, "{compared}");
}

#[test]
fn exclusions_and_top_k_cut() {
    let corpus = sample();
    let tmp = tempfile::tempdir().unwrap();
    let index = IndexDir::build(
        tmp.path().join("i"),
        &corpus,
        &["biology".into()],
        &BuildOptions::default(),
        &[],
        &NoProgress,
    )
    .unwrap();
    let bm25 = index.bm25("biology").unwrap();
    let mut scratch = bm25.scratch();
    let p = Bm25Params::default();
    let all = bm25
        .search(&mut scratch, "cell energy protein", 1000, &p, &[])
        .unwrap();
    assert!(all.len() >= 3);
    let top2 = bm25
        .search(&mut scratch, "cell energy protein", 2, &p, &[])
        .unwrap();
    assert_eq!(top2, all[..2]);
    let without_first = bm25
        .search(&mut scratch, "cell energy protein", 2, &p, &[all[0].ord])
        .unwrap();
    assert_eq!(without_first, all[1..3]);
    // the scratch is clean after an excluded search
    assert_eq!(
        bm25.search(&mut scratch, "cell energy protein", 1000, &p, &[])
            .unwrap(),
        all
    );
}

#[test]
fn every_passage_finds_itself_by_its_own_text() {
    let corpus = sample();
    let tmp = tempfile::tempdir().unwrap();
    let index = IndexDir::build(
        tmp.path().join("i"),
        &corpus,
        &["gis".into()],
        &BuildOptions {
            threads: 2,
            ..Default::default()
        },
        &[],
        &NoProgress,
    )
    .unwrap();
    let bm25 = index.bm25("gis").unwrap();
    let mut scratch = bm25.scratch();
    for p in corpus.passages("gis").unwrap() {
        let p = p.unwrap();
        let hits = bm25
            .search(&mut scratch, &p.text, 1000, &Bm25Params::default(), &[])
            .unwrap();
        assert!(
            hits.iter().any(|h| bm25.id(h.ord) == p.id),
            "{} not found by its own text",
            p.id
        );
    }
    assert_eq!(bm25.len(), 15);
}

/// Equal scores are cut by passage id (descending, trec_eval's order) wherever the top k
/// ends, in both accumulation modes: a rare term (few postings, touched documents tracked)
/// and a common one (most of the domain, the accumulator scanned whole).
#[test]
fn ties_at_the_cut_off_go_to_the_larger_ids() {
    use sift_index::{BuildOptions, MemorySource, NoProgress};
    let mut source = MemorySource::new("ties");
    // ids inserted in a scrambled order; every "common" passage is identical, and so is
    // every "rare" one (the same length too)
    let n = 997usize;
    let mut ids: Vec<String> = Vec::new();
    for i in 0..n {
        let j = (i * 389) % n;
        let id = format!("p{j:04}");
        let text = if j.is_multiple_of(50) {
            "rare words"
        } else {
            "common words"
        };
        source.add("d", id.clone(), text.to_string());
        ids.push(id);
    }
    let tmp = tempfile::tempdir().unwrap();
    let index = IndexDir::build(
        tmp.path().join("i"),
        &source,
        &["d".to_string()],
        &BuildOptions {
            threads: 3,
            ..BuildOptions::default()
        },
        &[],
        &NoProgress,
    )
    .unwrap();
    let bm25 = index.bm25("d").unwrap();
    let mut scratch = bm25.scratch();
    for scoring in [Bm25Scoring::Reference, Bm25Scoring::Lucene] {
        let params = Bm25Params {
            scoring,
            ..Bm25Params::default()
        };
        let rare = n.div_ceil(50);
        for (query, matching) in [("rare", rare), ("common", n - rare)] {
            let mut want: Vec<&String> = ids
                .iter()
                .filter(|id| {
                    id[1..].parse::<usize>().unwrap().is_multiple_of(50) == (query == "rare")
                })
                .collect();
            assert_eq!(want.len(), matching);
            want.sort_by(|a, b| b.cmp(a));
            for k in [1, 7, matching / 2, matching, matching + 5] {
                let hits = bm25.search(&mut scratch, query, k, &params, &[]).unwrap();
                let got: Vec<&str> = hits.iter().map(|h| bm25.id(h.ord)).collect();
                let want: Vec<&str> = want.iter().take(k).map(|s| s.as_str()).collect();
                assert_eq!(got, want, "{query} k={k} {scoring:?}");
            }
            // an exclusion removes exactly that passage
            let first = bm25.ord(want[0]).unwrap();
            let hits = bm25
                .search(&mut scratch, query, 3, &params, &[first])
                .unwrap();
            let got: Vec<&str> = hits.iter().map(|h| bm25.id(h.ord)).collect();
            assert_eq!(
                got,
                vec![want[1].as_str(), want[2].as_str(), want[3].as_str()]
            );
        }
    }
}

/// Several domains scored with their statistics summed rank and score every passage as one
/// index over all of them does: the same scores, bit for bit, both scorings.
#[test]
fn summed_statistics_score_domains_as_one_index() {
    let corpus = sample();
    let domains = ["biology", "gis", "physics"];
    let mut source = sift_index::MemorySource::default();
    let mut queries = Vec::new();
    for d in domains {
        for p in corpus.passages(d).unwrap() {
            let p = p.unwrap();
            source.add(d, p.id.clone(), p.text.clone());
            source.add("all", p.id, p.text);
        }
        let mut w = sift_core::Warnings::new();
        queries.extend(
            corpus
                .examples(d, false, &mut w)
                .unwrap()
                .into_iter()
                .take(4)
                .map(|e| e.query),
        );
    }
    queries.push("photosynthesis projection gravity".into());
    queries.push("a word no passage has: zzyzx".into());
    let tmp = tempfile::tempdir().unwrap();
    let mut names: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
    names.push("all".into());
    let index = IndexDir::build(
        tmp.path().join("i"),
        &source,
        &names,
        &BuildOptions::default(),
        &[],
        &NoProgress,
    )
    .unwrap();
    let all = index.bm25("all").unwrap();
    let parts: Vec<_> = domains.iter().map(|d| index.bm25(d).unwrap()).collect();
    let mut all_scratch = all.scratch();
    let mut scratches: Vec<_> = parts.iter().map(|b| b.scratch()).collect();
    let mut compared = 0;
    for scoring in [Bm25Scoring::Reference, Bm25Scoring::Lucene] {
        let params = Bm25Params {
            scoring,
            ..Bm25Params::default()
        };
        for q in &queries {
            let mut stats = sift_index::Bm25Stats::default();
            for (b, s) in parts.iter().zip(scratches.iter_mut()) {
                stats.add(&b.query_stats(s, q).unwrap());
            }
            let want: HashMap<String, f32> = all
                .matching(&mut all_scratch, q, &params)
                .unwrap()
                .into_iter()
                .map(|h| (all.id(h.ord).to_string(), h.score))
                .collect();
            let mut got = HashMap::new();
            for (b, s) in parts.iter().zip(scratches.iter_mut()) {
                for h in b.matching_with(s, q, &params, Some(&stats)).unwrap() {
                    got.insert(b.id(h.ord).to_string(), h.score);
                }
                // the best k of a domain are the best k of that domain's passages in one index
                let top = b.search_with(s, q, 5, &params, &[], Some(&stats)).unwrap();
                let mut own: Vec<(f32, &str)> = want
                    .iter()
                    .filter(|(id, _)| b.ord(id).is_some())
                    .map(|(id, &s)| (s, id.as_str()))
                    .collect();
                own.sort_by(|x, y| y.0.total_cmp(&x.0).then(y.1.cmp(x.1)));
                let top: Vec<&str> = top.iter().map(|h| b.id(h.ord)).collect();
                let own: Vec<&str> = own.iter().take(5).map(|x| x.1).collect();
                assert_eq!(top, own, "{q:?} {scoring:?}");
            }
            assert_eq!(got.len(), want.len(), "{q:?} {scoring:?}");
            for (id, s) in &want {
                assert_eq!(got[id].to_bits(), s.to_bits(), "{id} {q:?} {scoring:?}");
                compared += 1;
            }
            // the domain's own statistics give other scores: the sum is what makes them one
            if let Some(h) = parts[0]
                .matching(&mut scratches[0], q, &params)
                .unwrap()
                .first()
            {
                let id = parts[0].id(h.ord);
                assert_ne!(want[id].to_bits(), h.score.to_bits(), "{id} {q:?}");
            }
        }
    }
    assert!(compared > 200, "{compared} scores compared");
}
