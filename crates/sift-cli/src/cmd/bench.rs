use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use sift_core::Corpus;
use sift_embed::Kind;
use sift_eval::task1;
use sift_index::{AnnMode, IndexDir};

use crate::models::{ModelFlags, load_text_model};
use crate::options::split_list;

/// Measure search speed and quality of an index.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// HNSW against exact search on a dense index: recall@k and queries/s for each
    /// ef_search, with the corpus's queries (the recall/QPS curve).
    Search(SearchArgs),
    /// Embedding throughput of a model on this machine: items/s, per-batch latency, the time
    /// split between input preparation (tokenising, or decoding + preprocessing images) and
    /// the model, peak host memory and (with `--device cuda[:N]` and `nvidia-smi`) peak GPU
    /// memory; several batch sizes to find the best.
    Embed(EmbedArgs),
    /// Build rates: BM25 indexing of a corpus (passages/s, into a scratch directory), and
    /// HNSW graph building from the stored vectors of a dense index (vectors/s).
    Index(IndexArgs),
}

#[derive(clap::Args)]
#[command(after_help = "Example:\n  \
sift bench index --corpus ../shared/data/cranfield --index target/cranfield --dense minilm --json")]
struct IndexArgs {
    /// Corpus to index with BM25.
    #[arg(long)]
    corpus: PathBuf,
    /// Comma-separated domains [default: all].
    #[arg(long)]
    domains: Option<String>,
    /// Indexing threads [default: number of cores].
    #[arg(long)]
    threads: Option<usize>,
    /// An index holding the dense vectors to rebuild HNSW graphs from.
    #[arg(long, requires = "dense")]
    index: Option<PathBuf>,
    /// Dense index name (e.g. minilm).
    #[arg(long, requires = "index")]
    dense: Option<String>,
    /// HNSW maximum connections per node (M).
    #[arg(long, default_value_t = sift_index::HnswParams::default().m)]
    hnsw_m: usize,
    /// HNSW candidate list size while building.
    #[arg(long, default_value_t = sift_index::HnswParams::default().ef_construction)]
    ef_construction: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
sift bench embed --model models/local/all-MiniLM-L6-v2 --batch-size 16,32,64 --json\n  \
sift bench embed --model openai/clip-vit-base-patch32 --modality image --input figures/")]
struct EmbedArgs {
    /// Model: a directory in Hugging Face layout, or a hub id / registry alias.
    #[arg(long)]
    model: String,
    /// What to embed: texts, or images (vision-language models).
    #[arg(long, value_enum, default_value = "text")]
    modality: Modality,
    /// Device: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Weights and activations: f32, f16 or bf16 (half precision is meant for GPUs).
    #[arg(long, value_enum, default_value = "f32")]
    dtype: BenchDtype,
    /// Comma-separated batch sizes, each measured in turn.
    #[arg(long, default_value = "32")]
    batch_size: String,
    /// Items timed per batch size.
    #[arg(long, default_value_t = 256)]
    items: usize,
    /// Items embedded, untimed, before each measurement.
    #[arg(long, default_value_t = 32)]
    warmup: usize,
    /// Inputs, read as `sift embed` reads them: for text a file (one text per line, or JSONL
    /// with "text", BEIR corpus.jsonl included); for images a folder or a file listing image
    /// paths. Without it, inputs are generated: texts of 20 to 200 words, 800x600 PNG images.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Modality {
    Text,
    Image,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum BenchDtype {
    F32,
    F16,
    Bf16,
}

#[derive(clap::Args)]
struct SearchArgs {
    /// Index directory.
    #[arg(long)]
    index: PathBuf,
    /// Corpus the index was built from (its queries are used).
    #[arg(long)]
    corpus: PathBuf,
    /// Dense index name (e.g. minilm).
    #[arg(long)]
    dense: String,
    /// Domain [default: the first indexed].
    #[arg(long)]
    domain: Option<String>,
    /// Qrels split of a BEIR corpus.
    #[arg(long, default_value = "test")]
    split: String,
    /// Comma-separated ef_search values.
    #[arg(long, default_value = "16,32,64,128,256")]
    ef: String,
    /// Neighbours compared.
    #[arg(long, default_value_t = 10)]
    k: usize,
    #[command(flatten)]
    model: ModelFlags,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    match a.command {
        Cmd::Search(s) => search(s),
        Cmd::Embed(e) => embed(e),
        Cmd::Index(i) => bench_index(i),
    }
}

fn bench_index(a: IndexArgs) -> Result<()> {
    let corpus = Corpus::open(&a.corpus)?;
    let domains = corpus.select_domains(&split_list(&a.domains))?;
    let defaults = sift_index::BuildOptions::default();
    let options = sift_index::BuildOptions {
        threads: a.threads.unwrap_or(defaults.threads).max(1),
        ..defaults
    };
    let scratch = tempfile::tempdir().context("creating a scratch directory")?;
    let start = Instant::now();
    let built = IndexDir::build(
        scratch.path().join("bm25"),
        &corpus,
        &domains,
        &options,
        &[],
        &sift_index::NoProgress,
    )?;
    let bm25_seconds = start.elapsed().as_secs_f64();
    let passages: u64 = built.manifest().domains.values().map(|d| d.passages).sum();
    let mut out = serde_json::json!({
        "corpus": a.corpus,
        "domains": domains,
        "threads": options.threads,
        "bm25": {
            "passages": passages,
            "seconds": bm25_seconds,
            "passages_per_s": passages as f64 / bm25_seconds,
        },
    });
    if let (Some(index), Some(name)) = (&a.index, &a.dense) {
        let index = IndexDir::open(index)?;
        let (slug, info) = index.dense_info(name)?;
        let params = sift_index::HnswParams {
            m: a.hnsw_m,
            ef_construction: a.ef_construction,
        };
        let (mut count, mut seconds) = (0usize, 0f64);
        for domain in index.manifest().domains.keys() {
            let dense = index.dense(slug, domain)?;
            let mut vectors = Vec::with_capacity(dense.len() * info.dim);
            for ord in 0..dense.len() as u32 {
                vectors.extend_from_slice(dense.vector(ord));
            }
            let start = Instant::now();
            sift_index::write_dense(
                &scratch.path().join("hnsw").join(domain),
                &info.model,
                info.dim,
                &vectors,
                sift_index::VectorDtype::F32,
                params,
            )?;
            seconds += start.elapsed().as_secs_f64();
            count += dense.len();
        }
        out["hnsw"] = serde_json::json!({
            "dense": slug,
            "dim": info.dim,
            "m": params.m,
            "ef_construction": params.ef_construction,
            "vectors": count,
            "seconds": seconds,
            "vectors_per_s": count as f64 / seconds,
            "includes": "graph insertion, the reachability check, writing vectors and graph",
        });
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "BM25: {passages} passages in {bm25_seconds:.2}s = {:.0} passages/s ({} threads)",
            passages as f64 / bm25_seconds,
            options.threads
        );
        if let Some(h) = out.get("hnsw") {
            println!(
                "HNSW dense:{} (M {}, ef_construction {}): {} vectors in {:.2}s = {:.0} vectors/s",
                h["dense"].as_str().unwrap_or(""),
                h["m"],
                h["ef_construction"],
                h["vectors"],
                h["seconds"].as_f64().unwrap_or(f64::NAN),
                h["vectors_per_s"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    Ok(())
}

/// Samples the used memory of an NVIDIA GPU with `nvidia-smi` while a benchmark runs, and
/// keeps the largest value (MB of the whole device, this process's allocations included).
/// Nothing is sampled for other devices or when `nvidia-smi` is not there.
struct GpuMemory {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Option<f64>>>,
}

impl GpuMemory {
    fn start(device: &str) -> GpuMemory {
        let index = cuda_index(device);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handle = index.map(|index| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak: Option<f64> = None;
                loop {
                    let used = std::process::Command::new("nvidia-smi")
                        .args([
                            "--query-gpu=memory.used",
                            "--format=csv,noheader,nounits",
                            &format!("--id={index}"),
                        ])
                        .output()
                        .ok()
                        .filter(|o| o.status.success())
                        .and_then(|o| {
                            String::from_utf8_lossy(&o.stdout)
                                .trim()
                                .parse::<f64>()
                                .ok()
                        });
                    match used {
                        Some(u) => peak = Some(peak.map_or(u, |p: f64| p.max(u))),
                        None => return peak,
                    }
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return peak;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
            })
        });
        GpuMemory { stop, handle }
    }

    /// Stops sampling: the peak in MB, if anything was sampled.
    fn finish(mut self) -> Option<f64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok().flatten())
    }
}

/// The GPU index of `cuda` (0) or `cuda:N`; None for other devices.
fn cuda_index(device: &str) -> Option<u32> {
    match device.strip_prefix("cuda") {
        Some("") => Some(0),
        Some(rest) => rest.strip_prefix(':').and_then(|n| n.parse().ok()),
        None => None,
    }
}

/// Peak resident memory of this process (MB), from /proc; None elsewhere.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Deterministic texts of 20 to 200 words.
fn generated_texts(n: usize) -> Vec<String> {
    const WORDS: [&str; 24] = [
        "pressure",
        "boundary",
        "layer",
        "flow",
        "the",
        "of",
        "heat",
        "transfer",
        "shock",
        "wave",
        "laminar",
        "turbulent",
        "plate",
        "velocity",
        "and",
        "in",
        "a",
        "model",
        "retrieval",
        "image",
        "question",
        "answer",
        "theory",
        "measured",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let len = 20 + (next() % 181) as usize;
            (0..len)
                .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Deterministic 800x600 PNG images (gradients and stripes, so encoders do real work).
fn generated_images(n: usize) -> Result<Vec<Vec<u8>>> {
    (0..n.min(64))
        .map(|k| {
            let img = image::RgbImage::from_fn(800, 600, |x, y| {
                let k = k as u32;
                image::Rgb([
                    ((x * 255 / 800 + k * 37) % 256) as u8,
                    ((y * 255 / 600 + k * 91) % 256) as u8,
                    (((x / (8 + k % 16)) + (y / 12)) % 2 * 200) as u8,
                ])
            });
            let mut out = std::io::Cursor::new(Vec::new());
            img.write_to(&mut out, image::ImageFormat::Png)?;
            Ok(out.into_inner())
        })
        .collect()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn embed(a: EmbedArgs) -> Result<()> {
    use crate::models::{Images, Model, load_model_as};
    let sizes: Vec<usize> = split_list(&Some(a.batch_size.clone()))
        .iter()
        .map(|s| s.parse::<usize>().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .context("--batch-size: comma-separated positive integers")?;
    if sizes.is_empty() || a.items == 0 {
        bail!("--batch-size and --items must be positive");
    }
    let dtype = match a.dtype {
        BenchDtype::F32 => candle_core::DType::F32,
        BenchDtype::F16 => candle_core::DType::F16,
        BenchDtype::Bf16 => candle_core::DType::BF16,
    };
    let flags = ModelFlags {
        device: a.device.clone(),
        batch_size: *sizes.iter().max().expect("non-empty"),
        query_instruction: None,
    };
    let load_start = Instant::now();
    let model = load_model_as(&a.model, &flags, dtype)?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    if a.modality == Modality::Image && !model.has_images() {
        bail!(
            "{} is a text model: --modality image needs a vision-language model",
            a.model
        );
    }
    let need = a.items + a.warmup;
    let (texts, images): (Vec<String>, Vec<Vec<u8>>) = match (a.modality, &a.input) {
        (Modality::Text, Some(p)) => (
            super::embed::read_inputs(p)?
                .into_iter()
                .map(|(_, t)| t)
                .collect(),
            Vec::new(),
        ),
        (Modality::Text, None) => (generated_texts(need), Vec::new()),
        (Modality::Image, Some(p)) => (
            Vec::new(),
            super::embed::image_inputs(p)?
                .iter()
                .map(|(_, f)| std::fs::read(f).with_context(|| format!("reading {}", f.display())))
                .collect::<Result<_>>()?,
        ),
        (Modality::Image, None) => (Vec::new(), generated_images(need)?),
    };
    let pool = if a.modality == Modality::Text {
        texts.len()
    } else {
        images.len()
    };
    if pool == 0 {
        bail!("no inputs");
    }
    // (preparation seconds, model seconds) of one batch of the items at `idx`
    let run_batch = |idx: &[usize]| -> Result<(f64, f64)> {
        let t0 = Instant::now();
        match (&model, a.modality) {
            (Model::Text(m), _) => {
                let batch: Vec<&str> = idx.iter().map(|&i| texts[i % pool].as_str()).collect();
                let ids = m.tokenize(&batch, Kind::Passage)?;
                let t1 = Instant::now();
                m.embed_tokens(&ids)?;
                Ok(((t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64()))
            }
            (Model::Vision(m), Modality::Text) => {
                let batch: Vec<&str> = idx.iter().map(|&i| texts[i % pool].as_str()).collect();
                let ids = m.tokenize(&batch)?;
                let t1 = Instant::now();
                m.text_features(&ids)?
                    .to_dtype(candle_core::DType::F32)?
                    .to_vec2::<f32>()?;
                Ok(((t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64()))
            }
            (Model::Gme(m), Modality::Text) => {
                let batch: Vec<&str> = idx.iter().map(|&i| texts[i % pool].as_str()).collect();
                // tokenising is part of the forward pass here (it is a small share)
                m.embed_texts(&batch, false)?;
                Ok((0.0, t0.elapsed().as_secs_f64()))
            }
            (_, Modality::Image) => {
                let m = Images::of(&model).expect("checked above");
                let batch: Vec<&[u8]> = idx.iter().map(|&i| images[i % pool].as_slice()).collect();
                let prepared = m
                    .prepare(&batch)
                    .into_iter()
                    .collect::<std::result::Result<Vec<_>, String>>()
                    .map_err(|e| anyhow::anyhow!("undecodable input image: {e}"))?;
                let t1 = Instant::now();
                m.embed_prepared(&prepared)?;
                Ok(((t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64()))
            }
        }
    };
    let gpu_memory = GpuMemory::start(&a.device);
    let mut results = Vec::new();
    for &b in &sizes {
        let warm: Vec<usize> = (0..a.warmup).collect();
        for chunk in warm.chunks(b) {
            run_batch(chunk)?;
        }
        let timed: Vec<usize> = (a.warmup..a.warmup + a.items).collect();
        let (mut prep, mut fwd, mut lat) = (0.0, 0.0, Vec::new());
        let start = Instant::now();
        for chunk in timed.chunks(b) {
            let (p, m) = run_batch(chunk)?;
            prep += p;
            fwd += m;
            lat.push((p + m) * 1000.0);
        }
        let seconds = start.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        results.push(serde_json::json!({
            "batch_size": b,
            "items": a.items,
            "seconds": seconds,
            "items_per_s": a.items as f64 / seconds,
            "prepare_seconds": prep,
            "model_seconds": fwd,
            "prepare_share": prep / (prep + fwd),
            "batch_latency_ms_p50": percentile(&lat, 0.5),
            "batch_latency_ms_p99": percentile(&lat, 0.99),
        }));
    }
    let best = results
        .iter()
        .max_by(|x, y| {
            x["items_per_s"]
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&y["items_per_s"].as_f64().unwrap_or(0.0))
        })
        .cloned()
        .expect("one result per batch size");
    let best_rate = best["items_per_s"].as_f64().unwrap_or(f64::NAN);
    // MM-BRIGHT's corpus: about 2.5 million passages (protocol notes)
    let mm_bright_hours = (a.modality == Modality::Text).then(|| 2_500_000.0 / best_rate / 3600.0);
    let out = serde_json::json!({
        "engine": "sift",
        "version": env!("CARGO_PKG_VERSION"),
        "model": model.name(),
        "modality": format!("{:?}", a.modality).to_lowercase(),
        "device": a.device,
        "dtype": format!("{dtype:?}").to_lowercase(),
        "threads": candle_core::utils::get_num_threads(),
        "inputs": if a.input.is_some() { "file" } else { "generated" },
        "load_seconds": load_seconds,
        "results": results,
        "best": best,
        "peak_rss_mb": peak_rss_mb(),
        "gpu_memory_mb": gpu_memory.finish(),
        "mm_bright_passages_hours": mm_bright_hours,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} ({}, {}, {:?}, {} threads), {} {} items per batch size\n",
        model.name(),
        out["modality"].as_str().unwrap_or(""),
        a.device,
        dtype,
        out["threads"],
        a.items,
        out["inputs"].as_str().unwrap_or("")
    );
    println!("| batch | items/s | batch p50 (ms) | batch p99 (ms) | preparation share |");
    println!("|---:|---:|---:|---:|---:|");
    for r in &out["results"].as_array().cloned().unwrap_or_default() {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1}% |",
            r["batch_size"],
            r["items_per_s"].as_f64().unwrap_or(f64::NAN),
            r["batch_latency_ms_p50"].as_f64().unwrap_or(f64::NAN),
            r["batch_latency_ms_p99"].as_f64().unwrap_or(f64::NAN),
            100.0 * r["prepare_share"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!(
        "\nbest batch size: {} ({best_rate:.1} items/s)",
        best["batch_size"]
    );
    if let Some(mb) = peak_rss_mb() {
        println!("peak memory: {mb:.0} MB");
    }
    if let Some(h) = mm_bright_hours {
        println!("MM-BRIGHT's ~2.5M passages at this rate: {h:.1} h");
    }
    Ok(())
}

fn search(a: SearchArgs) -> Result<()> {
    let index = IndexDir::open(&a.index)?;
    let corpus = Corpus::open(&a.corpus)?;
    let domain = match &a.domain {
        Some(d) => d.clone(),
        None => index
            .manifest()
            .domains
            .keys()
            .next()
            .context("empty index")?
            .clone(),
    };
    let (slug, info) = index.dense_info(&a.dense)?;
    let dense = index.dense(slug, &domain)?;
    let model = load_text_model(&info.spec, &a.model)?;
    let task = task1(&corpus, &domain, &a.split)?;
    if task.queries.is_empty() {
        bail!("domain {domain} has no judged queries");
    }
    let texts: Vec<&str> = task.queries.iter().map(|q| q.query.as_str()).collect();
    let qv = model.embed(&texts, Kind::Query)?;
    let t = Instant::now();
    let exact: Vec<_> = qv
        .iter()
        .map(|q| dense.search(q, a.k, AnnMode::Exact, &[]))
        .collect::<Result<_, _>>()?;
    let exact_qps = qv.len() as f64 / t.elapsed().as_secs_f64();
    let mut rows = Vec::new();
    for ef in split_list(&Some(a.ef.clone())) {
        let ef: usize = ef.parse().with_context(|| format!("--ef {ef}"))?;
        let t = Instant::now();
        let approx: Vec<_> = qv
            .iter()
            .map(|q| dense.search(q, a.k, AnnMode::Hnsw(ef), &[]))
            .collect::<Result<_, _>>()?;
        let qps = qv.len() as f64 / t.elapsed().as_secs_f64();
        let (mut found, mut total) = (0usize, 0usize);
        for (e, h) in exact.iter().zip(&approx) {
            total += e.len();
            found += e
                .iter()
                .filter(|x| h.iter().any(|y| y.ord == x.ord))
                .count();
        }
        rows.push(serde_json::json!({"ef_search": ef, "recall": found as f64 / total.max(1) as f64, "qps": qps}));
    }
    let out = serde_json::json!({
        "index": a.index, "dense": slug, "domain": domain, "vectors": dense.len(),
        "queries": qv.len(), "k": a.k, "exact_qps": exact_qps, "hnsw": rows,
        "hnsw_params": info.hnsw, "single_thread": true,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "dense:{slug} on {domain}: {} vectors, {} queries, recall@{} of HNSW against exact search (one thread)",
            dense.len(),
            qv.len(),
            a.k
        );
        println!(
            "| ef_search | recall@{} | queries/s |\n|---:|---:|---:|",
            a.k
        );
        println!("| exact | 1.0000 | {exact_qps:.0} |");
        for r in &rows {
            println!(
                "| {} | {:.4} | {:.0} |",
                r["ef_search"],
                r["recall"].as_f64().unwrap_or(0.0),
                r["qps"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_memory_is_sampled_for_cuda_devices_only() {
        assert_eq!(cuda_index("cuda"), Some(0));
        assert_eq!(cuda_index("cuda:3"), Some(3));
        assert_eq!(cuda_index("cuda:x"), None);
        assert_eq!(cuda_index("cpu"), None);
        assert_eq!(cuda_index("metal"), None);
        assert_eq!(GpuMemory::start("cpu").finish(), None);
    }
}
