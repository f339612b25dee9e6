//! Connections: half-sent and idle ones closed at their timeouts, many concurrent clients.
use super::*;

/// Half a request head, a body shorter than its Content-Length, and a kept-alive
/// connection left idle after an answer.
const HALF_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nAccept: */";
const SHORT_BODY: &[u8] = b"POST /v1/search HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"query\": \"plants";
const KEEP_ALIVE: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[test]
fn serve_closes_half_sent_and_idle_connections_after_their_timeouts() {
    let server = Server::start(HttpOptions {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_millis(1500),
        ..options()
    });
    let limit = Duration::from_secs(10);
    let threads: Vec<_> = [HALF_HEAD, SHORT_BODY, KEEP_ALIVE]
        .into_iter()
        .map(|bytes| {
            let server_addr = server.addr;
            std::thread::spawn(move || {
                use std::io::Write;
                let mut stream = std::net::TcpStream::connect(server_addr).unwrap();
                let start = Instant::now();
                stream.write_all(bytes).unwrap();
                read_until_closed(&mut stream, start, limit)
            })
        })
        .collect();
    let replies: Vec<RawReply> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let [half, short, idle] = &replies[..] else {
        unreachable!()
    };
    // half a head: closed by the header timeout (1 s), no answer
    assert!(half.closed, "half a head: still open after {limit:?}");
    assert!(
        half.elapsed >= Duration::from_millis(900) && half.elapsed < Duration::from_secs(4),
        "half a head closed after {:?}",
        half.elapsed
    );
    assert!(
        half.bytes.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&half.bytes)
    );
    // a short body: a JSON 408 at the body timeout (1.5 s), then closed
    assert!(short.closed, "short body: still open after {limit:?}");
    assert!(
        short.elapsed >= Duration::from_millis(1400) && short.elapsed < Duration::from_secs(5),
        "short body closed after {:?}",
        short.elapsed
    );
    let (status, body) = short.answer();
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error"]["type"], "request_timeout", "{body}");
    // kept alive after its answer: closed once idle for the header timeout
    let (status, body) = idle.answer();
    assert_eq!(status, 200, "{body}");
    assert!(
        idle.closed,
        "idle kept-alive connection: still open after {limit:?}"
    );
    assert!(
        idle.elapsed < Duration::from_secs(4),
        "idle connection closed after {:?}",
        idle.elapsed
    );
    // the service still answers
    let (st, _) = get_json(&server.url("/healthz"));
    assert_eq!(st, 200);
}

/// Without query batching (`--query-batch 1`) concurrent answers are bit for bit the
/// answers given alone; with it (the default), the same hits, scores equal to float32
/// rounding (a query encoded in a batch of others may differ in its vector's last bits).
#[test]
fn serve_answers_many_concurrent_clients_with_more_workers_than_cores() {
    for batch in [1, sift_service::BatchOptions::default().max_batch] {
        many_concurrent_clients(batch);
    }
}

fn many_concurrent_clients(batch: usize) {
    let server = Arc::new(Server::start_with(
        ServeConfig {
            batch: sift_service::BatchOptions {
                max_batch: batch,
                ..Default::default()
            },
            ..config()
        },
        HttpOptions {
            max_concurrency: 12,
            ..options()
        },
    ));
    let requests = [
        json!({"query": "enzyme kinetics", "domain": "biology", "top_k": 5}),
        json!({"query": "map projection", "domain": "gis", "retriever": "dense:tiny-clip-quickgelu"}),
        json!({"query": "leaf", "domain": "biology", "candidates": "images"}),
        json!({"query": "force", "domain": "physics", "candidates": "pairs", "top_k": 20}),
    ];
    let expected: Vec<Value> = requests
        .iter()
        .map(|r| post(&server.url("/v1/search"), r).1)
        .collect();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let server = server.clone();
            let requests = requests.clone();
            let expected = expected.clone();
            std::thread::spawn(move || {
                for i in 0..12 {
                    let k = (t + i) % requests.len();
                    let (st, res) = post(&server.url("/v1/search"), &requests[k]);
                    assert_eq!(st, 200, "{res}");
                    if batch == 1 {
                        assert_eq!(res, expected[k], "request {k} answered differently");
                    } else {
                        assert_same_hits(&res, &expected[k], k);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client thread failed");
    }
}

/// The same hits in the same order, scores within float32 rounding.
fn assert_same_hits(got: &Value, want: &Value, k: usize) {
    let hits = |v: &Value| v["hits"].as_array().unwrap().clone();
    let (g, w) = (hits(got), hits(want));
    assert_eq!(g.len(), w.len(), "request {k}");
    for (a, b) in g.iter().zip(&w) {
        assert_eq!(a["id"], b["id"], "request {k}: {got} vs {want}");
        let (x, y) = (a["score"].as_f64().unwrap(), b["score"].as_f64().unwrap());
        assert!((x - y).abs() <= 1e-6, "request {k}: {x} vs {y}");
    }
}
