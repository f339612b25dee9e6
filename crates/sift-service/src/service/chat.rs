//! OpenAI's chat completions, answered by the service's local generator
//! (`sift serve --generator`).
use std::sync::atomic::{AtomicU64, Ordering};

use sift_generate::{Message, Part, Request, Role, Sampling};

use crate::api::{
    ChatAnswer, ChatChoice, ChatContent, ChatPart, ChatRequest, ChatResponse, ChatUsage,
    StopStrings,
};
use crate::error::ApiError;
use crate::images;

use super::*;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Service {
    /// A chat completion from the local generator.
    pub fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ApiError> {
        let Some((name, generator)) = &self.generator else {
            return Err(ApiError::not_found(
                "model",
                "this service has no generator (start it with --generator)",
            ));
        };
        if &req.model != name {
            return Err(ApiError::not_found(
                "model",
                format!("no generator {:?} (served: {name})", req.model),
            ));
        }
        if req.stream == Some(true) {
            return Err(ApiError::invalid(
                "stream",
                "streaming is not served: send stream false",
            ));
        }
        if req.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid("n", "one choice per request"));
        }
        if req.messages.is_empty() {
            return Err(ApiError::invalid("messages", "no messages"));
        }
        let mut messages = Vec::with_capacity(req.messages.len());
        for (i, m) in req.messages.iter().enumerate() {
            let role = match m.role.as_str() {
                "system" | "developer" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                other => {
                    return Err(ApiError::invalid(
                        format!("messages[{i}].role"),
                        format!("{other:?}: give system, user or assistant"),
                    ));
                }
            };
            let content = match &m.content {
                ChatContent::Text(t) => vec![Part::text(t.clone())],
                ChatContent::Parts(parts) => {
                    let mut out = Vec::with_capacity(parts.len());
                    for (j, p) in parts.iter().enumerate() {
                        out.push(match p {
                            ChatPart::Text { text } => Part::text(text.clone()),
                            ChatPart::ImageUrl { image_url } => {
                                let field = format!("messages[{i}].content[{j}]");
                                if !image_url.url.starts_with("data:") {
                                    return Err(ApiError::invalid(
                                        field,
                                        "images as data: URLs only (the service fetches nothing)",
                                    ));
                                }
                                Part::image(images::decode_data(
                                    &field,
                                    &image_url.url,
                                    &self.limits.image,
                                )?)
                            }
                        });
                    }
                    out
                }
            };
            messages.push(Message { role, content });
        }
        let max_new = req.max_completion_tokens.or(req.max_tokens).unwrap_or(512);
        if max_new == 0 || max_new > self.limits.max_new_tokens {
            return Err(ApiError::invalid(
                "max_tokens",
                format!("{max_new}: give 1 to {}", self.limits.max_new_tokens),
            ));
        }
        let temperature = req.temperature.unwrap_or(0.0);
        let top_p = req.top_p.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::invalid("temperature", "give 0 to 2"));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid(
                "top_p",
                "give a value above 0, at most 1",
            ));
        }
        let sampling = Sampling {
            max_new_tokens: max_new,
            temperature,
            top_p,
            seed: req.seed,
            stop: match &req.stop {
                None => Vec::new(),
                Some(StopStrings::One(s)) => vec![s.clone()],
                Some(StopStrings::Many(v)) => v.clone(),
            },
        };
        let g = generator
            .generate(&Request { messages, sampling })
            .map_err(|e| match e {
                sift_generate::Error::Invalid(m) => ApiError::invalid("messages", m),
                e => ApiError::new(crate::error::ErrorKind::Internal, e.to_string()),
            })?;
        Ok(ChatResponse {
            id: format!("chatcmpl-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)),
            object: "chat.completion".into(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model: name.clone(),
            choices: vec![ChatChoice {
                index: 0,
                message: ChatAnswer {
                    role: "assistant".into(),
                    content: g.text,
                },
                finish_reason: g.finish_reason.unwrap_or_else(|| "stop".into()),
            }],
            usage: ChatUsage {
                prompt_tokens: g.usage.prompt_tokens,
                completion_tokens: g.usage.completion_tokens,
                total_tokens: g.usage.prompt_tokens + g.usage.completion_tokens,
            },
        })
    }
}
