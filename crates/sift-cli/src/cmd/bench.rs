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
    }
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
