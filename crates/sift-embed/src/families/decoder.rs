//! Decoder language models as text embedders: Mistral, Qwen2, Qwen3 and Llama checkpoints.
//! [`DecoderPooling::LastToken`] runs them with causal attention and pools at an appended
//! end-of-sequence token, as E5-Mistral, SFR-Embedding-Mistral, RaDeR and Qwen3-Embedding
//! embed (the model cards' `last_token_pool`: the tokenizer's ids, at most
//! `max_length - 1` of them, then EOS; the state at the EOS, L2-normalised);
//! [`DecoderPooling::MeanAfterPrefix`] is GritLM's embedding mode (its `GritLM.encode`):
//! bidirectional attention, the mean of the states after the instruction's tokens. The
//! decoder is Qwen2-VL's language model (`qwen2vl::TextModel`) with one-dimensional rotary
//! positions, query / key / value biases where the family has them, Qwen3's per-head query
//! / key norms and explicit head dimension, Llama 3's rotary scaling, and Mistral's causal
//! sliding window. Other rotary scalings, and Qwen2's per-layer or bidirectional sliding
//! windows shorter than the input, are not supported: such configurations are refused when
//! they load. Attention is causal or bidirectional as the registry says (gte-Qwen2:
//! bidirectional with last-token pooling), else as the pooling implies.
use candle_core::{DType, Device};
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::families::text::Role;
use crate::families::truncate::truncate_right;
use crate::files::{ModelFiles, read_json};
use crate::registry;
use crate::{Error, Result};
use sift_nn::layers::ops::{Segment, l2_normalize};
use sift_nn::models::qwen2vl::{DecoderConfig, Position, TextModel};

/// Families this module runs (`model_type` in config.json).
pub const DECODER_MODEL_TYPES: [&str; 4] = ["mistral", "qwen2", "qwen3", "llama"];

/// How a decoder turns its hidden states into one vector. Each implies its attention
/// (causal for the last token, bidirectional for the mean) unless the registry says
/// otherwise (gte-Qwen2: bidirectional, last token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderPooling {
    /// The state of an EOS appended to the input (E5-Mistral, SFR, gte-Qwen2, RaDeR,
    /// Qwen3-Embedding / Diver).
    LastToken,
    /// The mean of the states after the role's prefix (GritLM's and ReasonIR's `encode`:
    /// an instruction's tokens, BOS included, are masked out of the mean; with no
    /// instruction every token counts).
    MeanAfterPrefix,
}

/// Settings of a [`DecoderEmbedder`].
#[derive(Debug, Clone)]
pub struct DecoderOptions {
    /// Texts per forward pass.
    pub batch_size: usize,
    /// Weights and activations dtype.
    pub dtype: DType,
    /// Override of the maximum input length (tokens, BOS and EOS included).
    pub max_seq_len: Option<usize>,
    /// Pooling; by default the registry's (`mean`: [`DecoderPooling::MeanAfterPrefix`]),
    /// else [`DecoderPooling::LastToken`].
    pub pooling: Option<DecoderPooling>,
    /// The (query, passage) prefixes, instead of the registry's (an instruction in the
    /// model's prompt format, e.g. GritLM's `<|user|>\n{instruction}\n<|embed|>\n`).
    pub prefixes: Option<(String, String)>,
    /// A task instruction for queries, put into the registry's prompt format
    /// ([`crate::registry::ModelInfo::query_template`]); ignored when `prefixes` is given.
    pub query_instruction: Option<String>,
    /// Causal (`true`) or bidirectional attention, instead of the registry's or the
    /// pooling's.
    pub causal: Option<bool>,
}

impl Default for DecoderOptions {
    fn default() -> Self {
        DecoderOptions {
            batch_size: 8,
            dtype: DType::F32,
            max_seq_len: None,
            pooling: None,
            prefixes: None,
            query_instruction: None,
            causal: None,
        }
    }
}

/// A decoder LM embedding texts ([`DecoderPooling`]).
pub struct DecoderEmbedder {
    name: String,
    model: TextModel,
    tokenizer: Tokenizer,
    /// The tokenizer truncating at the query length, when queries have their own.
    query_tokenizer: Option<Tokenizer>,
    eos: u32,
    max_seq_len: usize,
    query_max_seq_len: usize,
    /// Passages cut to this many characters first (RaDeR's reference).
    passage_max_chars: Option<usize>,
    pooling: DecoderPooling,
    /// Causal attention (else bidirectional).
    causal: bool,
    /// Tokens of each role's prefix alone (BOS included): what mean pooling leaves out.
    prefix_tokens: [usize; 2],
    dim: usize,
    query_prefix: String,
    passage_prefix: String,
    /// The registry's query prompt format for an instruction.
    query_template: Option<String>,
    device: Device,
    options: DecoderOptions,
    content: String,
}

impl DecoderEmbedder {
    super::identity_getters!();

    /// Loads a Mistral, Qwen2, Qwen3 or Llama checkpoint (`model_type` mistral / qwen2 /
    /// qwen3 / llama).
    pub fn load(files: &ModelFiles, device: &Device, options: DecoderOptions) -> Result<Self> {
        let value: Value = read_json(&files.config)?;
        let unsupported = |message: String| Error::Unsupported {
            path: files.config.clone(),
            message,
        };
        let model_type = value
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !DECODER_MODEL_TYPES.contains(&model_type) {
            return Err(unsupported(format!(
                "model_type {model_type:?} is not a decoder Sift embeds ({})",
                DECODER_MODEL_TYPES.join(", ")
            )));
        }
        let raw: DecoderConfig = serde_json::from_value(value.clone())
            .map_err(|e| unsupported(format!("not a {model_type} config: {e}")))?;
        let mut cfg = raw.resolve().map_err(&unsupported)?;
        let info = registry::find(&files.name);
        let max_pos = raw.max_position_embeddings.unwrap_or(4096);
        let max_seq_len = options
            .max_seq_len
            .or(info.map(|m| m.max_seq_len))
            .unwrap_or(4096)
            .min(max_pos);
        // a sliding window shorter than the input: Mistral's (every layer, causal) runs;
        // Qwen2's / Qwen3's per-layer windows (`max_window_layers`) and windows over
        // bidirectional attention are refused
        let window = raw
            .sliding_window
            .filter(|&w| w < max_seq_len)
            .filter(|_| raw.use_sliding_window != Some(false));
        let pooling = options.pooling.unwrap_or(match info.map(|m| m.pooling) {
            Some(crate::registry::Pooling::Mean) => DecoderPooling::MeanAfterPrefix,
            _ => DecoderPooling::LastToken,
        });
        let causal = match (options.causal, info.and_then(|m| m.attention)) {
            (Some(c), _) => c,
            (None, Some(a)) => a == crate::registry::Attention::Causal,
            (None, None) => pooling == DecoderPooling::LastToken,
        };
        if let Some(w) = window {
            if model_type != "mistral" || !causal {
                return Err(unsupported(format!(
                    "a sliding window of {w} tokens, shorter than the {max_seq_len} embedded, \
                     over {} attention in {model_type}: not supported (Mistral's causal \
                     window is)",
                    if causal { "causal" } else { "bidirectional" }
                )));
            }
            if w == 0 {
                return Err(unsupported("a sliding window of 0 tokens".into()));
            }
            cfg.attention_window = Some(w);
        }
        // last-token models keep room for the EOS appended after truncation, as the model
        // cards do; GritLM truncates the whole input at max_length
        let room = usize::from(pooling == DecoderPooling::LastToken);
        let loaded = files.load_tokenizer()?;
        let truncating = |max: usize| -> Result<Tokenizer> {
            let mut t = loaded.clone();
            truncate_right(&mut t, max - room)?;
            t.with_padding(None);
            Ok(t)
        };
        let tokenizer = truncating(max_seq_len)?;
        let query_max_seq_len = info
            .and_then(|m| m.query_max_seq_len)
            .filter(|_| options.max_seq_len.is_none())
            .unwrap_or(max_seq_len)
            .min(max_seq_len);
        let query_tokenizer = (query_max_seq_len != max_seq_len)
            .then(|| truncating(query_max_seq_len))
            .transpose()?;
        let eos = raw
            .eos_token_id
            .as_ref()
            .and_then(|e| e.first())
            .ok_or_else(|| unsupported("no eos_token_id".into()))?;
        let query_template = info.and_then(|m| m.query_template.clone());
        let (query_prefix, passage_prefix) = match (&options.prefixes, &options.query_instruction) {
            (Some(p), _) => p.clone(),
            (None, instruction) => (
                match instruction {
                    Some(i) => info.and_then(|m| m.instruction_prefix(i)).ok_or_else(|| {
                        unsupported(format!(
                            "{} takes no query instruction (no prompt format for one in the \
                             registry); give the prefixes instead",
                            files.name
                        ))
                    })?,
                    None => info.map(|m| m.query_prefix.clone()).unwrap_or_default(),
                },
                info.map(|m| m.passage_prefix.clone()).unwrap_or_default(),
            ),
        };
        let prefix_tokens = [
            prefix_len(&tokenizer, &query_prefix)?,
            prefix_len(&tokenizer, &passage_prefix)?,
        ];
        let vb = files.var_builder(options.dtype, device)?;
        let model = TextModel::new(&vb, &cfg)
            .map_err(|e| unsupported(format!("weights do not match a {model_type} model: {e}")))?;
        Ok(DecoderEmbedder {
            name: files.name.clone(),
            model,
            tokenizer,
            query_tokenizer,
            eos,
            max_seq_len,
            query_max_seq_len,
            passage_max_chars: info.and_then(|m| m.passage_max_chars),
            pooling,
            causal,
            prefix_tokens,
            dim: cfg.hidden_size,
            query_prefix,
            passage_prefix,
            query_template,
            device: device.clone(),
            options,
            content: files.content_hash()?,
        })
    }

    /// Maximum tokens per input, BOS and EOS included.
    pub fn max_seq_len(&self) -> usize {
        self.max_seq_len
    }

    /// Maximum tokens per query (GritLM: 256).
    pub fn query_max_seq_len(&self) -> usize {
        self.query_max_seq_len
    }

    /// The pooling in use.
    pub fn pooling(&self) -> DecoderPooling {
        self.pooling
    }

    /// Whether attention is causal (else bidirectional).
    pub fn causal(&self) -> bool {
        self.causal
    }

    /// The prefix of texts of `role`.
    pub fn prefix(&self, role: Role) -> &str {
        match role {
            Role::Query => &self.query_prefix,
            Role::Passage => &self.passage_prefix,
        }
    }

    /// Settings that decide the vectors besides the input (a cache key).
    pub fn fingerprint(&self, role: Role) -> String {
        format!(
            "{}|decoder|{:?}|causal={}|len={}/{}|chars={:?}|prefix={:?}|{:?}|{}|{}",
            self.name,
            self.pooling,
            self.causal,
            self.max_seq_len,
            self.query_max_seq_len,
            self.passage_max_chars,
            self.prefix(role),
            self.options.dtype,
            crate::files::device_class(&self.device),
            self.content
        )
    }

    /// The query prefix carrying `instruction` in the model's prompt format (the
    /// registry's), when it has one.
    pub fn instruction_prefix(&self, instruction: &str) -> Option<String> {
        self.query_template
            .as_ref()
            .map(|t| t.replace("{instruction}", instruction))
    }

    /// Token ids of texts of `role`: the prefix and text as the tokenizer makes them (its
    /// BOS included), cut at the role's maximum (less one for last-token pooling, which then
    /// appends EOS).
    pub fn tokenize(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<u32>>> {
        self.tokenize_with_prefix(texts, role, self.prefix(role))
    }

    /// [`DecoderEmbedder::tokenize`] with `prefix` instead of the role's.
    pub fn tokenize_with_prefix(
        &self,
        texts: &[&str],
        role: Role,
        prefix: &str,
    ) -> Result<Vec<Vec<u32>>> {
        let cut = match role {
            Role::Passage => self.passage_max_chars,
            Role::Query => None,
        };
        let inputs: Vec<String> = texts
            .iter()
            .map(|t| match cut.and_then(|n| t.char_indices().nth(n)) {
                Some((end, _)) => format!("{prefix}{}", &t[..end]),
                None => format!("{prefix}{t}"),
            })
            .collect();
        let (tokenizer, max) = match (role, &self.query_tokenizer) {
            (Role::Query, Some(t)) => (t, self.query_max_seq_len),
            _ => (&self.tokenizer, self.max_seq_len),
        };
        let last = self.pooling == DecoderPooling::LastToken;
        let enc = super::truncate::encode_truncated(tokenizer, inputs, max - usize::from(last))?;
        Ok(enc
            .into_iter()
            .map(|e| {
                let mut ids = e.get_ids().to_vec();
                // one EOS at the end, whether or not the tokenizer adds it itself
                if last && ids.last() != Some(&self.eos) {
                    ids.push(self.eos);
                }
                ids
            })
            .collect())
    }

    /// Tokens of `prefix` alone, BOS included: what mean pooling leaves out of a text
    /// tokenised with it.
    pub fn prefix_tokens(&self, prefix: &str) -> Result<usize> {
        prefix_len(&self.tokenizer, prefix)
    }

    /// [`DecoderEmbedder::prefix_tokens`] of the role's own prefix (counted at load).
    pub fn role_prefix_tokens(&self, role: Role) -> usize {
        match role {
            Role::Query => self.prefix_tokens[0],
            Role::Passage => self.prefix_tokens[1],
        }
    }

    /// Unit vectors of token id sequences of `role`, in order (packed, longest first, in
    /// batches).
    pub fn embed_tokens(&self, ids: &[Vec<u32>], role: Role) -> Result<Vec<Vec<f32>>> {
        self.embed_tokens_after(ids, self.role_prefix_tokens(role))
    }

    /// [`DecoderEmbedder::embed_tokens`] of ids whose prefix is `skip` tokens long (left out
    /// of mean pooling; last-token pooling ignores it).
    pub fn embed_tokens_after(&self, ids: &[Vec<u32>], skip: usize) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); ids.len()];
        for chunk in order.chunks(self.options.batch_size.max(1)) {
            let lens: Vec<usize> = chunk.iter().map(|&i| ids[i].len()).collect();
            let all: Vec<u32> = chunk.iter().flat_map(|&i| ids[i].iter().copied()).collect();
            let positions: Vec<Position> = lens
                .iter()
                .flat_map(|&n| (0..n as u32).map(|p| [p, p, p]))
                .collect();
            let x = self.model.embed_tokens(&all)?;
            let segments = Segment::packed(lens.iter().copied());
            let h = match self.pooling {
                DecoderPooling::LastToken => {
                    let last: Vec<usize> = segments.iter().map(|s| s.start + s.len - 1).collect();
                    self.model
                        .forward(x, &positions, &segments, &last, self.causal)?
                        .to_dtype(DType::F32)?
                }
                DecoderPooling::MeanAfterPrefix => {
                    let rows: Vec<usize> = (0..all.len()).collect();
                    let states = self
                        .model
                        .forward(x, &positions, &segments, &rows, self.causal)?
                        .to_dtype(DType::F32)?;
                    // the mean over each sequence's tokens after its prefix (over all of it
                    // when truncation left nothing after the prefix)
                    let means = segments
                        .iter()
                        .map(|s| {
                            let from = if skip < s.len { skip } else { 0 };
                            states
                                .narrow(0, s.start + from, s.len - from)?
                                .mean_keepdim(0)
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    candle_core::Tensor::cat(&means, 0)?
                }
            };
            let h = l2_normalize(&h)?;
            for (&i, v) in chunk.iter().zip(h.to_vec2::<f32>()?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Unit vectors of texts of `role`.
    pub fn embed(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<f32>>> {
        self.embed_tokens(&self.tokenize(texts, role)?, role)
    }
}

/// Tokens of `prefix` alone, BOS included. GritLM's encode masks an instruction's tokens
/// only when there is an instruction: an empty prefix leaves nothing out (0).
fn prefix_len(tokenizer: &Tokenizer, prefix: &str) -> Result<usize> {
    if prefix.is_empty() {
        return Ok(0);
    }
    Ok(tokenizer
        .encode(prefix, true)
        .map_err(|e| Error::Tokenizer(e.to_string()))?
        .get_ids()
        .len())
}
