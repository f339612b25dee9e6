//! The service held to the rules the CLI keeps: the corpus it serves must be the one indexed,
//! the generation it serves stays while it runs, `eval` scores a run as `sift eval --run`
//! does (duplicates, unjudged runs), and fusion of finite scores stays finite.
use std::path::{Path, PathBuf};

use serde_json::json;
use sift_core::Corpus;
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_service::api::{EvalRequest, FuseRequest, SearchRequest};
use sift_service::{ErrorKind, ServeConfig, Service};

fn sample() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

fn build(root: &Path, corpus: &Path) {
    let corpus = Corpus::open(corpus).unwrap();
    IndexDir::build(
        root,
        &corpus,
        &["gis".to_string()],
        &BuildOptions::default(),
        &[],
        &NoProgress,
    )
    .unwrap();
}

fn bm25_service(dir: &Path) -> Service {
    let root = dir.join("index");
    build(&root, &sample());
    Service::load(&ServeConfig::new(&root)).unwrap()
}

/// `sift serve --corpus` refuses a corpus whose passages changed since indexing, as
/// `sift eval` does, instead of returning texts that were never indexed.
#[test]
fn a_changed_corpus_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    copy_dir(&sample(), &corpus);
    let root = dir.path().join("index");
    build(&root, &corpus);
    let mut config = ServeConfig::new(&root);
    config.corpus = Some(corpus.clone());
    Service::load(&config).expect("the indexed corpus is served");
    // the same domain's passages, replaced by another domain's
    std::fs::copy(
        corpus.join("documents/biology.parquet"),
        corpus.join("documents/gis.parquet"),
    )
    .unwrap();
    let err = Service::load(&config).err().expect("refused").to_string();
    assert!(
        err.contains("\"gis\"") && err.contains("indexed from other passages"),
        "not a corpus-changed error: {err}"
    );
}

/// The service leases the generation it serves: rebuilds of the same directory (each
/// removes the generations nobody holds) leave it in place, and searches keep answering.
#[test]
fn rebuilds_do_not_remove_the_generation_being_served() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("index");
    build(&root, &sample());
    let served = IndexDir::open(&root).unwrap().manifest().generation.clone();
    let service = Service::load(&ServeConfig::new(&root)).unwrap();
    let req = SearchRequest {
        query: "map projection".into(),
        top_k: 5,
        ..SearchRequest::default()
    };
    let before = service.search(&req).unwrap();
    for _ in 0..2 {
        build(&root, &sample());
    }
    let live = IndexDir::open(&root).unwrap().manifest().generation.clone();
    assert_ne!(live, served);
    assert!(
        root.join(&served).is_dir(),
        "the served generation was removed"
    );
    let after = service.search(&req).unwrap();
    assert_eq!(
        serde_json::to_value(&after.hits).unwrap(),
        serde_json::to_value(&before.hits).unwrap()
    );
    drop(service);
    // once the service is gone, the next build removes it
    build(&root, &sample());
    assert!(!root.join(&served).exists());
}

fn eval_request(body: serde_json::Value) -> EvalRequest {
    sift_service::api::parse_json(body.to_string().as_bytes()).unwrap()
}

fn eval_error(service: &Service, body: serde_json::Value) -> (ErrorKind, String, String) {
    let raw = body.to_string();
    let err = match sift_service::api::parse_json::<EvalRequest>(raw.as_bytes()) {
        Ok(req) => service.eval(&req).expect_err("refused"),
        Err(e) => e,
    };
    (err.kind, err.field.unwrap_or_default(), err.message)
}

/// `/v1/eval` and MCP's `eval_hits` score a run by `sift eval --run`'s rules: a document
/// listed twice for a query is an error (it scored recall 2.0 and nDCG 1.63), as is a query
/// listed twice (a duplicate JSON key); a judgement given twice keeps its last grade and is
/// counted; a run with no judged query is an error, unjudged queries are counted.
#[test]
fn eval_scores_runs_by_the_cli_rules() {
    let dir = tempfile::tempdir().unwrap();
    let service = bm25_service(dir.path());
    let ok = service
        .eval(&eval_request(json!({
            "run": {"q1": [{"id": "a", "score": 2.0}, {"id": "b", "score": 1.0}]},
            "qrels": {"q1": {"a": 1}},
        })))
        .unwrap();
    assert_eq!(ok.mean["recall@100"], 1.0);
    assert_eq!(ok.mean["ndcg@10"], 1.0);
    assert!(ok.warnings.is_empty());

    let (kind, field, msg) = eval_error(
        &service,
        json!({
            "run": {"q1": [{"id": "a", "score": 2.0}, {"id": "a", "score": 1.0}]},
            "qrels": {"q1": {"a": 1}},
        }),
    );
    assert_eq!(
        (kind, field.as_str()),
        (ErrorKind::InvalidRequest, "run.q1[1].id")
    );
    assert!(msg.contains("listed twice"), "{msg}");

    let raw = r#"{"run": {"q1": [{"id": "a", "score": 1.0}], "q1": [{"id": "b", "score": 1.0}]},
                  "qrels": {"q1": {"a": 1}}}"#;
    let req: EvalRequest = sift_service::api::parse_json(raw.as_bytes()).unwrap();
    let err = service.eval(&req).err().unwrap();
    assert_eq!(err.field.as_deref(), Some("run.q1"));

    let raw = r#"{"run": {"q1": [{"id": "a", "score": 1.0}], "q2": [{"id": "a", "score": 1.0}]},
                  "qrels": {"q1": {"a": 0, "a": 2}}}"#;
    let req: EvalRequest = sift_service::api::parse_json(raw.as_bytes()).unwrap();
    let res = service.eval(&req).unwrap();
    assert_eq!(res.mean["ndcg@10"], 1.0, "the last grade counts");
    assert_eq!(res.warnings["duplicate_qrel"], 1);
    assert_eq!(res.warnings["unjudged_query"], 1);
    assert_eq!(res.queries, 1);

    let (kind, field, msg) = eval_error(
        &service,
        json!({"run": {"q1": [{"id": "a", "score": 1.0}]}, "qrels": {"q9": {"a": 1}}}),
    );
    assert_eq!((kind, field.as_str()), (ErrorKind::InvalidRequest, "qrels"));
    assert!(msg.contains("nothing to score"), "{msg}");
    let (_, field, _) = eval_error(&service, json!({"run": {}, "qrels": {"q1": {"a": 1}}}));
    assert_eq!(field, "run");
    let (_, field, msg) = eval_error(
        &service,
        json!({"run": {"q1": [{"id": "a b", "score": 1.0}]}, "qrels": {"q1": {"a": 1}}}),
    );
    assert_eq!(field, "run.q1[0].id");
    assert!(msg.contains("whitespace"), "{msg}");
}

/// Weighted fusion of finite scores at the ends of the f64 range gives finite scores (it
/// gave NaN, `null` in JSON); weights whose sum overflows are refused.
#[test]
fn weighted_fusion_of_extreme_scores_stays_finite() {
    let dir = tempfile::tempdir().unwrap();
    let service = bm25_service(dir.path());
    let req: FuseRequest = sift_service::api::parse_json(
        json!({
            "lists": [
                [{"id": "a", "score": 1e308}, {"id": "b", "score": -1e308}],
                [{"id": "b", "score": 1.7976931348623157e308}, {"id": "c", "score": -1.7976931348623157e308}],
            ],
            "method": "weighted:0.5,0.5",
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let res = service.fuse(&req).unwrap();
    assert_eq!(res.hits.len(), 3);
    assert!(
        res.hits.iter().all(|h| h.score.is_finite()),
        "{:?}",
        res.hits
    );
    assert_eq!(res.hits[0].id, "b");
    let text = serde_json::to_string(&res).unwrap();
    assert!(!text.contains("null"), "{text}");
    let mut huge = req.clone();
    huge.method = "weighted:1e308,1e308".into();
    let err = service.fuse(&huge).err().unwrap();
    assert_eq!(err.field.as_deref(), Some("method"));
}
