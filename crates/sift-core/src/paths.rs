//! Id and path conventions of MM-BRIGHT (`docs/src/mm-bright-protocol.md`).
use std::sync::LazyLock;

use regex::Regex;

/// Normalises an image path as the protocol says: `\` becomes `/` and a leading `./` is
/// stripped (repeatedly), so annotations and corpus rows name images the same way.
pub fn normalize_image_path(path: &str) -> String {
    let mut p = path.trim().replace('\\', "/");
    while let Some(rest) = p.strip_prefix("./") {
        p = rest.to_string();
    }
    p
}

/// What makes `id` unusable as a passage, query or image id, if anything: ids are written
/// into whitespace-separated TREC runs and qrels, so they must be non-empty and hold no
/// whitespace (spaces, tabs, newlines) and no control characters (NUL included).
pub fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("is empty")
    } else if id.chars().any(char::is_whitespace) {
        Some("contains whitespace (a TREC run cannot hold it)")
    } else if id.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    }
}

/// What makes `name` unusable as a domain name, if anything. A domain names directories of
/// an index (`bm25/<domain>/`) and of a corpus (`document_images/<domain>/`), so it must be
/// one plain path component: not empty, not `.` or `..`, without `/` or `\\`, and without
/// control characters. Every reader of domain names (corpus files, manifests) checks it.
pub fn domain_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name == "." || name == ".." {
        Some("is a relative directory name")
    } else if name.contains(['/', '\\']) {
        Some("contains a path separator")
    } else if name.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    }
}

static PASSAGE_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"/([0-9a-f]+)_\d+\.txt$").expect("valid regex"));

/// Base key of a passage id: `academia/a7beca61_6123.txt` -> `a7beca61`
/// (protocol: regex `/([0-9a-f]+)_\d+\.txt$`).
pub fn passage_base_key(passage_id: &str) -> Option<&str> {
    PASSAGE_KEY
        .captures(passage_id)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str())
}

/// Base key of an image path within `domain`:
/// `academia/academia_a7beca61_0002/image_1.webp` -> `a7beca61`
/// (protocol: regex `{domain}_([0-9a-f]+)_\d+`).
pub fn image_base_key<'a>(domain: &str, image_path: &'a str) -> Option<&'a str> {
    let needle = format!("{domain}_");
    let mut from = 0;
    while let Some(pos) = image_path[from..].find(&needle) {
        let start = from + pos + needle.len();
        let rest = &image_path[start..];
        let hex_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
            .count();
        let after = &rest[hex_len..];
        if hex_len > 0
            && after.starts_with('_')
            && after[1..]
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_digit())
        {
            return Some(&rest[..hex_len]);
        }
        from = start;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_names_are_one_plain_path_component() {
        for good in ["biology", "earth_science", "...", "a.b", "Ünïcode"] {
            assert_eq!(domain_problem(good), None, "{good:?}");
        }
        for bad in ["", ".", "..", "a/b", "a\\b", "/abs", "x\0y", "tab\there"] {
            assert!(domain_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn normalises_backslashes_and_dot_prefix() {
        assert_eq!(
            normalize_image_path(r".\gis\gis_1f3a_0001\image_1.png"),
            "gis/gis_1f3a_0001/image_1.png"
        );
        assert_eq!(normalize_image_path("./././a/b.png"), "a/b.png");
        assert_eq!(normalize_image_path("a/b.png"), "a/b.png");
    }

    #[test]
    fn ids_with_whitespace_or_control_characters_are_refused() {
        assert_eq!(id_problem("biology/a7_1.txt"), None);
        assert_eq!(id_problem("é/ü_1"), None);
        for bad in [
            "", "a b", "a\tb", "a\nb", "a\0b", "a\u{85}b", "a\u{7f}b", "\u{3000}",
        ] {
            assert!(id_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn base_keys_follow_the_protocol_regexes() {
        assert_eq!(
            passage_base_key("academia/a7beca61_6123.txt"),
            Some("a7beca61")
        );
        assert_eq!(passage_base_key("academia/a7beca61.txt"), None);
        assert_eq!(passage_base_key("academia/XYZ_1.txt"), None);
        assert_eq!(
            image_base_key("academia", "academia/academia_a7beca61_0002/image_1.webp"),
            Some("a7beca61")
        );
        assert_eq!(
            image_base_key("academia", "academia/other/image_1.webp"),
            None
        );
        // the domain prefix inside the directory name is what matters, not the folder
        assert_eq!(image_base_key("gis", "gis/gis_00ff_1/x.png"), Some("00ff"));
    }
}
