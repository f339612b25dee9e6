//! Model flags shared by the commands that embed.
use anyhow::{Context, Result};
use sift_embed::{Embedder, EmbedderOptions, Precision};

/// Model flags shared by commands that embed.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelFlags {
    /// Device: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Instruction (system prompt) of GME queries; GME's default "You are a helpful
    /// assistant." when absent. Passages and corpus images always use the default.
    #[arg(long)]
    pub query_instruction: Option<String>,
}

impl ModelFlags {
    /// The embedder options these flags say, with weights in `precision`.
    pub fn options(&self, precision: Precision) -> Result<EmbedderOptions> {
        Ok(EmbedderOptions {
            device: self.device.parse()?,
            dtype: precision.dtype(),
            batch_size: Some(self.batch_size.max(1)),
            query_instruction: self.query_instruction.clone(),
        })
    }

    /// Loads a model from a directory or hub id (any supported family).
    pub fn load(&self, spec: &str) -> Result<Embedder> {
        self.load_as(spec, Precision::F32)
    }

    /// [`ModelFlags::load`] with weights and activations in `precision`.
    pub fn load_as(&self, spec: &str, precision: Precision) -> Result<Embedder> {
        Embedder::load(spec, &self.options(precision)?)
            .with_context(|| format!("loading model {spec}"))
    }
}
