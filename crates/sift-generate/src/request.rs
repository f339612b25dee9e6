//! What a generator is asked and what it answers.
use base64::Engine;
use serde::{Deserialize, Serialize};

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The user's turn.
    User,
    /// The model's turn.
    Assistant,
}

/// A part of a message: text, or an image (its encoded bytes).
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text.
    Text(String),
    /// An encoded image (PNG, JPEG, ...) and its media type.
    Image {
        /// The file's bytes.
        bytes: Vec<u8>,
        /// `image/png`, `image/jpeg`, ...
        mime: String,
    },
}

impl Part {
    /// A text part.
    pub fn text(s: impl Into<String>) -> Part {
        Part::Text(s.into())
    }

    /// An image part from its encoded bytes, the media type told from the bytes' signature
    /// (PNG, JPEG, GIF, WebP, BMP; anything else is sent as `application/octet-stream`).
    pub fn image(bytes: Vec<u8>) -> Part {
        let mime = sniff_mime(&bytes).to_string();
        Part::Image { bytes, mime }
    }

    /// The image as a `data:` URL (how OpenAI-compatible servers take inline images).
    pub fn data_url(&self) -> Option<String> {
        match self {
            Part::Image { bytes, mime } => Some(format!(
                "data:{mime};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            )),
            Part::Text(_) => None,
        }
    }
}

fn sniff_mime(b: &[u8]) -> &'static str {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        "image/jpeg"
    } else if b.starts_with(b"GIF8") {
        "image/gif"
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        "image/webp"
    } else if b.starts_with(b"BM") {
        "image/bmp"
    } else {
        "application/octet-stream"
    }
}

/// One message of a chat.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// Its text and images, in order.
    pub content: Vec<Part>,
}

impl Message {
    /// A user message.
    pub fn user(content: Vec<Part>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    /// A system message of text.
    pub fn system(text: impl Into<String>) -> Message {
        Message {
            role: Role::System,
            content: vec![Part::text(text)],
        }
    }
}

/// How tokens are chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// At most this many new tokens.
    pub max_new_tokens: u32,
    /// 0 for greedy decoding.
    pub temperature: f32,
    /// Nucleus sampling's mass (1 keeps every token).
    pub top_p: f32,
    /// The sampler's seed (sent to endpoints that take one).
    pub seed: Option<u64>,
    /// Generation stops before any of these strings.
    pub stop: Vec<String>,
}

/// The highest temperature a [`Sampling`] takes (OpenAI's API's, and `sift serve`'s chat
/// route's, upper bound).
pub const MAX_TEMPERATURE: f32 = 2.0;

impl Sampling {
    /// Checks the numbers every back end reads: a temperature from 0 to [`MAX_TEMPERATURE`]
    /// and a top-p mass above 0 and at most 1 (a NaN or an infinity in neither). Every
    /// generator checks its request's sampling with this before generating.
    pub fn check(&self) -> crate::Result<()> {
        if !(0.0..=MAX_TEMPERATURE).contains(&self.temperature) {
            return Err(crate::Error::Invalid(format!(
                "temperature {}: give 0 to {MAX_TEMPERATURE}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(crate::Error::Invalid(format!(
                "top_p {}: give a number above 0 and at most 1",
                self.top_p
            )));
        }
        Ok(())
    }

    /// Greedy decoding of at most `max_new_tokens` tokens.
    pub fn greedy(max_new_tokens: u32) -> Sampling {
        Sampling {
            max_new_tokens,
            temperature: 0.0,
            top_p: 1.0,
            seed: None,
            stop: Vec::new(),
        }
    }
}

/// A chat and how to continue it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The chat so far.
    pub messages: Vec<Message>,
    /// How tokens are chosen.
    pub sampling: Sampling,
}

/// Tokens a generation used, as the back end counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt (text and images).
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
}

/// A generator's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// The generated text.
    pub text: String,
    /// Why it stopped (`stop`, `length`, ...), where the back end says.
    pub finish_reason: Option<String>,
    /// Tokens used.
    pub usage: Usage,
}
