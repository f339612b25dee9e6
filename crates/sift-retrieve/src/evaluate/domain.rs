//! One domain of an evaluation: opened once for every job, each task's queries and
//! judgements read once, each job's run made, scored and written.
use std::collections::{BTreeMap, HashMap, HashSet};

use sift_core::Corpus;
use sift_eval::{
    CandidateKind, DomainResult, Links, Run, RunWriter, Task, check_exclusions, check_qrels_ids,
    score_run,
};
use sift_index::{IndexDir, Progress};

use crate::Result;
use crate::candidates::{PairCandidates, PairLinking};
use crate::models::ModelSet;
use crate::query::{QueryImages, QueryVectors, encode_queries};
use crate::reference::reference_image_stand_ins;
use crate::rerank::{RerankContent, rerank_run};
use crate::searcher::{Candidates, DomainSearcher, PairStandIns};
use crate::spec::RetrieverSpec;

use super::{EvalConfig, EvalReport, JobReport, RerankFailures};

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
pub(super) fn evaluate_domain(
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
    check_judged_ids(corpus, task, d, &mut data);
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

/// Counts the judged and excluded ids of `task` that are no candidate of the domain.
fn check_judged_ids(corpus: &Corpus, task: Task, d: &OpenDomain, data: &mut sift_eval::TaskData) {
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
