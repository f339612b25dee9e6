use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use sift_core::Corpus;
use sift_embed::bench::{BenchContext, BenchInputs, BenchSettings};
use sift_embed::{Precision, Role};
use sift_eval::task1;
use sift_index::{AnnMode, IndexDir};

use crate::models::ModelFlags;
use crate::options::split_list;

#[derive(Subcommand)]
pub enum Cmd {
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
    /// Cross-encoder reranking throughput: (query, passage) pairs scored per second, as a
    /// reranker scores them (each query with `--depth` passages in one call), the tokens per
    /// pair, the tokenising share and peak host memory.
    Rerank(RerankArgs),
}

#[derive(clap::Args)]
#[command(after_help = "Example:\n  \
sift bench index --corpus $SIFT_CRANFIELD --index target/cranfield --dense minilm --json")]
pub struct IndexArgs {
    /// Corpus to index with BM25.
    #[arg(long)]
    corpus: PathBuf,
    /// Comma-separated domains [default: all].
    #[arg(long, value_parser = crate::options::domain_list)]
    domains: Option<String>,
    /// Indexing threads [default: number of cores].
    #[arg(long, value_parser = crate::options::threads)]
    threads: Option<usize>,
    /// An index holding the dense vectors to rebuild HNSW graphs from.
    #[arg(long, requires = "dense")]
    index: Option<PathBuf>,
    /// Dense index name (e.g. minilm).
    #[arg(long, requires = "index")]
    dense: Option<String>,
    /// HNSW maximum connections per node (M).
    #[arg(long, default_value_t = sift_index::HnswParams::default().m, value_parser = crate::options::int_in::<usize>(2, 1024))]
    hnsw_m: usize,
    /// HNSW candidate list size while building.
    #[arg(long, default_value_t = sift_index::HnswParams::default().ef_construction, value_parser = crate::options::int_in::<usize>(1, 100_000))]
    ef_construction: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
sift bench embed --model models/local/all-MiniLM-L6-v2 --batch-size 16,32,64 --json\n  \
sift bench embed --model openai/clip-vit-base-patch32 --modality image --input figures/")]
pub struct EmbedArgs {
    /// Model: a directory in Hugging Face layout, or a hub id / registry alias.
    #[arg(long)]
    model: String,
    /// What to embed: texts, or images (vision-language models).
    #[arg(long, value_enum, default_value = "text")]
    modality: Modality,
    /// Device: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Weights: f32, f16, bf16 or auto (as `sift embed --dtype`; the report says which ran
    /// and the linear layers' kernel).
    #[arg(long, value_enum, default_value = "f32")]
    dtype: Precision,
    /// Comma-separated batch sizes, each measured in turn.
    #[arg(long, default_value = "32")]
    batch_size: String,
    /// Items timed per batch size.
    #[arg(long, default_value_t = 256, value_parser = crate::options::int_in::<usize>(1, 100_000_000))]
    items: usize,
    /// Items embedded, untimed, before each measurement.
    #[arg(long, default_value_t = 32, value_parser = crate::options::int_in::<usize>(0, 1_000_000))]
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

#[derive(clap::Args)]
#[command(
    after_help = "Pairs: query q (file order, cycling) with passages q*depth .. q*depth+depth-1 \
(file order, cycling): pair k is (queries[(k / depth) % Q], passages[k % P]), each query's pairs \
scored in one call. With --concat C, passage i is passages i .. i+C-1 joined by spaces (long \
passages that overflow --max-length). Timed: the calls over the first --items pairs (tokenising \
+ forward + head); before them, one untimed call on the first --warmup pairs. Tokenising alone \
is timed in a separate pass afterwards (prep_seconds).\n\nExample:\n  \
RAYON_NUM_THREADS=2 sift bench rerank --model target/bench-models/ms-marco-minilm-l6-random \
--queries $SIFT_CRANFIELD/queries.jsonl --passages $SIFT_CRANFIELD/corpus.jsonl \
--items 2000 --depth 100 --max-length 512 --json"
)]
pub struct RerankArgs {
    /// Cross-encoder: a directory in Hugging Face layout (BERT / XLM-RoBERTa sequence
    /// classifier, one label) or a hub id.
    #[arg(long)]
    model: String,
    /// Queries, read as `sift embed` reads texts: one per line, or JSONL with "text" (BEIR
    /// queries.jsonl included).
    #[arg(long)]
    queries: PathBuf,
    /// Passages, read the same way (BEIR corpus.jsonl: title + " " + text).
    #[arg(long)]
    passages: PathBuf,
    /// (query, passage) pairs timed.
    #[arg(long, default_value_t = 1000, value_parser = crate::options::int_in::<usize>(1, 100_000_000))]
    items: usize,
    /// Passages per query: the pairs of one score call, as a reranker at this depth makes.
    #[arg(long, default_value_t = 100, value_parser = crate::options::int_in::<usize>(1, 100_000))]
    depth: usize,
    /// Consecutive passages joined into one (1: as read).
    #[arg(long, default_value_t = 1, value_parser = crate::options::int_in::<usize>(1, 1024))]
    concat: usize,
    /// Pairs per forward pass.
    #[arg(long, default_value_t = 32, value_parser = crate::options::int_in::<usize>(1, 65_536))]
    batch_size: usize,
    /// Tokens of a pair, special tokens included [default: the tokenizer's model_max_length,
    /// else the model's positions].
    #[arg(long, value_parser = crate::options::int_in::<usize>(1, 1 << 20))]
    max_length: Option<usize>,
    /// Weights: f32, f16 or bf16 (bf16 on the CPU: the packed bfloat16 kernels; auto is
    /// not accepted here, the report names the kernel that ran).
    #[arg(long, value_enum, default_value = "f32")]
    dtype: Precision,
    /// Device: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Pairs scored, untimed, before the measurement (the first pairs).
    #[arg(long, default_value_t = 32, value_parser = crate::options::int_in::<usize>(0, 1_000_000))]
    warmup: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Modality {
    Text,
    Image,
}

#[derive(clap::Args)]
pub struct SearchArgs {
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
    #[arg(long, default_value_t = 10, value_parser = crate::options::int_in::<usize>(1, 1_000_000))]
    k: usize,
    #[command(flatten)]
    model: ModelFlags,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Search(s) => search(s),
        Cmd::Embed(e) => embed(e),
        Cmd::Index(i) => bench_index(i),
        Cmd::Rerank(r) => rerank(r),
    }
}

/// The (query, passage) pairs of `sift bench rerank`: pair k is
/// `(queries[(k / depth) % Q], passages[k % P])`, passage i being `concat` consecutive
/// passages from i joined by spaces.
fn rerank_pairs(
    queries: &[String],
    passages: &[String],
    n: usize,
    depth: usize,
    concat: usize,
) -> Vec<(String, String)> {
    let p = passages.len();
    (0..n)
        .map(|k| {
            let q = queries[(k / depth) % queries.len()].clone();
            let text = (0..concat)
                .map(|j| passages[(k + j) % p].as_str())
                .collect::<Vec<_>>()
                .join(" ");
            (q, text)
        })
        .collect()
}

fn rerank(a: RerankArgs) -> Result<()> {
    if a.items == 0 || a.depth == 0 || a.concat == 0 || a.batch_size == 0 {
        bail!("--items, --depth, --concat and --batch-size must be positive");
    }
    if a.dtype == Precision::Auto {
        bail!("--dtype: f32, f16 or bf16");
    }
    let texts = |p: &PathBuf| -> Result<Vec<String>> {
        let t: Vec<String> = super::embed::read_inputs(p)?
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        if t.is_empty() {
            bail!("{}: no texts", p.display());
        }
        Ok(t)
    };
    let queries = texts(&a.queries)?;
    let passages = texts(&a.passages)?;
    let device = sift_embed::select_device(a.device.parse()?)?;
    let load_start = Instant::now();
    let model = sift_embed::CrossEncoder::load(
        &a.model,
        &device,
        &sift_embed::CrossEncoderOptions {
            max_length: a.max_length,
            dtype: a.dtype.dtype(),
            batch: a.batch_size,
        },
    )?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    let owned = rerank_pairs(
        &queries,
        &passages,
        a.items.max(a.warmup),
        a.depth,
        a.concat,
    );
    let pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(q, p)| (q.as_str(), p.as_str()))
        .collect();
    let (timed, warm) = (&pairs[..a.items], &pairs[..a.warmup]);
    if !warm.is_empty() {
        model.score(warm)?;
    }
    let start = Instant::now();
    let mut scores = Vec::with_capacity(timed.len());
    for call in timed.chunks(a.depth) {
        scores.extend(model.score(call)?);
    }
    let seconds = start.elapsed().as_secs_f64();
    // tokenising alone, in a second pass over the same calls
    let start = Instant::now();
    let mut tokens = 0usize;
    let mut full = 0usize;
    for call in timed.chunks(a.depth) {
        for (ids, _) in model.tokenize_pairs(call)? {
            tokens += ids.len();
            full += usize::from(ids.len() >= model.max_length());
        }
    }
    let prep_seconds = start.elapsed().as_secs_f64();
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let n = timed.len();
    let out = serde_json::json!({
        "engine": "sift",
        "version": env!("CARGO_PKG_VERSION"),
        "model": a.model,
        "items": n,
        "batch_size": a.batch_size,
        "threads": threads,
        "warmup": a.warmup,
        "depth": a.depth,
        "concat": a.concat,
        "max_length": model.max_length(),
        "device": a.device,
        "dtype": a.dtype.name(),
        "linear_kernel": a.dtype.linear_kernel(&device),
        "load_seconds": load_seconds,
        "seconds": seconds,
        "items_per_s": n as f64 / seconds,
        "prep_seconds": prep_seconds,
        "model_seconds": (seconds - prep_seconds).max(0.0),
        "tokens": tokens,
        "mean_tokens": tokens as f64 / n as f64,
        "truncated_share": full as f64 / n as f64,
        "first_scores": scores.iter().take(8).collect::<Vec<_>>(),
        "peak_rss_mb": sift_embed::bench::peak_rss_mb(),
    });
    if a.json {
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    println!(
        "{} ({}, {}, linear layers {}, {threads} threads, max length {}): {n} pairs at depth {}, \
         batch {}",
        model.name(),
        a.device,
        a.dtype.name(),
        a.dtype.linear_kernel(&device),
        model.max_length(),
        a.depth,
        a.batch_size
    );
    println!(
        "{seconds:.2} s = {:.1} pairs/s; {:.1} tokens per pair ({:.0}% at the max length); \
         tokenising alone {prep_seconds:.2} s ({:.1}%)",
        n as f64 / seconds,
        tokens as f64 / n as f64,
        100.0 * full as f64 / n as f64,
        100.0 * prep_seconds / seconds
    );
    if let Some(mb) = sift_embed::bench::peak_rss_mb() {
        println!("peak memory: {mb:.0} MB");
    }
    let hours = 158_500.0 / (n as f64 / seconds) / 3600.0;
    println!("MM-BRIGHT-scale reranking (1,585 queries x depth 100 = 158,500 pairs): {hours:.2} h");
    Ok(())
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
                dense.ids(),
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

fn embed(a: EmbedArgs) -> Result<()> {
    let sizes: Vec<usize> = split_list(&Some(a.batch_size.clone()))
        .iter()
        .map(|s| s.parse::<usize>().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .context("--batch-size: comma-separated positive integers")?;
    if sizes.is_empty() || a.items == 0 {
        bail!("--batch-size and --items must be positive");
    }
    let flags = ModelFlags {
        device: a.device.clone(),
        batch_size: *sizes.iter().max().expect("non-empty"),
        dtype: a.dtype,
        query_instruction: None,
        profile: sift_embed::Profile::Default,
    };
    let load_start = Instant::now();
    let model = flags.load(&a.model)?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    if a.modality == Modality::Image && !model.capabilities().images {
        bail!(
            "{} is a text model: --modality image needs a vision-language model",
            a.model
        );
    }
    let need = a.items + a.warmup;
    let inputs = match (a.modality, &a.input) {
        (Modality::Text, Some(p)) => BenchInputs::Texts(
            super::embed::read_inputs(p)?
                .into_iter()
                .map(|(_, t)| t)
                .collect(),
        ),
        (Modality::Text, None) => BenchInputs::Texts(sift_embed::bench::generated_texts(need)),
        (Modality::Image, Some(p)) => BenchInputs::Images(
            super::embed::image_inputs(p)?
                .iter()
                .map(|(_, f)| Ok(sift_core::read_regular_file(f, 1 << 30)?))
                .collect::<Result<_>>()?,
        ),
        (Modality::Image, None) => BenchInputs::Images(sift_embed::bench::generated_images(need)),
    };
    let out = sift_embed::bench::run(
        &model,
        &inputs,
        &BenchSettings {
            batch_sizes: sizes,
            items: a.items,
            warmup: a.warmup,
        },
        &BenchContext {
            device: a.device.clone(),
            load_seconds,
            inputs: if a.input.is_some() {
                "file"
            } else {
                "generated"
            },
        },
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} ({}, {}, {}, linear layers {}, {} threads), {} {} items per batch size\n",
        out.model,
        out.modality,
        out.device,
        out.dtype,
        out.linear_kernel,
        out.threads,
        a.items,
        out.inputs
    );
    println!(
        "| batch | items/s | batch p50 (ms) | batch p99 (ms) | preparation share | model busy |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for r in &out.results {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1}% | {:.1}% |",
            r.batch_size,
            r.items_per_s,
            r.batch_latency_ms_p50,
            r.batch_latency_ms_p99,
            100.0 * r.prepare_share,
            100.0 * r.model_busy
        );
    }
    println!(
        "\nbest batch size: {} ({:.1} items/s)",
        out.best.batch_size, out.best.items_per_s
    );
    if let Some(mb) = out.peak_rss_mb {
        println!("peak memory: {mb:.0} MB");
    }
    if let Some(mb) = out.gpu_memory_mb {
        println!("peak GPU memory: {mb:.0} MB");
    }
    if let Some(pct) = out.gpu_utilization_pct {
        println!("mean GPU utilisation: {pct:.0}%");
    }
    if let Some(h) = out.mm_bright_passages_hours {
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
    let model = a.model.load(&info.spec)?;
    let task = task1(&corpus, &domain, &a.split)?;
    if task.queries.is_empty() {
        bail!("domain {domain} has no judged queries");
    }
    let texts: Vec<&str> = task.queries.iter().map(|q| q.query.as_str()).collect();
    let qv = model.embed_texts(&texts, Role::Query)?;
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
