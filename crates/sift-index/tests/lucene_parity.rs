//! Sift's BM25 against the real Lucene and the reference code, on fixtures made by
//! `eval/reference/lucene/make_fixtures.py` (Anserini 1.7.1 / Lucene 9.9.1, gensim 4.4.0):
//! - the default analyzer's terms equal Anserini's default English analyzer's token stream on
//!   every text of `texts.jsonl.gz` (hand-written edge cases, Cranfield, generated mixes, a
//!   sweep over Unicode);
//! - `--bm25 lucene` returns Anserini's BM25 run (k1 0.9, b 0.4): the same top 100 per query,
//!   scores within 1e-4;
//! - `--bm25 reference` returns the BRIGHT reference code's run (gensim LuceneBM25Model): the
//!   same top 100, scores within 1e-4 (relative, the reference's scores reach ~100).
//!
//! Both on the generated collection committed with the fixtures and on Cranfield (ignored
//! when `SIFT_CRANFIELD` is unset; scripts/test says so).
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use sift_index::{
    AnalyzerConfig, Bm25Params, Bm25Scoring, BuildOptions, IndexDir, MemorySource, NoProgress,
};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lucene")
}

fn read_gz(path: &Path) -> String {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut s = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut s)
        .unwrap();
    s
}

fn jsonl(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn analyzer_terms_equal_lucene_token_streams() {
    let texts = jsonl(&read_gz(&fixtures().join("texts.jsonl.gz")));
    let tokens = jsonl(&read_gz(&fixtures().join("tokens.jsonl.gz")));
    assert_eq!(texts.len(), tokens.len());
    assert!(texts.len() > 5000, "{} texts", texts.len());
    let mut analyzer = AnalyzerConfig::default().analyzer();
    let mut bad = Vec::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut compared = 0;
    for (t, want) in texts.iter().zip(&tokens) {
        let text = t["text"].as_str().unwrap();
        let want: Vec<String> = serde_json::from_value(want.clone()).unwrap();
        let got = analyzer.terms(text);
        compared += want.len();
        *kinds
            .entry(t["kind"].as_str().unwrap().to_string())
            .or_default() += 1;
        if got != want {
            bad.push(format!("{text:?}\n  sift:   {got:?}\n  lucene: {want:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} texts differ from Lucene; first ones:\n{}",
        bad.len(),
        texts.len(),
        bad[..bad.len().min(15)].join("\n")
    );
    // every kind of text was there, and the texts were not trivially empty
    for kind in [
        "hand",
        "cranfield",
        "cranfield-query",
        "generated",
        "unicode",
    ] {
        assert!(kinds.get(kind).copied().unwrap_or(0) > 0, "no {kind} texts");
    }
    assert!(compared > 100_000, "{compared} tokens");
}

struct Collection {
    docs: Vec<(String, String)>,
    queries: Vec<(String, String)>,
}

fn passage_text(d: &serde_json::Value) -> String {
    sift_core::passage_text(d["title"].as_str(), d["text"].as_str().unwrap_or(""))
}

fn collection(corpus: &str, queries: &str) -> Collection {
    Collection {
        docs: jsonl(corpus)
            .iter()
            .map(|d| (d["_id"].as_str().unwrap().to_string(), passage_text(d)))
            .collect(),
        queries: jsonl(queries)
            .iter()
            .map(|q| {
                (
                    q["_id"].as_str().unwrap().to_string(),
                    q["text"].as_str().unwrap().to_string(),
                )
            })
            .collect(),
    }
}

fn generated() -> Collection {
    let dir = fixtures().join("generated");
    collection(
        &read_gz(&dir.join("corpus.jsonl.gz")),
        &std::fs::read_to_string(dir.join("queries.jsonl")).unwrap(),
    )
}

fn cranfield() -> Collection {
    let dir = PathBuf::from(
        std::env::var_os("SIFT_CRANFIELD").expect("set SIFT_CRANFIELD to the Cranfield collection"),
    );
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the Cranfield collection: set SIFT_CRANFIELD)",
                dir.join(name).display()
            )
        })
    };
    collection(&read("corpus.jsonl"), &read("queries.jsonl"))
}

/// A TREC run: query -> (doc, score) best first.
fn read_run(path: &Path) -> HashMap<String, Vec<(String, f64)>> {
    let mut out: HashMap<String, Vec<(String, f64)>> = HashMap::new();
    for line in BufReader::new(read_gz(path).as_bytes()).lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        out.entry(f[0].to_string())
            .or_default()
            .push((f[2].to_string(), f[4].parse().unwrap()));
    }
    out
}

/// Checks Sift's top 100 against a reference run; returns (queries, results, largest score
/// difference).
fn compare(c: &Collection, scoring: Bm25Scoring, run: &Path, rel: bool) -> (usize, usize, f64) {
    let mut source = MemorySource::new("parity");
    for (id, text) in &c.docs {
        source.add("d", id.clone(), text.clone());
    }
    let tmp = tempfile::tempdir().unwrap();
    let index = IndexDir::build(
        tmp.path().join("i"),
        &source,
        &["d".to_string()],
        &BuildOptions {
            threads: 4,
            ..BuildOptions::default()
        },
        &[],
        &NoProgress,
    )
    .unwrap();
    let bm25 = index.bm25("d").unwrap();
    let reference = read_run(run);
    let params = Bm25Params {
        k1: 0.9,
        b: 0.4,
        scoring,
    };
    let mut scratch = bm25.scratch();
    let (mut queries, mut results, mut worst) = (0, 0, 0f64);
    for (qid, text) in &c.queries {
        let want = reference.get(qid).cloned().unwrap_or_default();
        let got: Vec<(String, f64)> = bm25
            .search(&mut scratch, text, 100, &params, &[])
            .unwrap()
            .iter()
            .map(|h| (bm25.id(h.ord).to_string(), h.score as f64))
            .collect();
        assert_eq!(
            got.len(),
            want.len(),
            "query {qid}: {} results, the reference has {}",
            got.len(),
            want.len()
        );
        let tol = |s: f64| if rel { 1e-4 * s.abs().max(1.0) } else { 1e-4 };
        // rank by rank, the scores agree (whatever the order among equal scores)
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let d = (g.1 - w.1).abs();
            worst = worst.max(if rel { d / w.1.abs().max(1.0) } else { d });
            assert!(
                d <= tol(w.1),
                "query {qid} rank {}: sift {} {} vs reference {} {}",
                i + 1,
                g.0,
                g.1,
                w.0,
                w.1
            );
        }
        // and so do the documents, except among those tied with the last one kept
        if let Some(last) = want.last().map(|w| w.1) {
            let got_map: HashMap<&str, f64> = got.iter().map(|(d, s)| (d.as_str(), *s)).collect();
            for (doc, score) in &want {
                if *score > last + 2.0 * tol(last) {
                    let s = got_map.get(doc.as_str()).unwrap_or_else(|| {
                        panic!("query {qid}: reference's {doc} ({score}) not in Sift's top 100")
                    });
                    assert!((s - score).abs() <= tol(*score), "query {qid} {doc}");
                }
            }
        }
        queries += 1;
        results += got.len();
    }
    (queries, results, worst)
}

#[test]
fn bm25_lucene_equals_anserini_on_a_generated_collection() {
    let (q, n, worst) = compare(
        &generated(),
        Bm25Scoring::Lucene,
        &fixtures().join("generated.anserini.run.gz"),
        false,
    );
    eprintln!("generated, lucene: {q} queries, {n} results, largest difference {worst:.2e}");
    assert!(q >= 50 && n > 2000, "{q} queries, {n} results");
}

#[test]
fn bm25_reference_equals_gensim_on_a_generated_collection() {
    let (q, n, worst) = compare(
        &generated(),
        Bm25Scoring::Reference,
        &fixtures().join("generated.reference.run.gz"),
        true,
    );
    eprintln!("generated, reference: {q} queries, {n} results, largest difference {worst:.2e}");
    assert!(q >= 50 && n > 2000, "{q} queries, {n} results");
}

#[test]
#[ignore = "needs the Cranfield collection (SIFT_CRANFIELD); scripts/test runs it"]
fn cranfield_bm25_lucene_equals_anserini() {
    let (q, n, worst) = compare(
        &cranfield(),
        Bm25Scoring::Lucene,
        &fixtures().join("cranfield.anserini.run.gz"),
        false,
    );
    eprintln!("cranfield, lucene: {q} queries, {n} results, largest difference {worst:.2e}");
    assert!(q == 225 && n > 20_000, "{q} queries, {n} results");
}

#[test]
#[ignore = "needs the Cranfield collection (SIFT_CRANFIELD); scripts/test runs it"]
fn cranfield_bm25_reference_equals_gensim() {
    let (q, n, worst) = compare(
        &cranfield(),
        Bm25Scoring::Reference,
        &fixtures().join("cranfield.reference.run.gz"),
        true,
    );
    eprintln!("cranfield, reference: {q} queries, {n} results, largest difference {worst:.2e}");
    assert!(q == 225 && n > 20_000, "{q} queries, {n} results");
}
