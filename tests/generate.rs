//! `sift generate` end to end on the sample corpus against a loopback OpenAI-compatible
//! server: the outputs and the cache, and a run killed with SIGKILL mid-way, then rerun: no
//! duplicate or truncated cache entries, and only the missing generations requested again.
mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{ok, s, sample};
use serde_json::{Value, json};

/// A chat-completions server answering after `delay`; returns its base URL and a request
/// counter.
fn serve(delay: Duration) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let c = c.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let body: Value = serde_json::from_slice(&body).unwrap();
                c.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(delay);
                let prompt = body["messages"][0]["content"].to_string();
                if body["logprobs"] == json!(true) {
                    let text = logprobs_reply(&body);
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    return;
                }
                // a judge's prompt: 80 for answers made from evidence, else 20
                let content = if body.to_string().contains("passages are related to query") {
                    // BRIGHT's listwise prompt: the second passage first, then the first
                    "Passage 2 answers it.\n```json\n[2, 1]\n```".to_string()
                } else if prompt.contains("Reference answer:") {
                    let score = if prompt.contains("from EVIDENCE") {
                        80
                    } else {
                        20
                    };
                    format!("Reasonable.\nScore: {score}")
                } else if prompt.contains("Documents that may help") {
                    "an answer from EVIDENCE".to_string()
                } else {
                    format!("thoughts on {} chars\nQuery: rewritten", prompt.len())
                };
                let text = json!({
                    "choices": [{"message": {"role": "assistant", "content": content},
                        "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2},
                })
                .to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            });
        }
    });
    (base, count)
}

/// The text parts of a chat request's first message, joined.
fn request_text(body: &Value) -> String {
    match &body["messages"][0]["content"] {
        Value::String(t) => t.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The candidate's text in Sift's pointwise prompt.
fn candidate_text(prompt: &str) -> &str {
    let start = prompt.find("\n\nCandidate: ").map_or(0, |i| i + 13);
    let end = prompt
        .find("\n\nIs the candidate relevant")
        .unwrap_or(prompt.len());
    &prompt[start..end.max(start)]
}

/// An OpenAI logprobs reply to a one-token yes/no question: `Yes` more likely the shorter
/// the candidate's text (log P = -characters / 100, against `No` at -1), ` yes` listed too.
/// A request that is not greedy, one token and 20 top log probabilities gets a 400.
fn logprobs_reply(body: &Value) -> String {
    if body["max_tokens"] != json!(1)
        || body["top_logprobs"] != json!(20)
        || body["temperature"] != json!(0.0)
    {
        return json!({"error": {"message": format!("unexpected request {body}")}}).to_string();
    }
    let n = candidate_text(&request_text(body)).chars().count() as f64;
    json!({
        "choices": [{"message": {"role": "assistant", "content": "Yes"}, "finish_reason": "length",
            "logprobs": {"content": [{"token": "Yes", "logprob": -n / 100.0, "bytes": [89, 101, 115],
                "top_logprobs": [
                    {"token": "Yes", "logprob": -n / 100.0, "bytes": [89, 101, 115]},
                    {"token": "No", "logprob": -1.0, "bytes": [78, 111]},
                    {"token": " yes", "logprob": -5.0, "bytes": [32, 121, 101, 115]}]}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    })
    .to_string()
}

fn cache_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "an unfinished line in the cache"
    );
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn reformulations_are_written_per_domain_and_a_rerun_reads_the_cache() {
    let (base, count) = serve(Duration::ZERO);
    let out = tempfile::tempdir().unwrap();
    let corpus = sample();
    let args = [
        "generate",
        "reformulations",
        "--corpus",
        s(&corpus),
        "--generator",
        &base,
        "--model",
        "tiny",
        "--out",
        s(out.path()),
        "--json",
        "--quiet",
    ];
    let report: Value = serde_json::from_str(&ok(&args)).unwrap();
    let domains = report["domains"].as_object().unwrap();
    let queries: u64 = domains
        .values()
        .map(|d| d["queries"].as_u64().unwrap())
        .sum();
    assert!(queries > 0);
    assert_eq!(count.load(Ordering::SeqCst) as u64, queries);
    for (domain, d) in domains {
        assert_eq!(d["generated"], d["queries"]);
        let rows = std::fs::read_to_string(out.path().join(format!("{domain}.jsonl"))).unwrap();
        for row in rows.lines() {
            let row: Value = serde_json::from_str(row).unwrap();
            assert_eq!(row["text"], "rewritten", "{row}");
            assert!(
                row["generation"]
                    .as_str()
                    .unwrap()
                    .starts_with("thoughts on ")
            );
        }
        assert_eq!(rows.lines().count() as u64, d["queries"].as_u64().unwrap());
    }
    // all cached now: nothing requested
    let again: Value = serde_json::from_str(&ok(&args)).unwrap();
    assert_eq!(count.load(Ordering::SeqCst) as u64, queries);
    for d in again["domains"].as_object().unwrap().values() {
        assert_eq!(d["cached"], d["queries"]);
    }
    // --offline with another template version (a prompt file) finds nothing cached
    let prompt = out.path().join("mine.txt");
    std::fs::write(&prompt, "Rewrite: {query}").unwrap();
    let mut offline = args.to_vec();
    offline.extend(["--prompt", s(&prompt), "--offline"]);
    let err = common::fails(&offline);
    assert!(err.contains("offline: no cached generation"), "{err}");
    assert_eq!(count.load(Ordering::SeqCst) as u64, queries);
}

#[test]
fn a_run_killed_mid_way_resumes_without_duplicates_or_truncation() {
    let (slow, _) = serve(Duration::from_millis(150));
    let out = tempfile::tempdir().unwrap();
    let cache = out.path().join("cache.jsonl");
    let args = |base: &str| {
        vec![
            "generate".to_string(),
            "reasoning".into(),
            "--corpus".into(),
            s(&sample()).into(),
            "--generator".into(),
            base.into(),
            "--model".into(),
            "tiny".into(),
            "--concurrency".into(),
            "2".into(),
            "--out".into(),
            s(out.path()).into(),
            "--quiet".into(),
        ]
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_sift"))
        .args(args(&slow))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while cache_lines(&cache).len() < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no generation cached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = cache_lines(&cache);
    let total: usize = ["biology", "gis", "physics"].len() * 5;
    assert!(
        before.len() < total,
        "the run finished before it was killed"
    );
    let (fast, count) = serve(Duration::ZERO);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sift"));
    let status = cmd.args(args(&fast)).status().unwrap();
    assert!(status.success());
    assert_eq!(count.load(Ordering::SeqCst), total - before.len());
    let after = cache_lines(&cache);
    assert_eq!(after.len(), total);
    let keys: HashSet<&str> = after.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), total, "a duplicate cache entry");
    for f in ["biology", "gis", "physics"] {
        let rows = std::fs::read_to_string(out.path().join(format!("{f}.jsonl"))).unwrap();
        assert_eq!(rows.lines().count(), 5, "{f}");
    }
}

#[test]
fn generated_captions_join_the_queries_of_sift_eval_beside_the_plain_ones() {
    let (base, _) = serve(Duration::ZERO);
    let tmp = tempfile::tempdir().unwrap();
    let (index, captions) = (tmp.path().join("index"), tmp.path().join("captions"));
    let corpus = sample();
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    ok(&[
        "generate",
        "captions",
        "--corpus",
        s(&corpus),
        "--generator",
        &base,
        "--model",
        "tiny",
        "--out",
        s(&captions),
        "--quiet",
    ]);
    let augment = format!("captions:{}", s(&captions));
    let eval = |extra: &[&str]| -> Value {
        let mut args = vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--task",
            "1",
            "--retriever",
            "bm25",
            "--query-augment",
            &augment,
            "--json",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args)).unwrap()
    };
    let report = eval(&[]);
    let labels: Vec<&str> = report["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["bm25", "bm25 +captions"]);
    // the captions change the queries that have images, so the runs differ
    let mean = |r: &Value| r["metrics"].to_string();
    let reports = report["reports"].as_array().unwrap();
    assert_ne!(mean(&reports[0]), mean(&reports[1]), "{report}");
    // queries without images have no caption: counted in the notes
    let notes = report["notes"].to_string();
    assert!(notes.contains("have no captions text"), "{notes}");
    // replacing instead of appending makes another run again
    let replaced = eval(&["--augment-replace"]);
    assert_ne!(
        mean(&replaced["reports"][1]),
        mean(&reports[1]),
        "{replaced}"
    );
    // a malformed augmentation file is an error naming file and line
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\": 3}\n").unwrap();
    let err = common::fails(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--retriever",
        "bm25",
        "--query-augment",
        &format!("x:{}", s(&bad)),
    ]);
    assert!(err.contains("bad.jsonl:1"), "{err}");
}

#[test]
fn rag_answers_from_none_oracle_and_bm25_and_reports_the_judge_scores() {
    let (base, count) = serve(Duration::ZERO);
    let tmp = tempfile::tempdir().unwrap();
    let (index, out) = (tmp.path().join("index"), tmp.path().join("rag"));
    let corpus = sample();
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let args = [
        "rag",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--retriever",
        "none",
        "--retriever",
        "oracle",
        "--retriever",
        "bm25",
        "--generator",
        &base,
        "--model",
        "tiny",
        "--judge-model",
        "judge",
        "--out",
        s(&out),
        "--json",
        "--quiet",
    ];
    let report: Value = serde_json::from_str(&ok(&args)).unwrap();
    assert_eq!(report["mean"]["none"], 20.0, "{report}");
    assert_eq!(report["mean"]["oracle"], 80.0, "{report}");
    assert_eq!(report["mean"]["bm25"], 80.0, "{report}");
    let physics = &report["results"]["oracle"]["physics"];
    assert_eq!(physics["judged"], physics["queries"]);
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| none |") && md.contains("| 60.0 |"), "{md}");
    // per query: the evidence given, the answer, the judgement and its score
    let rows = std::fs::read_to_string(out.join("bm25").join("physics.jsonl")).unwrap();
    let first: Value = serde_json::from_str(rows.lines().next().unwrap()).unwrap();
    assert_eq!(first["evidence"].as_array().unwrap().len(), 5);
    assert_eq!(first["answer"], "an answer from EVIDENCE");
    assert_eq!(first["score"], 80.0);
    let oracle: Value = serde_json::from_str(
        std::fs::read_to_string(out.join("oracle").join("physics.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert!(!oracle["evidence"].as_array().unwrap().is_empty());
    // everything cached: a rerun asks for nothing
    let before = count.load(Ordering::SeqCst);
    ok(&args);
    assert_eq!(count.load(Ordering::SeqCst), before);
}

#[test]
fn the_local_generator_writes_reasoning_for_the_sample_corpus() {
    // the tiny Qwen2-VL-Instruct checkpoint: the GME fixture's weights with a chat template
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-qwen2-vl-instruct");
    common::tiny_qwen2_vl_instruct(&model);
    let out = tmp.path().join("reasoning");
    let corpus = sample();
    let args = [
        "generate",
        "reasoning",
        "--corpus",
        s(&corpus),
        "--domains",
        "gis",
        "--generator",
        s(&model),
        "--max-new-tokens",
        "8",
        "--out",
        s(&out),
        "--json",
        "--quiet",
    ];
    let report: Value = serde_json::from_str(&ok(&args)).unwrap();
    let gis = &report["domains"]["gis"];
    assert_eq!(gis["generated"], gis["queries"], "{report}");
    assert_eq!(
        gis["completion_tokens"].as_u64().unwrap(),
        8 * gis["queries"].as_u64().unwrap()
    );
    let rows = std::fs::read_to_string(out.join("gis.jsonl")).unwrap();
    assert_eq!(
        rows.lines().count() as u64,
        gis["queries"].as_u64().unwrap()
    );
    // a model name with a local generator is refused
    let mut bad = args.to_vec();
    bad.extend(["--model", "x"]);
    let err = common::fails(&bad);
    assert!(err.contains("local model"), "{err}");
    // the rerun reads everything from the cache
    let again: Value = serde_json::from_str(&ok(&args)).unwrap();
    assert_eq!(again["domains"]["gis"]["cached"], gis["queries"]);
    // captions: the query images through the model's vision tower
    let captions = tmp.path().join("captions");
    let report: Value = serde_json::from_str(&ok(&[
        "generate",
        "captions",
        "--corpus",
        s(&corpus),
        "--domains",
        "gis",
        "--generator",
        s(&model),
        "--max-new-tokens",
        "4",
        "--out",
        s(&captions),
        "--json",
        "--quiet",
    ]))
    .unwrap();
    let gis = &report["domains"]["gis"];
    assert!(gis["jobs"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(gis["generated"], gis["jobs"]);
    assert_eq!(gis["failed"], 0);
    // bfloat16 weights on the packed kernels
    let bf16 = tmp.path().join("bf16");
    let report: Value = serde_json::from_str(&ok(&[
        "generate",
        "reasoning",
        "--corpus",
        s(&corpus),
        "--domains",
        "gis",
        "--generator",
        s(&model),
        "--dtype",
        "bf16",
        "--max-new-tokens",
        "4",
        "--out",
        s(&bf16),
        "--json",
        "--quiet",
    ]))
    .unwrap();
    assert_eq!(report["domains"]["gis"]["failed"], 0, "{report}");
    // sift rag with the local generator answering (query images in the prompt) and an
    // endpoint judging
    let (judge, _) = serve(Duration::ZERO);
    let index = tmp.path().join("index");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let rag = tmp.path().join("rag");
    let report: Value = serde_json::from_str(&ok(&[
        "rag",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--retriever",
        "oracle",
        "--retriever",
        "bm25",
        "--generator",
        s(&model),
        "--max-new-tokens",
        "6",
        "--judge-generator",
        &judge,
        "--judge-model",
        "judge",
        "--out",
        s(&rag),
        "--json",
        "--quiet",
    ]))
    .unwrap();
    for r in ["oracle", "bm25"] {
        let cell = &report["results"][r]["gis"];
        assert_eq!(cell["judged"], cell["queries"], "{report}");
        assert_eq!(cell["failed"], 0, "{report}");
    }
}

/// In `dir`: the sample indexed with BM25, and a runner of `sift eval` on Task 1 with BM25
/// reranked by `spec` (an endpoint serving `tiny`) to `depth`, writing to `dir/eval`.
fn reranked_task1(dir: &Path, spec: &str, depth: &str) -> impl Fn() -> Value + use<> {
    let (index, out, corpus) = (dir.join("index"), dir.join("eval"), sample());
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let (spec, depth) = (spec.to_string(), depth.to_string());
    move || {
        serde_json::from_str(&ok(&[
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--task",
            "1",
            "--retriever",
            "bm25",
            "--rerank",
            &spec,
            "--rerank-model",
            "tiny",
            "--rerank-depth",
            &depth,
            "--out",
            s(&out),
            "--json",
            "--quiet",
        ]))
        .unwrap()
    }
}

#[test]
fn listwise_reranking_over_an_endpoint_follows_the_replies_and_caches_them() {
    let (base, count) = serve(Duration::ZERO);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eval");
    let eval = reranked_task1(tmp.path(), &format!("listwise:{base}"), "3");
    let report = eval();
    let asked = count.load(Ordering::SeqCst);
    assert!(asked > 0);
    let notes = report["notes"].to_string();
    assert!(
        notes.contains(&format!(
            "{asked} prompts, 0 replies without a parsable ranking"
        )),
        "{notes}"
    );
    // every query's first two documents swapped, the rest in order
    let read = |name: &str| common::ranked_run(&out.join("runs").join(name));
    let first = read("task1.bm25.trec");
    let names: Vec<String> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("rerank"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let reranked = read(&names[0]);
    let mut swapped = 0;
    for (q, a) in &first {
        let b = &reranked[q];
        if a.len() >= 2 {
            assert_eq!((&b[0], &b[1]), (&a[1], &a[0]), "{q}");
            assert_eq!(a[2..], b[2..], "{q}");
            swapped += 1;
        }
    }
    assert!(swapped > 0);
    // a rerun reads every reply from the cache
    let again = eval();
    assert_eq!(
        count.load(Ordering::SeqCst),
        asked,
        "a rerun asked the endpoint again"
    );
    assert_eq!(again["reports"], report["reports"]);
}

#[test]
fn pointwise_reranking_over_an_endpoint_reads_its_logprobs_and_caches_them() {
    let (base, count) = serve(Duration::ZERO);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eval");
    let eval = reranked_task1(tmp.path(), &format!("pointwise:{base}"), "4");
    let report = eval();
    let asked = count.load(Ordering::SeqCst);
    assert!(asked > 0);
    let labels = report["reports"].to_string();
    assert!(labels.contains("bm25 -> rerank:pointwise:tiny"), "{labels}");
    // the server's yes grows as the passage shortens: every reranked top 4 runs from the
    // shortest passage to the longest, the rest in first-stage order
    let c = sift_core::Corpus::open(sample()).unwrap();
    let mut chars = std::collections::HashMap::new();
    for d in c.domains().unwrap() {
        for p in c.passages(&d).unwrap() {
            let p = p.unwrap();
            chars.insert(p.id, p.text.chars().count());
        }
    }
    let read = |name: &str| common::ranked_run(&out.join("runs").join(name));
    let first = read("task1.bm25.trec");
    let name = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.contains("rerank"))
        .unwrap();
    let reranked = read(&name);
    let mut reordered = 0;
    for (q, a) in &first {
        let b = &reranked[q];
        let k = a.len().min(4);
        let lengths: Vec<usize> = b[..k].iter().map(|d| chars[d]).collect();
        assert!(lengths.windows(2).all(|w| w[0] <= w[1]), "{q}: {lengths:?}");
        let (mut ta, mut tb) = (a[..k].to_vec(), b[..k].to_vec());
        reordered += (ta != tb) as usize;
        ta.sort();
        tb.sort();
        assert_eq!(ta, tb, "{q}");
        assert_eq!(a[k..], b[k..], "{q}");
    }
    assert!(reordered > 0, "no order changed");
    // a rerun reads every score from the cache
    let again = eval();
    assert_eq!(
        count.load(Ordering::SeqCst),
        asked,
        "a rerun asked the endpoint again"
    );
    assert_eq!(again["reports"], report["reports"]);
}

/// A chat-completions server answering every request 429 with `Retry-After: value`;
/// returns its base URL and a request counter.
fn serve_429(value: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let c = c.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                let _ = reader.read_exact(&mut body);
                c.fetch_add(1, Ordering::SeqCst);
                let text = r#"{"error":"slow down"}"#;
                let _ = write!(
                    conn,
                    "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {value}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            });
        }
    });
    (base, count)
}

/// An endpoint that accepts connections and never answers (each kept open, unread).
fn hung_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    base
}

#[test]
fn a_retry_after_of_1e20_is_an_error_named_not_a_crash() {
    // Duration::from_secs_f64(1e20) panicked: exit status 101
    let (base, count) = serve_429("1e20");
    let out = tempfile::tempdir().unwrap();
    let o = common::sift(&[
        "generate",
        "reformulations",
        "--corpus",
        s(&sample()),
        "--domains",
        "biology",
        "--generator",
        &base,
        "--model",
        "tiny",
        "--retries",
        "0",
        "--out",
        s(out.path()),
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("HTTP 429 after 1 attempt(s)"), "{err}");
    assert!(count.load(Ordering::SeqCst) > 0);
}

/// The stderr of `sift args`, which must be refused as a usage error (exit status 2).
fn usage_error(args: &[&str]) -> String {
    let o = common::sift(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    err
}

#[test]
fn sampling_and_retry_flags_out_of_range_are_refused_naming_the_flag() {
    let out = tempfile::tempdir().unwrap();
    let corpus = sample();
    for (flag, value, range) in [
        ("--temperature", "NaN", "from 0 to 2"),
        ("--temperature", "inf", "from 0 to 2"),
        ("--temperature", "2.5", "from 0 to 2"),
        ("--retries", "4294967295", "give 0 to 20"),
        ("--retries", "21", "give 0 to 20"),
    ] {
        let err = usage_error(&[
            "generate",
            "reformulations",
            "--corpus",
            s(&corpus),
            "--generator",
            "http://127.0.0.1:9/v1",
            "--model",
            "tiny",
            "--out",
            s(out.path()),
            flag,
            value,
        ]);
        assert!(
            err.contains(flag) && err.contains(range),
            "{flag} {value}: {err}"
        );
    }
    for (flag, value, range) in [
        ("--rerank-timeout", "0", "from 0.001 to 86400"),
        ("--rerank-timeout", "NaN", "from 0.001 to 86400"),
        ("--rerank-retries", "4294967295", "give 0 to 20"),
    ] {
        let err = usage_error(&["search", "--index", "nowhere", "--query", "q", flag, value]);
        assert!(
            err.contains(flag) && err.contains(range),
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn a_hung_reranking_endpoint_fails_its_queries_quickly_and_eval_keeps_the_runs() {
    let hung = hung_endpoint();
    let tmp = tempfile::tempdir().unwrap();
    let (index, out, corpus) = (tmp.path().join("index"), tmp.path().join("eval"), sample());
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let started = Instant::now();
    let o = common::sift(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--task",
        "1",
        "--retriever",
        "bm25",
        "--rerank",
        &format!("listwise:{hung}"),
        "--rerank-model",
        "tiny",
        "--rerank-timeout",
        "1",
        "--rerank-retries",
        "0",
        "--out",
        s(&out),
        "--json",
        "--quiet",
    ]);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    // 300 s x 6 attempts a query before; now 1 s a query, and 3 failures in a row stop it
    assert!(took < Duration::from_secs(30), "{took:?}: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("not reranked"), "{err}");
    assert!(err.contains("timed out"), "{err}");
    // everything is written: the reranked run keeps each query's first-stage ranking
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let failures = report["rerank_failures"].as_array().unwrap();
    assert!(!failures.is_empty(), "{report}");
    let read = |name: &str| common::ranked_run(&out.join("runs").join(name));
    let first = read("task1.bm25.trec");
    let name = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.contains("rerank"))
        .expect("the reranked run is written");
    assert_eq!(read(&name), first);
    assert!(out.join("results.json").exists());
}

#[test]
fn serve_with_a_hung_reranking_endpoint_answers_within_its_timeout_and_is_not_starved() {
    let hung = hung_endpoint();
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sift"))
        .args([
            "serve",
            "--index",
            s(&index),
            "--corpus",
            s(&sample()),
            "--addr",
            "127.0.0.1:0",
            "--rerank",
            &format!("listwise:{hung}"),
            "--rerank-model",
            "tiny",
            "--timeout",
            "2",
            "--max-concurrency",
            "1",
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stderr = child.stderr.take().unwrap();
    let _child = Kill(child);
    let mut addr = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if let Some(a) = line.strip_prefix("sift serve: listening on ") {
            addr = Some(a.to_string());
            break;
        }
    }
    let url = format!("{}/v1/search", addr.expect("sift serve listens"));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    // one worker: before, the first request's worker waited 300 s x 6 on the endpoint and
    // every request after it got a 503
    for i in 0..3 {
        let started = Instant::now();
        let mut r = agent
            .post(&url)
            .header("content-type", "application/json")
            .send(r#"{"query": "how do plants make sugar", "domain": "biology"}"#)
            .unwrap();
        let took = started.elapsed();
        let status = r.status().as_u16();
        let body = r.body_mut().read_to_string().unwrap();
        assert!(
            took < Duration::from_secs(6),
            "request {i}: {took:?} {status} {body}"
        );
        assert!(
            status == 504 || status == 500,
            "request {i}: {status} {body}"
        );
    }
}

#[test]
fn cached_pointwise_scores_that_are_not_finite_are_rejected_and_computed_again() {
    let (base, count) = serve(Duration::ZERO);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eval");
    let eval = reranked_task1(tmp.path(), &format!("pointwise:{base}"), "4");
    let report = eval();
    let asked = count.load(Ordering::SeqCst);
    let cache = out.join("rerank-cache.jsonl");
    let mut lines = cache_lines(&cache);
    assert_eq!(lines.len(), asked);
    // a hand-edited (or foreign) cache: NaN, inf and -inf where scores were
    let bad = ["NaN", "inf", "-inf"];
    for (i, l) in lines.iter_mut().enumerate() {
        l["generation"]["text"] = json!(bad[i % 3]);
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&cache, text).unwrap();
    let again = eval();
    // every entry rejected and asked again; the scores and the run as the first time
    assert_eq!(count.load(Ordering::SeqCst), 2 * asked);
    assert_eq!(again["reports"], report["reports"]);
    let notes = again["notes"].to_string();
    assert!(
        notes.contains(&format!("{asked} cached score(s)")) && notes.contains("not finite"),
        "{notes}"
    );
    // and the recomputed scores replaced them: a third run asks nothing
    let third = eval();
    assert_eq!(count.load(Ordering::SeqCst), 2 * asked);
    assert_eq!(third["reports"], report["reports"]);
}

fn data_url(path: &Path) -> String {
    use base64::Engine;
    let bytes = std::fs::read(path).unwrap();
    let kind = if path.extension().is_some_and(|e| e == "png") {
        "png"
    } else {
        "jpeg"
    };
    format!(
        "data:image/{kind};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A chat with a system message, several turns and two images between text.
fn two_image_chat(first: &str, second: &str) -> Value {
    json!({
        "messages": [
            {"role": "system", "content": "You compare pictures."},
            {"role": "user", "content": [
                {"type": "text", "text": "Here is one"},
                {"type": "image_url", "image_url": {"url": first}},
                {"type": "text", "text": "and another"},
                {"type": "image_url", "image_url": {"url": second}},
                {"type": "text", "text": "what differs?"},
            ]},
            {"role": "assistant", "content": "The colours."},
            {"role": "user", "content": "And the sizes?"},
        ],
        "max_tokens": 6,
    })
}

#[test]
fn a_chat_through_sift_generate_equals_the_chat_endpoints_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-qwen2-vl-instruct");
    common::tiny_qwen2_vl_instruct(&model);
    let name = s(&model).to_string();
    let images = common::repo().join("models/fixtures/gme/images");
    for f in ["photo_120x90.jpg", "gray_70x126.png"] {
        std::fs::copy(images.join(f), tmp.path().join(f)).unwrap();
    }
    let (a, b) = (
        data_url(&images.join("photo_120x90.jpg")),
        data_url(&images.join("gray_70x126.png")),
    );
    let chat = two_image_chat(&a, &b);
    // line 1: a chat completion body (its model ignored); line 2: an OpenAI batch line with
    // the same images as files beside the chats file; line 3: the images swapped
    let mut first = chat.clone();
    first["model"] = json!("gpt-4o");
    let batch = json!({"custom_id": "files", "method": "POST", "url": "/v1/chat/completions",
        "body": two_image_chat("photo_120x90.jpg", "file://gray_70x126.png")});
    let swapped = two_image_chat(&b, &a);
    let chats = tmp.path().join("chats.jsonl");
    std::fs::write(&chats, format!("{first}\n\n{batch}\n{swapped}\n")).unwrap();
    let answers = tmp.path().join("answers.jsonl");
    ok(&[
        "generate",
        "chats",
        "--chats",
        s(&chats),
        "--generator",
        &name,
        "--out",
        s(&answers),
        "--quiet",
    ]);
    let lines: Vec<Value> = std::fs::read_to_string(&answers)
        .unwrap()
        .lines()
        .map(common::json)
        .collect();
    assert_eq!(lines.len(), 3);
    // the endpoint of a service with a generator and no index
    let server = common::serve::Server::start_with(&["--generator", &name, "--quiet"]);
    let ask = |body: &Value| {
        let mut body = body.clone();
        body["model"] = json!(name);
        let (status, res) = common::serve::post(&server.url("/v1/chat/completions"), &body);
        assert_eq!(status, 200, "{res}");
        res
    };
    let served = ask(&chat);
    let content = |v: &Value| v["choices"][0]["message"]["content"].clone();
    assert_eq!(served["usage"]["completion_tokens"], 6, "{served}");
    assert_eq!(content(&lines[0]), content(&served));
    assert_eq!(lines[0]["usage"], served["usage"]);
    assert_eq!(lines[0]["object"], "chat.completion");
    assert_eq!(lines[1]["custom_id"], "files");
    assert_eq!(lines[1]["response"]["status_code"], 200);
    assert_eq!(content(&lines[1]["response"]["body"]), content(&served));
    let served_swapped = ask(&swapped);
    assert_eq!(content(&lines[2]), content(&served_swapped));
    assert_eq!(lines[2]["usage"], served_swapped["usage"]);
    // a service without an index says so when searched, and lists its generator
    let (status, res) = common::serve::post(&server.url("/v1/search"), &json!({"query": "x"}));
    assert_eq!(status, 404, "{res}");
    assert!(
        res["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no index"),
        "{res}"
    );
    let (_, models) = common::serve::get_json(&server.url("/v1/models"));
    assert!(
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == name.as_str()),
        "{models}"
    );
    // a bad line is named before anything is generated
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        format!(
            "{chat}\n{}\n",
            json!({"messages": [{"role": "robot", "content": "x"}]})
        ),
    )
    .unwrap();
    let err = common::fails(&[
        "generate",
        "chats",
        "--chats",
        s(&bad),
        "--generator",
        &name,
    ]);
    assert!(err.contains("bad.jsonl: line 2: messages[0].role"), "{err}");
    // sift serve without an index needs something to serve
    let out = common::sift(&["serve", "--addr", "127.0.0.1:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error: {err}");
    assert!(err.contains("--index"), "{err}");
}
