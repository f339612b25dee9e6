//! Cross-request query batching: the text queries of every request in flight are encoded
//! together. A request hands its texts to the [`QueryBatcher`] and waits; one encoder thread
//! takes the queued texts of one model, up to [`BatchOptions::max_batch`] of them, waiting at
//! most [`BatchOptions::max_wait`] after the oldest arrived for more to come, encodes them as
//! one batch and hands each request its vectors. While it encodes, new queries queue, so a
//! busy service batches without waiting at all; an idle one adds at most `max_wait` to a
//! query. The queue is bounded ([`BatchOptions::max_queued`] texts): past it a request is
//! refused at once ([`ErrorKind::Overloaded`], a 503 with `Retry-After` over HTTP) instead of
//! waiting behind work it cannot outlast.
use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use sift_retrieve::ModelSet;

use crate::error::{ApiError, ErrorKind};

/// How queries are batched across requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Most texts encoded in one batch (also the chunk a large request is cut into).
    pub max_batch: usize,
    /// Longest time the oldest queued text waits for others to join its batch.
    pub max_wait: Duration,
    /// Most texts queued at once; a request that would pass it is refused (503), unless
    /// the queue is empty (it takes any one chunk).
    pub max_queued: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_batch: 64,
            max_wait: Duration::from_millis(2),
            max_queued: 16_384,
        }
    }
}

/// What the encoder has done: how many batches, of what sizes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BatchStats {
    /// Batches encoded.
    pub batches: u64,
    /// Texts encoded.
    pub queries: u64,
    /// The largest batch.
    pub largest: usize,
    /// Batches by size, in power-of-two ranges (`"1"`, `"2-3"`, `"4-7"`, ...).
    pub sizes: BTreeMap<String, u64>,
    /// Texts waiting now.
    pub queued: usize,
    /// Requests refused because the queue was full.
    pub refused: u64,
}

impl BatchStats {
    fn record(&mut self, n: usize) {
        self.batches += 1;
        self.queries += n as u64;
        self.largest = self.largest.max(n);
        *self.sizes.entry(size_range(n)).or_default() += 1;
    }
}

/// The power-of-two range `n` falls in: `"1"`, `"2-3"`, `"4-7"`, ...
fn size_range(n: usize) -> String {
    if n <= 1 {
        return n.to_string();
    }
    let lo = 1usize << (usize::BITS - 1 - n.leading_zeros());
    format!("{lo}-{}", lo * 2 - 1)
}

type Reply = Result<Vec<Vec<f32>>, ApiError>;

/// Texts of one request for one model, and where their vectors go.
struct Job {
    model: String,
    texts: Vec<String>,
    arrived: Instant,
    reply: SyncSender<Reply>,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Texts in `jobs`.
    queued: usize,
    closed: bool,
    stats: BatchStats,
}

struct Shared {
    models: Arc<ModelSet>,
    options: BatchOptions,
    state: Mutex<State>,
    /// Signalled when a job arrives or the batcher closes.
    arrived: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // a panic while holding the lock leaves plain counters: keep using them
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The service's query encoder thread and its queue.
pub struct QueryBatcher {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

impl QueryBatcher {
    /// Starts the encoder thread over `models`.
    pub fn start(models: Arc<ModelSet>, options: BatchOptions) -> QueryBatcher {
        let options = BatchOptions {
            max_batch: options.max_batch.max(1),
            max_queued: options.max_queued.max(1),
            ..options
        };
        let shared = Arc::new(Shared {
            models,
            options,
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
        });
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sift-query-encoder".into())
                .spawn(move || run(&shared))
                .ok()
        };
        QueryBatcher { shared, worker }
    }

    /// The options it runs with.
    pub fn options(&self) -> BatchOptions {
        self.shared.options
    }

    /// What it has done so far.
    pub fn stats(&self) -> BatchStats {
        let state = self.shared.lock();
        BatchStats {
            queued: state.queued,
            ..state.stats.clone()
        }
    }

    /// Unit query vectors of `texts` by `model` (no instruction), in order, encoded in
    /// batches with the queries of other requests. More texts than a batch go in chunks of
    /// [`BatchOptions::max_batch`], one after the other, so that a large request holds at
    /// most one chunk in the queue and others' queries interleave with it.
    pub fn encode(&self, model: &str, texts: &[&str]) -> Result<Vec<Vec<f32>>, ApiError> {
        if self.worker.is_none() {
            // the thread could not be started: encode here, unbatched
            return encode_batch(&self.shared.models, model, texts);
        }
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.shared.options.max_batch) {
            out.extend(self.encode_chunk(model, chunk)?);
        }
        Ok(out)
    }

    fn encode_chunk(&self, model: &str, texts: &[&str]) -> Result<Vec<Vec<f32>>, ApiError> {
        let (reply, answer) = sync_channel(1);
        {
            let mut state = self.shared.lock();
            if state.closed {
                return Err(ApiError::new(
                    ErrorKind::Overloaded,
                    "the service is shutting down",
                ));
            }
            let max = self.shared.options.max_queued;
            // an empty queue takes any one chunk
            if state.queued > 0 && state.queued + texts.len() > max {
                state.stats.refused += 1;
                return Err(ApiError::new(
                    ErrorKind::Overloaded,
                    format!(
                        "the query encoder's queue is full ({} queries waiting, at most {max}): \
                         try again later",
                        state.queued
                    ),
                ));
            }
            state.queued += texts.len();
            state.jobs.push_back(Job {
                model: model.to_string(),
                texts: texts.iter().map(|t| t.to_string()).collect(),
                arrived: Instant::now(),
                reply,
            });
        }
        self.shared.arrived.notify_one();
        answer.recv().unwrap_or_else(|_| {
            Err(ApiError::new(
                ErrorKind::Internal,
                "the query encoder stopped before answering",
            ))
        })
    }
}

impl Drop for QueryBatcher {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.arrived.notify_all();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// The encoder thread: takes batches until the batcher closes and its queue is empty.
fn run(shared: &Shared) {
    while let Some(batch) = next_batch(shared) {
        let texts: Vec<&str> = batch
            .iter()
            .flat_map(|j| j.texts.iter().map(String::as_str))
            .collect();
        let n = texts.len();
        let result = encode_batch(&shared.models, &batch[0].model, &texts);
        {
            let mut state = shared.lock();
            state.queued -= n;
            state.stats.record(n);
        }
        match result {
            Ok(vectors) => {
                let mut vectors = vectors.into_iter();
                for job in batch {
                    let mine: Vec<Vec<f32>> = vectors.by_ref().take(job.texts.len()).collect();
                    let _ = job.reply.send(Ok(mine));
                }
            }
            Err(e) => {
                for job in batch {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// The next batch: jobs of the oldest job's model, in arrival order, up to `max_batch`
/// texts, once that many are queued or the oldest has waited `max_wait`. `None` once closed
/// and empty.
fn next_batch(shared: &Shared) -> Option<Vec<Job>> {
    let options = shared.options;
    let mut state = shared.lock();
    loop {
        if let Some(first) = state.jobs.front() {
            let deadline = first.arrived + options.max_wait;
            let model = first.model.clone();
            let waiting: usize = state
                .jobs
                .iter()
                .filter(|j| j.model == model)
                .map(|j| j.texts.len())
                .sum();
            let now = Instant::now();
            if waiting >= options.max_batch || now >= deadline || state.closed {
                return Some(take_batch(&mut state, &model, options.max_batch));
            }
            state = shared
                .arrived
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        } else if state.closed {
            return None;
        } else {
            state = shared
                .arrived
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Removes the jobs of `model` from the queue, oldest first, while they fit `max` texts
/// (the first always).
fn take_batch(state: &mut State, model: &str, max: usize) -> Vec<Job> {
    let mut batch = Vec::new();
    let mut n = 0;
    let mut rest = VecDeque::with_capacity(state.jobs.len());
    while let Some(job) = state.jobs.pop_front() {
        if job.model == model && (batch.is_empty() || n + job.texts.len() <= max) {
            n += job.texts.len();
            batch.push(job);
        } else {
            rest.push_back(job);
        }
    }
    state.jobs = rest;
    batch
}

/// One batch of query texts through `model`.
fn encode_batch(models: &ModelSet, model: &str, texts: &[&str]) -> Reply {
    let embedder = models.get(model).ok_or_else(|| {
        ApiError::new(ErrorKind::Internal, format!("dense:{model} is not loaded"))
    })?;
    embedder
        .embed_queries(texts, None)
        .map_err(|e| ApiError::new(ErrorKind::Internal, format!("encoding queries: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_ranges_are_powers_of_two() {
        let got: Vec<String> = [1, 2, 3, 4, 7, 8, 64, 100]
            .iter()
            .map(|&n| size_range(n))
            .collect();
        assert_eq!(
            got,
            ["1", "2-3", "2-3", "4-7", "4-7", "8-15", "64-127", "64-127"]
        );
    }

    #[test]
    fn take_batch_keeps_other_models_and_the_limit() {
        let (reply, _rx) = sync_channel(4);
        let job = |m: &str, n: usize| Job {
            model: m.into(),
            texts: vec!["q".into(); n],
            arrived: Instant::now(),
            reply: reply.clone(),
        };
        let mut state = State::default();
        state
            .jobs
            .extend([job("a", 3), job("b", 1), job("a", 2), job("a", 1)]);
        let batch = take_batch(&mut state, "a", 4);
        let sizes: Vec<usize> = batch.iter().map(|j| j.texts.len()).collect();
        assert_eq!(sizes, [3, 1]);
        let left: Vec<(String, usize)> = state
            .jobs
            .iter()
            .map(|j| (j.model.clone(), j.texts.len()))
            .collect();
        assert_eq!(left, [("b".to_string(), 1), ("a".to_string(), 2)]);
        // a job larger than the limit still goes, alone
        let mut state = State::default();
        state.jobs.extend([job("a", 9)]);
        assert_eq!(take_batch(&mut state, "a", 4).len(), 1);
    }
}
