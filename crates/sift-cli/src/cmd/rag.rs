use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use sift_core::{Corpus, Example, Warnings};
use sift_eval::{Task, trec_order};
use sift_generate::rag::{self, RagQuery};
use sift_generate::{
    GenerationCache, Generator, Job, Outcome, RunOptions, RunSummary, Sampling, generate_all,
};
use sift_index::IndexDir;
use sift_retrieve::{EvalConfig, ModelSet, RetrieverSpec, RunOutput};

use crate::cmd::report_warnings;
use crate::models::ModelFlags;
use crate::options::{CorpusFlags, GenerationFlags, domain_list, split_list};
use crate::progress::Bars;

/// End-to-end RAG with a judge (MM-BRIGHT's Table 7): a generator answers each query from no
/// evidence (`none`), the gold passages (`oracle`) or a retriever's top k, and a judge model
/// scores each answer against the reference answer (`gold_answers`) from 0 to 100. Prints the
/// mean score per domain and retriever, and each retriever's gap to the oracle. Answers and
/// judgements are cached like `sift generate`'s.
#[derive(clap::Args)]
#[command(after_help = "Example:
  sift rag --corpus corpora/sample --index target/sample-index \\
      --retriever none --retriever oracle --retriever bm25 \\
      --generator http://127.0.0.1:8000/v1 --model Qwen/Qwen2-VL-7B-Instruct \\
      --judge-generator https://api.openai.com/v1 --judge-model gpt-4o --out target/rag")]
pub struct Args {
    /// Corpus directory (MM-BRIGHT layout: the queries' `gold_answers` are the references).
    #[arg(long)]
    corpus: PathBuf,
    #[command(flatten)]
    corpus_flags: CorpusFlags,
    /// Index of the corpus (for retrievers other than none and oracle).
    #[arg(long)]
    index: Option<PathBuf>,
    /// none (no evidence), oracle (the query's gold passages), or a retriever (bm25,
    /// dense:<model>, hybrid:...). Repeat to compare.
    #[arg(long, default_value = "bm25")]
    retriever: Vec<String>,
    /// 1: the query text; 2: the query text and its images, shown to the generator.
    #[arg(long, default_value = "2", value_parser = ["1", "2"])]
    task: String,
    /// Comma-separated domains [default: all the corpus's].
    #[arg(long, value_parser = domain_list)]
    domains: Option<String>,
    /// Passages a retriever gives the generator.
    #[arg(long, default_value_t = 5, value_parser = crate::options::int_in::<usize>(1, 10_000))]
    top_k: usize,
    /// Characters of each passage in the prompt.
    #[arg(long, default_value_t = 2000, value_parser = crate::options::int_in::<usize>(1, 100_000_000))]
    max_evidence_chars: usize,
    /// The answering generator: an OpenAI-compatible endpoint's base URL
    /// (`http://host:port/v1`), or a local Qwen2-VL- or Qwen2.5-VL-Instruct checkpoint
    /// (directory or hub id).
    #[arg(long)]
    generator: String,
    /// The model an endpoint serves; not for a local generator.
    #[arg(long)]
    model: Option<String>,
    /// The judge: an endpoint's base URL or a local checkpoint [default: --generator].
    #[arg(long)]
    judge_generator: Option<String>,
    /// The judge model an endpoint serves.
    #[arg(long)]
    judge_model: Option<String>,
    /// At most this many new tokens an answer.
    #[arg(long, default_value_t = 512, value_parser = crate::options::int_in::<u32>(1, 1 << 20))]
    max_new_tokens: u32,
    /// At most this many new tokens a judgement.
    #[arg(long, default_value_t = 256, value_parser = crate::options::int_in::<u32>(1, 1 << 20))]
    judge_max_new_tokens: u32,
    #[command(flatten)]
    requests: GenerationFlags,
    /// Output directory: `<retriever>/<domain>.jsonl` (answer, score, judgement, evidence
    /// ids per query), results.md and results.json.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    model_flags: ModelFlags,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

/// Where a retriever's evidence comes from.
enum Source {
    None,
    Oracle,
    Retriever(RetrieverSpec),
}

#[derive(serde::Serialize, Clone, Default)]
struct Cell {
    /// Mean judge score over the judged queries.
    mean: Option<f64>,
    judged: usize,
    queries: usize,
    failed: usize,
    unparsed_scores: usize,
}

pub fn run(a: Args) -> Result<()> {
    if a.requests.concurrency == 0 || a.top_k == 0 {
        bail!("--concurrency and --top-k must be at least 1");
    }
    let corpus = a.corpus_flags.open(&a.corpus)?;
    let domains = corpus.select_domains(&split_list(&a.domains))?;
    let task = if a.task == "1" {
        Task::Passages
    } else {
        Task::MultimodalPassages
    };
    let sources = sources(&a.retriever)?;
    let index = match &a.index {
        Some(dir) => Some(IndexDir::open(dir)?),
        None if sources
            .iter()
            .any(|(_, s)| matches!(s, Source::Retriever(_))) =>
        {
            bail!("--index is needed for retrievers other than none and oracle")
        }
        None => None,
    };
    let mut models = ModelSet::new();
    if let Some(index) = &index {
        let options = a.model_flags.options()?;
        for (_, s) in &sources {
            if let Source::Retriever(spec) = s {
                models
                    .load_for(index, spec, &options, None)
                    .with_context(|| format!("loading the models of {spec}"))?;
            }
        }
    }
    let remote = a.requests.remote();
    let device = sift_embed::select_device(a.model_flags.device.parse()?)?;
    let (generator, local) =
        sift_generate::open(&a.generator, a.model.as_deref(), &remote, &device, false)
            .with_context(|| format!("opening the generator {}", a.generator))?;
    let judge_spec = a.judge_generator.as_deref().unwrap_or(&a.generator);
    let (judge, judge_local) = sift_generate::open(
        judge_spec,
        a.judge_model.as_deref(),
        &remote,
        &device,
        false,
    )
    .with_context(|| format!("opening the judge {judge_spec}"))?;
    let cache = a.requests.open_cache(&a.out)?;
    let bars = Bars::new(a.quiet || a.json);
    let options = a.requests.run_options(local || judge_local);
    let (answer_t, judge_t) = (rag::answer_template(), rag::judge_template());
    let mut warnings = Warnings::new();
    let mut table: BTreeMap<String, BTreeMap<String, Cell>> = BTreeMap::new();
    let mut failures = 0;
    for domain in &domains {
        let examples: Vec<Example> = corpus
            .examples(domain, task == Task::MultimodalPassages, &mut warnings)?
            .into_iter()
            .filter(|e| e.gold_answers.iter().any(|g| !g.trim().is_empty()))
            .collect();
        let images: HashMap<String, Vec<u8>> = if task == Task::MultimodalPassages {
            corpus
                .query_images(domain)?
                .map(|r| r.map(|r| (r.path, r.bytes)))
                .collect::<sift_core::Result<_>>()?
        } else {
            HashMap::new()
        };
        // each source's evidence ids per query, best first
        let mut ids: Vec<Vec<Vec<String>>> = Vec::new();
        for (_, source) in &sources {
            ids.push(match source {
                Source::None => vec![Vec::new(); examples.len()],
                Source::Oracle => examples.iter().map(|e| e.gold_ids.clone()).collect(),
                Source::Retriever(spec) => {
                    let index = index.as_ref().expect("checked above");
                    top_k(
                        &corpus, index, &models, spec, task, domain, &examples, a.top_k,
                    )?
                }
            });
        }
        let texts = evidence_texts(&corpus, domain, &ids)?;
        for ((label, _), ids) in sources.iter().zip(&ids) {
            let queries = rag_queries(&examples, ids, &images, &texts);
            let (cell, rows, failed) = answer_and_judge(
                (generator.as_ref(), judge.as_ref()),
                (&answer_t, &judge_t),
                &queries,
                &a,
                &cache,
                options,
                &bars,
                &format!("{domain} {label}"),
            );
            for f in &failed {
                eprintln!("error: {domain} {label}: {f}");
            }
            failures += failed.len();
            let file = a
                .out
                .join(sift_retrieve::safe_name(label))
                .join(format!("{domain}.jsonl"));
            write_rows(&file, &rows)?;
            table
                .entry(label.clone())
                .or_default()
                .insert(domain.clone(), cell);
        }
    }
    report_warnings("queries", &warnings);
    let labels: Vec<String> = sources.iter().map(|(l, _)| l.clone()).collect();
    let markdown = markdown(&labels, &domains, &table);
    let json = serde_json::json!({
        "generator": {"spec": a.generator, "model": generator.model_id()},
        "judge": {"spec": judge_spec, "model": judge.model_id()},
        "task": task.number(),
        "top_k": a.top_k,
        "results": table,
        "mean": labels.iter().map(|l| (l.clone(), mean_of(&table[l]))).collect::<BTreeMap<_, _>>(),
    });
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    sift_core::write_output(&a.out.join("results.md"), markdown.as_bytes())?;
    sift_core::write_output(
        &a.out.join("results.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{markdown}");
    }
    if failures > 0 {
        bail!(
            "{failures} generation(s) failed (see above); rerun to retry them: the rest are cached"
        );
    }
    Ok(())
}

/// The evidence sources of `--retriever`: none, the gold passages, or a retriever spec.
fn sources(retrievers: &[String]) -> Result<Vec<(String, Source)>> {
    retrievers
        .iter()
        .map(|r| {
            Ok(match r.as_str() {
                "none" => (r.clone(), Source::None),
                "oracle" => (r.clone(), Source::Oracle),
                spec => (r.clone(), Source::Retriever(spec.parse()?)),
            })
        })
        .collect()
}

/// The texts of the passages of `domain` that some source gives as evidence.
fn evidence_texts(
    corpus: &Corpus,
    domain: &str,
    ids: &[Vec<Vec<String>>],
) -> Result<HashMap<String, String>> {
    let wanted: HashSet<&str> = ids.iter().flatten().flatten().map(String::as_str).collect();
    let mut texts: HashMap<String, String> = HashMap::new();
    for p in corpus.passages(domain)? {
        let p = p?;
        if wanted.contains(p.id.as_str()) {
            texts.insert(p.id, p.text);
        }
    }
    Ok(texts)
}

/// One source's questions: each example with its images, its reference answer and the
/// texts of its evidence `ids`.
fn rag_queries(
    examples: &[Example],
    ids: &[Vec<String>],
    images: &HashMap<String, Vec<u8>>,
    texts: &HashMap<String, String>,
) -> Vec<RagQuery> {
    examples
        .iter()
        .zip(ids)
        .map(|(e, ids)| RagQuery {
            id: e.id.clone(),
            text: e.query.clone(),
            images: e
                .image_paths
                .iter()
                .filter_map(|p| images.get(p).map(|b| (p.clone(), b.clone())))
                .collect(),
            reference: e.gold_answers.join("\n"),
            evidence: ids
                .iter()
                .filter_map(|id| texts.get(id).map(|t| (id.clone(), t.clone())))
                .collect(),
        })
        .collect()
}

/// A retriever's top `k` passages per query (in `examples`' order), the query's excluded
/// ids (`negative_ids`) left out, as `sift eval` runs it.
#[allow(clippy::too_many_arguments)]
fn top_k(
    corpus: &sift_core::Corpus,
    index: &IndexDir,
    models: &ModelSet,
    spec: &RetrieverSpec,
    task: Task,
    domain: &str,
    examples: &[Example],
    k: usize,
) -> Result<Vec<Vec<String>>> {
    let config = EvalConfig {
        tasks: vec![task],
        retrievers: vec![spec.clone()],
        domains: Some(vec![domain.to_string()]),
        runs: RunOutput {
            memory: true,
            ..RunOutput::default()
        },
        ..EvalConfig::default()
    };
    let report = sift_retrieve::evaluate_quietly(corpus, index, models, &config)
        .with_context(|| format!("retrieving with {spec} in {domain}"))?;
    let run = &report.jobs[0].run;
    Ok(examples
        .iter()
        .map(|e| {
            let mut hits = run.get(&e.id).cloned().unwrap_or_default();
            hits.sort_by(trec_order);
            let excluded: HashSet<&str> = e.negative_ids.iter().map(String::as_str).collect();
            hits.into_iter()
                .filter(|h| !excluded.contains(h.doc.as_str()))
                .take(k)
                .map(|h| h.doc)
                .collect()
        })
        .collect())
}

/// Answers every query, judges every answer, and returns the domain's cell, one row per
/// query, and the failures.
#[allow(clippy::too_many_arguments)]
fn answer_and_judge(
    (generator, judge): (&dyn Generator, &dyn Generator),
    (answer_t, judge_t): (
        &sift_generate::experiments::Template,
        &sift_generate::experiments::Template,
    ),
    queries: &[RagQuery],
    a: &Args,
    cache: &GenerationCache,
    options: RunOptions,
    bars: &Bars,
    label: &str,
) -> (Cell, Vec<serde_json::Value>, Vec<String>) {
    let sampling = Sampling::greedy(a.max_new_tokens);
    let jobs: Vec<Job> = rag::answer_jobs(answer_t, queries, &sampling, a.max_evidence_chars);
    let bar = bars.bar(&format!("{label} answer"), jobs.len() as u64);
    let answered = generate_all(generator, &jobs, cache, options, Some(&bar));
    bar.finish_and_clear();
    let answers: Vec<Option<String>> = answered
        .iter()
        .map(|o| o.generation().map(|g| g.text.clone()))
        .collect();
    let (jobs, which) = rag::judge_jobs(
        judge_t,
        queries,
        &answers,
        &Sampling::greedy(a.judge_max_new_tokens),
    );
    let bar = bars.bar(&format!("{label} judge"), jobs.len() as u64);
    let judged = generate_all(judge, &jobs, cache, options, Some(&bar));
    bar.finish_and_clear();
    let mut failed: Vec<String> = answered
        .iter()
        .chain(&judged)
        .filter_map(|o| match o {
            Outcome::Failed(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    let mut judgements: Vec<Option<&str>> = vec![None; queries.len()];
    for (&i, o) in which.iter().zip(&judged) {
        judgements[i] = o.generation().map(|g| g.text.as_str());
    }
    let mut cell = Cell {
        queries: queries.len(),
        failed: RunSummary::of(&answered).failed + RunSummary::of(&judged).failed,
        ..Cell::default()
    };
    let mut sum = 0.0;
    let mut rows = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let score = judgements[i].and_then(rag::parse_score);
        if judgements[i].is_some() && score.is_none() {
            cell.unparsed_scores += 1;
            failed.push(format!(
                "query {}: the judge gave no score (\"Score: N\")",
                q.id
            ));
        }
        if let Some(s) = score {
            sum += s;
            cell.judged += 1;
        }
        rows.push(serde_json::json!({
            "id": q.id,
            "evidence": q.evidence.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            "answer": answers[i],
            "judgement": judgements[i],
            "score": score,
        }));
    }
    cell.mean = (cell.judged > 0).then(|| sum / cell.judged as f64);
    (cell, rows, failed)
}

fn write_rows(path: &std::path::Path, rows: &[serde_json::Value]) -> Result<()> {
    let dir = path.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let mut text = String::new();
    for r in rows {
        text.push_str(&serde_json::to_string(r)?);
        text.push('\n');
    }
    Ok(sift_core::write_output(path, text.as_bytes())?)
}

/// The unweighted mean over domains of the per-domain means.
fn mean_of(cells: &BTreeMap<String, Cell>) -> Option<f64> {
    let v: Vec<f64> = cells.values().filter_map(|c| c.mean).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn markdown(
    labels: &[String],
    domains: &[String],
    table: &BTreeMap<String, BTreeMap<String, Cell>>,
) -> String {
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let oracle = table.get("oracle").and_then(mean_of);
    let mut s = format!(
        "Judge score (0-100), mean per domain\n\n| evidence | {} | mean | gap to oracle |\n|---|{}---:|---:|\n",
        domains.join(" | "),
        "---:|".repeat(domains.len())
    );
    for l in labels {
        let cells = &table[l];
        let mean = mean_of(cells);
        let gap = match (oracle, mean) {
            (Some(o), Some(m)) => format!("{:.1}", o - m),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "| {l} | {} | {} | {gap} |\n",
            domains
                .iter()
                .map(|d| fmt(cells.get(d).and_then(|c| c.mean)))
                .collect::<Vec<_>>()
                .join(" | "),
            fmt(mean)
        ));
    }
    s
}
