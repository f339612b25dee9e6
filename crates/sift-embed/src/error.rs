use std::path::PathBuf;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model file is missing or unreadable.
    #[error("{path}: {message}")]
    File {
        /// File at fault.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The model cannot be found locally and cannot be downloaded.
    #[error("model {spec:?}: {message}")]
    NotFound {
        /// What the user asked for.
        spec: String,
        /// Why it was not found.
        message: String,
    },
    /// The model's architecture is not supported.
    #[error("{path}: unsupported model: {message}")]
    Unsupported {
        /// config.json of the model.
        path: PathBuf,
        /// What is unsupported.
        message: String,
    },
    /// An image cannot be embedded: it does not decode, or a prepared image does not fit the
    /// model.
    #[error("image: {0}")]
    Image(#[from] crate::image::PreprocessError),
    /// The model cannot do what was asked (images with a text-only model, text and images in
    /// one input with a model that embeds them separately).
    #[error("model {model}: {message}")]
    Capability {
        /// Model name.
        model: String,
        /// What it cannot do.
        message: String,
    },
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// candle failed.
    #[error("model: {0}")]
    Candle(#[from] candle_core::Error),
    /// The model produced a vector that is not finite: its weights or its preprocessing
    /// configuration (e.g. `image_std` 0) are broken.
    #[error(
        "model {model} produced a non-finite vector (NaN or infinity) for input {index} of {count}: its weights or preprocessing settings are broken"
    )]
    NonFinite {
        /// Model name.
        model: String,
        /// Position of the first such input in the call.
        index: usize,
        /// Inputs in the call.
        count: usize,
    },
    /// The device is not available in this build or on this machine.
    #[error("device {0}")]
    Device(String),
}

/// `vectors` when every component is finite, else [`Error::NonFinite`] naming `model`.
pub(crate) fn finite(model: &str, vectors: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
    match vectors
        .iter()
        .position(|v| v.iter().any(|x| !x.is_finite()))
    {
        None => Ok(vectors),
        Some(index) => Err(Error::NonFinite {
            model: model.to_string(),
            index,
            count: vectors.len(),
        }),
    }
}

impl Error {
    pub(crate) fn file(path: impl Into<PathBuf>, message: impl ToString) -> Self {
        Error::File {
            path: path.into(),
            message: message.to_string(),
        }
    }
}
