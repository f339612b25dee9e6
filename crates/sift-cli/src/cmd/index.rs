use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use sift_index::{AnalyzerConfig, BuildOptions, HnswParams, IndexDir, VectorDtype};
use sift_retrieve::Sides;

use crate::models::ModelFlags;

use crate::options::{AnalyzerFlags, Bm25Flags, CorpusFlags, split_list};
use crate::progress::Bars;

/// Build an index. A previous index at the same path stays usable until the new one is
/// complete, and is then replaced atomically.
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  sift index --corpus corpora/sample --index target/sample-index\n  \
sift index --corpus corpora/kb-example/kb.jsonl --index target/kb-index\n  \
sift index --corpus wiki.jsonl --index target/wiki --dense intfloat/e5-base-v2 --faiss e5_Flat.index"
)]
pub struct Args {
    /// Corpus: a directory (BEIR layout with corpus.jsonl, or MM-BRIGHT hub layout), or a
    /// knowledge base: a .jsonl or .parquet file of rows {"id" or "qid", "text",
    /// "image_path"} (image paths relative to the file; one domain, named after the file).
    #[arg(long)]
    corpus: PathBuf,
    /// Index directory to create or replace.
    #[arg(long)]
    index: PathBuf,
    #[command(flatten)]
    corpus_flags: CorpusFlags,
    /// Comma-separated domains to index [default: all].
    #[arg(long, value_parser = crate::options::domain_list)]
    domains: Option<String>,
    #[command(flatten)]
    bm25: Bm25Flags,
    #[command(flatten)]
    analyzer: AnalyzerFlags,
    /// Also embed passages with this model (directory or hub id / registry alias) and build
    /// an HNSW index of the vectors; repeat for several models. A vision-language model
    /// (CLIP, SigLIP) embeds passages with its text tower and also indexes the corpus
    /// images (`document_images`) with its image tower. The index is `dense:<alias>` for a
    /// registry model, else `dense:<folder name>`; `NAME=MODEL` names it `dense:NAME`.
    #[arg(long = "dense", value_name = "[NAME=]MODEL")]
    dense: Vec<String>,
    /// Index the passage vectors in DIR (written by a cluster job, `sift_ir.ray.embed_corpus`:
    /// DIR/sift-vectors.json and DIR/<domain>/passages/*.parquet of id, vector) instead of
    /// embedding the passages: they stand for the --dense model with the same model files
    /// (repeat for several models). Queries are still embedded by the --dense model, which
    /// is loaded and checked against the vectors (files, dimension, profile).
    #[arg(long, value_name = "DIR", requires = "dense")]
    vectors: Vec<PathBuf>,
    /// Adopt the passage vectors of a FAISS index file (faiss's `write_index`: IndexFlatIP,
    /// IndexFlatL2, or IndexHNSWFlat over either) instead of embedding the passages: row i
    /// is passage i of the corpus, in the corpus file's order, for a corpus of one domain
    /// (or one picked with --domains). They stand for the one --dense model, which embeds
    /// the queries: the dimension and the count must match, values must be finite, and an
    /// L2 index's vectors must have unit length (Sift ranks by inner product, which orders
    /// unit vectors as L2 distance does). Sift builds its own HNSW graph over the vectors.
    #[arg(
        long,
        value_name = "FILE",
        requires = "dense",
        conflicts_with = "vectors"
    )]
    faiss: Option<PathBuf>,
    /// Do not index corpus images with vision-language models.
    #[arg(long)]
    no_images: bool,
    #[command(flatten)]
    model: ModelFlags,
    /// Precision of stored vectors.
    #[arg(long, value_enum, default_value = "f32")]
    vector_dtype: VectorDtype,
    /// Largest corpus image to embed (pixels, width x height from its header, before
    /// decoding); larger ones are skipped and counted as undecodable, each named. The
    /// default is the size at which Pillow refuses an image as a decompression bomb.
    #[arg(long, default_value_t = sift_embed::image::DEFAULT_MAX_PIXELS, value_parser = crate::options::int_in::<u64>(1, 1_000_000_000_000))]
    max_image_pixels: u64,
    /// HNSW maximum connections per node (M).
    #[arg(long, default_value_t = HnswParams::default().m, value_parser = crate::options::int_in::<usize>(2, 1024))]
    hnsw_m: usize,
    /// HNSW candidate list size while building.
    #[arg(long, default_value_t = HnswParams::default().ef_construction, value_parser = crate::options::int_in::<usize>(1, 100_000))]
    ef_construction: usize,
    /// Threads for indexing, embedding and the HNSW graphs [default: number of cores]. With
    /// 1, HNSW graphs are reproducible bit for bit; with more, concurrent insertion makes
    /// them differ slightly from build to build (recall does not change).
    #[arg(long, value_parser = crate::options::threads)]
    threads: Option<usize>,
    /// Replace an existing index even if the new one lacks some of its domains or dense
    /// indexes, or its manifest is unreadable. Without it, domains left out of --domains are
    /// kept as they are (when the dense indexes are the same), and anything else that would
    /// be lost is refused.
    #[arg(long)]
    replace: bool,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: Args) -> Result<()> {
    let corpus = a.corpus_flags.open(&a.corpus)?;
    let domains = corpus.select_domains(&split_list(&a.domains))?;
    let defaults = BuildOptions::default();
    let options = BuildOptions {
        analyzer: a.analyzer.apply(&AnalyzerConfig::default()),
        bm25: a.bm25.apply(defaults.bm25),
        threads: a.threads.unwrap_or(defaults.threads).max(1),
        replace: a.replace,
    };
    let bars = Bars::new(a.quiet || a.json);
    let start = Instant::now();
    let models = a
        .dense
        .iter()
        .map(|value| {
            let mut model = a.model.load(sift_retrieve::DenseModel::parse(value).spec)?;
            model.set_max_image_pixels(a.max_image_pixels);
            Ok(model)
        })
        .collect::<Result<Vec<_>>>()?;
    let indexed = if a.no_images {
        sift_retrieve::Indexed::Passages
    } else {
        sift_retrieve::Indexed::PassagesAndImages
    };
    let sides: Vec<Sides> = models.iter().map(|m| Sides::new(m, indexed)).collect();
    let hnsw = HnswParams {
        m: a.hnsw_m,
        ef_construction: a.ef_construction,
    };
    let vectors = precomputed(&a.vectors, a.faiss.as_deref())?;
    let given = sift_retrieve::match_precomputed(&vectors, &models)?;
    let dense: Vec<_> = a
        .dense
        .iter()
        .zip(&sides)
        .zip(&given)
        .map(|((value, sides), given)| {
            sides
                .build_for(&sift_retrieve::DenseModel::parse(value), *given)
                .dtype(a.vector_dtype)
                .hnsw(hnsw)
        })
        .collect();
    let index = match IndexDir::build(&a.index, &corpus, &domains, &options, &dense, &bars) {
        Ok(index) => index,
        Err(e @ sift_index::Error::WouldDrop { .. }) => {
            return Err(anyhow::Error::new(e).context(format!(
                "not replacing index {}: repeat --dense for every dense index to keep (and index \
                 every domain when the dense indexes change), or pass --replace",
                a.index.display()
            )));
        }
        Err(e @ sift_index::Error::UnreadableIndex { .. }) => {
            return Err(anyhow::Error::new(e).context(format!(
                "not replacing index {}: pass --replace to build a new index there (its \
                 generations are then removed)",
                a.index.display()
            )));
        }
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("building index {}", a.index.display()))
            );
        }
    };
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
        for (slug, d) in &m.dense {
            if d.precomputed > 0 {
                println!(
                    "  dense:{slug:<14} {} ({} dims): {} precomputed passage vectors indexed",
                    d.model, d.dim, d.precomputed
                );
            } else {
                println!(
                    "  dense:{slug:<14} {} ({} dims): {} passages embedded, {} from the cache",
                    d.model, d.dim, d.embedded, d.cached
                );
            }
            if let Some(i) = &d.images {
                let total: u64 = i.images.values().sum();
                let bad: u64 = i.undecodable.values().sum();
                println!(
                    "  {:<20} {total} images indexed ({} embedded, {} from the cache), {bad} undecodable skipped",
                    "", i.embedded, i.cached
                );
                for e in &i.undecodable_examples {
                    eprintln!("warning: undecodable image skipped: {e}");
                }
            }
        }
    }
    for (name, d) in &m.domains {
        for (kind, n) in &d.warnings {
            eprintln!("warning: {name}: {n} x {kind}");
        }
    }
    for (slug, d) in &m.dense {
        let images = d.images.as_ref().map_or(0, |i| i.cache_rejected);
        if d.cache_rejected + images > 0 {
            eprintln!(
                "warning: dense:{slug}: {} damaged embedding-cache records ({} passages, {images} images) rejected and embedded again",
                d.cache_rejected + images,
                d.cache_rejected
            );
        }
        if let Some(i) = &d.images {
            for (kind, n) in &i.warnings {
                eprintln!("warning: dense:{slug} images: {n} x {kind}");
            }
        }
    }
    Ok(())
}

/// The precomputed passage vectors given: directories (`--vectors`) and a FAISS file
/// (`--faiss`).
fn precomputed(
    dirs: &[PathBuf],
    faiss: Option<&std::path::Path>,
) -> Result<Vec<sift_index::Precomputed>> {
    let mut vectors = dirs
        .iter()
        .map(|d| {
            sift_index::Precomputed::open(d)
                .with_context(|| format!("reading the vectors in {}", d.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(file) = faiss {
        vectors.push(
            sift_index::Precomputed::open_faiss(file)
                .with_context(|| format!("reading the FAISS index {}", file.display()))?,
        );
    }
    Ok(vectors)
}
