use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use sift_core::Warnings;
use sift_eval::CandidateKind;
use sift_index::IndexDir;
use sift_retrieve::{
    Candidates, DomainSearcher, ModelSet, PairCandidates, PairLinking, Query, QueryImages,
    RetrieverSpec, SearchSettings,
};

use crate::cmd::report_warnings;
use crate::models::ModelFlags;
use crate::options::{AnalyzerFlags, Bm25Flags, CorpusFlags};

/// Search one domain of an index with one query: text, images, or both.
///
/// Any retriever the index serves (BM25, a dense model, a hybrid); passages, corpus images
/// (models that embed images) or Task 4 passage+image pairs as results.
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
    /// Domain to search (required when the index has several).
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
    let retriever: RetrieverSpec = a.retriever.parse()?;
    let mut models = ModelSet::new();
    models.load_for(
        &index,
        &retriever,
        &a.model_flags.options()?,
        a.model.as_deref(),
    )?;
    if !a.image.is_empty() && !models.sees_images(&retriever) {
        bail!("--image needs a retriever with a model that embeds images ({retriever} has none)");
    }
    if a.candidates == CandidateKind::Images && !models.ranks_images(&retriever) {
        bail!("{retriever} cannot rank images: every part must be a model that embeds images");
    }
    let needs_images = a.candidates != CandidateKind::Passages;
    let searcher = DomainSearcher::open(&index, &domain, &retriever, &models, needs_images)
        .with_context(|| format!("opening domain {domain}"))?;

    let (text, vectors) = encode(&a, &models, &retriever, &domain)?;

    let kb_index = m.layout == Some(sift_core::Layout::Kb);
    let reference_fusion = a.query_fusion == QueryImages::Reference;
    let pairs = if a.candidates == CandidateKind::Pairs {
        pair_candidates(&a, kb_index, &searcher, &models, &retriever)?
    } else {
        PairCandidates::default()
    };
    // the reference's white image for every corpus image (Nomic, Jina-CLIP in Task 3)
    let uniform = if a.candidates == CandidateKind::Images && reference_fusion {
        sift_retrieve::reference_image_stand_ins(&models, &retriever)?
    } else {
        sift_retrieve::PairStandIns::new()
    };
    let candidates = match a.candidates {
        CandidateKind::Passages => Candidates::Passages,
        CandidateKind::Images if uniform.is_empty() => Candidates::Images,
        CandidateKind::Images => Candidates::UniformImages { vectors: &uniform },
        CandidateKind::Pairs => pairs.candidates(reference_fusion),
    };
    let stages = a.rerank.stages(&a.model_flags, None)?;
    if stages.len() > 1 {
        bail!("sift search takes one --rerank");
    }
    let settings = SearchSettings {
        bm25: params,
        // a reranker reads its depth of first-stage results
        top_k: stages.first().map_or(a.top_k, |s| s.depth.max(a.top_k)),
        ann: a.search.ann,
        ef_search: a.search.ef_search,
    };
    let hits = searcher.search(
        &retriever,
        &candidates,
        &Query {
            index: 0,
            text: &text,
            vectors: &vectors,
            bm25: None,
        },
        &[],
        &settings,
        &mut searcher.scratch(),
    )?;
    let hits = match stages.first() {
        Some(stage) => {
            let mut hits = rerank(&a, &domain, &text, stage, &hits)?;
            hits.truncate(a.top_k);
            hits
        }
        None => hits,
    };
    print_hits(&a, &domain, &retriever, &hits)
}

/// The hits reranked by `stage`, their texts and images read from --corpus.
fn rerank(
    a: &Args,
    domain: &str,
    text: &str,
    stage: &sift_retrieve::RerankStage,
    hits: &[sift_eval::RunEntry],
) -> Result<Vec<sift_eval::RunEntry>> {
    let Some(dir) = &a.corpus else {
        bail!("--rerank reads the candidates' texts and images: give --corpus");
    };
    let corpus = a.corpus_flags.open(dir)?;
    let task = match a.candidates {
        CandidateKind::Passages if a.image.is_empty() => sift_eval::Task::Passages,
        CandidateKind::Passages => sift_eval::Task::MultimodalPassages,
        CandidateKind::Images => sift_eval::Task::Images,
        CandidateKind::Pairs => sift_eval::Task::Pairs,
    };
    if !stage.reranker.ranks(task) {
        bail!("rerank:{} cannot rank images", stage.reranker.name());
    }
    let sees = stage.reranker.sees_images();
    let run: sift_eval::Run = [("query".to_string(), hits.to_vec())].into();
    let mut content = sift_retrieve::rerank::RerankContent::default();
    content.load(&corpus, domain, task, &run, stage.depth, &[], sees)?;
    let mut images = Vec::new();
    if sees {
        for path in &a.image {
            images.push(a.image_limits.read(path)?);
        }
    }
    let refs: Vec<&[u8]> = images.iter().map(Vec::as_slice).collect();
    let query = sift_retrieve::rerank::RerankQuery {
        id: "query",
        text,
        images: &refs,
    };
    let mut out = sift_retrieve::rerank::rerank_entries(stage, task, &query, hits, &content)?;
    out.sort_by(sift_eval::trec_order);
    for note in stage.reranker.notes() {
        eprintln!("{note}");
    }
    Ok(out)
}

/// The query's vectors: its text and images, encoded as the evaluator encodes a task's.
fn encode(
    a: &Args,
    models: &ModelSet,
    retriever: &RetrieverSpec,
    domain: &str,
) -> Result<(String, sift_retrieve::QueryVectors)> {
    let mut images = Vec::new();
    for path in &a.image {
        images.push(
            a.image_limits
                .read(path)
                .with_context(|| format!("reading the query image {}", path.display()))?,
        );
    }
    let image_refs: Vec<&[u8]> = images.iter().map(Vec::as_slice).collect();
    let text = a.query.clone().unwrap_or_default();
    let mut warnings = Warnings::new();
    let task = match a.candidates {
        CandidateKind::Passages => sift_eval::Task::MultimodalPassages,
        CandidateKind::Images => sift_eval::Task::Images,
        CandidateKind::Pairs => sift_eval::Task::Pairs,
    };
    // the reference's rule applies to queries without images too (a white image for CLIP)
    let fuse = !a.image.is_empty() || a.query_fusion == QueryImages::Reference;
    let vectors = sift_retrieve::encode_query(
        models,
        retriever,
        task,
        &text,
        &image_refs,
        fuse.then_some(a.query_fusion),
        // --query-instruction went into the model when it loaded
        &sift_retrieve::Instructions::Reference,
        domain,
        &mut warnings,
    )
    .map_err(|e| anyhow::anyhow!("{e} (the --image files in order)"))?;
    report_warnings("query images", &warnings);

    Ok((text, vectors))
}

/// Task 4's pairs of the searched domain, linked as `--corpus` and `--pair-link` say, with
/// the reference code's stand-ins and pair vectors for `--query-fusion reference`.
fn pair_candidates(
    a: &Args,
    kb_index: bool,
    searcher: &DomainSearcher,
    models: &ModelSet,
    retriever: &RetrieverSpec,
) -> Result<PairCandidates> {
    // only pairs read the corpus
    let corpus = a
        .corpus
        .as_deref()
        .map(|dir| a.corpus_flags.open(dir))
        .transpose()?;
    let is_kb_corpus = corpus
        .as_ref()
        .is_some_and(|c| c.layout() == sift_core::Layout::Kb);
    match (&corpus, a.pair_link) {
        (None, _) if kb_index => bail!(
            "the pairs of a knowledge base link each row's passage to its image: give --corpus \
             (the knowledge-base file)"
        ),
        (Some(_), sift_eval::PairLink::SourceId) if is_kb_corpus => bail!(
            "--pair-link source-id reads image annotations, which a knowledge base has none \
             of: its rows link each passage to its image"
        ),
        (None, sift_eval::PairLink::SourceId) => {
            bail!("--pair-link source-id reads the image annotations: give --corpus")
        }
        (None, _)
            if !retriever
                .dense_names()
                .iter()
                .any(|n| searcher.image_ids(n).is_some()) =>
        {
            bail!(
                "pairs need the corpus images: give --corpus, or a retriever with a model that \
                 indexed images"
            )
        }
        _ => {}
    }
    // a reference profile asked for, or the one the index's models were built with
    let reference = a.model_flags.profile.is_reference()
        || retriever
            .dense_names()
            .iter()
            .any(|n| models.get(n).is_some_and(|m| m.profile().is_reference()));
    let mut w = Warnings::new();
    let linking = PairLinking {
        link: a.pair_link,
        loadable_only: reference,
        knowledge_base: kb_index,
    };
    let mut pairs = PairCandidates::link(searcher, retriever, corpus.as_ref(), linking, &mut w)?;
    // the reference's stand-in images and pair vectors of models whose pairs do not follow
    // from unit vectors
    if a.query_fusion == QueryImages::Reference {
        pairs.add_reference(
            searcher,
            models,
            retriever,
            corpus.as_ref(),
            &mut w,
            &sift_index::NoProgress,
        )?;
    }
    report_warnings("pairs", &w);
    Ok(pairs)
}

/// Prints the hits: a table, or with `--json` one object.
fn print_hits(
    a: &Args,
    domain: &str,
    retriever: &RetrieverSpec,
    hits: &[sift_eval::RunEntry],
) -> Result<()> {
    let split = sift_eval::split_pair_id;
    if a.json {
        let hits: Vec<_> = hits
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let mut hit = serde_json::json!({"rank": i + 1, "id": h.doc, "score": h.score});
                if a.candidates == CandidateKind::Pairs {
                    let (p, img) = split(&h.doc);
                    hit["passage"] = p.into();
                    hit["image"] = img.into();
                }
                hit
            })
            .collect();
        let candidates = format!("{:?}", a.candidates).to_lowercase();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "domain": domain,
                "query": a.query,
                "images": a.image,
                "retriever": retriever.to_string(),
                "candidates": candidates,
                "hits": hits,
            }))?
        );
    } else {
        if hits.is_empty() {
            println!("no result (BM25 returns only passages sharing a term with the query)");
        }
        for (i, h) in hits.iter().enumerate() {
            match a.candidates {
                CandidateKind::Pairs => {
                    let (p, img) = split(&h.doc);
                    println!(
                        "{:>4}  {:>9.4}  {p}  {}",
                        i + 1,
                        h.score,
                        img.unwrap_or("(no image)")
                    );
                }
                _ => println!("{:>4}  {:>9.4}  {}", i + 1, h.score, h.doc),
            }
        }
    }
    Ok(())
}
