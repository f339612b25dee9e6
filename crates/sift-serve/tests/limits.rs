//! The concurrency limit and the time limit of `Shared::run`: work past the deadline is a
//! 504, a request that cannot get a worker before its deadline a 503, and neither blocks
//! the async runtime.
use std::time::{Duration, Instant};

use sift_core::Corpus;
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_serve::{HttpOptions, Shared};
use sift_service::{ErrorKind, ServeConfig, Service};

fn service() -> (tempfile::TempDir, Service) {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample");
    let corpus = Corpus::open(sample).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("index");
    IndexDir::build(
        &root,
        &corpus,
        &["gis".to_string()],
        &BuildOptions::default(),
        &[],
        &NoProgress,
    )
    .unwrap();
    let service = Service::load(&ServeConfig::new(&root)).unwrap();
    (dir, service)
}

#[test]
fn slow_work_times_out_and_a_full_house_is_overloaded() {
    let (_dir, service) = service();
    let options = HttpOptions {
        max_concurrency: 1,
        timeout: Duration::from_millis(300),
        ..HttpOptions::default()
    };
    let shared = Shared::new(service, &options);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let slow = {
            let shared = shared.clone();
            tokio::spawn(async move {
                shared
                    .run(|_| {
                        std::thread::sleep(Duration::from_millis(1500));
                        Ok(())
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // the only worker is busy past this request's deadline
        let start = Instant::now();
        let queued = shared.run(|svc| Ok(svc.info().domains.len())).await;
        assert_eq!(queued.unwrap_err().kind, ErrorKind::Overloaded);
        assert!(start.elapsed() < Duration::from_millis(1000));
        let slow = slow.await.unwrap();
        assert_eq!(slow.unwrap_err().kind, ErrorKind::Timeout);
        // once the slow work has finished, the worker serves again
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            shared
                .run(|svc| Ok(svc.info().domains.len()))
                .await
                .unwrap(),
            1
        );
        // a panic inside the work is a 500, not a dead service
        let panicked = shared
            .run(|_| -> Result<(), sift_service::ApiError> { panic!("boom") })
            .await;
        assert_eq!(panicked.unwrap_err().kind, ErrorKind::Internal);
        assert_eq!(
            shared
                .run(|svc| Ok(svc.info().domains.len()))
                .await
                .unwrap(),
            1
        );
    });
}

/// Durations and a concurrency far past anything sensible (a library user's `Duration::MAX`)
/// are cut to what the clock and the semaphore take: no `Instant + Duration` overflow, no
/// semaphore panic, and shutdown still ends (the grace period is cut to a year, but the
/// idle connection closes at once).
#[test]
fn huge_durations_and_concurrency_neither_panic_nor_overflow() {
    use std::io::{Read, Write};
    let (_dir, service) = service();
    let options = HttpOptions {
        max_concurrency: usize::MAX,
        timeout: Duration::MAX,
        header_timeout: Duration::MAX,
        body_timeout: Duration::MAX,
        shutdown_grace: Duration::MAX,
        access_log: sift_serve::AccessLog::Off,
        ..HttpOptions::default()
    };
    let shared = Shared::new(service, &options);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let n = shared
            .run(|svc| Ok(svc.info().domains.len()))
            .await
            .unwrap();
        assert_eq!(n, 1);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn({
            let shared = shared.clone();
            let options = options.clone();
            async move {
                sift_serve::serve_http(
                    listener,
                    shared,
                    &options,
                    async move {
                        let _ = stopped.await;
                    },
                    |_| {},
                )
                .await
            }
        });
        let answer = tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let body = r#"{"lists": [[{"id": "a", "score": 1}]], "top_k": 1}"#;
            let head = format!(
                "POST /v1/fuse HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n",
                body.len()
            );
            s.write_all(format!("{head}{body}").as_bytes()).unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            (s, String::from_utf8_lossy(&buf[..n]).into_owned())
        })
        .await
        .unwrap();
        assert!(answer.1.starts_with("HTTP/1.1 200"), "{}", answer.1);
        stop.send(()).unwrap();
        let stopped = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("shutdown ends with an idle connection open")
            .unwrap()
            .unwrap();
        assert_eq!(stopped.dropped, 0);
        drop(answer);
    });
}

/// Issue 52, 5: heavy work (embeddings, chat completions) took every worker and searches
/// got 503. It now holds at most its share of the workers (half): a second heavy request
/// waits for the share (503 at its deadline) while a search gets the worker kept for it.
#[test]
fn heavy_work_keeps_workers_free_for_searches() {
    let (_dir, service) = service();
    let options = HttpOptions {
        max_concurrency: 2,
        timeout: Duration::from_millis(500),
        ..HttpOptions::default()
    };
    let shared = Shared::new(service, &options);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let busy = {
            let shared = shared.clone();
            tokio::spawn(async move {
                shared
                    .run_heavy(move |_| {
                        let _ = wait.recv_timeout(Duration::from_secs(10));
                        Ok(())
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = shared
            .run_heavy(|svc| Ok(svc.info().domains.len()))
            .await
            .unwrap_err();
        assert_eq!(second.kind, ErrorKind::Overloaded, "{second}");
        assert!(second.message.contains("embeddings"), "{second}");
        // the other worker is still free for a search
        assert_eq!(
            shared
                .run(|svc| Ok(svc.info().domains.len()))
                .await
                .unwrap(),
            1
        );
        release.send(()).unwrap();
        let _ = busy.await.unwrap();
    });
}
