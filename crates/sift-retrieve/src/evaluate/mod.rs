//! [`evaluate`]: every (task, retriever, query-image mode) over the domains of an index, as
//! MM-BRIGHT scores them (`docs/src/mm-bright-protocol.md`), with trec_eval semantics.
use crate::augment::QueryAugment;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sift_core::{Corpus, Layout, Qrels, Warnings};
use sift_eval::{Exclusions, LinkReport, Metrics, PairLink, Protocol, Report, Run, Task};
use sift_eval::{RunWriter, run_file_name};
use sift_index::{IndexDir, NoProgress, Progress};

use crate::models::ModelSet;
use crate::query::{Instructions, QueryImages};
use crate::rerank::RerankStage;
use crate::searcher::SearchSettings;
use crate::spec::RetrieverSpec;
use crate::{Error, Result};

mod domain;
mod output;

use domain::evaluate_domain;

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct EvalConfig {
    /// Tasks, in order.
    pub tasks: Vec<Task>,
    /// Retrievers, in order.
    pub retrievers: Vec<RetrieverSpec>,
    /// Task 4 judgements.
    pub protocol: Protocol,
    /// How Task 4 links passages and corpus images.
    pub pair_link: PairLink,
    /// How models that embed images fuse a query's text and images (Tasks 2-4); one report
    /// per mode.
    pub query_images: Vec<QueryImages>,
    /// Search settings.
    pub settings: SearchSettings,
    /// Domains [default: every indexed domain].
    pub domains: Option<Vec<String>>,
    /// Qrels split of a BEIR corpus.
    pub split: String,
    /// Where each job's run goes.
    pub runs: RunOutput,
    /// Keep per-query metrics.
    pub per_query: bool,
    /// The task instruction of queries, for models that take one.
    pub instructions: Instructions,
    /// The profile the evaluation reproduces. With a reference profile, Task 4 has pairs
    /// only for the corpus images the reference's data loader keeps (those that decode:
    /// `src/data.py` 164-168), whatever the retriever. Each dense model follows its own
    /// profile ([`sift_embed::Embedder::profile`]).
    pub profile: sift_embed::Profile,
    /// Generated text joined to the queries ([`QueryAugment`]): each makes a job beside
    /// every plain one (`<retriever> +<label>`).
    pub augments: Vec<QueryAugment>,
    /// Reranking stages: each makes a job beside every first-stage one
    /// (`<retriever> -> rerank:<name>`), rescoring its top candidates.
    pub rerank: Vec<RerankStage>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            tasks: vec![Task::Passages],
            retrievers: vec![RetrieverSpec::Bm25],
            protocol: Protocol::Paper,
            pair_link: PairLink::Regex,
            query_images: vec![QueryImages::All],
            settings: SearchSettings::default(),
            domains: None,
            split: "test".into(),
            runs: RunOutput::default(),
            per_query: false,
            instructions: Instructions::Reference,
            profile: sift_embed::Profile::Default,
            augments: Vec::new(),
            rerank: Vec::new(),
        }
    }
}

/// Where the runs of an evaluation go. Runs streamed to files are written domain by domain
/// as they are made, so memory does not grow with the number of domains.
#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    /// Keep each job's run in memory ([`JobReport::run`]).
    pub memory: bool,
    /// Stream each job's run to `DIR/task<N>.<label>.trec` ([`run_file_name`]).
    pub dir: Option<PathBuf>,
    /// Stream the run to this file; the evaluation must have exactly one job.
    pub file: Option<PathBuf>,
}

/// One (task, retriever, query-image mode) evaluated over the domains.
#[derive(Debug, Clone)]
pub struct JobReport {
    /// The task.
    pub task: Task,
    /// The retriever.
    pub retriever: RetrieverSpec,
    /// How query images were used (models that embed images, Tasks 2-4), else `None`.
    pub query_images: Option<QueryImages>,
    /// Which of [`EvalConfig::augments`] rewrote the queries, else `None` (plain queries).
    pub augment: Option<usize>,
    /// Which of [`EvalConfig::rerank`] reranked the run of the job before it (the same
    /// task, retriever, query images and queries), else `None` (a first-stage run).
    pub rerank: Option<usize>,
    /// `spec [query images: mode]`: the job's name in tables.
    pub label: String,
    /// Per-domain metrics.
    pub report: Report,
    /// The run over every domain (when [`RunOutput::memory`]).
    pub run: Run,
    /// The files its run was streamed to ([`RunOutput::dir`], [`RunOutput::file`]).
    pub run_files: Vec<PathBuf>,
    /// Per-query metrics by domain (when [`EvalConfig::per_query`]).
    pub per_query: BTreeMap<String, BTreeMap<String, Metrics>>,
}

/// Everything an evaluation produced.
#[derive(Debug, Clone)]
pub struct EvalReport {
    /// Every job, tasks in order, then retrievers, then query-image modes.
    pub jobs: Vec<JobReport>,
    /// Combinations left out (e.g. Task 3 for a retriever that cannot rank images).
    pub not_applicable: Vec<String>,
    /// Things worth knowing about the results (domains without image candidates, ...).
    pub notes: Vec<String>,
    /// The reference code's rules in force, per task and dense model, for jobs that
    /// reproduce it (query images `reference`).
    pub reference_rules: Vec<RulesInForce>,
    /// Each task's qrels and exclusions over every domain.
    pub qrels: BTreeMap<Task, (Qrels, Exclusions)>,
    /// Queries without judgements dropped before scoring, by task and domain.
    pub dropped: BTreeMap<Task, BTreeMap<String, usize>>,
    /// The Task 4 protocol.
    pub protocol: Protocol,
    /// How Task 4 linked passages and images, and what each domain left unlinked.
    pub links: LinkReport,
    /// Problems counted while reading the inputs.
    pub warnings: Warnings,
    /// Reranking jobs whose reranker failed on some queries (those keep their first-stage
    /// ranking in the job's run): the run is partial, and `sift eval` exits non-zero.
    pub rerank_failures: Vec<RerankFailures>,
}

/// The queries one reranking job failed on in one domain ([`crate::rerank::rerank_run`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RerankFailures {
    /// The job's label (`bm25 -> rerank:NAME`).
    pub label: String,
    /// The task.
    #[serde(serialize_with = "task_number")]
    pub task: Task,
    /// The domain.
    pub domain: String,
    /// Queries in the domain's run.
    pub queries: usize,
    /// Each query failed on and the error, in the run's order.
    pub failed: Vec<(String, String)>,
}

fn task_number<S: serde::Serializer>(t: &Task, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u8(t.number())
}

impl std::fmt::Display for RerankFailures {
    /// `task T, domain D, LABEL: N of M queries not reranked (first-stage ranking kept): q1,
    /// q2, ... (first error: ...)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.failed.iter().map(|(q, _)| q.as_str()).collect();
        let shown = ids.len().min(10);
        write!(
            f,
            "task {}, domain {}, {}: {} of {} queries not reranked (first-stage ranking kept): {}{}",
            self.task,
            self.domain,
            self.label,
            ids.len(),
            self.queries,
            ids[..shown].join(", "),
            if ids.len() > shown { ", ..." } else { "" }
        )?;
        if let Some((_, e)) = self.failed.first() {
            write!(f, " (first error: {e})")?;
        }
        Ok(())
    }
}

/// The reference code's rules a job reproduced for one dense model in one task
/// ([`crate::reference_rules_in_force`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RulesInForce {
    /// The task.
    pub task: u8,
    /// The dense index (`dense:<name>`).
    pub retriever: String,
    /// The model's profile.
    pub profile: String,
    /// Each rule with its source.
    pub rules: Vec<String>,
}

/// The tag of Sift's TREC runs.
pub const RUN_TAG: &str = "sift";

/// The columns of the per-domain tables.
pub const TABLE_COLUMNS: [&str; 6] = [
    "ndcg@10",
    "recall@10",
    "recall@100",
    "map@100",
    "p@10",
    "mrr",
];

/// Evaluates `config` on `corpus` with `index`, whose dense models `models` holds (see
/// [`ModelSet::load_for`]).
pub fn evaluate(
    corpus: &Corpus,
    index: &IndexDir,
    models: &ModelSet,
    config: &EvalConfig,
    progress: &dyn Progress,
) -> Result<EvalReport> {
    config.settings.bm25.validate()?;
    if corpus.layout() == Layout::Kb {
        return Err(sift_core::Error::NoQueries {
            path: corpus.root().to_path_buf(),
        }
        .into());
    }
    if config.tasks.iter().any(|t| t.has_query_images()) && corpus.layout() == Layout::Beir {
        return Err(Error::Unsupported(
            "tasks 2-4 need an MM-BRIGHT corpus (examples_multimodal, images); this is a BEIR corpus"
                .into(),
        ));
    }
    let (jobs, not_applicable) = plan_jobs(config, models);
    if jobs.is_empty() {
        return Err(Error::Unsupported(format!(
            "nothing to run: {}",
            not_applicable.join("; ")
        )));
    }
    if config.runs.file.is_some() && jobs.len() != 1 {
        return Err(Error::Unsupported(format!(
            "a single run file takes one task and one retriever; this evaluation has {} jobs",
            jobs.len()
        )));
    }
    let mut writers: Vec<Vec<RunWriter>> = Vec::with_capacity(jobs.len());
    if let Some(dir) = &config.runs.dir {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    for job in &jobs {
        let mut w = Vec::new();
        if let Some(dir) = &config.runs.dir {
            w.push(RunWriter::create(
                &dir.join(run_file_name(job.task, &job.label)),
                RUN_TAG,
            )?);
        }
        if let Some(file) = &config.runs.file {
            w.push(RunWriter::create(file, RUN_TAG)?);
        }
        writers.push(w);
    }
    let domains: Vec<String> = match &config.domains {
        None => index.manifest().domains.keys().cloned().collect(),
        Some(wanted) => corpus.select_domains(wanted)?,
    };
    let combined = RetrieverSpec::Hybrid {
        parts: config.retrievers.clone(),
        fusion: crate::spec::RankFusion::Rrf { k: crate::RRF_K },
    };
    let needs_images = config.tasks.iter().any(|t| t.uses_corpus_images());
    let multimodal =
        config.tasks.iter().any(|t| t.has_query_images()) && models.sees_images(&combined);
    let mut out = EvalReport {
        jobs,
        not_applicable,
        notes: Vec::new(),
        reference_rules: reference_rules(config, models),
        qrels: BTreeMap::new(),
        dropped: BTreeMap::new(),
        protocol: config.protocol,
        links: LinkReport::new(),
        warnings: Warnings::new(),
        rerank_failures: Vec::new(),
    };
    for domain in &domains {
        index.check_domain(domain, Some(corpus))?;
        evaluate_domain(
            corpus,
            index,
            models,
            config,
            domain,
            &combined,
            needs_images,
            multimodal,
            &mut out,
            &mut writers,
            progress,
        )?;
    }
    for st in &config.rerank {
        out.notes.extend(st.reranker.notes());
    }
    for (job, ws) in out.jobs.iter_mut().zip(writers) {
        for w in ws {
            job.run_files.push(w.path().to_path_buf());
            w.finish()?;
        }
    }
    let scored: usize = out
        .jobs
        .iter()
        .flat_map(|j| &j.report.per_domain)
        .map(|d| d.queries)
        .sum();
    if scored == 0 {
        return Err(Error::Unsupported(
            "nothing to score: no query of the selected domains has judgements for the task(s) run"
                .into(),
        ));
    }
    Ok(out)
}

/// The reference code's rules in force for every task and dense model that a job runs with
/// the reference's query rule.
fn reference_rules(config: &EvalConfig, models: &ModelSet) -> Vec<RulesInForce> {
    if !config.query_images.contains(&QueryImages::Reference) {
        return Vec::new();
    }
    let mut names: Vec<&str> = config
        .retrievers
        .iter()
        .flat_map(|r| r.dense_names())
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for &task in &config.tasks {
        for &name in &names {
            let Some(e) = models.get(name) else { continue };
            if task == Task::Images && !e.capabilities().images {
                continue;
            }
            let rules = crate::reference::reference_rules_in_force(e, task);
            if !rules.is_empty() {
                out.push(RulesInForce {
                    task: task.number(),
                    retriever: format!("dense:{name}"),
                    profile: e.profile().name().to_string(),
                    rules,
                });
            }
        }
    }
    out
}

/// The jobs `config` makes (one per task, retriever and query-image mode that applies) and
/// the combinations left out.
fn plan_jobs(config: &EvalConfig, models: &ModelSet) -> (Vec<JobReport>, Vec<String>) {
    let mut jobs = Vec::new();
    let mut not_applicable = Vec::new();
    for &task in &config.tasks {
        for st in config.rerank.iter().filter(|st| !st.reranker.ranks(task)) {
            not_applicable.push(format!(
                "task {task}: rerank:{} cannot rank {}",
                st.reranker.name(),
                if task == Task::Images {
                    "images"
                } else {
                    "these candidates"
                }
            ));
        }
        for r in &config.retrievers {
            if task == Task::Images && !models.ranks_images(r) {
                not_applicable.push(format!("task 3: {r} cannot rank images"));
                continue;
            }
            let modes: Vec<Option<QueryImages>> =
                if task.has_query_images() && models.sees_images(r) {
                    config.query_images.iter().map(|m| Some(*m)).collect()
                } else {
                    vec![None]
                };
            let augments = std::iter::once(None).chain((0..config.augments.len()).map(Some));
            for (mode, augment) in modes
                .iter()
                .flat_map(|&m| augments.clone().map(move |a| (m, a)))
            {
                let mut suffix = mode
                    .map(|m| format!(" [query images: {}]", m.name()))
                    .unwrap_or_default();
                if let Some(i) = augment {
                    suffix.push_str(&format!(" +{}", config.augments[i].label));
                }
                let job = JobReport {
                    task,
                    retriever: r.clone(),
                    query_images: mode,
                    augment,
                    rerank: None,
                    label: format!("{r}{suffix}"),
                    report: Report {
                        task: match task {
                            Task::Pairs => format!("4 ({})", config.protocol.name()),
                            t => t.to_string(),
                        },
                        retriever: format!("{}{suffix}", r.describe(&config.settings.bm25)),
                        per_domain: Vec::new(),
                    },
                    run: Run::new(),
                    run_files: Vec::new(),
                    per_query: BTreeMap::new(),
                };
                // each reranking of this run right after it
                let reranked: Vec<JobReport> = config
                    .rerank
                    .iter()
                    .enumerate()
                    .filter(|(_, st)| st.reranker.ranks(task))
                    .map(|(i, st)| {
                        let tail = format!(" -> rerank:{}", st.reranker.name());
                        let mut j = job.clone();
                        j.rerank = Some(i);
                        j.label.push_str(&tail);
                        j.report.retriever.push_str(&tail);
                        j
                    })
                    .collect();
                jobs.push(job);
                jobs.extend(reranked);
            }
        }
    }
    (jobs, not_applicable)
}

/// How many jobs (task, retriever, query-image mode) `config` runs: one report and one run
/// each.
pub fn count_jobs(config: &EvalConfig, models: &ModelSet) -> usize {
    plan_jobs(config, models).0.len()
}

/// The comparison of two retrievers on one task ([`EvalReport::compare`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    /// The task.
    pub task: String,
    /// The first job's label.
    pub a: String,
    /// The second job's label.
    pub b: String,
    /// The metric compared.
    pub metric: String,
    /// Per domain, then every domain pooled (`"all"`).
    pub domains: Vec<sift_eval::stats::DomainComparison>,
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// [`evaluate`] without progress reports.
pub fn evaluate_quietly(
    corpus: &Corpus,
    index: &IndexDir,
    models: &ModelSet,
    config: &EvalConfig,
) -> Result<EvalReport> {
    evaluate(corpus, index, models, config, &NoProgress)
}
