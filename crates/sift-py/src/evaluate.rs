//! `sift_ir.evaluate`: every task, retriever and domain of an evaluation, as `sift eval`
//! runs it, the report returned as JSON (the Python side makes dicts and a DataFrame) and,
//! with `out`, its tables, runs and qrels written as `sift eval --out` writes them.
use std::path::PathBuf;

use pyo3::prelude::*;
use sift_eval::Task;
use sift_index::IndexDir;
use sift_retrieve::{EvalConfig, ModelSet, QueryFusion, RetrieverSpec, RunOutput, SearchSettings};

use crate::embedder::options;
use crate::errors::{invalid, sift_err};
use crate::progress::Callback;

/// Evaluates `retrievers` on `tasks` ("all", or task numbers 1-4) over the domains of
/// `corpus` indexed in `index` (a path or an `Index`), as `sift eval` does with the same
/// options, and returns the report as JSON text (`sift eval --json`). With `out`, writes
/// the report's tables, runs and qrels there (`sift eval --out`). `query_fusion`: how
/// query images are fused ("all", "first", "reference" or "both"; default "all", or
/// "reference" with the reference profile).
#[pyfunction]
#[pyo3(signature = (
    corpus, index, *, tasks=None, retrievers=None, domains=None, top_k=1000,
    per_query=false, out=None, query_fusion=None, device="cpu", dtype="f32", batch_size=None,
    profile="default", progress=None
))]
#[allow(clippy::too_many_arguments)]
pub fn evaluate(
    py: Python<'_>,
    corpus: PathBuf,
    index: &Bound<'_, PyAny>,
    tasks: Option<Vec<String>>,
    retrievers: Option<Vec<String>>,
    domains: Option<Vec<String>>,
    top_k: usize,
    per_query: bool,
    out: Option<PathBuf>,
    query_fusion: Option<String>,
    device: &str,
    dtype: &str,
    batch_size: Option<usize>,
    profile: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let index_path: PathBuf = match index.cast::<crate::index::Index>() {
        Ok(i) => i.get().path().to_path_buf(),
        Err(_) => index.extract()?,
    };
    let mut model_options = options(device, dtype, batch_size, None, profile)?;
    // the instruction is applied per domain and per model, as `sift eval` does
    model_options.query_instruction = None;
    let tasks: Vec<Task> = match tasks {
        None => vec![Task::Passages],
        Some(list) if list.iter().any(|t| t == "all") => Task::ALL.to_vec(),
        Some(list) => list
            .iter()
            .map(|t| {
                t.parse()
                    .map_err(|e: String| invalid(format!("tasks: {e}")))
            })
            .collect::<PyResult<_>>()?,
    };
    let retrievers: Vec<RetrieverSpec> = retrievers
        .unwrap_or_else(|| vec!["bm25".to_string()])
        .iter()
        .map(|r| r.parse().map_err(sift_err))
        .collect::<PyResult<_>>()?;
    if top_k == 0 {
        return Err(invalid("top_k: give 1 or more"));
    }
    let progress = Callback::new(progress);
    let run = || -> anyhow::Result<String> {
        let corpus = sift_core::Corpus::open(&corpus)?;
        let index = IndexDir::open(&index_path)?;
        let mut models = ModelSet::new();
        for r in &retrievers {
            models.load_for(&index, r, &model_options, None)?;
        }
        let defaults = EvalConfig::default();
        let (protocol, fusion) = QueryFusion::defaults(model_options.profile);
        let fusion = match query_fusion.as_deref() {
            Some(f) => f.parse::<QueryFusion>().map_err(anyhow::Error::msg)?,
            None => fusion,
        };
        let config = EvalConfig {
            tasks,
            retrievers,
            protocol,
            query_images: fusion.modes(),
            settings: SearchSettings {
                bm25: index.manifest().bm25,
                top_k,
                ..SearchSettings::default()
            },
            domains,
            runs: RunOutput {
                memory: false,
                dir: out.as_ref().map(|d| d.join("runs")),
                file: None,
            },
            // as `sift eval`: results.json in `out` carries the per-query metrics `sift report` reads
            per_query: per_query || out.is_some(),
            profile: model_options.profile,
            ..defaults
        };
        let report = sift_retrieve::evaluate(&corpus, &index, &models, &config, &progress)?;
        if let Some(dir) = &out {
            report.write_to(dir)?;
        }
        Ok(serde_json::to_string(&report.to_json())?)
    };
    py.detach(run).map_err(sift_err)
}
