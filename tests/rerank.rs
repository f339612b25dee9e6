//! Reranking end to end on the sample corpus (`sift eval --rerank`): all four tasks, a BM25
//! and a CLIP first stage, a cross-encoder (tiny random BERT, `models/fixtures/cross_encoder`)
//! and a pointwise yes/no VLM (the tiny Qwen2-VL-Instruct). The numbers only show the
//! pipeline (random models); the test checks what reranking must keep: each reranked run
//! holds the same documents as its first stage, its top `depth` a permutation of the first
//! stage's and the rest in their first-stage order.
mod common;

use common::{ok, ranked_run as read_run, repo, s, sample};
use serde_json::Value;

/// In `dir`: the sample corpus indexed with BM25 and the tiny CLIP (`index`), and the tiny
/// Qwen2-VL-Instruct checkpoint (`tiny-qwen2-vl`).
fn clip_index_and_vlm(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (index, vlm) = (dir.join("index"), dir.join("tiny-qwen2-vl"));
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    common::tiny_qwen2_vl_instruct(&vlm);
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "-q",
    ]);
    (index, vlm)
}

/// Checks every reranked run in `runs` against its first-stage run: the same queries and
/// documents, each query's top `depth` a permutation of the first stage's and the rest in
/// first-stage order. Returns the reranked runs checked and the queries whose top changed.
fn check_reranked_runs(runs: &std::path::Path, depth: usize) -> (usize, usize) {
    let (mut checked, mut changed) = (0, 0);
    for f in std::fs::read_dir(runs).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        let Some(pos) = name.find("_-__rerank_") else {
            continue;
        };
        let base = runs.join(format!("{}.trec", &name[..pos]));
        assert!(base.is_file(), "no first-stage run {base:?} for {name}");
        let (first, reranked) = (read_run(&base), read_run(&runs.join(&name)));
        assert_eq!(
            first.keys().collect::<Vec<_>>(),
            reranked.keys().collect::<Vec<_>>()
        );
        for (q, a) in &first {
            let b = &reranked[q];
            assert_eq!(a.len(), b.len(), "{name} {q}");
            let k = a.len().min(depth);
            let (mut ta, mut tb) = (a[..k].to_vec(), b[..k].to_vec());
            if ta != tb {
                changed += 1;
            }
            ta.sort();
            tb.sort();
            assert_eq!(ta, tb, "{name} {q}: the top {depth} are not a permutation");
            assert_eq!(
                a[k..],
                b[k..],
                "{name} {q}: below the depth the order changed"
            );
        }
        checked += 1;
    }
    (checked, changed)
}

#[test]
fn every_task_reranks_with_a_cross_encoder_and_a_pointwise_vlm() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eval");
    let corpus = sample();
    let ce = repo().join("models/fixtures/cross_encoder/tiny-bert-ce");
    let (index, vlm) = clip_index_and_vlm(tmp.path());
    let pointwise = format!("pointwise:{}", s(&vlm));
    let report: Value = serde_json::from_str(&ok(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "bm25",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--rerank",
        s(&ce),
        "--rerank",
        &pointwise,
        "--rerank-depth",
        "5",
        "--domains",
        "biology",
        "--out",
        s(&out),
        "--json",
        "--quiet",
    ]))
    .unwrap();
    let reports = report["reports"].as_array().unwrap();
    let labels: Vec<(u64, &str)> = reports
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap()[..1].parse().unwrap(),
                r["label"].as_str().unwrap(),
            )
        })
        .collect();
    for task in [1, 2, 4] {
        for first in ["bm25", "dense:tiny-clip-quickgelu"] {
            for tail in [
                "",
                " -> rerank:tiny-bert-ce",
                " -> rerank:pointwise:tiny-qwen2-vl",
            ] {
                let found = labels.iter().any(|(t, l)| {
                    *t == task
                        && l.starts_with(first)
                        && if tail.is_empty() {
                            !l.contains(" -> rerank:")
                        } else {
                            l.ends_with(tail)
                        }
                });
                assert!(found, "task {task}: no {first}{tail} in {labels:?}");
            }
        }
    }
    // Task 3: the CLIP first stage and the VLM only (a text cross-encoder cannot rank images)
    let t3: Vec<&str> = labels
        .iter()
        .filter(|(t, _)| *t == 3)
        .map(|x| x.1)
        .collect();
    assert!(
        t3.iter()
            .any(|l| l.ends_with(" -> rerank:pointwise:tiny-qwen2-vl")),
        "{t3:?}"
    );
    assert!(!t3.iter().any(|l| l.contains("tiny-bert-ce")), "{t3:?}");
    let na = report["not_applicable"].to_string();
    assert!(
        na.contains("task 3: rerank:tiny-bert-ce cannot rank images"),
        "{na}"
    );
    // every reranked run: same documents, top 5 permuted, the rest in first-stage order
    let (checked, changed) = check_reranked_runs(&out.join("runs"), 5);
    assert!(checked >= 8, "{checked} reranked runs");
    assert!(changed > 0, "no reranker changed any order");
}

#[test]
fn sift_search_reranks_its_hits_with_the_corpus_texts() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let corpus = sample();
    let ce = repo().join("models/fixtures/cross_encoder/tiny-bert-ce");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let search = |extra: &[&str]| -> Value {
        let mut args = vec![
            "search",
            "--index",
            s(&index),
            "--domain",
            "biology",
            "--query",
            "how do plants make sugar",
            "--top-k",
            "8",
            "--json",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args)).unwrap()
    };
    let ids = |v: &Value| -> Vec<String> {
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_string())
            .collect()
    };
    let plain = search(&[]);
    let reranked = search(&[
        "--rerank",
        s(&ce),
        "--rerank-depth",
        "8",
        "--corpus",
        s(&corpus),
    ]);
    let (mut a, mut b) = (ids(&plain), ids(&reranked));
    assert!(a.len() >= 4, "{a:?}");
    assert_ne!(a, b, "the cross-encoder kept BM25's order");
    a.sort();
    b.sort();
    assert_eq!(a, b, "reranking the top 8 changed the set");
    // the scores are the cross-encoder's (the fixture's logits are a few units, not BM25's)
    let scores: Vec<f64> = reranked["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    // without the corpus there are no texts to read
    let err = common::fails(&[
        "search",
        "--index",
        s(&index),
        "--domain",
        "biology",
        "--query",
        "sugar",
        "--rerank",
        s(&ce),
    ]);
    assert!(err.contains("give --corpus"), "{err}");
}

#[test]
fn a_pointwise_prompt_and_answer_words_of_the_users_rerank_corpus_images() {
    // MonoQwen2-VL's prompt: the candidate image, then the question; True / False
    let tmp = tempfile::tempdir().unwrap();
    let corpus = sample();
    let (index, vlm) = clip_index_and_vlm(tmp.path());
    let prompt = tmp.path().join("mono.txt");
    std::fs::write(
        &prompt,
        "<candidate_image>Assert the relevance of the previous image document to the following \
         query, answer True or False. The query is: {query}",
    )
    .unwrap();
    let pointwise = format!("pointwise:{}", s(&vlm));
    let run = |extra: &[&str]| -> Value {
        let mut args = vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--task",
            "3",
            "--retriever",
            "dense:tiny-clip-quickgelu",
            "--rerank",
            &pointwise,
            "--rerank-depth",
            "4",
            "--domains",
            "biology",
            "--json",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args)).unwrap()
    };
    let mono = run(&[
        "--rerank-prompt",
        s(&prompt),
        "--rerank-answers",
        "True,False",
    ]);
    let plain = run(&[]);
    let row = |v: &Value| v["reports"][1]["metrics"].to_string();
    assert!(
        mono["reports"][1]["label"]
            .as_str()
            .unwrap()
            .ends_with("rerank:pointwise:tiny-qwen2-vl"),
        "{mono}"
    );
    assert_ne!(row(&mono), row(&plain), "the prompt made no difference");
    let bad = common::fails(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--task",
        "3",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--rerank",
        &pointwise,
        "--rerank-answers",
        "True",
    ]);
    assert!(bad.contains("give YES,NO"), "{bad}");
}

#[test]
fn every_task_reranks_with_a_models_own_relevance_head() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eval");
    let (index, _) = clip_index_and_vlm(tmp.path());
    let head = tmp.path().join("tiny-jina-m0");
    common::tiny_jina_reranker_m0(&head);
    let report: Value = serde_json::from_str(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--rerank",
        s(&head),
        "--rerank-depth",
        "5",
        "--domains",
        "biology",
        "--out",
        s(&out),
        "--json",
        "--quiet",
    ]))
    .unwrap();
    let labels: Vec<String> = report["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                &r["task"].as_str().unwrap()[..1],
                r["label"].as_str().unwrap()
            )
        })
        .collect();
    for task in 1..=4 {
        let found = labels.iter().any(|l| {
            l.starts_with(&format!("{task} dense:tiny-clip-quickgelu"))
                && l.ends_with(" -> rerank:score-head:tiny-jina-m0")
        });
        assert!(found, "task {task}: no score-head row in {labels:?}");
    }
    let (checked, changed) = check_reranked_runs(&out.join("runs"), 5);
    assert!(checked >= 4, "{checked} reranked runs");
    assert!(changed > 0, "the head changed no order");
}

/// `sift rerank --pairs`: the raw scores of given pairs equal sentence-transformers'
/// `CrossEncoder.predict` (`models/fixtures/cross_encoder/expected.json`, at each model's own
/// length: a BERT checkpoint with the legacy Identity activation and an XLM-RoBERTa one
/// saved by sentence-transformers 6.3, sigmoid), in the file's order, queries interleaved.
#[test]
fn sift_rerank_scores_pairs_as_cross_encoder_predict() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("models/fixtures/cross_encoder/expected.json"))
            .unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, m) in expected["models"].as_object().unwrap() {
        let pairs = m["pairs"].as_array().unwrap();
        // interleave the queries: scores must come back in the file's order
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        order.sort_by_key(|&i| (i % 2, i));
        let path = dir.path().join(format!("{name}.jsonl"));
        let lines: String = order
            .iter()
            .map(|&i| {
                let p = &pairs[i];
                format!(
                    "{}\n",
                    serde_json::json!({"query": p["query"], "passage": p["passage"]})
                )
            })
            .collect();
        std::fs::write(&path, lines).unwrap();
        let model = repo().join(m["dir"].as_str().unwrap());
        let out = common::json(&ok(&[
            "rerank",
            "--model",
            s(&model),
            "--pairs",
            s(&path),
            "--json",
        ]));
        assert_eq!(out["model"], name.as_str());
        let got = out["scores"].as_array().unwrap();
        assert_eq!(got.len(), pairs.len());
        for (g, &i) in got.iter().zip(&order) {
            let want = pairs[i]["default_max_length"]["score"].as_f64().unwrap();
            let g = g.as_f64().unwrap();
            assert!((g - want).abs() < 1e-5, "{name} pair {i}: {g} vs {want}");
        }
    }
    // a line that is not a pair is named
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"query\": \"q\", \"passage\": \"p\"}\n{\"query\": \"q\"}\n",
    )
    .unwrap();
    let err = common::fails(&[
        "rerank",
        "--model",
        s(&repo().join("models/fixtures/cross_encoder/tiny-bert-ce")),
        "--pairs",
        s(&bad),
    ]);
    assert!(err.contains("bad.jsonl: line 2"), "{err}");
}

#[test]
fn the_rerank_route_and_sift_rerank_give_one_reranker_the_same_scores() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("models/fixtures/cross_encoder/expected.json"))
            .unwrap(),
    )
    .unwrap();
    let m = &expected["models"]["tiny-bert-ce"];
    let model = repo().join(m["dir"].as_str().unwrap());
    // a service with a reranker and no index
    let server = common::serve::Server::start_with(&["--rerank", s(&model), "--quiet"]);
    let pairs = m["pairs"].as_array().unwrap();
    // the query with the most pairs (the fixture's scores are sentence-transformers')
    let of = |q: &Value| pairs.iter().filter(|p| p["query"] == *q).count();
    let query = pairs
        .iter()
        .map(|p| &p["query"])
        .max_by_key(|q| of(q))
        .unwrap();
    let query = query.as_str().unwrap();
    let mine: Vec<&Value> = pairs.iter().filter(|p| p["query"] == query).collect();
    assert!(mine.len() >= 2);
    let documents: Vec<&Value> = mine.iter().map(|p| &p["passage"]).collect();
    let (status, res) = common::serve::post(
        &server.url("/v1/rerank"),
        &serde_json::json!({"query": query, "documents": documents, "return_documents": true}),
    );
    assert_eq!(status, 200, "{res}");
    let results = res["results"].as_array().unwrap();
    assert_eq!(results.len(), mine.len());
    let mut last = f64::INFINITY;
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        let got = r["relevance_score"].as_f64().unwrap();
        let want = mine[i]["default_max_length"]["score"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-5, "document {i}: {got} vs {want}");
        assert!(got <= last, "best first: {res}");
        last = got;
        assert_eq!(r["document"], *documents[i]);
    }
    // top_n, the model's name, and the document at fault named
    let name = res["model"].as_str().unwrap().to_string();
    let (status, top) = common::serve::post(
        &server.url("/v1/rerank"),
        &serde_json::json!({"model": name, "query": query, "documents": documents, "top_n": 1}),
    );
    assert_eq!(status, 200, "{top}");
    assert_eq!(top["results"].as_array().unwrap().len(), 1);
    assert_eq!(top["results"][0]["index"], results[0]["index"]);
    assert!(top["results"][0].get("document").is_none(), "{top}");
    for (body, code, field) in [
        (
            serde_json::json!({"model": "other", "query": query, "documents": ["a"]}),
            404,
            "model",
        ),
        (
            serde_json::json!({"query": query, "documents": []}),
            400,
            "documents",
        ),
        (
            serde_json::json!({"query": query, "documents": [{"image": "data:image/png;base64,AAAA"}]}),
            400,
            "documents[0].image",
        ),
    ] {
        let (status, err) = common::serve::post(&server.url("/v1/rerank"), &body);
        assert_eq!(status, code, "{body}: {err}");
        assert_eq!(err["error"]["field"], field, "{body}: {err}");
    }
    let (_, models) = common::serve::get_json(&server.url("/v1/models"));
    assert!(
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == name.as_str()),
        "{models}"
    );
}

#[test]
fn sift_models_list_shows_rerankers_and_generators_with_their_kinds() {
    let list = common::json(&ok(&["models", "list", "--json"]));
    assert!(
        list["embedders"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["alias"] == "minilm")
    );
    let rerankers = list["rerankers"].as_array().unwrap();
    let generators = list["generators"].as_array().unwrap();
    for kind in ["cross-encoder", "pointwise", "listwise"] {
        assert!(
            rerankers.iter().any(|m| m["kind"] == kind),
            "{kind}: {list}"
        );
    }
    assert!(generators.iter().any(|m| m["kind"] == "local"), "{list}");
    let table = ok(&["models", "list"]);
    assert!(
        table.contains("Rerankers") && table.contains("Generators"),
        "{table}"
    );
    assert!(table.contains("| cross-encoder |"), "{table}");
}

/// text-embeddings-inference's `POST /rerank`: probabilities by default, logits with
/// `raw_scores`, the order of `/v1/rerank`, texts on request.
#[test]
fn the_tei_rerank_route_gives_probabilities_or_logits_of_the_same_ranking() {
    let model = repo().join("models/fixtures/cross_encoder/tiny-bert-ce");
    let server = common::serve::Server::start_with(&["--rerank", s(&model), "--quiet"]);
    let query = "how do plants make sugar";
    let texts = [
        "leaves turn light into sugar",
        "a map of the world",
        "sugar cane fields",
    ];
    let (status, v1) = common::serve::post(
        &server.url("/v1/rerank"),
        &serde_json::json!({"query": query, "documents": texts}),
    );
    assert_eq!(status, 200, "{v1}");
    let tei = |raw: bool| {
        let (status, r) = common::serve::post(
            &server.url("/rerank"),
            &serde_json::json!({"query": query, "texts": texts, "raw_scores": raw,
                                "return_text": raw}),
        );
        assert_eq!(status, 200, "{r}");
        r.as_array().unwrap().clone()
    };
    let (probs, logits) = (tei(false), tei(true));
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    for ((p, l), v) in probs
        .iter()
        .zip(&logits)
        .zip(v1["results"].as_array().unwrap())
    {
        assert_eq!(p["index"], v["index"]);
        assert_eq!(l["index"], v["index"]);
        let (p, l) = (p["score"].as_f64().unwrap(), l["score"].as_f64().unwrap());
        assert!(
            (0.0..=1.0).contains(&p) && (sigmoid(l) - p).abs() < 1e-9,
            "{p} {l}"
        );
        // /v1/rerank gives the model's own score: its logit, or its probability
        let own = v["relevance_score"].as_f64().unwrap();
        assert!(
            (own - l).abs() < 1e-9 || (own - p).abs() < 1e-9,
            "{own} {p} {l}"
        );
    }
    let i = logits[0]["index"].as_u64().unwrap() as usize;
    assert_eq!(logits[0]["text"], texts[i]);
    assert!(probs[0].get("text").is_none());
    let (status, err) = common::serve::post(
        &server.url("/rerank"),
        &serde_json::json!({"query": query, "texts": []}),
    );
    assert_eq!(
        (status, err["error"]["field"].clone()),
        (400, serde_json::json!("texts"))
    );
}
