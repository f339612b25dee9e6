//! Text cuts and the service's links: documents, images and pages by domain and id.

/// `text` cut to `chars` characters.
pub(super) fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => text[..at].to_string(),
        None => text.to_string(),
    }
}

/// Percent-encodes an id for a URL path, keeping `/` (ids hold it; the routes take the
/// rest of the path).
pub fn encode_path(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Where the service serves a passage.
pub fn document_path(domain: &str, id: &str) -> String {
    format!("/v1/{}/doc/{}", encode_path(domain), encode_path(id))
}

/// Where the service serves a corpus image.
pub fn image_path(domain: &str, id: &str) -> String {
    format!("/v1/{}/image/{}", encode_path(domain), encode_path(id))
}

/// Where the service serves the readable page of a passage or a corpus image (HTML, or
/// Markdown and plain text on request).
pub fn page_path(domain: &str, id: &str) -> String {
    format!("/v1/{}/page/{}", encode_path(domain), encode_path(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_encode_everything_but_unreserved_and_slash() {
        assert_eq!(encode_path("bio/a b#?%.txt"), "bio/a%20b%23%3F%25.txt");
        assert_eq!(
            document_path("gis", "gis/k_1.txt"),
            "/v1/gis/doc/gis/k_1.txt"
        );
    }

    #[test]
    fn texts_cut_at_characters_not_bytes() {
        assert_eq!(cut("héllo", 2), "hé");
        assert_eq!(cut("hi", 10), "hi");
    }
}
