use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use sift_eval::report::html::{HtmlOptions, build_html_report};

/// Make one self-contained HTML report of evaluation directories (`sift eval --out`):
/// per task a domain x retriever heatmap and the means with 95% bootstrap confidence
/// intervals, the paired comparison of any two retrievers (t-test and randomisation test,
/// Holm across domains), and a per-query drill-down with texts, thumbnails and each
/// retriever's top results. Opens from disk, without network.
#[derive(clap::Args)]
#[command(after_help = "Example:\n  \
sift eval --corpus corpora/sample --index target/sample-index --task all --retriever bm25 \\\n    \
--retriever dense:tiny-clip-quickgelu --out target/sample-eval\n  \
sift report target/sample-eval --corpus corpora/sample --out target/sample-report.html")]
pub struct Args {
    /// Evaluation directories (each with results.json, runs/ and qrels/).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(long)]
    out: PathBuf,
    /// The corpus evaluated: query texts and images, passage snippets and image thumbnails
    /// in the drill-down (without it, ids and scores only).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Also write every figure into this directory, as SVG and as PNG (rendered at twice
    /// the size, for print).
    #[arg(long)]
    figures: Option<PathBuf>,
    /// The metric shown and tested.
    #[arg(long, default_value = "ndcg@10")]
    metric: String,
    /// Resamples of the bootstrap and of the randomisation test (when not exact).
    #[arg(long, default_value_t = HtmlOptions::default().resamples, value_parser = crate::options::int_in::<usize>(1, 10_000_000))]
    resamples: usize,
    /// Seed of the resamples.
    #[arg(long, default_value_t = sift_eval::stats::SEED)]
    seed: u64,
    /// Results per retriever and query in the drill-down.
    #[arg(long, default_value_t = 10, value_parser = crate::options::int_in::<usize>(1, 10_000))]
    top: usize,
    /// Megabytes of thumbnails at most (images past it are named, not shown). Each domain
    /// gets an even share, given to its query images first, then to the candidates' images
    /// by rank.
    #[arg(long, default_value_t = 8, value_parser = crate::options::int_in::<usize>(0, 1 << 20))]
    thumbnail_mb: usize,
    /// Megabytes of the page at most: thumbnails get only what the rest of the page leaves.
    #[arg(long, default_value_t = 20, value_parser = crate::options::int_in::<usize>(1, 1 << 20))]
    max_mb: usize,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let start = Instant::now();
    let corpus = a
        .corpus
        .as_deref()
        .map(sift_core::Corpus::open)
        .transpose()?;
    let options = HtmlOptions {
        metric: a.metric.clone(),
        resamples: a.resamples,
        seed: a.seed,
        top: a.top,
        thumbnail_budget: a.thumbnail_mb << 20,
        max_page_bytes: a.max_mb * 1_000_000,
        ..HtmlOptions::default()
    };
    let report = build_html_report(&a.dirs, corpus.as_ref(), &options)?;
    // written beside, then moved into place (a reader never sees half a page); never over
    // a device, FIFO or directory (sift_core::OutputFile)
    sift_core::write_output(&a.out, report.html.as_bytes())?;
    if let Some(dir) = &a.figures {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        let png = sift_eval::report::html::PngRenderer::new(2.0);
        for (name, svg) in &report.figures {
            let path = dir.join(name);
            sift_core::write_output(&path, svg.as_bytes())?;
            let path = path.with_extension("png");
            sift_core::write_output(&path, &png.render(name, svg)?)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    crate::cmd::report_warnings("corpus", &report.warnings);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "out": a.out, "bytes": report.html.len(), "seconds": secs,
                "figures": report.figures.iter().map(|f| &f.0).collect::<Vec<_>>(),
                "thumbnails": report.thumbnails.0, "images_without_thumbnail": report.thumbnails.1,
                "warnings": report.warnings.to_map(),
            }))?
        );
    } else {
        println!(
            "report of {} evaluation(s) -> {} ({:.1} MB, {} thumbnails, {:.1}s)",
            a.dirs.len(),
            a.out.display(),
            report.html.len() as f64 / 1e6,
            report.thumbnails.0,
            secs
        );
        if report.thumbnails.1 > 0 {
            eprintln!(
                "note: {} image(s) shown by name only (past --thumbnail-mb, undecodable, or not in the corpus)",
                report.thumbnails.1
            );
        }
    }
    Ok(())
}
