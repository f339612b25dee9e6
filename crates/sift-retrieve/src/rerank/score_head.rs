//! A relevance head on a Qwen2-VL: jina-reranker-m0 (`JinaVLForRanking` in its published
//! modelling code). The prompt is plain text, without a chat template:
//! `**Document**:\n{document}\n**Query**:\n{query}`. An image goes into its side's part as
//! `<|vision_start|><|image_pad|><|vision_end|>`, and the score token (id 100) is appended.
//! The score token's final hidden state (after the last norm) goes through the head `score`:
//! Linear(H, H), ReLU, Linear(H, 1). The score is `sigmoid(x - 2.65)`, the normalisation of
//! the published `compute_score`.
//!
//! The published code takes either a text or an image on each side. Sift puts both a query's
//! text and its images in the query's part (Tasks 2-4), and both a pair's passage and its image
//! in the document's (Task 4): text first, then the images. The images go in prompt order
//! (the document's first), as `compute_score` passes `[document image, query image]`.
use candle_core::{DType, Device};
use sift_generate::{Generator, LocalQwen2Vl};

use super::{RerankDoc, RerankQuery, Reranker};
use crate::{Error, Result};

/// The token appended to every prompt, whose hidden state is scored.
pub const SCORE_TOKEN: u32 = 100;
/// Subtracted before the sigmoid (the published `LOGIT_BIAS`).
pub const LOGIT_BIAS: f64 = 2.65;
/// An image in a prompt.
pub const IMAGE_TOKENS: &str = "<|vision_start|><|image_pad|><|vision_end|>";

/// Whether the checkpoint at `files` is a Qwen2-VL with a relevance head
/// (`architectures`: `JinaVLForRanking`).
pub fn has_score_head(files: &sift_embed::ModelFiles) -> bool {
    sift_embed::read_json::<serde_json::Value>(&files.config)
        .ok()
        .and_then(|v| v.get("architectures").cloned())
        .and_then(|a| a.as_array().cloned())
        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("JinaVLForRanking")))
}

/// A reranker scoring with a Qwen2-VL's relevance head.
pub struct ScoreHeadReranker {
    name: String,
    model: LocalQwen2Vl,
    /// (weight rows, bias) of the head's two layers
    dense: (Vec<Vec<f32>>, Vec<f32>),
    out: (Vec<f32>, f32),
    max_chars: usize,
}

impl ScoreHeadReranker {
    /// Loads `spec` (a directory or a hub id) with its head (`score.0.*`, `score.2.*`) on
    /// `device`, the backbone in `dtype` (the head runs in f32). Documents' texts are cut to
    /// `max_chars` characters.
    pub fn load(spec: &str, device: &Device, dtype: DType, max_chars: usize) -> Result<Self> {
        let err = |e: &dyn std::fmt::Display| Error::Unsupported(format!("rerank {spec}: {e}"));
        let model = LocalQwen2Vl::load_with(spec, device, dtype).map_err(|e| err(&e))?;
        let files = sift_embed::ModelFiles::resolve(spec)?;
        let vb = files.var_builder(DType::F32, &Device::Cpu)?;
        let tensor = |name: &str| -> Result<candle_core::Tensor> {
            if !vb.contains_tensor(name) {
                return Err(err(&format!(
                    "no {name} in the weights: not a relevance head"
                )));
            }
            let t = vb.get_unchecked(name).map_err(|e| err(&e))?;
            t.to_dtype(DType::F32).map_err(|e| err(&e))
        };
        let rows = |t: candle_core::Tensor| t.to_vec2::<f32>().map_err(|e| err(&e));
        let vec = |t: candle_core::Tensor| t.flatten_all().and_then(|t| t.to_vec1::<f32>());
        let w0 = rows(tensor("score.0.weight")?)?;
        let b0 = vec(tensor("score.0.bias")?).map_err(|e| err(&e))?;
        let w2 = rows(tensor("score.2.weight")?)?;
        let b2 = vec(tensor("score.2.bias")?).map_err(|e| err(&e))?;
        let h = w0.len();
        if w0.iter().any(|r| r.len() != h) || b0.len() != h || w2.len() != 1 || w2[0].len() != h {
            return Err(err(&format!(
                "the head's shapes are not [H, H], [H], [1, H], [1] (H = {h})"
            )));
        }
        Ok(ScoreHeadReranker {
            name: format!("score-head:{}", super::short_name(model.model_id())),
            model,
            dense: (w0, b0),
            out: (w2.into_iter().next().unwrap_or_default(), b2[0]),
            max_chars,
        })
    }

    /// The prompt's text and its images in prompt order.
    pub fn prompt<'a>(
        &self,
        query: &RerankQuery<'a>,
        doc: &RerankDoc<'a>,
    ) -> (String, Vec<&'a [u8]>) {
        let text: String = doc
            .text
            .unwrap_or("")
            .chars()
            .take(self.max_chars)
            .collect();
        let mut p = format!("**Document**:\n{text}");
        let mut images = Vec::new();
        if let Some(b) = doc.image {
            p.push_str(IMAGE_TOKENS);
            images.push(b);
        }
        p.push_str("\n**Query**:\n");
        p.push_str(query.text);
        for b in query.images {
            p.push_str(IMAGE_TOKENS);
            images.push(*b);
        }
        (p, images)
    }

    /// The model's input for one candidate: the prompt's token ids (image tokens expanded,
    /// the score token appended) and its images, prepared.
    pub fn inputs(
        &self,
        query: &RerankQuery<'_>,
        doc: &RerankDoc<'_>,
    ) -> Result<(Vec<u32>, Vec<sift_embed::GmeImage>)> {
        let err =
            |e: sift_generate::Error| Error::Unsupported(format!("rerank:{}: {e}", self.name));
        let (text, images) = self.prompt(query, doc);
        let prepared = self.model.prepare_images(&images).map_err(err)?;
        let ids = self.model.tokenize(&text).map_err(err)?;
        let mut ids = self
            .model
            .expand_image_tokens(&ids, &prepared)
            .map_err(err)?;
        ids.push(SCORE_TOKEN);
        Ok((ids, prepared))
    }

    /// The head's raw output (before the bias and the sigmoid) for one candidate.
    pub fn logit(&self, query: &RerankQuery<'_>, doc: &RerankDoc<'_>) -> Result<f64> {
        let err =
            |e: sift_generate::Error| Error::Unsupported(format!("rerank:{}: {e}", self.name));
        let (ids, prepared) = self.inputs(query, doc)?;
        let h = self.model.last_hidden_state(&ids, &prepared).map_err(err)?;
        if h.len() != self.out.0.len() {
            return Err(Error::Unsupported(format!(
                "rerank:{}: hidden size {} but the head takes {}",
                self.name,
                h.len(),
                self.out.0.len()
            )));
        }
        let dot = |w: &[f32], x: &[f32]| -> f64 {
            w.iter().zip(x).map(|(a, b)| *a as f64 * *b as f64).sum()
        };
        let hidden: Vec<f32> = self
            .dense
            .0
            .iter()
            .zip(&self.dense.1)
            .map(|(w, b)| (dot(w, &h) + *b as f64).max(0.0) as f32)
            .collect();
        Ok(dot(&self.out.0, &hidden) + self.out.1 as f64)
    }

    /// The score of one candidate: `sigmoid(logit - 2.65)`.
    pub fn score(&self, query: &RerankQuery<'_>, doc: &RerankDoc<'_>) -> Result<f64> {
        let x = self.logit(query, doc)?;
        Ok(1.0 / (1.0 + (-(x - LOGIT_BIAS)).exp()))
    }
}

impl Reranker for ScoreHeadReranker {
    fn name(&self) -> &str {
        &self.name
    }

    fn probabilities(&self) -> bool {
        true
    }

    fn sees_images(&self) -> bool {
        true
    }

    fn scores(&self, query: &RerankQuery<'_>, docs: &[RerankDoc<'_>]) -> Result<Vec<f64>> {
        docs.iter().map(|d| self.score(query, d)).collect()
    }
}
