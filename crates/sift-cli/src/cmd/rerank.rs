use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sift_service::{ScorePair, score_pairs};

use crate::models::ModelFlags;
use crate::options::{ImageLimitFlags, RerankFlags};

/// Score (query, passage[, image]) pairs with a reranker: its raw scores, in the file's
/// order (a cross-encoder's `predict()` values: sentence-transformers' `CrossEncoder`
/// gives the same).
///
/// The pairs file is JSONL, one object a line: `query` and `passage` (texts) and, for a
/// reranker that sees images, `image` (a file, relative to the pairs file's folder).
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
sift rerank --model cross-encoder/ms-marco-MiniLM-L-6-v2 --pairs pairs.jsonl\n  \
sift rerank --model models/fixtures/cross_encoder/tiny-bert-ce --pairs pairs.jsonl --json --out scores.json")]
pub struct Args {
    /// The reranker (as --rerank takes one: a cross-encoder, pointwise:MODEL,
    /// listwise:GENERATOR).
    #[arg(long)]
    model: String,
    /// The pairs (JSONL: query, passage[, image]).
    #[arg(long)]
    pairs: PathBuf,
    /// Write the scores here (JSON with --json, else one a line) instead of printing them.
    #[arg(long)]
    out: Option<PathBuf>,
    /// JSON: {"model": ..., "scores": [...]}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model_flags: ModelFlags,
    #[command(flatten)]
    image_limits: ImageLimitFlags,
    #[command(flatten)]
    rerank: RerankFlags,
}

pub fn run(mut a: Args) -> Result<()> {
    if !a.rerank.rerank.is_empty() {
        bail!("sift rerank takes its reranker as --model, not --rerank");
    }
    let pairs = read_pairs(&a.pairs, &a.image_limits)?;
    a.rerank.rerank = vec![a.model.clone()];
    let stage = a
        .rerank
        .stages(&a.model_flags, None)?
        .pop()
        .context("no reranker")?;
    let scores = score_pairs(stage.reranker.as_ref(), &pairs)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.pairs.display()))?;
    for note in stage.reranker.notes() {
        eprintln!("{note}");
    }
    let text = if a.json {
        serde_json::to_string_pretty(&serde_json::json!({
            "model": stage.reranker.name(),
            "scores": scores,
        }))? + "\n"
    } else {
        scores.iter().map(|s| format!("{s}\n")).collect()
    };
    match &a.out {
        Some(path) => sift_core::write_output(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// The pairs of a JSONL file, each line checked (its number in every error).
fn read_pairs(path: &Path, limits: &ImageLimitFlags) -> Result<Vec<ScorePair>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line {
        query: String,
        passage: Option<String>,
        image: Option<PathBuf>,
    }
    let folder = path.parent().unwrap_or(Path::new("."));
    let text = sift_core::read_regular_text(path, sift_core::TEXT_FILE_LIMIT)
        .with_context(|| format!("reading {}", path.display()))?;
    let mut pairs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}: line {}", path.display(), n + 1);
        let l: Line = serde_json::from_str(line).with_context(at)?;
        let image = match &l.image {
            Some(p) => Some(limits.read(&folder.join(p)).with_context(at)?),
            None => None,
        };
        if l.passage.is_none() && image.is_none() {
            bail!("{}: give a passage, an image or both", at());
        }
        pairs.push(ScorePair {
            query: l.query,
            passage: l.passage,
            image,
        });
    }
    if pairs.is_empty() {
        bail!("{}: no pair", path.display());
    }
    Ok(pairs)
}
