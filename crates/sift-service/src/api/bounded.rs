//! JSON arrays read with a bound on their length: parsing stops at the element past it
//! (skipped, not kept), so a body of millions of tiny elements (`[{},{},...]`) never becomes
//! millions of values. Every array a request sends in bulk goes through [`AtMost`]:
//! Serper batches, query images, embeddings inputs.
use std::cell::Cell;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{DeserializeSeed, IgnoredAny, SeqAccess, Visitor};

/// Images a request may send, whatever the service's own (smaller) limit: `--max-images`'s
/// largest value.
pub const MAX_PARSED_IMAGES: usize = 1024;
/// Inputs an embeddings request may send, whatever the service's own (smaller) limit.
pub const MAX_PARSED_INPUTS: usize = 4096;

/// A JSON array of at most `max` elements; past it, an error saying so (and `over` set).
pub struct AtMost<'a, T> {
    max: usize,
    what: &'static str,
    over: Option<&'a Cell<bool>>,
    element: PhantomData<T>,
}

impl<'a, T> AtMost<'a, T> {
    /// At most `max` elements, called `what` in the error.
    pub fn new(max: usize, what: &'static str) -> AtMost<'a, T> {
        AtMost {
            max,
            what,
            over: None,
            element: PhantomData,
        }
    }

    /// Sets `over` when the array is too long.
    pub fn flagging(self, over: &'a Cell<bool>) -> AtMost<'a, T> {
        AtMost {
            over: Some(over),
            ..self
        }
    }
}

impl<'de, T: serde::Deserialize<'de>> DeserializeSeed<'de> for AtMost<'_, T> {
    type Value = Vec<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for AtMost<'_, T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "an array of at most {} {}", self.max, self.what)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max).min(64));
        while out.len() < self.max {
            match seq.next_element()? {
                Some(x) => out.push(x),
                None => return Ok(out),
            }
        }
        // one more element (skipped, not kept) is one too many
        if seq.next_element::<IgnoredAny>()?.is_some() {
            if let Some(over) = self.over {
                over.set(true);
            }
            return Err(serde::de::Error::custom(format!(
                "more than {} {} in one request",
                self.max, self.what
            )));
        }
        Ok(out)
    }
}

/// `deserialize_with` of request images.
pub(crate) fn images<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<super::ImageInput>, D::Error> {
    AtMost::new(MAX_PARSED_IMAGES, "images").deserialize(d)
}

/// An embeddings request's `input`: a string, or an array of strings (read as
/// `AtMost` reads arrays; an untagged enum would buffer the whole array first).
impl<'de> serde::Deserialize<'de> for super::EmbeddingInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Input;
        impl<'de> Visitor<'de> for Input {
            type Value = super::EmbeddingInput;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(
                    f,
                    "a string or an array of at most {MAX_PARSED_INPUTS} strings"
                )
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(super::EmbeddingInput::One(s.to_string()))
            }

            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(super::EmbeddingInput::One(s))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                AtMost::new(MAX_PARSED_INPUTS, "inputs")
                    .visit_seq(seq)
                    .map(super::EmbeddingInput::Many)
            }
        }
        d.deserialize_any(Input)
    }
}

#[cfg(test)]
mod tests {
    use crate::api::parse_json;
    use crate::api::{EmbeddingInput, SearchRequest};

    /// `[{},{},...]` and `["","",...]` are refused at the element past the bound: what
    /// follows is never parsed (here it is not JSON).
    #[test]
    fn bulk_arrays_stop_at_their_bound() {
        let mut body = br#"{"query": "x", "images": ["#.to_vec();
        body.extend(std::iter::repeat_n(&b"{},"[..], super::MAX_PARSED_IMAGES + 1).flatten());
        body.extend_from_slice(b"not JSON");
        let e = parse_json::<SearchRequest>(&body).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("images"), "{e}");
        assert!(e.message.contains("more than 1024 images"), "{e}");
        let ok = parse_json::<SearchRequest>(br#"{"query": "x", "images": [{"image_id": "a"}]}"#)
            .unwrap();
        assert_eq!(ok.images[0].image_id.as_deref(), Some("a"));

        let mut body = br#"{"model": "m", "input": ["#.to_vec();
        body.extend(std::iter::repeat_n(&br#""","#[..], super::MAX_PARSED_INPUTS + 1).flatten());
        body.extend_from_slice(b"not JSON");
        let e = parse_json::<crate::api::EmbeddingsRequest>(&body).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("input"), "{e}");
        assert!(e.message.contains("more than 4096 inputs"), "{e}");
        let one = parse_json::<crate::api::EmbeddingsRequest>(br#"{"model": "m", "input": "a"}"#)
            .unwrap();
        assert!(matches!(one.input, EmbeddingInput::One(ref s) if s == "a"));
        let many =
            parse_json::<crate::api::EmbeddingsRequest>(br#"{"model": "m", "input": ["a", "b"]}"#)
                .unwrap();
        assert!(matches!(many.input, EmbeddingInput::Many(ref v) if v.len() == 2));
        let e = parse_json::<crate::api::EmbeddingsRequest>(br#"{"model": "m", "input": 3}"#)
            .unwrap_err();
        assert!(e.message.contains("a string or an array"), "{e}");
    }
}
