//! Cross-encoders: a query and a passage read together as one input, a classification head's
//! logit their relevance score, as sentence-transformers' `CrossEncoder.predict` computes it
//! for BERT (`BertForSequenceClassification`: the pooler's dense + tanh on `[CLS]`, then the
//! classifier; `cross-encoder/ms-marco-MiniLM-L-6-v2`) and XLM-RoBERTa
//! (`XLMRobertaForSequenceClassification`: dense + tanh + `out_proj` on `<s>`;
//! `BAAI/bge-reranker-base`, `-large`, `-v2-m3`) checkpoints.
//!
//! - Pairs are tokenised as the tokenizer's pair template makes them (`[CLS] q [SEP] p [SEP]`
//!   with token types 0 / 1, or `<s> q </s></s> p </s>`), truncated to `max_length` tokens the
//!   longest part first, as sentence-transformers calls its tokenizer (`truncation=True`).
//! - `max_length`: the caller's, else the tokenizer's `model_max_length`, else the model's
//!   positions, as `CrossEncoder(model, max_length=None)` does.
//! - The score: the head's one logit through the activation sentence-transformers applies:
//!   `activation_fn` in `config_sentence_transformers.json` (sentence-transformers 6 saves
//!   it only there), else `sentence_transformers.activation_fn` in `config.json`, else the
//!   older `sbert_ce_default_activation_function`, else the sigmoid (one label).
//!
//! Long passages are cut at a whitespace after `64 x max_length` bytes before tokenising:
//! identical tokens unless the kept tokens average more than 64 bytes each.
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::Linear;
use serde_json::Value;

use crate::{Error, ModelFiles, Result, read_json};
use sift_nn::models::bert::{Bert, BertConfig};

/// What turns the head's logit into the score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreActivation {
    /// The logit itself.
    Identity,
    /// `1 / (1 + e^-logit)`.
    Sigmoid,
    /// `tanh(logit)`.
    Tanh,
}

impl ScoreActivation {
    /// Reads a PyTorch module path (`torch.nn.modules.activation.Sigmoid`, ...).
    fn parse(path: &str) -> Option<ScoreActivation> {
        match path.rsplit('.').next()? {
            "Identity" => Some(ScoreActivation::Identity),
            "Sigmoid" => Some(ScoreActivation::Sigmoid),
            "Tanh" => Some(ScoreActivation::Tanh),
            _ => None,
        }
    }

    /// Applies it.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            ScoreActivation::Identity => x,
            ScoreActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            ScoreActivation::Tanh => x.tanh(),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            ScoreActivation::Identity => "identity",
            ScoreActivation::Sigmoid => "sigmoid",
            ScoreActivation::Tanh => "tanh",
        }
    }
}

/// The classification head on the first token's final state.
struct Head {
    /// BERT's pooler or RoBERTa's `classifier.dense`, then tanh.
    dense: Linear,
    /// BERT's `classifier`, RoBERTa's `classifier.out_proj`: one logit.
    out: Linear,
}

/// A loaded cross-encoder.
pub struct CrossEncoder {
    name: String,
    net: Bert,
    head: Head,
    tokenizer: tokenizers::Tokenizer,
    max_length: usize,
    activation: ScoreActivation,
    batch: usize,
    /// Whether the model reads token types (BERT: 0 / 1 for query / passage; RoBERTa has
    /// one type, and its inputs carry none).
    typed: bool,
    content: String,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("name", &self.name)
            .field("max_length", &self.max_length)
            .field("activation", &self.activation)
            .finish()
    }
}

/// Settings of [`CrossEncoder::load`].
#[derive(Debug, Clone)]
pub struct CrossEncoderOptions {
    /// Tokens of a pair, special tokens included (`None`: the tokenizer's `model_max_length`,
    /// else the model's positions).
    pub max_length: Option<usize>,
    /// Weights' dtype (bf16 on the CPU runs the packed kernels).
    pub dtype: DType,
    /// Pairs per forward pass (packed without padding; sentence-transformers' `batch_size`).
    pub batch: usize,
}

impl Default for CrossEncoderOptions {
    fn default() -> Self {
        CrossEncoderOptions {
            max_length: None,
            dtype: DType::F32,
            batch: 32,
        }
    }
}

/// Whether the checkpoint at `files` is a sequence-classification model with one label (a
/// cross-encoder).
pub fn is_cross_encoder(files: &ModelFiles) -> bool {
    let Ok(v) = read_json::<Value>(&files.config) else {
        return false;
    };
    v.get("architectures")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter().any(|x| {
                x.as_str()
                    .is_some_and(|s| s.ends_with("ForSequenceClassification"))
            })
        })
}

impl CrossEncoder {
    /// Loads `spec` (a directory or a hub id) onto `device`.
    pub fn load(spec: &str, device: &Device, options: &CrossEncoderOptions) -> Result<Self> {
        let files = ModelFiles::resolve(spec)?;
        let value: Value = read_json(&files.config)?;
        let unsupported = |message: String| Error::Unsupported {
            path: files.config.clone(),
            message,
        };
        let model_type = value
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("bert")
            .to_string();
        if !matches!(
            model_type.as_str(),
            "bert" | "roberta" | "xlm-roberta" | "camembert"
        ) {
            return Err(unsupported(format!(
                "model_type {model_type:?}: cross-encoders are BERT or (XLM-)RoBERTa sequence classifiers"
            )));
        }
        let config: BertConfig = serde_json::from_value(value.clone())
            .map_err(|e| unsupported(format!("not a BERT-family config: {e}")))?;
        let vb = files.var_builder(options.dtype, device)?;
        let roberta = config.roberta_padding_idx();
        let (dense, out) = if roberta.is_some() || vb.contains_tensor("classifier.out_proj.weight")
        {
            ("classifier.dense", "classifier.out_proj")
        } else {
            let pooler = ["bert.pooler.dense", "pooler.dense"]
                .into_iter()
                .find(|p| vb.contains_tensor(&format!("{p}.weight")))
                .unwrap_or("bert.pooler.dense");
            (pooler, "classifier")
        };
        // the labels: `id2label`, else `num_labels`, else (transformers 5 writes neither for
        // two labels) the rows of the scoring layer's weight
        let labels = value
            .get("id2label")
            .and_then(Value::as_object)
            .map(|m| m.len())
            .or_else(|| {
                value
                    .get("num_labels")
                    .and_then(Value::as_u64)
                    .map(|n| n as usize)
            })
            .or_else(|| {
                vb.get_unchecked(&format!("{out}.weight"))
                    .ok()
                    .and_then(|w| w.dims().first().copied())
            })
            .unwrap_or(1);
        if labels != 1 {
            return Err(unsupported(format!(
                "{labels} labels: a cross-encoder reranker has one relevance logit"
            )));
        }
        let st_config = match &files.st_config {
            Some(p) => Some(read_json::<Value>(p)?),
            None => None,
        };
        let activation =
            activation_of(&value, st_config.as_ref()).map_err(|m| match &files.st_config {
                Some(p) if m.contains("config_sentence_transformers") => Error::Unsupported {
                    path: p.clone(),
                    message: m,
                },
                _ => unsupported(m),
            })?;
        let roberta = config.roberta_padding_idx();
        // RoBERTa's positions start after the padding id
        let positions = config.max_position_embeddings
            - roberta
                .map_or(0, |p| p as usize + 1)
                .min(config.max_position_embeddings);
        let tokenizer_max = files
            .tokenizer_config
            .as_ref()
            .and_then(|p| read_json::<Value>(p).ok())
            .and_then(|v| v.get("model_max_length").and_then(Value::as_f64))
            // transformers' "no limit" is 1e30
            .filter(|&n| n < 1e9)
            .map(|n| n as usize);
        let max_length = options
            .max_length
            .or(tokenizer_max)
            .unwrap_or(positions)
            .min(positions);
        if max_length < 4 {
            return Err(unsupported(format!("max_length {max_length}")));
        }
        let net = Bert::new(vb.clone(), &config)
            .map_err(|e| unsupported(format!("weights do not match the encoder: {e}")))?;
        let h = config.hidden_size;
        let f32_linear = |vb: candle_nn::VarBuilder, inp: usize, out: usize| {
            let w = vb.get((out, inp), "weight")?.to_dtype(DType::F32)?;
            let b = vb.get(out, "bias")?.to_dtype(DType::F32)?;
            Ok::<_, candle_core::Error>(Linear::new(w, Some(b)))
        };
        let head = Head {
            dense: f32_linear(vb.pp(dense), h, h)
                .map_err(|e| unsupported(format!("{dense}: {e}")))?,
            out: f32_linear(vb.pp(out), h, 1).map_err(|e| unsupported(format!("{out}: {e}")))?,
        };
        let mut tokenizer = files.load_tokenizer()?;
        super::truncate::truncate_right(&mut tokenizer, max_length)?;
        tokenizer.with_padding(None);
        Ok(CrossEncoder {
            name: files.name.clone(),
            net,
            head,
            tokenizer,
            max_length,
            activation,
            batch: options.batch.max(1),
            typed: config.type_vocab_size > 1,
            content: files.content_hash()?,
        })
    }

    /// The model's name (hub id or directory name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Tokens of a pair, special tokens included.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// What turns logits into scores.
    pub fn activation(&self) -> ScoreActivation {
        self.activation
    }

    /// [`ModelFiles::content_hash`] of the files it was loaded from.
    pub fn content_hash(&self) -> &str {
        &self.content
    }

    /// Token ids and type ids of each `(query, passage)` pair, truncated.
    pub fn tokenize_pairs(&self, pairs: &[(&str, &str)]) -> Result<Vec<(Vec<u32>, Vec<u32>)>> {
        let cut = 64 * self.max_length;
        let inputs: Vec<tokenizers::EncodeInput> = pairs
            .iter()
            .map(|&(q, p)| {
                (
                    q.to_string(),
                    super::truncate::cut(p, cut).unwrap_or(p).to_string(),
                )
                    .into()
            })
            .collect();
        let enc = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(enc
            .into_iter()
            .map(|e| (e.get_ids().to_vec(), e.get_type_ids().to_vec()))
            .collect())
    }

    /// The head's raw logit of each pair.
    pub fn logits(&self, pairs: &[(&str, &str)]) -> Result<Vec<f32>> {
        let tokens = self.tokenize_pairs(pairs)?;
        let mut out = Vec::with_capacity(pairs.len());
        for chunk in tokens.chunks(self.batch) {
            let ids: Vec<&[u32]> = chunk.iter().map(|t| t.0.as_slice()).collect();
            let types: Vec<&[u32]> = chunk.iter().map(|t| t.1.as_slice()).collect();
            let x = self
                .net
                .forward_typed(&ids, self.typed.then_some(types.as_slice()))?;
            // each pair's first token
            let mut row = 0u32;
            let firsts: Vec<u32> = ids
                .iter()
                .map(|s| {
                    let r = row;
                    row += s.len() as u32;
                    r
                })
                .collect();
            let firsts = Tensor::from_vec(firsts, ids.len(), x.device())?;
            let cls = x.index_select(&firsts, 0)?.to_dtype(DType::F32)?;
            let pooled = self.head.dense.forward(&cls)?.tanh()?;
            let logits = self.head.out.forward(&pooled)?.flatten_all()?;
            out.extend(logits.to_vec1::<f32>()?);
        }
        crate::error::finite(&self.name, vec![out]).map(|mut v| v.remove(0))
    }

    /// The relevance score of each `(query, passage)` pair (the logit through
    /// [`CrossEncoder::activation`]).
    pub fn score(&self, pairs: &[(&str, &str)]) -> Result<Vec<f32>> {
        Ok(self
            .logits(pairs)?
            .into_iter()
            .map(|x| self.activation.apply(x))
            .collect())
    }
}

/// The activation sentence-transformers (6.3) applies to a one-label model's logit:
/// `config_sentence_transformers.json`'s `activation_fn` (where sentence-transformers 6
/// saves it), else `config.json`'s `sentence_transformers.activation_fn`, else its legacy
/// `sbert_ce_default_activation_function`, else the sigmoid.
fn activation_of(
    config: &Value,
    st_config: Option<&Value>,
) -> std::result::Result<ScoreActivation, String> {
    let (named, source) = match st_config.and_then(|c| c.get("activation_fn")) {
        Some(v) => (Some(v), "config_sentence_transformers.json"),
        None => (
            config
                .get("sentence_transformers")
                .and_then(|s| s.get("activation_fn"))
                .or_else(|| config.get("sbert_ce_default_activation_function")),
            "config.json",
        ),
    };
    match named {
        None | Some(Value::Null) => Ok(ScoreActivation::Sigmoid),
        Some(v) => v.as_str().and_then(ScoreActivation::parse).ok_or_else(|| {
            format!("{source}: activation {v} (Identity, Sigmoid and Tanh are known)")
        }),
    }
}
