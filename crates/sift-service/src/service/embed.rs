//! OpenAI's embeddings API: the models served and `/v1/embeddings`.

use sift_embed::Role;

use crate::api::{
    EmbeddingInput, EmbeddingsRequest, EmbeddingsResponse, ModelEntry, ModelList, Usage,
};
use crate::error::ApiError;
use crate::images;

use super::*;

impl Service {
    /// OpenAI's model list: the dense indexes' models, the chat generator and the reranker.
    pub fn models(&self) -> ModelList {
        ModelList {
            object: "list".into(),
            data: self
                .model_ids
                .iter()
                .map(String::as_str)
                .chain(self.generator.iter().map(|(name, _)| name.as_str()))
                .chain(self.rerank.iter().map(|s| s.reranker.name()))
                .map(|id| ModelEntry {
                    id: id.to_string(),
                    object: "model".into(),
                    created: self.created,
                    owned_by: "sift".into(),
                })
                .collect(),
        }
    }

    /// OpenAI-compatible embeddings.
    pub fn embed(&self, req: &EmbeddingsRequest) -> Result<EmbeddingsResponse, ApiError> {
        let model = self.models.get(&req.model).ok_or_else(|| {
            ApiError::not_found(
                "model",
                format!(
                    "no model {:?} (served: {})",
                    req.model,
                    self.model_ids.join(", ")
                ),
            )
        })?;
        let inputs: Vec<&str> = match &req.input {
            EmbeddingInput::One(s) => vec![s.as_str()],
            EmbeddingInput::Many(v) => v.iter().map(String::as_str).collect(),
        };
        if inputs.is_empty() {
            return Err(ApiError::invalid("input", "no input to embed"));
        }
        if inputs.len() > self.limits.max_inputs {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "{} inputs: at most {} per request",
                    inputs.len(),
                    self.limits.max_inputs
                ),
            ));
        }
        if let Some(d) = req.dimensions
            && d != model.dim()
        {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "{d}: {} gives {}-dimensional vectors only",
                    req.model,
                    model.dim()
                ),
            ));
        }
        let base64 = match req.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(ApiError::invalid(
                    "encoding_format",
                    format!("{other:?}: give float or base64"),
                ));
            }
        };
        let role = match req.input_type.as_deref() {
            None | Some("passage") | Some("document") => Role::Passage,
            Some("query") => Role::Query,
            Some(other) => {
                return Err(ApiError::invalid(
                    "input_type",
                    format!("{other:?}: give passage or query"),
                ));
            }
        };
        // images: as many and as large in all as a search's (counted before any is
        // decoded)
        let mut budget = self.image_budget(
            "input",
            inputs
                .iter()
                .filter(|s| s.starts_with("data:image/"))
                .count(),
        )?;
        // texts and images (data URLs), each embedded in one batch
        let mut text_at = Vec::new();
        let mut texts = Vec::new();
        let mut image_at = Vec::new();
        let mut image_bytes = Vec::new();
        for (i, s) in inputs.iter().enumerate() {
            if s.starts_with("data:image/") {
                if !model.capabilities().images {
                    return Err(ApiError::invalid(
                        format!("input[{i}]"),
                        format!("{} is a text model: it embeds no images", req.model),
                    ));
                }
                let field = format!("input[{i}]");
                let bytes = images::decode_data(&field, s, &self.limits.image)?;
                budget.charge(&field, &bytes, &self.limits.image)?;
                image_bytes.push(bytes);
                image_at.push(i);
            } else {
                texts.push(*s);
                text_at.push(i);
            }
        }
        let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); inputs.len()];
        let mut tokens = 0;
        if !texts.is_empty() {
            let prepared = model.prepare_texts(&texts, role)?;
            tokens = prepared.token_count().unwrap_or(0);
            for (i, v) in text_at
                .into_iter()
                .zip(model.embed_prepared_texts(&prepared)?)
            {
                vectors[i] = v;
            }
        }
        if !image_bytes.is_empty() {
            let refs: Vec<&[u8]> = image_bytes.iter().map(Vec::as_slice).collect();
            let prepared = model
                .prepare_images(&refs)
                .into_iter()
                .zip(&image_at)
                .map(|(r, i)| {
                    r.map_err(|e| ApiError::invalid(format!("input[{i}]"), e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            for (i, v) in image_at.into_iter().zip(model.embed_images(&prepared)?) {
                vectors[i] = v;
            }
        }
        Ok(EmbeddingsResponse {
            object: "list".into(),
            data: vectors
                .into_iter()
                .enumerate()
                .map(|(index, v)| crate::api::Embedding {
                    object: "embedding".into(),
                    index,
                    embedding: if base64 {
                        use base64::Engine;
                        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                        base64::engine::general_purpose::STANDARD
                            .encode(bytes)
                            .into()
                    } else {
                        v.into()
                    },
                })
                .collect(),
            model: req.model.clone(),
            usage: Usage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        })
    }
}
