//! The OpenAPI 3.1 document of the HTTP API (`GET /openapi.json`), its schemas generated
//! from the request and response types ([`sift_service::api`]), so the two cannot drift apart.
use std::sync::LazyLock;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Value, json};

use sift_service::api::*;

static DOCUMENT: LazyLock<Value> = LazyLock::new(build);

/// The document.
pub fn document() -> &'static Value {
    &DOCUMENT
}

/// The schemas the paths name, generated from the API's types.
macro_rules! schemas {
    ($($field:ident: $t:ty),* $(,)?) => {
        struct Schemas {
            $($field: Value,)*
        }

        impl Schemas {
            fn new(g: &mut SchemaGenerator) -> Schemas {
                Schemas {
                    $($field: serde_json::to_value(g.subschema_for::<$t>()).expect("a schema"),)*
                }
            }
        }
    };
}

schemas! {
    search_req: SearchRequest,
    search_res: SearchResponse,
    index_info: IndexInfo,
    fuse_req: FuseRequest,
    fuse_res: FuseResponse,
    eval_req: EvalRequest,
    eval_res: EvalResponse,
    local_req: LocalSearchRequest,
    local_res: LocalResponse,
    document: Document,
    serper_q: SerperQuery,
    serper_lens: SerperLens,
    serper_search: SerperSearchResponse,
    serper_images: SerperImagesResponse,
    serper_lens_res: SerperLensResponse,
    serper_videos: SerperVideosResponse,
    serper_news: SerperNewsResponse,
    serpapi_res: SerpApiResponse,
    reader_res: ReaderResponse,
    emb_req: EmbeddingsRequest,
    emb_res: EmbeddingsResponse,
    chat_req: ChatRequest,
    chat_res: ChatResponse,
    rerank_req: RerankRequest,
    rerank_res: RerankResponse,
    retrieve_req: RetrieveRequest,
    retrieve_res: RetrieveResponse,
    access_req: AccessRequest,
    access_res: AccessResponse,
    bing_res: BingResponse,
    vrag_res: Vec<Vec<VragHit>>,
    queries_req: QueriesRequest,
    queries_res: QueriesResponse,
    tei_embed_req: TeiEmbedRequest,
    tei_rerank_req: TeiRerankRequest,
    tei_rerank_res: Vec<TeiRank>,
    tei_embed_res: Vec<Vec<f32>>,
    model_list: ModelList,
    health: Health,
    stats: ServiceStats,
    error: ErrorBody,
}

fn build() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut g: SchemaGenerator = settings.into_generator();
    let s = Schemas::new(&mut g);
    let schemas = Value::Object(g.take_definitions(true));
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Sift search service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Offline multimodal retrieval over a Sift index: passages, corpus \
                images and passage+image pairs, by text, images or both; Serper-compatible \
                /search, /images, /lens, /videos and /news (GET and POST); SerpAPI-compatible \
                GET /search and /search.json; readable pages and a Jina-Reader-compatible \
                /r/{url}; OpenAI-compatible /v1/embeddings and /v1/chat/completions; Cohere-compatible \
                /v1/rerank of given documents; MCP at /mcp. Without a domain, a \
                search covers every domain served, merged into one ranking.",
        },
        "paths": paths(&s),
        "components": {"schemas": schemas},
    })
}

impl Schemas {
    /// The error responses of `codes`, and those any request may get (the connection's
    /// limits).
    fn errors(&self, codes: &[&str]) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        for c in codes.iter().chain(&["414", "431"]) {
            m.insert(
                (*c).to_string(),
                json!({"description": describe(c), "content": as_json(&self.error)}),
            );
        }
        m
    }

    /// The responses: `ok` (200) and the errors of `codes`.
    fn responses(&self, ok: Value, codes: &[&str]) -> serde_json::Map<String, Value> {
        let mut responses = self.errors(codes);
        responses.insert("200".into(), ok);
        responses
    }

    /// A JSON POST.
    fn post(&self, summary: &str, req: &Value, res: &Value) -> Value {
        let responses = self.responses(
            json!({"description": "OK", "content": as_json(res)}),
            &["400", "408", "413", "415", "503", "504"],
        );
        json!({"post": {
            "summary": summary,
            "requestBody": {"required": true, "content": as_json(req)},
            "responses": responses,
        }})
    }

    /// A GET answered with `res` (content by media type).
    fn get(&self, summary: &str, params: Value, res: Value, codes: &[&str]) -> Value {
        let responses = self.responses(json!({"description": "OK", "content": res}), codes);
        json!({"get": {"summary": summary, "parameters": params, "responses": responses}})
    }

    /// Serper: POST a query or a JSON array of them (a batch); GET with parameters.
    fn serper(&self, summary: &str, req: &Value, res: &Value, first: Value) -> Value {
        let responses = self.responses(
            json!({"description": "OK (a list for a batch)", "content": {"application/json": {
                "schema": {"oneOf": [res, {"type": "array", "items": res}]}}}}),
            &["400", "401", "408", "413", "415", "503", "504"],
        );
        let get_responses = self.responses(
            json!({"description": "OK", "content": as_json(res)}),
            &["400", "401", "503", "504"],
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
    }

    /// GET /search answers as Serper without `engine` (the service's error body), as SerpAPI
    /// with it (`{"error": "..."}`).
    fn serpapi_responses(&self, serper_too: bool) -> Value {
        let serp_error = json!({"type": "object", "required": ["error"],
                                "properties": {"error": {"type": "string"}}});
        let (ok, failed) = if serper_too {
            (
                json!({"oneOf": [self.serpapi_res, self.serper_search]}),
                json!({"oneOf": [serp_error, self.error]}),
            )
        } else {
            (self.serpapi_res.clone(), serp_error)
        };
        let error = &self.error;
        json!({
            "200": {"description": "OK (an `error` field when nothing was found)", "content": as_json(&ok)},
            "400": {"description": "Bad parameters or an unknown engine", "content": as_json(&failed)},
            "401": {"description": "Wrong or missing API key", "content": as_json(&failed)},
            "404": {"description": "No such domain", "content": as_json(&failed)},
            "414": {"description": describe("414"), "content": as_json(error)},
            "431": {"description": describe("431"), "content": as_json(error)},
            "503": {"description": "Every worker busy", "content": as_json(&failed)},
            "504": {"description": "Time limit passed", "content": as_json(&failed)},
        })
    }
}

fn as_json(s: &Value) -> Value {
    json!({"application/json": {"schema": s}})
}

fn path_param(name: &str, what: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": what,
           "schema": {"type": "string"}})
}

fn query_param(name: &str, required: bool, schema: Value, what: &str) -> Value {
    json!({"name": name, "in": "query", "required": required, "description": what,
           "schema": schema})
}

fn text() -> Value {
    json!({"type": "string"})
}

fn count(min: u64) -> Value {
    json!({"type": "integer", "minimum": min})
}

/// Serper's query, as GET parameters.
fn serper_params(first: Value) -> Value {
    let mut params = vec![
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
            "Time filter (echoed; passages have no dates)",
        ),
    ];
    params.extend(domain_and_key());
    Value::Array(params)
}

/// The parameters every search API of the service ends with.
fn domain_and_key() -> [Value; 2] {
    [
        query_param(
            "domain",
            false,
            text(),
            "Domain (default: every domain served)",
        ),
        query_param(
            "api_key",
            false,
            text(),
            "API key (checked with --api-key, else ignored)",
        ),
    ]
}

/// SerpAPI's query parameters.
fn serpapi_params() -> Value {
    let mut params = vec![
        query_param(
            "engine",
            false,
            json!({"type": "string"}),
            "google (default: passages), google_images or google_lens; others are answered {\"error\"} (400)",
        ),
        query_param("q", false, text(), "Query text (google, google_images)"),
        query_param(
            "url",
            false,
            text(),
            "Image URL (google_lens): a link of this service, a data: URL or base64",
        ),
        query_param(
            "num",
            false,
            count(0),
            "Results (default 10; 100 for images)",
        ),
        query_param("start", false, count(0), "Results to skip"),
        query_param("ijn", false, count(0), "Page of images (google_images)"),
        query_param("gl", false, text(), "Country (echoed)"),
        query_param("hl", false, text(), "Language (echoed)"),
        query_param("location", false, text(), "Location (echoed)"),
    ];
    params.extend(domain_and_key());
    Value::Array(params)
}

/// The paths.
fn paths(s: &Schemas) -> Value {
    let upload_responses = s.responses(
        json!({"description": "OK", "content": as_json(&s.search_res)}),
        &["400", "404", "408", "413", "503", "504"],
    );
    let page_content = json!({
        "text/html": {"schema": {"type": "string"}},
        "text/markdown": {"schema": {"type": "string"}},
        "text/plain": {"schema": {"type": "string"}},
        "application/json": {"schema": {"type": "object"}},
    });

    let q_param = query_param("q", true, text(), "Query text");
    // GET /search: Serper's and SerpAPI's q, or VRAG's queries
    let mut search_get_params = serper_params(query_param(
        "q",
        false,
        text(),
        "Query text (Serper, SerpAPI)",
    ));
    if let Some(list) = search_get_params.as_array_mut() {
        list.push(json!({"name": "queries", "in": "query", "required": false,
            "style": "form", "explode": true,
            "description": "VRAG: the queries (repeat the parameter)",
            "schema": {"type": "array", "items": {"type": "string"}}}));
    }
    let mut search_get_responses = s.serpapi_responses(true);
    if let Some(ok) = search_get_responses
        .get_mut("200")
        .and_then(|ok| ok.get_mut("content"))
        .and_then(|c| c.get_mut("application/json"))
    {
        ok["schema"] = json!({"oneOf": [ok["schema"].clone(), s.vrag_res]});
    }
    json!({
        "/healthz": s.get("Liveness and requests in flight", json!([]), as_json(&s.health), &[]),
        "/v1/stats": s.get("Query batching: batches encoded across requests, by size, and the queue", json!([]), as_json(&s.stats), &[]),
        "/v1/indexes": s.get("Domains, retrievers and models served", json!([]), as_json(&s.index_info), &[]),
        "/v1/search": s.post("Search passages, images or pairs by text and/or images (reverse image and crop search: images without text, with bbox)", &s.search_req, &s.search_res),
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
        "/v1/fuse": s.post("Fuse result lists (RRF or weighted)", &s.fuse_req, &s.fuse_res),
        "/v1/eval": s.post("Score a run against qrels as trec_eval does", &s.eval_req, &s.eval_res),
        "/v1/local_text_search": s.post("InterLV-Search local_text_search: text -> passages", &s.local_req, &s.local_res),
        "/v1/local_text_to_image_search": s.post("InterLV-Search local_text_to_image_search: text -> images", &s.local_req, &s.local_res),
        "/v1/local_image_search": s.post("InterLV-Search local_image_search: image -> images", &s.local_req, &s.local_res),
        "/v1/models": s.get("OpenAI-compatible model list", json!([]), as_json(&s.model_list), &[]),
        "/v1/embeddings": s.post("OpenAI-compatible embeddings (texts; images as data URLs)", &s.emb_req, &s.emb_res),
        "/v1/chat/completions": s.post("OpenAI-compatible chat completions from the local generator (`--generator`; images as data URLs; no streaming)", &s.chat_req, &s.chat_res),
        "/v1/rerank": s.post("Cohere-, Jina- and vLLM-compatible rerank: the reranker's (`--rerank`) raw scores of the request's own documents, best first", &s.rerank_req, &s.rerank_res),
        "/retrieve": s.post("Search-R1's (and verl's SearchTool) batch retrieval: {queries, topk, return_scores} -> {result: [[{document: {id, contents}, score}]]}; BrowseComp-Plus's {query} -> {result: [{document: {title, text}, docid, score}]}", &s.retrieve_req, &s.retrieve_res),
        "/access": s.post("ASearcher's page access: {urls} -> {result: [page or null per url]}, pages {url, id, title, contents} for this service's links (as /retrieve's documents give them in url), null for any other", &s.access_req, &s.access_res),
        "/embed": s.post("text-embeddings-inference's embed: {inputs, normalize, truncate} -> [[float]], the first dense model's unit vectors, as /v1/embeddings gives them", &s.tei_embed_req, &s.tei_embed_res),
        "/rerank": s.post("text-embeddings-inference's rerank: {query, texts, raw_scores, return_text} -> [{index, score, text}] best first, with the reranker (`--rerank`): probabilities, or logits with raw_scores", &s.tei_rerank_req, &s.tei_rerank_res),
        "/queries": s.post("R1-Searcher's batch retrieval: {queries, k} -> {queries, answers: [[text]]}", &s.queries_req, &s.queries_res),
        "/v1/{domain}/search": s.get(
            "pyserini-style REST search",
            json!([
                path_param("domain", "Domain"),
                {"name": "query", "in": "query", "required": true, "schema": {"type": "string"}},
                {"name": "hits", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1}},
                {"name": "retriever", "in": "query", "required": false, "schema": {"type": "string"}},
            ]),
            as_json(&s.search_res),
            &["400", "404"],
        ),
        "/v1/{domain}/doc/{id}": s.get(
            "A passage by id (ids may hold /)",
            json!([path_param("domain", "Domain"), path_param("id", "Passage id")]),
            as_json(&s.document),
            &["404"],
        ),
        "/v1/{domain}/image/{id}": s.get(
            "A corpus image's bytes",
            json!([path_param("domain", "Domain"), path_param("id", "Image id")]),
            json!({"image/*": {"schema": {"type": "string", "format": "binary"}}}),
            &["404"],
        ),
        "/v1/{domain}/page/{id}": s.get(
            "The readable page of a passage (its text and its page's images) or of an image: HTML, or Markdown, text or JSON by ?format= or Accept",
            json!([
                path_param("domain", "Domain"),
                path_param("id", "Passage or image id"),
                query_param("format", false, json!({"type": "string", "enum": ["html", "markdown", "md", "text", "txt", "json"]}), "Format (default: by Accept, else HTML)"),
            ]),
            page_content.clone(),
            &["400", "401", "404"],
        ),
        "/r/{url}": s.get(
            "Jina-Reader-compatible page reader for this service's own links: Jina's text form (Title, URL Source, Markdown Content), or its JSON on Accept: application/json",
            json!([path_param("url", "A link this service gave out (other URLs: 400)")]),
            json!({"text/plain": {"schema": {"type": "string"}}, "application/json": {"schema": s.reader_res}}),
            &["400", "401", "404"],
        ),
        "/search": {
            "post": s.serper("Serper-compatible web search over passages (every domain unless one is named)", &s.serper_q, &s.serper_search, q_param.clone())["post"].clone(),
            "get": {
                "summary": "Serper's search by GET (smolagents); SerpAPI's when `engine` is given; VRAG's page-image search when `queries` is given (repeated: one answer list per query, [[{idx, image_file, id, domain, score, image_url}]], top_k default 10; then q is not needed)",
                "parameters": search_get_params,
                "responses": search_get_responses,
            },
        },
        "/v7.0/search": s.get(
            "Bing Web Search v7 (retired by Microsoft; Search-o1, WebThinker, DeepResearcher call it): passages as webPages.value[] {name, url, snippet}; the key may come as Ocp-Apim-Subscription-Key",
            json!([
                query_param("q", true, text(), "Query text"),
                query_param("count", false, json!({"type": "integer", "minimum": 1, "maximum": 50}), "Results (default 10)"),
                query_param("offset", false, json!({"type": "integer", "minimum": 0}), "Results skipped (default 0)"),
                query_param("mkt", false, text(), "Market: accepted and ignored"),
                query_param("setLang", false, text(), "Language: accepted and ignored"),
            ]),
            as_json(&s.bing_res),
            &["400", "401", "503", "504"],
        ),
        "/search.json": {"get": {
            "summary": "SerpAPI-compatible search: engine=google, google_images, google_lens",
            "parameters": serpapi_params(),
            "responses": s.serpapi_responses(false),
        }},
        "/images": s.serper("Serper-compatible image search", &s.serper_q, &s.serper_images, q_param.clone()),
        "/lens": s.serper("Serper-compatible reverse image search (visual matches as organic results with imageUrl)", &s.serper_lens, &s.serper_lens_res,
            query_param("url", true, text(), "Image URL: a link of this service, a data: URL or base64")),
        "/videos": s.serper("Serper's videos shape (always empty: the index holds no videos)", &s.serper_q, &s.serper_videos, q_param.clone()),
        "/news": s.serper("Serper's news shape (always empty: the index holds no news)", &s.serper_q, &s.serper_news, q_param.clone()),
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
