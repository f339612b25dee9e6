//! Hostile-user tests of the `sift` binary: one test per class of failure an adversarial
//! campaign found (many threads, stale caches, missing shards, bad ids, non-finite vectors,
//! read-only indexes, concurrent rebuilds, symlinks, panics, silent successes, misleading
//! messages). Each asserts the clear error, counted warning or correct result.

use std::fs;

#[path = "../common/mod.rs"]
mod common;
use common::*;

mod corpus;
mod embedding;
mod files;
mod index;
mod usage;

fn tiny_clip() -> std::path::PathBuf {
    repo().join("models/fixtures/vision/tiny-clip-quickgelu")
}

fn manifest(index: &std::path::Path) -> serde_json::Value {
    json(&fs::read_to_string(index.join("manifest.json")).unwrap())
}

/// Runs sift with a deadline (a hang is a failure, not a stuck test run).
fn sift_within(args: &[&str], secs: u64) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sift"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("sift {args:?} did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Rewrites keys of a model's config.json.
fn set_config(dir: &std::path::Path, key: &str, value: serde_json::Value) {
    let path = dir.join("config.json");
    let mut config = json(&fs::read_to_string(&path).unwrap());
    config[key] = value;
    fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}
