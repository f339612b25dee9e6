//! OpenAI's chat completions as generation requests, and generations as OpenAI's answers:
//! the one conversion behind `POST /v1/chat/completions`, `sift generate chats` and
//! Python's `Generator.chat`, so the same chat gets the same answer at every door.
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use sift_generate::{Generation, Generator, Message, Part, Request, Role, Sampling};

use crate::api::{
    ChatAnswer, ChatChoice, ChatContent, ChatPart, ChatRequest, ChatResponse, ChatUsage,
    StopStrings,
};
use crate::error::{ApiError, ErrorKind};
use crate::images;
use crate::service::Limits;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// New tokens when a request does not say.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

/// Where a chat's images may come from.
#[derive(Debug, Clone, Copy)]
pub enum ImageSources<'a> {
    /// `data:` URLs only (a service fetches nothing).
    DataUrls,
    /// `data:` URLs, and files: a `file://` URL or a path, relative to this folder (a chats
    /// file's own, on the command line).
    DataUrlsAndFiles(&'a Path),
}

/// The generation request of an OpenAI chat: roles, text and image parts in order, sampling
/// checked against `limits` (each field at fault named).
pub fn chat_request(
    req: &ChatRequest,
    limits: &Limits,
    sources: ImageSources<'_>,
) -> Result<Request, ApiError> {
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
    let mut image_count = 0;
    let mut budget = images::PixelBudget::new(limits.max_request_pixels);
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
                            image_count += 1;
                            if image_count > limits.max_images {
                                return Err(ApiError::invalid(
                                    field,
                                    format!("more than {} images in one chat", limits.max_images),
                                ));
                            }
                            let bytes = chat_image(&field, &image_url.url, limits, sources)?;
                            budget.charge(&field, &bytes, &limits.image)?;
                            Part::image(bytes)
                        }
                    });
                }
                out
            }
        };
        messages.push(Message { role, content });
    }
    Ok(Request {
        messages,
        sampling: sampling(req, limits)?,
    })
}

/// A chat's sampling settings, checked.
fn sampling(req: &ChatRequest, limits: &Limits) -> Result<Sampling, ApiError> {
    let max_new = req
        .max_completion_tokens
        .or(req.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if max_new == 0 || max_new > limits.max_new_tokens {
        return Err(ApiError::invalid(
            "max_tokens",
            format!("{max_new}: give 1 to {}", limits.max_new_tokens),
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
    Ok(Sampling {
        max_new_tokens: max_new,
        temperature,
        top_p,
        seed: req.seed,
        stop: match &req.stop {
            None => Vec::new(),
            Some(StopStrings::One(s)) => vec![s.clone()],
            Some(StopStrings::Many(v)) => v.clone(),
        },
    })
}

/// One image part's bytes: a `data:` URL decoded, or (where `sources` allow) a file read,
/// each held to the image limits.
fn chat_image(
    field: &str,
    url: &str,
    limits: &Limits,
    sources: ImageSources<'_>,
) -> Result<Vec<u8>, ApiError> {
    if url.starts_with("data:") {
        return images::decode_data(field, url, &limits.image);
    }
    let ImageSources::DataUrlsAndFiles(folder) = sources else {
        return Err(ApiError::invalid(
            field,
            "images as data: URLs only (the service fetches nothing)",
        ));
    };
    if url.contains("://") && !url.starts_with("file://") {
        return Err(ApiError::invalid(
            field,
            format!("{url:?}: give a data: URL, a file:// URL or a path (nothing is fetched)"),
        ));
    }
    let path = folder.join(url.strip_prefix("file://").unwrap_or(url));
    sift_core::read_regular_file(&path, limits.image.max_bytes as u64)
        .map_err(|e| ApiError::invalid(field, format!("{}: {e}", path.display())))
}

/// A generator's failure as the request's error (a request the generator refuses names
/// the messages).
pub fn generation_error(e: sift_generate::Error) -> ApiError {
    match e {
        sift_generate::Error::Invalid(m) => ApiError::invalid("messages", m),
        e => ApiError::new(ErrorKind::Internal, e.to_string()),
    }
}

/// A generation as OpenAI's chat completion answer from `model`.
pub fn chat_response(model: &str, g: Generation) -> ChatResponse {
    ChatResponse {
        id: format!("chatcmpl-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)),
        object: "chat.completion".into(),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: model.to_string(),
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
    }
}

/// One chat through `generator`, answered as `model`.
pub fn complete(
    generator: &dyn Generator,
    model: &str,
    req: &ChatRequest,
    limits: &Limits,
    sources: ImageSources<'_>,
) -> Result<ChatResponse, ApiError> {
    let request = chat_request(req, limits, sources)?;
    let g = generator.generate(&request).map_err(generation_error)?;
    Ok(chat_response(model, g))
}
