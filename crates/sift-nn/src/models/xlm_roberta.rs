//! Jina's XLM-RoBERTa "flash" text tower (`jinaai/xlm-roberta-flash-implementation`:
//! `XLMRobertaLoRA` over `XLMRobertaModel`), the text tower of Jina-CLIP v2 and of
//! jina-embeddings-v3, on its CPU path (`use_flash_attn` is ignored without CUDA): word and
//! token-type embeddings (no learned positions), a layer norm, post-norm blocks (`Wqkv` with
//! rotary positions on q and k: GPT-NeoX halves over the whole head, `1 / base^(2k / d)`;
//! softmax attention with padded keys at -10000; `out_proj`; `norm1`; `fc1`, GELU, `fc2`;
//! `norm2`).
//!
//! Task LoRA: `XLMRobertaLoRA` parametrises every linear and embedding weight
//! (`X.parametrizations.weight.original`, `.0.lora_A`, `.0.lora_B`, one slice per
//! `lora_adaptations` entry). With a task index `t` a linear layer's weight is
//! `W + B[t] A[t] * alpha / rank` and an embedding's `W + A[t] B[t] * alpha / rank`; without one
//! the original weights. The loader merges the chosen task's adapter into the weights once.
use std::collections::BTreeMap;

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use crate::layers::ops::{self, Act, Packing, Proj, load_layer_norm as layer_norm, parse_act};

/// `XLMRobertaFlashConfig` (the keys the tower reads), with the published class's defaults
/// (jina-clip-v2 builds it from `text_config.hf_model_config_kwargs` alone).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct XlmRobertaConfig {
    /// Vocabulary rows.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// Blocks.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// `gelu` (exact) or a tanh GELU.
    pub hidden_act: String,
    /// Token-type rows (row 0 is added to every token).
    pub type_vocab_size: usize,
    /// Every layer norm's eps.
    pub layer_norm_eps: f64,
    /// The padding id: the attention mask is `ids != pad_token_id`.
    pub pad_token_id: u32,
    /// Only `rotary`.
    pub position_embedding_type: String,
    /// Rotary base.
    pub rotary_emb_base: f64,
    /// Rotary dimensions (`hidden_size / num_attention_heads` when absent; only the full head).
    pub rotary_emb_dim: Option<f64>,
    /// Interleaved (GPT-J) rotary pairs (only false).
    pub rotary_emb_interleaved: bool,
    /// xPos scaling (only null).
    pub rotary_emb_scale_base: Option<f64>,
    /// LoRA task names, in adapter order.
    pub lora_adaptations: Option<Vec<String>>,
    /// Task instruction prefixes.
    pub task_instructions: Option<BTreeMap<String, String>>,
    /// LoRA rank.
    pub lora_rank: usize,
    /// LoRA alpha (scaling `alpha / rank`).
    pub lora_alpha: f64,
}

impl Default for XlmRobertaConfig {
    fn default() -> Self {
        XlmRobertaConfig {
            vocab_size: 250002,
            hidden_size: 1024,
            num_hidden_layers: 24,
            num_attention_heads: 16,
            intermediate_size: 4096,
            hidden_act: "gelu".into(),
            type_vocab_size: 1,
            layer_norm_eps: 1e-5,
            pad_token_id: 1,
            position_embedding_type: "rotary".into(),
            rotary_emb_base: 10000.0,
            rotary_emb_dim: None,
            rotary_emb_interleaved: false,
            rotary_emb_scale_base: None,
            lora_adaptations: None,
            task_instructions: None,
            lora_rank: 4,
            lora_alpha: 1.0,
        }
    }
}

impl XlmRobertaConfig {
    /// Refuses what the tower does not run.
    pub fn check(&self) -> std::result::Result<(), String> {
        let h = self.num_attention_heads;
        if h == 0 || !self.hidden_size.is_multiple_of(h) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {h}",
                self.hidden_size
            ));
        }
        let d = self.hidden_size / h;
        if self.position_embedding_type != "rotary" {
            return Err(format!(
                "position_embedding_type {:?} (only rotary)",
                self.position_embedding_type
            ));
        }
        if !d.is_multiple_of(2) {
            return Err(format!("an odd head dimension {d} with rotary positions"));
        }
        if self.rotary_emb_dim.is_some_and(|r| r != d as f64) {
            return Err("rotary_emb_dim other than the head dimension".into());
        }
        if self.rotary_emb_interleaved || self.rotary_emb_scale_base.is_some() {
            return Err("interleaved or xPos-scaled rotary positions".into());
        }
        if !matches!(
            self.hidden_act.as_str(),
            "gelu" | "gelu_new" | "gelu_fast" | "gelu_pytorch_tanh"
        ) {
            return Err(format!("hidden_act {:?}", self.hidden_act));
        }
        // XLMRobertaLoRA.__init__ raises on these
        let tasks = match &self.lora_adaptations {
            Some(a) if !a.is_empty() => a,
            _ => return Err("lora_adaptations must list at least one task".into()),
        };
        match &self.task_instructions {
            Some(t) if t.len() == tasks.len() && t.keys().all(|k| tasks.contains(k)) => {}
            _ => {
                return Err(
                    "task_instructions must have one entry per lora_adaptations task".into(),
                );
            }
        }
        if self.lora_rank == 0 {
            return Err("lora_rank 0".into());
        }
        Ok(())
    }

    /// The adapter index of a LoRA task (`XLMRobertaLoRA._adaptation_map`).
    pub fn lora_index(&self, task: &str) -> Option<usize> {
        self.lora_adaptations
            .as_ref()?
            .iter()
            .position(|t| t == task)
    }
}

struct Layer {
    qkv: Proj,
    out: Proj,
    norm1: LayerNorm,
    fc1: Proj,
    fc2: Proj,
    norm2: LayerNorm,
}

/// The XLM-RoBERTa flash tower with one task's adapter merged in.
pub struct XlmRoberta {
    word: Embedding,
    type0: Tensor,
    emb_ln: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    act: Act,
    inv_freq: Vec<f32>,
    pad: u32,
    device: Device,
}

/// A parametrised weight (`{name}.parametrizations.weight.original`) with task `task`'s LoRA
/// delta added: `B[t] A[t]` for a linear layer (`A (n, r, in)`, `B (n, out, r)`), `A[t] B[t]`
/// for an embedding (`A (n, rows, r)`, `B (n, r, dim)`), times `scaling`.
fn lora_weight(
    vb: &VarBuilder,
    shape: (usize, usize),
    embedding: bool,
    task: Option<usize>,
    n: usize,
    rank: usize,
    scaling: f64,
) -> Result<Tensor> {
    let p = vb.pp("parametrizations.weight");
    let w = p.get(shape, "original")?;
    let (a_shape, b_shape) = if embedding {
        ((n, shape.0, rank), (n, rank, shape.1))
    } else {
        ((n, rank, shape.1), (n, shape.0, rank))
    };
    let a = p.get(a_shape, "0.lora_A")?;
    let b = p.get(b_shape, "0.lora_B")?;
    let Some(t) = task else {
        return Ok(w);
    };
    let dtype = w.dtype();
    let (a, b) = (
        a.get(t)?.to_dtype(DType::F32)?,
        b.get(t)?.to_dtype(DType::F32)?,
    );
    let delta = if embedding {
        a.matmul(&b)?
    } else {
        b.matmul(&a)?
    };
    (w.to_dtype(DType::F32)? + (delta * scaling)?)?.to_dtype(dtype)
}

impl XlmRoberta {
    /// Loads the weights under `vb` (`embeddings.*`, `emb_ln`, `encoder.layers.{i}.*`; `vb` is
    /// `XLMRobertaLoRA.roberta`) with the adapter of LoRA task index `task` merged in (`None`:
    /// the original weights, as `HFTextEncoder` runs without a default LoRA task).
    /// bfloat16 on the CPU: see `Packing` in `layers::linear`.
    pub fn new(vb: VarBuilder, cfg: &XlmRobertaConfig, task: Option<usize>) -> Result<XlmRoberta> {
        cfg.check().map_err(candle_core::Error::Msg)?;
        let (vb, pk) = Packing::split(vb);
        let n = cfg.lora_adaptations.as_ref().map_or(0, Vec::len);
        if task.is_some_and(|t| t >= n) {
            candle_core::bail!("LoRA task index {task:?} of {n} adapters")
        }
        let (h, heads) = (cfg.hidden_size, cfg.num_attention_heads);
        let d = h / heads;
        let (rank, scaling) = (cfg.lora_rank, cfg.lora_alpha / cfg.lora_rank as f64);
        let lw = |vb: &VarBuilder, shape, emb| lora_weight(vb, shape, emb, task, n, rank, scaling);
        let linear = |vb: &VarBuilder, inp: usize, out: usize| -> Result<Linear> {
            Ok(Linear::new(
                lw(vb, (out, inp), false)?,
                Some(vb.get(out, "bias")?),
            ))
        };
        let e = vb.pp("embeddings");
        let word = Embedding::new(lw(&e.pp("word_embeddings"), (cfg.vocab_size, h), true)?, h);
        let types = cfg.type_vocab_size;
        let type0 = if types > 0 {
            lw(&e.pp("token_type_embeddings"), (types, h), true)?.get(0)?
        } else {
            Tensor::zeros(h, vb.dtype(), vb.device())?
        };
        let eps = cfg.layer_norm_eps;
        let scale = 1.0 / (d as f64).sqrt();
        let inner = cfg.intermediate_size;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layers.{i}"));
            let wqkv = linear(&l.pp("mixer.Wqkv"), h, 3 * h)?;
            // the attention scale (the published code scales k) goes into the query rows:
            // scores are bilinear and the rotation linear
            let qkv = pk.proj(ops::scale_query_rows(&wqkv, h, scale)?)?;
            layers.push(Layer {
                qkv,
                out: pk.proj(linear(&l.pp("mixer.out_proj"), h, h)?)?,
                norm1: layer_norm(&l.pp("norm1"), h, eps)?,
                fc1: pk.proj(linear(&l.pp("mlp.fc1"), h, inner)?)?,
                fc2: pk.proj(linear(&l.pp("mlp.fc2"), inner, h)?)?,
                norm2: layer_norm(&l.pp("norm2"), h, eps)?,
            });
        }
        // RotaryEmbedding._compute_inv_freq, in f32 as torch computes it
        let base = cfg.rotary_emb_base as f32;
        let inv_freq = (0..d / 2)
            .map(|k| 1.0 / base.powf((2 * k) as f32 / d as f32))
            .collect();
        Ok(XlmRoberta {
            word,
            type0,
            emb_ln: layer_norm(&vb.pp("emb_ln"), h, eps)?,
            layers,
            heads,
            head_dim: d,
            act: parse_act(&cfg.hidden_act).expect("checked"),
            inv_freq,
            pad: cfg.pad_token_id,
            device: vb.device().clone(),
        })
    }

    /// Hidden size.
    pub fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Rotary `(cos, sin)` tables `(len, head_dim / 2)` for positions `0..len`.
    fn rotary(&self, len: usize, dtype: DType) -> Result<(Tensor, Tensor)> {
        let half = self.head_dim / 2;
        let mut angles = Vec::with_capacity(len * half);
        for t in 0..len {
            angles.extend(self.inv_freq.iter().map(|f| t as f32 * f));
        }
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        Ok((
            Tensor::from_vec(cos, (len, half), &self.device)?.to_dtype(dtype)?,
            Tensor::from_vec(sin, (len, half), &self.device)?.to_dtype(dtype)?,
        ))
    }

    /// Mean-pooled final states `(sequences, hidden)` of unpadded sequences (`MeanPooler` over
    /// the mask `ids != pad_token_id`; keys holding the padding id are masked as the published
    /// encoder masks them).
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Tensor> {
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        let ids = Tensor::from_vec(ids, total, &self.device)?;
        let x = self.word.forward(&ids)?.broadcast_add(&self.type0)?;
        let mut x = self.emb_ln.forward(&x)?;
        let dtype = x.dtype();
        let longest = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
        // each token's rotary angles, by its position within its sequence
        let (cos, sin) = self.rotary(longest.max(1), dtype)?;
        let positions: Vec<u32> = seqs.iter().flat_map(|s| 0..s.len() as u32).collect();
        let positions = Tensor::from_vec(positions, total, &self.device)?;
        let (cos, sin) = (
            cos.index_select(&positions, 0)?,
            sin.index_select(&positions, 0)?,
        );
        let keys = ops::padding_key_bias(seqs, self.pad);
        let bias = ops::ScoreBias {
            alibi: None,
            keys: keys.as_deref(),
        };
        let segments = ops::Segment::packed(seqs.iter().map(|s| s.len()));
        let h = self.heads * self.head_dim;
        // attention stays f32 in bf16 (no `Attention::bf16`): rounding its products moves
        // the tiny Jina-CLIP v2 text tower's passages to cosine 0.991 of the published code,
        // below its 0.995 bound (f32 attention: 0.996)
        let attention = ops::Attention::new(&segments, self.heads, self.head_dim).biased(bias);
        for l in &self.layers {
            let qkv = ops::linear(&l.qkv, &x, None)?;
            // rotary positions on the packed queries and keys (rotate-half, as `rope`)
            let turn = |i: usize| -> Result<Tensor> {
                let part = qkv.narrow(1, i * h, h)?.contiguous()?.reshape((
                    1,
                    total,
                    self.heads,
                    self.head_dim,
                ))?;
                candle_nn::rotary_emb::rope_thd(&part, &cos, &sin)?.reshape((total, h))
            };
            let qkv = Tensor::cat(&[&turn(0)?, &turn(1)?, &qkv.narrow(1, 2 * h, h)?], 1)?;
            let ctx = attention.run(&qkv)?;
            let a = l.norm1.forward(&ops::linear(&l.out, &ctx, Some(&x))?)?;
            let m = l.fc1.forward_rounded(&a, Some(self.act))?;
            x = l.norm2.forward(&ops::linear(&l.fc2, &m, Some(&a))?)?;
        }
        // pooled in f32: a bfloat16 mean over hundreds of tokens loses digits (PyTorch's
        // reductions accumulate half types in f32 too)
        let x = x.to_dtype(DType::F32)?;
        let mut pooled = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            let rows = x.narrow(0, start, s.len())?;
            let keep: Vec<u32> = (0..s.len() as u32)
                .filter(|&i| s[i as usize] != self.pad)
                .collect();
            pooled.push(if keep.len() == s.len() {
                rows.mean(0)?
            } else {
                let idx = Tensor::from_vec(keep.clone(), keep.len(), &self.device)?;
                rows.index_select(&idx, 0)?.mean(0)?
            });
            start += s.len();
        }
        Tensor::stack(&pooled, 0)
    }
}
