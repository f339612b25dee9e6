//! The MCP server (rmcp): the service's searches as tools, named as pyserini's MCP server
//! (`search`, `get_document`, `list_indexes`, `fuse_search_results`, `eval_hits`) and
//! InterLV-Search's local tools (`local_text_search`, `local_text_to_image_search`,
//! `local_image_search`) name them, plus `image_search`, `reverse_image_search` and
//! `crop_search`. Over stdio ([`serve_stdio`]) or streamable HTTP at `/mcp`
//! ([`http_service`]).
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{Json, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::http::{ApiErrorResponse, Shared};
use crate::shapes::{self, LocalTool};
use sift_service::ApiError;
use sift_service::Service;
use sift_service::api::{
    CandidateKind, Document, EvalRequest, EvalResponse, FuseRequest, FuseResponse, IndexInfo,
    LocalResponse, LocalSearchRequest, McpSearchRequest, PyseriniQuery, SearchRequest,
    SearchResponse,
};

/// `get_document`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetDocument {
    /// Passage id.
    #[serde(alias = "id")]
    pub docid: String,
    /// Domain (default: the served domain that holds the passage).
    #[serde(default, alias = "index_name")]
    pub domain: Option<String>,
    /// Any other argument: ignored, and named in the answer.
    #[serde(flatten, default)]
    #[schemars(skip)]
    pub unknown: std::collections::BTreeMap<String, serde_json::Value>,
}

/// `search`'s answer: Sift's (and pyserini's) fields, each hit also carrying
/// BrowseComp-Plus's `docid` and `snippet` (its `search` tool's `[{docid, score, snippet}]`),
/// and the arguments the tool ignored.
#[derive(Debug, Serialize, JsonSchema)]
pub struct McpSearchAnswer {
    #[serde(flatten)]
    response: SearchHead,
    /// Results, best first.
    hits: Vec<McpHit>,
    /// Arguments the tool does not know: ignored (as FastMCP's tools ignore them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ignored_arguments: Vec<String>,
}

/// A [`SearchResponse`] but its hits.
#[derive(Debug, Serialize, JsonSchema)]
struct SearchHead {
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<String>,
    domains: Vec<String>,
    retriever: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reranker: Option<String>,
    candidates: CandidateKind,
}

/// A hit with BrowseComp-Plus's names for its id and text.
#[derive(Debug, Serialize, JsonSchema)]
struct McpHit {
    #[serde(flatten)]
    hit: sift_service::api::Hit,
    /// The id (BrowseComp-Plus's name).
    docid: String,
    /// The text, cut (BrowseComp-Plus's name).
    snippet: String,
}

impl McpSearchAnswer {
    fn new(r: SearchResponse, ignored: Vec<String>) -> McpSearchAnswer {
        McpSearchAnswer {
            response: SearchHead {
                domain: r.domain,
                domains: r.domains,
                retriever: r.retriever,
                reranker: r.reranker,
                candidates: r.candidates,
            },
            hits: r
                .hits
                .into_iter()
                .map(|h| McpHit {
                    docid: h.id.clone(),
                    snippet: h.text.clone().unwrap_or_default(),
                    hit: h,
                })
                .collect(),
            ignored_arguments: ignored,
        }
    }
}

/// `get_document`'s answer: the document, with BrowseComp-Plus's `docid` and `text`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct McpDocument {
    #[serde(flatten)]
    document: Document,
    /// The id (BrowseComp-Plus's name).
    docid: String,
    /// The text (BrowseComp-Plus's name).
    text: String,
    /// Arguments the tool does not know: ignored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ignored_arguments: Vec<String>,
}

/// `image_search`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageSearch {
    /// Query text.
    pub query: String,
    /// Number of results.
    #[serde(default = "ten", alias = "k")]
    pub top_k: usize,
    /// Domain (default: every domain served).
    #[serde(default, alias = "index_name")]
    pub domain: Option<String>,
    /// Retriever (default: the first served that ranks images).
    #[serde(default)]
    pub retriever: Option<String>,
}

impl From<ImageSearch> for SearchRequest {
    fn from(a: ImageSearch) -> SearchRequest {
        SearchRequest {
            query: a.query,
            domain: a.domain,
            top_k: a.top_k,
            retriever: a.retriever,
            candidates: CandidateKind::Images,
            ..SearchRequest::default()
        }
    }
}

/// `reverse_image_search`'s and `crop_search`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageQuery {
    /// The image: a corpus image id, a link this service gave out, a data URL or base64.
    pub image: String,
    /// `crop_search`: `[x1, y1, x2, y2]` on a 0-1000 scale.
    #[serde(default)]
    pub bbox: Option<[u32; 4]>,
    /// What to rank: images (default) or passages.
    #[serde(default = "images")]
    pub candidates: CandidateKind,
    /// Number of results.
    #[serde(default = "ten", alias = "k")]
    pub top_k: usize,
    /// Domain (default: the domain of a link, else every domain served).
    #[serde(default, alias = "index_name")]
    pub domain: Option<String>,
    /// Retriever (default: the first served that takes images).
    #[serde(default)]
    pub retriever: Option<String>,
    /// Cut each text to this many characters.
    #[serde(default)]
    pub max_text_chars: Option<usize>,
}

fn ten() -> usize {
    10
}

fn images() -> CandidateKind {
    CandidateKind::Images
}

/// The MCP server over a [`Shared`] service.
#[derive(Clone)]
pub struct SiftMcp {
    shared: Arc<Shared>,
    tool_router: ToolRouter<SiftMcp>,
}

fn text(e: ApiError) -> String {
    e.for_client().to_string()
}

#[tool_router(router = tool_router)]
impl SiftMcp {
    /// A server for `shared`.
    pub fn new(shared: Arc<Shared>) -> SiftMcp {
        SiftMcp {
            shared,
            tool_router: Self::tool_router(),
        }
    }

    async fn image_query(&self, a: ImageQuery, crop: bool) -> Result<Json<SearchResponse>, String> {
        if crop && a.bbox.is_none() {
            return Err("bbox: crop_search needs a box [x1, y1, x2, y2] (0-1000)".into());
        }
        self.call(move |svc| {
            let (linked, mut image) =
                shapes::image_ref(svc, a.domain.as_deref(), &a.image, "image")?;
            image.bbox = a.bbox;
            svc.search(&SearchRequest {
                images: vec![image],
                domain: a.domain.or(linked),
                top_k: a.top_k,
                candidates: a.candidates,
                retriever: a.retriever,
                max_text_chars: a.max_text_chars,
                ..SearchRequest::default()
            })
        })
        .await
    }

    #[tool(
        description = "Search passages (or corpus images, or passage+image pairs) by query text \
                       and optional images, in one domain (domain / index_name) or, without \
                       one, every domain merged; returns ranked ids, domains, scores, texts \
                       and page links. Takes pyserini's arguments too (query as text or \
                       {query_txt, query_img_path}, k, ef_search)."
    )]
    async fn search(
        &self,
        Parameters(a): Parameters<McpSearchRequest>,
    ) -> Result<Json<McpSearchAnswer>, String> {
        let ignored: Vec<String> = a.unknown.keys().cloned().collect();
        self.call(move |svc| {
            let mut images = a.images;
            let query = match a.query {
                PyseriniQuery::Text(t) => t,
                PyseriniQuery::Parts {
                    query_txt,
                    query_img_path,
                } => {
                    if let Some(img) = query_img_path.filter(|p| !p.trim().is_empty()) {
                        let (_, image) = shapes::image_ref(
                            svc,
                            a.domain.as_deref(),
                            &img,
                            "query.query_img_path",
                        )?;
                        images.push(image);
                    }
                    query_txt.unwrap_or_default()
                }
            };
            svc.search(&SearchRequest {
                query,
                images,
                retriever: a.retriever,
                domain: a.domain,
                top_k: a.top_k,
                candidates: a.candidates,
                fusion: a.fusion,
                max_text_chars: a.max_text_chars,
                k1: a.k1,
                b: a.b,
                ef_search: a.ef_search,
            })
            .map(|r| McpSearchAnswer::new(r, ignored))
        })
        .await
    }

    #[tool(description = "Fetch a passage's text and the images of its page by id.")]
    async fn get_document(
        &self,
        Parameters(a): Parameters<GetDocument>,
    ) -> Result<Json<McpDocument>, String> {
        let ignored: Vec<String> = a.unknown.keys().cloned().collect();
        self.call(move |svc| {
            let domain = svc.domain_of_passage(a.domain.as_deref(), &a.docid)?;
            let document = svc.document(&domain, &a.docid)?;
            Ok(McpDocument {
                docid: document.id.clone(),
                text: document.contents.clone(),
                document,
                ignored_arguments: ignored,
            })
        })
        .await
    }

    #[tool(description = "Search corpus images by text.")]
    async fn image_search(
        &self,
        Parameters(a): Parameters<ImageSearch>,
    ) -> Result<Json<SearchResponse>, String> {
        self.call(move |svc| svc.search(&a.into())).await
    }

    #[tool(
        description = "Reverse image search: corpus images (or passages) like an image given \
                       as a corpus image id, a link from this service, a data URL or base64."
    )]
    async fn reverse_image_search(
        &self,
        Parameters(a): Parameters<ImageQuery>,
    ) -> Result<Json<SearchResponse>, String> {
        self.image_query(a, false).await
    }

    #[tool(
        description = "Crop an image to bbox [x1, y1, x2, y2] (0-1000 scale of its width and \
                       height) and search with the crop."
    )]
    async fn crop_search(
        &self,
        Parameters(a): Parameters<ImageQuery>,
    ) -> Result<Json<SearchResponse>, String> {
        self.image_query(a, true).await
    }

    #[tool(description = "The domains, retrievers and models this server searches.")]
    async fn list_indexes(&self) -> Result<Json<IndexInfo>, String> {
        Ok(Json(self.shared.service().info()))
    }

    #[tool(description = "Fuse ranked lists: rrf (k = 60), rrf:<k> or weighted:<w1>,<w2>,...")]
    async fn fuse_search_results(
        &self,
        Parameters(req): Parameters<FuseRequest>,
    ) -> Result<Json<FuseResponse>, String> {
        self.call(move |svc| svc.fuse(&req)).await
    }

    #[tool(
        description = "Score ranked hits against relevance judgements as trec_eval does \
                          (nDCG@10, recall, MAP, ...)."
    )]
    async fn eval_hits(
        &self,
        Parameters(req): Parameters<EvalRequest>,
    ) -> Result<Json<EvalResponse>, String> {
        self.call(move |svc| svc.eval(&req)).await
    }

    #[tool(
        description = "InterLV-Search local_text_search: passages for a text query, as \
                          {source, results: [{rank, entity_id, score, has_image, text}]}."
    )]
    async fn local_text_search(
        &self,
        Parameters(req): Parameters<LocalSearchRequest>,
    ) -> Result<Json<LocalResponse>, String> {
        self.local(req, LocalTool::Text).await
    }

    #[tool(
        description = "InterLV-Search local_text_to_image_search: corpus images for a text \
                          query."
    )]
    async fn local_text_to_image_search(
        &self,
        Parameters(req): Parameters<LocalSearchRequest>,
    ) -> Result<Json<LocalResponse>, String> {
        self.local(req, LocalTool::TextToImage).await
    }

    #[tool(description = "InterLV-Search local_image_search: corpus images like an image.")]
    async fn local_image_search(
        &self,
        Parameters(req): Parameters<LocalSearchRequest>,
    ) -> Result<Json<LocalResponse>, String> {
        self.local(req, LocalTool::Image).await
    }
}

impl SiftMcp {
    /// Runs `f` on the service (off the runtime, within the server's limits); an error
    /// becomes the tool's error text.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<Json<T>, String> {
        self.shared.run(f).await.map(Json).map_err(text)
    }

    async fn local(
        &self,
        req: LocalSearchRequest,
        tool: LocalTool,
    ) -> Result<Json<LocalResponse>, String> {
        self.call(move |svc| shapes::local(svc, &req, tool)).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SiftMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sift", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Offline retrieval over a Sift index: search passages and images by text or \
                 image, fetch documents, fuse and score results. list_indexes names the domains \
                 and retrievers.",
            )
    }
}

/// The MCP service at `/mcp` of the HTTP router, stopping when `cancel` is cancelled, with
/// at most `max_sessions` sessions open at once (a new one past it is a 503).
pub fn http_service<S: Clone + Send + Sync + 'static>(
    shared: Arc<Shared>,
    cancel: CancellationToken,
    max_sessions: usize,
) -> axum::Router<S> {
    let sessions = Arc::new(LocalSessionManager::default());
    let gate = Arc::new(Gate {
        sessions: sessions.clone(),
        max_sessions: max_sessions.max(1),
        opening: tokio::sync::Mutex::new(()),
        max_body_bytes: shared.max_body_bytes(),
    });
    let service: StreamableHttpService<SiftMcp, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(SiftMcp::new(shared.clone())),
        sessions,
        StreamableHttpServerConfig::default()
            .with_cancellation_token(cancel)
            // one body limit for every endpoint: --max-body-bytes (rmcp's own is 4 MiB)
            .with_max_request_body_bytes(gate.max_body_bytes),
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(gate, gate_mcp))
}

/// What [`gate_mcp`] needs: the sessions, their limit, a lock that makes counting and
/// opening one step.
struct Gate {
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
    opening: tokio::sync::Mutex<()>,
    max_body_bytes: usize,
}

/// In front of rmcp at `/mcp`: POSTs are read whole first (within the body limit and
/// timeout), a `tools/call` whose `arguments` (or any request whose `params`) is not an
/// object gets the JSON-RPC error -32602 (invalid params), and a POST without a session id
/// (a new session) is refused with a 503 while `max_sessions` are open.
async fn gate_mcp(
    axum::extract::State(gate): axum::extract::State<Arc<Gate>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, gate.max_body_bytes).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::new(
                sift_service::ErrorKind::InvalidRequest,
                format!("reading the body: {e}"),
            )
            .into_response();
        }
    };
    if let Some(error) = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| invalid_params(&v))
    {
        return (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            error.to_string(),
        )
            .into_response();
    }
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    if req.headers().contains_key("mcp-session-id") {
        return next.run(req).await;
    }
    let _opening = gate.opening.lock().await;
    let open = gate.sessions.sessions.read().await.len();
    if open >= gate.max_sessions {
        return ApiError::new(
            sift_service::ErrorKind::Overloaded,
            format!(
                "{open} MCP sessions are open, the most this service keeps \
                 (--max-mcp-sessions {}): close one (DELETE /mcp with its Mcp-Session-Id) or \
                 wait until an idle one expires (5 minutes)",
                gate.max_sessions
            ),
        )
        .into_response();
    }
    next.run(req).await
}

/// The JSON-RPC error -32602 for a request whose `params` is not an object, or a
/// `tools/call` whose `arguments` is neither absent nor an object; `None` for any other
/// message (rmcp answers those).
pub fn invalid_params(message: &serde_json::Value) -> Option<serde_json::Value> {
    let obj = message.as_object()?;
    let id = obj.get("id")?;
    obj.get("method")?.as_str()?;
    let fault = match obj.get("params") {
        None | Some(serde_json::Value::Null) => return None,
        Some(p) if !p.is_object() => "params must be an object".to_string(),
        Some(p) => {
            if obj.get("method")?.as_str()? != "tools/call" {
                return None;
            }
            match p.get("arguments") {
                None | Some(serde_json::Value::Null) | Some(serde_json::Value::Object(_)) => {
                    return None;
                }
                Some(a) => format!(
                    "arguments must be an object of the tool's parameters, not {}",
                    json_type(a)
                ),
            }
        }
    };
    Some(jsonrpc_error(
        id.clone(),
        -32602,
        &format!("Invalid params: {fault}"),
    ))
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn jsonrpc_error(id: serde_json::Value, code: i64, message: &str) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Serves MCP over standard input and output until the client closes them.
pub async fn serve_stdio(shared: Arc<Shared>) -> std::io::Result<()> {
    serve_lines(shared, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves MCP as newline-delimited JSON-RPC messages read from `read` and written to
/// `write`, until `read` ends. A line that is not JSON gets the JSON-RPC parse error
/// -32700 (id null), JSON that is not a JSON-RPC message -32600 (invalid request), a
/// `tools/call` whose `arguments` is not an object -32602 (invalid params); the server
/// carries on after each. Lines are at most 16 MiB (longer ones are dropped with -32600).
pub async fn serve_lines<R, W>(shared: Arc<Shared>, read: R, write: W) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (out, lines) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(write_lines(write, lines));
    let transport = LineTransport {
        read: tokio::io::BufReader::new(read),
        line: Vec::new(),
        discarding: false,
        out,
    };
    let served = async {
        let running = SiftMcp::new(shared)
            .serve(transport)
            .await
            .map_err(std::io::Error::other)?;
        running.waiting().await.map_err(std::io::Error::other)?;
        Ok::<_, std::io::Error>(())
    }
    .await;
    // the transport (and with it the sender) is gone: the writer ends once it has written
    // everything
    let written = writer.await.map_err(std::io::Error::other)?;
    served?;
    written
}

async fn write_lines<W: tokio::io::AsyncWrite + Unpin>(
    mut write: W,
    mut lines: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    while let Some(line) = lines.recv().await {
        write.write_all(&line).await?;
        if lines.is_empty() {
            write.flush().await?;
        }
    }
    write.flush().await
}

/// The longest line [`serve_lines`] reads.
const MAX_LINE: usize = 16 << 20;

/// rmcp's transport over lines, answering the lines that are not messages itself.
struct LineTransport<R> {
    read: tokio::io::BufReader<R>,
    /// The line read so far (kept when `receive` is cancelled mid-line).
    line: Vec<u8>,
    /// Dropping the rest of a line longer than [`MAX_LINE`].
    discarding: bool,
    /// Serialised lines to the writer task; sending never waits, so a cancelled `receive`
    /// never leaves half an answer.
    out: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
}

impl<R> LineTransport<R> {
    fn answer(&self, message: &serde_json::Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let _ = self.out.send(line);
    }
}

/// What one read of [`LineTransport::read_line`] found.
enum LineRead {
    Line,
    TooLong,
    End,
}

impl<R: tokio::io::AsyncRead + Unpin> LineTransport<R> {
    /// Reads one line into `self.line` without letting it grow past [`MAX_LINE`]
    /// (cancellation-safe: `fill_buf` takes nothing until `consume`).
    async fn read_line(&mut self) -> LineRead {
        use tokio::io::AsyncBufReadExt;
        loop {
            let (used, done) = {
                let available = match self.read.fill_buf().await {
                    Ok([]) | Err(_) => return LineRead::End,
                    Ok(a) => a,
                };
                let newline = available.iter().position(|&b| b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding {
                    if newline.is_some() {
                        self.discarding = false;
                    }
                    (take, None)
                } else if self.line.len() + take > MAX_LINE {
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Some(LineRead::TooLong))
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (take, newline.map(|_| LineRead::Line))
                }
            };
            self.read.consume(used);
            if let Some(done) = done {
                return done;
            }
        }
    }
}

impl<R> rmcp::transport::Transport<rmcp::RoleServer> for LineTransport<R>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: rmcp::model::ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let sent = serde_json::to_vec(&item)
            .map_err(std::io::Error::other)
            .and_then(|mut line| {
                line.push(b'\n');
                self.out
                    .send(line)
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            });
        std::future::ready(sent)
    }

    async fn receive(&mut self) -> Option<rmcp::model::ClientJsonRpcMessage> {
        loop {
            match self.read_line().await {
                LineRead::End => return None,
                LineRead::TooLong => {
                    self.answer(&jsonrpc_error(
                        serde_json::Value::Null,
                        -32600,
                        &format!("Invalid request: a message longer than {MAX_LINE} bytes"),
                    ));
                    continue;
                }
                LineRead::Line => {}
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: serde_json::Value = match serde_json::from_slice(text) {
                Ok(v) => v,
                Err(e) => {
                    self.answer(&jsonrpc_error(
                        serde_json::Value::Null,
                        -32700,
                        &format!("Parse error: {e}"),
                    ));
                    continue;
                }
            };
            if let Some(error) = invalid_params(&value) {
                self.answer(&error);
                continue;
            }
            let id = value.get("id").cloned();
            let notification = id.is_none() && value.get("method").is_some();
            match serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(value) {
                Ok(message) => return Some(message),
                // notifications get no answer, even malformed ones (rmcp drops them too)
                Err(_) if notification => continue,
                Err(e) => {
                    let id = id
                        .filter(|i| i.is_string() || i.is_number())
                        .unwrap_or(serde_json::Value::Null);
                    self.answer(&jsonrpc_error(id, -32600, &format!("Invalid request: {e}")));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        Ok(())
    }
}
