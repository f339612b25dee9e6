//! BERT-family sentence encoders: BERT checkpoints, and Nomic Embed's NomicBERT (with the
//! model card's layer norm and Matryoshka cut after the mean).

use candle_core::{DType, Device, Tensor};

use crate::families::truncate::truncate_right;
use serde::Deserialize;
use sift_nn::models::bert::{Bert, BertConfig};
use sift_nn::models::nomic::{NomicBert, NomicConfig, card_head};
use tokenizers::Tokenizer;

use crate::files::ModelFiles;
use crate::registry::{self, Pooling};
use crate::{Error, Result};

/// Whether a text is a query or a passage (they may get different prefixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Role {
    /// A search query.
    Query,
    /// A corpus passage.
    Passage,
}

/// Settings of a [`TextEmbedder`].
#[derive(Debug, Clone)]
pub struct TextEmbedderOptions {
    /// Texts per forward pass.
    pub batch_size: usize,
    /// Weights and activations dtype (f32 on CPU).
    pub dtype: DType,
    /// Override of the maximum sequence length (tokens, special tokens included).
    pub max_seq_len: Option<usize>,
    /// A task instruction for queries, put into the registry's prompt format
    /// ([`crate::registry::ModelInfo::query_template`]).
    pub query_instruction: Option<String>,
    /// Matryoshka dimension: vectors cut to their first `dim` values before L2 (Nomic
    /// Embed v1.5: 768, 512, 256, 128 or 64); the full width when `None`.
    pub dim: Option<usize>,
    /// The registry entry whose prefixes and prompt format the model takes when the registry
    /// does not know it by its own name (the text tower of a Nomic vision checkpoint is Nomic
    /// Embed Text v1.5, whatever its directory is called).
    pub registry_fallback: Option<String>,
}

impl Default for TextEmbedderOptions {
    fn default() -> Self {
        TextEmbedderOptions {
            batch_size: 32,
            dtype: DType::F32,
            max_seq_len: None,
            query_instruction: None,
            dim: None,
            registry_fallback: None,
        }
    }
}

/// The longest input: the option, else sentence-transformers' `max_seq_length`, else the
/// registry's, else `default`; at most the model's `positions`.
fn max_seq_len(
    files: &ModelFiles,
    options: &TextEmbedderOptions,
    default: usize,
    positions: usize,
) -> Result<usize> {
    let st_max = match &files.sentence_config {
        Some(p) => read_json::<SentenceConfig>(p)?.max_seq_length,
        None => None,
    };
    Ok(options
        .max_seq_len
        .or(st_max)
        .or(registry::find(&files.name).map(|m| m.max_seq_len))
        .unwrap_or(default)
        .min(positions))
}

/// The encoder under a [`TextEmbedder`].
enum Encoder {
    Bert(Bert),
    /// NomicBERT; its vectors go through the model card's head ([`card_head`]).
    Nomic(NomicBert),
}

impl Encoder {
    fn forward(&self, seqs: &[&[u32]]) -> candle_core::Result<Tensor> {
        match self {
            Encoder::Bert(m) => m.forward(seqs),
            Encoder::Nomic(m) => m.forward(seqs),
        }
    }

    fn hidden_size(&self) -> usize {
        match self {
            Encoder::Bert(m) => m.hidden_size(),
            Encoder::Nomic(m) => m.hidden_size(),
        }
    }
}

/// A sentence encoder: tokenise, run BERT, pool, L2-normalise.
pub struct TextEmbedder {
    name: String,
    model: Encoder,
    tokenizer: Tokenizer,
    pooling: Pooling,
    query_prefix: String,
    passage_prefix: String,
    /// The registry's query prompt format for an instruction.
    query_template: Option<String>,
    max_seq_len: usize,
    dim: usize,
    options: TextEmbedderOptions,
    /// [`ModelFiles::content_hash`].
    content: String,
    device: Device,
}

/// The `model_type`s Sift loads, for error messages.
pub(crate) const SUPPORTED_MODEL_TYPES: &str = "supported model types: bert, nomic_bert (text encoders), \
clip and siglip (vision-language), qwen2_vl (GME)";

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
}

#[derive(Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

use crate::files::read_json;

impl TextEmbedder {
    super::identity_getters!();

    /// Loads a model (see [`ModelFiles::resolve`]) onto `device`.
    pub fn load(
        files: &ModelFiles,
        device: &Device,
        options: TextEmbedderOptions,
    ) -> Result<TextEmbedder> {
        let value: serde_json::Value = read_json(&files.config)?;
        let unsupported = |message: String| Error::Unsupported {
            path: files.config.clone(),
            message,
        };
        if value.get("model_type").and_then(|t| t.as_str()) == Some("nomic_bert") {
            return Self::load_nomic(files, device, options, value);
        }
        match value.get("model_type").and_then(|t| t.as_str()) {
            Some("bert") => {}
            // old BERT configs have no model_type, but they do list the vocabulary
            None if value.get("vocab_size").is_some() => {}
            None => {
                return Err(unsupported(format!(
                    "no model_type, and not a BERT config either (no vocab_size); {SUPPORTED_MODEL_TYPES}"
                )));
            }
            Some(other) => {
                return Err(unsupported(format!(
                    "model_type {other:?}; {SUPPORTED_MODEL_TYPES}"
                )));
            }
        }
        let config: BertConfig = serde_json::from_value(value)
            .map_err(|e| unsupported(format!("not a BERT config: {e}")))?;
        let info = registry::find(&files.name);
        let pooling = match &files.pooling {
            Some(p) => {
                let c: PoolingConfig = read_json(p)?;
                match (c.pooling_mode_cls_token, c.pooling_mode_mean_tokens) {
                    (true, false) => Pooling::Cls,
                    (false, true) => Pooling::Mean,
                    _ => {
                        return Err(Error::Unsupported {
                            path: p.clone(),
                            message: "pooling other than exactly one of CLS / mean".into(),
                        });
                    }
                }
            }
            None => info.map_or(Pooling::Mean, |m| m.pooling),
        };
        if !matches!(pooling, Pooling::Mean | Pooling::Cls) {
            return Err(Error::Unsupported {
                path: files.config.clone(),
                message: format!("{pooling:?} pooling in a BERT-family model"),
            });
        }
        let max_seq_len = max_seq_len(files, &options, 512, config.max_position_embeddings)?;
        let vb = files.var_builder(options.dtype, device)?;
        let model = Encoder::Bert(Bert::new(vb, &config).map_err(|e| Error::Unsupported {
            path: files.config.clone(),
            message: format!("weights do not match a BERT model: {e}"),
        })?);
        Self::assemble(files, device, options, model, pooling, max_seq_len)
    }

    /// Loads a NomicBERT checkpoint (`model_type` nomic_bert: Nomic Embed's text tower).
    fn load_nomic(
        files: &ModelFiles,
        device: &Device,
        options: TextEmbedderOptions,
        value: serde_json::Value,
    ) -> Result<Self> {
        let unsupported = |message: String| Error::Unsupported {
            path: files.config.clone(),
            message,
        };
        let config: NomicConfig = serde_json::from_value(value)
            .map_err(|e| unsupported(format!("not a NomicBERT config: {e}")))?;
        config.check().map_err(&unsupported)?;
        let max_seq_len = max_seq_len(files, &options, 8192, config.n_positions)?;
        let vb = files.var_builder(options.dtype, device)?;
        let model =
            Encoder::Nomic(NomicBert::new(vb, &config).map_err(|e| {
                unsupported(format!("weights do not match a NomicBERT model: {e}"))
            })?);
        // the model card pools by the mean (sentence-transformers' 1_Pooling says so too)
        Self::assemble(files, device, options, model, Pooling::Mean, max_seq_len)
    }

    /// The tokenizer, prefixes and settings around a loaded encoder.
    fn assemble(
        files: &ModelFiles,
        device: &Device,
        options: TextEmbedderOptions,
        model: Encoder,
        pooling: Pooling,
        max_seq_len: usize,
    ) -> Result<Self> {
        let hidden = model.hidden_size();
        let info = registry::find(&files.name).or_else(|| {
            options
                .registry_fallback
                .as_deref()
                .and_then(registry::find)
        });
        let mut tokenizer = files.load_tokenizer()?;
        truncate_right(&mut tokenizer, max_seq_len)?;
        tokenizer.with_padding(None);
        let query_prefix = match &options.query_instruction {
            Some(i) => info.and_then(|m| m.instruction_prefix(i)).ok_or_else(|| {
                Error::Unsupported {
                    path: files.config.clone(),
                    message: format!(
                        "{} takes no query instruction (no prompt format for one in the registry)",
                        files.name
                    ),
                }
            })?,
            None => info.map(|m| m.query_prefix.clone()).unwrap_or_default(),
        };
        let dim = match options.dim {
            Some(d) if d == 0 || d > hidden => {
                return Err(Error::Unsupported {
                    path: files.config.clone(),
                    message: format!("a {d}-dimensional cut of {hidden}-dimensional vectors"),
                });
            }
            Some(d) => d,
            None => hidden,
        };
        Ok(TextEmbedder {
            name: files.name.clone(),
            model,
            tokenizer,
            pooling,
            query_template: info.and_then(|m| m.query_template.clone()),
            query_prefix,
            passage_prefix: info.map(|m| m.passage_prefix.clone()).unwrap_or_default(),
            max_seq_len,
            dim,
            options,
            content: files.content_hash()?,
            device: device.clone(),
        })
    }

    /// Everything that decides the vectors of texts of `kind` besides the text: the model's
    /// files, pooling, length, prefix, dtype and kind of device (for caches).
    pub fn fingerprint(&self, kind: Role) -> String {
        format!(
            "{}|text|{:?}|len={}|prefix={:?}|{:?}|{}|{}",
            self.name,
            self.pooling,
            self.max_seq_len,
            self.prefix(kind),
            self.options.dtype,
            crate::files::device_class(&self.device),
            self.content
        )
    }

    /// Pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Maximum tokens per input.
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// The prefix applied to texts of `kind`.
    pub fn prefix(&self, kind: Role) -> &str {
        match kind {
            Role::Query => &self.query_prefix,
            Role::Passage => &self.passage_prefix,
        }
    }

    /// The query prefix carrying `instruction` in the model's prompt format (the
    /// registry's), when it has one.
    pub fn instruction_prefix(&self, instruction: &str) -> Option<String> {
        self.query_template
            .as_ref()
            .map(|t| t.replace("{instruction}", instruction))
    }

    /// Tokenises `texts` (with the prefix of `kind`): token ids per text, truncated. Long
    /// texts are cut before tokenising, with identical ids ([`super::truncate`]).
    pub fn tokenize(&self, texts: &[&str], kind: Role) -> Result<Vec<Vec<u32>>> {
        self.tokenize_with(texts, self.prefix(kind), true)
    }

    /// [`TextEmbedder::tokenize`] with `prefix` instead of the role's.
    pub fn tokenize_with_prefix(&self, texts: &[&str], prefix: &str) -> Result<Vec<Vec<u32>>> {
        self.tokenize_with(texts, prefix, true)
    }

    /// [`TextEmbedder::tokenize`] tokenising every text whole before truncating (what
    /// sentence-transformers does; slower on long texts, same ids).
    pub fn tokenize_whole(&self, texts: &[&str], kind: Role) -> Result<Vec<Vec<u32>>> {
        self.tokenize_with(texts, self.prefix(kind), false)
    }

    fn tokenize_with(&self, texts: &[&str], prefix: &str, early: bool) -> Result<Vec<Vec<u32>>> {
        let inputs: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        let enc = if !early {
            self.tokenizer
                .encode_batch(inputs, true)
                .map_err(|e| Error::Tokenizer(e.to_string()))?
        } else {
            super::truncate::encode_truncated(&self.tokenizer, inputs, self.max_seq_len)?
        };
        Ok(enc.into_iter().map(|e| e.get_ids().to_vec()).collect())
    }

    /// Embeds texts: one L2-normalised vector per text, in input order. Texts are sorted by
    /// length internally so that each batch carries little padding.
    pub fn embed(&self, texts: &[&str], kind: Role) -> Result<Vec<Vec<f32>>> {
        let ids = self.tokenize(texts, kind)?;
        self.embed_tokens(&ids)
    }

    /// Embeds pre-tokenised inputs (see [`TextEmbedder::tokenize`]).
    pub fn embed_tokens(&self, ids: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let mut out = vec![Vec::new(); ids.len()];
        for chunk in order.chunks(self.options.batch_size.max(1)) {
            let batch: Vec<&[u32]> = chunk.iter().map(|&i| ids[i].as_slice()).collect();
            let vectors = self.forward(&batch)?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        crate::error::finite(self.name(), out)
    }

    fn forward(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        // empty inputs cannot happen with special tokens, but keep attention well defined
        let batch: Vec<&[u32]> = batch
            .iter()
            .map(|s| if s.is_empty() { &[0u32][..] } else { s })
            .collect();
        // (total tokens, dim), sequences packed; pooled in f32: a bfloat16 mean over hundreds
        // of tokens loses digits (PyTorch's reductions accumulate half types in f32 too)
        let hidden = self.model.forward(&batch)?.to_dtype(DType::F32)?;
        let dim = hidden.dim(1)?;
        // one pass over the rows (candle's mean over a narrowed view reduces at a stride)
        let values = hidden.flatten_all()?.to_vec1::<f32>()?;
        let mut pooled = Vec::with_capacity(batch.len() * dim);
        let mut start = 0;
        for s in &batch {
            let rows = &values[start * dim..(start + s.len()) * dim];
            match self.pooling {
                Pooling::Cls => pooled.extend_from_slice(&rows[..dim]),
                Pooling::Mean => {
                    let mut sum = vec![0f32; dim];
                    for row in rows.chunks_exact(dim) {
                        sum.iter_mut().zip(row).for_each(|(a, x)| *a += x);
                    }
                    let n = s.len() as f32;
                    pooled.extend(sum.iter().map(|a| a / n));
                }
                Pooling::Eos | Pooling::Last => pooled.extend_from_slice(&rows[rows.len() - dim..]),
            }
            start += s.len();
        }
        let mut pooled = Tensor::from_vec(pooled, (batch.len(), dim), hidden.device())?;
        match self.model {
            // Nomic's model card: a weightless layer norm, then the Matryoshka cut
            Encoder::Nomic(_) => pooled = card_head(&pooled, Some(self.dim))?,
            Encoder::Bert(_) if self.dim < pooled.dim(1)? => {
                pooled = pooled.narrow(1, 0, self.dim)?
            }
            Encoder::Bert(_) => {}
        }
        let norm = pooled
            .sqr()?
            .sum_keepdim(1)?
            .sqrt()?
            .clamp(1e-12, f64::MAX)?;
        let normed = pooled.broadcast_div(&norm)?;
        Ok(normed.to_vec2::<f32>()?)
    }
}
