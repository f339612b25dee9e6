//! The shapes agent harnesses already call, made from [`Service::search`]: Serper's
//! `/search`, `/images` and `/lens`, and InterLV-Search's local knowledge-base tools.
use crate::api::{
    Candidates, ImageInput, LocalResponse, LocalResult, LocalSearchRequest, SearchRequest,
    SerperImage, SerperImagesResponse, SerperLens, SerperLensResponse, SerperOrganic,
    SerperParameters, SerperQuery, SerperSearchResponse,
};
use crate::error::ApiError;
use crate::service::Service;

/// Characters of a Serper snippet.
const SNIPPET_CHARS: usize = 300;

/// InterLV-Search's local tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalTool {
    /// `local_text_search`: text -> passages.
    Text,
    /// `local_text_to_image_search`: text -> corpus images.
    TextToImage,
    /// `local_image_search`: image -> corpus images.
    Image,
}

/// An image named by a string, as agents pass them: a data URL, a link this service gave
/// out (`http://host/v1/{domain}/image/{id}`: its domain and id), a corpus image id, or
/// else base64 bytes. Returns the domain the link names, if any.
pub fn image_ref(svc: &Service, domain: Option<&str>, s: &str) -> (Option<String>, ImageInput) {
    let s = s.trim();
    if s.starts_with("data:") {
        return (None, data(s));
    }
    if let Some(at) = s.find("/v1/") {
        let rest = &s[at + 4..];
        if let Some((d, id)) = rest.split_once("/image/")
            && !d.contains('/')
        {
            let (d, id) = (percent_decode(d), percent_decode(id));
            return (
                Some(d),
                ImageInput {
                    image_id: Some(id),
                    ..ImageInput::default()
                },
            );
        }
    }
    if svc.knows_image(domain, s) {
        return (
            None,
            ImageInput {
                image_id: Some(s.to_string()),
                ..ImageInput::default()
            },
        );
    }
    (None, data(s))
}

fn data(s: &str) -> ImageInput {
    ImageInput {
        data: Some(s.to_string()),
        ..ImageInput::default()
    }
}

/// Decodes `%XX` escapes (invalid ones are kept as written).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parameters(q: &str, kind: &str, num: usize) -> SerperParameters {
    SerperParameters {
        q: q.to_string(),
        kind: kind.to_string(),
        num,
        engine: "sift".into(),
    }
}

fn domain_of(rest: &std::collections::BTreeMap<String, serde_json::Value>) -> Option<String> {
    rest.get("domain")
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// Serper's `POST /search`: passages as organic results.
pub fn serper_search(
    svc: &Service,
    req: &SerperQuery,
    base: &str,
) -> Result<SerperSearchResponse, ApiError> {
    let res = svc.search(&SearchRequest {
        query: req.q.clone(),
        domain: domain_of(&req.rest),
        top_k: req.num,
        max_text_chars: Some(SNIPPET_CHARS),
        ..SearchRequest::default()
    })?;
    Ok(SerperSearchResponse {
        search_parameters: parameters(&req.q, "search", req.num),
        organic: organic(res.hits, base),
    })
}

fn organic(hits: Vec<crate::api::Hit>, base: &str) -> Vec<SerperOrganic> {
    hits.into_iter()
        .map(|h| SerperOrganic {
            link: format!("{base}{}", h.passage_url.unwrap_or_default()),
            title: h.id,
            snippet: h.text.unwrap_or_default(),
            position: h.rank,
        })
        .collect()
}

/// Serper's `POST /images`: corpus images for a text query.
pub fn serper_images(
    svc: &Service,
    req: &SerperQuery,
    base: &str,
) -> Result<SerperImagesResponse, ApiError> {
    let res = svc.search(&SearchRequest {
        query: req.q.clone(),
        domain: domain_of(&req.rest),
        top_k: req.num,
        candidates: Candidates::Images,
        max_text_chars: Some(0),
        ..SearchRequest::default()
    })?;
    Ok(SerperImagesResponse {
        search_parameters: parameters(&req.q, "images", req.num),
        images: image_results(svc, &res.domain, res.hits, base),
    })
}

/// Image hits as Serper's image results: the image on this service, linked to its page.
fn image_results(
    svc: &Service,
    domain: &str,
    hits: Vec<crate::api::Hit>,
    base: &str,
) -> Vec<SerperImage> {
    hits.into_iter()
        .map(|h| {
            let url = format!("{base}{}", h.image_url.unwrap_or_default());
            let page = svc
                .image_page(domain, &h.id)
                .map(|p| format!("{base}{}", crate::service::document_path(domain, &p)));
            SerperImage {
                title: h.id,
                link: page.unwrap_or_else(|| url.clone()),
                thumbnail_url: url.clone(),
                image_url: url,
                source: "sift".into(),
                position: h.rank,
            }
        })
        .collect()
}

/// Serper's `POST /lens`: corpus images like the given one, and the passages it retrieves.
pub fn serper_lens(
    svc: &Service,
    req: &SerperLens,
    base: &str,
) -> Result<SerperLensResponse, ApiError> {
    let asked = domain_of(&req.rest);
    let (linked, image) = image_ref(svc, asked.as_deref(), &req.url);
    let domain = asked.or(linked);
    let search = |candidates, chars| {
        svc.search(&SearchRequest {
            images: vec![image.clone()],
            domain: domain.clone(),
            top_k: req.num,
            candidates,
            max_text_chars: Some(chars),
            ..SearchRequest::default()
        })
        .map_err(|e| rename_images_field(e, "url"))
    };
    let images = search(Candidates::Images, 0)?;
    let passages = search(Candidates::Passages, SNIPPET_CHARS)?;
    Ok(SerperLensResponse {
        search_parameters: parameters(&req.url, "lens", req.num),
        visual_matches: image_results(svc, &images.domain, images.hits, base),
        organic: organic(passages.hits, base),
    })
}

/// Errors about the one request image are about the field the caller gave it in.
fn rename_images_field(mut e: ApiError, field: &str) -> ApiError {
    if let Some(f) = &e.field
        && f.starts_with("images")
    {
        e.field = Some(field.to_string());
    }
    e
}

/// InterLV-Search's local tools.
pub fn local(
    svc: &Service,
    req: &LocalSearchRequest,
    tool: LocalTool,
) -> Result<LocalResponse, ApiError> {
    let images = match (tool, &req.image) {
        (LocalTool::Image, Some(s)) => vec![image_ref(svc, req.domain.as_deref(), s)],
        (LocalTool::Image, None) => {
            return Err(ApiError::invalid(
                "image",
                "local_image_search takes an image",
            ));
        }
        (_, Some(_)) => {
            return Err(ApiError::invalid(
                "image",
                "only local_image_search takes an image",
            ));
        }
        (_, None) => Vec::new(),
    };
    let domain = req
        .domain
        .clone()
        .or_else(|| images.first().and_then(|(d, _)| d.clone()));
    let res = svc
        .search(&SearchRequest {
            query: if tool == LocalTool::Image {
                String::new()
            } else {
                req.query.clone()
            },
            images: images.into_iter().map(|(_, i)| i).collect(),
            retriever: req.retriever.clone(),
            domain,
            top_k: req.top_k,
            candidates: match tool {
                LocalTool::Text => Candidates::Passages,
                LocalTool::TextToImage | LocalTool::Image => Candidates::Images,
            },
            max_text_chars: Some(req.max_text_chars),
            ..SearchRequest::default()
        })
        .map_err(|e| rename_images_field(e, "image"))?;
    let d = res.domain.clone();
    Ok(LocalResponse {
        source: "local_kb".into(),
        results: res
            .hits
            .into_iter()
            .map(|h| LocalResult {
                rank: h.rank,
                has_image: h.has_image
                    || h.passage_id
                        .as_deref()
                        .is_some_and(|p| svc.page_image_count(&d, p) > 0),
                entity_id: h.id,
                score: h.score,
                text: h.text.unwrap_or_default(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_escapes_decode() {
        assert_eq!(percent_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
