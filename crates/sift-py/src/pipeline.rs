//! `Reranker` and `Generator`: a reranker's raw scores of given pairs and a generator's
//! answers to OpenAI chats, through the code `sift rerank`, `sift generate chats`,
//! `POST /v1/rerank` and `POST /v1/chat/completions` run (sift-service's `score_pairs`,
//! `rerank_documents` and `chat`).
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use sift_retrieve::{RerankOptions, Reranker as RerankerModel};
use sift_service::api::{ChatRequest, RerankDocument, RerankRequest, parse_json};
use sift_service::chat::{ImageSources, complete};
use sift_service::{ApiError, Limits, ScorePair, rerank_documents, score_pairs};

use crate::embedder::{image_bytes, options};
use crate::errors::{invalid, sift_err};

/// An API error as a `SiftError` naming the field at fault.
fn api_err(e: ApiError) -> PyErr {
    invalid(e.to_string())
}

/// The limits the service holds requests to, but for Python callers, who may send as many
/// documents as they like.
fn limits() -> Limits {
    Limits {
        max_inputs: usize::MAX,
        ..Limits::default()
    }
}

/// A reranker: a cross-encoder (`cross-encoder/ms-marco-MiniLM-L-6-v2`, a directory),
/// `pointwise:MODEL` or `listwise:GENERATOR`, as `sift rerank --model` takes it, loaded
/// once on `device` in `dtype`.
#[pyclass(module = "sift_ir._sift", frozen)]
pub struct Reranker {
    model: Arc<dyn RerankerModel>,
}

#[pymethods]
impl Reranker {
    #[new]
    #[pyo3(signature = (model, *, device="cpu", dtype="f32", batch_size=32, max_length=None, endpoint_model=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: &str,
        dtype: &str,
        batch_size: usize,
        max_length: Option<usize>,
        endpoint_model: Option<String>,
    ) -> PyResult<Reranker> {
        let o = options(device, dtype, None, None, "default")?;
        let device = sift_embed::select_device(o.device).map_err(sift_err)?;
        let dtype = match dtype {
            "bf16" | "bfloat16" => candle_core::DType::BF16,
            _ => candle_core::DType::F32,
        };
        let mut ro = RerankOptions::new(device, dtype);
        ro.batch = batch_size.max(1);
        ro.max_length = max_length;
        ro.model = endpoint_model;
        let model = py
            .detach(|| {
                sift_retrieve::open_reranker(model, &ro)
                    .map_err(|e| anyhow::Error::new(e).context(format!("loading {model}")))
            })
            .map_err(sift_err)?;
        Ok(Reranker { model })
    }

    /// Its name (`rerank:<name>` in tables; `model` in `POST /v1/rerank`).
    #[getter]
    fn name(&self) -> String {
        self.model.name().to_string()
    }

    /// Whether it reads images.
    #[getter]
    fn sees_images(&self) -> bool {
        self.model.sees_images()
    }

    /// The raw score of each pair, in order, as `sift rerank` gives them (a cross-encoder's
    /// `predict()` values). A pair is `(query, passage)`, `(query, passage, image)` or
    /// `(query, None, image)`; an image is a path, bytes or a PIL image.
    fn score(&self, py: Python<'_>, pairs: &Bound<'_, PyList>) -> PyResult<Vec<f64>> {
        let mut out = Vec::with_capacity(pairs.len());
        for (i, p) in pairs.iter().enumerate() {
            let t = p.cast::<PyTuple>().map_err(|_| {
                invalid(format!(
                    "pairs[{i}]: give a (query, passage[, image]) tuple"
                ))
            })?;
            if !(2..=3).contains(&t.len()) {
                return Err(invalid(format!(
                    "pairs[{i}]: give (query, passage) or (query, passage, image)"
                )));
            }
            let query: String = t.get_item(0)?.extract()?;
            let passage: Option<String> = t.get_item(1)?.extract()?;
            let image = match t.len() {
                3 => {
                    let o = t.get_item(2)?;
                    (!o.is_none()).then(|| image_bytes(&o, i)).transpose()?
                }
                _ => None,
            };
            out.push(ScorePair {
                query,
                passage,
                image,
            });
        }
        let model = self.model.clone();
        py.detach(|| score_pairs(model.as_ref(), &out))
            .map_err(api_err)
    }

    /// The documents ranked for `query`, best first, as `POST /v1/rerank` answers: a list
    /// of `{"index", "relevance_score"}` (with `"document"` when `return_documents`), at
    /// most `top_n`. A document is a text or a dict with `text` and/or `image` (a `data:`
    /// URL).
    #[pyo3(signature = (query, documents, *, top_n=None, return_documents=false))]
    fn rank<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        documents: &Bound<'py, PyList>,
        top_n: Option<usize>,
        return_documents: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let json = py.import("json")?;
        let docs_text: String = json.call_method1("dumps", (documents,))?.extract()?;
        let documents: Vec<RerankDocument> =
            parse_json(docs_text.as_bytes()).map_err(|e| invalid(format!("documents{e}")))?;
        let req = RerankRequest {
            model: None,
            query: query.to_string(),
            documents,
            top_n,
            return_documents: Some(return_documents),
        };
        let model = self.model.clone();
        let res = py
            .detach(|| rerank_documents(model.as_ref(), &req, &limits()))
            .map_err(api_err)?;
        let text = serde_json::to_string(&res.results).map_err(sift_err)?;
        json.call_method1("loads", (text,))?
            .cast_into::<PyList>()
            .map_err(Into::into)
    }

    fn __repr__(&self) -> String {
        format!("Reranker({:?})", self.model.name())
    }
}

/// A generator: a local Qwen2-VL- or Qwen2.5-VL-Instruct checkpoint (directory or hub id),
/// or an OpenAI-compatible endpoint's base URL with `model`, as `sift generate --generator`
/// takes it.
#[pyclass(module = "sift_ir._sift", frozen)]
pub struct Generator {
    spec: String,
    model: Option<String>,
    generator: Box<dyn sift_generate::Generator>,
}

#[pymethods]
impl Generator {
    #[new]
    #[pyo3(signature = (generator, *, model=None, device="cpu", dtype="f32"))]
    fn new(
        py: Python<'_>,
        generator: &str,
        model: Option<String>,
        device: &str,
        dtype: &str,
    ) -> PyResult<Generator> {
        if !matches!(dtype, "f32" | "bf16") {
            return Err(invalid(format!("dtype {dtype:?}: give f32 or bf16")));
        }
        let o = options(device, "f32", None, None, "default")?;
        let device = sift_embed::select_device(o.device).map_err(sift_err)?;
        let (g, _) = py
            .detach(|| {
                sift_generate::open(
                    generator,
                    model.as_deref(),
                    &sift_generate::RemoteSettings::default(),
                    &device,
                    dtype == "bf16",
                )
            })
            .map_err(|e| sift_err(anyhow::Error::new(e).context(format!("opening {generator}"))))?;
        Ok(Generator {
            spec: generator.to_string(),
            model,
            generator: g,
        })
    }

    /// The name answers carry (the endpoint's model, else the generator as given).
    #[getter]
    fn name(&self) -> String {
        self.model.clone().unwrap_or_else(|| self.spec.clone())
    }

    /// Answers an OpenAI chat, as `sift serve`'s `POST /v1/chat/completions` answers it:
    /// `messages` (dicts with `role` and `content`: text, or parts `{"type": "text"}` /
    /// `{"type": "image_url", "image_url": {"url": ...}}`: a `data:` URL, or a file path
    /// relative to the working directory), and the sampling
    /// settings of the chat completion body as keywords (`max_tokens`, `temperature`,
    /// `top_p`, `seed`, `stop`). Returns the chat completion as a dict.
    #[pyo3(signature = (messages, **settings))]
    fn chat<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyList>,
        settings: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let body = PyDict::new(py);
        if let Some(s) = settings {
            body.update(s.as_mapping())?;
        }
        body.set_item("model", PyString::new(py, &self.name()))?;
        body.set_item("messages", messages)?;
        let json = py.import("json")?;
        let text: String = json.call_method1("dumps", (body,))?.extract()?;
        let req: ChatRequest = parse_json(text.as_bytes()).map_err(api_err)?;
        let name = self.name();
        let res = py
            .detach(|| {
                complete(
                    self.generator.as_ref(),
                    &name,
                    &req,
                    &Limits::default(),
                    ImageSources::DataUrlsAndFiles(std::path::Path::new(".")),
                )
            })
            .map_err(api_err)?;
        let text = serde_json::to_string(&res).map_err(sift_err)?;
        json.call_method1("loads", (text,))?
            .cast_into::<PyDict>()
            .map_err(Into::into)
    }

    fn __repr__(&self) -> String {
        format!("Generator({:?})", self.name())
    }
}
