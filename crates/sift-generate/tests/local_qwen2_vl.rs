//! The local generator against transformers on two tiny checkpoints:
//! - Qwen2-VL-Instruct (`models/fixtures/qwen2_vl_instruct/`: the GME fixture's random
//!   weights and tokenizer with a Qwen2-VL-Instruct chat template; expected outputs from
//!   `make_generate_fixture.py`);
//! - Qwen2.5-VL-Instruct (`models/fixtures/qwen2_5_vl_instruct/`: random weights, RMSNorm and
//!   gated-MLP vision blocks, window attention with partial windows, an untied LM head;
//!   checkpoint and outputs from `make_fixture.py`).
//!
//! Each: the chat template's text, the prompt's token ids, and greedy decoding token for
//! token (f32, 24 new tokens, KV cache), for a plain chat, one with a system turn and list
//! content, a multi-turn one, and three with images (odd sizes, three in one turn, RGBA, a
//! 20x30 image scaled up to the processor's minimum, images before and after text).
mod common;

use std::path::{Path, PathBuf};

use candle_core::Device;
use serde_json::Value;
use sift_generate::{Generator, LocalQwen2Vl, Message, Part, Request, Role, Sampling};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn checkpoint(dir: &Path) {
    common::tiny_qwen2_vl_instruct(dir);
}

/// A tiny checkpoint and transformers' generations on it.
struct Fixture {
    name: &'static str,
    expected: Value,
    dir: PathBuf,
    _assembled: Option<tempfile::TempDir>,
}

/// Both fixtures: Qwen2-VL-Instruct (assembled in a temporary directory) and
/// Qwen2.5-VL-Instruct (committed whole).
fn fixtures() -> Vec<Fixture> {
    let read = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(repo().join(p)).unwrap()).unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    checkpoint(tmp.path());
    vec![
        Fixture {
            name: "qwen2-vl",
            expected: read("models/fixtures/qwen2_vl_instruct/generate_expected.json"),
            dir: tmp.path().to_path_buf(),
            _assembled: Some(tmp),
        },
        Fixture {
            name: "qwen2.5-vl",
            expected: read("models/fixtures/qwen2_5_vl_instruct/generate_expected.json"),
            dir: repo().join("models/fixtures/qwen2_5_vl_instruct/tiny"),
            _assembled: None,
        },
    ]
}

fn messages(chat: &Value) -> Vec<Message> {
    chat.as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let role = match m["role"].as_str().unwrap() {
                "system" => Role::System,
                "assistant" => Role::Assistant,
                _ => Role::User,
            };
            let content = match &m["content"] {
                Value::String(s) => vec![Part::text(s.clone())],
                Value::Array(parts) => parts
                    .iter()
                    .map(|p| match p["type"].as_str().unwrap() {
                        // a file of the GME fixture's images, or a path from the root
                        "image" => Part::image({
                            let name = p["image"].as_str().unwrap();
                            let path = if name.contains('/') {
                                repo().join(name)
                            } else {
                                repo().join("models/fixtures/gme/images").join(name)
                            };
                            std::fs::read(path).unwrap()
                        }),
                        _ => Part::text(p["text"].as_str().unwrap()),
                    })
                    .collect(),
                other => panic!("{other}"),
            };
            Message { role, content }
        })
        .collect()
}

/// The encoded images of `msgs`, in order.
fn image_bytes(msgs: &[Message]) -> Vec<Vec<u8>> {
    msgs.iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            Part::Image { bytes, .. } => Some(bytes.clone()),
            Part::Text(_) => None,
        })
        .collect()
}

#[test]
fn greedy_decoding_matches_transformers_generate_token_for_token() {
    for fx in fixtures() {
        let expected = &fx.expected;
        let g = LocalQwen2Vl::load(fx.dir.to_str().unwrap(), &Device::Cpu).unwrap();
        let max_new = expected["max_new_tokens"].as_u64().unwrap() as u32;
        for chat in expected["chats"].as_array().unwrap() {
            let msgs = messages(&chat["messages"]);
            let text = g.chat_prompt(&msgs).unwrap();
            assert_eq!(text, chat["text"].as_str().unwrap());
            let bytes = image_bytes(&msgs);
            let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
            let images = g.prepare_images(&refs).unwrap();
            let ids = g
                .expand_image_tokens(&g.tokenize(&text).unwrap(), &images)
                .unwrap();
            let want_ids: Vec<u32> = serde_json::from_value(chat["input_ids"].clone()).unwrap();
            assert_eq!(ids, want_ids, "{}", fx.name);
            let out = g
                .generate_with_images(&ids, &images, &Sampling::greedy(max_new))
                .unwrap();
            let want: Vec<u32> = serde_json::from_value(chat["output_ids"].clone()).unwrap();
            assert_eq!(out, want, "{}: {}", fx.name, chat["text"]);
            // through the Generator trait: the same tokens, decoded
            let r = g
                .generate(&Request {
                    messages: msgs,
                    sampling: Sampling::greedy(max_new),
                })
                .unwrap();
            assert_eq!(r.text, chat["output_text"].as_str().unwrap());
            assert_eq!(r.usage.completion_tokens, want.len() as u64);
            assert_eq!(r.usage.prompt_tokens, want_ids.len() as u64);
            assert_eq!(r.finish_reason.as_deref(), Some("length"));
        }
    }
}

#[test]
fn sampling_is_seeded_and_a_broken_image_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    checkpoint(dir.path());
    let g = LocalQwen2Vl::load(dir.path().to_str().unwrap(), &Device::Cpu).unwrap();
    let req = |seed| Request {
        messages: vec![Message::user(vec![Part::text("Tell me something.")])],
        sampling: Sampling {
            temperature: 1.0,
            top_p: 0.9,
            seed: Some(seed),
            ..Sampling::greedy(16)
        },
    };
    let (a, b, c) = (
        g.generate(&req(1)).unwrap(),
        g.generate(&req(1)).unwrap(),
        g.generate(&req(2)).unwrap(),
    );
    assert_eq!(a, b);
    assert_ne!(a.text, c.text);
    let img = Request {
        messages: vec![Message::user(vec![Part::image(
            b"\x89PNG\r\n\x1a\n".to_vec(),
        )])],
        sampling: Sampling::greedy(4),
    };
    match g.generate(&img) {
        Err(sift_generate::Error::Invalid(m)) => assert!(m.starts_with("images[0]"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bf16_on_the_packed_kernels_stays_within_the_bound_and_decides_as_f32_where_it_can() {
    // Teacher-forced along transformers' greedy tokens: at every step the bfloat16 model's
    // next-token logits are within the bound of the f32 model's, and its arg-max is the
    // reference token wherever the f32 logits' top-2 margin exceeds twice the difference
    // (a random tiny model has near-ties, where any rounding may decide either way).
    let argmax = |v: &[f32]| (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b });
    for fx in fixtures() {
        let spec = fx.dir.to_str().unwrap();
        let f32_model = LocalQwen2Vl::load(spec, &Device::Cpu).unwrap();
        let bf16 = LocalQwen2Vl::load_with(spec, &Device::Cpu, candle_core::DType::BF16).unwrap();
        let (mut worst, mut decided, mut steps) = (0f32, 0, 0);
        for chat in fx.expected["chats"].as_array().unwrap() {
            let msgs = messages(&chat["messages"]);
            let bytes = image_bytes(&msgs);
            let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
            let images = bf16.prepare_images(&refs).unwrap();
            let mut ids: Vec<u32> = serde_json::from_value(chat["input_ids"].clone()).unwrap();
            let want: Vec<u32> = serde_json::from_value(chat["output_ids"].clone()).unwrap();
            for &token in &want {
                let a = f32_model.next_token_logits(&ids, &images).unwrap();
                let b = bf16.next_token_logits(&ids, &images).unwrap();
                assert_eq!(argmax(&a) as u32, token, "{}: f32, teacher-forced", fx.name);
                let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
                let diff = a
                    .iter()
                    .zip(&b)
                    .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                worst = worst.max(diff / scale);
                let top = a[token as usize];
                let second = a
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != token as usize)
                    .fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
                steps += 1;
                if top - second > 2.0 * diff {
                    decided += 1;
                    assert_eq!(
                        argmax(&b) as u32,
                        token,
                        "{}: bf16 at a clear step: {}",
                        fx.name,
                        chat["text"]
                    );
                }
                ids.push(token);
            }
        }
        assert!(
            worst < 0.05,
            "{}: bf16 logits differ by {worst} of the largest",
            fx.name
        );
        assert!(
            decided * 2 > steps,
            "{}: only {decided} of {steps} steps were clear",
            fx.name
        );
        eprintln!(
            "{}: bf16 vs f32 next-token logits: worst difference {worst:.5} of the largest \
             logit; {decided} of {steps} steps clear of near-ties, all decided as f32",
            fx.name
        );
    }
}
