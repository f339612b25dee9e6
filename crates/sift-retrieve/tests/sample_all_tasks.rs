//! The library alone, end to end: index the sample corpus with BM25 and the tiny CLIP
//! checkpoint, then run all four MM-BRIGHT tasks through `sift_retrieve::evaluate`.
//! (`tests/cli/` checks that `sift eval --task all` reports the same numbers.)

use sift_core::Corpus;
use sift_embed::{Embedder, EmbedderOptions};
use sift_eval::Task;
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_retrieve::{EvalConfig, ModelSet, QueryImages, RetrieverSpec, Sides, evaluate, slug};

mod common;
use common::{index_with, repo};

#[test]
fn all_four_tasks_with_bm25_and_clip() {
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let clip_dir = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let clip = Embedder::load(clip_dir.to_str().unwrap(), &EmbedderOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let sides = Sides::new(&clip, sift_retrieve::Indexed::PassagesAndImages);
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

/// Task 4 in the reference profile: Jina-CLIP's text-only pairs score as normalise(passage +
/// white image) (the reference code's stand-in); CLIP's pairs are embedded at evaluation time
/// from raw features (a white image for text-only pairs), and the report says so.
#[test]
fn reference_task4_pairs_are_embedded_as_the_reference_code_embeds_them() {
    use sift_embed::{Profile, Role};
    use sift_retrieve::{
        Candidates, DomainSearcher, PairStandIns, Query, QueryVectors, SearchSettings,
        reference_pair_stand_ins,
    };
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let options = EmbedderOptions {
        profile: Profile::Reference,
        ..Default::default()
    };
    let dir = repo().join("models/fixtures/jina_clip/tiny-jina-clip-v1");
    let jina = Embedder::load(dir.to_str().unwrap(), &options).unwrap();
    let index = IndexDir::build(
        tmp.path().join("index"),
        &corpus,
        &corpus.domains().unwrap(),
        &BuildOptions {
            threads: 2,
            ..Default::default()
        },
        &[Sides::new(&jina, sift_retrieve::Indexed::PassagesAndImages)
            .dense_build(slug(&jina), dir.display().to_string())],
        &NoProgress,
    )
    .unwrap();
    let dense: RetrieverSpec = "dense:tiny-jina-clip-v1".parse().unwrap();
    let mut models = ModelSet::new();
    models.load_for(&index, &dense, &options, None).unwrap();
    let stand_ins = reference_pair_stand_ins(&models, &dense).unwrap();
    let white = stand_ins["tiny-jina-clip-v1"].clone();

    let domain = "gis";
    let searcher = DomainSearcher::open(&index, domain, &dense, &models, true).unwrap();
    let passages: Vec<sift_core::Passage> = corpus
        .passages(domain)
        .unwrap()
        .collect::<sift_core::Result<_>>()
        .unwrap();
    let images: Vec<String> = corpus
        .image_paths(domain)
        .unwrap()
        .map(|r| r.map(|r| r.path))
        .collect::<sift_core::Result<_>>()
        .unwrap();
    let pairs = sift_eval::Pairs {
        pairs: (0..passages.len() as u32).map(|p| (p, None)).collect(),
    };
    let q = jina
        .embed_texts(&["map projection distortion"], Role::Query)
        .unwrap()
        .pop()
        .unwrap();
    let mut vectors = QueryVectors::default();
    vectors.insert("tiny-jina-clip-v1", vec![q.clone()]);
    let query = Query {
        index: 0,
        text: "map projection distortion",
        vectors: &vectors,
        bm25: None,
    };
    let settings = SearchSettings::default();
    let rank = |stand_ins: &PairStandIns| {
        let no_vectors = sift_retrieve::PairVectors::new();
        let candidates = Candidates::Pairs {
            pairs: &pairs,
            images: &images,
            stand_ins,
            vectors: &no_vectors,
        };
        let mut scratch = searcher.scratch();
        searcher
            .search(&dense, &candidates, &query, &[], &settings, &mut scratch)
            .unwrap()
    };
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let with = rank(&stand_ins);
    let without = rank(&PairStandIns::new());
    assert_eq!(with.len(), passages.len());
    for (entry, plain) in with.iter().zip(&without) {
        let pid = entry.doc.split("|||").next().unwrap();
        let p = passages.iter().find(|p| p.id == pid).unwrap();
        let t = jina
            .embed_texts(&[&p.text], Role::Passage)
            .unwrap()
            .pop()
            .unwrap();
        let pair: Vec<f32> = sift_retrieve::normalized_sum(&t, &white);
        assert!(
            (entry.score - dot(&q, &pair) as f64).abs() < 1e-4,
            "{}",
            entry.doc
        );
        let pp = passages
            .iter()
            .find(|x| x.id == plain.doc.split("|||").next().unwrap())
            .unwrap();
        let tp = jina.embed_texts(&[&pp.text], Role::Passage).unwrap();
        assert!((plain.score - dot(&q, &tp[0]) as f64).abs() < 1e-4);
    }

    // CLIP: pairs embedded from raw features, a white image for text-only pairs
    let clip_dir = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let clip = Embedder::load(clip_dir.to_str().unwrap(), &options).unwrap();
    let index = IndexDir::build(
        tmp.path().join("clip"),
        &corpus,
        &corpus.domains().unwrap(),
        &BuildOptions::default(),
        &[Sides::new(&clip, sift_retrieve::Indexed::PassagesAndImages)
            .dense_build(slug(&clip), clip_dir.display().to_string())],
        &NoProgress,
    )
    .unwrap();
    let dense: RetrieverSpec = "dense:tiny-clip-quickgelu".parse().unwrap();
    let mut models = ModelSet::new();
    models.load_for(&index, &dense, &options, None).unwrap();
    let searcher = DomainSearcher::open(&index, domain, &dense, &models, true).unwrap();
    let texts = sift_retrieve::passage_texts(&corpus, domain, searcher.passage_ids()).unwrap();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // every passage without an image, and the first passage with each image
    let mut pair_list: Vec<(u32, Option<u32>)> =
        (0..refs.len() as u32).map(|p| (p, None)).collect();
    pair_list.extend((0..images.len() as u32).map(|i| (0, Some(i))));
    let pairs = sift_eval::Pairs { pairs: pair_list };
    let mut warnings = sift_core::Warnings::new();
    let clip_model = models.get("tiny-clip-quickgelu").unwrap();
    let pv = sift_retrieve::reference_pair_vectors(
        clip_model,
        &corpus,
        domain,
        &pairs,
        &refs,
        &images,
        &mut warnings,
    )
    .unwrap();
    let white = clip_model.blank_image().unwrap();
    for (i, &(p, img)) in pairs.pairs.iter().enumerate() {
        let got = pv[i].as_ref().expect("CLIP embeds every pair");
        let want = match img {
            None => clip_model
                .embed_features_summed(
                    &[sift_embed::JointInput {
                        text: Some(refs[p as usize]),
                        images: &[&white],
                    }],
                    Role::Passage,
                )
                .unwrap(),
            Some(im) => {
                let bytes: Vec<u8> = corpus
                    .images(domain)
                    .unwrap()
                    .map(|r| r.unwrap())
                    .find(|r| r.path == images[im as usize])
                    .unwrap()
                    .bytes;
                let prepared = clip_model.prepare_images(&[&bytes]).pop().unwrap().unwrap();
                clip_model
                    .embed_features_summed(
                        &[sift_embed::JointInput {
                            text: Some(refs[p as usize]),
                            images: &[&prepared],
                        }],
                        Role::Passage,
                    )
                    .unwrap()
            }
        };
        assert!(dot(got, &want[0]) > 0.99999, "pair {i}");
    }
    // the searcher scores pairs by those vectors
    let q = clip_model
        .embed_texts(&["map projection distortion"], Role::Query)
        .unwrap()
        .pop()
        .unwrap();
    let mut vectors = QueryVectors::default();
    vectors.insert("tiny-clip-quickgelu", vec![q.clone()]);
    let query = Query {
        index: 0,
        text: "map projection distortion",
        vectors: &vectors,
        bm25: None,
    };
    let pair_vectors: sift_retrieve::PairVectors =
        [("tiny-clip-quickgelu".to_string(), pv.clone())].into();
    let no_stand_ins = PairStandIns::new();
    let candidates = Candidates::Pairs {
        pairs: &pairs,
        images: &images,
        stand_ins: &no_stand_ins,
        vectors: &pair_vectors,
    };
    let mut scratch = searcher.scratch();
    let hits = searcher
        .search(&dense, &candidates, &query, &[], &settings, &mut scratch)
        .unwrap();
    assert_eq!(hits.len(), pairs.pairs.len());
    let best = pv
        .iter()
        .map(|v| dot(&q, v.as_ref().unwrap()))
        .fold(f32::MIN, f32::max);
    assert!((hits[0].score - best as f64).abs() < 1e-5);
    // and evaluation does it by itself, saying so
    let config = EvalConfig {
        tasks: vec![Task::Pairs],
        retrievers: vec![dense],
        query_images: vec![QueryImages::Reference],
        ..Default::default()
    };
    let report = evaluate(&corpus, &index, &models, &config, &NoProgress).unwrap();
    let rules = &report.reference_rules;
    assert!(
        rules.iter().any(|r| r.task == 4
            && r.retriever == "dense:tiny-clip-quickgelu"
            && r.rules
                .iter()
                .any(|x| x.contains("raw text + image features"))),
        "{rules:?}"
    );
    assert!(report.to_markdown().contains("rules in force"));
}

/// Task 3 as the released code runs it for Nomic and Jina-CLIP (`--profile reference`):
/// every corpus image is the white image (task3_image.py:496-500, 586-590), so every
/// candidate of a query has the same score, its dot product with the white image's vector,
/// and the run lists them as trec_eval orders ties: image id descending. With
/// `reference-intended` the images are the index's own and the scores differ.
#[test]
fn reference_task3_ranks_every_corpus_image_of_nomic_and_jina_as_the_white_image() {
    use sift_embed::Profile;
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    for model in [
        "jina_clip/tiny-jina-clip-v1",
        "nomic/tiny-nomic-embed-vision-v1.5",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (index, models, dense) = index_with(model, Profile::Reference, &tmp.path().join("i"));
        let config = EvalConfig {
            tasks: vec![Task::Images],
            retrievers: vec![dense.clone()],
            query_images: vec![QueryImages::Reference],
            profile: Profile::Reference,
            runs: sift_retrieve::RunOutput {
                memory: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let report = evaluate(&corpus, &index, &models, &config, &NoProgress).unwrap();
        let job = &report.jobs[0];
        assert!(!job.run.is_empty());
        for (qid, hits) in &job.run {
            assert!(hits.len() > 1, "{model} {qid}");
            assert!(
                hits.iter().all(|h| h.score == hits[0].score),
                "{model} {qid}: all tie"
            );
            assert!(
                hits.windows(2).all(|w| w[0].doc > w[1].doc),
                "{model} {qid}: id descending"
            );
        }
        assert!(
            report.reference_rules.iter().any(|r| r.task == 3
                && r.rules
                    .iter()
                    .any(|x| x.contains("every corpus image is the white image"))),
            "{model}: {:?}",
            report.reference_rules
        );
        // reference-intended: the same index, real images
        let mut intended = ModelSet::new();
        let options = EmbedderOptions {
            profile: Profile::ReferenceIntended,
            ..Default::default()
        };
        intended.load_for(&index, &dense, &options, None).unwrap();
        let config = EvalConfig {
            profile: Profile::ReferenceIntended,
            ..config
        };
        let report = evaluate(&corpus, &index, &intended, &config, &NoProgress).unwrap();
        let spread = report.jobs[0]
            .run
            .values()
            .filter(|hits| hits.iter().any(|h| h.score != hits[0].score))
            .count();
        assert!(spread > 0, "{model}: real images score apart");
    }
}

/// Task 4 pairs of BGE-VL and GME as the released code embeds them: every pair with an
/// image gets the blank 224 x 224 image instead (safe_rgb_path / safe_img_path receive PIL
/// images, whose str() names no file: task4_pair.py:663-670, 716; 895-907, 953), so all the
/// image pairs of a passage have one vector, the pair text with the blank image. With
/// `reference-intended`, each pair's own image.
#[test]
fn reference_task4_pairs_of_bge_vl_and_gme_embed_the_blank_image() {
    use sift_embed::{JointInput, Profile, Role};
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let domain = "gis";
    for model in ["bge_vl/tiny-bge-vl", "gme/tiny-gme"] {
        let tmp = tempfile::tempdir().unwrap();
        let (index, models, dense) = index_with(model, Profile::Reference, &tmp.path().join("i"));
        let name = dense.dense_names()[0].to_string();
        let e = models.get(&name).unwrap();
        let searcher =
            sift_retrieve::DomainSearcher::open(&index, domain, &dense, &models, true).unwrap();
        let texts = sift_retrieve::passage_texts(&corpus, domain, searcher.passage_ids()).unwrap();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let images: Vec<String> = corpus
            .image_paths(domain)
            .unwrap()
            .map(|r| r.unwrap().path)
            .collect();
        let pairs = sift_eval::Pairs::build(domain, searcher.passage_ids(), &images);
        assert!(pairs.pairs.iter().any(|p| p.1.is_some()));
        let mut w = sift_core::Warnings::new();
        let pv = sift_retrieve::reference_pair_vectors(
            e, &corpus, domain, &pairs, &refs, &images, &mut w,
        )
        .unwrap();
        let blank = e.blank_image().unwrap();
        let cut = |t: &str| {
            e.reference_text(t, sift_embed::profile::BgeVlCut::Task4Document)
                .unwrap()
        };
        for (i, &(p, img)) in pairs.pairs.iter().enumerate() {
            match img {
                None => assert!(pv[i].is_none(), "{model}: a text-only pair is its passage"),
                Some(_) => {
                    let text = cut(refs[p as usize]);
                    let input = [JointInput {
                        text: Some(&text),
                        images: &[&blank],
                    }];
                    let want = e.embed_joint(&input, Role::Passage).unwrap();
                    let got = pv[i].as_ref().unwrap();
                    let cos: f32 = got.iter().zip(&want[0]).map(|(a, b)| a * b).sum();
                    assert!(cos > 0.99999, "{model} pair {i}: {cos}");
                }
            }
        }
        // reference-intended: the pair's own image
        let options = EmbedderOptions {
            profile: Profile::ReferenceIntended,
            ..Default::default()
        };
        let mut intended = ModelSet::new();
        intended.load_for(&index, &dense, &options, None).unwrap();
        let ei = intended.get(&name).unwrap();
        let pi = sift_retrieve::reference_pair_vectors(
            ei, &corpus, domain, &pairs, &refs, &images, &mut w,
        )
        .unwrap();
        let differ = pairs
            .pairs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.1.is_some())
            .filter(|(i, _)| {
                let (a, b) = (pv[*i].as_ref().unwrap(), pi[*i].as_ref().unwrap());
                a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() < 0.9999
            })
            .count();
        assert!(differ > 0, "{model}: real images give other vectors");
    }
}

/// The released data loader drops corpus images that do not decode (src/data.py:164-168),
/// so they have no Task 4 pair, for any retriever: the sample's broken PNG
/// (physics/physics_95c2e7d1_0002/image_1.png) is a pair in the default profile, not in the
/// reference ones, which count it.
#[test]
fn reference_profiles_give_undecodable_corpus_images_no_task4_pair() {
    use sift_embed::Profile;
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let index = IndexDir::build(
        tmp.path().join("index"),
        &corpus,
        &["physics".to_string()],
        &BuildOptions::default(),
        &[],
        &NoProgress,
    )
    .unwrap();
    let broken = "physics/physics_95c2e7d1_0002/image_1.png";
    let run = |profile: Profile| {
        let config = EvalConfig {
            tasks: vec![Task::Pairs],
            retrievers: vec![RetrieverSpec::Bm25],
            profile,
            runs: sift_retrieve::RunOutput {
                memory: true,
                ..Default::default()
            },
            ..Default::default()
        };
        evaluate(&corpus, &index, &ModelSet::new(), &config, &NoProgress).unwrap()
    };
    let has_broken = |r: &sift_retrieve::EvalReport| {
        r.jobs[0]
            .run
            .values()
            .flatten()
            .any(|h| h.doc.ends_with(broken))
    };
    let default = run(Profile::Default);
    assert!(has_broken(&default));
    for profile in [Profile::Reference, Profile::ReferenceIntended] {
        let r = run(profile);
        assert!(!has_broken(&r), "{profile:?}");
        assert!(r.warnings.count(sift_core::WarningKind::UndecodableImage) >= 1);
        assert_eq!(
            r.links["physics"].images + 1,
            default.links["physics"].images,
            "{profile:?}"
        );
    }
}
