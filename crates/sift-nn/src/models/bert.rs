//! BERT encoder for inference on unpadded, packed batches; also (XLM-)RoBERTa, which is the
//! same network with positions counted from the padding id (`create_position_ids_from_input_ids`).
//!
//! Same weights and arithmetic as Hugging Face `BertModel` (and candle-transformers' port, which Sift does not depend on),
//! arranged for throughput: the tokens of all sequences in a batch are packed into one
//! `(tokens, hidden)` matrix, so every linear layer, layer norm and activation runs once per
//! batch with no padding; attention alone runs per sequence, on exactly its own tokens, so no
//! attention mask is needed. Q, K and V are one fused matrix product. On the CPU the exact
//! (erf) GELU runs in parallel with an f32 erf accurate to 1.5e-7.
use candle_core::{Device, Module, Result, Tensor};
use candle_nn::{Embedding, VarBuilder};
use serde::Deserialize;

use crate::layers::ops::{
    self, Act, Norm, Packing, Proj, Segment, load_norm as layer_norm, parse_act,
};

/// A BERT `config.json`: transformers' `BertConfig`, with its defaults for omitted keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// MLP activation (`gelu`, `gelu_new`, `relu`, ...).
    pub hidden_act: String,
    /// Longest input, special tokens included.
    pub max_position_embeddings: usize,
    /// Token type (segment) vocabulary.
    pub type_vocab_size: usize,
    /// Layer-norm epsilon.
    pub layer_norm_eps: f64,
    /// Position embeddings: only `absolute` is supported.
    pub position_embedding_type: String,
    /// `bert` (or absent in old configs); `roberta`, `xlm-roberta` and `camembert` count
    /// positions from `pad_token_id + 1`.
    pub model_type: Option<String>,
    /// The padding id (RoBERTa's position offset).
    pub pad_token_id: Option<u32>,
}

impl BertConfig {
    /// RoBERTa's position ids: `padding_idx + 1` upwards for tokens, `padding_idx` for
    /// padding tokens (`None`: BERT's `0..`).
    pub fn roberta_padding_idx(&self) -> Option<u32> {
        matches!(
            self.model_type.as_deref(),
            Some("roberta" | "xlm-roberta" | "camembert")
        )
        .then(|| self.pad_token_id.unwrap_or(1))
    }
}

impl Default for BertConfig {
    fn default() -> Self {
        BertConfig {
            vocab_size: 30522,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            position_embedding_type: "absolute".into(),
            model_type: None,
            pad_token_id: None,
        }
    }
}

struct Layer {
    qkv: Proj,
    attn_out: Proj,
    attn_norm: Norm,
    inter: Proj,
    out: Proj,
    out_norm: Norm,
}

/// A BERT encoder.
pub struct Bert {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    emb_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    act: Act,
    /// RoBERTa's position offset ([`BertConfig::roberta_padding_idx`]).
    padding_idx: Option<u32>,
    device: Device,
}

impl Bert {
    /// Hidden size (the width of its token vectors).
    pub fn hidden_size(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Loads the weights (with or without a `bert.` / `<model_type>.` prefix; bfloat16 on
    /// the CPU: see `Packing` in `layers::linear`).
    pub fn new(vb: VarBuilder, cfg: &BertConfig) -> Result<Bert> {
        let (vb, pk) = Packing::split(vb);
        let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vb
        } else if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else if vb.contains_tensor("roberta.embeddings.word_embeddings.weight") {
            vb.pp("roberta")
        } else if let Some(t) = cfg
            .model_type
            .as_deref()
            .filter(|t| vb.contains_tensor(&format!("{t}.embeddings.word_embeddings.weight")))
        {
            vb.pp(t)
        } else {
            candle_core::bail!("no embeddings.word_embeddings.weight in the weights")
        };
        if cfg.position_embedding_type != "absolute" {
            candle_core::bail!(
                "position_embedding_type {:?} is not supported (only absolute)",
                cfg.position_embedding_type
            );
        }
        let act = parse_act(&cfg.hidden_act)
            .ok_or_else(|| candle_core::Error::Msg(format!("hidden_act {:?}", cfg.hidden_act)))?;
        let h = cfg.hidden_size;
        let e = vb.pp("embeddings");
        let emb = |name: &str, n: usize| -> Result<Embedding> {
            Ok(Embedding::new(e.pp(name).get((n, h), "weight")?, h))
        };
        let word = emb("word_embeddings", cfg.vocab_size)?;
        let position = emb("position_embeddings", cfg.max_position_embeddings)?;
        let token_type = emb("token_type_embeddings", cfg.type_vocab_size)?;
        let emb_norm = layer_norm(&e.pp("LayerNorm"), h, cfg.layer_norm_eps)?;
        if cfg.num_attention_heads == 0 || !h.is_multiple_of(cfg.num_attention_heads) {
            candle_core::bail!(
                "hidden size {h} is not a multiple of {} heads",
                cfg.num_attention_heads
            );
        }
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let sa = l.pp("attention.self");
            let linear = |vb: &VarBuilder, inp, out| ops::load_linear(vb, inp, out, true);
            let (q, k, v) = (
                linear(&sa.pp("query"), h, h)?,
                linear(&sa.pp("key"), h, h)?,
                linear(&sa.pp("value"), h, h)?,
            );
            // the attention scale 1/sqrt(head_dim) is folded into the query projection
            let qkv = pk.proj(ops::fuse_qkv(&q, &k, &v, h / cfg.num_attention_heads)?)?;
            let inter = cfg.intermediate_size;
            layers.push(Layer {
                qkv,
                attn_out: pk.load(&l.pp("attention.output.dense"), h, h, true)?,
                attn_norm: layer_norm(&l.pp("attention.output.LayerNorm"), h, cfg.layer_norm_eps)?,
                inter: pk.load(&l.pp("intermediate.dense"), h, inter, true)?,
                out: pk.load(&l.pp("output.dense"), inter, h, true)?,
                out_norm: layer_norm(&l.pp("output.LayerNorm"), h, cfg.layer_norm_eps)?,
            });
        }
        Ok(Bert {
            word,
            position,
            token_type,
            emb_norm,
            layers,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
            act,
            padding_idx: cfg.roberta_padding_idx(),
            device: vb.device().clone(),
        })
    }

    /// Final hidden states of the packed batch: `(total tokens, hidden)`, the rows of sequence
    /// `i` following those of sequence `i - 1`.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Tensor> {
        self.forward_typed(seqs, None)
    }

    /// [`Bert::forward`] with each token's type (segment) id: `types[i]` for `seqs[i]` (a
    /// query-passage pair's 0s and 1s); `None`: all 0.
    pub fn forward_typed(&self, seqs: &[&[u32]], types: Option<&[&[u32]]>) -> Result<Tensor> {
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let mut ids = Vec::with_capacity(total);
        let mut pos = Vec::with_capacity(total);
        for s in seqs {
            ids.extend_from_slice(s);
            match self.padding_idx {
                None => pos.extend(0..s.len() as u32),
                Some(pad) => {
                    let mut n = pad;
                    pos.extend(s.iter().map(|&id| {
                        if id == pad {
                            pad
                        } else {
                            n += 1;
                            n
                        }
                    }));
                }
            }
        }
        let types = match types {
            Some(t) => {
                if t.len() != seqs.len() || t.iter().zip(seqs).any(|(t, s)| t.len() != s.len()) {
                    candle_core::bail!("token types do not match the sequences")
                }
                Tensor::from_vec(t.concat(), total, &self.device)?
            }
            None => Tensor::zeros(total, candle_core::DType::U32, &self.device)?,
        };
        let ids = Tensor::from_vec(ids, total, &self.device)?;
        let pos = Tensor::from_vec(pos, total, &self.device)?;
        let x = (self.word.forward(&ids)? + self.position.forward(&pos)?)?;
        let x = (x + self.token_type.forward(&types)?)?;
        let mut x = self.emb_norm.forward(&x)?;
        let segments = Segment::packed(seqs.iter().map(|s| s.len()));
        let attention = ops::Attention::new(&segments, self.heads, self.head_dim)
            .bf16(self.layers.first().is_some_and(|l| l.qkv.is_packed()))
            // read by the packed output projection, which rounds it on the tiles anyway
            .rounded_output(
                self.layers
                    .first()
                    .is_some_and(|l| l.attn_out.rounds_output()),
            );
        // the hidden rows rounded to bfloat16 where the next layer's products read them so
        let mut x16: Option<Tensor> = None;
        for layer in &self.layers {
            // (T, 3h); bfloat16 where the attention's tile products read it so
            let qkv = layer
                .qkv
                .forward_rounded(x16.as_ref().unwrap_or(&x), None)?;
            let ctx = attention.run(&qkv)?;
            let (a, a16) = layer.attn_out.forward_norm(&ctx, &x, &layer.attn_norm)?;
            (x, x16) = layer.out.forward_mlp_norm(
                &layer.inter,
                Some(self.act),
                a16.as_ref().unwrap_or(&a),
                &a,
                &layer.out_norm,
            )?;
        }
        Ok(x)
    }
}
