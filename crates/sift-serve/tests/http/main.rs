//! The HTTP service end to end, in-process: the sample corpus indexed with BM25 and the tiny
//! CLIP through sift-index, served by [`sift_serve::serve_http`] on a free loopback port and
//! spoken to by a real HTTP client (ureq) and raw sockets. The `sift serve` command line
//! (its flags, exit codes, signals, MCP over stdio) is tested in sift-cli's `serve` tests.
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use sift_serve::HttpOptions;
use sift_service::ServeConfig;

mod harness;
use harness::*;

mod api;
mod connections;
mod errors;
mod mcp;

/// A BEIR corpus in a temp dir.
fn beir(dir: &std::path::Path, corpus: &str, queries: &str, qrels: &str) -> std::path::PathBuf {
    let root = dir.join("beir");
    std::fs::create_dir_all(root.join("qrels")).unwrap();
    std::fs::write(root.join("corpus.jsonl"), corpus).unwrap();
    std::fs::write(root.join("queries.jsonl"), queries).unwrap();
    std::fs::write(root.join("qrels/test.tsv"), qrels).unwrap();
    root
}
