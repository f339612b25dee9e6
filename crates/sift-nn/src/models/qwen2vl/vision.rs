//! The Qwen2-VL and Qwen2.5-VL vision towers ([`VisionTower`]): the 3-D patch embedding,
//! 2-D rotary positions, the pre-norm blocks (Qwen2.5-VL's windowed: `Windows`) and the
//! patch merger.
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};

use super::config::{VisionConfig, pick};
use crate::layers::ops::{self, Act, Packing, Proj, Segment, parse_act};
use crate::layers::rotary::{inv_freq, rotate_qkv, tables};

/// A vision block's MLP: Qwen2-VL's `fc1`, activation, `fc2`; Qwen2.5-VL's gated
/// `down(act(gate(x)) * up(x))`.
enum VisionMlp {
    Plain { fc1: Proj, fc2: Proj },
    Gated { gate: Proj, up: Proj, down: Proj },
}

struct VisionBlock {
    /// Layer norms (Qwen2-VL) or RMSNorms (Qwen2.5-VL).
    norm1: LayerNorm,
    qkv: Proj,
    proj: Proj,
    norm2: LayerNorm,
    mlp: VisionMlp,
}

/// The Qwen2-VL or Qwen2.5-VL vision tower (`visual`).
pub struct VisionTower {
    patch: Linear,
    blocks: Vec<VisionBlock>,
    merger_norm: LayerNorm,
    merger_fc1: Proj,
    merger_fc2: Proj,
    cfg: VisionConfig,
    act: Act,
    inv_freq: Vec<f32>,
}

impl VisionTower {
    /// Loads `visual.*` (or `model.visual.*`) from the checkpoint root `vb` (bfloat16 on
    /// the CPU: see `Packing` in `layers::linear`).
    pub fn new(vb: &VarBuilder, cfg: &VisionConfig) -> Result<Self> {
        let vb = pick(vb, &["visual", "model.visual"], "patch_embed.proj.weight");
        let (vb, pk) = Packing::split(vb);
        let e = cfg.embed_dim;
        let heads = cfg.num_heads;
        let d = e / heads;
        let mlp_width = (e as f64 * cfg.mlp_ratio) as usize;
        let patch = Linear::new(
            vb.pp("patch_embed.proj")
                .get(
                    (
                        e,
                        cfg.in_channels,
                        cfg.temporal_patch_size,
                        cfg.patch_size,
                        cfg.patch_size,
                    ),
                    "weight",
                )?
                .reshape((e, cfg.patch_values()))?,
            None,
        );
        let scale = 1.0 / (d as f64).sqrt();
        // Qwen2-VL: layer norms; Qwen2.5-VL: RMSNorms (eps 1e-6 both)
        let norm = |vb: &VarBuilder| -> Result<LayerNorm> {
            match cfg.qwen25 {
                Some(_) => Ok(LayerNorm::rms_norm(vb.get(e, "weight")?, 1e-6)),
                None => ops::load_layer_norm(vb, e, 1e-6),
            }
        };
        let mut blocks = Vec::with_capacity(cfg.depth);
        for i in 0..cfg.depth {
            let b = vb.pp(format!("blocks.{i}"));
            let qkv = ops::load_linear(&b.pp("attn.qkv"), e, 3 * e, true)?;
            // fold the attention scale into the query rows (rotation is linear)
            let w = qkv.weight();
            let bias = qkv.bias().expect("loaded with bias");
            let w = Tensor::cat(&[(w.narrow(0, 0, e)? * scale)?, w.narrow(0, e, 2 * e)?], 0)?;
            let bias = Tensor::cat(
                &[(bias.narrow(0, 0, e)? * scale)?, bias.narrow(0, e, 2 * e)?],
                0,
            )?;
            let mlp = match &cfg.qwen25 {
                Some(q) => {
                    let (m, width) = (b.pp("mlp"), q.intermediate_size);
                    VisionMlp::Gated {
                        gate: pk.load(&m.pp("gate_proj"), e, width, true)?,
                        up: pk.load(&m.pp("up_proj"), e, width, true)?,
                        down: pk.load(&m.pp("down_proj"), width, e, true)?,
                    }
                }
                None => VisionMlp::Plain {
                    fc1: pk.load(&b.pp("mlp.fc1"), e, mlp_width, true)?,
                    fc2: pk.load(&b.pp("mlp.fc2"), mlp_width, e, true)?,
                },
            };
            blocks.push(VisionBlock {
                norm1: norm(&b.pp("norm1"))?,
                qkv: pk.proj(Linear::new(w, Some(bias)))?,
                proj: pk.load(&b.pp("attn.proj"), e, e, true)?,
                norm2: norm(&b.pp("norm2"))?,
                mlp,
            });
        }
        let merged = e * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let m = vb.pp("merger");
        Ok(VisionTower {
            patch,
            blocks,
            merger_norm: norm(&m.pp("ln_q"))?,
            merger_fc1: pk.load(&m.pp("mlp.0"), merged, merged, true)?,
            merger_fc2: pk.load(&m.pp("mlp.2"), merged, cfg.hidden_size, true)?,
            act: parse_act(&cfg.hidden_act).unwrap_or(Act::QuickGelu),
            // axial rope: a quarter of the head dimension per axis, base 10000
            inv_freq: inv_freq(10_000.0, d / 2),
            cfg: cfg.clone(),
        })
    }

    /// Rotary tables `(patches, head_dim / 2)` of images with patch grids `grids`
    /// (`[t, h, w]` each): row then column frequencies of each patch, patches in the
    /// processor's order (2x2 merge blocks, row-major inside and between blocks).
    fn rotary(
        &self,
        grids: &[[usize; 3]],
        device: &Device,
        dtype: DType,
    ) -> Result<(Tensor, Tensor)> {
        let m = self.cfg.spatial_merge_size;
        let q = self.inv_freq.len();
        let mut angles = Vec::new();
        let mut n = 0;
        for &[t, h, w] in grids {
            for _ in 0..t {
                for bh in 0..h / m {
                    for bw in 0..w / m {
                        for mh in 0..m {
                            for mw in 0..m {
                                let (row, col) = ((bh * m + mh) as f32, (bw * m + mw) as f32);
                                angles.extend(self.inv_freq.iter().map(|f| row * f));
                                angles.extend(self.inv_freq.iter().map(|f| col * f));
                                n += 1;
                            }
                        }
                    }
                }
            }
        }
        tables(angles, n, 2 * q, device, dtype)
    }

    /// Merged image tokens `(sum of t h w / merge^2, hidden)` of the flattened patches
    /// `(sum of t h w, patch_values)` of images with grids `grids`.
    pub fn forward(&self, patches: &Tensor, grids: &[[usize; 3]]) -> Result<Tensor> {
        let total: usize = grids.iter().map(|g| g[0] * g[1] * g[2]).sum();
        let m = self.cfg.spatial_merge_size;
        if patches.dims() != [total, self.cfg.patch_values()] {
            candle_core::bail!(
                "patches {:?} do not match the grids ({total} x {})",
                patches.dims(),
                self.cfg.patch_values()
            )
        }
        if grids.iter().any(|g| g[1] % m != 0 || g[2] % m != 0) {
            candle_core::bail!("patch grids {grids:?} are not multiples of the merge size {m}")
        }
        let heads = self.cfg.num_heads;
        let d = self.cfg.embed_dim / heads;
        let device = patches.device();
        let (mut cos, mut sin) = self.rotary(grids, device, patches.dtype())?;
        let mut patches = patches.clone();
        // full attention runs within each frame of each image
        let segments = Segment::packed(
            grids
                .iter()
                .flat_map(|&[t, h, w]| std::iter::repeat_n(h * w, t)),
        );
        let attention = ops::Attention::new(&segments, heads, d);
        // Qwen2.5-VL: the patches (and their rotary rows) reordered window by window, each
        // frame's windows still together, so both kinds of attention see contiguous rows
        let windows = self
            .cfg
            .qwen25
            .as_ref()
            .map(|q| Windows::new(grids, m, q.window_size / (m * self.cfg.patch_size)));
        let window_segments = windows
            .as_ref()
            .map(|w| Segment::packed(w.lens(m * m)))
            .unwrap_or_default();
        let windowed = ops::Attention::new(&window_segments, heads, d);
        if let Some(w) = &windows {
            let order = Tensor::from_vec(w.patch_order(m * m), total, device)?;
            patches = patches.index_select(&order, 0)?;
            cos = cos.index_select(&order, 0)?;
            sin = sin.index_select(&order, 0)?;
        }
        let full_blocks = self
            .cfg
            .qwen25
            .as_ref()
            .map(|q| q.full_attention_blocks.as_slice());
        let mut x = ops::linear(&self.patch, &patches, None)?;
        for (i, b) in self.blocks.iter().enumerate() {
            let attention = match full_blocks {
                Some(full) if !full.contains(&i) => &windowed,
                _ => &attention,
            };
            let qkv = ops::linear(&b.qkv, &b.norm1.forward(&x)?, None)?;
            let qkv = rotate_qkv(&qkv, heads, heads, d, &cos, &sin)?;
            let ctx = attention.run(&qkv)?;
            x = ops::linear(&b.proj, &ctx, Some(&x))?;
            let h = b.norm2.forward(&x)?;
            x = match &b.mlp {
                VisionMlp::Plain { fc1, fc2 } => {
                    let h = ops::linear_act(fc1, &h, None, Some(self.act))?;
                    ops::linear(fc2, &h, Some(&x))?
                }
                VisionMlp::Gated { gate, up, down } => {
                    let g = ops::linear_act(gate, &h, None, Some(self.act))?;
                    let u = ops::linear(up, &h, None)?;
                    ops::linear(down, &(g * u)?, Some(&x))?
                }
            };
        }
        let merged = self.cfg.embed_dim * m * m;
        let x = self
            .merger_norm
            .forward(&x)?
            .reshape((total / (m * m), merged))?;
        let x = ops::linear_act(&self.merger_fc1, &x, None, Some(Act::Gelu))?;
        let x = ops::linear(&self.merger_fc2, &x, None)?;
        match windows {
            // the merged tokens back in the processor's order
            Some(w) => {
                let back = Tensor::from_vec(w.inverse(), total / (m * m), device)?;
                x.index_select(&back, 0)
            }
            None => Ok(x),
        }
    }
}

/// Qwen2.5-VL's attention windows over merged tokens (transformers'
/// `get_vision_window_index`): each frame's grid of merged tokens (`h / merge` x
/// `w / merge`) cut into `side` x `side` windows from the top left (the last row and column
/// of windows partial), windows in row-major order, tokens row-major within each.
struct Windows {
    /// Merged-token indices (processor order) in window order.
    order: Vec<u32>,
    /// Merged tokens per non-empty window.
    sizes: Vec<usize>,
}

impl Windows {
    fn new(grids: &[[usize; 3]], merge: usize, side: usize) -> Windows {
        let side = side.max(1);
        let (mut order, mut sizes) = (Vec::new(), Vec::new());
        let mut base = 0;
        for &[t, h, w] in grids {
            let (lh, lw) = (h / merge, w / merge);
            for f in 0..t {
                for r0 in (0..lh).step_by(side) {
                    for c0 in (0..lw).step_by(side) {
                        let before = order.len();
                        for r in r0..(r0 + side).min(lh) {
                            for c in c0..(c0 + side).min(lw) {
                                order.push((base + (f * lh + r) * lw + c) as u32);
                            }
                        }
                        sizes.push(order.len() - before);
                    }
                }
            }
            base += t * lh * lw;
        }
        Windows { order, sizes }
    }

    /// Patch rows in window order: each merged token's `unit` (merge^2) patches, together.
    fn patch_order(&self, unit: usize) -> Vec<u32> {
        self.order
            .iter()
            .flat_map(|&k| (0..unit as u32).map(move |j| k * unit as u32 + j))
            .collect()
    }

    /// Patches per window.
    fn lens(&self, unit: usize) -> impl Iterator<Item = usize> + '_ {
        self.sizes.iter().map(move |s| s * unit)
    }

    /// For each merged token in processor order, its row in window order.
    fn inverse(&self) -> Vec<u32> {
        let mut back = vec![0u32; self.order.len()];
        for (i, &k) in self.order.iter().enumerate() {
            back[k as usize] = i as u32;
        }
        back
    }
}

#[cfg(test)]
mod tests {
    use super::Windows;

    #[test]
    fn windows_cover_every_merged_token_once_in_transformers_order() {
        // a 3 x 5 grid of merged tokens (6 x 10 patches), windows of 2: rows {0,1} and {2},
        // columns {0,1}, {2,3}, {4}; then a 2 x 2 grid that is exactly one window
        let w = Windows::new(&[[1, 6, 10], [1, 4, 4]], 2, 2);
        assert_eq!(
            w.order,
            vec![
                0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18
            ]
        );
        assert_eq!(w.sizes, vec![4, 4, 2, 2, 2, 1, 4]);
        assert_eq!(w.lens(4).sum::<usize>(), 19 * 4);
        let back = w.inverse();
        for (i, &k) in w.order.iter().enumerate() {
            assert_eq!(back[k as usize] as usize, i);
        }
        assert_eq!(&w.patch_order(4)[..8], &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(&w.patch_order(4)[8..12], &[20, 21, 22, 23]);
    }
}
