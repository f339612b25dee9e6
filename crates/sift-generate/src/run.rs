//! Many generations through one generator and a cache: [`generate_all`].
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cache::{CacheKey, CachedGeneration, GenerationCache};
use crate::request::{Generation, Request};
use crate::{Error, Generator};

/// One generation to make: a query's request and what keys it.
#[derive(Debug, Clone)]
pub struct Job {
    /// The query.
    pub query_id: String,
    /// The prompt template's name and version.
    pub template: (String, u32),
    /// The request.
    pub request: Request,
}

/// How [`generate_all`] runs.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Requests in flight at once (1 for a local model).
    pub concurrency: usize,
    /// Fail a job whose generation is not cached instead of generating it.
    pub offline: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            concurrency: 4,
            offline: false,
        }
    }
}

/// What became of a job.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Found in the cache.
    Cached(Generation),
    /// Generated now (and stored).
    Generated(Generation),
    /// Failed; the message names the endpoint, status or missing entry.
    Failed(String),
}

impl Outcome {
    /// The generation, if there is one.
    pub fn generation(&self) -> Option<&Generation> {
        match self {
            Outcome::Cached(g) | Outcome::Generated(g) => Some(g),
            Outcome::Failed(_) => None,
        }
    }
}

/// Counts of a run's outcomes and the tokens it generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Found in the cache.
    pub cached: usize,
    /// Generated now.
    pub generated: usize,
    /// Failed.
    pub failed: usize,
    /// Prompt tokens of the generations made now.
    pub prompt_tokens: u64,
    /// Tokens generated now.
    pub completion_tokens: u64,
}

impl RunSummary {
    /// The summary of `outcomes`.
    pub fn of(outcomes: &[Outcome]) -> RunSummary {
        let mut s = RunSummary::default();
        for o in outcomes {
            match o {
                Outcome::Cached(_) => s.cached += 1,
                Outcome::Generated(g) => {
                    s.generated += 1;
                    s.prompt_tokens += g.usage.prompt_tokens;
                    s.completion_tokens += g.usage.completion_tokens;
                }
                Outcome::Failed(_) => s.failed += 1,
            }
        }
        s
    }
}

/// Runs `jobs` through `generator`, `options.concurrency` at a time: each job's generation
/// is taken from `cache` when stored there, else generated and stored at once (so a run
/// stopped at any point keeps everything generated so far). Outcomes are in job order; a
/// failed job is reported, not retried beyond the generator's own retries, and its failure
/// is not cached. `progress` is advanced once per job.
pub fn generate_all(
    generator: &dyn Generator,
    jobs: &[Job],
    cache: &GenerationCache,
    options: RunOptions,
    progress: Option<&indicatif::ProgressBar>,
) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Outcome>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let model = generator.model_id();
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(job) = jobs.get(i) else { break };
            let key = CacheKey::new(
                model,
                (&job.template.0, job.template.1),
                &job.query_id,
                &job.request,
            )
            .digest();
            let outcome = if let Some(hit) = cache.get(&key) {
                Outcome::Cached(hit.generation)
            } else if options.offline {
                Outcome::Failed(
                    Error::Offline {
                        query_id: job.query_id.clone(),
                        key,
                    }
                    .to_string(),
                )
            } else {
                match generator.generate(&job.request) {
                    Ok(g) => {
                        let entry = CachedGeneration {
                            key,
                            query_id: job.query_id.clone(),
                            model: model.to_string(),
                            template: job.template.0.clone(),
                            template_version: job.template.1,
                            generation: g.clone(),
                        };
                        match cache.put(entry) {
                            Ok(()) => Outcome::Generated(g),
                            Err(e) => Outcome::Failed(format!(
                                "query {}: generated but not stored: {e}",
                                job.query_id
                            )),
                        }
                    }
                    Err(e) => Outcome::Failed(format!("query {}: {e}", job.query_id)),
                }
            };
            *slots[i].lock().expect("not poisoned") = Some(outcome);
            if let Some(p) = progress {
                p.inc(1);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 0..options.concurrency.clamp(1, jobs.len().max(1)) {
            s.spawn(work);
        }
    });
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .expect("not poisoned")
                .expect("every job ran")
        })
        .collect()
}
