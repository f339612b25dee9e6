//! The service started in-process on a free loopback port (as `sift serve` starts it: a
//! [`Service`] loaded from a [`ServeConfig`], served by [`sift_serve::serve_http`] with
//! [`HttpOptions`]), an index of the sample corpus built through sift-index, and the HTTP
//! client helpers the tests share.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use sift_core::Corpus;
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_serve::{AccessLog, HttpOptions, Shared};
use sift_service::{ServeConfig, Service};

/// The tiny CLIP fixture the sample index is built with (`dense:tiny-clip-quickgelu`).
pub const CLIP: &str = "models/fixtures/vision/tiny-clip-quickgelu";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn sample() -> PathBuf {
    repo().join("corpora/sample")
}

/// Builds an index of every domain of `corpus` at `root`: BM25 and, for each of `dense`
/// (model directories), a dense index of its passages and corpus images, as
/// `sift index --corpus <corpus> --index <root> --dense <model>...` builds it.
pub fn build_index(corpus: &Path, root: &Path, dense: &[PathBuf]) {
    let source = Corpus::open(corpus).unwrap();
    let domains = source.select_domains(&[]).unwrap();
    let models: Vec<sift_embed::Embedder> = dense
        .iter()
        .map(|d| {
            sift_embed::Embedder::load(d.to_str().unwrap(), &Default::default())
                .unwrap_or_else(|e| panic!("loading {}: {e}", d.display()))
        })
        .collect();
    let sides: Vec<sift_retrieve::Sides> = models
        .iter()
        .map(|m| sift_retrieve::Sides::new(m, sift_retrieve::Indexed::PassagesAndImages))
        .collect();
    let builds: Vec<_> = dense
        .iter()
        .zip(&sides)
        .map(|(d, s)| s.build_for(&sift_retrieve::DenseModel::parse(d.to_str().unwrap()), None))
        .collect();
    IndexDir::build(
        root,
        &source,
        &domains,
        &BuildOptions::default(),
        &builds,
        &NoProgress,
    )
    .unwrap_or_else(|e| panic!("building {}: {e}", root.display()));
}

/// The sample corpus indexed with BM25 and the tiny CLIP, once per test binary.
pub fn index() -> &'static Path {
    static INDEX: OnceLock<PathBuf> = OnceLock::new();
    INDEX.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let index = dir.join("index");
        build_index(&sample(), &index, &[repo().join(CLIP)]);
        index
    })
}

/// What the sample index is served with by default: the sample corpus, every retriever and
/// domain, the default limits.
pub fn config() -> ServeConfig {
    ServeConfig {
        corpus: Some(sample()),
        ..ServeConfig::new(index())
    }
}

/// The default options, without access logs.
pub fn options() -> HttpOptions {
    HttpOptions {
        access_log: AccessLog::Off,
        ..HttpOptions::default()
    }
}

/// Panics on the service's threads, as "thread name: message" (every test's servers run on
/// threads named [`SERVER_THREAD`]).
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());
const SERVER_THREAD: &str = "sift-serve-test";

fn record_server_panics() {
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            if thread.name() == Some(SERVER_THREAD) {
                PANICS.lock().unwrap().push(info.to_string());
            }
            previous(info);
        }));
    });
}

/// A service answering HTTP on a free loopback port, stopped when dropped.
pub struct Server {
    pub base: String,
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// The sample index with the default configuration and `options`.
    pub fn start(options: HttpOptions) -> Server {
        Server::start_with(config(), options)
    }

    /// Loads the service of `config` and serves it with `options`.
    pub fn start_with(config: ServeConfig, options: HttpOptions) -> Server {
        record_server_panics();
        let service = Service::load(&config)
            .unwrap_or_else(|e| panic!("loading {:?} for serving: {e}", config.index));
        let shared = Shared::new(service, &options);
        let (listening, address) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name(SERVER_THREAD)
                .max_blocking_threads(512.max(options.max_concurrency + 64))
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                sift_serve::serve_http(
                    listener,
                    shared,
                    &options,
                    async move {
                        let _ = stopped.await;
                    },
                    |addr| {
                        let _ = listening.send(addr);
                    },
                )
                .await
                .unwrap();
            });
            runtime.shutdown_background();
        });
        let addr = address
            .recv_timeout(Duration::from_secs(60))
            .expect("the service listens");
        Server {
            base: format!("http://{addr}"),
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The panics on any test's service threads so far.
    pub fn panics(&self) -> Vec<String> {
        PANICS.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

#[path = "../../../../tests/common/http.rs"]
mod http;
pub use http::*;

/// What a raw connection got back: the bytes, how long until the server closed it (or the
/// read limit passed), and whether it closed.
pub struct RawReply {
    pub bytes: Vec<u8>,
    pub elapsed: Duration,
    pub closed: bool,
}

impl RawReply {
    /// The status of the first answer, and its body as JSON.
    pub fn answer(&self) -> (u16, Value) {
        let text = String::from_utf8_lossy(&self.bytes);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no answer: {text:?}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status: {head:?}"));
        let ct = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-type:")
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_default();
        assert_eq!(ct, "application/json", "{head}");
        (status, json(body))
    }
}

/// Reads from `stream` until the server closes it or `limit` passes.
pub fn read_until_closed(
    stream: &mut std::net::TcpStream,
    start: Instant,
    limit: Duration,
) -> RawReply {
    use std::io::Read;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65536];
    let closed = loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            break false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false;
            }
            // a reset is a close too
            Err(_) => break true,
        }
    };
    RawReply {
        bytes,
        elapsed: start.elapsed(),
        closed,
    }
}

/// Opens a connection to `server`, sends `bytes` exactly (write errors ignored: the server
/// may answer and close before the client is done) and reads until it is closed or `limit`
/// passes.
pub fn raw(server: &Server, bytes: &[u8], limit: Duration) -> RawReply {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    let start = Instant::now();
    let _ = stream.write_all(bytes);
    read_until_closed(&mut stream, start, limit)
}
