//! Readable pages: what a link in a hit opens as, for a browser or an agent's page reader. A
//! passage's page shows its text and the images of its page; an image's page shows the
//! image and its page's text. Each renders as HTML (title, paragraphs, `<img src>` pointing
//! at the image endpoint), Markdown, plain text, or Jina Reader's text form (`Title:`,
//! `URL Source:`, `Markdown Content:`).
use std::collections::BTreeMap;

use crate::api::{ReaderPage, ReaderResponse};
use crate::service::{Page, image_path, page_path};

/// How a page is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// HTML.
    Html,
    /// Markdown.
    Markdown,
    /// Plain text.
    Text,
    /// JSON (the API's own shape).
    Json,
}

impl Format {
    /// The `Content-Type` of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Html => "text/html; charset=utf-8",
            Format::Markdown => "text/markdown; charset=utf-8",
            Format::Text => "text/plain; charset=utf-8",
            Format::Json => "application/json",
        }
    }

    /// A `?format=` value: `html`, `markdown` or `md`, `text` or `txt`, `json`.
    pub fn parse(name: &str) -> Option<Format> {
        match name.to_ascii_lowercase().as_str() {
            "html" => Some(Format::Html),
            "markdown" | "md" => Some(Format::Markdown),
            "text" | "txt" | "plain" => Some(Format::Text),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// The format an `Accept` header prefers among those a page has: the media type with the
/// highest `q` (the earliest on equal `q`); `*/*`, `text/*`, no header or nothing known give
/// `default`.
pub fn negotiate(accept: Option<&str>, default: Format) -> Format {
    let Some(accept) = accept else {
        return default;
    };
    let mut best: Option<(f32, Format)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").map(str::trim))
            .find_map(|v| v.parse::<f32>().ok())
            .unwrap_or(1.0);
        let format = match media.as_str() {
            "text/html" | "application/xhtml+xml" => Format::Html,
            "text/markdown" | "text/x-markdown" => Format::Markdown,
            "text/plain" => Format::Text,
            "application/json" => Format::Json,
            "*/*" | "text/*" => default,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, format));
        }
    }
    best.map_or(default, |(_, f)| f)
}

/// Escapes text for HTML content and attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page's paragraphs: its text split at blank lines.
fn paragraphs(text: &str) -> impl Iterator<Item = &str> {
    text.split("\n\n").map(str::trim).filter(|p| !p.is_empty())
}

/// Absolute URLs of the page's images, with their alt text (`Image N: id`, as Jina Reader
/// writes generated alt text).
pub(crate) fn image_links(page: &Page, base: &str) -> Vec<(String, String)> {
    page.images
        .iter()
        .enumerate()
        .map(|(i, id)| {
            (
                format!("Image {}: {id}", i + 1),
                format!("{base}{}", image_path(&page.domain, id)),
            )
        })
        .collect()
}

/// The page as HTML.
pub fn html(page: &Page, base: &str) -> String {
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(&format!("<title>{}</title>\n", escape(&page.id)));
    out.push_str(&format!(
        "<link rel=\"canonical\" href=\"{}\">\n",
        escape(&format!("{base}{}", page_path(&page.domain, &page.id)))
    ));
    out.push_str("</head>\n<body>\n<article>\n");
    out.push_str(&format!("<h1>{}</h1>\n", escape(&page.id)));
    out.push_str(&format!(
        "<p class=\"source\">{}</p>\n",
        escape(&page.domain)
    ));
    for p in paragraphs(&page.text) {
        out.push_str(&format!("<p>{}</p>\n", escape(p).replace('\n', "<br>\n")));
    }
    for (alt, url) in image_links(page, base) {
        out.push_str(&format!(
            "<figure><img src=\"{}\" alt=\"{}\"><figcaption>{}</figcaption></figure>\n",
            escape(&url),
            escape(&alt),
            escape(&alt)
        ));
    }
    out.push_str("</article>\n</body>\n</html>\n");
    out
}

/// Escapes what Markdown would read as link syntax in alt text.
fn alt_text(s: &str) -> String {
    s.replace('[', "\\[").replace(']', "\\]")
}

/// The page as Markdown. A passage's text is Markdown as it stands, except that links to
/// `javascript:`, `vbscript:`, `data:` and `file:` URLs ([`defuse_links`]) lose their scheme,
/// so a client that renders the Markdown gets no script link from the corpus.
pub fn markdown(page: &Page, base: &str) -> String {
    let defused = Page {
        text: defuse_links(&page.text).into_owned(),
        ..page.clone()
    };
    plain(&defused, base, format!("# {}", defused.id), |alt, url| {
        format!("![{}]({url})\n\n", alt_text(alt))
    })
}

/// Link targets in Markdown (inline `](x:`, autolinks `<x:`, reference definitions
/// `[label]: x:`) and in raw HTML attributes (`href=`, `src=`, `action=`, `formaction=`) whose
/// scheme is `javascript`, `vbscript`, `data` or `file` get their colon percent-encoded
/// (`javascript%3A...`): a relative URL that runs nothing. Everything else is left as it is.
pub fn defuse_links(text: &str) -> std::borrow::Cow<'_, str> {
    static LINK: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"(?im)((?:\]\s*\(\s*<?)|<|(?:^[ \t]{0,3}\[[^\]\n]+\]:[ \t]*<?)|(?:\b(?:href|src|action|formaction)\s*=\s*["']?))(\s*)(javascript|vbscript|data|file)(\s*):"#,
        )
        .expect("a valid pattern")
    });
    LINK.replace_all(text, "${1}${2}${3}${4}%3A")
}

/// The page as plain text: title, text, then the image URLs.
pub fn text(page: &Page, base: &str) -> String {
    plain(page, base, page.id.clone(), |alt, url| {
        format!("{alt} {url}\n")
    })
}

/// `title`, the paragraphs, then one `image(alt, url)` each; ends with one newline.
fn plain(page: &Page, base: &str, title: String, image: impl Fn(&str, &str) -> String) -> String {
    let mut out = title + "\n\n";
    for p in paragraphs(&page.text) {
        out.push_str(p);
        out.push_str("\n\n");
    }
    for (alt, url) in image_links(page, base) {
        out.push_str(&image(&alt, &url));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// The page as Jina Reader writes one by default (`text/plain`).
pub fn reader_text(page: &Page, url: &str, base: &str) -> String {
    format!(
        "Title: {}\n\nURL Source: {url}\n\nMarkdown Content:\n{}",
        page.id,
        markdown(page, base)
    )
}

/// The page as Jina Reader's JSON answer.
pub fn reader_json(page: &Page, url: &str, base: &str) -> ReaderResponse {
    let description: String = paragraphs(&page.text)
        .next()
        .unwrap_or("")
        .chars()
        .take(300)
        .collect();
    ReaderResponse {
        code: 200,
        status: 20000,
        data: ReaderPage {
            title: page.id.clone(),
            description,
            url: url.to_string(),
            content: markdown(page, base),
            images: image_links(page, base)
                .into_iter()
                .collect::<BTreeMap<_, _>>(),
        },
    }
}

/// What a link of this service names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// A readable page or a passage (`/v1/{domain}/page/{id}`, `/v1/{domain}/doc/{id}`).
    Page {
        /// Domain.
        domain: String,
        /// Passage or image id.
        id: String,
    },
    /// A corpus image (`/v1/{domain}/image/{id}`).
    Image {
        /// Domain.
        domain: String,
        /// Image id.
        id: String,
    },
}

/// Reads a URL (absolute, or a path) as a link this service gives out; `None` for any
/// other URL. The host is not compared (the service may sit behind a proxy): the path is.
pub fn own_link(url: &str) -> Option<Link> {
    let url = url.trim();
    let path = match url.split_once("://") {
        Some((scheme, rest)) => {
            if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
                return None;
            }
            &rest[rest.find('/')?..]
        }
        None => url,
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    let rest = path.strip_prefix("/v1/")?;
    let (domain, rest) = rest.split_once('/')?;
    let (kind, id) = rest.split_once('/')?;
    if domain.is_empty() || id.is_empty() {
        return None;
    }
    let (domain, id) = (percent_decode(domain), percent_decode(id));
    match kind {
        "page" | "doc" => Some(Link::Page { domain, id }),
        "image" => Some(Link::Image { domain, id }),
        _ => None,
    }
}

/// Whether a string is an absolute http(s) URL.
pub fn is_web_url(s: &str) -> bool {
    let s = s.trim_start();
    starts_with_ignore_case(s, "http://") || starts_with_ignore_case(s, "https://")
}

/// Whether `s` starts with `prefix`, ASCII case ignored. Compared as bytes, so that a
/// request's text is never cut inside a character (what `&s[..n]` would panic on).
pub fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.as_bytes()
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Decodes `%XX` escapes (invalid ones are kept as written; bytes that are not UTF-8 become
/// U+FFFD).
pub fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Page {
        Page {
            domain: "gis".into(),
            id: "gis/a<b>_1.txt".into(),
            passage: Some("gis/a<b>_1.txt".into()),
            text: "First & best.\nSame paragraph.\n\nSecond [one].".into(),
            images: vec!["gis/x/image 1.png".into()],
        }
    }

    #[test]
    fn accept_headers_pick_the_preferred_format() {
        assert_eq!(negotiate(None, Format::Json), Format::Json);
        assert_eq!(negotiate(Some("*/*"), Format::Html), Format::Html);
        assert_eq!(
            negotiate(
                Some("text/html,application/xhtml+xml,*/*;q=0.8"),
                Format::Json
            ),
            Format::Html
        );
        assert_eq!(
            negotiate(Some("text/plain;q=0.5, text/markdown"), Format::Html),
            Format::Markdown
        );
        assert_eq!(
            negotiate(Some("application/json, text/html;q=0.1"), Format::Html),
            Format::Json
        );
        assert_eq!(negotiate(Some("image/png"), Format::Html), Format::Html);
        assert_eq!(negotiate(Some("text/html;q=0"), Format::Json), Format::Json);
    }

    #[test]
    fn html_escapes_and_links_images() {
        let h = html(&page(), "http://h:1");
        assert!(h.contains("<title>gis/a&lt;b&gt;_1.txt</title>"), "{h}");
        assert!(
            h.contains("<p>First &amp; best.<br>\nSame paragraph.</p>"),
            "{h}"
        );
        assert!(
            h.contains("<img src=\"http://h:1/v1/gis/image/gis/x/image%201.png\""),
            "{h}"
        );
    }

    #[test]
    fn markdown_and_reader_text() {
        let m = markdown(&page(), "http://h:1");
        assert!(m.starts_with("# gis/a<b>_1.txt\n\nFirst & best."), "{m}");
        assert!(
            m.ends_with(
                "![Image 1: gis/x/image 1.png](http://h:1/v1/gis/image/gis/x/image%201.png)\n"
            ),
            "{m}"
        );
        let r = reader_text(&page(), "http://h:1/v1/gis/page/x", "http://h:1");
        assert!(r.starts_with("Title: gis/a<b>_1.txt\n\nURL Source: http://h:1/v1/gis/page/x\n\nMarkdown Content:\n# "), "{r}");
        let j = reader_json(&page(), "u", "http://h:1");
        assert_eq!(j.data.description, "First & best.\nSame paragraph.");
        assert_eq!(j.data.images.len(), 1);
    }

    #[test]
    fn own_links_are_recognised_by_their_path() {
        assert_eq!(
            own_link("http://127.0.0.1:8000/v1/gis/page/gis/a%20b_1.txt?x=1"),
            Some(Link::Page {
                domain: "gis".into(),
                id: "gis/a b_1.txt".into()
            })
        );
        assert_eq!(
            own_link("/v1/gis/image/gis/x.png"),
            Some(Link::Image {
                domain: "gis".into(),
                id: "gis/x.png".into()
            })
        );
        assert_eq!(own_link("https://en.wikipedia.org/wiki/Map"), None);
        assert_eq!(own_link("ftp://h/v1/gis/page/x"), None);
        assert_eq!(own_link("http://h/v1/gis/search"), None);
        assert!(is_web_url("HTTPS://x") && !is_web_url("data:image/png;base64,"));
    }

    #[test]
    fn prefixes_are_compared_without_cutting_characters() {
        assert!(starts_with_ignore_case("HTTP%3a//x", "http%3A"));
        assert!(!starts_with_ignore_case("http%3éxxx", "http%3A"));
        assert!(!starts_with_ignore_case("123456é", "http%3A"));
        assert!(!starts_with_ignore_case("é", "http://"));
        assert!(!is_web_url("httpé://x") && !is_web_url("ht"));
    }

    #[test]
    fn percent_escapes_decode() {
        assert_eq!(percent_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%41"), "A");
    }

    #[test]
    fn markdown_defuses_script_links_from_the_corpus() {
        let text = "[click](javascript:alert(1)) and [x]( JavaScript :alert(2)) \
                    <vbscript:msgbox> ![i](data:text/html,<script>) <a href=\"javascript:y\">a</a>\n\
                    [ref]: javascript:z\n\
                    [fine](https://example.org/javascript:ok) and javascript: as a word";
        let d = defuse_links(text);
        for bad in [
            "(javascript:",
            "( JavaScript :",
            "<vbscript:",
            "(data:",
            "href=\"javascript:",
            "]: javascript:",
        ] {
            assert!(!d.contains(bad), "{bad} in {d}");
        }
        for kept in [
            "(javascript%3Aalert(1))",
            "( JavaScript %3Aalert(2))",
            "<vbscript%3Amsgbox>",
            "href=\"javascript%3Ay\"",
            "[ref]: javascript%3Az",
            "[fine](https://example.org/javascript:ok)",
            "javascript: as a word",
        ] {
            assert!(d.contains(kept), "{kept} not in {d}");
        }
        let mut p = page();
        p.text = "[click](javascript:alert(1))".into();
        assert!(markdown(&p, "http://h:1").contains("(javascript%3Aalert(1))"));
        // other forms are the text as it is
        assert!(text_page_is_untouched(&p));
    }

    fn text_page_is_untouched(p: &Page) -> bool {
        text(p, "http://h:1").contains("[click](javascript:alert(1))")
    }
}
