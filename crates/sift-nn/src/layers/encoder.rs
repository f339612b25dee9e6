//! The pre-norm transformer encoder shared by CLIP and SigLIP (both towers), with Hugging
//! Face's weight names: `layers.{i}.self_attn.{q,k,v,out}_proj`, `layer_norm1`, `mlp.fc1`,
//! `mlp.fc2`, `layer_norm2`.
//!
//! Like the BERT encoder it runs on packed batches: all tokens in one `(tokens, hidden)`
//! matrix, attention per sequence (see [`crate::layers::ops::Attention`]).
use candle_core::{Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};

use crate::layers::ops::{self, Act, Packing, Proj, Segment};

/// Sizes of an encoder (one tower's `text_config` / `vision_config`).
#[derive(Debug, Clone, Copy)]
pub struct EncoderSizes {
    /// Hidden size.
    pub hidden: usize,
    /// MLP inner size.
    pub intermediate: usize,
    /// Layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Layer-norm epsilon.
    pub eps: f64,
    /// MLP activation.
    pub act: Act,
}

/// The [`EncoderSizes`] of a Hugging Face tower config (CLIP's and SigLIP's text and vision
/// configs), whose fields are named alike: `hidden_size`, `intermediate_size`,
/// `num_hidden_layers`, `num_attention_heads`, `layer_norm_eps`, `hidden_act` (by name; an
/// unknown one is an error).
macro_rules! hf_sizes {
    ($c:expr) => {
        $crate::layers::encoder::EncoderSizes {
            hidden: $c.hidden_size,
            intermediate: $c.intermediate_size,
            layers: $c.num_hidden_layers,
            heads: $c.num_attention_heads,
            eps: $c.layer_norm_eps,
            act: $crate::layers::act::parse_act(&$c.hidden_act).ok_or_else(|| {
                candle_core::Error::Msg(format!("hidden_act {:?}", $c.hidden_act))
            })?,
        }
    };
}
pub(crate) use hf_sizes;

impl EncoderSizes {
    /// Checks that the hidden size splits into the heads.
    pub fn head_dim(&self) -> Result<usize> {
        if self.heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            candle_core::bail!(
                "hidden size {} is not a multiple of {} attention heads",
                self.hidden,
                self.heads
            )
        }
        Ok(self.hidden / self.heads)
    }
}

struct Layer {
    norm1: LayerNorm,
    qkv: Proj,
    out: Proj,
    norm2: LayerNorm,
    fc1: Proj,
    fc2: Proj,
}

/// Pre-norm encoder: `x += attn(ln1(x)); x += mlp(ln2(x))` per layer.
pub struct Encoder {
    layers: Vec<Layer>,
    sizes: EncoderSizes,
    head_dim: usize,
}

impl Encoder {
    /// Loads `layers.*` under `vb` (usually `<tower>.encoder`), the linear layers as `pk`
    /// says.
    pub fn load(vb: VarBuilder, sizes: EncoderSizes, pk: Packing) -> Result<Encoder> {
        let head_dim = sizes.head_dim()?;
        let h = sizes.hidden;
        let mut layers = Vec::with_capacity(sizes.layers);
        for i in 0..sizes.layers {
            let l = vb.pp(format!("layers.{i}"));
            let a = l.pp("self_attn");
            let q = ops::load_linear(&a.pp("q_proj"), h, h, true)?;
            let k = ops::load_linear(&a.pp("k_proj"), h, h, true)?;
            let v = ops::load_linear(&a.pp("v_proj"), h, h, true)?;
            layers.push(Layer {
                norm1: ops::load_layer_norm(&l.pp("layer_norm1"), h, sizes.eps)?,
                qkv: pk.proj(ops::fuse_qkv(&q, &k, &v, head_dim)?)?,
                out: pk.load(&a.pp("out_proj"), h, h, true)?,
                norm2: ops::load_layer_norm(&l.pp("layer_norm2"), h, sizes.eps)?,
                fc1: pk.load(&l.pp("mlp.fc1"), h, sizes.intermediate, true)?,
                fc2: pk.load(&l.pp("mlp.fc2"), sizes.intermediate, h, true)?,
            });
        }
        Ok(Encoder {
            layers,
            sizes,
            head_dim,
        })
    }

    /// Runs every layer over the packed `(tokens, hidden)` matrix `x`.
    pub fn forward(&self, mut x: Tensor, segments: &[Segment], causal: bool) -> Result<Tensor> {
        let attention = ops::Attention::new(segments, self.sizes.heads, self.head_dim)
            .causal(causal)
            .bf16(self.layers.first().is_some_and(|l| l.qkv.is_packed()));
        for l in &self.layers {
            // bfloat16 where the tile products and the next layer read it so
            let qkv = l.qkv.forward_rounded(&l.norm1.forward(&x)?, None)?;
            let ctx = attention.run(&qkv)?;
            x = ops::linear(&l.out, &ctx, Some(&x))?;
            let m = l
                .fc1
                .forward_rounded(&l.norm2.forward(&x)?, Some(self.sizes.act))?;
            x = ops::linear(&l.fc2, &m, Some(&x))?;
        }
        Ok(x)
    }
}

/// The part of a CLIP / SigLIP text tower before its pooling: embeddings, the encoder and
/// the final layer norm (`<text_model>.embeddings`, `.encoder`, `.final_layer_norm`).
pub struct TextStack {
    /// Token and position embeddings.
    pub embeddings: TextEmbeddings,
    /// The transformer.
    pub encoder: Encoder,
    /// `final_layer_norm`.
    pub final_norm: LayerNorm,
}

impl TextStack {
    /// Loads the stack under `vb` (the tower, e.g. `text_model`).
    pub fn load(
        vb: &VarBuilder,
        (vocab, max_len): (usize, usize),
        sizes: EncoderSizes,
        pk: Packing,
    ) -> Result<Self> {
        Ok(TextStack {
            embeddings: TextEmbeddings::load(&vb.pp("embeddings"), vocab, max_len, sizes.hidden)?,
            encoder: Encoder::load(vb.pp("encoder"), sizes, pk)?,
            final_norm: ops::load_layer_norm(&vb.pp("final_layer_norm"), sizes.hidden, sizes.eps)?,
        })
    }
}

/// The square image and patch sides of a vision config, and the number of patches: an
/// error when the patch does not fit the image.
pub fn patch_grid(image: usize, patch: usize) -> Result<(usize, usize, usize)> {
    if patch == 0 || patch > image {
        candle_core::bail!("patch_size {patch} does not fit image_size {image}")
    }
    Ok((image, patch, (image / patch).pow(2)))
}

/// Token + learned position embeddings of a text tower (`embeddings.token_embedding`,
/// `embeddings.position_embedding`, as CLIP and SigLIP name them).
pub struct TextEmbeddings {
    token: Embedding,
    position: Embedding,
    max_len: usize,
}

impl TextEmbeddings {
    /// Loads `token_embedding` and `position_embedding` under `vb` (`<tower>.embeddings`).
    pub fn load(vb: &VarBuilder, vocab: usize, max_len: usize, hidden: usize) -> Result<Self> {
        let table = |name: &str, rows: usize| -> Result<Embedding> {
            Ok(Embedding::new(
                vb.pp(name).get((rows, hidden), "weight")?,
                hidden,
            ))
        };
        Ok(TextEmbeddings {
            token: table("token_embedding", vocab)?,
            position: table("position_embedding", max_len)?,
            max_len,
        })
    }

    /// The device the tables live on.
    pub fn device(&self) -> &Device {
        self.token.embeddings().device()
    }

    /// The packed `(tokens, hidden)` embeddings of `seqs` (positions from 0 in each) and
    /// their segments. Every sequence must be non-empty and at most `max_len` long.
    pub fn forward(&self, seqs: &[&[u32]]) -> Result<(Tensor, Vec<Segment>)> {
        let mut ids = Vec::new();
        let mut pos = Vec::new();
        for s in seqs {
            if s.is_empty() || s.len() > self.max_len {
                candle_core::bail!("text of {} tokens (1..={} allowed)", s.len(), self.max_len)
            }
            ids.extend_from_slice(s);
            pos.extend(0..s.len() as u32);
        }
        let n = ids.len();
        let ids = Tensor::from_vec(ids, n, self.device())?;
        let pos = Tensor::from_vec(pos, n, self.device())?;
        let x = (self.token.forward(&ids)? + self.position.forward(&pos)?)?;
        Ok((x, Segment::packed(seqs.iter().map(|s| s.len()))))
    }
}

/// A ViT's input rows with a class token (EVA02, Nomic's vision tower): each image's patches
/// through the patch embedding `proj` (the stride-`patch` convolution as a linear layer),
/// then as [`vit_rows`] with the class token `cls` `(1, hidden)`.
pub fn vit_tokens(
    pixels: &Tensor,
    patch: usize,
    proj: &candle_nn::Linear,
    cls: &Tensor,
    pos: &Tensor,
) -> Result<(Tensor, Vec<Segment>)> {
    let n = pixels.dim(0)?;
    let x = super::ops::linear(proj, &patchify(pixels, patch)?, None)?;
    let (rows, h) = x.dims2()?;
    vit_rows(&x.reshape((n, rows / n.max(1), h))?, Some(cls), pos)
}

/// The encoder's input from patch tokens `(images, patches, hidden)`: the class token `cls`
/// `(1, hidden)` in front where the model has one, the learned positions `pos`
/// `(tokens, hidden)` added; `(images * tokens, hidden)`, and each image's tokens as a segment.
pub fn vit_rows(
    patches: &Tensor,
    cls: Option<&Tensor>,
    pos: &Tensor,
) -> Result<(Tensor, Vec<Segment>)> {
    let (n, cells, h) = patches.dims3()?;
    let x = match cls {
        Some(cls) => {
            let cls = cls.reshape((1, 1, h))?.broadcast_as((n, 1, h))?;
            Tensor::cat(&[&cls.to_dtype(patches.dtype())?, patches], 1)?
        }
        None => patches.clone(),
    };
    let x = x.broadcast_add(&pos.unsqueeze(0)?)?;
    let t = cells + usize::from(cls.is_some());
    Ok((
        x.reshape((n * t, h))?,
        Segment::packed(std::iter::repeat_n(t, n)),
    ))
}

/// Patch embedding as a matrix product: `(batch, channels, height, width)` pixels cut into
/// `patch x patch` squares, each flattened in (channel, row, column) order like a convolution
/// kernel, times the kernel matrix. Returns `(batch * patches, hidden)`, patches row-major.
/// As a stride-`patch` convolution without padding does, rows and columns beyond the last
/// whole patch are dropped (so400m: 384 = 27 x 14 + 6).
pub fn patchify(pixels: &Tensor, patch: usize) -> Result<Tensor> {
    let (b, c, hh, ww) = pixels.dims4()?;
    let (gh, gw) = (hh / patch, ww / patch);
    if gh == 0 || gw == 0 {
        candle_core::bail!("image {hh}x{ww} is smaller than one {patch}x{patch} patch")
    }
    let pixels = if gh * patch != hh || gw * patch != ww {
        pixels.narrow(2, 0, gh * patch)?.narrow(3, 0, gw * patch)?
    } else {
        pixels.clone()
    };
    pixels
        .contiguous()?
        .reshape((b, c, gh, patch, gw, patch))?
        .permute((0, 2, 4, 1, 3, 5))?
        .contiguous()?
        .reshape((b * gh * gw, c * patch * patch))
}

/// Rotates the queries and keys of a packed `(images * tokens, 3 * heads * head_dim)` QKV
/// block by per-token 2-D rotary angles `cos` / `sin` `(tokens, head_dim / 2)` (interleaved
/// pairs, candle's `rope_i` kernel with each token its own batch row); values pass through.
/// The EVA02-style towers (Nomic Embed Vision, Jina-CLIP) give the CLS token zero angles.
pub fn rotate_qk(
    qkv: &Tensor,
    images: usize,
    heads: usize,
    head_dim: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<Tensor> {
    let (h, d) = (heads * head_dim, head_dim);
    let t = cos.dim(0)?;
    let rows = images * t;
    let table = |x: &Tensor| -> Result<Tensor> {
        x.unsqueeze(0)?
            .broadcast_as((images, t, d / 2))?
            .contiguous()?
            .reshape((rows, 1, d / 2))
    };
    let (cos, sin) = (table(cos)?, table(sin)?);
    let turn = |i: usize| -> Result<Tensor> {
        let x = qkv
            .narrow(1, i * h, h)?
            .contiguous()?
            .reshape((rows, heads, 1, d))?;
        candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?.reshape((rows, h))
    };
    Tensor::cat(&[&turn(0)?, &turn(1)?, &qkv.narrow(1, 2 * h, h)?], 1)
}

/// What a [`VisionEmbeddings`] holds besides its patches and positions.
#[derive(Debug, Clone, Copy)]
pub struct VisionStem {
    /// A class token in front of the patches (`class_embedding`: CLIP).
    pub class_token: bool,
    /// A bias on the patch convolution (SigLIP).
    pub patch_bias: bool,
}

/// A ViT's input embeddings as CLIP and SigLIP name them (`patch_embedding`, CLIP's
/// `class_embedding`, `position_embedding`): square images of one size cut into square
/// patches, each through the stride-`patch` convolution as a linear layer, then as
/// [`vit_rows`].
pub struct VisionEmbeddings {
    linear: Linear,
    class: Option<Tensor>,
    position: Tensor,
    patch: usize,
    image: usize,
}

impl VisionEmbeddings {
    /// Loads them from `embeddings` for `image`-pixel square images of `channels` channels
    /// and `patch`-pixel patches (an error when the patch does not fit).
    pub fn load(
        embeddings: &VarBuilder,
        hidden: usize,
        channels: usize,
        (image, patch): (usize, usize),
        stem: VisionStem,
    ) -> Result<VisionEmbeddings> {
        let (image, patch, patches) = patch_grid(image, patch)?;
        let e = embeddings;
        let linear = patch_linear(
            &e.pp("patch_embedding"),
            hidden,
            channels,
            patch,
            stem.patch_bias,
        )?;
        let class = match stem.class_token {
            true => Some(e.get(hidden, "class_embedding")?.reshape((1, hidden))?),
            false => None,
        };
        let tokens = patches + usize::from(stem.class_token);
        Ok(VisionEmbeddings {
            linear,
            class,
            position: e.pp("position_embedding").get((tokens, hidden), "weight")?,
            patch,
            image,
        })
    }

    /// Input resolution (square).
    pub fn image_size(&self) -> usize {
        self.image
    }

    /// The encoder's input `(batch * tokens, hidden)` of `(batch, channels, size, size)`
    /// pixels, and each image's tokens as a segment; an error for another size.
    pub fn forward(&self, pixels: &Tensor) -> Result<(Tensor, Vec<Segment>)> {
        let (b, _, hh, ww) = pixels.dims4()?;
        if hh != self.image || ww != self.image {
            candle_core::bail!("pixels of {hh}x{ww}, the model takes {0}x{0}", self.image)
        }
        let x = super::ops::linear(&self.linear, &patchify(pixels, self.patch)?, None)?;
        let (rows, h) = x.dims2()?;
        let x = x.reshape((b, rows / b.max(1), h))?;
        vit_rows(&x, self.class.as_ref(), &self.position)
    }
}

/// A patch-embedding convolution's weight `(hidden, channels, patch, patch)` as a linear layer
/// for [`patchify`]'s output.
pub fn patch_linear(
    vb: &VarBuilder,
    hidden: usize,
    channels: usize,
    patch: usize,
    bias: bool,
) -> Result<Linear> {
    let w = vb
        .get((hidden, channels, patch, patch), "weight")?
        .reshape((hidden, channels * patch * patch))?;
    let b = if bias {
        Some(vb.get(hidden, "bias")?)
    } else {
        None
    };
    Ok(Linear::new(w, b))
}
