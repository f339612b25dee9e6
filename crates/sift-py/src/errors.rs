//! Sift's errors as Python exceptions.
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _sift,
    SiftError,
    PyException,
    "An error of Sift: its message names the file, row, id or argument at fault."
);

/// A Sift error (any error with its sources) as a `SiftError`.
pub fn sift_err(e: impl Into<anyhow::Error>) -> PyErr {
    SiftError::new_err(format!("{:#}", e.into()))
}

/// A `SiftError` with `message`.
pub fn invalid(message: impl Into<String>) -> PyErr {
    SiftError::new_err(message.into())
}
