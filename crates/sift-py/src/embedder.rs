//! `sift_ir.Embedder`: any model Sift loads, embedding texts, images and text+image inputs
//! into numpy float32 arrays, as `sift embed` does (the same chunks, so the same bits).
use std::sync::Arc;

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use sift_embed::{EmbedderOptions, JointInput, Precision, Profile, Role};

use crate::errors::{invalid, sift_err};

/// Texts per call of the model, as `sift embed` reads them (the model sorts a call's texts
/// by length into batches: the same chunks give the same batches, hence the same bits).
const TEXT_CHUNK: usize = 1024;
/// Images per call of the model, as `sift embed --image` reads them.
const IMAGE_CHUNK: usize = 256;
/// Largest image file read from a path (bytes), as `sift embed`'s default.
pub const MAX_IMAGE_BYTES: u64 = 64 << 20;

/// Load options from the keyword arguments the module's classes share.
pub fn options(
    device: &str,
    dtype: &str,
    batch_size: Option<usize>,
    query_instruction: Option<String>,
    profile: &str,
) -> PyResult<EmbedderOptions> {
    let dtype = match dtype {
        "f32" | "float32" => Precision::F32,
        "f16" | "float16" => Precision::F16,
        "bf16" | "bfloat16" => Precision::Bf16,
        "auto" => Precision::Auto,
        other => {
            return Err(invalid(format!(
                "dtype {other:?}: give f32, f16, bf16 or auto"
            )));
        }
    };
    let profile = Profile::from_name(profile).ok_or_else(|| {
        invalid(format!(
            "profile {profile:?}: give default, reference or reference-intended"
        ))
    })?;
    Ok(EmbedderOptions {
        device: device.parse().map_err(sift_err)?,
        dtype,
        batch_size: Some(batch_size.unwrap_or(32).max(1)),
        query_instruction,
        profile,
    })
}

fn role(kind: &str) -> PyResult<Role> {
    match kind {
        "query" => Ok(Role::Query),
        "passage" | "document" => Ok(Role::Passage),
        other => Err(invalid(format!(
            "kind {other:?}: give \"query\" or \"passage\""
        ))),
    }
}

/// An embedding model: a directory or hub id of any family Sift supports (BERT-family
/// encoders, decoder embedders, CLIP, SigLIP, Jina-CLIP, Nomic, BGE-VL, GME).
///
/// Vectors are unit-length float32 rows, equal bit for bit to `sift embed`'s for the same
/// model, options and inputs.
#[pyclass(module = "sift_ir._sift", frozen)]
pub struct Embedder {
    inner: Arc<sift_embed::Embedder>,
    spec: String,
}

impl Embedder {
    /// The model.
    pub fn model(&self) -> &sift_embed::Embedder {
        &self.inner
    }
}

/// Encoded image bytes from a path (str or os.PathLike), bytes, or a PIL image (saved as
/// PNG, which keeps its pixels).
pub fn image_bytes(obj: &Bound<'_, PyAny>, i: usize) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if obj.hasattr("save")? && obj.hasattr("mode")? {
        let py = obj.py();
        let buf = py.import("io")?.getattr("BytesIO")?.call0()?;
        obj.call_method1("save", (&buf, "PNG"))?;
        let value = buf.call_method0("getvalue")?;
        return Ok(value.cast::<PyBytes>()?.as_bytes().to_vec());
    }
    let path: std::path::PathBuf = if obj.is_instance_of::<PyString>() {
        obj.extract::<String>()?.into()
    } else {
        obj.extract().map_err(|_| {
            invalid(format!(
                "images[{i}]: give a path, bytes or a PIL image, not {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?
    };
    sift_core::read_regular_file(&path, MAX_IMAGE_BYTES)
        .map_err(|e| invalid(format!("images[{i}]: {e}")))
}

/// `(n, dim)` float32 array of `rows`, with one copy (into one buffer numpy then owns).
fn matrix<'py>(
    py: Python<'py>,
    rows: Vec<Vec<f32>>,
    dim: usize,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let n = rows.len();
    let mut flat = Vec::with_capacity(n * dim);
    for r in rows {
        flat.extend_from_slice(&r);
    }
    PyArray1::from_vec(py, flat).reshape([n, dim])
}

impl Embedder {
    /// Unit vectors of encoded images, in chunks as `sift embed --image`.
    fn embed_encoded(&self, images: &[Vec<u8>]) -> PyResult<Vec<Vec<f32>>> {
        let model = &self.inner;
        let mut out = Vec::with_capacity(images.len());
        for (c, chunk) in images.chunks(IMAGE_CHUNK).enumerate() {
            let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            let mut prepared = Vec::with_capacity(chunk.len());
            for (j, r) in model.prepare_images(&refs).into_iter().enumerate() {
                prepared.push(r.map_err(|e| {
                    invalid(format!(
                        "images[{}]: cannot decode the image: {e}",
                        c * IMAGE_CHUNK + j
                    ))
                })?);
            }
            out.extend(model.embed_images(&prepared).map_err(sift_err)?);
        }
        Ok(out)
    }
}

#[pymethods]
impl Embedder {
    /// Loads `model` (a directory or hub id) on `device` ("cpu", "cuda", "cuda:N",
    /// "metal" or "auto") with weights in `dtype` ("f32", "f16", "bf16" or "auto"),
    /// `batch_size` inputs per forward pass, an optional query instruction (in the model's
    /// prompt format) and an embedding profile ("default", "reference",
    /// "reference-intended").
    #[new]
    #[pyo3(signature = (model, device="cpu", dtype="f32", batch_size=None, query_instruction=None, profile="default"))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: &str,
        dtype: &str,
        batch_size: Option<usize>,
        query_instruction: Option<String>,
        profile: &str,
    ) -> PyResult<Embedder> {
        let options = options(device, dtype, batch_size, query_instruction, profile)?;
        let spec = model.to_string();
        let inner = py
            .detach(|| sift_embed::Embedder::load(&spec, &options))
            .map_err(|e| {
                sift_err(anyhow::Error::new(e).context(format!("loading model {spec}")))
            })?;
        Ok(Embedder {
            inner: Arc::new(inner),
            spec,
        })
    }

    /// Model name (hub id or directory name).
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// What the model was loaded from.
    #[getter]
    fn spec(&self) -> &str {
        &self.spec
    }

    /// Vector length.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// The model family (bert, clip, siglip, gme, ...).
    #[getter]
    fn family(&self) -> &'static str {
        self.inner.family().name()
    }

    /// Whether the model embeds images.
    #[getter]
    fn sees_images(&self) -> bool {
        self.inner.capabilities().images
    }

    /// The precision the model runs in ("f32", "bf16", ...), `auto` resolved.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.precision().name()
    }

    /// The kernel the linear layers run on (as `sift bench embed` reports it).
    #[getter]
    fn linear_kernel(&self) -> &'static str {
        self.inner.linear_kernel()
    }

    /// Hash of the model's files (weights, tokenizer, configs).
    #[getter]
    fn model_hash(&self) -> &str {
        self.inner.content_hash()
    }

    /// The embedding profile the passage vectors are made with when it is not the
    /// default (recorded by an index), else None.
    #[getter]
    fn profile(&self) -> Option<String> {
        let p = self.inner.profile().vectors();
        (p != Profile::Default).then(|| p.name().to_string())
    }

    /// Everything that decides passage vectors besides the text (model files, prefix,
    /// pooling, length, dtype, device kind): what an index records.
    #[getter]
    fn fingerprint(&self) -> String {
        self.inner
            .fingerprint(sift_embed::Input::Text(Role::Passage))
    }

    /// Unit vectors of `texts` as `kind` ("query" or "passage"): a float32 array of shape
    /// (len(texts), dim). Queries take `instruction` in the model's prompt format when
    /// given.
    #[pyo3(signature = (texts, kind="passage", instruction=None))]
    fn embed_texts<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        kind: &str,
        instruction: Option<&str>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let role = role(kind)?;
        if instruction.is_some() && role != Role::Query {
            return Err(invalid(
                "an instruction is for queries: give kind=\"query\"",
            ));
        }
        let model = &self.inner;
        let rows = py.detach(|| -> sift_embed::Result<Vec<Vec<f32>>> {
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(TEXT_CHUNK) {
                let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
                out.extend(match (role, instruction) {
                    (Role::Query, Some(_)) => model.embed_queries(&refs, instruction)?,
                    _ => model.embed_texts(&refs, role)?,
                });
            }
            Ok(out)
        });
        matrix(py, rows.map_err(sift_err)?, model.dim())
    }

    /// Unit vectors of images (paths, bytes or PIL images): a float32 array of shape
    /// (len(images), dim). An image that does not decode is an error naming its position.
    fn embed_images<'py>(
        &self,
        py: Python<'py>,
        images: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        if !self.sees_images() {
            return Err(invalid(format!(
                "{} is a text model: it embeds no images",
                self.inner.name()
            )));
        }
        let bytes = images
            .iter()
            .enumerate()
            .map(|(i, o)| image_bytes(o, i))
            .collect::<PyResult<Vec<_>>>()?;
        let rows = py.detach(|| self.embed_encoded(&bytes))?;
        matrix(py, rows, self.inner.dim())
    }

    /// One unit vector of a text with images, as Sift fuses a query (`--query-fusion
    /// all`): GME and BGE-VL embed them as one input; models with separate towers give
    /// normalise(text vector + mean of the image vectors). Shape (dim,).
    #[pyo3(signature = (text, images, kind="query"))]
    fn embed_joint<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        images: Vec<Bound<'py, PyAny>>,
        kind: &str,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let role = role(kind)?;
        let bytes = images
            .iter()
            .enumerate()
            .map(|(i, o)| image_bytes(o, i))
            .collect::<PyResult<Vec<_>>>()?;
        let model = &self.inner;
        let v = py.detach(|| -> PyResult<Vec<f32>> {
            if model.capabilities().joint {
                let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
                let prepared = model
                    .prepare_images(&refs)
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| {
                        r.map_err(|e| invalid(format!("images[{i}]: cannot decode the image: {e}")))
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                let imgs: Vec<&sift_embed::PreparedImage> = prepared.iter().collect();
                let input = JointInput {
                    text: (!text.is_empty()).then_some(text),
                    images: &imgs,
                };
                let mut v = model.embed_joint(&[input], role).map_err(sift_err)?;
                return Ok(v.remove(0));
            }
            let t = model
                .embed_texts(&[text], role)
                .map_err(sift_err)?
                .remove(0);
            if bytes.is_empty() {
                return Ok(t);
            }
            let vecs = self.embed_encoded(&bytes)?;
            let mut mean = vec![0f32; t.len()];
            for v in &vecs {
                mean.iter_mut().zip(v).for_each(|(m, x)| *m += x);
            }
            let n = vecs.len() as f32;
            mean.iter_mut().for_each(|m| *m /= n);
            Ok(sift_retrieve::normalized_sum(&t, &mean))
        })?;
        Ok(PyArray1::from_vec(py, v))
    }

    fn __repr__(&self) -> String {
        format!(
            "Embedder({:?}, family={:?}, dim={}, dtype={:?})",
            self.spec,
            self.inner.family().name(),
            self.inner.dim(),
            self.inner.precision().name()
        )
    }
}
