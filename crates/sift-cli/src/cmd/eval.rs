use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sift_core::{Corpus, Warnings};
use sift_eval::{
    DomainResult, Exclusions, Pairs, Protocol, Report, Run, RunEntry, TaskData, check_qrels_ids,
    evaluate, metric_names, read_exclusions, read_qrels, read_run, task1, task2, task3, task4,
    write_exclusions, write_qrels, write_run,
};
use sift_index::IndexDir;

use crate::cmd::report_warnings;
use crate::models::ModelFlags;
use crate::options::{AnalyzerFlags, Bm25Flags, CorpusFlags, split_list};
use crate::progress::Bars;
use crate::retriever::{Candidates, Domain, Models, QueryFusion, Retriever, SearchSettings};

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
sift eval --corpus corpora/sample --index target/sample-index --task all \\\n    \
--retriever bm25 --retriever dense:minilm --retriever dense:clip --out target/sample-eval\n  \
sift eval --run run.txt --qrels qrels.txt --json\n\n\
Tasks (MM-BRIGHT): 1 query text -> passages; 2 query text + images -> passages; 3 query text\n\
+ images -> corpus images (vision-language models only); 4 query text + images ->\n\
passage+image pairs, graded (--protocol). BM25 and text models read the query text only.\n\n\
Metrics: ndcg@k, map@k, recall@k, p@k for k in 1,5,10,25,50,100, mrr (trec_eval recip_rank,\n\
no cut-off) and ndcg (no cut-off). Per domain, then the unweighted mean over domains.")]
pub struct Args {
    /// Corpus directory (task mode).
    #[arg(long, requires = "index", conflicts_with_all = ["run", "qrels"])]
    corpus: Option<PathBuf>,
    /// Index built from that corpus (task mode).
    #[arg(long, requires = "corpus")]
    index: Option<PathBuf>,
    /// Task: 1, 2, 3, 4 or all.
    #[arg(long, default_value = "1", value_parser = ["1", "2", "3", "4", "all"])]
    task: String,
    /// Retriever: bm25, dense:<model> (a dense index built with `sift index --dense`), or
    /// hybrid:<a>+<b> (reciprocal rank fusion, k = 60) / hybrid:<a>+<b>:<wa>,<wb> (weighted
    /// fusion of min-max normalised scores). Repeat to compare several.
    #[arg(long, default_value = "bm25")]
    retriever: Vec<String>,
    /// Task 4 judgements: paper (graded 2/1/0, pairs with negative images excluded) or
    /// legacy (every gold-passage pair relevance 1, nothing excluded).
    #[arg(long, value_enum, default_value = "paper")]
    protocol: ProtocolArg,
    /// How vision-language models combine query text and images (Tasks 2-4): all (text and
    /// the mean of all query images, weighted equally), first (the reference: text and the
    /// first image, a blank white image when there is none), or both (report each).
    #[arg(long, value_enum, default_value = "all")]
    query_fusion: FusionArg,
    /// Write every table (results.md, results.json), the TREC run of each task and retriever
    /// (runs/) and each task's qrels and exclusions (qrels/) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Dense search: exact, hnsw, or auto (exact up to 20,000 passages, HNSW above).
    #[arg(long, value_enum, default_value = "auto")]
    ann: Ann,
    /// HNSW candidate list size at query time.
    #[arg(long, default_value_t = 128, value_parser = crate::options::positive)]
    ef_search: usize,
    /// Load dense models from here instead of the location recorded in the index.
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    model_flags: ModelFlags,
    #[command(flatten)]
    corpus_flags: CorpusFlags,
    /// Comma-separated domains [default: every indexed domain].
    #[arg(long)]
    domains: Option<String>,
    /// Qrels split of a BEIR corpus.
    #[arg(long, default_value = "test")]
    split: String,
    /// Passages retrieved per query (the reference keeps 1000).
    #[arg(long, default_value_t = 1000, value_parser = crate::options::positive)]
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

/// Task 4 protocol.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ProtocolArg {
    Paper,
    Legacy,
}

/// Query fusion modes to run.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum FusionArg {
    All,
    First,
    Both,
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
        // a usage error: clap's message and exit status 2
        _ => clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            "give either --corpus and --index (run a task) or --run and --qrels (score a run)\n",
        )
        .exit(),
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
    if ev.per_query.is_empty() {
        bail!(
            "nothing to score: none of the {} queries of {} is judged in {} ({} judged queries){}",
            run.len(),
            run_path.display(),
            qrels_path.display(),
            qrels.len(),
            if a.complete {
                ""
            } else {
                "; --complete scores judged queries missing from the run as 0"
            }
        );
    }
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

/// One (task, retriever, fusion) combination being evaluated.
struct Job {
    task: u8,
    retriever: Retriever,
    fusion: Option<QueryFusion>,
    label: String,
    report: Report,
    run: BTreeMap<String, Vec<RunEntry>>,
    per_query: BTreeMap<String, BTreeMap<String, sift_eval::Metrics>>,
}

fn task_data(
    task: u8,
    corpus: &Corpus,
    domain: &str,
    split: &str,
    passages: &[String],
    images: &[String],
    protocol: Protocol,
) -> Result<TaskData> {
    Ok(match task {
        1 => task1(corpus, domain, split)?,
        2 => task2(corpus, domain)?,
        3 => task3(corpus, domain)?,
        _ => task4(corpus, domain, passages, images, protocol)?,
    })
}

fn run_task(a: &Args, corpus_dir: &Path, index_dir: &Path) -> Result<()> {
    let corpus = a.corpus_flags.open(corpus_dir)?;
    let index = IndexDir::open(index_dir)?;
    let m = index.manifest();
    if a.analyzer.any() {
        index.check_analyzer(&a.analyzer.apply(&m.analyzer))?;
    }
    let params = a.bm25.apply(m.bm25);
    params.validate()?;
    let retrievers: Vec<Retriever> = a
        .retriever
        .iter()
        .map(|r| Retriever::parse(r))
        .collect::<Result<_>>()?;
    let mut models = Models::default();
    for r in &retrievers {
        models.load(&index, r, &a.model_flags, a.model.as_deref())?;
    }
    let tasks: Vec<u8> = match a.task.as_str() {
        "all" => vec![1, 2, 3, 4],
        t => vec![t.parse().context("task number")?],
    };
    if tasks.iter().any(|&t| t > 1) && corpus.layout() == sift_core::Layout::Beir {
        bail!(
            "tasks 2-4 need an MM-BRIGHT corpus (examples_multimodal, images); this is a BEIR corpus"
        );
    }
    let protocol = match a.protocol {
        ProtocolArg::Paper => Protocol::Paper,
        ProtocolArg::Legacy => Protocol::Legacy,
    };
    let fusions: Vec<QueryFusion> = match a.query_fusion {
        FusionArg::All => vec![QueryFusion::All],
        FusionArg::First => vec![QueryFusion::First],
        FusionArg::Both => vec![QueryFusion::All, QueryFusion::First],
    };
    // every (task, retriever, fusion) to run; Task 3 only for retrievers that rank images
    let mut jobs: Vec<Job> = Vec::new();
    let mut not_applicable: Vec<String> = Vec::new();
    for &task in &tasks {
        for (spec, r) in a.retriever.iter().zip(&retrievers) {
            if task == 3 && !r.ranks_images(&models) {
                not_applicable.push(format!("task 3: {spec} cannot rank images"));
                continue;
            }
            let modes: Vec<Option<QueryFusion>> = if task > 1 && r.sees_images(&models) {
                fusions.iter().map(|f| Some(*f)).collect()
            } else {
                vec![None]
            };
            for fusion in modes {
                let label = match fusion {
                    Some(f) => format!("{spec} [query images: {}]", f.name()),
                    None => spec.clone(),
                };
                jobs.push(Job {
                    task,
                    retriever: r.clone(),
                    fusion,
                    report: Report {
                        task: if task == 4 {
                            format!("4 ({})", protocol_name(protocol))
                        } else {
                            task.to_string()
                        },
                        retriever: match fusion {
                            Some(f) => {
                                format!("{} [query images: {}]", r.describe(&params), f.name())
                            }
                            None => r.describe(&params),
                        },
                        per_domain: Vec::new(),
                    },
                    label,
                    run: BTreeMap::new(),
                    per_query: BTreeMap::new(),
                });
            }
        }
    }
    if jobs.is_empty() {
        bail!("nothing to run: {}", not_applicable.join("; "));
    }
    let single = jobs.len() == 1;
    if !single && (a.run_out.is_some() || a.qrels_out.is_some()) {
        bail!("--run-out / --qrels-out take one task and one retriever; use --out DIR for several");
    }
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
    let mut all_warnings = Warnings::new();
    let mut notes: Vec<String> = Vec::new();
    // per task: dropped queries per domain, qrels and exclusions
    let mut dropped: BTreeMap<u8, BTreeMap<String, usize>> = BTreeMap::new();
    let mut task_qrels: BTreeMap<u8, (sift_core::Qrels, Exclusions)> = BTreeMap::new();
    let combined = Retriever::Hybrid {
        parts: retrievers.clone(),
        weights: None,
    };
    let needs_images = tasks.iter().any(|&t| t >= 3);
    let multimodal = tasks.iter().any(|&t| t >= 2) && combined.sees_images(&models);
    for domain in &domains {
        index
            .check_domain(domain, Some(&corpus))
            .with_context(|| format!("domain {domain}"))?;
        let opened = Domain::open(&index, domain, &combined, &models, needs_images)?;
        for name in opened.empty_image_indexes() {
            notes.push(format!(
                "domain {domain}: dense:{name} indexed no corpus images (none in the corpus, or \
                 none decodable): Task 3 has no candidates there and Task 4 ranks its \
                 passage-only pairs"
            ));
        }
        let bm25 = opened.bm25();
        let passages: Vec<String> = bm25.ids().to_vec();
        let images: Vec<String> = if needs_images {
            corpus
                .image_paths(domain)?
                .map(|r| r.map(|r| r.path))
                .collect::<sift_core::Result<_>>()?
        } else {
            Vec::new()
        };
        let query_images: std::collections::HashMap<String, Vec<u8>> = if multimodal {
            corpus
                .query_images(domain)?
                .map(|r| r.map(|r| (r.path, r.bytes)))
                .collect::<sift_core::Result<_>>()?
        } else {
            Default::default()
        };
        let pairs = if tasks.contains(&4) {
            Pairs::build(domain, &passages, &images)
        } else {
            Pairs::default()
        };
        for &task in &tasks {
            if !jobs.iter().any(|j| j.task == task) {
                continue;
            }
            let mut data = task_data(
                task, &corpus, domain, &a.split, &passages, &images, protocol,
            )
            .with_context(|| format!("domain {domain}, task {task}"))?;
            match task {
                1 | 2 => check_qrels_ids(
                    &data.qrels,
                    |id| bm25.ord(id).is_some(),
                    corpus.root(),
                    &mut data.warnings,
                ),
                3 => {
                    let known: std::collections::HashSet<&str> =
                        images.iter().map(String::as_str).collect();
                    check_qrels_ids(
                        &data.qrels,
                        |id| known.contains(id),
                        corpus.root(),
                        &mut data.warnings,
                    )
                }
                _ => {}
            }
            let candidates = match task {
                1 | 2 => Candidates::Passages,
                3 => Candidates::Images,
                _ => Candidates::Pairs {
                    pairs: &pairs,
                    images: &images,
                },
            };
            let exclusions = |qid: &str| -> Vec<String> {
                data.exclusions
                    .get(qid)
                    .map(|x| x.iter().cloned().collect())
                    .unwrap_or_default()
            };
            let source = corpus.root().join("examples_images");
            let mut qvec_cache: BTreeMap<Option<&'static str>, crate::retriever::QueryVectors> =
                BTreeMap::new();
            for job in jobs.iter_mut().filter(|j| j.task == task) {
                let key = job.fusion.map(|f| f.name());
                if let std::collections::btree_map::Entry::Vacant(slot) = qvec_cache.entry(key) {
                    let fusion = if task == 1 { None } else { job.fusion };
                    slot.insert(opened.query_vectors(
                        &data.queries,
                        fusion,
                        &query_images,
                        &mut data.warnings,
                        &source,
                    )?);
                }
                let qvecs = &qvec_cache[&key];
                let bar = bars.bar(&format!("{domain} t{task}"), data.queries.len() as u64);
                let results = opened.run(
                    &job.retriever,
                    &candidates,
                    &data.queries,
                    qvecs,
                    &exclusions,
                    &settings,
                    &|| bar.inc(1),
                )?;
                bar.finish_and_clear();
                let run: Run = results.into_iter().collect();
                // complete = true: a judged query with no hit at all scores 0
                let ev = evaluate(&run, &data.qrels, &data.exclusions, true);
                job.report.per_domain.push(DomainResult {
                    domain: domain.clone(),
                    queries: ev.per_query.len(),
                    metrics: ev.mean.clone(),
                });
                if a.per_query {
                    job.per_query.insert(domain.clone(), ev.per_query);
                }
                if a.run_out.is_some() || a.out.is_some() {
                    job.run.extend(run);
                }
            }
            dropped
                .entry(task)
                .or_default()
                .insert(domain.clone(), data.dropped_no_qrels);
            let entry = task_qrels.entry(task).or_default();
            entry.0.extend(data.qrels);
            entry.1.extend(data.exclusions);
            all_warnings.extend(data.warnings);
        }
    }
    let scored: usize = jobs
        .iter()
        .flat_map(|j| &j.report.per_domain)
        .map(|d| d.queries)
        .sum();
    if scored == 0 {
        bail!(
            "nothing to score: no query of the selected domains has judgements for the task(s) run"
        );
    }
    if let Some(path) = &a.run_out {
        write_run(path, &jobs[0].run, "sift")?;
    }
    if let Some(path) = &a.qrels_out {
        let (q, x) = &task_qrels[&jobs[0].task];
        write_qrels(path, q)?;
        let mut xp = path.as_os_str().to_owned();
        xp.push(".exclusions");
        write_exclusions(std::path::Path::new(&xp), x)?;
    }
    report_warnings("evaluation inputs", &all_warnings);
    for n in &not_applicable {
        eprintln!("note: {n} (skipped)");
    }
    for n in &notes {
        eprintln!("note: {n}");
    }
    let dropped_json = |task: u8| -> serde_json::Value {
        serde_json::to_value(dropped.get(&task).cloned().unwrap_or_default()).unwrap_or_default()
    };
    let job_json = |job: &Job| -> serde_json::Value {
        let mut out = job.report.to_json();
        out["label"] = job.label.clone().into();
        out["dropped_queries_without_qrels"] = dropped_json(job.task);
        if a.per_query {
            out["per_query"] = serde_json::to_value(&job.per_query).unwrap_or_default();
        }
        out
    };
    let orphans = all_warnings
        .counts()
        .find(|(k, _)| *k == sift_core::WarningKind::OrphanPositiveImage)
        .map_or(0, |(_, n)| n);
    let mut markdown = String::new();
    for job in &jobs {
        markdown.push_str(&format!(
            "Task {} — {} (metrics in %)\n\n{}\n",
            job.report.task,
            job.report.retriever,
            job.report.to_markdown(&TABLE_COLUMNS)
        ));
        let n: usize = dropped.get(&job.task).map_or(0, |d| d.values().sum());
        if n > 0 {
            markdown.push_str(&format!(
                "{n} quer(y/ies) without judgements dropped before scoring\n"
            ));
        }
        markdown.push('\n');
    }
    if !single {
        markdown.push_str(&summary_table(&jobs));
    }
    for n in &notes {
        markdown.push_str(&format!("\nNote: {n}\n"));
    }
    if tasks.contains(&4) && orphans > 0 {
        markdown.push_str(&format!(
            "\nTask 4: {orphans} positive image(s) with no gold passage from their page (orphans: no pair)\n"
        ));
    }
    let json = if single {
        let mut out = job_json(&jobs[0]);
        out["warnings"] = serde_json::to_value(all_warnings.to_map())?;
        out["notes"] = serde_json::to_value(&notes)?;
        out
    } else {
        serde_json::json!({
            "reports": jobs.iter().map(job_json).collect::<Vec<_>>(),
            "not_applicable": not_applicable,
            "notes": notes,
            "protocol": protocol_name(protocol),
            "orphan_positive_images": orphans,
            "warnings": all_warnings.to_map(),
        })
    };
    if let Some(dir) = &a.out {
        write_outputs(dir, &jobs, &task_qrels, &markdown, &json)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{markdown}");
        if let Some(dir) = &a.out {
            println!("tables, runs and qrels written to {}", dir.display());
        }
    }
    Ok(())
}

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Paper => "paper",
        Protocol::Legacy => "legacy",
    }
}

/// Mean nDCG@10 of every task (columns) and retriever (rows).
fn summary_table(jobs: &[Job]) -> String {
    let mut tasks: Vec<&str> = jobs.iter().map(|j| j.report.task.as_str()).collect();
    tasks.dedup();
    let mut labels: Vec<&str> = Vec::new();
    for j in jobs {
        if !labels.contains(&j.label.as_str()) {
            labels.push(&j.label);
        }
    }
    let mut s = String::from("Mean nDCG@10 over domains (%)\n\n| retriever |");
    for t in &tasks {
        s.push_str(&format!(" task {t} |"));
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(tasks.len()));
    s.push('\n');
    for l in labels {
        s.push_str(&format!("| {l} |"));
        for t in &tasks {
            match jobs
                .iter()
                .find(|j| j.label == l && j.report.task == *t)
                .and_then(|j| j.report.mean().get("ndcg@10").copied())
            {
                Some(v) => s.push_str(&format!(" {:.2} |", v * 100.0)),
                None => s.push_str(" n/a |"),
            }
        }
        s.push('\n');
    }
    s
}

fn write_outputs(
    dir: &Path,
    jobs: &[Job],
    qrels: &BTreeMap<u8, (sift_core::Qrels, Exclusions)>,
    markdown: &str,
    json: &serde_json::Value,
) -> Result<()> {
    let runs = dir.join("runs");
    let qdir = dir.join("qrels");
    for d in [dir, &runs, &qdir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(dir.join("results.md"), markdown)
        .with_context(|| format!("writing {}", dir.join("results.md").display()))?;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(json)?,
    )
    .with_context(|| format!("writing {}", dir.join("results.json").display()))?;
    for job in jobs {
        let name: String = job
            .label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        write_run(
            &runs.join(format!("task{}.{name}.trec", job.task)),
            &job.run,
            "sift",
        )?;
    }
    for (task, (q, x)) in qrels {
        write_qrels(&qdir.join(format!("task{task}.qrels")), q)?;
        write_exclusions(&qdir.join(format!("task{task}.exclusions")), x)?;
    }
    Ok(())
}
