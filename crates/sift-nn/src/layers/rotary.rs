//! Rotary positions: inverse frequencies, the cos/sin tables of a sequence's angles, and their
//! rotation of the queries and keys of a packed QKV projection (grouped-query heads repeated
//! for attention).
use candle_core::{DType, Device, Result, Tensor};

/// Inverse rotary frequencies `1 / base^(2i / dim)`, `i < dim / 2`, in f32 as torch computes
/// them.
pub fn inv_freq(base: f64, dim: usize) -> Vec<f32> {
    (0..dim / 2)
        .map(|i| 1.0 / (base as f32).powf((2 * i) as f32 / dim as f32))
        .collect()
}

/// Applies rotary tables to the query and key parts of a packed `(tokens, (hq + 2 hk) * d)`
/// projection and returns `(tokens, 3 hq d)` for [`Attention`](super::attention::Attention):
/// queries and keys rotated (`x cos + rotate_half(x) sin`, `cos`/`sin` `(tokens, d / 2)`),
/// keys and values repeated to every query head of their group.
pub fn rotate_qkv(
    qkv: &Tensor,
    hq: usize,
    hk: usize,
    d: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<Tensor> {
    let n = qkv.dim(0)?;
    let part = |start: usize, heads: usize| -> Result<Tensor> {
        qkv.narrow(1, start * d, heads * d)?
            .contiguous()?
            .reshape((1, n, heads, d))
    };
    let q = candle_nn::rotary_emb::rope_thd(&part(0, hq)?, cos, sin)?;
    let k = candle_nn::rotary_emb::rope_thd(&part(hq, hk)?, cos, sin)?;
    let v = part(hq + hk, hk)?;
    let repeat = |x: Tensor| -> Result<Tensor> {
        if hq == hk {
            return x.reshape((n, hq * d));
        }
        x.reshape((n, hk, 1, d))?
            .broadcast_as((n, hk, hq / hk, d))?
            .contiguous()?
            .reshape((n, hq * d))
    };
    Tensor::cat(&[q.reshape((n, hq * d))?, repeat(k)?, repeat(v)?], 1)
}

/// The cos and sin tables of `angles` (`n` rows of `half` angles), in `dtype` on `device`.
pub fn tables(
    angles: Vec<f32>,
    n: usize,
    half: usize,
    device: &Device,
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    Ok((
        Tensor::from_vec(cos, (n, half), device)?.to_dtype(dtype)?,
        Tensor::from_vec(sin, (n, half), device)?.to_dtype(dtype)?,
    ))
}
