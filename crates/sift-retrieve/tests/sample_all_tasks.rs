//! The library alone, end to end: index the sample corpus with BM25 and the tiny CLIP
//! checkpoint, then run all four MM-BRIGHT tasks through `sift_retrieve::evaluate`.
//! (`tests/cli.rs` checks that `sift eval --task all` reports the same numbers.)
use std::path::PathBuf;

use sift_core::Corpus;
use sift_embed::{Embedder, EmbedderOptions};
use sift_eval::Task;
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_retrieve::{EvalConfig, ModelSet, QueryImages, RetrieverSpec, Sides, evaluate, slug};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn all_four_tasks_with_bm25_and_clip() {
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let clip_dir = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let clip = Embedder::load(clip_dir.to_str().unwrap(), &EmbedderOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let sides = Sides::new(&clip, false);
    let index = IndexDir::build(
        tmp.path().join("index"),
        &corpus,
        &corpus.domains().unwrap(),
        &BuildOptions {
            threads: 2,
            ..Default::default()
        },
        &[sides.dense_build(slug(&clip), clip_dir.display().to_string())],
        &NoProgress,
    )
    .unwrap();
    let dense: RetrieverSpec = "dense:tiny-clip-quickgelu".parse().unwrap();
    let mut models = ModelSet::new();
    models
        .load_for(&index, &dense, &EmbedderOptions::default(), None)
        .unwrap();
    let config = EvalConfig {
        tasks: Task::ALL.to_vec(),
        retrievers: vec![RetrieverSpec::Bm25, dense],
        query_images: vec![QueryImages::All, QueryImages::First],
        ..Default::default()
    };
    let report = evaluate(&corpus, &index, &models, &config, &NoProgress).unwrap();
    // task 1: both retrievers; tasks 2 and 4: bm25 once, CLIP per query-image mode; task 3:
    // CLIP only (bm25 cannot rank images)
    let count = |t: Task| report.jobs.iter().filter(|j| j.task == t).count();
    assert_eq!(
        Task::ALL.map(count),
        [2, 3, 2, 3],
        "{:?}",
        report.jobs.iter().map(|j| &j.label).collect::<Vec<_>>()
    );
    assert_eq!(report.not_applicable, ["task 3: bm25 cannot rank images"]);
    for job in &report.jobs {
        assert_eq!(job.report.per_domain.len(), 3, "{}", job.label);
        let ndcg = job.report.mean()["ndcg@10"];
        assert!((0.0..=1.0).contains(&ndcg), "{}: {ndcg}", job.label);
    }
    // BM25 finds the sample's gold passages (the sample is easy for BM25)
    let bm25_task1 = report
        .jobs
        .iter()
        .find(|j| j.task == Task::Passages && j.retriever == RetrieverSpec::Bm25)
        .unwrap();
    assert!(bm25_task1.report.mean()["ndcg@10"] > 0.9);
    // every task's qrels are there, and Task 4's orphan is counted
    assert_eq!(report.qrels.len(), 4);
    assert_eq!(report.orphans(), 1);
    let json = report.to_json();
    assert_eq!(json["reports"].as_array().unwrap().len(), report.jobs.len());
    let out = tmp.path().join("out");
    report.write_to(&out).unwrap();
    assert!(
        out.join("runs/task4.dense_tiny-clip-quickgelu__query_images__first_.trec")
            .is_file()
    );
}
