//! BM25 scores from the index against a direct computation of the formula over the analysed
//! text (a second, independent implementation): every passage, several queries, both query
//! weightings, several (k1, b).
use std::collections::HashMap;
use std::path::PathBuf;

use sift_core::Corpus;
use sift_index::{AnalyzerConfig, Bm25Params, BuildOptions, IndexDir, NoProgress, QueryWeighting};
use tantivy::fieldnorm::FieldNormReader;

fn sample() -> Corpus {
    Corpus::open(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../corpora/sample")).unwrap()
}

/// BM25 by the book: documents as token lists, lengths through tantivy's one-byte length
/// code (the only lossy step, shared with Lucene's design).
fn brute_force(docs: &[Vec<String>], query: &[String], p: &Bm25Params) -> Vec<f32> {
    let n = docs.len() as f64;
    let avgdl = docs.iter().map(|d| d.len()).sum::<usize>() as f64 / n;
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
    let norm = |len: f64| k1 * (1.0 - b + b * len / avgdl);
    let mut qtf: HashMap<&str, f64> = HashMap::new();
    for t in query {
        *qtf.entry(t).or_default() += 1.0;
    }
    docs.iter()
        .map(|d| {
            let coded =
                FieldNormReader::id_to_fieldnorm(FieldNormReader::fieldnorm_to_id(d.len() as u32))
                    as f64;
            let mut score = 0.0;
            for (t, &q) in &qtf {
                let Some(&df) = df.get(t) else { continue };
                let tf = d.iter().filter(|x| x.as_str() == *t).count() as f64;
                if tf == 0.0 {
                    continue;
                }
                let doc_part = tf / (tf + norm(coded));
                score += match p.weighting {
                    QueryWeighting::Lucene => {
                        q * (1.0 + (n - df + 0.5) / (df + 0.5)).ln() * doc_part
                    }
                    QueryWeighting::Bright => {
                        let idf = (n + 1.0).ln() - (df + 0.5).ln();
                        idf * q / (q + norm(query.len() as f64)) * idf * doc_part
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
    let tmp = tempfile::tempdir().unwrap();
    let index = IndexDir::build(
        tmp.path().join("i"),
        &corpus,
        &["physics".into()],
        &BuildOptions::default(),
        &[],
        &NoProgress,
    )
    .unwrap();
    let bm25 = index.bm25("physics").unwrap();
    let config = AnalyzerConfig::default();
    let mut analyzer = config.build();
    let passages: Vec<_> = corpus
        .passages("physics")
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let docs: Vec<Vec<String>> = passages
        .iter()
        .map(|p| AnalyzerConfig::tokens(&mut analyzer, &p.text))
        .collect();
    let queries = [
        "quantum tunnelling through a potential barrier",
        "entropy entropy heat engine efficiency",
        "light refraction lens optics focal length",
        "zzz-no-such-term",
    ];
    let mut scratch = bm25.scratch();
    let mut compared = 0;
    for weighting in [QueryWeighting::Lucene, QueryWeighting::Bright] {
        for (k1, b) in [(0.9, 0.4), (1.2, 0.75), (2.0, 0.0), (0.0, 1.0)] {
            let params = Bm25Params { k1, b, weighting };
            for q in queries {
                let qtokens = AnalyzerConfig::tokens(&mut analyzer, q);
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
