//! The shapes agent harnesses already call, made from [`Service::search`]: Serper's
//! `/search`, `/images`, `/lens`, `/videos` and `/news`, SerpAPI's `google`,
//! `google_images` and `google_lens` engines, and InterLV-Search's local knowledge-base
//! tools. Without a domain, each searches every domain the service serves, merged.
use std::collections::BTreeMap;

use sift_service::ApiError;
use sift_service::Service;
use sift_service::api::{
    CandidateKind, Hit, ImageInput, LocalResponse, LocalResult, LocalSearchRequest, SearchRequest,
    SerpApiImage, SerpApiInformation, SerpApiMetadata, SerpApiOrganic, SerpApiResponse,
    SerpApiVisualMatch, SerperEcho, SerperImage, SerperImagesResponse, SerperLens,
    SerperLensResponse, SerperOrganic, SerperParameters, SerperQuery, SerperSearchResponse,
};
use sift_service::pages::{self, Link};

/// Characters of a Serper snippet.
const SNIPPET_CHARS: usize = 300;

/// The results SerpAPI's parameters ask for: `start` (`ijn` pages images by 100) and
/// `num`, as (results to skip, results to search for), within the service's `max`.
fn serpapi_window(
    params: &BTreeMap<String, String>,
    engine: &str,
    max: usize,
) -> Result<(usize, usize), SerpApiError> {
    let num = serp_count(
        params,
        "num",
        if engine == "google_images" { 100 } else { 10 },
    )?;
    let start = match (engine, params.get("ijn")) {
        ("google_images", Some(_)) => serp_count(params, "ijn", 0)?.saturating_mul(num),
        _ => serp_count(params, "start", 0)?,
    };
    if num == 0 || num > max {
        return Err(serp_error(format!(
            "Invalid `num` parameter: give 1 to {max}."
        )));
    }
    let top_k = start
        .checked_add(num)
        .filter(|&k| k <= max)
        .ok_or_else(|| {
            serp_error(format!(
                "Invalid `start` parameter: {start} + {num} results reach past the service's {max}."
            ))
        })?;
    Ok((start, top_k))
}

/// SerpAPI's `search_metadata` of a search that began at `started`; `query` is the
/// request's, for `json_endpoint` (its `api_key` left out).
fn serpapi_metadata(base: &str, query: &str, started: std::time::Instant) -> SerpApiMetadata {
    let (now, id) = stamp();
    SerpApiMetadata {
        id,
        status: "Success".into(),
        json_endpoint: format!(
            "{base}/search.json?{}",
            query
                .split('&')
                .filter(|p| !p.starts_with("api_key="))
                .collect::<Vec<_>>()
                .join("&")
        ),
        created_at: now.clone(),
        processed_at: now,
        total_time_taken: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    }
}

fn serpapi_organic(h: Hit, base: &str) -> SerpApiOrganic {
    let link = format!("{base}{}", h.page_url.clone().unwrap_or_default());
    SerpApiOrganic {
        position: h.rank,
        displayed_link: format!("{base} › {} › {}", h.domain, h.id),
        title: h.title.unwrap_or(h.id),
        link,
        snippet: h.text.unwrap_or_default(),
        source: h.domain,
    }
}

fn serpapi_image(h: Hit, base: &str) -> SerpApiImage {
    let url = format!("{base}{}", h.image_url.clone().unwrap_or_default());
    SerpApiImage {
        position: h.rank,
        title: h.id,
        thumbnail: url.clone(),
        original: url,
        link: format!("{base}{}", h.page_url.unwrap_or_default()),
        source: h.domain,
        is_product: false,
    }
}

fn serpapi_match(h: Hit, base: &str) -> SerpApiVisualMatch {
    let url = format!("{base}{}", h.image_url.clone().unwrap_or_default());
    SerpApiVisualMatch {
        position: h.rank,
        title: h.id,
        link: format!("{base}{}", h.page_url.unwrap_or_default()),
        source: h.domain,
        thumbnail: url.clone(),
        image: url,
    }
}

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
/// else base64 bytes. Any other web URL is refused: nothing is fetched from outside.
/// Returns the domain the link names, if any; errors are about `field`.
pub fn image_ref(
    svc: &Service,
    domain: Option<&str>,
    s: &str,
    field: &str,
) -> Result<(Option<String>, ImageInput), ApiError> {
    let s = s.trim();
    if s.starts_with("data:") {
        return Ok((None, data(s)));
    }
    match pages::own_link(s) {
        Some(Link::Image { domain, id }) => {
            return Ok((
                Some(domain),
                ImageInput {
                    image_id: Some(id),
                    ..ImageInput::default()
                },
            ));
        }
        Some(Link::Page { .. }) => {
            return Err(ApiError::invalid(
                field,
                format!(
                    "{s:?} is a page of this service, not an image: give one of its image \
                     links (imageUrl), a data: URL or base64"
                ),
            ));
        }
        None if pages::is_web_url(s) => {
            return Err(ApiError::invalid(
                field,
                format!(
                    "{s:?} is not a link this service gave out, and it fetches nothing from \
                     outside: give one of its image links (imageUrl), a data: URL or base64"
                ),
            ));
        }
        None => {}
    }
    if svc.knows_image(domain, s) {
        return Ok((
            None,
            ImageInput {
                image_id: Some(s.to_string()),
                ..ImageInput::default()
            },
        ));
    }
    Ok((None, data(s)))
}

fn data(s: &str) -> ImageInput {
    ImageInput {
        data: Some(s.to_string()),
        ..ImageInput::default()
    }
}

/// Errors about the search request's `from` field (or its members) are about `to`.
fn rename_field(mut e: ApiError, from: &str, to: &str) -> ApiError {
    if let Some(f) = &e.field
        && (f == from || f.starts_with(&format!("{from}[")) || f.starts_with(&format!("{from}.")))
    {
        e.field = Some(to.to_string());
    }
    e
}

/// A count in a JSON value: a number or a string of digits.
fn count_of(v: &serde_json::Value) -> Option<usize> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().map(|n| n as usize),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Checks `num` results per page and the 1-based `page` against the service's limit;
/// returns how many to rank (`num * page`).
fn paging(svc: &Service, num: usize, page: usize) -> Result<usize, ApiError> {
    let max = svc.limits().max_top_k;
    if num == 0 || num > max {
        return Err(ApiError::invalid("num", format!("{num}: give 1 to {max}")));
    }
    if page == 0 {
        return Err(ApiError::invalid("page", "pages count from 1"));
    }
    match num.checked_mul(page) {
        Some(k) if k <= max => Ok(k),
        _ => Err(ApiError::invalid(
            "page",
            format!("page {page} of {num} results reaches past the service's {max} results"),
        )),
    }
}

/// The page a Serper query asks for: `page`, or `extendParams.page`.
fn serper_page(req: &SerperQuery) -> usize {
    req.extend_params
        .as_ref()
        .and_then(|e| e.get("page"))
        .and_then(count_of)
        .unwrap_or(req.page)
}

fn parameters(req: &SerperQuery, kind: &str, page: usize) -> SerperParameters {
    SerperParameters {
        q: Some(req.q.clone()),
        url: None,
        kind: kind.to_string(),
        num: req.num,
        page,
        echo: req.echo.clone(),
        engine: "sift".into(),
    }
}

/// Runs a search for page `page` of `num` hits; returns the page's hits.
fn paged(
    svc: &Service,
    mut search: SearchRequest,
    num: usize,
    page: usize,
    query_field: &str,
) -> Result<Vec<Hit>, ApiError> {
    search.top_k = paging(svc, num, page)?;
    let res = svc
        .search(&search)
        .map_err(|e| rename_field(e, "query", query_field))?;
    Ok(res.hits.into_iter().skip((page - 1) * num).collect())
}

/// Serper's `/search`: passages as organic results, every domain merged unless one is named.
pub fn serper_search(
    svc: &Service,
    req: &SerperQuery,
    base: &str,
) -> Result<SerperSearchResponse, ApiError> {
    let (hits, page) = serper_hits(svc, req, CandidateKind::Passages, SNIPPET_CHARS)?;
    Ok(SerperSearchResponse {
        search_parameters: parameters(req, "search", page),
        organic: hits.into_iter().map(|h| organic(h, base, false)).collect(),
    })
}

/// Bing Web Search v7's `GET /v7.0/search`: passages as `webPages.value[]`, every domain
/// merged; `count` (1 to 50, default 10) from `offset` (default 0).
pub fn bing_search(
    svc: &Service,
    req: &sift_service::api::BingQuery,
    base: &str,
    query: &str,
) -> Result<sift_service::api::BingResponse, ApiError> {
    use sift_service::api::{BingQueryContext, BingResponse, BingWebPage, BingWebPages};
    let number = |field: &str, v: &Option<String>, default: usize, max: usize| match v {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| ApiError::invalid(field, format!("{v:?}: give 0 to {max}"))),
    };
    let count = number("count", &req.count, 10, 50)?.max(1);
    let offset = number("offset", &req.offset, 0, svc.limits().max_top_k)?;
    let search = SearchRequest {
        query: req.q.clone(),
        top_k: (offset + count).min(svc.limits().max_top_k),
        max_text_chars: Some(SNIPPET_CHARS),
        ..SearchRequest::default()
    };
    let hits = svc
        .search(&search)
        .map_err(|e| rename_field(e, "query", "q"))?
        .hits;
    let total = hits.len();
    let web_search_url = format!("{base}/v7.0/search?{query}");
    let value = hits
        .into_iter()
        .skip(offset)
        .enumerate()
        .map(|(i, h)| {
            let url = format!("{base}{}", h.page_url.clone().unwrap_or_default());
            BingWebPage {
                id: format!("{web_search_url}#WebPages.{}", offset + i),
                name: h.title.unwrap_or(h.id),
                display_url: url.clone(),
                url,
                snippet: h.text.unwrap_or_default(),
                site_name: h.domain,
                is_family_friendly: true,
            }
        })
        .collect();
    Ok(BingResponse {
        kind: "SearchResponse".into(),
        query_context: BingQueryContext {
            original_query: req.q.clone(),
        },
        web_pages: BingWebPages {
            web_search_url,
            total_estimated_matches: total,
            value,
        },
    })
}

/// The page of hits a Serper text query asks for, and the page's number.
fn serper_hits(
    svc: &Service,
    req: &SerperQuery,
    candidates: CandidateKind,
    text_chars: usize,
) -> Result<(Vec<Hit>, usize), ApiError> {
    let page = serper_page(req);
    let search = SearchRequest {
        query: req.q.clone(),
        domain: req.domain.clone().filter(|d| !d.is_empty()),
        candidates,
        max_text_chars: Some(text_chars),
        ..SearchRequest::default()
    };
    Ok((paged(svc, search, req.num, page, "q")?, page))
}

/// A hit as a Serper organic result; `with_image`: with its `imageUrl` (a visual match).
fn organic(h: Hit, base: &str, with_image: bool) -> SerperOrganic {
    let image = with_image
        .then(|| h.image_url.as_ref().map(|u| format!("{base}{u}")))
        .flatten();
    SerperOrganic {
        link: format!("{base}{}", h.page_url.unwrap_or_default()),
        title: h.title.unwrap_or(h.id),
        snippet: h.text.unwrap_or_default(),
        source: h.domain,
        position: h.rank,
        thumbnail_url: image.clone(),
        image_url: image,
    }
}

/// Serper's `/images`: corpus images for a text query.
pub fn serper_images(
    svc: &Service,
    req: &SerperQuery,
    base: &str,
) -> Result<SerperImagesResponse, ApiError> {
    let (hits, page) = serper_hits(svc, req, CandidateKind::Images, 0)?;
    Ok(SerperImagesResponse {
        search_parameters: parameters(req, "images", page),
        images: hits.into_iter().map(|h| image_result(h, base)).collect(),
    })
}

fn image_result(h: Hit, base: &str) -> SerperImage {
    let url = format!("{base}{}", h.image_url.unwrap_or_default());
    SerperImage {
        title: h.id,
        link: format!("{base}{}", h.page_url.unwrap_or_default()),
        thumbnail_url: url.clone(),
        image_url: url,
        source: h.domain,
        position: h.rank,
    }
}

/// Serper's `/videos` and `/news`: the documented shapes, empty (the index holds neither).
pub fn serper_nothing(req: &SerperQuery, kind: &str) -> Result<SerperParameters, ApiError> {
    if req.q.trim().is_empty() {
        return Err(ApiError::invalid("q", "give a query"));
    }
    Ok(parameters(req, kind, serper_page(req)))
}

/// Serper's `/lens`: corpus images like the given one, as organic results with their
/// `imageUrl` (the link: the image's page).
pub fn serper_lens(
    svc: &Service,
    req: &SerperLens,
    base: &str,
) -> Result<SerperLensResponse, ApiError> {
    let domain = req.domain.as_deref().filter(|d| !d.is_empty());
    let (hits, _) = lens(svc, &req.url, domain, req.num, req.page)?;
    Ok(SerperLensResponse {
        search_parameters: SerperParameters {
            q: None,
            url: Some(req.url.clone()),
            kind: "lens".into(),
            num: req.num,
            page: req.page,
            echo: SerperEcho {
                gl: req.rest.get("gl").cloned(),
                hl: req.rest.get("hl").cloned(),
                ..SerperEcho::default()
            },
            engine: "sift".into(),
        },
        organic: hits.into_iter().map(|h| organic(h, base, true)).collect(),
    })
}

/// Corpus images like the image `url` names: page `page` of `num`, with the domain searched.
fn lens(
    svc: &Service,
    url: &str,
    domain: Option<&str>,
    num: usize,
    page: usize,
) -> Result<(Vec<Hit>, Option<String>), ApiError> {
    if url.trim().is_empty() {
        return Err(ApiError::invalid("url", "give the image's URL"));
    }
    let (linked, image) = image_ref(svc, domain, url, "url")?;
    let domain = domain.map(str::to_string).or(linked);
    let hits = paged(
        svc,
        SearchRequest {
            images: vec![image],
            domain: domain.clone(),
            candidates: CandidateKind::Images,
            max_text_chars: Some(SNIPPET_CHARS),
            ..SearchRequest::default()
        },
        num,
        page,
        "url",
    )
    .map_err(|e| rename_field(e, "images", "url"))?;
    Ok((hits, domain))
}

/// A SerpAPI failure: its status and message (answered as `{"error": message}`).
#[derive(Debug, Clone)]
pub struct SerpApiError {
    /// HTTP status.
    pub status: u16,
    /// The `error` string.
    pub message: String,
}

impl From<ApiError> for SerpApiError {
    fn from(e: ApiError) -> SerpApiError {
        let e = e.for_client();
        SerpApiError {
            status: e.kind.status(),
            message: match &e.field {
                Some(f) => format!("{f}: {}", e.message),
                None => e.message.clone(),
            },
        }
    }
}

fn serp_error(message: impl Into<String>) -> SerpApiError {
    SerpApiError {
        status: 400,
        message: message.into(),
    }
}

/// A SerpAPI count parameter: absent gives `default`.
fn serp_count(
    params: &BTreeMap<String, String>,
    name: &str,
    default: usize,
) -> Result<usize, SerpApiError> {
    match params.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| {
            serp_error(format!(
                "Invalid `{name}` parameter: {v:?} is not a whole number."
            ))
        }),
    }
}

/// Days since 1970-01-01 as (year, month, day) (the proleptic Gregorian calendar).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Now, as SerpAPI writes times (`2026-12-03 16:10:27 UTC`), and a search id.
fn stamp() -> (String, String) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    (
        format!(
            "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
            t / 3600,
            t / 60 % 60,
            t % 60
        ),
        format!("{:x}", now.as_nanos()),
    )
}

/// SerpAPI's `GET /search` and `/search.json`: `engine=google` (the default: passages as
/// `organic_results`), `google_images` (`images_results`) and `google_lens` (`url`:
/// `visual_matches`), with `q`, `num`, `start` (`ijn` pages images by 100), `gl`, `hl`,
/// `location` accepted; `domain` (Sift's) names one domain. `path` and `query` are the
/// request's, for `json_endpoint`.
pub fn serpapi(
    svc: &Service,
    params: &BTreeMap<String, String>,
    base: &str,
    query: &str,
) -> Result<SerpApiResponse, SerpApiError> {
    let started = std::time::Instant::now();
    let engine = params.get("engine").map_or("google", String::as_str);
    let domain = params
        .get("domain")
        .filter(|d| !d.is_empty())
        .map(String::to_string);
    let q = params.get("q").map(|q| q.trim()).unwrap_or("");
    let (start, top_k) = serpapi_window(params, engine, svc.limits().max_top_k)?;
    let missing_q = || serp_error("Missing query `q` parameter.");
    let text_search = |candidates| -> Result<Vec<Hit>, SerpApiError> {
        if q.is_empty() {
            return Err(missing_q());
        }
        let res = svc
            .search(&SearchRequest {
                query: q.to_string(),
                domain: domain.clone(),
                top_k,
                candidates,
                max_text_chars: Some(SNIPPET_CHARS),
                ..SearchRequest::default()
            })
            .map_err(|e| rename_field(e, "query", "q"))?;
        Ok(res.hits.into_iter().skip(start).collect())
    };
    let (mut organic, mut images, mut matches) = (None, None, None);
    let found = match engine {
        "google" => {
            let hits = text_search(CandidateKind::Passages)?;
            let n = hits.len();
            organic = Some(hits.into_iter().map(|h| serpapi_organic(h, base)).collect());
            n
        }
        "google_images" => {
            let hits = text_search(CandidateKind::Images)?;
            let n = hits.len();
            images = Some(hits.into_iter().map(|h| serpapi_image(h, base)).collect());
            n
        }
        "google_lens" => {
            let url = params
                .get("url")
                .map(|u| u.trim())
                .filter(|u| !u.is_empty())
                .ok_or_else(|| serp_error("Missing query `url` parameter."))?;
            let (linked, image) = image_ref(svc, domain.as_deref(), url, "url")?;
            let res = svc
                .search(&SearchRequest {
                    images: vec![image],
                    domain: domain.clone().or(linked),
                    top_k,
                    candidates: CandidateKind::Images,
                    max_text_chars: Some(0),
                    ..SearchRequest::default()
                })
                .map_err(|e| rename_field(e, "images", "url"))?;
            let hits: Vec<Hit> = res.hits.into_iter().skip(start).collect();
            let n = hits.len();
            matches = Some(hits.into_iter().map(|h| serpapi_match(h, base)).collect());
            n
        }
        other => {
            return Err(serp_error(format!("Unsupported `{other}` search engine.")));
        }
    };
    Ok(SerpApiResponse {
        search_metadata: serpapi_metadata(base, query, started),
        search_parameters: params
            .iter()
            .filter(|(k, _)| k.as_str() != "api_key")
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain(
                (!params.contains_key("engine"))
                    .then(|| ("engine".to_string(), "google".to_string())),
            )
            .collect(),
        search_information: SerpApiInformation {
            organic_results_state: if found > 0 {
                "Results for exact spelling".into()
            } else {
                "Fully empty".into()
            },
            query_displayed: (!q.is_empty()).then(|| q.to_string()),
            total_results: found,
        },
        organic_results: organic,
        images_results: images,
        visual_matches: matches,
        error: (found == 0).then(|| "Google hasn't returned any results for this query.".into()),
    })
}

/// InterLV-Search's local tools.
pub fn local(
    svc: &Service,
    req: &LocalSearchRequest,
    tool: LocalTool,
) -> Result<LocalResponse, ApiError> {
    let images = match (tool, &req.image) {
        (LocalTool::Image, Some(s)) => vec![image_ref(svc, req.domain.as_deref(), s, "image")?],
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
                LocalTool::Text => CandidateKind::Passages,
                LocalTool::TextToImage | LocalTool::Image => CandidateKind::Images,
            },
            max_text_chars: Some(req.max_text_chars),
            ..SearchRequest::default()
        })
        .map_err(|e| rename_field(e, "images", "image"))?;
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
                        .is_some_and(|p| svc.page_image_count(&h.domain, p) > 0),
                entity_id: h.id,
                score: h.score,
                text: h.text.unwrap_or_default(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::civil;

    #[test]
    fn days_become_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_425), (2025, 12, 3));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(-1), (1969, 12, 31));
    }
}
