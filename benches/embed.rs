//! Text embedding throughput of Sift's candle encoders on CPU (one measured round per process,
//! printed as one JSON object), driven side by side with sentence-transformers by
//! `benches/embed_vs_st.py`.
//!
//! Timed: `TextEmbedder::embed` of the first `--items` texts (tokenisation, length sorting,
//! batching, forward passes, pooling, normalisation), after an untimed warm-up on the first
//! `--warmup` texts. Threads: `--threads` for candle's CPU kernels and the tokenizer.
//!
//! Usage: cargo bench --bench embed -- --model models/local/all-MiniLM-L6-v2 \
//!   --texts ../shared/data/cranfield/corpus.jsonl --items 512 --batch-size 32 --threads 2 --json
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use sift_embed::{ModelFiles, Role, TextEmbedder, TextEmbedderOptions};

#[derive(Parser)]
struct Args {
    /// Model directory or hub id.
    #[arg(long)]
    model: String,
    /// JSONL texts: BEIR corpus.jsonl (title + " " + text) or lines with "text".
    #[arg(long)]
    texts: PathBuf,
    /// Texts to embed in the timed region.
    #[arg(long, default_value_t = 512)]
    items: usize,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// CPU threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Texts embedded before timing.
    #[arg(long, default_value_t = 64)]
    warmup: usize,
    /// Print JSON (always on; kept for the driver's command line).
    #[arg(long)]
    json: bool,
    /// cargo passes --bench to harness=false benches.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    // SAFETY: the first statement of main, before any other thread exists.
    unsafe { sift_embed::tune_allocator() };
    // candle sizes its CPU pool from RAYON_NUM_THREADS; set it before any thread starts.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", args.threads.to_string()) };
    rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build_global()
        .context("thread pool")?;
    let file =
        std::fs::File::open(&args.texts).with_context(|| args.texts.display().to_string())?;
    let mut texts = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)?;
        // what the index embeds for the same line (no leading space when the title is empty)
        let text = v["text"].as_str().unwrap_or_default();
        texts.push(sift_core::passage_text(v["title"].as_str(), text));
    }
    anyhow::ensure!(texts.len() >= args.items, "only {} texts", texts.len());
    let files = ModelFiles::resolve(&args.model)?;
    let model = TextEmbedder::load(
        &files,
        &candle_core::Device::Cpu,
        TextEmbedderOptions {
            batch_size: args.batch_size,
            ..Default::default()
        },
    )?;
    let warm: Vec<&str> = texts.iter().take(args.warmup).map(String::as_str).collect();
    if !warm.is_empty() {
        model.embed(&warm, Role::Passage)?;
    }
    let timed: Vec<&str> = texts.iter().take(args.items).map(String::as_str).collect();
    let t = Instant::now();
    let vectors = model.embed(&timed, Role::Passage)?;
    let seconds = t.elapsed().as_secs_f64();
    std::hint::black_box(&vectors);
    println!(
        "{}",
        serde_json::json!({
            "engine": "sift",
            "version": env!("CARGO_PKG_VERSION"),
            "model": args.model,
            "items": vectors.len(),
            "batch_size": args.batch_size,
            "threads": args.threads,
            "warmup": args.warmup,
            "max_seq_length": model.max_seq_len(),
            "seconds": seconds,
            "items_per_s": vectors.len() as f64 / seconds,
            "peak_rss_mb": sift_embed::bench::peak_rss_mb().unwrap_or(f64::NAN),
        })
    );
    Ok(())
}
