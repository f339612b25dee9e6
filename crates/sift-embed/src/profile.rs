//! Embedding profiles: Sift's own handling of each model, or MM-BRIGHT's reference code's
//! (`--profile reference`), which treats every model differently. The rules and where each
//! comes from (file and line of `mm-bright/MM-BRIGHT`, commit 2d37a4d) are in
//! `docs/reference-profile.md`; the text rules live here, the query-fusion rules in
//! `sift-retrieve`.
use std::borrow::Cow;

/// How inputs are prepared for a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Profile {
    /// Sift's: each model as its model card runs it (prefixes, token truncation).
    #[default]
    Default,
    /// MM-BRIGHT's reference code, model by model: Nomic documents cut to 8,000 characters
    /// and embedded without `search_document: `; GME texts cut to 4,000 characters; BGE-VL
    /// texts cut to 150 characters at a word boundary (shorter until they fit 77 tokens);
    /// the query-fusion rules per model and task (`sift-retrieve`).
    Reference,
}

impl Profile {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Reference => "reference",
        }
    }

    /// The profile called `name` (`default`, `reference`).
    pub fn from_name(name: &str) -> Option<Profile> {
        match name {
            "default" => Some(Profile::Default),
            "reference" => Some(Profile::Reference),
            _ => None,
        }
    }
}

/// The models the reference code treats in a way of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReferenceModel {
    /// CLIP (`retrieval_clip*`).
    Clip,
    /// SigLIP (`retrieval_siglip*`).
    Siglip,
    /// Nomic Embed Vision v1.5 with Nomic Embed Text v1.5 (`retrieval_nomic*`).
    Nomic,
    /// BGE-VL base / large (`retrieval_bge_vl*`): CLIP checkpoints whose `encode(images,
    /// text)` sums the raw text and image features.
    BgeVl,
    /// GME (`retrieval_gme*`).
    Gme,
    /// Jina-CLIP v1 (`retrieval_jina_clip*`).
    JinaClip,
    /// Any other model: no rule of its own.
    Other,
}

/// Nomic documents: `text[:8000]` (task2_multimodal.py:471, task4_pair.py:1097).
pub const NOMIC_DOC_CHARS: usize = 8000;
/// GME documents and queries: `text[:4000]` (task2_multimodal.py:936, 984).
pub const GME_CHARS: usize = 4000;
/// BGE-VL's character limits, tried in order until the text fits the text tower
/// (task2_multimodal.py:721 for documents, 795 for queries).
pub const BGE_VL_DOC_LIMITS: [usize; 6] = [150, 120, 100, 80, 60, 40];
/// The same for queries.
pub const BGE_VL_QUERY_LIMITS: [usize; 7] = [150, 120, 100, 80, 60, 40, 20];

/// The first `n` characters (Unicode scalar values, as Python's `text[:n]`).
pub fn first_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// BGE-VL's `ultra_safe_truncate` (task2_multimodal.py:672-685): strip; when longer than
/// `max_chars` characters, cut there and back to the last space if that keeps more than 70%
/// of them; strip again.
pub fn ultra_safe_truncate(text: &str, max_chars: usize) -> String {
    let text = py_strip(text);
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let cut = first_chars(text, max_chars);
    // rfind(' ') counts characters in Python; find the byte offset and count up to it
    let cut = match cut.rfind(' ') {
        Some(byte) if cut[..byte].chars().count() as f64 > max_chars as f64 * 0.7 => &cut[..byte],
        _ => cut,
    };
    py_strip(cut).to_string()
}

/// Python's `str.strip()` (Unicode whitespace).
fn py_strip(text: &str) -> &str {
    text.trim_matches(char::is_whitespace)
}

/// BGE-VL's text for `text`: the first character limit of `limits` at which `fits` holds,
/// each cut by [`ultra_safe_truncate`] (a cut shorter than `min_len` characters becomes the
/// first 40 (documents) / 20 (queries) characters stripped); when none fits, the text's
/// first `last_resort` characters stripped, or `fallback` when that is shorter than 3
/// characters (task2_multimodal.py:717-755 documents, 785-827 queries).
pub fn bge_vl_text(
    text: &str,
    role: crate::Role,
    mut fits: impl FnMut(&str) -> crate::Result<bool>,
) -> crate::Result<String> {
    let (limits, min_len, short, last_resort, fallback): (&[usize], usize, usize, usize, &str) =
        match role {
            crate::Role::Passage => (&BGE_VL_DOC_LIMITS, 5, 40, 20, "document"),
            crate::Role::Query => (&BGE_VL_QUERY_LIMITS, 3, 20, 15, "query"),
        };
    for &limit in limits {
        let mut t = ultra_safe_truncate(text, limit);
        if py_strip(&t).chars().count() < min_len {
            t = py_strip(first_chars(text, short)).to_string();
        }
        if fits(&t)? {
            return Ok(t);
        }
    }
    let t = py_strip(first_chars(text, last_resort));
    Ok(if t.chars().count() < 3 {
        fallback.to_string()
    } else {
        t.to_string()
    })
}

/// The text the reference code embeds for `text` of `role` with `model`, when it cuts
/// texts by characters (Nomic documents, GME); BGE-VL's rule needs the tokenizer
/// ([`bge_vl_text`]).
pub fn reference_cut(model: ReferenceModel, role: crate::Role, text: &str) -> Cow<'_, str> {
    match (model, role) {
        (ReferenceModel::Nomic, crate::Role::Passage) => {
            Cow::Borrowed(first_chars(text, NOMIC_DOC_CHARS))
        }
        (ReferenceModel::Gme, _) => Cow::Borrowed(first_chars(text, GME_CHARS)),
        _ => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn ultra_safe_truncate_matches_the_reference_function() {
        // expected values as the reference's Python function (task2_multimodal.py:672-685)
        // gives them for the same inputs
        assert_eq!(ultra_safe_truncate("  short text  ", 150), "short text");
        let long = "word ".repeat(40); // 200 chars
        let t = ultra_safe_truncate(&long, 150);
        // cut at 150 -> "word word ... word " (ends in a space at index 149), rfind(' ')
        // = 149 > 105 -> text[:149] -> strip
        assert_eq!(t, "word ".repeat(30).trim_end());
        // no space after 70%: the hard cut stays
        let s = format!("{} {}", "a".repeat(50), "b".repeat(150));
        assert_eq!(ultra_safe_truncate(&s, 150), first_chars(&s, 150));
        // characters, not bytes
        let u = "é".repeat(200);
        assert_eq!(ultra_safe_truncate(&u, 150).chars().count(), 150);
    }

    #[test]
    fn bge_vl_text_shortens_until_it_fits() {
        let text = "token ".repeat(60);
        let mut tried = Vec::new();
        let t = bge_vl_text(&text, Role::Passage, |t| {
            tried.push(t.chars().count());
            Ok(t.chars().count() <= 70)
        })
        .unwrap();
        assert_eq!(t.chars().count(), 59); // the 60-character cut, back to a space
        assert_eq!(tried, vec![149, 119, 95, 77, 59]);
        // nothing fits: the first 20 (documents) / 15 (queries) characters
        let none = bge_vl_text(&text, Role::Query, |_| Ok(false)).unwrap();
        assert_eq!(none, "token token tok");
        assert_eq!(
            bge_vl_text("  ", Role::Passage, |_| Ok(false)).unwrap(),
            "document"
        );
    }

    #[test]
    fn character_cuts_per_model() {
        let text = "x".repeat(9000);
        assert_eq!(
            reference_cut(ReferenceModel::Nomic, Role::Passage, &text).len(),
            8000
        );
        assert_eq!(
            reference_cut(ReferenceModel::Nomic, Role::Query, &text).len(),
            9000
        );
        assert_eq!(
            reference_cut(ReferenceModel::Gme, Role::Query, &text).len(),
            4000
        );
        assert_eq!(
            reference_cut(ReferenceModel::Clip, Role::Passage, &text).len(),
            9000
        );
    }
}
