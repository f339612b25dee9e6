//! Tasks 1-4 on the sample corpus build exactly the qrels and exclusions of the independent
//! reference script `eval/reference/mmbright_qrels.py` (written from the protocol text alone):
//!
//! ```sh
//! python3 eval/reference/mmbright_qrels.py corpora/sample eval/reference/sample_qrels
//! ```
use std::path::{Path, PathBuf};

use sift_core::{Corpus, Qrels, Warnings};
use sift_eval::{Exclusions, Protocol, TaskData, read_exclusions, read_qrels};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reference(name: &str) -> (Qrels, Exclusions) {
    let dir = root().join("eval/reference/sample_qrels");
    let mut w = Warnings::new();
    let q = read_qrels(&dir.join(format!("{name}.qrels")), &mut w).unwrap();
    let x = read_exclusions(&dir.join(format!("{name}.exclusions"))).unwrap();
    (q, x)
}

fn ids(corpus: &Corpus, domain: &str) -> (Vec<String>, Vec<String>) {
    let passages = corpus
        .passages(domain)
        .unwrap()
        .map(|p| p.unwrap().id)
        .collect();
    let images = corpus
        .images(domain)
        .unwrap()
        .map(|r| r.unwrap().path)
        .collect();
    (passages, images)
}

fn check(name: &str, build: impl Fn(&Corpus, &str) -> TaskData) {
    let corpus = Corpus::open(root().join("corpora/sample")).unwrap();
    let (mut qrels, mut exclusions) = (Qrels::new(), Exclusions::new());
    for domain in corpus.domains().unwrap() {
        let t = build(&corpus, &domain);
        qrels.extend(t.qrels);
        exclusions.extend(t.exclusions);
    }
    let (want_q, want_x) = reference(name);
    assert!(!want_q.is_empty());
    assert_eq!(qrels, want_q, "{name} qrels");
    assert_eq!(exclusions, want_x, "{name} exclusions");
}

#[test]
fn task1_and_task2_match_the_reference_script() {
    check("task1", |c, d| sift_eval::task1(c, d, "test").unwrap());
    check("task2", |c, d| sift_eval::task2(c, d).unwrap());
}

#[test]
fn task3_matches_the_reference_script() {
    check("task3", |c, d| sift_eval::task3(c, d).unwrap());
}

#[test]
fn task4_paper_and_legacy_match_the_reference_script() {
    for (name, protocol) in [
        ("task4.paper", Protocol::Paper),
        ("task4.legacy", Protocol::Legacy),
    ] {
        check(name, |c, d| {
            let (p, i) = ids(c, d);
            let links = sift_eval::Links::new(sift_eval::PairLink::Regex, d, &p, &i, &[]);
            sift_eval::task4(c, d, &p, &i, &links, protocol).unwrap()
        });
    }
}

#[test]
fn task4_counts_the_orphan_positive_image() {
    let corpus = Corpus::open(root().join("corpora/sample")).unwrap();
    let (p, i) = ids(&corpus, "gis");
    let links = sift_eval::Links::new(sift_eval::PairLink::Regex, "gis", &p, &i, &[]);
    let t = sift_eval::task4(&corpus, "gis", &p, &i, &links, Protocol::Paper).unwrap();
    let orphans = t
        .warnings
        .counts()
        .find(|(k, _)| *k == sift_core::WarningKind::OrphanPositiveImage)
        .map(|(_, n)| n);
    assert_eq!(orphans, Some(1));
}

#[test]
fn task4_candidate_pairs_follow_base_keys() {
    let passages = ["gis/1f3a9c2e_0.txt", "gis/6b8d2f14_1.txt"];
    let images = [
        "gis/gis_1f3a9c2e_0001/image_1.png",
        "gis/gis_ffff0000_0001/image_1.png",
        "gis/gis_1f3a9c2e_0002/image_2.png",
    ];
    let pairs = sift_eval::Pairs::build("gis", &passages, &images);
    assert_eq!(
        pairs.pairs,
        vec![(0, None), (0, Some(0)), (0, Some(2)), (1, None)]
    );
}

#[test]
fn pairs_find_locates_every_candidate_and_nothing_else() {
    let passages = ["gis/aa_1.txt", "gis/bb_1.txt", "gis/aa_2.txt", "gis/cc.txt"];
    let images = [
        "gis/gis_aa_1/i.png",
        "gis/gis_bb_1/i.png",
        "gis/gis_aa_2/j.png",
    ];
    let pairs = sift_eval::Pairs::build("gis", &passages, &images);
    for (i, &(p, img)) in pairs.pairs.iter().enumerate() {
        assert_eq!(pairs.find(p, img), Some(i as u32));
    }
    assert_eq!(pairs.find(1, Some(0)), None);
    assert_eq!(pairs.find(3, Some(0)), None);
    assert_eq!(pairs.find(9, None), None);
}
