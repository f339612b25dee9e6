//! Cross-request query batching: concurrent single-query requests are encoded in shared
//! batches (`GET /v1/stats` counts them), a large request goes through in chunks of the
//! batch size, answers equal the unbatched ones, and a full queue is a 503 with
//! `Retry-After` at once.
use super::*;

const DENSE: &str = "dense:tiny-clip-quickgelu";

/// The encoder's counters.
fn stats(server: &Server) -> Value {
    let (status, stats) = get_json(&server.url("/v1/stats"));
    assert_eq!(status, 200, "{stats}");
    stats["query_batches"].clone()
}

/// `sift search`'s dense hits for `query` over every domain: (id, score), as the command
/// encodes the query alone.
fn alone(query: &str) -> Vec<(String, f64)> {
    let res = json(&ok(&[
        "search",
        "--index",
        s(index()),
        "--retriever",
        DENSE,
        "--query",
        query,
        "--top-k",
        "3",
        "--json",
    ]));
    res["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["id"].as_str().unwrap().to_string(),
                h["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn hits(result: &Value) -> Vec<(String, f64)> {
    result
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["document"]["id"].as_str().unwrap().to_string(),
                h["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Equal ids, scores equal to float32 rounding (a batch pads its texts; the vectors of a
/// query alone and in a batch may differ in the last bits).
fn assert_same(got: &[(String, f64)], want: &[(String, f64)], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "{what}: {got:?} vs {want:?}");
        assert!((g.1 - w.1).abs() < 1e-5, "{what}: {got:?} vs {want:?}");
    }
}

const QUERIES: [&str; 10] = [
    "how do plants make sugar",
    "map projection distortion",
    "dark matter",
    "photosynthesis in leaves",
    "earthquake waves",
    "cell membrane transport",
    "galaxy rotation curves",
    "river delta sediment",
    "enzyme kinetics",
    "solar wind",
];

#[test]
fn concurrent_single_queries_are_encoded_in_shared_batches() {
    // a long wait so that the concurrent requests all meet in the first batch or two
    let server = Server::start(&[
        "--retriever",
        DENSE,
        "--query-batch",
        "16",
        "--query-batch-wait-ms",
        "300",
        "--quiet",
    ]);
    let before = stats(&server);
    assert_eq!(before["batches"], 0, "{before}");
    let barrier = std::sync::Barrier::new(QUERIES.len());
    let url = server.url("/retrieve");
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let threads: Vec<_> = QUERIES
            .iter()
            .map(|q| {
                let (barrier, url) = (&barrier, &url);
                scope.spawn(move || {
                    barrier.wait();
                    let (status, res) = post(
                        url,
                        &json!({"queries": [q], "topk": 3, "return_scores": true}),
                    );
                    assert_eq!(status, 200, "{q}: {res}");
                    res
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let after = stats(&server);
    assert_eq!(after["queries"], QUERIES.len(), "{after}");
    let batches = after["batches"].as_u64().unwrap();
    let largest = after["largest"].as_u64().unwrap();
    // shared: fewer batches than queries, and at least one of several queries
    assert!(batches < QUERIES.len() as u64 && largest >= 2, "{after}");
    let counted: u64 = after["sizes"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(counted, batches, "{after}");
    assert_eq!(after["queued"], 0, "{after}");
    for (q, res) in QUERIES.iter().zip(&answers) {
        assert_same(&hits(&res["result"][0]), &alone(q), q);
    }

    // one request of many queries: chunks of --query-batch, answers in order
    let many: Vec<String> = (0..40)
        .map(|i| QUERIES[i % QUERIES.len()].to_string())
        .collect();
    let (status, res) = post(
        &url,
        &json!({"queries": many, "topk": 3, "return_scores": true}),
    );
    assert_eq!(status, 200, "{res}");
    let after_many = stats(&server);
    assert_eq!(
        after_many["queries"].as_u64().unwrap(),
        QUERIES.len() as u64 + 40,
        "{after_many}"
    );
    assert!(
        after_many["largest"].as_u64().unwrap() <= 16,
        "{after_many}"
    );
    // 16 + 16 + 8: at least three batches
    assert!(
        after_many["batches"].as_u64().unwrap() >= batches + 3,
        "{after_many}"
    );
    let result = res["result"].as_array().unwrap();
    assert_eq!(result.len(), 40);
    for (i, r) in result.iter().enumerate() {
        assert_same(
            &hits(r),
            &hits(&answers[i % QUERIES.len()]["result"][0]),
            &many[i],
        );
    }
}

#[test]
fn a_full_query_queue_is_a_503_with_retry_after_at_once() {
    // the first request's queries wait a second for company, filling the queue
    let server = Server::start(&[
        "--retriever",
        DENSE,
        "--query-batch-wait-ms",
        "1000",
        "--max-queued-queries",
        "3",
        "--quiet",
    ]);
    let url = server.url("/retrieve");
    std::thread::scope(|scope| {
        let first = scope.spawn(|| post(&url, &json!({"queries": ["a", "b", "c"], "topk": 1})));
        // until the first request's three queries are queued
        let deadline = Instant::now() + Duration::from_secs(30);
        while stats(&server)["queued"] != 3 {
            assert!(Instant::now() < deadline, "the first request never queued");
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = Instant::now();
        let mut r = common::http::agent()
            .post(&url)
            .header("content-type", "application/json")
            .send(json!({"queries": ["d"], "topk": 1}).to_string().as_bytes())
            .unwrap();
        assert_eq!(r.status().as_u16(), 503);
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "refused at once"
        );
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1")
        );
        let body = json(&r.body_mut().read_to_string().unwrap());
        assert_eq!(body["error"]["type"], "overloaded", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("queue is full"),
            "{body}"
        );
        let (status, res) = first.join().unwrap();
        assert_eq!(status, 200, "{res}");
    });
    let after = stats(&server);
    assert_eq!(after["refused"], 1, "{after}");
    // and once the queue has room, the same request is answered
    let (status, res) = post(&url, &json!({"queries": ["d"], "topk": 1}));
    assert_eq!(status, 200, "{res}");
}
