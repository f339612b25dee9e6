use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sift_core::{Corpus, Warnings};
use sift_eval::{
    DomainResult, Exclusions, Report, Run, RunEntry, check_qrels_ids, evaluate, metric_names,
    read_exclusions, read_qrels, read_run, task1, write_exclusions, write_qrels, write_run,
};
use sift_index::IndexDir;

use crate::cmd::report_warnings;
use crate::models::ModelFlags;
use crate::options::{AnalyzerFlags, Bm25Flags, split_list};
use crate::progress::Bars;
use crate::retriever::{Domain, Models, Retriever, SearchSettings};

const TABLE_COLUMNS: [&str; 6] = [
    "ndcg@10",
    "recall@10",
    "recall@100",
    "map@100",
    "p@10",
    "mrr",
];

/// Evaluate retrieval with trec_eval semantics.
///
/// Two modes: run a retriever on a task of a corpus (--corpus, --index, --task, --retriever),
/// or score an existing TREC run file (--run, --qrels).
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
sift eval --corpus corpora/sample --index target/sample-index --task 1 --retriever bm25\n  \
sift eval --run run.txt --qrels qrels.txt --json\n\n\
Metrics: ndcg@k, map@k, recall@k, p@k for k in 1,5,10,25,50,100, mrr (trec_eval recip_rank,\n\
no cut-off) and ndcg (no cut-off). Per domain, then the unweighted mean over domains.")]
pub struct Args {
    /// Corpus directory (task mode).
    #[arg(long, requires = "index", conflicts_with_all = ["run", "qrels"])]
    corpus: Option<PathBuf>,
    /// Index built from that corpus (task mode).
    #[arg(long, requires = "corpus")]
    index: Option<PathBuf>,
    /// Task: 1 = query text -> passages.
    #[arg(long, default_value = "1", value_parser = ["1"])]
    task: String,
    /// Retriever: bm25, dense:<model> (a dense index built with `sift index --dense`), or
    /// hybrid:<a>+<b> (reciprocal rank fusion, k = 60) / hybrid:<a>+<b>:<wa>,<wb> (weighted
    /// fusion of min-max normalised scores).
    #[arg(long, default_value = "bm25")]
    retriever: String,
    /// Dense search: exact, hnsw, or auto (exact up to 20,000 passages, HNSW above).
    #[arg(long, value_enum, default_value = "auto")]
    ann: Ann,
    /// HNSW candidate list size at query time.
    #[arg(long, default_value_t = 128)]
    ef_search: usize,
    /// Load dense models from here instead of the location recorded in the index.
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    model_flags: ModelFlags,
    /// Comma-separated domains [default: every indexed domain].
    #[arg(long)]
    domains: Option<String>,
    /// Qrels split of a BEIR corpus.
    #[arg(long, default_value = "test")]
    split: String,
    /// Passages retrieved per query (the reference keeps 1000).
    #[arg(long, default_value_t = 1000)]
    top_k: usize,
    /// Write the retrieved ranking as a TREC run file.
    #[arg(long)]
    run_out: Option<PathBuf>,
    /// Write the task's qrels (after dropping unjudged queries) as a TREC qrels file, and its
    /// exclusions beside it (`<file>.exclusions`, `qid docid` lines).
    #[arg(long)]
    qrels_out: Option<PathBuf>,
    #[command(flatten)]
    bm25: Bm25Flags,
    #[command(flatten)]
    analyzer: AnalyzerFlags,

    /// TREC run file to score (run mode).
    #[arg(long, requires = "qrels")]
    run: Option<PathBuf>,
    /// TREC qrels file (`qid iter docid grade`) (run mode).
    #[arg(long, requires = "run")]
    qrels: Option<PathBuf>,
    /// Exclusion list (`qid docid` lines) removed from the run before scoring (run mode).
    #[arg(long, requires = "run")]
    exclude: Option<PathBuf>,
    /// Also score judged queries missing from the run, as 0 (trec_eval -c) (run mode).
    #[arg(long, requires = "run")]
    complete: bool,
    /// Include per-query metrics in the JSON output.
    #[arg(long)]
    per_query: bool,

    /// Print one JSON object: {"metrics": {...}, "per_domain": {...}, ...}.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

/// Dense search mode.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Ann {
    Auto,
    Exact,
    Hnsw,
}

pub fn run(a: Args) -> Result<()> {
    match (&a.corpus, &a.index, &a.run, &a.qrels) {
        (Some(c), Some(i), None, None) => run_task(&a, c, i),
        (None, None, Some(r), Some(q)) => score_run(&a, r, q),
        _ => bail!(
            "give either --corpus and --index (run a task) or --run and --qrels (score a run)"
        ),
    }
}

fn score_run(a: &Args, run_path: &Path, qrels_path: &Path) -> Result<()> {
    let run = read_run(run_path)?;
    let mut warnings = Warnings::new();
    let qrels = read_qrels(qrels_path, &mut warnings)?;
    let exclusions = match &a.exclude {
        Some(p) => read_exclusions(p)?,
        None => Exclusions::new(),
    };
    let ev = evaluate(&run, &qrels, &exclusions, a.complete);
    let name = qrels_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "qrels".into());
    let report = Report {
        task: "run".into(),
        retriever: run_path.display().to_string(),
        per_domain: vec![DomainResult {
            domain: name.clone(),
            queries: ev.per_query.len(),
            metrics: ev.mean.clone(),
        }],
    };
    report_warnings(&qrels_path.display().to_string(), &warnings);
    if a.json {
        let mut out = report.to_json();
        out["warnings"] = serde_json::to_value(warnings.to_map())?;
        if a.per_query {
            out["per_query"] = serde_json::json!({ name: ev.per_query });
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("{}", report.to_markdown(&TABLE_COLUMNS));
        print_all_metrics(&ev.mean);
    }
    Ok(())
}

fn print_all_metrics(m: &BTreeMap<String, f64>) {
    for name in metric_names() {
        if let Some(v) = m.get(&name) {
            println!("{name:<12} {v:.4}");
        }
    }
}

fn run_task(a: &Args, corpus_dir: &Path, index_dir: &Path) -> Result<()> {
    let corpus = Corpus::open(corpus_dir)?;
    let index = IndexDir::open(index_dir)?;
    let m = index.manifest();
    if a.analyzer.any() {
        index.check_analyzer(&a.analyzer.apply(&m.analyzer))?;
    }
    let params = a.bm25.apply(m.bm25);
    params.validate()?;
    let retriever = Retriever::parse(&a.retriever)?;
    let mut models = Models::default();
    models.load(&index, &retriever, &a.model_flags, a.model.as_deref())?;
    let settings = SearchSettings {
        bm25: params,
        top_k: a.top_k,
        ann: match a.ann {
            Ann::Auto => None,
            Ann::Exact => Some(sift_index::AnnMode::Exact),
            Ann::Hnsw => Some(sift_index::AnnMode::Hnsw(a.ef_search)),
        },
        ef_search: a.ef_search,
    };
    let wanted = split_list(&a.domains);
    let domains: Vec<String> = if wanted.is_empty() {
        m.domains.keys().cloned().collect()
    } else {
        corpus.select_domains(&wanted)?
    };
    let bars = Bars::new(a.quiet || a.json);
    let mut per_domain = Vec::new();
    let mut all_warnings = Warnings::new();
    let mut dropped = BTreeMap::new();
    let mut full_run: BTreeMap<String, Vec<RunEntry>> = BTreeMap::new();
    let mut full_qrels = sift_core::Qrels::new();
    let mut full_exclusions = Exclusions::new();
    let mut per_query_out = BTreeMap::new();
    for domain in &domains {
        index
            .check_domain(domain, Some(&corpus))
            .with_context(|| format!("domain {domain}"))?;
        let opened = Domain::open(&index, domain, &retriever, &models)?;
        let bm25 = opened.bm25();
        let mut task =
            task1(&corpus, domain, &a.split).with_context(|| format!("domain {domain}"))?;
        check_qrels_ids(
            &task.qrels,
            |id| bm25.ord(id).is_some(),
            corpus.root(),
            &mut task.warnings,
        );
        let bar = bars.bar(domain, task.queries.len() as u64);
        let exclusions = |qid: &str| -> Vec<String> {
            task.exclusions
                .get(qid)
                .map(|x| x.iter().cloned().collect())
                .unwrap_or_default()
        };
        let results = opened.run(&retriever, &task.queries, &exclusions, &settings, &|| {
            bar.inc(1)
        })?;
        bar.finish_and_clear();
        let run: Run = results.into_iter().collect();
        // complete = true: a judged query with no hit at all scores 0 instead of vanishing
        let ev = evaluate(&run, &task.qrels, &task.exclusions, true);
        per_domain.push(DomainResult {
            domain: domain.clone(),
            queries: ev.per_query.len(),
            metrics: ev.mean.clone(),
        });
        dropped.insert(domain.clone(), task.dropped_no_qrels);
        if a.per_query {
            per_query_out.insert(domain.clone(), ev.per_query);
        }
        all_warnings.extend(task.warnings);
        if a.run_out.is_some() {
            full_run.extend(run);
        }
        if a.qrels_out.is_some() {
            full_qrels.extend(task.qrels);
            full_exclusions.extend(task.exclusions);
        }
    }
    if let Some(path) = &a.run_out {
        write_run(path, &full_run, "sift")?;
    }
    if let Some(path) = &a.qrels_out {
        write_qrels(path, &full_qrels)?;
        let mut x = path.as_os_str().to_owned();
        x.push(".exclusions");
        write_exclusions(std::path::Path::new(&x), &full_exclusions)?;
    }
    let report = Report {
        task: a.task.clone(),
        retriever: retriever.describe(&params),
        per_domain,
    };
    report_warnings("evaluation inputs", &all_warnings);
    if a.json {
        let mut out = report.to_json();
        out["dropped_queries_without_qrels"] = serde_json::to_value(&dropped)?;
        out["warnings"] = serde_json::to_value(all_warnings.to_map())?;
        if a.per_query {
            out["per_query"] = serde_json::to_value(&per_query_out)?;
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "Task {} — {} (metrics in %)\n",
            report.task, report.retriever
        );
        println!("{}", report.to_markdown(&TABLE_COLUMNS));
        let n: usize = dropped.values().sum();
        if n > 0 {
            println!("{n} quer(y/ies) without judgements dropped before scoring");
        }
    }
    Ok(())
}
