use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sift_core::Warnings;
use sift_eval::{
    DomainResult, Exclusions, Protocol, Report, Task, metric_names, read_exclusions, read_qrels,
    read_run, score_run, write_exclusions, write_qrels,
};
use sift_index::IndexDir;
use sift_retrieve::{
    EvalConfig, Instructions, ModelSet, QueryFusion, RetrieverSpec, RunOutput, SearchSettings,
    TABLE_COLUMNS,
};

use crate::cmd::report_warnings;
use crate::models::ModelFlags;
use crate::options::{AnalyzerFlags, Bm25Flags, CorpusFlags, DomainFlags, RerankFlags, split_list};
use crate::progress::Bars;

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
    /// Task 4 judgements: paper (graded 2/1/0, pairs with negative images excluded: the
    /// paper's text) or legacy (every gold-passage pair relevance 1, nothing excluded: what
    /// MM-BRIGHT's released code scores). Default: legacy with a reference profile, else
    /// paper.
    #[arg(long, value_enum)]
    protocol: Option<Protocol>,
    /// How Task 4 links passages and corpus images into pairs: regex (equal 8-hex base keys
    /// of passage id and image path, the reference code; chunked ids such as
    /// biology/fec40b40_1635_4.txt get no image) or source-id (the image annotations'
    /// source_passage_id, MTEB's port). The report counts what each leaves unlinked.
    #[arg(long, value_enum, default_value = "regex")]
    pair_link: sift_eval::PairLink,
    /// How vision-language models combine query text and images (Tasks 2-4): all (text and
    /// the mean of all query images, weighted equally), first (text and the first image's
    /// unit vectors, a blank white image when there is none), reference (MM-BRIGHT's
    /// reference code's rule for each model and task: the first image, fused as it fuses
    /// that model), or both (all and first). Default: reference with a reference
    /// `--profile`, else all.
    #[arg(long, value_enum)]
    query_fusion: Option<QueryFusion>,
    /// Write every table (results.md, results.json), the TREC run of each task and retriever
    /// (runs/) and each task's qrels and exclusions (qrels/) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    search: crate::options::SearchFlags,
    /// Load dense models from here instead of the location recorded in the index.
    #[arg(long)]
    model: Option<String>,
    /// Task instructions of queries, for models that take one: reference (MM-BRIGHT's code
    /// gives none: each model's default prefix) or bright (BRIGHT's per-domain instruction
    /// for each model it has one for, e.g. "Given a {domain} post, retrieve relevant
    /// passages that help answer the post"). `--query-instruction` and
    /// `--instructions-file` override it.
    #[arg(long, value_enum, default_value = "reference")]
    instructions: InstructionSet,
    /// Per-domain query instructions: a JSON object of domain -> instruction (`"*"`: every
    /// other domain; `{domain}` -> the domain's name).
    #[arg(long, conflicts_with = "query_instruction")]
    instructions_file: Option<PathBuf>,
    #[command(flatten)]
    model_flags: ModelFlags,
    #[command(flatten)]
    corpus_flags: CorpusFlags,
    #[command(flatten)]
    domain_flags: DomainFlags,
    /// Passages retrieved per query (the reference keeps 1000).
    #[arg(long, default_value_t = 1000, value_parser = crate::options::positive)]
    top_k: usize,
    /// Write the retrieved ranking as a TREC run file (`-`: standard output, the report
    /// then goes to stderr).
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
    /// Include per-query metrics in the JSON output (always in --out's results.json).
    #[arg(long)]
    per_query: bool,
    /// Compare two retrievers (job labels, or retrievers naming one job per task) query by
    /// query on every task that has both: per domain and pooled, wins / ties / losses, a
    /// paired t-test and a paired randomisation test (exact when every sign flip fits in
    /// --resamples), with Holm's correction across domains.
    #[arg(long, value_name = "A,B", value_delimiter = ',', num_args = 1)]
    compare: Option<Vec<String>>,
    /// Output: text (Markdown tables), or latex (the per-domain tables as the paper lays
    /// them out: a row per retriever, best bold, second underlined; also written to --out
    /// as results.tex).
    #[arg(long, value_enum, default_value = "text")]
    format: OutputFormat,
    /// The metric --compare tests (and --format latex tabulates).
    #[arg(long, default_value = "ndcg@10")]
    compare_metric: String,
    /// Random sign flips of --compare's randomisation test (when not exact).
    #[arg(long, default_value_t = sift_eval::stats::RESAMPLES, value_parser = crate::options::int_in::<usize>(1, 10_000_000))]
    resamples: usize,
    /// Seed of --compare's random sign flips.
    #[arg(long, default_value_t = sift_eval::stats::SEED)]
    seed: u64,

    /// Print one JSON object: {"metrics": {...}, "per_domain": {...}, ...}.
    #[arg(long)]
    json: bool,
    /// Generated text to join to the queries, as LABEL:PATH (`captions:gen/captions`):
    /// `sift generate`'s output directory or one JSONL file (`id`, `text` per line). Each
    /// runs beside the plain queries, as its own row (`bm25 +captions`). Repeat for several.
    #[arg(long, value_name = "LABEL:PATH")]
    query_augment: Vec<String>,
    /// Put the generated text in the query's place instead of appending it (after a
    /// newline).
    #[arg(long)]
    augment_replace: bool,
    #[command(flatten)]
    rerank: RerankFlags,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: Args) -> Result<()> {
    match (&a.corpus, &a.index, &a.run, &a.qrels) {
        (Some(c), Some(i), None, None) => run_task(&a, c, i),
        (None, None, Some(r), Some(q)) => score_file(&a, r, q),
        // a usage error: clap's message and exit status 2
        _ => clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            "give either --corpus and --index (run a task) or --run and --qrels (score a run)\n",
        )
        .exit(),
    }
}

fn score_file(a: &Args, run_path: &Path, qrels_path: &Path) -> Result<()> {
    let run = read_run(run_path)?;
    let mut warnings = Warnings::new();
    let qrels = read_qrels(qrels_path, &mut warnings)?;
    let exclusions = match &a.exclude {
        Some(p) => read_exclusions(p)?,
        None => Exclusions::new(),
    };
    let ev = score_run(&run, &qrels, &exclusions, a.complete);
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

/// The query instructions: `--instructions-file`, else `--query-instruction`, else the
/// `--instructions` set.
fn instructions(a: &Args) -> Result<Instructions> {
    Ok(
        match (&a.instructions_file, &a.model_flags.query_instruction) {
            (Some(path), _) => Instructions::from_file(path)?,
            (None, Some(text)) => Instructions::Text(text.clone()),
            (None, None) => match a.instructions {
                InstructionSet::Reference => Instructions::Reference,
                InstructionSet::Bright => Instructions::Bright,
            },
        },
    )
}

/// The query augmentations of `--query-augment LABEL:PATH`.
fn augments(a: &Args) -> Result<Vec<sift_retrieve::QueryAugment>> {
    a.query_augment
        .iter()
        .map(|spec| {
            let (label, path) = spec
                .split_once(':')
                .filter(|(l, p)| !l.is_empty() && !p.is_empty())
                .with_context(|| format!("--query-augment {spec:?}: give LABEL:PATH"))?;
            Ok(sift_retrieve::QueryAugment::from_path(
                label,
                Path::new(path),
                a.augment_replace,
            )?)
        })
        .collect()
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
    let retrievers: Vec<RetrieverSpec> = a
        .retriever
        .iter()
        .map(|r| r.parse())
        .collect::<std::result::Result<_, _>>()?;
    let mut options = a.model_flags.options()?;
    // the instruction is applied per domain and per model (models that take none ignore it)
    options.query_instruction = None;
    let instructions = instructions(a)?;
    let mut models = ModelSet::new();
    for r in &retrievers {
        models
            .load_for(&index, r, &options, a.model.as_deref())
            .with_context(|| format!("loading the models of {r}"))?;
    }
    let tasks: Vec<Task> = match a.task.as_str() {
        "all" => Task::ALL.to_vec(),
        t => vec![t.parse().map_err(anyhow::Error::msg)?],
    };
    let wanted = split_list(&a.domain_flags.domains);
    let (protocol, fusion) = QueryFusion::defaults(a.model_flags.profile);
    let config = EvalConfig {
        tasks,
        retrievers,
        protocol: a.protocol.unwrap_or(protocol),
        pair_link: a.pair_link,
        query_images: a.query_fusion.unwrap_or(fusion).modes(),
        settings: SearchSettings {
            bm25: params,
            top_k: a.top_k,
            ann: a.search.ann,
            ef_search: a.search.ef_search,
        },
        domains: (!wanted.is_empty()).then_some(wanted),
        split: a.domain_flags.split.clone(),
        // runs are streamed to disk domain by domain, never held whole
        runs: RunOutput {
            memory: false,
            dir: a.out.as_ref().map(|d| d.join("runs")),
            file: a.run_out.clone(),
        },
        // the report and --compare read per-query metrics
        per_query: a.per_query || a.out.is_some() || a.compare.is_some(),
        instructions,
        profile: a.model_flags.profile,
        augments: augments(a)?,
        rerank: Vec::new(),
    };
    let mut config = config;
    config.rerank = a.rerank.stages(&a.model_flags, a.out.as_deref())?;
    let jobs = sift_retrieve::count_jobs(&config, &models);
    if jobs != 1 && (a.run_out.is_some() || a.qrels_out.is_some()) {
        bail!(
            "--run-out / --qrels-out take one task and one retriever (this evaluation has {jobs} \
             jobs); use --out DIR for several"
        );
    }
    let bars = Bars::new(a.quiet || a.json);
    let report = sift_retrieve::evaluate(&corpus, &index, &models, &config, &bars)?;
    if let Some(path) = &a.qrels_out {
        let (q, x) = &report.qrels[&report.jobs[0].task];
        write_qrels(path, q)?;
        let mut xp = path.as_os_str().to_owned();
        xp.push(".exclusions");
        write_exclusions(std::path::Path::new(&xp), x)?;
    }
    report_warnings("evaluation inputs", &report.warnings);
    for n in &report.not_applicable {
        eprintln!("note: {n} (skipped)");
    }
    for n in &report.notes {
        eprintln!("note: {n}");
    }
    if let Some(dir) = &a.out {
        report.write_to(dir)?;
        if a.format == OutputFormat::Latex {
            let tex = dir.join("results.tex");
            sift_core::write_output(&tex, report.to_latex(&a.compare_metric).as_bytes())?;
        }
    }
    let comparisons = match &a.compare {
        Some(pair) => {
            let [x, y] = pair.as_slice() else {
                bail!("--compare takes two retrievers: A,B");
            };
            report.compare(x, y, &a.compare_metric, a.resamples, a.seed)?
        }
        None => Vec::new(),
    };
    // with the run on standard output (`--run-out -`), the report goes to stderr
    let run_on_stdout = a.run_out.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let text = if a.json {
        let mut json = report.to_json();
        if a.compare.is_some() {
            json["comparisons"] = serde_json::to_value(&comparisons)?;
        }
        format!("{}\n", serde_json::to_string_pretty(&json)?)
    } else if a.format == OutputFormat::Latex {
        report.to_latex(&a.compare_metric)
    } else {
        let mut t = report.to_markdown();
        for c in &comparisons {
            t.push_str(&comparison_table(c));
        }
        if let Some(dir) = &a.out {
            t.push_str(&format!(
                "tables, runs and qrels written to {}\n",
                dir.display()
            ));
        }
        t
    };
    if run_on_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    // a reranker that failed on some queries: everything is written (those queries keep
    // their first-stage ranking), and the exit status says the run is partial
    if !report.rerank_failures.is_empty() {
        for f in &report.rerank_failures {
            eprintln!("warning: {f}");
        }
        let n: usize = report.rerank_failures.iter().map(|f| f.failed.len()).sum();
        bail!("{n} quer(y/ies) were not reranked: the reranked runs written are partial");
    }
    Ok(())
}

/// What `sift eval` prints.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum OutputFormat {
    /// Markdown tables.
    Text,
    /// LaTeX tables (booktabs).
    Latex,
}

/// Built-in query instruction sets of `sift eval --instructions`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum InstructionSet {
    /// MM-BRIGHT's reference code: no instruction (each model's default prefix).
    Reference,
    /// BRIGHT's per-domain instructions.
    Bright,
}

/// A comparison as a Markdown table: per domain and pooled, the two means, the difference,
/// wins / ties / losses, and both tests' p-values, raw and Holm-adjusted.
fn comparison_table(c: &sift_retrieve::Comparison) -> String {
    let p = |x: f64| {
        if x.is_nan() {
            "-".to_string()
        } else if x < 1e-4 {
            format!("{x:.1e}")
        } else {
            format!("{x:.4}")
        }
    };
    let mut t = format!(
        "\nTask {}: {} (A) vs {} (B), {}, paired over queries\n\n\
         | domain | queries | A | B | A - B | wins/ties/losses | t-test p | Holm | randomisation p | Holm |\n\
         |---|---:|---:|---:|---:|:---:|---:|---:|---:|---:|\n",
        c.task, c.a, c.b, c.metric
    );
    for d in &c.domains {
        let r = &d.paired;
        t.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} | {:+.4} | {}/{}/{} | {} | {} | {}{} | {} |\n",
            d.domain,
            r.n,
            r.mean_a,
            r.mean_b,
            r.mean_a - r.mean_b,
            r.wins,
            r.ties,
            r.losses,
            p(r.t_p),
            d.t_p_holm.map_or("".into(), p),
            p(r.perm_p),
            if r.perm_exact { " (exact)" } else { "" },
            d.perm_p_holm.map_or("".into(), p),
        ));
    }
    t.push_str(
        "\nHolm: adjusted across the domains above (the family-wise error rate of testing every \
         domain); \"all\" pools every domain's queries.\n",
    );
    t
}
