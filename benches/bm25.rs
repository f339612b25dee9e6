//! BM25 indexing and search throughput on a corpus (Cranfield by default; any layout `sift`
//! reads, the first domain).
//!
//! One process = one measured round, printed as one JSON object, so that
//! `benches/bm25_vs_bm25s.py` can alternate it with the bm25s peer in the same run and
//! compare medians. Timed regions (each preceded by an untimed warm-up of the same work):
//! - index: `IndexDir::build` from the corpus files on disk to a committed, merged index
//!   (read + parse corpus.jsonl, analyse, index, commit, manifest);
//! - batch search: analyse + score + top-k of every query on a pool of `--threads` threads;
//! - latency: each query alone on one thread (analyse + score + top-k), p50 / p99.
//!
//! Usage: cargo bench --bench bm25 -- --corpus "$SIFT_CRANFIELD" --threads 2 --json
//! With `--index DIR` a built index (`sift index`) is searched instead of building one (no
//! index timing); `--repeat N` reports the median of N timed batches
//! (`benches/bm25_search_338k.py` runs it that way).
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use rayon::prelude::*;
use sift_core::Corpus;
use sift_eval::{Run, RunEntry, score_run, task1};
use sift_index::{BuildOptions, IndexDir, NoProgress};

#[derive(Parser)]
struct Args {
    /// BEIR corpus directory (cargo runs benches from the crate directory: pass an absolute
    /// path) [default: $SIFT_CRANFIELD, the Cranfield collection].
    #[arg(long, env = "SIFT_CRANFIELD")]
    corpus: PathBuf,
    /// Qrels split.
    #[arg(long, default_value = "test")]
    split: String,
    /// Threads for indexing and batch search.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Results per query.
    #[arg(long, default_value_t = 100)]
    top_k: usize,
    /// Search this built index (`sift index`) instead of building one from the corpus: no
    /// index timing (its fields are null).
    #[arg(long)]
    index: Option<PathBuf>,
    /// Timed batch searches (the median is reported).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// BM25 scoring: lucene (Lucene's BM25Similarity, what bm25s's "lucene" method computes)
    /// or reference (the MM-BRIGHT reference code's gensim LuceneBM25Model).
    #[arg(long, default_value = "lucene")]
    bm25: String,
    /// Print JSON only (the default prints JSON too; kept for the peer driver's command line).
    #[arg(long)]
    json: bool,
    /// cargo passes --bench to harness=false benches.
    #[arg(long, hide = true)]
    bench: bool,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    // linear interpolation between closest ranks (numpy's default)
    let pos = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let corpus = Corpus::open(&args.corpus)?;
    let domain = corpus.domains()?.remove(0);
    let task = task1(&corpus, &domain, &args.split)?;
    let options = BuildOptions {
        threads: args.threads,
        ..BuildOptions::default()
    };
    let tmp = tempfile::tempdir()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()?;

    let (index, index_seconds) = match &args.index {
        Some(dir) => (IndexDir::open(dir)?, None),
        None => {
            let build = |name: &str| {
                IndexDir::build(
                    tmp.path().join(name),
                    &corpus,
                    std::slice::from_ref(&domain),
                    &options,
                    &[],
                    &NoProgress,
                )
            };
            build("warm")?; // warm-up build, then the timed one
            let t = Instant::now();
            let index = build("timed")?;
            (index, Some(t.elapsed().as_secs_f64()))
        }
    };
    let docs = index.manifest().domains[&domain].passages;

    let bm25 = index.bm25(&domain)?;
    let mut params = index.manifest().bm25;
    params.scoring = match args.bm25.as_str() {
        "lucene" => sift_index::Bm25Scoring::Lucene,
        "reference" => sift_index::Bm25Scoring::Reference,
        other => anyhow::bail!("--bm25 {other:?}: expected lucene or reference"),
    };
    let search_all = || -> Result<Run> {
        pool.install(|| {
            task.queries
                .par_iter()
                .map_init(
                    || bm25.scratch(),
                    |s, q| -> Result<(String, Vec<RunEntry>)> {
                        let hits = bm25.search(s, &q.query, args.top_k, &params, &[])?;
                        Ok((
                            q.id.clone(),
                            hits.iter()
                                .map(|h| RunEntry {
                                    doc: bm25.id(h.ord).to_string(),
                                    score: h.score as f64,
                                })
                                .collect(),
                        ))
                    },
                )
                .collect()
        })
    };
    search_all()?; // warm-up
    let mut batches = Vec::with_capacity(args.repeat.max(1));
    let mut run = Run::new();
    for _ in 0..args.repeat.max(1) {
        let t = Instant::now();
        run = search_all()?;
        batches.push(t.elapsed().as_secs_f64());
    }
    batches.sort_by(f64::total_cmp);
    let batch_seconds = batches[batches.len() / 2];

    let mut scratch = bm25.scratch();
    for q in &task.queries {
        bm25.search(&mut scratch, &q.query, args.top_k, &params, &[])?; // warm-up
    }
    let mut lat = Vec::with_capacity(task.queries.len());
    for q in &task.queries {
        let t = Instant::now();
        let hits = bm25.search(&mut scratch, &q.query, args.top_k, &params, &[])?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(hits);
    }
    lat.sort_by(f64::total_cmp);
    let ev = score_run(&run, &task.qrels, &Default::default(), true);
    let out = serde_json::json!({
        "engine": "sift",
        "version": env!("CARGO_PKG_VERSION"),
        "docs": docs,
        "index_seconds": index_seconds,
        "docs_per_s": index_seconds.map(|s| docs as f64 / s),
        "queries": task.queries.len(),
        "search_threads": args.threads,
        "batch_seconds": batch_seconds,
        "qps": task.queries.len() as f64 / batch_seconds,
        "latency_ms": {"p50": percentile(&lat, 50.0), "p99": percentile(&lat, 99.0)},
        "ndcg@10": ev.mean.get("ndcg@10").copied().context("no queries evaluated")?,
    });
    println!("{out}");
    Ok(())
}
