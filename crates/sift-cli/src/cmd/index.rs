use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use sift_core::Corpus;
use sift_index::{AnalyzerConfig, BuildOptions, IndexDir};

use crate::options::{AnalyzerFlags, Bm25Flags, split_list};
use crate::progress::Bars;

/// Build an index. A previous index at the same path stays usable until the new one is
/// complete, and is then replaced atomically.
#[derive(clap::Args)]
#[command(
    after_help = "Example:\n  sift index --corpus corpora/sample --index target/sample-index"
)]
pub struct Args {
    /// Corpus directory (BEIR layout with corpus.jsonl, or MM-BRIGHT hub layout).
    #[arg(long)]
    corpus: PathBuf,
    /// Index directory to create or replace.
    #[arg(long)]
    index: PathBuf,
    /// Comma-separated domains to index [default: all].
    #[arg(long)]
    domains: Option<String>,
    #[command(flatten)]
    bm25: Bm25Flags,
    #[command(flatten)]
    analyzer: AnalyzerFlags,
    /// Indexing threads [default: number of cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: Args) -> Result<()> {
    let corpus = Corpus::open(&a.corpus)?;
    let domains = corpus.select_domains(&split_list(&a.domains))?;
    let defaults = BuildOptions::default();
    let options = BuildOptions {
        analyzer: a.analyzer.apply(&AnalyzerConfig::default()),
        bm25: a.bm25.apply(defaults.bm25),
        threads: a.threads.unwrap_or(defaults.threads).max(1),
    };
    let bars = Bars::new(a.quiet || a.json);
    let start = Instant::now();
    let index = IndexDir::build(&a.index, &corpus, &domains, &options, &bars)
        .with_context(|| format!("building index {}", a.index.display()))?;
    let secs = start.elapsed().as_secs_f64();
    let m = index.manifest();
    let passages: u64 = m.domains.values().map(|d| d.passages).sum();
    if a.json {
        let out = serde_json::json!({
            "index": a.index,
            "seconds": secs,
            "passages": passages,
            "docs_per_s": passages as f64 / secs.max(1e-9),
            "manifest": m,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "indexed {passages} passages in {} domain(s) in {secs:.2}s ({:.0} passages/s) -> {}",
            m.domains.len(),
            passages as f64 / secs.max(1e-9),
            a.index.display()
        );
        for (name, d) in &m.domains {
            println!(
                "  {name:<20} {:>9} passages {:>11} tokens",
                d.passages, d.tokens
            );
        }
    }
    for (name, d) in &m.domains {
        for (kind, n) in &d.warnings {
            eprintln!("warning: {name}: {n} x {kind}");
        }
    }
    Ok(())
}
