//! `sift serve` for the tests: the sample index it serves, a running server killed when
//! dropped, and the HTTP client calls the tests make.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::{index_ok, repo, s, sample};

pub const CLIP: &str = "models/fixtures/vision/tiny-clip-quickgelu";

/// The sample corpus indexed with BM25 and the tiny CLIP, once per test binary.
pub fn index() -> &'static Path {
    static INDEX: OnceLock<PathBuf> = OnceLock::new();
    INDEX.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let index = dir.join("index");
        let clip = repo().join(CLIP);
        index_ok(&sample(), &index, &["--dense", s(&clip), "-q"]);
        index
    })
}

/// A running `sift serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        Server::start_on(index(), &sample(), extra)
    }

    /// Serving `index` with `corpus`.
    pub fn start_on(index: &Path, corpus: &Path, extra: &[&str]) -> Server {
        let mut args = vec!["--index", s(index), "--corpus", s(corpus)];
        args.extend(extra);
        Server::start_with(&args)
    }

    /// `sift serve` with these arguments alone (no index unless they give one).
    pub fn start_with(args: &[&str]) -> Server {
        Server::start_at("127.0.0.1:0", args)
    }

    /// `sift serve --addr ADDR` with these arguments; `base` is the address it printed.
    pub fn start_at(addr: &str, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sift"))
            .args(["serve", "--addr", addr])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sift serve starts");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("sift serve: listening on ") {
                    let _ = tx.send(addr.to_string());
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no listening line:\n{}", log.lock().unwrap()));
        Server { child, base, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// the client calls, for the binaries that speak to a server
#[allow(unused_imports)]
pub use super::http::*;
