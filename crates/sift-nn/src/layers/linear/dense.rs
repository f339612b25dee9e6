//! candle's linear layer ([`Linear`]) as the models run it: on the CPU with f32, one fused
//! op (bias and residual pre-filled, gemm accumulates, the activation in place); elsewhere
//! candle's ops. And the loaders: a layer's weights, fused Q/K/V projections, a query scale
//! folded into them.
use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Module, Result, Shape, Tensor};
use candle_nn::{Linear, VarBuilder};
use sift_simd::elementwise::act_slice;

use crate::layers::act::{Act, apply_act};
use crate::layers::kernels::fused_cpu;

/// candle's linear layer as [`linear_act`](super::linear_act) runs it.
///
/// On the CPU with f32 this is one custom op over the gemm kernel candle itself uses: the
/// output starts as the bias (plus the residual) and the matrix product accumulates into
/// it, then the activation runs in place, in parallel. That saves the zero fill, the copies
/// and the separate passes of `matmul` + `broadcast_add` + `add` + activation.
pub fn dense_act(
    l: &Linear,
    x: &Tensor,
    residual: Option<&Tensor>,
    act: Option<Act>,
) -> Result<Tensor> {
    let cpu_f32 = fused_cpu(x.device()) && x.dtype() == DType::F32 && x.rank() == 2;
    if cpu_f32 {
        let op = LinearOp {
            bias: l.bias().map(|b| b.to_vec1::<f32>()).transpose()?,
            act,
        };
        let x = x.contiguous()?;
        let w = l.weight().contiguous()?;
        return match residual {
            Some(r) => x.apply_op3_no_bwd(&w, &r.contiguous()?, &op),
            None => x.apply_op2_no_bwd(&w, &op),
        };
    }
    let mut y = l.forward(x)?;
    if let Some(a) = act {
        y = apply_act(a, &y)?;
    }
    match residual {
        Some(r) => y + r,
        None => Ok(y),
    }
}

/// The fused CPU linear layer of [`dense_act`].
struct LinearOp {
    bias: Option<Vec<f32>>,
    act: Option<Act>,
}

impl LinearOp {
    fn compute(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
        residual: Option<(&CpuStorage, &Layout)>,
    ) -> Result<(CpuStorage, Shape)> {
        use rayon::prelude::*;
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (x, w) else {
            candle_core::bail!("linear: f32 only")
        };
        let (Some((x0, x1)), Some((w0, w1))) = (xl.contiguous_offsets(), wl.contiguous_offsets())
        else {
            candle_core::bail!("linear: contiguous inputs only")
        };
        let (m, k) = xl.shape().dims2()?;
        let (n, k2) = wl.shape().dims2()?;
        if k != k2 {
            candle_core::bail!("linear: input of {k} features, weight of {k2}")
        }
        let (x, w) = (&x[x0..x1], &w[w0..w1]);
        let mut dst = vec![0f32; m * n];
        let rows = (16384 / n.max(1)).max(1);
        match residual {
            Some((r, rl)) => {
                let CpuStorage::F32(r) = r else {
                    candle_core::bail!("linear: f32 residual only")
                };
                let Some((r0, r1)) = rl.contiguous_offsets() else {
                    candle_core::bail!("linear: contiguous residual only")
                };
                let r = &r[r0..r1];
                if r.len() != m * n {
                    candle_core::bail!("linear: residual of {} values for {m}x{n}", r.len())
                }
                dst.par_chunks_mut(rows * n)
                    .zip(r.par_chunks(rows * n))
                    .for_each(|(d, r)| {
                        d.copy_from_slice(r);
                        if let Some(b) = &self.bias {
                            for row in d.chunks_mut(n) {
                                row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                            }
                        }
                    });
            }
            None => {
                if let Some(b) = &self.bias {
                    dst.par_chunks_mut(rows * n).for_each(|d| {
                        for row in d.chunks_mut(n) {
                            row.copy_from_slice(b);
                        }
                    });
                }
            }
        }
        let read_dst = residual.is_some() || self.bias.is_some();
        let threads = candle_core::utils::get_num_threads();
        let parallelism = if threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        // SAFETY: dst is m x n row-major, x is m x k row-major, w is n x k row-major (read as
        // the k x n matrix W^T through its strides); every pointer covers its full extent.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                read_dst,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
        if let Some(act) = self.act {
            dst.par_chunks_mut(8192).for_each(|d| act_slice(act, d));
        }
        Ok((CpuStorage::F32(dst), Shape::from((m, n))))
    }
}

impl CustomOp2 for LinearOp {
    fn name(&self) -> &'static str {
        "linear-fused"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.compute(s1, l1, s2, l2, None)
    }
}

impl CustomOp3 for LinearOp {
    fn name(&self) -> &'static str {
        "linear-fused-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.compute(s1, l1, s2, l2, Some((s3, l3)))
    }
}

/// A fused `[q; k; v]` projection (`3 * h` output rows) with `scale` folded into the query
/// rows and bias: attention scores are bilinear in q and k (and a rotary rotation is linear),
/// so this scales the scores without a pass over them.
pub fn scale_query_rows(qkv: &Linear, h: usize, scale: f64) -> Result<Linear> {
    let fold = |t: &Tensor| -> Result<Tensor> {
        Tensor::cat(
            &[&(t.narrow(0, 0, h)? * scale)?, &t.narrow(0, h, 2 * h)?],
            0,
        )
    };
    let bias = qkv.bias().map(fold).transpose()?;
    Ok(Linear::new(fold(qkv.weight())?, bias))
}

/// Loads `weight` `(out, inp)` and, when `bias`, `bias` `(out)`.
pub fn load_linear(vb: &VarBuilder, inp: usize, out: usize, bias: bool) -> Result<Linear> {
    let b = if bias {
        Some(vb.get(out, "bias")?)
    } else {
        None
    };
    Ok(Linear::new(vb.get((out, inp), "weight")?, b))
}

/// Fuses separate Q, K, V projections into one `(3 * hidden, hidden)` linear layer, with the
/// attention scale `1/sqrt(head_dim)` folded into the query part.
pub fn fuse_qkv(q: &Linear, k: &Linear, v: &Linear, head_dim: usize) -> Result<Linear> {
    let scale = 1.0 / (head_dim as f64).sqrt();
    let w = Tensor::cat(&[&(q.weight() * scale)?, k.weight(), v.weight()], 0)?;
    let b = match (q.bias(), k.bias(), v.bias()) {
        (Some(qb), Some(kb), Some(vb)) => Some(Tensor::cat(&[&(qb * scale)?, kb, vb], 0)?),
        (None, None, None) => None,
        _ => candle_core::bail!("some but not all of the Q/K/V projections have a bias"),
    };
    Ok(Linear::new(w, b))
}
