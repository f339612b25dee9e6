//! Embeds texts with a BERT sentence-embedding checkpoint (sentence-transformers layout:
//! config.json, model.safetensors, tokenizer.json, sentence_bert_config.json) through either
//! Sift's embedder or candle-transformers' `BertModel`, on the CPU in f32: one timed run per
//! process, printed as one JSON object with the keys `eval/peers/st_embed_peer.py` prints
//! (engine, version, model, items, batch_size, threads, warmup, seconds, items_per_s,
//! peak_rss_mb, plus max_seq_length and, for Sift, linear_kernel). `--save-npy` writes the
//! vectors (float32, one row per text in input order) for `benches/bert_vs_candle.py`'s
//! parity check.
//!
//! - `--engine sift`: `sift_embed::Embedder::load(model)` at `Precision::F32` with
//!   `batch_size`, then `Embedder::embed_texts(texts, Role::Passage)`: Sift's tokenisation
//!   (truncated at sentence_bert_config.json's max_seq_length), texts sorted by length,
//!   batches packed without padding, mean pooling, L2 normalisation.
//! - `--engine candle-transformers`: the same tokenizer.json through the `tokenizers` crate,
//!   truncated at `--max-seq-len` (default: sentence_bert_config.json's max_seq_length) with
//!   no padding of its own; texts sorted by token count, longest first (as Sift and
//!   sentence-transformers order them), each batch padded to its longest text;
//!   `candle_transformers::models::bert::BertModel::forward(ids, token types (zeros),
//!   attention mask)`; mean pooling over the attention mask and L2 normalisation, as
//!   sentence-transformers' Pooling and Normalize modules do. The checkpoint's tensor names
//!   may or may not start with `bert.`: `BertModel::load` accepts both.
//!
//! Timed (wall clock, one run): tokenisation, the forward passes, pooling and normalisation
//! of the first `--items` texts, after one untimed warm-up embedding of the first `--warmup`
//! texts with the same settings. Not timed: loading the model and reading the texts.
//! Threads: rayon's global pool (candle's CPU kernels and gemm use it) and
//! RAYON_NUM_THREADS are set to `--threads` before anything runs.
//!
//! Texts: JSONL; a line with "_id" or "title" is a BEIR corpus record and its text is
//! `title + " " + text` (as eval/peers/measure.py reads it), else its "text" field.
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use clap::{Parser, ValueEnum};
use tokenizers::{Tokenizer, TruncationParams};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Engine {
    Sift,
    CandleTransformers,
}

#[derive(Parser)]
struct Args {
    #[arg(long, value_enum)]
    engine: Engine,
    /// Model directory (sentence-transformers layout).
    #[arg(long)]
    model: PathBuf,
    /// JSONL texts or a BEIR corpus.jsonl.
    #[arg(long)]
    texts: PathBuf,
    /// Embed the first N texts (default: all).
    #[arg(long)]
    items: Option<usize>,
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Texts in the untimed warm-up embedding.
    #[arg(long, default_value_t = 64)]
    warmup: usize,
    /// candle-transformers' truncation (default: sentence_bert_config.json's max_seq_length,
    /// else 512); Sift reads the same file itself.
    #[arg(long)]
    max_seq_len: Option<usize>,
    /// Write the vectors of the timed run here (float32 .npy, input order).
    #[arg(long)]
    save_npy: Option<PathBuf>,
    /// Print JSON (always on; kept for the driver's command line).
    #[arg(long)]
    json: bool,
}

fn load_texts(path: &Path) -> Result<Vec<String>> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut texts = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{}:{}", path.display(), n + 1))?;
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        if v.get("_id").is_some() || v.get("title").is_some() {
            texts.push(format!("{} {}", field("title"), field("text")));
        } else if let Some(t) = v.get("text").and_then(|x| x.as_str()) {
            texts.push(t.to_string());
        } else {
            bail!("{}:{}: no \"text\" field", path.display(), n + 1);
        }
    }
    Ok(texts)
}

fn write_npy(path: &Path, rows: &[Vec<f32>]) -> Result<()> {
    let dim = rows.first().map_or(0, Vec::len);
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        rows.len(),
        dim
    );
    // magic (6) + version (2) + header length (2) + header + '\n', a multiple of 64
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(b"\x93NUMPY\x01\x00")?;
    out.write_all(&(header.len() as u16).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    for r in rows {
        for x in r {
            out.write_all(&x.to_le_bytes())?;
        }
    }
    out.flush()?;
    Ok(())
}

/// sentence_bert_config.json's max_seq_length, if the file has one.
fn st_max_seq_len(model: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(model.join("sentence_bert_config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("max_seq_length")?.as_u64().map(|n| n as usize)
}

/// candle-transformers' BERT with the tokenizer, pooling and normalisation around it.
struct CandleBert {
    model: BertModel,
    tokenizer: Tokenizer,
    batch_size: usize,
    device: Device,
}

impl CandleBert {
    fn load(dir: &Path, max_seq_len: usize, batch_size: usize) -> Result<Self> {
        let device = Device::Cpu;
        let config: Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
        // SAFETY: the weights file is not modified while the model is loaded (memory-mapped
        // as candle's examples load it).
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[dir.join("model.safetensors")],
                DType::F32,
                &device,
            )?
        };
        let model = BertModel::load(vb, &config)?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| anyhow::anyhow!("tokenizer.json: {e}"))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_seq_len,
                ..Default::default()
            }))
            .map_err(|e| anyhow::anyhow!("truncation: {e}"))?;
        tokenizer.with_padding(None);
        Ok(CandleBert {
            model,
            tokenizer,
            batch_size,
            device,
        })
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let mut out = vec![Vec::new(); ids.len()];
        for chunk in order.chunks(self.batch_size.max(1)) {
            let len = chunk.iter().map(|&i| ids[i].len()).max().unwrap_or(1);
            let mut flat = vec![0u32; chunk.len() * len];
            let mut mask = vec![0f32; chunk.len() * len];
            for (row, &i) in chunk.iter().enumerate() {
                flat[row * len..row * len + ids[i].len()].copy_from_slice(ids[i]);
                mask[row * len..row * len + ids[i].len()].fill(1.0);
            }
            let input = Tensor::from_vec(flat, (chunk.len(), len), &self.device)?;
            let mask = Tensor::from_vec(mask, (chunk.len(), len), &self.device)?;
            let types = input.zeros_like()?;
            let hidden = self.model.forward(&input, &types, Some(&mask))?;
            // mean over the unmasked tokens, then unit length
            let summed = hidden.broadcast_mul(&mask.unsqueeze(2)?)?.sum(1)?;
            let counts = mask.sum_keepdim(1)?;
            let mean = summed.broadcast_div(&counts)?;
            let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
            let unit = mean.broadcast_div(&norm)?.to_vec2::<f32>()?;
            for (&i, v) in chunk.iter().zip(unit) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

fn main() -> Result<()> {
    let a = Args::parse();
    // candle's CPU kernels read the thread count from RAYON_NUM_THREADS
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", a.threads.to_string()) };
    rayon::ThreadPoolBuilder::new()
        .num_threads(a.threads)
        .build_global()
        .ok();
    let texts = load_texts(&a.texts)?;
    let n = a.items.unwrap_or(texts.len());
    if n < 1 || n > texts.len() {
        bail!(
            "--items {n}: {} has {} texts",
            a.texts.display(),
            texts.len()
        );
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let timed = &refs[..n];
    let warm = &refs[..a.warmup.min(refs.len())];
    let max_seq_len = a.max_seq_len.or(st_max_seq_len(&a.model)).unwrap_or(512);
    let model_spec = a.model.to_str().context("model path is not UTF-8")?;

    let (engine, version, kernel, max_len, vectors, seconds) = match a.engine {
        Engine::Sift => {
            let options = sift_embed::EmbedderOptions {
                dtype: sift_embed::Precision::F32,
                batch_size: Some(a.batch_size),
                ..Default::default()
            };
            let embedder = sift_embed::Embedder::load(model_spec, &options)?;
            let role = sift_embed::Role::Passage;
            if !warm.is_empty() {
                embedder.embed_texts(warm, role)?;
            }
            let start = Instant::now();
            let v = embedder.embed_texts(timed, role)?;
            let seconds = start.elapsed().as_secs_f64();
            let kernel = embedder.linear_kernel();
            let max_len = embedder.max_text_tokens();
            (
                "sift",
                env!("CARGO_PKG_VERSION"),
                Some(kernel),
                max_len,
                v,
                seconds,
            )
        }
        Engine::CandleTransformers => {
            let model = CandleBert::load(&a.model, max_seq_len, a.batch_size)?;
            if !warm.is_empty() {
                model.embed(warm)?;
            }
            let start = Instant::now();
            let v = model.embed(timed)?;
            let seconds = start.elapsed().as_secs_f64();
            let version = "0.11.1";
            (
                "candle-transformers",
                version,
                None,
                max_seq_len,
                v,
                seconds,
            )
        }
    };
    if let Some(path) = &a.save_npy {
        write_npy(path, &vectors)?;
    }
    let out = serde_json::json!({
        "engine": engine,
        "version": version,
        "model": a.model.display().to_string(),
        "items": n,
        "batch_size": a.batch_size,
        "threads": a.threads,
        "warmup": warm.len(),
        "max_seq_length": max_len,
        "dtype": "float32",
        "linear_kernel": kernel,
        "seconds": seconds,
        "items_per_s": n as f64 / seconds,
        "peak_rss_mb": sift_embed::bench::peak_rss_mb().unwrap_or(f64::NAN),
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
