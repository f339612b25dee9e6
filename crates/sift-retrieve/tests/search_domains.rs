//! A search over several domains at once ([`sift_retrieve::search_domains`]) gives what one
//! index over their union gives: the sample's three domains against an index whose one
//! domain holds all their passages, with BM25 (both scorings), a dense model and a hybrid of
//! the two (fused by reciprocal rank and by weighted scores).

use sift_core::Corpus;
use sift_embed::{Embedder, EmbedderOptions, Role};
use sift_eval::RunEntry;
use sift_index::{Bm25Params, Bm25Scoring, BuildOptions, IndexDir, MemorySource, NoProgress};
use sift_retrieve::{
    Candidates, DomainPart, DomainSearcher, ModelSet, Query, QueryVectors, RetrieverSpec,
    SearchSettings, Sides, search_domains, slug,
};

const DOMAINS: [&str; 3] = ["biology", "gis", "physics"];

mod common;
use common::repo;

#[test]
fn several_domains_search_as_their_union_does() {
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let clip_dir = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let clip = Embedder::load(clip_dir.to_str().unwrap(), &EmbedderOptions::default()).unwrap();
    let mut source = MemorySource::new("sample and its union");
    let mut queries = vec!["map projection distortion".to_string()];
    for d in DOMAINS {
        for p in corpus.passages(d).unwrap() {
            let p = p.unwrap();
            source.add(d, p.id.clone(), p.text.clone());
            source.add("all", p.id, p.text);
        }
        let mut w = sift_core::Warnings::new();
        let examples = corpus.examples(d, false, &mut w).unwrap();
        queries.extend(examples.into_iter().take(3).map(|e| e.query));
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut names: Vec<String> = DOMAINS.iter().map(|d| d.to_string()).collect();
    names.push("all".into());
    let sides = Sides::new(&clip, sift_retrieve::Indexed::Passages);
    let index = IndexDir::build(
        tmp.path().join("index"),
        &source,
        &names,
        &BuildOptions {
            threads: 2,
            ..Default::default()
        },
        &[sides.dense_build(slug(&clip), clip_dir.display().to_string())],
        &NoProgress,
    )
    .unwrap();
    let dense: RetrieverSpec = "dense:tiny-clip-quickgelu".parse().unwrap();
    let hybrid: RetrieverSpec = "hybrid:bm25+dense:tiny-clip-quickgelu".parse().unwrap();
    let weighted: RetrieverSpec = "hybrid:bm25+dense:tiny-clip-quickgelu:0.3,0.7"
        .parse()
        .unwrap();
    let mut models = ModelSet::new();
    models
        .load_for(&index, &dense, &EmbedderOptions::default(), None)
        .unwrap();
    let mut compared = 0;
    for spec in [RetrieverSpec::Bm25, dense, hybrid, weighted] {
        let union = DomainSearcher::open(&index, "all", &spec, &models, false).unwrap();
        let parts: Vec<DomainSearcher> = DOMAINS
            .iter()
            .map(|d| DomainSearcher::open(&index, d, &spec, &models, false).unwrap())
            .collect();
        for scoring in [Bm25Scoring::Reference, Bm25Scoring::Lucene] {
            let settings = SearchSettings {
                top_k: 10,
                bm25: Bm25Params {
                    scoring,
                    ..Bm25Params::default()
                },
                ..SearchSettings::default()
            };
            for q in &queries {
                let mut vectors = QueryVectors::default();
                let v = clip.embed_texts(&[q.as_str()], Role::Query).unwrap();
                vectors.insert("tiny-clip-quickgelu", v);
                let want = union
                    .search(
                        &spec,
                        &Candidates::Passages,
                        &Query {
                            index: 0,
                            text: q,
                            vectors: &vectors,
                            bm25: None,
                        },
                        &[],
                        &settings,
                        &mut union.scratch(),
                    )
                    .unwrap();
                let domain_parts: Vec<DomainPart> = parts
                    .iter()
                    .map(|s| DomainPart {
                        searcher: s,
                        candidates: Candidates::Passages,
                        table: None,
                        exclude: &[],
                    })
                    .collect();
                let mut scratches: Vec<_> = parts.iter().map(|s| s.scratch()).collect();
                let got =
                    search_domains(&domain_parts, &spec, q, &vectors, &settings, &mut scratches)
                        .unwrap();
                let got: Vec<RunEntry> = got
                    .into_iter()
                    .map(|(d, e)| {
                        // each hit names the domain that holds it
                        assert!(parts[d].passage_ord(&e.doc).is_some(), "{}", e.doc);
                        e
                    })
                    .collect();
                assert_eq!(
                    ids(&got),
                    ids(&want),
                    "{spec} {scoring:?} {q:?}: merged vs union"
                );
                for (g, w) in got.iter().zip(&want) {
                    let tol = if spec == RetrieverSpec::Bm25 {
                        0.0
                    } else {
                        1e-6
                    };
                    assert!(
                        (g.score - w.score).abs() <= tol * w.score.abs().max(1.0),
                        "{spec} {}: {} vs {}",
                        g.doc,
                        g.score,
                        w.score
                    );
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > 300, "{compared}");
}

fn ids(v: &[RunEntry]) -> Vec<&str> {
    v.iter().map(|e| e.doc.as_str()).collect()
}
