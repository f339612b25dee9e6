//! `--profile reference` against MM-BRIGHT's released code itself: its runner, data loader and
//! retrievers, run on the sample corpus with the same tiny checkpoints by
//! `eval/reference/released_code/run_released.py` (which records every query's scores in
//! `scores.json` beside it; see that script for what it replaces to run here). For every
//! model it ran (CLIP, SigLIP, Nomic, BGE-VL, Jina-CLIP) and Tasks 2-4, Sift's evaluation
//! under `--profile reference` must retrieve the same candidates with the same scores (the
//! reference's are x100 cosines).
use std::collections::BTreeMap;

use sift_core::Corpus;
use sift_embed::Profile;
use sift_eval::{Protocol, Task};
use sift_index::NoProgress;
use sift_retrieve::{EvalConfig, QueryImages, RunOutput, evaluate};

mod common;
use common::{index_with, repo};

type Scores = BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>;

fn released() -> BTreeMap<String, BTreeMap<String, Scores>> {
    let path = repo().join("eval/reference/released_code/scores.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The queries whose first image is a JPEG.
fn jpeg_queries(corpus: &Corpus) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for d in corpus.domains().unwrap() {
        let mut w = sift_core::Warnings::new();
        for q in corpus.examples(&d, true, &mut w).unwrap() {
            if q.image_paths
                .first()
                .is_some_and(|p| p.ends_with(".jpg") || p.ends_with(".jpeg"))
            {
                out.insert(q.id);
            }
        }
    }
    out
}

/// Scores are the released code's x100 cosines: within 2e-4 of them (2e-6 as cosines), or
/// 0.5 (5e-3) where a JPEG is involved.
fn check(model_key: &str, fixture: &str) {
    compare(model_key, fixture, Profile::Reference, true);
}

/// Sift's scores under `profile` against the released code's; with `strict`, asserts the
/// bounds, else returns the largest difference of every task away from JPEGs.
fn compare(
    model_key: &str,
    fixture: &str,
    profile: Profile,
    strict: bool,
) -> BTreeMap<String, f64> {
    let (bound, jpeg_bound) = (2e-4, 0.5);
    let mut worst_by_task = BTreeMap::new();
    let reference = released();
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (index, models, dense) = index_with(fixture, profile, &tmp.path().join("index"));
    let config = EvalConfig {
        tasks: vec![Task::MultimodalPassages, Task::Images, Task::Pairs],
        retrievers: vec![dense],
        query_images: vec![QueryImages::Reference],
        protocol: Protocol::Legacy,
        profile,
        runs: RunOutput {
            memory: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let report = evaluate(&corpus, &index, &models, &config, &NoProgress).unwrap();
    let query_jpeg = jpeg_queries(&corpus);
    let mut worst = 0f64;
    let mut compared = 0usize;
    for job in &report.jobs {
        let task = format!("task{}", job.task.number());
        let theirs = &reference[&task][model_key];
        for (qid, hits) in &job.run {
            let domain = qid.split('-').next().unwrap();
            let want = &theirs[domain][qid];
            let got: BTreeMap<&str, f64> = hits
                .iter()
                .map(|h| (h.doc.as_str(), h.score * 100.0))
                .collect();
            if !strict {
                for (doc, s) in &got {
                    if ![".jpg", ".jpeg"].iter().any(|e| doc.ends_with(e))
                        && !query_jpeg.contains(qid.as_str())
                    {
                        let w = worst_by_task.entry(task.clone()).or_insert(0f64);
                        *w = w.max((s - want[*doc]).abs());
                    }
                }
                continue;
            }
            assert_eq!(
                got.keys().copied().collect::<Vec<_>>(),
                want.keys().map(String::as_str).collect::<Vec<_>>(),
                "{model_key} {task} {qid}: the candidates"
            );
            for (doc, s) in &got {
                let d = (s - want[*doc]).abs();
                worst = worst.max(d);
                compared += 1;
                // JPEG decoders differ by a few levels (zune-jpeg vs libjpeg-turbo), which
                // the tiny random towers amplify; every other input matches to rounding
                let jpeg = [".jpg", ".jpeg"].iter().any(|e| doc.ends_with(e))
                    || query_jpeg.contains(qid.as_str());
                let bound = if jpeg { jpeg_bound } else { bound };
                assert!(
                    d <= bound,
                    "{model_key} {task} {qid} {doc}: Sift {s:.5}, released code {:.5}",
                    want[*doc]
                );
            }
        }
    }
    if strict {
        assert!(compared > 900, "{model_key}: {compared}");
        eprintln!("{model_key}: {compared} scores, largest difference {worst:.2e} (x100 cosine)");
    }
    worst_by_task
}

/// The comparison sees the rules: `reference-intended` (real images where the released
/// code falls back to white or blank ones) departs from the released code's scores exactly
/// where those accidents are, Task 3 for Nomic and Jina-CLIP and Task 4 for BGE-VL, and
/// nowhere else.
#[test]
fn the_intended_profile_departs_from_the_released_code_where_its_accidents_are() {
    for (key, fixture, task) in [
        (
            "nomic-vision",
            "nomic/tiny-nomic-embed-vision-v1.5",
            "task3",
        ),
        ("jina-clip", "jina_clip/tiny-jina-clip-v1", "task3"),
        ("bge-vl-large", "bge_vl/tiny-bge-vl", "task4"),
    ] {
        let worst = compare(key, fixture, Profile::ReferenceIntended, false);
        for (t, w) in &worst {
            if t == task {
                assert!(*w > 1.0, "{key} {t}: {w}");
            } else {
                assert!(*w < 2e-4, "{key} {t}: {w}");
            }
        }
    }
}

#[test]
fn clip_equals_the_released_code() {
    check("clip", "vision/tiny-clip-quickgelu");
}

#[test]
fn siglip_equals_the_released_code() {
    check("siglip", "vision/tiny-siglip");
}

#[test]
fn nomic_equals_the_released_code() {
    check("nomic-vision", "nomic/tiny-nomic-embed-vision-v1.5");
}

#[test]
fn bge_vl_equals_the_released_code() {
    check("bge-vl-large", "bge_vl/tiny-bge-vl");
}

#[test]
fn jina_clip_equals_the_released_code() {
    check("jina-clip", "jina_clip/tiny-jina-clip-v1");
}
