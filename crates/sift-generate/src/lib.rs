//! Generation around retrieval: the requests a generator answers ([`Request`]: chat
//! messages with text and images, [`Sampling`]), the [`Generator`] trait, the
//! OpenAI-compatible remote back end ([`OpenAiCompatible`]: vLLM, llama.cpp's server, Ollama,
//! `transformers serve`, OpenAI), and a resumable cache of generations
//! ([`GenerationCache`], [`generate_all`]): every output stored under a key of model,
//! prompt template and version, sampling, query id and the images' hashes, so that a rerun
//! generates only what is missing and an interrupted run resumes.
//!
//! ```no_run
//! use sift_generate::{OpenAiCompatible, Request, Message, Part, Sampling, Generator};
//! let g = OpenAiCompatible::new("http://127.0.0.1:8000/v1", "Qwen/Qwen2-VL-2B-Instruct")
//!     .with_api_key_from_env("OPENAI_API_KEY");
//! let req = Request {
//!     messages: vec![Message::user(vec![Part::text("Describe the figure.")])],
//!     sampling: Sampling::greedy(128),
//! };
//! let out = g.generate(&req).unwrap();
//! println!("{} ({} tokens)", out.text, out.usage.completion_tokens);
//! ```
#![warn(missing_docs)]

mod cache;
mod error;
pub mod experiments;
mod local;
pub mod rag;
mod remote;
mod request;
mod run;

pub use cache::{CacheKey, CacheOpen, CachedGeneration, GenerationCache};
pub use error::{Error, Result};
pub use local::LocalQwen2Vl;
pub use remote::{
    OpenAiCompatible, RetryPolicy, current_deadline, parse_first_token_logprobs, retry_after,
    with_deadline,
};
pub use request::{Generation, MAX_TEMPERATURE, Message, Part, Request, Role, Sampling, Usage};
pub use run::{Job, Outcome, RunOptions, RunSummary, generate_all};

/// Something that answers a [`Request`]: a local model or a remote endpoint.
pub trait Generator: Send + Sync {
    /// The model's identity as the cache keys it (a hub id, a path, or an endpoint's model).
    fn model_id(&self) -> &str;
    /// One generation for `request`.
    fn generate(&self, request: &Request) -> Result<Generation>;
}

/// How a remote generator is reached ([`open`]).
#[derive(Debug, Clone)]
pub struct RemoteSettings {
    /// Environment variable holding the bearer key.
    pub api_key_env: String,
    /// The longest one request may take.
    pub timeout: std::time::Duration,
    /// How failed requests are retried.
    pub retry: RetryPolicy,
}

impl Default for RemoteSettings {
    /// The key in `OPENAI_API_KEY`, 300 s a request, the default retries.
    fn default() -> Self {
        RemoteSettings {
            api_key_env: "OPENAI_API_KEY".into(),
            timeout: std::time::Duration::from_secs(300),
            retry: RetryPolicy::default(),
        }
    }
}

/// Whether `spec` is an endpoint's base URL (`http://` or `https://`).
pub fn is_endpoint(spec: &str) -> bool {
    spec.starts_with("http://") || spec.starts_with("https://")
}

/// The OpenAI-compatible endpoint at base URL `spec` serving `model` (required).
pub fn open_endpoint(
    spec: &str,
    model: Option<&str>,
    remote: &RemoteSettings,
) -> Result<OpenAiCompatible> {
    let model = model.ok_or_else(|| {
        Error::Invalid(format!("{spec} is an endpoint: name the model it serves"))
    })?;
    Ok(OpenAiCompatible::new(spec, model)
        .with_api_key_from_env(&remote.api_key_env)
        .with_timeout(remote.timeout)
        .with_retry(remote.retry))
}

/// The generator `spec` names: an OpenAI-compatible endpoint (`http://` or `https://` base
/// URL; `model` names the model it serves and is required), or else a local Qwen2-VL
/// or Qwen2.5-VL checkpoint (a directory or a hub id) loaded on `device`, its weights in f32 or, with
/// `bf16`, bfloat16 ([`LocalQwen2Vl::load_with`]; `model` must be left out). Also says
/// whether it is local (one request at a time is all it takes).
pub fn open(
    spec: &str,
    model: Option<&str>,
    remote: &RemoteSettings,
    device: &candle_core::Device,
    bf16: bool,
) -> Result<(Box<dyn Generator>, bool)> {
    let dtype = if bf16 {
        candle_core::DType::BF16
    } else {
        candle_core::DType::F32
    };
    if is_endpoint(spec) {
        return Ok((Box::new(open_endpoint(spec, model, remote)?), false));
    }
    if let Some(m) = model {
        return Err(Error::Invalid(format!(
            "{spec} is a local model: leave the model name ({m}) out"
        )));
    }
    Ok((
        Box::new(LocalQwen2Vl::load_with(spec, device, dtype)?),
        true,
    ))
}
