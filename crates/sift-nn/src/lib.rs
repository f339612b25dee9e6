//! The networks Sift embeds with, in candle, laid out as candle-transformers lays out its
//! own: [`models`], one module per architecture, each with a serde config as transformers
//! writes it and its network made by `new(vb, &cfg)`, built from the [`layers`] (linear
//! layers, with weights packed in bfloat16 on the CPU, norms, attention over packed
//! sequences, the pre-norm transformer encoder) whose CPU kernels are sift-simd's. They know
//! no files, tokenizers or prompts: sift-embed's embedders do.
#![warn(missing_docs)]

pub mod layers;
pub mod models;
