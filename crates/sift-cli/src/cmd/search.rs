use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use sift_index::IndexDir;

use crate::options::{AnalyzerFlags, Bm25Flags};

/// Search one domain of an index.
#[derive(clap::Args)]
#[command(
    after_help = "Example:\n  sift search --index target/sample-index --domain biology --query \"how do plants make sugar\""
)]
pub struct Args {
    /// Index directory.
    #[arg(long)]
    index: PathBuf,
    /// Query text.
    #[arg(long)]
    query: String,
    /// Domain to search (required when the index has several).
    #[arg(long)]
    domain: Option<String>,
    /// Number of results.
    #[arg(long, default_value_t = 10, value_parser = crate::options::positive)]
    top_k: usize,
    #[command(flatten)]
    bm25: Bm25Flags,
    #[command(flatten)]
    analyzer: AnalyzerFlags,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let index = IndexDir::open(&a.index)?;
    let m = index.manifest();
    if a.analyzer.any() {
        index.check_analyzer(&a.analyzer.apply(&m.analyzer))?;
    }
    let domain = match (&a.domain, m.domains.len()) {
        (Some(d), _) => d.clone(),
        (None, 1) => m.domains.keys().next().expect("one domain").clone(),
        (None, _) => bail!(
            "the index has {} domains: choose one with --domain ({})",
            m.domains.len(),
            m.domains.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    let params = a.bm25.apply(m.bm25);
    params.validate()?;
    let bm25 = index
        .bm25(&domain)
        .with_context(|| format!("opening domain {domain}"))?;
    let mut scratch = bm25.scratch();
    let hits = bm25.search(&mut scratch, &a.query, a.top_k, &params, &[])?;
    if a.json {
        let hits: Vec<_> = hits
            .iter()
            .enumerate()
            .map(
                |(i, h)| serde_json::json!({"rank": i + 1, "id": bm25.id(h.ord), "score": h.score}),
            )
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"domain": domain, "query": a.query, "hits": hits})
            )?
        );
    } else {
        if hits.is_empty() {
            println!("no passage shares a term with the query");
        }
        for (i, h) in hits.iter().enumerate() {
            println!("{:>4}  {:>9.4}  {}", i + 1, h.score, bm25.id(h.ord));
        }
    }
    Ok(())
}
