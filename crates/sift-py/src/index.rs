//! `sift_ir.Index`: build or open an index and search it one query at a time, through the
//! same one-query API the service answers (`sift_service::Service`), with hits equal to
//! `sift search`'s.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use sift_index::{BuildOptions, HnswParams, IndexDir, Precomputed, VectorDtype};
use sift_retrieve::{Indexed, Sides};
use sift_service::api::{CandidateKind, Fusion, ImageInput, SearchRequest};
use sift_service::{ServeConfig, Service};

use crate::embedder::{image_bytes, options};
use crate::errors::{invalid, sift_err};
use crate::progress::Callback;

/// One search result.
#[pyclass(module = "sift_ir._sift", frozen, get_all)]
#[derive(Clone)]
pub struct Hit {
    /// 1-based rank.
    pub rank: usize,
    /// Candidate id: a passage id, a corpus image id, or a pair id (`passage|image`).
    pub id: String,
    /// Retrieval score (higher is better).
    pub score: f64,
    /// The domain holding it.
    pub domain: String,
    /// The passage of a passage or pair result.
    pub passage: Option<String>,
    /// The corpus image of an image or pair result.
    pub image: Option<String>,
    /// The passage text, when the index was opened with its corpus.
    pub text: Option<String>,
}

#[pymethods]
impl Hit {
    /// The hit as a dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("rank", self.rank)?;
        d.set_item("id", &self.id)?;
        d.set_item("score", self.score)?;
        d.set_item("domain", &self.domain)?;
        d.set_item("passage", &self.passage)?;
        d.set_item("image", &self.image)?;
        d.set_item("text", &self.text)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Hit(rank={}, id={:?}, score={:.4}, domain={:?})",
            self.rank, self.id, self.score, self.domain
        )
    }
}

/// A Sift index: BM25 and dense indexes per domain, built by `Index.build` or
/// `sift index`, opened by `Index.open`. Searching loads the index's models once (on the
/// first search) and reads passage texts from the corpus when it is known.
#[pyclass(module = "sift_ir._sift", frozen)]
pub struct Index {
    path: PathBuf,
    corpus: Option<PathBuf>,
    config: ServeConfig,
    /// Loaded services: the index's own retrievers under "", and a retriever it does not
    /// serve by default (a hybrid) under its spec.
    services: Mutex<HashMap<String, Arc<Service>>>,
}

impl Index {
    /// The index directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The corpus it was opened with.
    pub fn corpus(&self) -> Option<&Path> {
        self.corpus.as_deref()
    }

    /// The service that answers `retriever`: the index's own (bm25, every dense index, or
    /// the retrievers it was opened with), else one loaded for that retriever alone (a
    /// hybrid), kept for the next search.
    fn service(&self, py: Python<'_>, retriever: Option<&str>) -> PyResult<Arc<Service>> {
        let key = match retriever {
            Some(r) if self.config.retrievers.is_empty() && !self.own_retriever(r)? => r,
            _ => "",
        };
        let mut services = self
            .services
            .lock()
            .map_err(|_| invalid("the index failed to load earlier"))?;
        if let Some(s) = services.get(key) {
            return Ok(s.clone());
        }
        let mut config = self.config.clone();
        if !key.is_empty() {
            config.retrievers = vec![key.to_string()];
        }
        let service = py.detach(|| Service::load(&config)).map_err(|e| {
            sift_err(anyhow::Error::new(e).context(format!("opening {}", self.path.display())))
        })?;
        let service = Arc::new(service);
        services.insert(key.to_string(), service.clone());
        Ok(service)
    }

    /// Whether the index serves `retriever` by default (bm25, or one of its dense indexes).
    fn own_retriever(&self, retriever: &str) -> PyResult<bool> {
        let spec: sift_retrieve::RetrieverSpec = retriever.parse().map_err(sift_err)?;
        Ok(match spec {
            sift_retrieve::RetrieverSpec::Bm25 => true,
            sift_retrieve::RetrieverSpec::Dense(name) => {
                let index = IndexDir::open(&self.path).map_err(sift_err)?;
                index.dense_info(&name).is_ok()
            }
            _ => false,
        })
    }

    fn opened(
        path: PathBuf,
        corpus: Option<PathBuf>,
        model_options: sift_embed::EmbedderOptions,
        retrievers: Vec<String>,
    ) -> PyResult<Index> {
        // fail now on a missing or damaged index, not at the first search
        IndexDir::open(&path).map_err(sift_err)?;
        let mut config = ServeConfig::new(&path);
        config.corpus = corpus.clone();
        config.model_options = model_options;
        config.retrievers = retrievers;
        // Python callers take every result they ask for, texts whole
        config.limits.max_top_k = 100_000;
        config.limits.text_chars = usize::MAX;
        // a caller's queries are not kept waiting for company: concurrent callers (threads,
        // Ray tasks) still share batches, formed while one encodes
        config.batch.max_wait = std::time::Duration::ZERO;
        Ok(Index {
            path,
            corpus,
            config,
            services: Mutex::new(HashMap::new()),
        })
    }
}

fn candidate_kind(s: &str) -> PyResult<CandidateKind> {
    match s {
        "passages" => Ok(CandidateKind::Passages),
        "images" => Ok(CandidateKind::Images),
        "pairs" => Ok(CandidateKind::Pairs),
        other => Err(invalid(format!(
            "candidates {other:?}: give \"passages\", \"images\" or \"pairs\""
        ))),
    }
}

#[pymethods]
impl Index {
    /// Builds an index of `corpus` (a directory: MM-BRIGHT or BEIR layout, or a
    /// knowledge-base .jsonl / .parquet file) at `path`, as `sift index` does: BM25 for
    /// every domain (or `domains`), and a dense index per model of `dense` (a directory or
    /// hub id each; `"NAME=DIR"` names its index `dense:NAME`). `vectors`: directories of precomputed passage vectors
    /// (`sift_ir.ray.embed_corpus`) indexed instead of embedding. `progress(label, done,
    /// total)` is called as the work advances. The previous index at `path` stays usable
    /// until the new one is complete.
    #[staticmethod]
    #[pyo3(signature = (
        corpus, path, dense=None, *, domains=None, k1=None, b=None, threads=None,
        vector_dtype="f32", vectors=None, images=true, replace=false, device="cpu",
        dtype="f32", batch_size=None, profile="default", progress=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        corpus: PathBuf,
        path: PathBuf,
        dense: Option<Vec<String>>,
        domains: Option<Vec<String>>,
        k1: Option<f32>,
        b: Option<f32>,
        threads: Option<usize>,
        vector_dtype: &str,
        vectors: Option<Vec<PathBuf>>,
        images: bool,
        replace: bool,
        device: &str,
        dtype: &str,
        batch_size: Option<usize>,
        profile: &str,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Index> {
        let model_options = options(device, dtype, batch_size, None, profile)?;
        let vector_dtype = match vector_dtype {
            "f32" => VectorDtype::F32,
            "f16" => VectorDtype::F16,
            other => return Err(invalid(format!("vector_dtype {other:?}: give f32 or f16"))),
        };
        let dense = dense.unwrap_or_default();
        let vectors = vectors.unwrap_or_default();
        if !vectors.is_empty() && dense.is_empty() {
            return Err(invalid(
                "vectors stand for a dense model: give it in dense=[...] too",
            ));
        }
        let progress = Callback::new(progress);
        let run = || -> anyhow::Result<()> {
            let source = sift_core::Corpus::open(&corpus)?;
            let domains = source.select_domains(&domains.clone().unwrap_or_default())?;
            let defaults = BuildOptions::default();
            let mut bm25 = defaults.bm25;
            if let Some(k1) = k1 {
                bm25.k1 = k1;
            }
            if let Some(b) = b {
                bm25.b = b;
            }
            let build_options = BuildOptions {
                bm25,
                threads: threads.unwrap_or(defaults.threads).max(1),
                replace,
                ..defaults
            };
            let models = dense
                .iter()
                .map(|value| {
                    let spec = sift_retrieve::DenseModel::parse(value).spec;
                    sift_embed::Embedder::load(spec, &model_options)
                        .map_err(|e| anyhow::Error::new(e).context(format!("loading model {spec}")))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let indexed = if images {
                Indexed::PassagesAndImages
            } else {
                Indexed::Passages
            };
            let sides: Vec<Sides> = models.iter().map(|m| Sides::new(m, indexed)).collect();
            let opened = vectors
                .iter()
                .map(Precomputed::open)
                .collect::<sift_index::Result<Vec<_>>>()?;
            let given = sift_retrieve::match_precomputed(&opened, &models)?;
            let builds: Vec<_> = dense
                .iter()
                .zip(&sides)
                .zip(&given)
                .map(|((value, sides), given)| {
                    sides
                        .build_for(&sift_retrieve::DenseModel::parse(value), *given)
                        .dtype(vector_dtype)
                        .hnsw(HnswParams::default())
                })
                .collect();
            IndexDir::build(&path, &source, &domains, &build_options, &builds, &progress).map_err(
                |e| anyhow::Error::new(e).context(format!("building index {}", path.display())),
            )?;
            Ok(())
        };
        py.detach(run).map_err(sift_err)?;
        Index::opened(path, Some(corpus), model_options, Vec::new())
    }

    /// Opens the index at `path`. With `corpus` (the one it was built from), hits carry
    /// passage texts and pairs link as `sift search --corpus` links them. `retrievers`:
    /// the ones to load (default: bm25 and every dense index); models load on `device`
    /// in `dtype` at the first search. `reference_fusion`: prepare MM-BRIGHT's reference
    /// code's query rule for images and pairs (`fusion="reference"`), as `sift serve
    /// --reference-fusion`; `pair_link`: "regex" (the reference code) or "source-id".
    #[staticmethod]
    #[pyo3(signature = (path, corpus=None, *, retrievers=None, device="cpu", dtype="f32", batch_size=None, reference_fusion=false, pair_link="regex"))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        path: PathBuf,
        corpus: Option<PathBuf>,
        retrievers: Option<Vec<String>>,
        device: &str,
        dtype: &str,
        batch_size: Option<usize>,
        reference_fusion: bool,
        pair_link: &str,
    ) -> PyResult<Index> {
        let model_options = options(device, dtype, batch_size, None, "default")?;
        let mut index = Index::opened(path, corpus, model_options, retrievers.unwrap_or_default())?;
        index.config.reference_fusion = reference_fusion;
        index.config.pair_link = match pair_link {
            "regex" => sift_eval::PairLink::Regex,
            "source-id" => sift_eval::PairLink::SourceId,
            other => {
                return Err(invalid(format!(
                    "pair_link {other:?}: give \"regex\" or \"source-id\""
                )));
            }
        };
        Ok(index)
    }

    /// The index directory.
    #[getter(path)]
    fn py_path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The corpus hits read their texts from, if known.
    #[getter(corpus)]
    fn py_corpus(&self) -> Option<PathBuf> {
        self.corpus.clone()
    }

    /// The indexed domains.
    #[getter]
    fn domains(&self) -> PyResult<Vec<String>> {
        let index = IndexDir::open(&self.path).map_err(sift_err)?;
        Ok(index.manifest().domains.keys().cloned().collect())
    }

    /// The retrievers the index serves: bm25 and dense:<name> per dense index.
    #[getter]
    fn retrievers(&self) -> PyResult<Vec<String>> {
        let index = IndexDir::open(&self.path).map_err(sift_err)?;
        Ok(std::iter::once("bm25".to_string())
            .chain(index.manifest().dense.keys().map(|s| format!("dense:{s}")))
            .collect())
    }

    /// The manifest (what was built, with which settings and models) as JSON text.
    #[getter]
    fn manifest_json(&self) -> PyResult<String> {
        let index = IndexDir::open(&self.path).map_err(sift_err)?;
        serde_json::to_string(index.manifest()).map_err(sift_err)
    }

    /// Searches one domain (or, with `domain=None`, every domain merged into one
    /// ranking) with a query text and/or images (paths, bytes or PIL images). `retriever`:
    /// bm25, dense:<name> or hybrid:<a>+<b>[:<wa>,<wb>] (default: the first the index
    /// serves that can rank the candidates; a hybrid loads on its first search); `candidates`: "passages", "images" or "pairs"; `fusion`: how a
    /// model with separate towers combines text and images ("all": text plus the mean of
    /// the images; "first"; "reference": MM-BRIGHT's reference code's rule, see
    /// `sift_service::query_task`). Returns `top_k` hits, best first.
    #[pyo3(signature = (query="", images=None, *, retriever=None, domain=None, top_k=10, candidates="passages", fusion="all", k1=None, b=None, ef_search=None))]
    #[allow(clippy::too_many_arguments)]
    fn search(
        &self,
        py: Python<'_>,
        query: &str,
        images: Option<Vec<Bound<'_, PyAny>>>,
        retriever: Option<String>,
        domain: Option<String>,
        top_k: usize,
        candidates: &str,
        fusion: &str,
        k1: Option<f32>,
        b: Option<f32>,
        ef_search: Option<usize>,
    ) -> PyResult<Vec<Hit>> {
        let fusion = match fusion {
            "all" => Fusion::All,
            "first" => Fusion::First,
            "reference" => Fusion::Reference,
            other => {
                return Err(invalid(format!(
                    "fusion {other:?}: give \"all\", \"first\" or \"reference\""
                )));
            }
        };
        let images = images
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, o)| {
                Ok(ImageInput {
                    bytes: Some(image_bytes(o, i)?),
                    ..ImageInput::default()
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let request = SearchRequest {
            query: query.to_string(),
            images,
            retriever,
            domain,
            top_k,
            candidates: candidate_kind(candidates)?,
            fusion,
            max_text_chars: None,
            k1,
            b,
            ef_search,
        };
        let service = self.service(py, request.retriever.as_deref())?;
        let response = py
            .detach(|| service.search(&request))
            .map_err(|e| match &e.field {
                Some(field) => invalid(format!("{field}: {}", e.message)),
                None => invalid(e.message),
            })?;
        Ok(response
            .hits
            .into_iter()
            .map(|h| Hit {
                rank: h.rank,
                id: h.id,
                score: h.score,
                domain: h.domain,
                passage: h.passage_id,
                image: h.image_id,
                text: h.text,
            })
            .collect())
    }

    fn __repr__(&self) -> String {
        format!("Index({:?})", self.path.display().to_string())
    }
}
