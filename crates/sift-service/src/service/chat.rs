//! OpenAI's chat completions, answered by the service's local generator
//! (`sift serve --generator`), through [`crate::chat`].
use crate::api::{ChatRequest, ChatResponse};
use crate::chat::{ImageSources, complete};
use crate::error::ApiError;

use super::*;

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
        complete(
            generator.as_ref(),
            name,
            req,
            &self.limits,
            ImageSources::DataUrls,
        )
    }
}
