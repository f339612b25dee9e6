//! Embedding profiles: Sift's own handling of each model, or MM-BRIGHT's reference code's
//! (`--profile reference`), which treats every model differently. The rules and where each
//! comes from (file and line of `mm-bright/MM-BRIGHT`, commit 2d37a4d) are in
//! `docs/src/reference-profile.md`; the text rules live here, the query-fusion rules in
//! `sift-retrieve`.
use std::borrow::Cow;

/// How inputs are prepared for a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Profile {
    /// Sift's: each model as its model card runs it (prefixes, token truncation).
    #[default]
    Default,
    /// MM-BRIGHT's released code as it runs, model by model and task by task: Nomic
    /// documents cut to 8,000 characters and embedded without `search_document: `; GME texts
    /// cut to 4,000 characters; BGE-VL texts cut by each task's character rule; images as
    /// its data loader hands them over (Pillow's `convert("RGB")`, truncated files decoded as
    /// far as they go, undecodable ones dropped, no EXIF orientation outside Task 4); the
    /// query-fusion rules per model and task (`sift-retrieve`), including the fallbacks its
    /// code hits by accident: Task 3's white images for Nomic and Jina-CLIP, Task 4's blank
    /// pair images for BGE-VL and GME.
    Reference,
    /// `reference` with the two accidents mended as the code evidently meant:
    /// real images in Task 3 for Nomic and Jina-CLIP, and in Task 4's pairs for BGE-VL and
    /// GME. Everything else, and the index's vectors, as `reference`.
    #[cfg_attr(feature = "clap", value(name = "reference-intended"))]
    ReferenceIntended,
}

impl Profile {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Reference => "reference",
            Profile::ReferenceIntended => "reference-intended",
        }
    }

    /// The profile called `name` (`default`, `reference`, `reference-intended`).
    pub fn from_name(name: &str) -> Option<Profile> {
        match name {
            "default" => Some(Profile::Default),
            "reference" => Some(Profile::Reference),
            "reference-intended" => Some(Profile::ReferenceIntended),
            _ => None,
        }
    }

    /// Whether this is one of the reference code's profiles.
    pub fn is_reference(self) -> bool {
        matches!(self, Profile::Reference | Profile::ReferenceIntended)
    }

    /// The profile the index's vectors are made with: both reference profiles embed
    /// passages and corpus images alike (they differ only at evaluation time), so an index
    /// built with one serves the other.
    pub fn vectors(self) -> Profile {
        match self {
            Profile::ReferenceIntended => Profile::Reference,
            p => p,
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

/// Python's `str.strip()`: the characters `str.isspace` holds, which are Unicode's
/// whitespace and also the separators U+001C to U+001F (Rust's `char::is_whitespace` leaves
/// those out).
fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// Which of BGE-VL's text cuts the reference code applies: it has one per task and role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BgeVlCut {
    /// Task 2 documents (task2_multimodal.py:717-755): limits 150 ... 40; a cut under 5
    /// characters (stripped) becomes the first 40 stripped; none fits: the first 20
    /// stripped, `document` when that is under 3 characters.
    Task2Document,
    /// Task 2 queries (task2_multimodal.py:785-827): limits 150 ... 20; a cut under 3
    /// characters becomes the first 20 stripped; none fits: the first 15 stripped, or `query`
    /// when the whole query is blank.
    Task2Query,
    /// Task 3 queries, embedded apart from their image (task3_image.py:707-720): the
    /// 150-character cut (`query` when empty); when it does not fit, the 60-character cut of
    /// that (`query` when empty), whether it fits or not.
    Task3Query,
    /// Task 4 pair documents (task4_pair.py:758-772): limits 150 ... 20; a cut under 3
    /// characters becomes the first 20 stripped (`document` when empty); none fits: the
    /// first 15 stripped (`document` when empty).
    Task4Document,
    /// Task 4 queries (task4_pair.py:814-828): as Task 4 documents, with `query`.
    Task4Query,
}

impl BgeVlCut {
    /// The cut of Tasks 1-2 for a role (what the index's documents are embedded with).
    pub fn for_role(role: crate::Role) -> BgeVlCut {
        match role {
            crate::Role::Passage => BgeVlCut::Task2Document,
            crate::Role::Query => BgeVlCut::Task2Query,
        }
    }
}

/// BGE-VL's text for `text` under `cut`: the first character limit at which `fits` holds,
/// each cut by [`ultra_safe_truncate`], with the cut's rules for short results and for when
/// nothing fits ([`BgeVlCut`]).
pub fn bge_vl_cut(
    text: &str,
    cut: BgeVlCut,
    mut fits: impl FnMut(&str) -> crate::Result<bool>,
) -> crate::Result<String> {
    let or = |t: &str, fallback: &str| {
        if t.is_empty() {
            fallback.to_string()
        } else {
            t.to_string()
        }
    };
    let first = |n: usize| py_strip(first_chars(text, n)).to_string();
    match cut {
        BgeVlCut::Task3Query => {
            let t = or(&ultra_safe_truncate(text, 150), "query");
            if fits(&t)? {
                return Ok(t);
            }
            Ok(or(&ultra_safe_truncate(&t, 60), "query"))
        }
        BgeVlCut::Task2Document | BgeVlCut::Task2Query => {
            let doc = cut == BgeVlCut::Task2Document;
            let (limits, min_len, short): (&[usize], usize, usize) = if doc {
                (&BGE_VL_DOC_LIMITS, 5, 40)
            } else {
                (&BGE_VL_QUERY_LIMITS, 3, 20)
            };
            for &limit in limits {
                let mut t = ultra_safe_truncate(text, limit);
                if py_strip(&t).chars().count() < min_len {
                    t = first(short);
                }
                if fits(&t)? {
                    return Ok(t);
                }
            }
            Ok(if doc {
                let t = first(20);
                if t.chars().count() < 3 {
                    "document".to_string()
                } else {
                    t
                }
            } else if py_strip(text).is_empty() {
                "query".to_string()
            } else {
                first(15)
            })
        }
        BgeVlCut::Task4Document | BgeVlCut::Task4Query => {
            let fallback = if cut == BgeVlCut::Task4Document {
                "document"
            } else {
                "query"
            };
            for &limit in &BGE_VL_QUERY_LIMITS {
                let mut t = ultra_safe_truncate(text, limit);
                if t.chars().count() < 3 {
                    t = or(&first(20), fallback);
                }
                if fits(&t)? {
                    return Ok(t);
                }
            }
            Ok(or(&first(15), fallback))
        }
    }
}

/// BGE-VL's text for `text` of `role` in Tasks 1-2 ([`bge_vl_cut`] with
/// [`BgeVlCut::for_role`]).
pub fn bge_vl_text(
    text: &str,
    role: crate::Role,
    fits: impl FnMut(&str) -> crate::Result<bool>,
) -> crate::Result<String> {
    bge_vl_cut(text, BgeVlCut::for_role(role), fits)
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

    /// Each task's cut as the reference's Python gives it (transcribed from the lines each
    /// [`BgeVlCut`] names), on texts that reach its short-text and last-resort branches.
    #[test]
    fn bge_vl_cuts_differ_per_task_as_the_released_code_does() {
        let long = "token ".repeat(60);
        let fits_70 = |t: &str| Ok(t.chars().count() <= 70);
        // Task 3 queries: 150, then 60 of that, nothing in between
        let mut tried = Vec::new();
        let t = bge_vl_cut(&long, BgeVlCut::Task3Query, |t| {
            tried.push(t.chars().count());
            fits_70(t)
        })
        .unwrap();
        assert_eq!(tried, vec![149]);
        assert_eq!(t, ultra_safe_truncate(&ultra_safe_truncate(&long, 150), 60));
        assert_eq!(
            bge_vl_cut("   ", BgeVlCut::Task3Query, |_| Ok(false)).unwrap(),
            "query"
        );
        // Task 4: down to 20 characters; nothing fits: the first 15 stripped
        let mut tried = Vec::new();
        bge_vl_cut(&long, BgeVlCut::Task4Document, |t| {
            tried.push(t.chars().count());
            Ok(false)
        })
        .unwrap();
        assert_eq!(tried, vec![149, 119, 95, 77, 59, 35, 17]);
        assert_eq!(
            bge_vl_cut(&long, BgeVlCut::Task4Document, |_| Ok(false)).unwrap(),
            "token token tok"
        );
        // a cut under 3 characters: the first 20 stripped, else the fallback
        assert_eq!(
            bge_vl_cut("ab", BgeVlCut::Task4Query, |_| Ok(true)).unwrap(),
            "ab"
        );
        assert_eq!(
            bge_vl_cut(" \u{1f} ", BgeVlCut::Task4Query, |_| Ok(true)).unwrap(),
            "query"
        );
        assert_eq!(
            bge_vl_cut("  ", BgeVlCut::Task4Document, |_| Ok(false)).unwrap(),
            "document"
        );
        // Task 2 queries' last resort: the first 15 stripped however short; `query` only
        // when the whole query is blank (the previous rule gave `query` under 3 characters)
        let odd = format!("{}x", " ".repeat(15));
        assert_eq!(
            bge_vl_cut(&odd, BgeVlCut::Task2Query, |_| Ok(false)).unwrap(),
            ""
        );
        assert_eq!(
            bge_vl_cut("\u{1c}\u{1d}", BgeVlCut::Task2Query, |_| Ok(false)).unwrap(),
            "query"
        );
        // Python's strip() takes U+001C-U+001F too
        assert_eq!(ultra_safe_truncate("\u{1f}abc\u{1c}", 150), "abc");
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
