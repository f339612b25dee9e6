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
pub mod rag;
mod remote;
mod request;
mod run;

pub use cache::{CacheKey, CacheOpen, CachedGeneration, GenerationCache};
pub use error::{Error, Result};
pub use remote::{OpenAiCompatible, RetryPolicy};
pub use request::{Generation, Message, Part, Request, Role, Sampling, Usage};
pub use run::{Job, Outcome, RunOptions, RunSummary, generate_all};

/// Something that answers a [`Request`]: a local model or a remote endpoint.
pub trait Generator: Send + Sync {
    /// The model's identity as the cache keys it (a hub id, a path, or an endpoint's model).
    fn model_id(&self) -> &str;
    /// One generation for `request`.
    fn generate(&self, request: &Request) -> Result<Generation>;
}
