//! Early truncation: tokenising only as much of a long text as a short-context model can use.
//!
//! CLIP reads 77 tokens, SigLIP 64, BERT encoders 256-512, but a passage may hold thousands of
//! words; tokenising all of it and then truncating spends most of the time on tokens that are
//! thrown away. [`encode_truncated`] tokenises a prefix of the text instead, cut at a
//! whitespace boundary with a margin (8 characters per token; English averages 4-5), and keeps that result
//! only when the tokenizer itself had to truncate it (it reports overflowing tokens): then
//! every kept token comes from text before the cut, and since the tokenizers used here
//! (byte-level BPE, SentencePiece's Metaspace, WordPiece) normalise characters locally and
//! split words at whitespace before anything else, those tokens are exactly the full text's.
//! Otherwise the prefix is doubled, up to the whole text. The token ids are identical to
//! tokenising the whole text (tested on every model family with long, unspaced, CJK and
//! punctuation-heavy texts).
use tokenizers::{Encoding, Tokenizer};

use crate::{Error, Result};

/// Characters of text tokenised per token the model keeps, at first.
const CHARS_PER_TOKEN: usize = 8;

/// `text` cut at the first whitespace at or after byte `at` (the whitespace excluded), or
/// `None` when there is none (cutting inside a word could change its tokens).
pub(crate) fn cut(text: &str, at: usize) -> Option<&str> {
    if at >= text.len() {
        return None;
    }
    let mut start = at;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..]
        .char_indices()
        .find(|(_, c)| c.is_whitespace())
        .map(|(i, _)| &text[..start + i])
}

/// Encodes each text as `tokenizer` would with its truncation to `max_tokens`, tokenising
/// only a prefix of long texts (module docs). `tokenizer` must truncate to `max_tokens`.
pub fn encode_truncated(
    tokenizer: &Tokenizer,
    texts: Vec<String>,
    max_tokens: usize,
) -> Result<Vec<Encoding>> {
    let budget = max_tokens.max(1) * CHARS_PER_TOKEN;
    let mut out: Vec<Option<Encoding>> = vec![None; texts.len()];
    // (text index, prefix length in bytes) still to try
    let mut pending: Vec<(usize, usize)> = (0..texts.len()).map(|i| (i, budget)).collect();
    while !pending.is_empty() {
        let inputs: Vec<&str> = pending
            .iter()
            .map(|&(i, at)| cut(&texts[i], at).unwrap_or(&texts[i]))
            .collect();
        let whole: Vec<bool> = pending
            .iter()
            .map(|&(i, at)| cut(&texts[i], at).is_none())
            .collect();
        let enc = tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut next = Vec::new();
        for ((e, &(i, at)), whole) in enc.into_iter().zip(&pending).zip(whole) {
            if whole || !e.get_overflowing().is_empty() {
                out[i] = Some(e);
            } else {
                next.push((i, at.saturating_mul(2)));
            }
        }
        pending = next;
    }
    Ok(out
        .into_iter()
        .map(|e| e.expect("every text encoded"))
        .collect())
}

/// Sets `tokenizer` to truncate at `max_length` tokens (special tokens included) as
/// sentence-transformers and transformers configure it: the longest sequence first, from the
/// right, no stride.
pub(crate) fn truncate_right(
    tokenizer: &mut tokenizers::Tokenizer,
    max_length: usize,
) -> Result<()> {
    use tokenizers::{TruncationDirection, TruncationParams, TruncationStrategy};
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        }))
        .map_err(|e| Error::Tokenizer(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_whitespace_only() {
        assert_eq!(cut("abc def ghi", 2), Some("abc"));
        assert_eq!(cut("abc def ghi", 3), Some("abc"));
        assert_eq!(cut("abc def ghi", 4), Some("abc def"));
        assert_eq!(cut("abcdefghi", 2), None);
        assert_eq!(cut("abc", 3), None);
        assert_eq!(cut("éé éé", 1), Some("éé"));
        assert_eq!(cut("日本語 テキスト", 1), Some("日本語"));
    }
}
