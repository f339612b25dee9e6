//! Text cuts and the service's links: documents, images and pages by domain and id.

/// `text` cut to `chars` characters.
pub(super) fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => text[..at].to_string(),
        None => text.to_string(),
    }
}

/// Percent-encodes an id for a URL path, keeping `/` (ids hold it; the routes take the
/// rest of the path). A segment that is `.` or `..` has its dots escaped (`%2E%2E`):
/// browsers and clients (`requests`, urllib3) remove literal dot segments from a path
/// (RFC 3986, 5.2.4), which would make `docs/../notes/x` another path; escaped ones are
/// kept, and the routes decode them back to the id.
pub fn encode_path(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for (i, segment) in id.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        if segment == "." || segment == ".." {
            out.push_str(&"%2E".repeat(segment.len()));
            continue;
        }
        for b in segment.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    out.push(b as char)
                }
                _ => out.push_str(&format!("%{b:02X}")),
            }
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

    /// Literal `.` / `..` segments are removed by browsers and `requests` before the
    /// request is sent (`docs/../notes/x` became `notes/x`: a 404 or another page).
    #[test]
    fn dot_segments_are_escaped_and_decode_back() {
        assert_eq!(encode_path("docs/../notes/x"), "docs/%2E%2E/notes/x");
        assert_eq!(encode_path("./a/."), "%2E/a/%2E");
        assert_eq!(encode_path("a..b/.x/..."), "a..b/.x/...");
        assert_eq!(
            page_path("d", "docs/../notes/x"),
            "/v1/d/page/docs/%2E%2E/notes/x"
        );
        for id in ["docs/../notes/x", "./a/.", "..", "a/%2E%2E/b"] {
            let url = format!("http://h{}", page_path("d", id));
            assert!(
                !url.split('/').any(|s| s == "." || s == ".."),
                "{url} has a dot segment"
            );
            assert_eq!(
                crate::pages::own_link(&url),
                Some(crate::pages::Link::Page {
                    domain: "d".into(),
                    id: id.into()
                }),
                "{url}"
            );
        }
    }

    #[test]
    fn texts_cut_at_characters_not_bytes() {
        assert_eq!(cut("héllo", 2), "hé");
        assert_eq!(cut("hi", 10), "hi");
    }
}
