//! Requests parsed from JSON bytes with the field at fault named (one parser for every
//! door that reads JSON: HTTP bodies, MCP arguments, fuzzing).
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorKind};

/// Parses a JSON request, naming the field at fault.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    parse_json_seed(bytes, std::marker::PhantomData::<T>)
}

/// Parses a JSON request with `seed` (e.g. [`AtMost`](super::AtMost)), naming the field at
/// fault.
pub fn parse_json_seed<'de, S: serde::de::DeserializeSeed<'de>>(
    bytes: &'de [u8],
    seed: S,
) -> Result<S::Value, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let value = seed
        .deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
        .map_err(|e| {
            let path = track.path().to_string();
            ApiError {
                kind: ErrorKind::InvalidRequest,
                field: (path != ".").then_some(path),
                message: e.to_string(),
            }
        })?;
    de.end()
        .map_err(|e| ApiError::new(ErrorKind::InvalidRequest, format!("after the JSON: {e}")))?;
    Ok(value)
}
