//! Image embedding throughput of Sift's CLIP/SigLIP image towers on CPU (one measured round
//! per process, printed as one JSON object), driven side by side with transformers by
//! `benches/vision_vs_transformers.py`.
//!
//! Input: the files of `--images` (sorted by name, cycled if fewer than `--items`), read into
//! memory before anything is timed. After an untimed warm-up (`embed_images` of the first
//! `--warmup` images), two timed regions:
//! - prep: `VisionEmbedder::prepare` of the `--items` images (decode + resize/crop/normalise,
//!   in parallel on the rayon pool) → `prep_items_per_s`;
//! - full: `VisionEmbedder::embed_images` of the same images (prepare, then batched forward
//!   passes of `--batch-size` and L2 normalisation) → `seconds`, `items_per_s`.
//!
//! Threads: `--threads` for candle's CPU kernels and rayon.
//!
//! Usage (cargo runs benches from crates/sift-cli, so pass absolute paths):
//!   cargo bench --bench embed_image -- --model /abs/target/bench-models/clip-vit-base-patch32 \
//!     --images /abs/target/bench-images --items 128 --batch-size 32 --threads 2 --warmup 32 --json
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use sift_embed::{ModelFiles, VisionEmbedder, VisionOptions};

#[derive(Parser)]
struct Args {
    /// Model directory or hub id (CLIP or SigLIP).
    #[arg(long)]
    model: String,
    /// Directory of image files (every regular file in it, sorted by name).
    #[arg(long)]
    images: PathBuf,
    /// Images embedded in each timed region.
    #[arg(long, default_value_t = 128)]
    items: usize,
    /// Images per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// CPU threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Images embedded before timing.
    #[arg(long, default_value_t = 32)]
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
    anyhow::ensure!(args.items >= 1, "--items must be >= 1");
    // SAFETY: the first statement of main, before any other thread exists.
    unsafe { sift_embed::tune_allocator() };
    // candle sizes its CPU pool from RAYON_NUM_THREADS; set it before any thread starts.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", args.threads.to_string()) };
    rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build_global()
        .context("thread pool")?;

    let mut paths: Vec<PathBuf> = std::fs::read_dir(&args.images)
        .with_context(|| args.images.display().to_string())?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    paths.retain(|p| p.is_file());
    paths.sort();
    anyhow::ensure!(!paths.is_empty(), "no files in {}", args.images.display());
    let files: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).with_context(|| p.display().to_string()))
        .collect::<Result<_>>()?;
    let bytes: Vec<&[u8]> = (0..args.items)
        .map(|i| files[i % files.len()].as_slice())
        .collect();
    let warm: Vec<&[u8]> = (0..args.warmup)
        .map(|i| files[i % files.len()].as_slice())
        .collect();

    let model_files = ModelFiles::resolve(&args.model)?;
    let model = VisionEmbedder::load(
        &model_files,
        &candle_core::Device::Cpu,
        VisionOptions {
            batch_size: args.batch_size,
            ..Default::default()
        },
    )?;
    if !warm.is_empty() {
        model.embed_images(&warm)?;
    }

    let t = Instant::now();
    let prepared = model.prepare(&bytes);
    let prep_seconds = t.elapsed().as_secs_f64();
    let bad = prepared.iter().filter(|r| r.is_err()).count();
    anyhow::ensure!(bad == 0, "{bad} images failed to decode");
    std::hint::black_box(&prepared);
    drop(prepared);

    let t = Instant::now();
    let vectors = model.embed_images(&bytes)?;
    let seconds = t.elapsed().as_secs_f64();
    std::hint::black_box(&vectors);
    let (h, w) = model.processor().output_size();
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
            "image_files": files.len(),
            "input_size": [h, w],
            "dim": model.dim(),
            "seconds": seconds,
            "items_per_s": vectors.len() as f64 / seconds,
            "prep_seconds": prep_seconds,
            "prep_items_per_s": bytes.len() as f64 / prep_seconds,
            // the peak includes the memory-mapped weight file while the weights are copied
            // out of it at load; the end value is the resident set after the timed runs
            "peak_rss_mb": sift_embed::bench::peak_rss_mb().unwrap_or(f64::NAN),
            "end_rss_mb": sift_embed::bench::current_rss_mb().unwrap_or(f64::NAN),
        })
    );
    Ok(())
}
