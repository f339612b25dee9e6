//! [`evaluate`]: every (task, retriever, query-image mode) over the domains of an index, as
//! MM-BRIGHT scores them (`docs/src/mm-bright-protocol.md`), with trec_eval semantics.
use crate::augment::QueryAugment;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use sift_core::{Corpus, Layout, Qrels, WarningKind, Warnings};
use sift_eval::{RunWriter, run_file_name};
use sift_eval::{
    CandidateKind, DomainResult, Exclusions, LinkReport, Links, Metrics, PairLink, Protocol,
    Report, Run, Task, check_exclusions, check_qrels_ids, score_run,
};
use sift_index::{IndexDir, NoProgress, Progress};

use crate::candidates::{PairCandidates, PairLinking};
use crate::models::ModelSet;
use crate::query::{Instructions, QueryImages, QueryVectors, encode_queries};
use crate::reference::reference_image_stand_ins;
use crate::rerank::{RerankContent, RerankStage, rerank_run};
use crate::searcher::{Candidates, DomainSearcher, PairStandIns, SearchSettings};
use crate::spec::RetrieverSpec;
use crate::{Error, Result};

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

/// What every domain of an evaluation shares.
struct Ctx<'a> {
    corpus: &'a Corpus,
    models: &'a ModelSet,
    config: &'a EvalConfig,
    /// Every retriever's parts as one (what the searcher opens, what queries encode for).
    combined: &'a RetrieverSpec,
    progress: &'a dyn Progress,
}

/// One domain opened for every job: its searcher, corpus image ids, query images, and
/// Task 4's pairs with their links.
struct OpenDomain {
    searcher: DomainSearcher,
    images: Vec<String>,
    query_images: HashMap<String, Vec<u8>>,
    pairs: PairCandidates,
    links: Links,
}

#[allow(clippy::too_many_arguments)]
fn evaluate_domain(
    corpus: &Corpus,
    index: &IndexDir,
    models: &ModelSet,
    config: &EvalConfig,
    domain: &str,
    combined: &RetrieverSpec,
    needs_images: bool,
    multimodal: bool,
    out: &mut EvalReport,
    writers: &mut [Vec<RunWriter>],
    progress: &dyn Progress,
) -> Result<()> {
    let cx = Ctx {
        corpus,
        models,
        config,
        combined,
        progress,
    };
    let mut d = open_domain(&cx, index, domain, needs_images, multimodal, out)?;
    for &task in &config.tasks {
        if out.jobs.iter().any(|j| j.task == task) {
            evaluate_task(&cx, domain, task, &mut d, out, writers)?;
        }
    }
    Ok(())
}

fn open_domain(
    cx: &Ctx<'_>,
    index: &IndexDir,
    domain: &str,
    needs_images: bool,
    multimodal: bool,
    out: &mut EvalReport,
) -> Result<OpenDomain> {
    let (corpus, config, combined) = (cx.corpus, cx.config, cx.combined);
    let searcher = DomainSearcher::open(index, domain, combined, cx.models, needs_images)?;
    for name in searcher.empty_image_indexes() {
        out.notes.push(format!(
            "domain {domain}: dense:{name} indexed no corpus images (none in the corpus, or none \
             decodable): Task 3 has no candidates there and Task 4 ranks its passage-only pairs"
        ));
    }
    let images: Vec<String> = if needs_images {
        corpus
            .image_paths(domain)?
            .map(|r| r.map(|r| r.path))
            .collect::<sift_core::Result<_>>()?
    } else {
        Vec::new()
    };
    let query_images: HashMap<String, Vec<u8>> = if multimodal {
        corpus
            .query_images(domain)?
            .map(|r| r.map(|r| (r.path, r.bytes)))
            .collect::<sift_core::Result<_>>()?
    } else {
        HashMap::new()
    };
    // Task 4's pairs, linked once for every job (the reference's loader drops corpus images
    // that do not decode: they get no pair)
    let mut pairs = if config.tasks.contains(&Task::Pairs) {
        let linking = PairLinking {
            link: config.pair_link,
            loadable_only: config.profile.is_reference(),
            knowledge_base: false,
        };
        PairCandidates::link(
            &searcher,
            combined,
            Some(corpus),
            linking,
            &mut out.warnings,
        )?
    } else {
        PairCandidates::default()
    };
    let links = match pairs.links.take() {
        Some(links) => {
            out.links.insert(domain.to_string(), links.stats().clone());
            links
        }
        None => Links::new(
            config.pair_link,
            domain,
            &[] as &[&str],
            &[] as &[&str],
            &[],
        ),
    };
    Ok(OpenDomain {
        searcher,
        images,
        query_images,
        pairs,
        links,
    })
}

/// Every job of `task` on one domain: the task's queries and judgements read once, each
/// query-image mode's vectors encoded once, each job's run scored and written.
fn evaluate_task(
    cx: &Ctx<'_>,
    domain: &str,
    task: Task,
    d: &mut OpenDomain,
    out: &mut EvalReport,
    writers: &mut [Vec<RunWriter>],
) -> Result<()> {
    let (corpus, config) = (cx.corpus, cx.config);
    let task_images = if task == Task::Pairs {
        &d.pairs.images
    } else {
        &d.images
    };
    let mut data = task.data(
        corpus,
        domain,
        &config.split,
        d.searcher.passage_ids(),
        task_images,
        &d.links,
        config.protocol,
    )?;
    match task.candidates() {
        CandidateKind::Passages => {
            let known = |id: &str| d.searcher.passage_ord(id).is_some();
            check_qrels_ids(&data.qrels, known, corpus.root(), &mut data.warnings);
            check_exclusions(
                &data.exclusions,
                &data.qrels,
                known,
                corpus.root(),
                &mut data.warnings,
            );
        }
        CandidateKind::Images => {
            let known: HashSet<&str> = d.images.iter().map(String::as_str).collect();
            check_qrels_ids(
                &data.qrels,
                |id| known.contains(id),
                corpus.root(),
                &mut data.warnings,
            )
        }
        CandidateKind::Pairs => {}
    }
    let source = corpus.root().join("examples_images");
    // the plain queries, and each augmentation's, made once for every job that uses them
    let plain = std::mem::take(&mut data.queries);
    let augmented: Vec<Vec<sift_core::Example>> = config
        .augments
        .iter()
        .map(|a| {
            let (queries, missing) = a.apply(&plain);
            if missing > 0 {
                out.notes.push(format!(
                    "task {task}, domain {domain}: {missing} of {} queries have no {} text \
                     (searched as they are)",
                    queries.len(),
                    a.label
                ));
            }
            queries
        })
        .collect();
    let mut vectors: BTreeMap<(Option<QueryImages>, Option<usize>), QueryVectors> = BTreeMap::new();
    // the last first-stage run (the one each reranking job reranks) and what reranking reads
    let mut first_stage = Run::new();
    let mut content = RerankContent::default();
    for (job, writers) in out
        .jobs
        .iter_mut()
        .zip(writers.iter_mut())
        .filter(|(j, _)| j.task == task)
    {
        let queries = match job.augment {
            Some(i) => &augmented[i],
            None => &plain,
        };
        if let Some(i) = job.rerank {
            let stage = &config.rerank[i];
            content.load(
                corpus,
                domain,
                task,
                &first_stage,
                stage.depth,
                queries,
                stage.reranker.sees_images(),
            )?;
            let progress = cx.progress;
            progress.start(
                &format!("{domain} t{task} rerank:{}", stage.reranker.name()),
                Some(queries.len() as u64),
            );
            let reranked = rerank_run(stage, task, &first_stage, queries, &content, &|| {
                progress.inc(1)
            });
            progress.finish();
            if !reranked.failed.is_empty() {
                out.rerank_failures.push(RerankFailures {
                    label: job.label.clone(),
                    task,
                    domain: domain.to_string(),
                    queries: reranked.run.len(),
                    failed: reranked.failed,
                });
            }
            record_run(config, domain, reranked.run, &data, job, writers)?;
            continue;
        }
        let mode = if task.has_query_images() {
            job.query_images
        } else {
            None
        };
        if let std::collections::btree_map::Entry::Vacant(slot) = vectors.entry((mode, job.augment))
        {
            slot.insert(encode_queries(
                cx.models,
                cx.combined,
                task,
                queries,
                mode,
                &d.query_images,
                &config.instructions,
                domain,
                &mut data.warnings,
                &source,
            )?);
        }
        first_stage = run_job(
            cx,
            domain,
            task,
            mode,
            (queries, &vectors[&(mode, job.augment)]),
            d,
            &mut data,
            job,
            writers,
        )?;
    }
    data.queries = plain;
    out.dropped
        .entry(task)
        .or_default()
        .insert(domain.to_string(), data.dropped_no_qrels);
    let entry = out.qrels.entry(task).or_default();
    entry.0.extend(data.qrels);
    entry.1.extend(data.exclusions);
    out.warnings.extend(data.warnings);
    Ok(())
}

/// One job on one domain: its candidates (with the reference code's stand-ins where its
/// query images follow the reference rule), its run over the task's queries, scored; the
/// run is returned for the reranking jobs after it.
#[allow(clippy::too_many_arguments)]
fn run_job(
    cx: &Ctx<'_>,
    domain: &str,
    task: Task,
    mode: Option<QueryImages>,
    (queries, qv): (&[sift_core::Example], &QueryVectors),
    d: &mut OpenDomain,
    data: &mut sift_eval::TaskData,
    job: &mut JobReport,
    writers: &mut [RunWriter],
) -> Result<Run> {
    let (models, config, progress) = (cx.models, cx.config, cx.progress);
    // the reference's stand-ins and pair vectors for this retriever's models
    let reference_pairs_mode = task == Task::Pairs && mode == Some(QueryImages::Reference);
    if reference_pairs_mode {
        d.pairs.add_reference(
            &d.searcher,
            models,
            &job.retriever,
            Some(cx.corpus),
            &mut data.warnings,
            progress,
        )?;
    }
    // the reference's white image for every Task 3 corpus image (Nomic, Jina-CLIP)
    let uniform = match (task, mode) {
        (Task::Images, Some(QueryImages::Reference)) => {
            reference_image_stand_ins(models, &job.retriever)?
        }
        _ => PairStandIns::new(),
    };
    let candidates = match task.candidates() {
        CandidateKind::Passages => Candidates::Passages,
        CandidateKind::Images if uniform.is_empty() => Candidates::Images,
        CandidateKind::Images => Candidates::UniformImages { vectors: &uniform },
        CandidateKind::Pairs => d.pairs.candidates(reference_pairs_mode),
    };
    let exclusions = |qid: &str| -> Vec<String> {
        data.exclusions
            .get(qid)
            .map(|x| x.iter().cloned().collect())
            .unwrap_or_default()
    };
    progress.start(&format!("{domain} t{task}"), Some(queries.len() as u64));
    let results = d.searcher.run(
        &job.retriever,
        &candidates,
        queries,
        qv,
        &exclusions,
        &config.settings,
        &|| progress.inc(1),
    );
    progress.finish();
    let run: Run = results?.into_iter().collect();
    record_run(config, domain, run.clone(), data, job, writers)?;
    Ok(run)
}

/// Scores one domain's run of a job and keeps or writes it.
fn record_run(
    config: &EvalConfig,
    domain: &str,
    run: Run,
    data: &sift_eval::TaskData,
    job: &mut JobReport,
    writers: &mut [RunWriter],
) -> Result<()> {
    // complete = true: a judged query with no hit at all scores 0
    let ev = score_run(&run, &data.qrels, &data.exclusions, true);
    job.report.per_domain.push(DomainResult {
        domain: domain.to_string(),
        queries: ev.per_query.len(),
        metrics: ev.mean.clone(),
    });
    if config.per_query {
        job.per_query.insert(domain.to_string(), ev.per_query);
    }
    for w in writers.iter_mut() {
        w.write_all(&run)?;
    }
    if config.runs.memory {
        job.run.extend(run);
    }
    Ok(())
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

impl EvalReport {
    /// Paired comparisons of the jobs `a` and `b` (a job's label, or its retriever when
    /// that names one job of the task) on `metric`, for every task that has both: per
    /// domain with Holm-adjusted p-values, and pooled. Needs per-query metrics
    /// ([`EvalConfig::per_query`]); an error names a retriever no task has.
    pub fn compare(
        &self,
        a: &str,
        b: &str,
        metric: &str,
        resamples: usize,
        seed: u64,
    ) -> Result<Vec<Comparison>> {
        let find = |task: Task, name: &str| -> Option<&JobReport> {
            let of_task = || self.jobs.iter().filter(move |j| j.task == task);
            of_task().find(|j| j.label == name).or_else(|| {
                let mut by_spec = of_task().filter(|j| j.retriever.to_string() == name);
                match (by_spec.next(), by_spec.next()) {
                    (Some(j), None) => Some(j),
                    _ => None,
                }
            })
        };
        let mut tasks: Vec<Task> = self.jobs.iter().map(|j| j.task).collect();
        tasks.dedup();
        let mut out = Vec::new();
        for task in tasks {
            let (Some(ja), Some(jb)) = (find(task, a), find(task, b)) else {
                continue;
            };
            if ja.per_query.is_empty() || jb.per_query.is_empty() {
                return Err(Error::Unsupported(
                    "comparing retrievers needs per-query metrics (EvalConfig::per_query)".into(),
                ));
            }
            out.push(Comparison {
                task: task.to_string(),
                a: ja.label.clone(),
                b: jb.label.clone(),
                metric: metric.to_string(),
                domains: sift_eval::stats::compare_domains(
                    &ja.per_query,
                    &jb.per_query,
                    metric,
                    resamples,
                    seed,
                ),
            });
        }
        if out.is_empty() {
            let labels: Vec<&str> = self.jobs.iter().map(|j| j.label.as_str()).collect();
            return Err(Error::Unsupported(format!(
                "no task has both {a:?} and {b:?} (jobs: {})",
                labels.join(", ")
            )));
        }
        Ok(out)
    }

    /// The per-domain tables as MM-BRIGHT's paper lays them out, in LaTeX: one `tabular`
    /// per task, a row per job, a column per domain and the unweighted mean ("Avg."),
    /// `metric` in % with one decimal; per column the best value in bold and the second
    /// best underlined (ties share the mark). Needs `booktabs`.
    pub fn to_latex(&self, metric: &str) -> String {
        let mut tasks: Vec<Task> = self.jobs.iter().map(|j| j.task).collect();
        tasks.dedup();
        let mut out = String::new();
        for task in tasks {
            let jobs: Vec<&JobReport> = self.jobs.iter().filter(|j| j.task == task).collect();
            let mut domains: Vec<String> = jobs
                .iter()
                .flat_map(|j| j.report.per_domain.iter().map(|d| d.domain.clone()))
                .collect();
            domains.sort();
            domains.dedup();
            // rows x (domains + mean), in % (None: not evaluated)
            let cells: Vec<Vec<Option<f64>>> = jobs
                .iter()
                .map(|j| {
                    let mut row: Vec<Option<f64>> = domains
                        .iter()
                        .map(|d| {
                            j.report
                                .per_domain
                                .iter()
                                .find(|r| &r.domain == d)
                                .and_then(|r| r.metrics.get(metric))
                                .map(|v| v * 100.0)
                        })
                        .collect();
                    row.push(j.report.mean().get(metric).map(|v| v * 100.0));
                    row
                })
                .collect();
            let rounded = |v: f64| (v * 10.0).round() / 10.0;
            let mut marks = vec![vec![""; domains.len() + 1]; jobs.len()];
            for c in 0..=domains.len() {
                let mut values: Vec<f64> = cells.iter().filter_map(|r| r[c]).map(rounded).collect();
                values.sort_by(|a, b| b.total_cmp(a));
                values.dedup();
                for (r, row) in cells.iter().enumerate() {
                    if let Some(v) = row[c].map(rounded) {
                        if values.first() == Some(&v) {
                            marks[r][c] = "bold";
                        } else if values.get(1) == Some(&v) {
                            marks[r][c] = "underline";
                        }
                    }
                }
            }
            out.push_str(&format!(
                "% Task {task}: {metric} (%), best in bold, second underlined\n\
                 \\begin{{tabular}}{{l{}r}}\n\\toprule\nRetriever & {} & Avg. \\\\\n\\midrule\n",
                "r".repeat(domains.len()),
                domains
                    .iter()
                    .map(|d| latex_escape(d))
                    .collect::<Vec<_>>()
                    .join(" & ")
            ));
            for (r, job) in jobs.iter().enumerate() {
                let row: Vec<String> = cells[r]
                    .iter()
                    .zip(&marks[r])
                    .map(|(v, mark)| match (v, *mark) {
                        (None, _) => "--".to_string(),
                        (Some(v), "bold") => format!("\\textbf{{{v:.1}}}"),
                        (Some(v), "underline") => format!("\\underline{{{v:.1}}}"),
                        (Some(v), _) => format!("{v:.1}"),
                    })
                    .collect();
                out.push_str(&format!(
                    "{} & {} \\\\\n",
                    latex_escape(&job.label),
                    row.join(" & ")
                ));
            }
            out.push_str("\\bottomrule\n\\end{tabular}\n\n");
        }
        out
    }

    /// Positive images counted as Task 4 orphans (no gold passage of their page: no pair).
    pub fn orphans(&self) -> u64 {
        self.warnings.count(WarningKind::OrphanPositiveImage)
    }

    /// Queries dropped for want of judgements in `task`, over every domain.
    pub fn dropped_total(&self, task: Task) -> usize {
        self.dropped.get(&task).map_or(0, |d| d.values().sum())
    }

    /// Every table: one per job (metrics in %), then, with several jobs, the summary of mean
    /// nDCG@10 per task and retriever, and the notes.
    pub fn to_markdown(&self) -> String {
        let mut markdown = String::new();
        for job in &self.jobs {
            markdown.push_str(&format!(
                "Task {} — {} (metrics in %)\n\n{}\n",
                job.report.task,
                job.report.retriever,
                job.report.to_markdown(&TABLE_COLUMNS)
            ));
            let n = self.dropped_total(job.task);
            if n > 0 {
                markdown.push_str(&format!(
                    "{n} quer(y/ies) without judgements dropped before scoring\n"
                ));
            }
            markdown.push('\n');
        }
        if self.jobs.len() > 1 {
            markdown.push_str(&self.summary_table());
        }
        for n in &self.notes {
            markdown.push_str(&format!("\nNote: {n}\n"));
        }
        for f in &self.rerank_failures {
            markdown.push_str(&format!("\nPartial run: {f}\n"));
        }
        if !self.reference_rules.is_empty() {
            markdown.push_str(&self.reference_rules_table());
        }
        let orphans = self.orphans();
        if self.jobs.iter().any(|j| j.task == Task::Pairs) && orphans > 0 {
            markdown.push_str(&format!(
                "\nTask 4: {orphans} positive image(s) linked to no gold passage (orphans: no pair)\n"
            ));
        }
        if !self.links.is_empty() {
            markdown.push_str(&self.links_table());
        }
        markdown
    }

    /// The reference code's rules in force, per task and dense model.
    pub fn reference_rules_table(&self) -> String {
        let mut s = String::from(
            "\nReference code's rules in force (docs/src/reference-profile.md)\n\n\
             | task | retriever | profile | rules |\n|---|---|---|---|\n",
        );
        for r in &self.reference_rules {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                r.task,
                r.retriever,
                r.profile,
                r.rules.join("; ").replace('|', "\\|")
            ));
        }
        s
    }

    /// Task 4's linking per domain: pairs made, and what was left unlinked.
    pub fn links_table(&self) -> String {
        let link = self.links.values().next().map_or("", |s| s.link.as_str());
        let mut s = format!(
            "\nTask 4 links ({link}): passage+image pairs and what was left unlinked\n\n\
             | domain | passages | linked | unkeyed | images | unlinked | image pairs | unknown source passages |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n"
        );
        for (d, l) in &self.links {
            s.push_str(&format!(
                "| {d} | {} | {} | {} | {} | {} | {} | {} |\n",
                l.passages,
                l.passages_linked,
                l.passages_unkeyed,
                l.images,
                l.images_unlinked,
                l.image_pairs,
                l.unknown_source_passages
            ));
        }
        s
    }

    /// Mean nDCG@10 of every task (columns) and retriever (rows).
    pub fn summary_table(&self) -> String {
        let mut tasks: Vec<&str> = self.jobs.iter().map(|j| j.report.task.as_str()).collect();
        tasks.dedup();
        let mut labels: Vec<&str> = Vec::new();
        for j in &self.jobs {
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
                match self
                    .jobs
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

    /// The JSON of one job: its report, label, dropped queries and (when kept) per-query
    /// metrics.
    pub fn job_json(&self, job: &JobReport) -> serde_json::Value {
        let mut out = job.report.to_json();
        out["label"] = job.label.clone().into();
        out["dropped_queries_without_qrels"] =
            serde_json::to_value(self.dropped.get(&job.task).cloned().unwrap_or_default())
                .unwrap_or_default();
        if !job.per_query.is_empty() {
            out["per_query"] = serde_json::to_value(&job.per_query).unwrap_or_default();
        }
        out
    }

    /// Everything as one JSON object: the job's object when there is one job, else
    /// `{"reports": [...], "not_applicable", "notes", "protocol", "orphan_positive_images",
    /// "pair_links", "warnings"}`.
    pub fn to_json(&self) -> serde_json::Value {
        if let [job] = self.jobs.as_slice() {
            let mut out = self.job_json(job);
            out["warnings"] = serde_json::to_value(self.warnings.to_map()).unwrap_or_default();
            out["notes"] = serde_json::to_value(&self.notes).unwrap_or_default();
            if !self.rerank_failures.is_empty() {
                out["rerank_failures"] =
                    serde_json::to_value(&self.rerank_failures).unwrap_or_default();
            }
            if !self.reference_rules.is_empty() {
                out["reference_rules"] =
                    serde_json::to_value(&self.reference_rules).unwrap_or_default();
            }
            if !self.links.is_empty() {
                out["pair_links"] = serde_json::to_value(&self.links).unwrap_or_default();
            }
            return out;
        }
        serde_json::json!({
            "reports": self.jobs.iter().map(|j| self.job_json(j)).collect::<Vec<_>>(),
            "not_applicable": self.not_applicable,
            "notes": self.notes,
            "reference_rules": self.reference_rules,
            "protocol": self.protocol.name(),
            "orphan_positive_images": self.orphans(),
            "pair_links": self.links,
            "warnings": self.warnings.to_map(),
            "rerank_failures": self.rerank_failures,
        })
    }

    /// Writes `dir/results.md`, `dir/results.json`, each job's TREC run in `dir/runs/` (from
    /// memory, unless the evaluation streamed it there: [`RunOutput::dir`] = `dir/runs`)
    /// (`task<N>.<label>.trec`) and each task's qrels and exclusions in `dir/qrels/`.
    pub fn write_to(&self, dir: &Path) -> Result<()> {
        let runs = dir.join("runs");
        let qdir = dir.join("qrels");
        for d in [dir, runs.as_path(), qdir.as_path()] {
            std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
        }
        let md = dir.join("results.md");
        sift_core::write_output(&md, self.to_markdown().as_bytes())?;
        let js = dir.join("results.json");
        let json = serde_json::to_string_pretty(&self.to_json()).expect("JSON values serialise");
        sift_core::write_output(&js, json.as_bytes())?;
        for job in &self.jobs {
            let path = runs.join(run_file_name(job.task, &job.label));
            // a run streamed here during the evaluation is there already
            if !job.run_files.contains(&path) {
                sift_eval::write_run(&path, &job.run, RUN_TAG)?;
            }
        }
        for (task, (q, x)) in &self.qrels {
            sift_eval::write_qrels(&qdir.join(format!("task{task}.qrels")), q)?;
            sift_eval::write_exclusions(&qdir.join(format!("task{task}.exclusions")), x)?;
        }
        Ok(())
    }
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

/// `s` with LaTeX's special characters escaped.
fn latex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            _ => out.push(c),
        }
    }
    out
}
