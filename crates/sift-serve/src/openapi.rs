//! The OpenAPI 3.1 document of the HTTP API (`GET /openapi.json`), its schemas generated
//! from the request and response types ([`crate::api`]), so the two cannot drift apart.
use std::sync::LazyLock;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Value, json};

use crate::api::*;

static DOCUMENT: LazyLock<Value> = LazyLock::new(build);

/// The document.
pub fn document() -> &'static Value {
    &DOCUMENT
}

fn build() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut g: SchemaGenerator = settings.into_generator();
    let r = |schema: schemars::Schema| serde_json::to_value(schema).expect("a schema");
    let search_req = r(g.subschema_for::<SearchRequest>());
    let search_res = r(g.subschema_for::<SearchResponse>());
    let index_info = r(g.subschema_for::<IndexInfo>());
    let fuse_req = r(g.subschema_for::<FuseRequest>());
    let fuse_res = r(g.subschema_for::<FuseResponse>());
    let eval_req = r(g.subschema_for::<EvalRequest>());
    let eval_res = r(g.subschema_for::<EvalResponse>());
    let local_req = r(g.subschema_for::<LocalSearchRequest>());
    let local_res = r(g.subschema_for::<LocalResponse>());
    let document = r(g.subschema_for::<Document>());
    let serper_q = r(g.subschema_for::<SerperQuery>());
    let serper_lens = r(g.subschema_for::<SerperLens>());
    let serper_search = r(g.subschema_for::<SerperSearchResponse>());
    let serper_images = r(g.subschema_for::<SerperImagesResponse>());
    let serper_lens_res = r(g.subschema_for::<SerperLensResponse>());
    let serper_videos = r(g.subschema_for::<SerperVideosResponse>());
    let serper_news = r(g.subschema_for::<SerperNewsResponse>());
    let serpapi_res = r(g.subschema_for::<SerpApiResponse>());
    let reader_res = r(g.subschema_for::<ReaderResponse>());
    let emb_req = r(g.subschema_for::<EmbeddingsRequest>());
    let emb_res = r(g.subschema_for::<EmbeddingsResponse>());
    let model_list = r(g.subschema_for::<ModelList>());
    let health = r(g.subschema_for::<Health>());
    let error = r(g.subschema_for::<ErrorBody>());
    let schemas = Value::Object(g.take_definitions(true));

    let errors = |codes: &[&str]| {
        let mut m = serde_json::Map::new();
        // any request can be cut short by the connection's limits
        for c in codes.iter().chain(&["414", "431"]) {
            m.insert(
                (*c).to_string(),
                json!({"description": describe(c), "content": {"application/json": {"schema": error}}}),
            );
        }
        m
    };
    let post = |summary: &str, req: &Value, res: &Value| {
        let mut responses = errors(&["400", "408", "413", "415", "503", "504"]);
        responses.insert(
            "200".into(),
            json!({"description": "OK", "content": {"application/json": {"schema": res}}}),
        );
        json!({"post": {
            "summary": summary,
            "requestBody": {"required": true, "content": {"application/json": {"schema": req}}},
            "responses": responses,
        }})
    };
    let get = |summary: &str, params: Value, res: Value, codes: &[&str]| {
        let mut responses = errors(codes);
        responses.insert("200".into(), json!({"description": "OK", "content": res}));
        json!({"get": {"summary": summary, "parameters": params, "responses": responses}})
    };
    let upload_responses = {
        let mut r = errors(&["400", "404", "408", "413", "503", "504"]);
        r.insert(
            "200".into(),
            json!({"description": "OK", "content": {"application/json": {"schema": search_res}}}),
        );
        r
    };
    let path_param = |name: &str, what: &str| {
        json!({"name": name, "in": "path", "required": true, "description": what,
               "schema": {"type": "string"}})
    };
    let as_json = |s: &Value| json!({"application/json": {"schema": s}});
    let query_param = |name: &str, required: bool, schema: Value, what: &str| {
        json!({"name": name, "in": "query", "required": required, "description": what,
               "schema": schema})
    };
    let text = || json!({"type": "string"});
    let count = |min: u64| json!({"type": "integer", "minimum": min});
    // Serper's query, as GET parameters
    let serper_params = |first: Value| {
        json!([
            first,
            query_param("num", false, count(1), "Results per page (default 10)"),
            query_param("page", false, count(1), "1-based page"),
            query_param("gl", false, text(), "Country (echoed)"),
            query_param("hl", false, text(), "Language (echoed)"),
            query_param("location", false, text(), "Location (echoed)"),
            query_param(
                "tbs",
                false,
                text(),
                "Time filter (echoed; passages have no dates)"
            ),
            query_param(
                "domain",
                false,
                text(),
                "Domain (default: every domain served)"
            ),
            query_param(
                "api_key",
                false,
                text(),
                "API key (checked with --api-key, else ignored)"
            ),
        ])
    };
    let q_param = query_param("q", true, text(), "Query text");
    // Serper: POST a query or a JSON array of them (a batch); GET with parameters
    let serper = |summary: &str, req: &Value, res: &Value, first: Value| {
        let mut responses = errors(&["400", "401", "408", "413", "415", "503", "504"]);
        responses.insert(
            "200".into(),
            json!({"description": "OK (a list for a batch)", "content": {"application/json": {
                "schema": {"oneOf": [res, {"type": "array", "items": res}]}}}}),
        );
        let mut get_responses = errors(&["400", "401", "503", "504"]);
        get_responses.insert(
            "200".into(),
            json!({"description": "OK", "content": as_json(res)}),
        );
        json!({
            "post": {
                "summary": summary,
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "oneOf": [req, {"type": "array", "items": req, "maxItems": 100}]}}}},
                "responses": responses,
            },
            "get": {"summary": summary, "parameters": serper_params(first), "responses": get_responses},
        })
    };
    let serp_error = json!({"type": "object", "required": ["error"],
                            "properties": {"error": {"type": "string"}}});
    let serpapi_params = json!([
        query_param(
            "engine",
            false,
            json!({"type": "string"}),
            "google (default: passages), google_images or google_lens; others are answered {\"error\"} (400)"
        ),
        query_param("q", false, text(), "Query text (google, google_images)"),
        query_param(
            "url",
            false,
            text(),
            "Image URL (google_lens): a link of this service, a data: URL or base64"
        ),
        query_param(
            "num",
            false,
            count(0),
            "Results (default 10; 100 for images)"
        ),
        query_param("start", false, count(0), "Results to skip"),
        query_param("ijn", false, count(0), "Page of images (google_images)"),
        query_param("gl", false, text(), "Country (echoed)"),
        query_param("hl", false, text(), "Language (echoed)"),
        query_param("location", false, text(), "Location (echoed)"),
        query_param(
            "domain",
            false,
            text(),
            "Domain (default: every domain served)"
        ),
        query_param(
            "api_key",
            false,
            text(),
            "API key (checked with --api-key, else ignored)"
        ),
    ]);
    // GET /search answers as Serper without `engine` (the service's error body), as SerpAPI
    // with it (`{"error": "..."}`)
    let serpapi_responses = |serper_too: bool| {
        let (ok, failed) = if serper_too {
            (
                json!({"oneOf": [serpapi_res, serper_search]}),
                json!({"oneOf": [serp_error, error]}),
            )
        } else {
            (serpapi_res.clone(), serp_error.clone())
        };
        json!({
            "200": {"description": "OK (an `error` field when nothing was found)", "content": as_json(&ok)},
            "400": {"description": "Bad parameters or an unknown engine", "content": as_json(&failed)},
            "401": {"description": "Wrong or missing API key", "content": as_json(&failed)},
            "404": {"description": "No such domain", "content": as_json(&failed)},
            "414": {"description": describe("414"), "content": as_json(&error)},
            "431": {"description": describe("431"), "content": as_json(&error)},
            "503": {"description": "Every worker busy", "content": as_json(&failed)},
            "504": {"description": "Time limit passed", "content": as_json(&failed)},
        })
    };
    let page_content = json!({
        "text/html": {"schema": {"type": "string"}},
        "text/markdown": {"schema": {"type": "string"}},
        "text/plain": {"schema": {"type": "string"}},
        "application/json": {"schema": {"type": "object"}},
    });

    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Sift search service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Offline multimodal retrieval over a Sift index: passages, corpus \
                images and passage+image pairs, by text, images or both; Serper-compatible \
                /search, /images, /lens, /videos and /news (GET and POST); SerpAPI-compatible \
                GET /search and /search.json; readable pages and a Jina-Reader-compatible \
                /r/{url}; OpenAI-compatible /v1/embeddings; MCP at /mcp. Without a domain, a \
                search covers every domain served, merged into one ranking.",
        },
        "paths": {
            "/healthz": get("Liveness and requests in flight", json!([]), as_json(&health), &[]),
            "/v1/indexes": get("Domains, retrievers and models served", json!([]), as_json(&index_info), &[]),
            "/v1/search": post("Search passages, images or pairs by text and/or images (reverse image and crop search: images without text, with bbox)", &search_req, &search_res),
            "/v1/reverse_image_search": {"post": {
                "summary": "Reverse image search with the image file as the body",
                "parameters": [
                    {"name": "domain", "in": "query", "required": false, "schema": {"type": "string"}},
                    {"name": "candidates", "in": "query", "required": false,
                     "schema": {"type": "string", "enum": ["passages", "images", "pairs"]}},
                    {"name": "top_k", "in": "query", "required": false,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "retriever", "in": "query", "required": false, "schema": {"type": "string"}},
                    {"name": "query", "in": "query", "required": false, "schema": {"type": "string"}},
                    {"name": "bbox", "in": "query", "required": false,
                     "description": "x1,y1,x2,y2 on the 0-1000 scale", "schema": {"type": "string"}},
                    {"name": "max_text_chars", "in": "query", "required": false,
                     "schema": {"type": "integer", "minimum": 0}},
                ],
                "requestBody": {"required": true, "content": {
                    "image/*": {"schema": {"type": "string", "format": "binary"}},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                }},
                "responses": upload_responses,
            }},
            "/v1/fuse": post("Fuse result lists (RRF or weighted)", &fuse_req, &fuse_res),
            "/v1/eval": post("Score a run against qrels as trec_eval does", &eval_req, &eval_res),
            "/v1/local_text_search": post("InterLV-Search local_text_search: text -> passages", &local_req, &local_res),
            "/v1/local_text_to_image_search": post("InterLV-Search local_text_to_image_search: text -> images", &local_req, &local_res),
            "/v1/local_image_search": post("InterLV-Search local_image_search: image -> images", &local_req, &local_res),
            "/v1/models": get("OpenAI-compatible model list", json!([]), as_json(&model_list), &[]),
            "/v1/embeddings": post("OpenAI-compatible embeddings (texts; images as data URLs)", &emb_req, &emb_res),
            "/v1/{domain}/search": get(
                "pyserini-style REST search",
                json!([
                    path_param("domain", "Domain"),
                    {"name": "query", "in": "query", "required": true, "schema": {"type": "string"}},
                    {"name": "hits", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1}},
                    {"name": "retriever", "in": "query", "required": false, "schema": {"type": "string"}},
                ]),
                as_json(&search_res),
                &["400", "404"],
            ),
            "/v1/{domain}/doc/{id}": get(
                "A passage by id (ids may hold /)",
                json!([path_param("domain", "Domain"), path_param("id", "Passage id")]),
                as_json(&document),
                &["404"],
            ),
            "/v1/{domain}/image/{id}": get(
                "A corpus image's bytes",
                json!([path_param("domain", "Domain"), path_param("id", "Image id")]),
                json!({"image/*": {"schema": {"type": "string", "format": "binary"}}}),
                &["404"],
            ),
            "/v1/{domain}/page/{id}": get(
                "The readable page of a passage (its text and its page's images) or of an image: HTML, or Markdown, text or JSON by ?format= or Accept",
                json!([
                    path_param("domain", "Domain"),
                    path_param("id", "Passage or image id"),
                    query_param("format", false, json!({"type": "string", "enum": ["html", "markdown", "md", "text", "txt", "json"]}), "Format (default: by Accept, else HTML)"),
                ]),
                page_content.clone(),
                &["400", "401", "404"],
            ),
            "/r/{url}": get(
                "Jina-Reader-compatible page reader for this service's own links: Jina's text form (Title, URL Source, Markdown Content), or its JSON on Accept: application/json",
                json!([path_param("url", "A link this service gave out (other URLs: 400)")]),
                json!({"text/plain": {"schema": {"type": "string"}}, "application/json": {"schema": reader_res}}),
                &["400", "401", "404"],
            ),
            "/search": {
                "post": serper("Serper-compatible web search over passages (every domain unless one is named)", &serper_q, &serper_search, q_param.clone())["post"].clone(),
                "get": {
                    "summary": "Serper's search by GET (smolagents), or SerpAPI's when `engine` is given",
                    "parameters": serper_params(q_param.clone()),
                    "responses": serpapi_responses(true),
                },
            },
            "/search.json": {"get": {
                "summary": "SerpAPI-compatible search: engine=google, google_images, google_lens",
                "parameters": serpapi_params,
                "responses": serpapi_responses(false),
            }},
            "/images": serper("Serper-compatible image search", &serper_q, &serper_images, q_param.clone()),
            "/lens": serper("Serper-compatible reverse image search (visual matches as organic results with imageUrl)", &serper_lens, &serper_lens_res,
                query_param("url", true, text(), "Image URL: a link of this service, a data: URL or base64")),
            "/videos": serper("Serper's videos shape (always empty: the index holds no videos)", &serper_q, &serper_videos, q_param.clone()),
            "/news": serper("Serper's news shape (always empty: the index holds no news)", &serper_q, &serper_news, q_param.clone()),
        },
        "components": {"schemas": schemas},
    })
}

fn describe(code: &str) -> &'static str {
    match code {
        "400" => "Invalid request (the field at fault is named)",
        "401" => "Wrong or missing API key (sift serve --api-key)",
        "404" => "No such domain, passage or image",
        "408" => "Body not received within the body timeout",
        "413" => "Body or image too large",
        "414" => "URI too long",
        "415" => "Body not JSON",
        "431" => "Headers too large",
        "503" => "Every worker busy",
        "504" => "Time limit passed",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_reference_resolves() {
        let doc = super::document();
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &part[..part.find('"').unwrap()];
            assert!(
                schemas.contains_key(name),
                "{name} is referenced but not defined"
            );
        }
        assert!(schemas.contains_key("SearchRequest"));
    }
}
