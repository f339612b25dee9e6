//! Nomic Embed v1.5's text tower, `NomicBertModel` (nomic-ai/nomic-embed-text-v1.5; its
//! published `modeling_hf_nomic_bert.py`): BERT's post-norm layers with rotary positions
//! (full head, GPT-NeoX halves, base 1000) instead of a position table, a fused `Wqkv`, a
//! SwiGLU MLP (`fc2(fc11(x) * silu(fc12(x)))`) and no biases in the linear layers; the
//! embedding is the mean of the states, then a weightless layer norm (eps 1e-5), an optional
//! Matryoshka cut, and L2 (the model card's pipeline, applied by `TextEmbedder`). Packed,
//! unpadded batches as the BERT encoder runs them. The config uses GPT-2 key names.
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use serde::Deserialize;

use crate::layers::ops::{self, Act, Packing, Proj, Segment, load_layer_norm as layer_norm};
use crate::layers::rotary::{inv_freq, rotate_qkv, tables};

/// A NomicBERT `config.json` (`model_type` nomic_bert, GPT-2 key names), with the published
/// configuration's values for omitted keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct NomicConfig {
    /// Vocabulary size (padded to a multiple of 64).
    pub vocab_size: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Token type vocabulary (only type 0 is used).
    pub type_vocab_size: usize,
    /// Layer-norm epsilon of the encoder.
    pub layer_norm_epsilon: f64,
    /// Longest input (rotary positions).
    pub n_positions: usize,
    /// `swiglu` (the published model) or `gelu`.
    pub activation_function: String,
    /// Pre-norm layers (the vision tower); the text tower is post-norm.
    pub prenorm: bool,
    /// Fraction of each head that rotates (1.0).
    pub rotary_emb_fraction: f64,
    /// Rotary base (1000).
    pub rotary_emb_base: f64,
    /// Interleaved rotary pairs (false: halves).
    pub rotary_emb_interleaved: bool,
    /// Dynamic-NTK rotary scaling (not supported; the published config has none).
    pub rotary_scaling_factor: Option<f64>,
    /// Biases of `Wqkv`, `fc11`/`fc12` and `fc2`.
    pub qkv_proj_bias: bool,
    /// Bias of the MLP's first layers.
    pub mlp_fc1_bias: bool,
    /// Bias of the MLP's last layer.
    pub mlp_fc2_bias: bool,
    /// Causal attention (the embedder: false).
    pub causal: bool,
}

impl Default for NomicConfig {
    fn default() -> Self {
        NomicConfig {
            vocab_size: 30528,
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            type_vocab_size: 2,
            layer_norm_epsilon: 1e-12,
            n_positions: 8192,
            activation_function: "swiglu".into(),
            prenorm: false,
            rotary_emb_fraction: 1.0,
            rotary_emb_base: 1000.0,
            rotary_emb_interleaved: false,
            rotary_scaling_factor: None,
            qkv_proj_bias: false,
            mlp_fc1_bias: false,
            mlp_fc2_bias: false,
            causal: false,
        }
    }
}

impl NomicConfig {
    /// Refuses what the text tower does not run.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.prenorm {
            return Err("a pre-norm NomicBERT (the text tower is post-norm)".into());
        }
        if self.rotary_emb_fraction != 1.0 {
            return Err(format!(
                "rotary_emb_fraction {} (only 1.0)",
                self.rotary_emb_fraction
            ));
        }
        if self.rotary_emb_interleaved {
            return Err("interleaved rotary embeddings".into());
        }
        if self.rotary_scaling_factor.is_some() {
            return Err("rotary_scaling_factor (dynamic NTK) is not supported".into());
        }
        if self.causal {
            return Err("causal attention in a text embedder".into());
        }
        if self.activation_function != "swiglu" {
            return Err(format!(
                "activation_function {:?} (only swiglu)",
                self.activation_function
            ));
        }
        if self.n_head == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return Err(format!(
                "n_embd {} is not a multiple of {} heads",
                self.n_embd, self.n_head
            ));
        }
        if !(self.n_embd / self.n_head).is_multiple_of(2) {
            return Err("an odd head dimension".into());
        }
        Ok(())
    }
}

struct Layer {
    qkv: Proj,
    out: Proj,
    norm1: LayerNorm,
    fc11: Proj,
    fc12: Proj,
    fc2: Proj,
    norm2: LayerNorm,
}

/// The NomicBERT text encoder.
pub struct NomicBert {
    word: Embedding,
    /// Token type 0's embedding, added to every token.
    type0: Tensor,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    inv_freq: Vec<f32>,
    device: Device,
}

impl NomicBert {
    /// Hidden size (the width of its token vectors).
    pub fn hidden_size(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Loads the weights (at the root, or under `bert.`; bfloat16 on the CPU: see
    /// `Packing` in `layers::linear`).
    pub fn new(vb: VarBuilder, cfg: &NomicConfig) -> Result<NomicBert> {
        cfg.check().map_err(candle_core::Error::Msg)?;
        let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vb
        } else {
            vb.pp("bert")
        };
        let (vb, pk) = Packing::split(vb);
        let h = cfg.n_embd;
        let (heads, d) = (cfg.n_head, cfg.n_embd / cfg.n_head);
        let e = vb.pp("embeddings");
        let (word, type0) = word_and_type0(&e, cfg.vocab_size, cfg.type_vocab_size, h)?;
        let emb_norm = layer_norm(&vb.pp("emb_ln"), h, cfg.layer_norm_epsilon)?;
        let scale = 1.0 / (d as f64).sqrt();
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let l = vb.pp(format!("encoder.layers.{i}"));
            let wqkv = ops::load_linear(&l.pp("attn.Wqkv"), h, 3 * h, cfg.qkv_proj_bias)?;
            // the attention scale goes into the query rows
            let qkv = pk.proj(ops::scale_query_rows(&wqkv, h, scale)?)?;
            // the MLP width is the weights' (the published code rounds n_inner up to 256)
            let inner = l.pp("mlp.fc11").get_unchecked("weight")?.dim(0)?;
            layers.push(Layer {
                qkv,
                out: pk.load(&l.pp("attn.out_proj"), h, h, cfg.qkv_proj_bias)?,
                norm1: layer_norm(&l.pp("norm1"), h, cfg.layer_norm_epsilon)?,
                fc11: pk.load(&l.pp("mlp.fc11"), h, inner, cfg.mlp_fc1_bias)?,
                fc12: pk.load(&l.pp("mlp.fc12"), h, inner, cfg.mlp_fc1_bias)?,
                fc2: pk.load(&l.pp("mlp.fc2"), inner, h, cfg.mlp_fc2_bias)?,
                norm2: layer_norm(&l.pp("norm2"), h, cfg.layer_norm_epsilon)?,
            });
        }
        Ok(NomicBert {
            word,
            type0,
            emb_norm,
            layers,
            heads,
            head_dim: d,
            inv_freq: inv_freq(cfg.rotary_emb_base, d),
            device: vb.device().clone(),
        })
    }

    /// Final hidden states of the packed batch `(total tokens, hidden)`.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Tensor> {
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        let ids = Tensor::from_vec(ids, total, &self.device)?;
        let x = self.word.forward(&ids)?.broadcast_add(&self.type0)?;
        let mut x = self.emb_norm.forward(&x)?;
        let half = self.inv_freq.len();
        let mut angles = Vec::with_capacity(total * half);
        for s in seqs {
            for p in 0..s.len() {
                angles.extend(self.inv_freq.iter().map(|f| p as f32 * f));
            }
        }
        let (cos, sin) = tables(angles, total, half, &self.device, x.dtype())?;
        let segments = Segment::packed(seqs.iter().map(|s| s.len()));
        let (heads, d) = (self.heads, self.head_dim);
        let attention = ops::Attention::new(&segments, heads, d)
            .bf16(self.layers.first().is_some_and(|l| l.qkv.is_packed()));
        for l in &self.layers {
            let qkv = ops::linear(&l.qkv, &x, None)?;
            let qkv = rotate_qkv(&qkv, heads, heads, d, &cos, &sin)?;
            let ctx = attention.run(&qkv)?;
            let a = l.norm1.forward(&ops::linear(&l.out, &ctx, Some(&x))?)?;
            let g = ops::linear_act(&l.fc12, &a, None, Some(Act::Silu))?;
            let u = ops::linear(&l.fc11, &a, None)?;
            x = l
                .norm2
                .forward(&ops::linear(&l.fc2, &(u * g)?, Some(&a))?)?;
        }
        Ok(x)
    }
}

/// The model card's head on mean-pooled vectors `(n, dim)`: a layer norm without weights
/// (eps 1e-5), then the first `dim` values (Matryoshka), as f32 (L2 comes after).
pub fn card_head(pooled: &Tensor, dim: Option<usize>) -> Result<Tensor> {
    let x = pooled.to_dtype(DType::F32)?;
    let mean = x.mean_keepdim(1)?;
    let centered = x.broadcast_sub(&mean)?;
    let var = centered.sqr()?.mean_keepdim(1)?;
    let normed = centered.broadcast_div(&(var + 1e-5)?.sqrt()?)?;
    match dim {
        Some(d) if d < normed.dim(1)? => normed.narrow(1, 0, d),
        _ => Ok(normed),
    }
}

/// The embeddings of a BERT with rotary positions (NomicBERT, JinaBERT): the word table
/// and token type 0's row (the only type these models are fed), under `e`.
pub(crate) fn word_and_type0(
    e: &VarBuilder,
    vocab: usize,
    types: usize,
    h: usize,
) -> Result<(Embedding, Tensor)> {
    let word = Embedding::new(e.pp("word_embeddings").get((vocab, h), "weight")?, h);
    let type0 = e
        .pp("token_type_embeddings")
        .get((types.max(1), h), "weight")?
        .get(0)?;
    Ok((word, type0))
}
