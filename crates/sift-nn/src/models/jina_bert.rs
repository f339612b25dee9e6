//! JinaBERT, the text tower of Jina-CLIP v1 (`jinaai/jina-clip-v1`'s `text_config` names
//! `jinaai/jina-bert-flash-implementation`; its weights sit under `text_model.transformer.`):
//! BERT's post-norm layers without a position table, symmetric ALiBi attention biases
//! (`-slope_h * |i - j|`), a fused `Wqkv` with biases, and a GEGLU MLP
//! (`wo(gelu(x W_g^T) * (x W_u^T))`, the gate being the first half of `gated_layers`).
//! Sequences run packed and unpadded, the linear layers and attention over all tokens at once
//! (`layers::ops::Attention::biased` with the ALiBi slopes).
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use crate::layers::ops::{self, Act, Packing, Proj, load_layer_norm as layer_norm, parse_act};
use crate::models::nomic::word_and_type0;

/// JinaBERT's configuration: the text tower's `hf_model_config_kwargs` over the values of
/// `jinaai/jina-bert-flash-implementation`'s `config.json` (the defaults here), as the
/// published `HFTextEncoder` applies them (`config.update(model_config_kwargs)`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct JinaBertConfig {
    /// Vocabulary size (the real 30528).
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// MLP width (each half of `gated_layers`).
    pub intermediate_size: usize,
    /// Activation of the GEGLU gate (`gelu`: exact).
    pub hidden_act: String,
    /// Layer-norm epsilon.
    pub layer_norm_eps: f64,
    /// Token type vocabulary (only type 0 is used).
    pub type_vocab_size: usize,
    /// The padding id: keys with it are masked, and the mean skips it.
    pub pad_token_id: u32,
    /// Position encoding (`alibi` only).
    pub position_embedding_type: String,
    /// MLP kind (`glu` only).
    pub mlp_type: String,
    /// Whether flash attention would be used (the same arithmetic; ignored).
    pub use_flash_attn: bool,
}

impl Default for JinaBertConfig {
    fn default() -> Self {
        JinaBertConfig {
            vocab_size: 30528,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-12,
            type_vocab_size: 2,
            pad_token_id: 0,
            position_embedding_type: "alibi".into(),
            mlp_type: "glu".into(),
            use_flash_attn: true,
        }
    }
}

impl JinaBertConfig {
    /// Refuses what the tower does not run.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.position_embedding_type != "alibi" {
            return Err(format!(
                "position_embedding_type {:?} (only alibi)",
                self.position_embedding_type
            ));
        }
        if self.mlp_type != "glu" {
            return Err(format!("mlp_type {:?} (only glu)", self.mlp_type));
        }
        if parse_act(&self.hidden_act).is_none() {
            return Err(format!("hidden_act {:?}", self.hidden_act));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not a multiple of {} heads",
                self.hidden_size, self.num_attention_heads
            ));
        }
        Ok(())
    }
}

/// ALiBi's head slopes (fairseq / flash-attn): for a power of two `n`, `s, s^2, ..., s^n` with
/// `s = 2^(-8/n)`; otherwise those of the largest power of two below, then every other slope
/// of twice that, computed in f64 as Python does.
pub fn alibi_slopes(heads: usize) -> Vec<f64> {
    fn power_of_2(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0))));
        (0..n).map(|i| start * start.powi(i as i32)).collect()
    }
    if heads.is_power_of_two() {
        return power_of_2(heads);
    }
    let closest = 1usize << (usize::BITS - 1 - heads.leading_zeros());
    let mut s = power_of_2(closest);
    s.extend(
        alibi_slopes(2 * closest)
            .into_iter()
            .step_by(2)
            .take(heads - closest),
    );
    s
}

struct Layer {
    qkv: Proj,
    out: Proj,
    norm1: LayerNorm,
    gate: Proj,
    up: Proj,
    wo: Proj,
    norm2: LayerNorm,
}

/// The JinaBERT encoder.
pub struct JinaBert {
    word: Embedding,
    /// Token type 0's embedding, added to every token.
    type0: Tensor,
    emb_ln: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    act: Act,
    slopes: Vec<f32>,
    pad: u32,
    device: Device,
}

impl JinaBert {
    /// Loads the weights under `vb` (`embeddings.*`, `emb_ln.*`, `encoder.layers.{i}.*`).
    /// (bfloat16 on the CPU: see `Packing` in `layers::linear`).
    pub fn new(vb: VarBuilder, cfg: &JinaBertConfig) -> Result<JinaBert> {
        cfg.check().map_err(candle_core::Error::Msg)?;
        let (vb, pk) = Packing::split(vb);
        let h = cfg.hidden_size;
        let (heads, d) = (cfg.num_attention_heads, h / cfg.num_attention_heads);
        let e = vb.pp("embeddings");
        let (word, type0) = word_and_type0(&e, cfg.vocab_size, cfg.type_vocab_size, h)?;
        let eps = cfg.layer_norm_eps;
        let scale = 1.0 / (d as f64).sqrt();
        let inner = cfg.intermediate_size;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layers.{i}"));
            let wqkv = ops::load_linear(&l.pp("mixer.Wqkv"), h, 3 * h, true)?;
            // the attention scale goes into the query rows
            let qkv = pk.proj(ops::scale_query_rows(&wqkv, h, scale)?)?;
            // gated_layers: rows 0..I are the gate (activated), I..2I the linear half
            let gated = l.pp("mlp.gated_layers").get((2 * inner, h), "weight")?;
            layers.push(Layer {
                qkv,
                out: pk.load(&l.pp("mixer.out_proj"), h, h, true)?,
                norm1: layer_norm(&l.pp("norm1"), h, eps)?,
                gate: pk.proj(Linear::new(gated.narrow(0, 0, inner)?.contiguous()?, None))?,
                up: pk.proj(Linear::new(
                    gated.narrow(0, inner, inner)?.contiguous()?,
                    None,
                ))?,
                wo: pk.load(&l.pp("mlp.wo"), inner, h, true)?,
                norm2: layer_norm(&l.pp("norm2"), h, eps)?,
            });
        }
        Ok(JinaBert {
            word,
            type0,
            emb_ln: layer_norm(&vb.pp("emb_ln"), h, eps)?,
            layers,
            heads,
            head_dim: d,
            act: parse_act(&cfg.hidden_act).expect("checked"),
            slopes: alibi_slopes(heads).into_iter().map(|s| s as f32).collect(),
            pad: cfg.pad_token_id,
            device: vb.device().clone(),
        })
    }

    /// Hidden size.
    pub fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Mean-pooled final states `(sequences, hidden)` of unpadded sequences (the published
    /// `MeanPooler` over the mask `ids != pad_token_id`), or the first token's with `cls`.
    pub fn forward(&self, seqs: &[&[u32]], cls: bool) -> Result<Tensor> {
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        let ids = Tensor::from_vec(ids, total, &self.device)?;
        let x = self.word.forward(&ids)?.broadcast_add(&self.type0)?;
        let mut x = self.emb_ln.forward(&x)?;
        let keys = ops::padding_key_bias(seqs, self.pad);
        let bias = ops::ScoreBias {
            alibi: Some(&self.slopes),
            keys: keys.as_deref(),
        };
        let segments = ops::Segment::packed(seqs.iter().map(|s| s.len()));
        let attention = ops::Attention::new(&segments, self.heads, self.head_dim)
            .biased(bias)
            .bf16(self.layers.first().is_some_and(|l| l.qkv.is_packed()));
        for l in &self.layers {
            let qkv = ops::linear(&l.qkv, &x, None)?;
            let ctx = attention.run(&qkv)?;
            let a = l.norm1.forward(&ops::linear(&l.out, &ctx, Some(&x))?)?;
            let g = ops::linear_act(&l.gate, &a, None, Some(self.act))?;
            let u = ops::linear(&l.up, &a, None)?;
            x = l.norm2.forward(&ops::linear(&l.wo, &(g * u)?, Some(&a))?)?;
        }
        // pooled in f32: a bfloat16 mean over hundreds of tokens loses digits (PyTorch's
        // reductions accumulate half types in f32 too)
        let x = x.to_dtype(DType::F32)?;
        let mut pooled = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            let rows = x.narrow(0, start, s.len())?;
            pooled.push(if cls {
                rows.get(0)?
            } else {
                let keep: Vec<u32> = (0..s.len() as u32)
                    .filter(|&i| s[i as usize] != self.pad)
                    .collect();
                if keep.len() == s.len() {
                    rows.mean(0)?
                } else {
                    let idx = Tensor::from_vec(keep.clone(), keep.len(), &self.device)?;
                    rows.index_select(&idx, 0)?.mean(0)?
                }
            });
            start += s.len();
        }
        Tensor::stack(&pooled, 0)
    }
}
