//! Readable pages: documents and images by id, pages in HTML / Markdown / text / JSON, and
//! Jina Reader's `/r/{url}` for the service's own links.
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use sift_service::ApiError;
use sift_service::pages::{self, Format, Link};

use super::*;

/// A passage as JSON, or as its readable page when the request's `Accept` prefers HTML,
/// Markdown or text.
pub(super) async fn document(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path((domain, id)) = path.map_err(bad_path)?;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match pages::negotiate(accept, Format::Json) {
        Format::Json => s
            .run(move |svc| svc.document(&domain, &id))
            .await
            .map(|d| Json(d).into_response())
            .map_err(HttpError),
        format => render_page(&s, &headers, domain, id, format).await,
    }
}

/// `?format=` of a page.
#[derive(Deserialize)]
pub(super) struct PageQuery {
    format: Option<String>,
}

/// A passage's or image's readable page: HTML, or Markdown, text or JSON as `?format=` or
/// `Accept` asks.
pub(super) async fn page(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, HttpError> {
    let Path((domain, id)) = path.map_err(bad_path)?;
    let Query(q) = query.map_err(bad_query)?;
    let format = match q.format.as_deref() {
        Some(f) => Format::parse(f).ok_or_else(|| {
            ApiError::invalid(
                "format",
                format!("{f:?}: give html, markdown, text or json"),
            )
        })?,
        None => pages::negotiate(
            headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()),
            Format::Html,
        ),
    };
    render_page(&s, &headers, domain, id, format).await
}

pub(super) async fn render_page(
    s: &Shared,
    headers: &HeaderMap,
    domain: String,
    id: String,
    format: Format,
) -> Result<Response, HttpError> {
    let base = base_url(headers);
    let page = s.run(move |svc| svc.page(&domain, &id)).await?;
    let body = match format {
        Format::Html => pages::html(&page, &base),
        Format::Markdown => pages::markdown(&page, &base),
        Format::Text => pages::text(&page, &base),
        Format::Json => serde_json::json!({
            "domain": page.domain,
            "id": page.id,
            "passage_id": page.passage,
            "text": page.text,
            "image_ids": page.images,
        })
        .to_string(),
    };
    Ok((
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "Accept"),
        ],
        body,
    )
        .into_response())
}

/// The URL a reader request names: the path's rest, its query string appended (a URL's own
/// `?` arrives as the request's), an escaped URL (`http%3A%2F%2F...`) decoded.
pub(super) fn reader_url(path: &str, query: Option<&str>) -> String {
    let mut url = if pages::starts_with_ignore_case(path, "http%3A") {
        pages::percent_decode(path)
    } else {
        path.to_string()
    };
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    url
}

/// Jina Reader's `GET /r/{url}` for this service's own links: the page as Markdown in
/// Jina's text form (`Title:`, `URL Source:`, `Markdown Content:`), or Jina's JSON on
/// `Accept: application/json`; `X-Return-Format: html|text|markdown` gives that form alone.
pub(super) async fn reader(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let path = req.uri().path();
    let rest = path.strip_prefix("/r/").unwrap_or("");
    let url = reader_url(rest, req.uri().query());
    read_page(s, headers, url).await
}

pub(super) async fn read_page(s: Arc<Shared>, headers: HeaderMap, url: String) -> Response {
    let result: Result<Response, HttpError> = async {
        let (domain, id) = match pages::own_link(&url) {
            Some(Link::Page { domain, id } | Link::Image { domain, id }) => (domain, id),
            None => {
                return Err(ApiError::invalid(
                    "url",
                    format!(
                        "{url:?} is not a link of this service: it reads only its own pages \
                         (links in its results) and fetches nothing from outside"
                    ),
                )
                .into());
            }
        };
        let format = headers
            .get("x-return-format")
            .and_then(|v| v.to_str().ok())
            .map(|f| {
                Format::parse(f).ok_or_else(|| {
                    ApiError::invalid(
                        "X-Return-Format",
                        format!("{f:?}: give markdown, html or text"),
                    )
                })
            })
            .transpose()?;
        if let Some(format) = format {
            return render_page(&s, &headers, domain, id, format).await;
        }
        let base = base_url(&headers);
        let page = s.run(move |svc| svc.page(&domain, &id)).await?;
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        Ok(match pages::negotiate(accept, Format::Text) {
            Format::Json => Json(pages::reader_json(&page, &url, &base)).into_response(),
            _ => (
                [(header::CONTENT_TYPE, Format::Text.content_type())],
                pages::reader_text(&page, &url, &base),
            )
                .into_response(),
        })
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

pub(super) async fn image(
    State(s): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path((domain, id)) = path.map_err(bad_path)?;
    let (ct, bytes) = s.run(move |svc| svc.image(&domain, &id)).await?;
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, ct)
        .header(header::CACHE_CONTROL, "public, max-age=86400")
        .body(Body::from(Bytes::from_owner(bytes)))
        .expect("a valid response"))
}

/// The base URL links point to: the request's `Host`, else the loopback.
pub(super) fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raw UTF-8 where an escaped scheme would be (`/r/http%3éxxx`, `/r/123456é`) was cut at
    /// byte 7, inside a character: the handler panicked and the client got no answer.
    #[test]
    fn reader_urls_with_raw_utf8_do_not_panic() {
        assert_eq!(reader_url("http%3éxxx", None), "http%3éxxx");
        assert_eq!(reader_url("123456é", Some("a=1")), "123456é?a=1");
        assert_eq!(
            reader_url("HTTP%3A%2F%2Fh%2Fv1%2Fd%2Fpage%2Fé", None),
            "HTTP://h/v1/d/page/é"
        );
    }
}
