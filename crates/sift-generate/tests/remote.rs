//! The OpenAI-compatible back end and the cache against a local server that injects faults:
//! 429 (with Retry-After), 500, 503, timeouts, malformed JSON, a 400.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sift_generate::{
    Error, GenerationCache, Generator, Job, Message, OpenAiCompatible, Outcome, Part, Request,
    RetryPolicy, RunOptions, RunSummary, Sampling, generate_all, with_deadline,
};

/// What the server does with a request.
enum Act {
    Status(u16),
    /// Answer after this long (longer than the client waits).
    Delay(Duration),
    Malformed,
    Ok(String),
    /// 429 with this `Retry-After` value.
    RetryAfter(&'static str),
}

struct Server {
    base: String,
    requests: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
}

/// A loopback server answering request number `i` (from 0) with body `b` as `f(i, b)` says.
fn serve(f: impl Fn(usize, &Value) -> Act + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (r, s, f) = (requests.clone(), seen.clone(), Arc::new(f));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (r, s, f) = (r.clone(), s.clone(), f.clone());
            std::thread::spawn(move || {
                let _ = handle(conn, &r, &s, &*f);
            });
        }
    });
    Server {
        base,
        requests,
        seen,
    }
}

fn handle(
    conn: TcpStream,
    requests: &AtomicUsize,
    seen: &Mutex<Vec<(String, Value)>>,
    f: &(dyn Fn(usize, &Value) -> Act + Send + Sync),
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut head = String::new();
    let mut len = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        head.push_str(&line);
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap();
    let i = requests.fetch_add(1, Ordering::SeqCst);
    seen.lock().unwrap().push((head, body.clone()));
    let (status, extra, text) = match f(i, &body) {
        Act::Status(429) => (
            429,
            "Retry-After: 0\r\n",
            r#"{"error":"slow down"}"#.to_string(),
        ),
        Act::Status(s) => (s, "", format!(r#"{{"error":"status {s}"}}"#)),
        Act::RetryAfter(v) => (
            429,
            &*format!("Retry-After: {v}\r\n").leak(),
            r#"{"error":"slow down"}"#.to_string(),
        ),
        Act::Malformed => (200, "", r#"{"choices": [{"message": "#.to_string()),
        Act::Delay(d) => {
            std::thread::sleep(d);
            (200, "", completion("late"))
        }
        Act::Ok(t) => (200, "", completion(&t)),
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    conn.flush()
}

fn completion(text: &str) -> String {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    })
    .to_string()
}

fn client(base: &str, retries: u32) -> OpenAiCompatible {
    OpenAiCompatible::new(base, "tiny-vlm")
        .with_api_key("sk-test")
        .with_timeout(Duration::from_millis(400))
        .with_retry(RetryPolicy {
            max_retries: retries,
            base: Duration::from_millis(5),
            cap: Duration::from_millis(50),
        })
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\nnot really an image";

fn caption_request(text: &str) -> Request {
    Request {
        messages: vec![
            Message::system("You describe images."),
            Message::user(vec![Part::text(text), Part::image(PNG.to_vec())]),
        ],
        sampling: Sampling::greedy(32),
    }
}

#[test]
fn every_fault_is_retried_until_an_answer() {
    let server = serve(|i, _| match i {
        0 => Act::Status(429),
        1 => Act::Status(500),
        2 => Act::Malformed,
        3 => Act::Delay(Duration::from_millis(1500)),
        _ => Act::Ok("a plot of voltage against time".into()),
    });
    let g = client(&server.base, 5)
        .generate(&caption_request("Caption:"))
        .unwrap();
    assert_eq!(g.text, "a plot of voltage against time");
    assert_eq!(g.finish_reason.as_deref(), Some("stop"));
    assert_eq!((g.usage.prompt_tokens, g.usage.completion_tokens), (11, 3));
    assert_eq!(server.requests.load(Ordering::SeqCst), 5);
    // the request as OpenAI's API takes it
    let (head, body) = server.seen.lock().unwrap()[0].clone();
    assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("authorization: bearer sk-test"),
        "{head}"
    );
    assert_eq!(body["model"], "tiny-vlm");
    assert_eq!(body["max_tokens"], 32);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "You describe images."})
    );
    let parts = &body["messages"][1]["content"];
    assert_eq!(parts[0], json!({"type": "text", "text": "Caption:"}));
    assert_eq!(parts[1]["type"], "image_url");
    let url = parts[1]["image_url"]["url"].as_str().unwrap();
    assert!(url.starts_with("data:image/png;base64,"), "{url}");
}

#[test]
fn persistent_faults_are_reported_with_the_endpoint_and_status() {
    let server = serve(|_, _| Act::Status(503));
    let err = client(&server.base, 2)
        .generate(&caption_request("x"))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Status {
                status: 503,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains(&server.base), "{err}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
    // a client error is not retried
    let server = serve(|_, _| Act::Status(400));
    let err = client(&server.base, 5)
        .generate(&caption_request("x"))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Status {
                status: 400,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    // timeouts every time
    let server = serve(|_, _| Act::Delay(Duration::from_millis(1500)));
    let err = client(&server.base, 1)
        .generate(&caption_request("x"))
        .unwrap_err();
    assert!(matches!(err, Error::Transport { attempts: 2, .. }), "{err}");
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[test]
fn any_retry_after_a_server_sends_is_clamped_to_the_longest_wait() {
    // 1e20 s panicked Duration::from_secs_f64; the others must not stall the client either
    let values = [
        "1e20",
        "inf",
        "NaN",
        "-3",
        "18446744073709551616",
        "Fri, 31 Dec 9999 23:59:59 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "soon",
    ];
    let server = serve(move |i, _| match values.get(i) {
        Some(v) => Act::RetryAfter(v),
        None => Act::Ok("fine".into()),
    });
    let started = std::time::Instant::now();
    let g = client(&server.base, values.len() as u32)
        .generate(&caption_request("x"))
        .unwrap();
    assert_eq!(g.text, "fine");
    assert_eq!(server.requests.load(Ordering::SeqCst), values.len() + 1);
    // each wait at most the policy's 50 ms cap
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_callers_deadline_bounds_every_attempt_and_wait() {
    // a server that never answers in time, a client allowed 10 s an attempt and 5 retries:
    // the deadline, not the client's own limits, decides when it gives up
    let server = serve(|_, _| Act::Delay(Duration::from_secs(20)));
    let g = OpenAiCompatible::new(&server.base, "tiny-vlm").with_timeout(Duration::from_secs(10));
    let started = std::time::Instant::now();
    let err = with_deadline(started + Duration::from_millis(500), || {
        g.generate(&caption_request("x"))
    })
    .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}: {err}");
    assert!(matches!(err, Error::Transport { attempts: 1, .. }), "{err}");
    assert!(sift_generate::current_deadline().is_none());
    // a deadline already passed: nothing is sent
    let before = server.requests.load(Ordering::SeqCst);
    let err = with_deadline(std::time::Instant::now(), || {
        g.generate(&caption_request("x"))
    })
    .unwrap_err();
    assert!(matches!(err, Error::Deadline { attempts: 0, .. }), "{err}");
    assert!(err.to_string().contains("time limit"), "{err}");
    assert_eq!(server.requests.load(Ordering::SeqCst), before);
    // a Retry-After past the deadline is not waited for
    let server = serve(|_, _| Act::RetryAfter("20"));
    let g = OpenAiCompatible::new(&server.base, "tiny-vlm").with_retry(RetryPolicy {
        max_retries: 5,
        base: Duration::from_millis(5),
        cap: Duration::from_secs(30),
    });
    let started = std::time::Instant::now();
    let err = with_deadline(started + Duration::from_secs(1), || {
        g.generate(&caption_request("x"))
    })
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Status { status: 429, .. }), "{err}");
}

fn jobs(n: usize) -> Vec<Job> {
    (0..n)
        .map(|i| Job {
            query_id: format!("q{i}"),
            template: ("caption".into(), 1),
            request: caption_request(&format!("query {i}{}", if i == 3 { " FAIL" } else { "" })),
        })
        .collect()
}

fn text_of(body: &Value) -> String {
    body["messages"][1]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn failures_are_reported_per_query_and_a_rerun_generates_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gen").join("captions.jsonl");
    let failing = serve(|_, b| {
        if text_of(b).contains("FAIL") {
            Act::Status(500)
        } else {
            Act::Ok(format!("caption of {}", text_of(b)))
        }
    });
    let options = RunOptions {
        concurrency: 3,
        offline: false,
    };
    let cache = GenerationCache::open(&path).unwrap();
    let out = generate_all(&client(&failing.base, 1), &jobs(8), &cache, options, None);
    let s = RunSummary::of(&out);
    assert_eq!((s.generated, s.failed, s.cached), (7, 1, 0));
    assert_eq!((s.prompt_tokens, s.completion_tokens), (77, 21));
    match &out[3] {
        Outcome::Failed(m) => assert!(m.contains("query q3") && m.contains("HTTP 500"), "{m}"),
        o => panic!("{o:?}"),
    }
    assert_eq!(out[5].generation().unwrap().text, "caption of query 5");
    // 7 answered once, q3 tried twice
    assert_eq!(failing.requests.load(Ordering::SeqCst), 9);
    drop(cache);

    // the rerun reads the 7 and asks only for q3
    let healthy = serve(|_, b| Act::Ok(format!("caption of {}", text_of(b))));
    let cache = GenerationCache::open(&path).unwrap();
    assert_eq!(cache.opened().entries, 7);
    let out = generate_all(&client(&healthy.base, 1), &jobs(8), &cache, options, None);
    let s = RunSummary::of(&out);
    assert_eq!((s.generated, s.failed, s.cached), (1, 0, 7));
    assert_eq!(healthy.requests.load(Ordering::SeqCst), 1);
    assert_eq!(out[3].generation().unwrap().text, "caption of query 3 FAIL");
    drop(cache);
    let again = GenerationCache::open(&path).unwrap();
    assert_eq!(again.opened().entries, 8);
    assert_eq!(
        (again.opened().duplicates, again.opened().truncated),
        (0, 0)
    );

    // another model, template version or sampling is another key
    let other = Job {
        template: ("caption".into(), 2),
        ..jobs(1).remove(0)
    };
    let offline = RunOptions {
        concurrency: 2,
        offline: true,
    };
    let out = generate_all(&client(&healthy.base, 1), &[other], &again, offline, None);
    match &out[0] {
        Outcome::Failed(m) => assert!(m.contains("offline") && m.contains("q0"), "{m}"),
        o => panic!("{o:?}"),
    }
    assert_eq!(
        healthy.requests.load(Ordering::SeqCst),
        1,
        "offline sends nothing"
    );
}

#[test]
fn an_unfinished_last_line_is_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let server = serve(|_, b| Act::Ok(format!("caption of {}", text_of(b))));
    let cache = GenerationCache::open(&path).unwrap();
    let options = RunOptions::default();
    generate_all(&client(&server.base, 0), &jobs(3), &cache, options, None);
    drop(cache);
    // a run killed while writing its fourth entry
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"key":"abc","query_id":"q9","mod"#);
    std::fs::write(&path, &bytes).unwrap();
    let cache = GenerationCache::open(&path).unwrap();
    assert_eq!(cache.opened().entries, 3);
    assert_eq!(cache.opened().truncated, 1);
    let out = generate_all(&client(&server.base, 0), &jobs(5), &cache, options, None);
    assert_eq!(RunSummary::of(&out).generated, 2);
    drop(cache);
    let cache = GenerationCache::open(&path).unwrap();
    assert_eq!(
        cache.opened(),
        sift_generate::CacheOpen {
            entries: 5,
            ..Default::default()
        }
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 5);
    assert!(text.ends_with('\n'));
}

#[test]
fn text_only_messages_are_sent_as_strings() {
    let g = OpenAiCompatible::new("http://127.0.0.1:1/v1/", "m");
    assert_eq!(g.url(), "http://127.0.0.1:1/v1/chat/completions");
    let req = Request {
        messages: vec![Message::user(vec![
            Part::text("Rewrite: "),
            Part::text("why?"),
        ])],
        sampling: Sampling {
            seed: Some(7),
            stop: vec!["\n\n".into()],
            ..Sampling::greedy(8)
        },
    };
    let body = g.body(&req);
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": "Rewrite: why?"})
    );
    assert_eq!(body["seed"], 7);
    assert_eq!(body["stop"], json!(["\n\n"]));
    assert!(matches!(
        g.generate(&Request {
            messages: vec![],
            sampling: Sampling::greedy(1)
        }),
        Err(Error::Invalid(_))
    ));
}
