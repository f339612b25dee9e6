//! BERT encoder for inference on unpadded, packed batches.
//!
//! Same weights and arithmetic as Hugging Face `BertModel` (and candle-transformers' port),
//! arranged for throughput: the tokens of all sequences in a batch are packed into one
//! `(tokens, hidden)` matrix, so every linear layer, layer norm and activation runs once per
//! batch with no padding; attention alone runs per sequence, on exactly its own tokens, so no
//! attention mask is needed. Q, K and V are one fused matrix product. On the CPU the exact
//! (erf) GELU runs in parallel with an f32 erf accurate to 1.5e-7.
use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Module, Result, Shape, Tensor,
};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};

struct Layer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    inter: Linear,
    out: Linear,
    out_norm: LayerNorm,
}

/// A BERT encoder.
pub struct Bert {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    act: HiddenAct,
    device: Device,
}

fn linear(vb: &VarBuilder, inp: usize, out: usize) -> Result<Linear> {
    Ok(Linear::new(
        vb.get((out, inp), "weight")?,
        Some(vb.get(out, "bias")?),
    ))
}

fn layer_norm(vb: &VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        vb.get(size, "weight")?,
        vb.get(size, "bias")?,
        eps,
    ))
}

impl Bert {
    /// Loads the weights (with or without a `bert.` / `<model_type>.` prefix).
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Bert> {
        let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vb
        } else if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else if let Some(t) = cfg
            .model_type
            .as_deref()
            .filter(|t| vb.contains_tensor(&format!("{t}.embeddings.word_embeddings.weight")))
        {
            vb.pp(t)
        } else {
            candle_core::bail!("no embeddings.word_embeddings.weight in the weights")
        };
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
            let (q, k, v) = (
                linear(&sa.pp("query"), h, h)?,
                linear(&sa.pp("key"), h, h)?,
                linear(&sa.pp("value"), h, h)?,
            );
            // the attention scale 1/sqrt(head_dim) is folded into the query projection
            let scale = 1.0 / ((h / cfg.num_attention_heads) as f64).sqrt();
            let w = Tensor::cat(&[&(q.weight() * scale)?, k.weight(), v.weight()], 0)?;
            let b = Tensor::cat(
                &[
                    &(q.bias().expect("bias") * scale)?,
                    k.bias().expect("bias"),
                    v.bias().expect("bias"),
                ],
                0,
            )?;
            layers.push(Layer {
                qkv: Linear::new(w, Some(b)),
                attn_out: linear(&l.pp("attention.output.dense"), h, h)?,
                attn_norm: layer_norm(&l.pp("attention.output.LayerNorm"), h, cfg.layer_norm_eps)?,
                inter: linear(&l.pp("intermediate.dense"), h, cfg.intermediate_size)?,
                out: linear(&l.pp("output.dense"), cfg.intermediate_size, h)?,
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
            act: cfg.hidden_act,
            device: vb.device().clone(),
        })
    }

    fn activation(&self, xs: &Tensor) -> Result<Tensor> {
        match self.act {
            HiddenAct::Gelu if xs.device().is_cpu() && xs.dtype() == DType::F32 => {
                xs.contiguous()?.apply_op1_no_bwd(&GeluErf)
            }
            HiddenAct::Gelu => xs.gelu_erf(),
            HiddenAct::GeluApproximate => xs.gelu(),
            HiddenAct::Relu => xs.relu(),
        }
    }

    /// `x W^T + b (+ residual)`; on the CPU the additions run in parallel in one pass.
    fn linear(&self, l: &Linear, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        let cpu_f32 = x.device().is_cpu() && x.dtype() == DType::F32;
        match (cpu_f32, l.bias()) {
            (true, Some(bias)) => {
                let y = x.matmul(&l.weight().t()?)?;
                let y = y.apply_op2_no_bwd(bias, &AddRow)?;
                match residual {
                    Some(r) => y.apply_op2_no_bwd(&r.contiguous()?, &AddRow),
                    None => Ok(y),
                }
            }
            _ => {
                let y = l.forward(x)?;
                match residual {
                    Some(r) => y + r,
                    None => Ok(y),
                }
            }
        }
    }

    /// Final hidden states of the packed batch: `(total tokens, hidden)`, the rows of sequence
    /// `i` following those of sequence `i - 1`.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<Tensor> {
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let mut ids = Vec::with_capacity(total);
        let mut pos = Vec::with_capacity(total);
        for s in seqs {
            ids.extend_from_slice(s);
            pos.extend(0..s.len() as u32);
        }
        let ids = Tensor::from_vec(ids, total, &self.device)?;
        let pos = Tensor::from_vec(pos, total, &self.device)?;
        let types = ids.zeros_like()?;
        let x = (self.word.forward(&ids)? + self.position.forward(&pos)?)?;
        let x = (x + self.token_type.forward(&types)?)?;
        let mut x = self.emb_norm.forward(&x)?;
        let h = self.heads * self.head_dim;
        for layer in &self.layers {
            let qkv = self.linear(&layer.qkv, &x, None)?; // (T, 3h)
            // attention per sequence, sequences in parallel
            let mut starts = Vec::with_capacity(seqs.len());
            let mut start = 0;
            for s in seqs {
                starts.push((start, s.len()));
                start += s.len();
            }
            let attend = |&(start, len): &(usize, usize)| -> Result<Tensor> {
                let part = qkv.narrow(0, start, len)?;
                let heads = |i: usize| -> Result<Tensor> {
                    part.narrow(1, i * h, h)?
                        .reshape((len, self.heads, self.head_dim))?
                        .transpose(0, 1)?
                        .contiguous()
                };
                let (q, k, v) = (heads(0)?, heads(1)?, heads(2)?);
                let probs = candle_nn::ops::softmax_last_dim(&q.matmul(&k.t()?)?)?;
                probs.matmul(&v)?.transpose(0, 1)?.reshape((len, h))
            };
            let ctx: Vec<Tensor> = if self.device.is_cpu() {
                use rayon::prelude::*;
                starts.par_iter().map(attend).collect::<Result<_>>()?
            } else {
                starts.iter().map(attend).collect::<Result<_>>()?
            };
            let ctx = Tensor::cat(&ctx, 0)?;
            let a = layer
                .attn_norm
                .forward(&self.linear(&layer.attn_out, &ctx, Some(&x))?)?;
            let i = self.activation(&self.linear(&layer.inter, &a, None)?)?;
            x = layer
                .out_norm
                .forward(&self.linear(&layer.out, &i, Some(&a))?)?;
        }
        Ok(x)
    }
}

/// Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), in parallel on the CPU.
struct GeluErf;

/// erf with absolute error below 1.5e-7 (Abramowitz & Stegun 7.1.26).
#[inline]
fn erf(x: f32) -> f32 {
    let s = x.signum();
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_8) * t - 0.284_496_72) * t
            + 0.254_829_6)
            * t
            * (-a * a).exp();
    s * y
}

#[inline]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "gelu-erf-par"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("gelu-erf-par: f32 only")
        };
        let Some((a, b)) = layout.contiguous_offsets() else {
            candle_core::bail!("gelu-erf-par: contiguous input only")
        };
        let src = &data[a..b];
        let mut out = vec![0f32; src.len()];
        out.par_chunks_mut(8192)
            .zip(src.par_chunks(8192))
            .for_each(|(o, i)| o.iter_mut().zip(i).for_each(|(o, &x)| *o = gelu(x)));
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// `a + b` where `b` is a row broadcast over `a` (a bias) or has `a`'s shape (a residual),
/// f32 on the CPU, in parallel, written to a fresh copy of `a`.
struct AddRow;

impl CustomOp2 for AddRow {
    fn name(&self) -> &'static str {
        "add-row-par"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let (CpuStorage::F32(a), CpuStorage::F32(b)) = (s1, s2) else {
            candle_core::bail!("add-row-par: f32 only")
        };
        let (Some((a0, a1)), Some((b0, b1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("add-row-par: contiguous inputs only")
        };
        let (a, b) = (&a[a0..a1], &b[b0..b1]);
        let n = b.len();
        if n == 0 || a.len() % n != 0 {
            candle_core::bail!("add-row-par: {} values cannot take rows of {n}", a.len());
        }
        let mut out = a.to_vec();
        if n == a.len() {
            out.par_chunks_mut(8192)
                .zip(b.par_chunks(8192))
                .for_each(|(o, r)| o.iter_mut().zip(r).for_each(|(o, r)| *o += r));
        } else {
            let rows = (8192 / n).max(1);
            out.par_chunks_mut(rows * n).for_each(|chunk| {
                for row in chunk.chunks_mut(n) {
                    row.iter_mut().zip(b).for_each(|(o, r)| *o += r);
                }
            });
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_is_accurate() {
        // reference values of erf
        for (x, want) in [
            (0.0f32, 0.0f64),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (-1.5, -0.966_105_146_5),
            (3.0, 0.999_977_909_5),
        ] {
            assert!((super::erf(x) as f64 - want).abs() < 3e-7, "erf({x})");
        }
    }
}
