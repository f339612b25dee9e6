//! The OpenAI-compatible back end against a real server: `transformers serve` (PyPI
//! `transformers[serving]`, with torchvision for Qwen2-VL's processor) serving a tiny random
//! Qwen2-VL-Instruct checkpoint on loopback (the GME fixture's weights and tokenizer with
//! `models/fixtures/qwen2_vl_instruct/chat_template.jinja`), cross-checked against the
//! official `openai` Python client sending the same messages: greedy decoding, so both must
//! get the same text and token counts, for a text prompt and one with two images.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sift_generate::{Generator, Message, OpenAiCompatible, Part, Request, Sampling};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The server process, stopped on drop.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python_has(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The tiny Qwen2-VL-Instruct checkpoint, assembled in `dir`.
fn checkpoint(dir: &Path) {
    common::tiny_qwen2_vl_instruct(dir);
}

fn openai_client(base: &str, model: &str, body: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let spec = json!({"base_url": base, "model": model, "body": body});
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), spec.to_string().as_bytes()).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openai client failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
#[ignore = "starts `transformers serve` (pip: transformers[serving] torchvision openai); scripts/test runs it"]
fn answers_as_the_official_client_gets_them_from_transformers_serve() {
    if !python_has("transformers, fastapi, uvicorn, torchvision, openai") {
        eprintln!(
            "skipped: transformers serve cross-check (needs python3 with transformers[serving], torchvision, openai)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    checkpoint(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let model = dir.path().to_str().unwrap().to_string();
    let _serve = Serve(
        Command::new("transformers")
            .args([
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                &model,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the transformers CLI"),
    );
    let base = format!("http://127.0.0.1:{port}/v1");
    let start = Instant::now();
    while ureq::get(&format!("http://127.0.0.1:{port}/health"))
        .call()
        .is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "transformers serve did not start"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let g = OpenAiCompatible::new(&base, &model).with_timeout(Duration::from_secs(120));
    let image = |name: &str| {
        Part::image(std::fs::read(repo().join("models/fixtures/gme/images").join(name)).unwrap())
    };
    let requests = [
        vec![Message::user(vec![Part::text(
            "Why does the sky look blue?",
        )])],
        vec![
            Message::system("You describe figures."),
            Message::user(vec![
                Part::text("Compare the two figures:"),
                image("photo_120x90.jpg"),
                image("tall_300x400.png"),
            ]),
        ],
    ];
    for messages in requests {
        let req = Request {
            messages,
            sampling: Sampling::greedy(12),
        };
        let ours = g.generate(&req).unwrap();
        let theirs = openai_client(&base, &model, &g.body(&req));
        assert_eq!(ours.text, theirs["text"].as_str().unwrap());
        assert_eq!(
            ours.finish_reason.as_deref(),
            theirs["finish_reason"].as_str()
        );
        assert_eq!(
            ours.usage.prompt_tokens,
            theirs["prompt_tokens"].as_u64().unwrap()
        );
        assert_eq!(ours.usage.completion_tokens, 12);
        assert_eq!(theirs["completion_tokens"], 12);
        assert!(!ours.text.is_empty());
    }
}
