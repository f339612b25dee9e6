use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use sift_eval::CandidateKind;
use sift_index::IndexDir;
use sift_retrieve::{QueryImages, RetrieverSpec, SearchSettings};
use sift_service::api::{Fusion, ImageInput, SearchRequest, SearchResponse};
use sift_service::{ApiError, Limits, ServeConfig, Service};

use crate::models::ModelFlags;
use crate::options::{AnalyzerFlags, Bm25Flags, CorpusFlags};

/// Search an index with one query: text, images, or both.
///
/// Any retriever the index serves (BM25, a dense model, a hybrid); passages, corpus images
/// (models that embed images) or Task 4 passage+image pairs as results; one domain, or
/// every domain merged into one ranking. The query goes through the same core as `sift
/// serve`'s `/v1/search` and Python's `Index.search`, with the same answer.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
sift search --index target/sample-index --domain biology --query \"how do plants make sugar\"\n  \
sift search --index target/sample-index --domain gis --retriever dense:tiny-clip-quickgelu \\\n    \
--query \"map projection\" --image figure.png --candidates images --json")]
pub struct Args {
    /// Index directory.
    #[arg(long)]
    index: PathBuf,
    /// Query text.
    #[arg(long, required_unless_present = "image")]
    query: Option<String>,
    /// A query image (repeat for several); needs a retriever with a model that embeds
    /// images.
    #[arg(long)]
    image: Vec<PathBuf>,
    /// Retriever: bm25, dense:<model>, hybrid:<a>+<b>[:<wa>,<wb>].
    #[arg(long, default_value = "bm25")]
    retriever: String,
    /// What to rank: passages, corpus images, or passage+image pairs (Task 4).
    #[arg(long, value_enum, default_value = "passages")]
    candidates: CandidateKind,
    /// Domain to search [default: every domain of the index, merged into one ranking].
    #[arg(long)]
    domain: Option<String>,
    /// Number of results.
    #[arg(long, default_value_t = 10, value_parser = crate::options::positive)]
    top_k: usize,
    /// How a model that embeds images combines the query text and images: all (text and
    /// the mean of the images), first (text and the first image, a white image when there
    /// is none), or reference (MM-BRIGHT's reference code's rule for the model and the
    /// task the candidates make: passages Task 2, images Task 3, pairs Task 4).
    #[arg(long, value_enum, default_value = "all")]
    query_fusion: QueryImages,
    /// The corpus (a directory, or a knowledge-base .jsonl / .parquet file): pairs then pair
    /// passages with every corpus image of their page (without it, with the images the index
    /// holds; a knowledge base's pairs, its rows, need it).
    #[arg(long)]
    corpus: Option<PathBuf>,
    #[command(flatten)]
    corpus_flags: CorpusFlags,
    /// How pairs link passages and images: regex (equal 8-hex base keys, the reference
    /// code) or source-id (the annotations' source_passage_id; needs --corpus).
    #[arg(long, value_enum, default_value = "regex")]
    pair_link: sift_eval::PairLink,
    #[command(flatten)]
    search: crate::options::SearchFlags,
    /// Load dense models from here instead of the location recorded in the index.
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    model_flags: ModelFlags,
    #[command(flatten)]
    image_limits: crate::options::ImageLimitFlags,
    #[command(flatten)]
    bm25: Bm25Flags,
    #[command(flatten)]
    analyzer: AnalyzerFlags,
    #[command(flatten)]
    rerank: crate::options::RerankFlags,
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
    let retriever: RetrieverSpec = a.retriever.parse()?;
    let kb_index = m.layout == Some(sift_core::Layout::Kb);
    if a.candidates == CandidateKind::Pairs && kb_index && a.corpus.is_none() {
        bail!(
            "the pairs of a knowledge base link each row's passage to its image: give --corpus \
             (the knowledge-base file)"
        );
    }
    let params = a.bm25.apply(m.bm25);
    drop(index);
    if let Some(dir) = &a.corpus {
        // says which shard sets are incomplete (--allow-partial)
        a.corpus_flags.open(dir)?;
    }
    let mut stages = a.rerank.stages(&a.model_flags, None)?;
    if stages.len() > 1 {
        bail!("sift search takes one --rerank");
    }
    if !stages.is_empty() && a.corpus.is_none() {
        bail!("--rerank reads the candidates' texts and images: give --corpus");
    }
    let stage = stages.pop();
    let config = ServeConfig {
        corpus: a.corpus.clone(),
        retrievers: vec![retriever.to_string()],
        domains: a.domain.iter().cloned().collect(),
        model_options: a.model_flags.options()?,
        bm25: Some(params),
        settings: SearchSettings {
            bm25: params,
            top_k: a.top_k,
            ann: a.search.ann,
            ef_search: a.search.ef_search,
        },
        // one query from the command line: its own flags bound it
        limits: Limits {
            max_top_k: usize::MAX,
            max_images: usize::MAX,
            max_request_pixels: u64::MAX,
            image: sift_service::images::ImageLimits {
                max_bytes: usize::try_from(a.image_limits.max_image_bytes).unwrap_or(usize::MAX),
                max_pixels: a.image_limits.max_image_pixels,
            },
            ..Limits::default()
        },
        rerank: stage.clone(),
        pair_link: a.pair_link,
        reference_fusion: a.query_fusion == QueryImages::Reference
            && a.candidates != CandidateKind::Passages,
        model_dir: a.model.clone(),
        allow_partial_shards: a.corpus_flags.allow_partial,
        // one query: no company to wait for
        batch: sift_service::BatchOptions {
            max_wait: std::time::Duration::ZERO,
            ..Default::default()
        },
        ..ServeConfig::new(&a.index)
    };
    let service = Service::load(&config)
        .with_context(|| format!("loading {} to search it", a.index.display()))?;
    let mut images = Vec::new();
    for path in &a.image {
        images.push(ImageInput {
            bytes: Some(
                a.image_limits
                    .read(path)
                    .with_context(|| format!("reading the query image {}", path.display()))?,
            ),
            ..ImageInput::default()
        });
    }
    let req = SearchRequest {
        query: a.query.clone().unwrap_or_default(),
        images,
        retriever: Some(retriever.to_string()),
        domain: a.domain.clone(),
        top_k: a.top_k,
        candidates: a.candidates,
        fusion: match a.query_fusion {
            QueryImages::All => Fusion::All,
            QueryImages::First => Fusion::First,
            QueryImages::Reference => Fusion::Reference,
        },
        ..SearchRequest::default()
    };
    let res = service.search(&req).map_err(|e| flag_error(&a, e))?;
    if let Some(stage) = &stage {
        for note in stage.reranker.notes() {
            eprintln!("{note}");
        }
    }
    print_hits(&a, &res)
}

/// A request error in the words of the command's flags (`--image FILE`, `--top-k`).
fn flag_error(a: &Args, e: ApiError) -> anyhow::Error {
    let Some(field) = e.field.as_deref() else {
        return anyhow::anyhow!("{}", e.message);
    };
    let image = field
        .strip_prefix("images[")
        .and_then(|r| r.split(']').next())
        .and_then(|i| i.parse::<usize>().ok())
        .and_then(|i| a.image.get(i));
    let flag = match (field, image) {
        (_, Some(path)) => format!("--image {}", path.display()),
        ("images", _) => "--image".to_string(),
        ("query", _) => "--query".to_string(),
        ("fusion", _) => "--query-fusion".to_string(),
        (f, _) => format!("--{}", f.replace('_', "-")),
    };
    anyhow::anyhow!("{flag}: {}", e.message)
}

/// Prints the hits: a table, or with `--json` one object.
fn print_hits(a: &Args, res: &SearchResponse) -> Result<()> {
    let merged = res.domain.is_none();
    if a.json {
        let hits: Vec<_> = res
            .hits
            .iter()
            .map(|h| {
                let mut hit = serde_json::json!({"rank": h.rank, "id": h.id, "score": h.score});
                if merged {
                    hit["domain"] = h.domain.clone().into();
                }
                if a.candidates == CandidateKind::Pairs {
                    hit["passage"] = h.passage_id.clone().into();
                    hit["image"] = h.image_id.clone().into();
                }
                hit
            })
            .collect();
        let candidates = format!("{:?}", a.candidates).to_lowercase();
        let mut out = serde_json::json!({
            "domain": res.domain,
            "query": a.query,
            "images": a.image,
            "retriever": res.retriever,
            "candidates": candidates,
            "hits": hits,
        });
        if merged {
            out["domains"] = res.domains.clone().into();
        }
        if let Some(r) = &res.reranker {
            out["reranker"] = r.clone().into();
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    if res.hits.is_empty() {
        println!("no result (BM25 returns only passages sharing a term with the query)");
    }
    for h in &res.hits {
        let domain = if merged {
            format!("{}  ", h.domain)
        } else {
            String::new()
        };
        match a.candidates {
            CandidateKind::Pairs => println!(
                "{:>4}  {:>9.4}  {domain}{}  {}",
                h.rank,
                h.score,
                h.passage_id.as_deref().unwrap_or_default(),
                h.image_id.as_deref().unwrap_or("(no image)")
            ),
            _ => println!("{:>4}  {:>9.4}  {domain}{}", h.rank, h.score, h.id),
        }
    }
    Ok(())
}
