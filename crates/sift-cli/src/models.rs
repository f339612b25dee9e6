//! Model flags shared by the commands that embed.
use anyhow::{Context, Result};
use sift_embed::{Embedder, EmbedderOptions, Precision, Profile};

/// Model flags shared by commands that embed.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelFlags {
    /// Device: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32, value_parser = crate::options::int_in::<usize>(1, 65_536))]
    pub batch_size: usize,
    /// Weights: f32, f16, bf16 or auto. On the CPU, bf16 keeps every model's linear layers
    /// as bfloat16 weights (half the memory) multiplied on the processor's bfloat16 units
    /// (Intel AMX tiles, else AVX512-BF16) while the rest computes in f32: cosine >= 0.999
    /// to f32 on the parity suites; auto picks bf16 on such processors for the families
    /// that hold that bound (all but Jina-CLIP), f32 elsewhere. f16 runs candle's generic
    /// operations (meant for GPUs). `sift bench embed` reports the kernel that ran.
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: Precision,
    /// A task instruction for queries, in the model's prompt format (`sift models info`
    /// shows it: E5-Mistral "Instruct: {instruction}\nQuery: ", GritLM, BGE, ...), or GME's
    /// system prompt (default "You are a helpful assistant."). `sift eval` puts
    /// `{domain}` -> the domain's name and applies it to every model that takes one.
    #[arg(long)]
    pub query_instruction: Option<String>,
    /// How each model's inputs are prepared: default (as its model card runs it),
    /// reference (MM-BRIGHT's released code as it runs, model by model and task by task:
    /// Nomic documents cut to 8,000 characters without `search_document: `, GME texts to
    /// 4,000, BGE-VL texts by each task's character cut, images as its data loader hands
    /// them over; `sift eval` then fuses query images by its rule per model and task,
    /// including the white and blank images its code falls back to by accident, and scores
    /// Task 4 with --protocol legacy) or reference-intended (the same with real images
    /// where the code evidently meant them: Task 3 for Nomic and Jina-CLIP, Task 4 pairs for
    /// BGE-VL and GME). docs/src/reference-profile.md lists every rule. An index records the
    /// profile it was built with (both reference profiles build the same vectors), and
    /// searches of it use that one.
    #[arg(long, value_enum, default_value = "default")]
    pub profile: Profile,
}

impl ModelFlags {
    /// The embedder options these flags say.
    pub fn options(&self) -> Result<EmbedderOptions> {
        Ok(EmbedderOptions {
            device: self.device.parse()?,
            dtype: self.dtype,
            batch_size: Some(self.batch_size.max(1)),
            query_instruction: self.query_instruction.clone(),
            profile: self.profile,
        })
    }

    /// Loads a model from a directory or hub id (any supported family).
    pub fn load(&self, spec: &str) -> Result<Embedder> {
        Embedder::load(spec, &self.options()?).with_context(|| format!("loading model {spec}"))
    }
}
