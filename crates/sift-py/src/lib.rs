//! `sift_ir._sift`: the extension module under the `sift_ir` Python package (python/sift_ir):
//! indexes (`Index`, index.rs), evaluation (`evaluate`, evaluate.rs), embedders
//! (`Embedder`, embedder.rs), rerankers and generators (`Reranker`, `Generator`,
//! pipeline.rs). Heavy calls release the GIL; errors are `sift_ir.SiftError`
//! carrying Sift's messages.
use pyo3::prelude::*;

mod embedder;
mod errors;
mod evaluate;
mod index;
mod pipeline;
mod progress;

/// The extension module.
#[pymodule]
fn _sift(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SiftError", m.py().get_type::<errors::SiftError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<embedder::Embedder>()?;
    m.add_class::<index::Index>()?;
    m.add_class::<index::Hit>()?;
    m.add_class::<pipeline::Reranker>()?;
    m.add_class::<pipeline::Generator>()?;
    m.add_function(wrap_pyfunction!(evaluate::evaluate, m)?)?;
    Ok(())
}
