//! Times local greedy decoding: `cargo run --release -p sift-generate --example decode_bench
//! -- MODEL_DIR [f32|bf16] PROMPTS PROMPT_TOKENS NEW_TOKENS`. Each prompt is token ids
//! `(i * 7 + p) % 700 + 10` (ids every tokenizer of the fixtures has), decoded greedily for
//! exactly NEW_TOKENS (the benchmark's checkpoints end on an id never produced in practice);
//! one warm-up prompt first. Prints one JSON line: load seconds, per-prompt seconds,
//! new tokens per second over all prompts, peak RSS.
use candle_core::{DType, Device};
use sift_generate::{LocalQwen2Vl, Sampling};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let model = a.first().expect("MODEL_DIR");
    let dtype = if a.get(1).is_some_and(|d| d == "bf16") {
        DType::BF16
    } else {
        DType::F32
    };
    let num = |i: usize, d: usize| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (prompts, len, new) = (num(2, 3), num(3, 64), num(4, 32));
    let t = std::time::Instant::now();
    let g = LocalQwen2Vl::load_with(model, &Device::Cpu, dtype).expect("the model loads");
    let load = t.elapsed().as_secs_f64();
    let prompt =
        |p: usize| -> Vec<u32> { (0..len).map(|i| ((i * 7 + p) % 700 + 10) as u32).collect() };
    let sampling = Sampling::greedy(new as u32);
    g.generate_ids(&prompt(999), &sampling).expect("warm-up");
    let mut secs = Vec::new();
    let mut tokens = 0;
    for p in 0..prompts {
        let t = std::time::Instant::now();
        let out = g.generate_ids(&prompt(p), &sampling).expect("generation");
        secs.push(t.elapsed().as_secs_f64());
        tokens += out.len();
    }
    let total: f64 = secs.iter().sum();
    println!(
        "{}",
        serde_json::json!({
            "engine": "sift",
            "dtype": if dtype == DType::BF16 { "bf16" } else { "f32" },
            "load_seconds": load,
            "prompt_tokens": len,
            "new_tokens": tokens,
            "seconds": secs,
            "tokens_per_s": tokens as f64 / total,
        })
    );
}
