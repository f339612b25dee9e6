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
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::api::{
    Candidates, Document, EvalRequest, EvalResponse, FuseRequest, FuseResponse, IndexInfo,
    LocalResponse, LocalSearchRequest, SearchRequest, SearchResponse,
};
use crate::error::ApiError;
use crate::http::Shared;
use crate::shapes::{self, LocalTool};

/// `get_document`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetDocument {
    /// Passage id.
    #[serde(alias = "id")]
    pub docid: String,
    /// Domain (required when the index has several).
    #[serde(default, alias = "index_name")]
    pub domain: Option<String>,
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
    /// Domain (required when the index has several).
    #[serde(default, alias = "index_name")]
    pub domain: Option<String>,
    /// Retriever (default: the first served that ranks images).
    #[serde(default)]
    pub retriever: Option<String>,
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
    pub candidates: Candidates,
    /// Number of results.
    #[serde(default = "ten", alias = "k")]
    pub top_k: usize,
    /// Domain (required when the index has several and the image is not a link).
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

fn images() -> Candidates {
    Candidates::Images
}

/// The MCP server over a [`Shared`] service.
#[derive(Clone)]
pub struct SiftMcp {
    shared: Arc<Shared>,
    tool_router: ToolRouter<SiftMcp>,
}

fn text(e: ApiError) -> String {
    e.to_string()
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

    async fn image_query(&self, a: ImageQuery, crop: bool) -> Result<SearchResponse, String> {
        if crop && a.bbox.is_none() {
            return Err("bbox: crop_search needs a box [x1, y1, x2, y2] (0-1000)".into());
        }
        self.shared
            .run(move |svc| {
                let (linked, mut image) = shapes::image_ref(svc, a.domain.as_deref(), &a.image);
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
            .map_err(text)
    }

    #[tool(
        description = "Search a domain's passages (or corpus images, or passage+image pairs) by \
                       query text and optional images; returns ranked ids, scores and texts."
    )]
    async fn search(
        &self,
        Parameters(req): Parameters<SearchRequest>,
    ) -> Result<Json<SearchResponse>, String> {
        self.shared
            .run(move |svc| svc.search(&req))
            .await
            .map(Json)
            .map_err(text)
    }

    #[tool(description = "Fetch a passage's text and the images of its page by id.")]
    async fn get_document(
        &self,
        Parameters(a): Parameters<GetDocument>,
    ) -> Result<Json<Document>, String> {
        self.shared
            .run(move |svc| {
                let domain = match a.domain {
                    Some(d) => d,
                    None => svc.only_domain()?,
                };
                svc.document(&domain, &a.docid)
            })
            .await
            .map(Json)
            .map_err(text)
    }

    #[tool(description = "Search corpus images by text.")]
    async fn image_search(
        &self,
        Parameters(a): Parameters<ImageSearch>,
    ) -> Result<Json<SearchResponse>, String> {
        self.shared
            .run(move |svc| {
                svc.search(&SearchRequest {
                    query: a.query,
                    domain: a.domain,
                    top_k: a.top_k,
                    retriever: a.retriever,
                    candidates: Candidates::Images,
                    ..SearchRequest::default()
                })
            })
            .await
            .map(Json)
            .map_err(text)
    }

    #[tool(
        description = "Reverse image search: corpus images (or passages) like an image given \
                       as a corpus image id, a link from this service, a data URL or base64."
    )]
    async fn reverse_image_search(
        &self,
        Parameters(a): Parameters<ImageQuery>,
    ) -> Result<Json<SearchResponse>, String> {
        self.image_query(a, false).await.map(Json)
    }

    #[tool(
        description = "Crop an image to bbox [x1, y1, x2, y2] (0-1000 scale of its width and \
                       height) and search with the crop."
    )]
    async fn crop_search(
        &self,
        Parameters(a): Parameters<ImageQuery>,
    ) -> Result<Json<SearchResponse>, String> {
        self.image_query(a, true).await.map(Json)
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
        self.shared
            .run(move |svc| svc.fuse(&req))
            .await
            .map(Json)
            .map_err(text)
    }

    #[tool(
        description = "Score ranked hits against relevance judgements as trec_eval does \
                          (nDCG@10, recall, MAP, ...)."
    )]
    async fn eval_hits(
        &self,
        Parameters(req): Parameters<EvalRequest>,
    ) -> Result<Json<EvalResponse>, String> {
        self.shared
            .run(move |svc| svc.eval(&req))
            .await
            .map(Json)
            .map_err(text)
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
    async fn local(
        &self,
        req: LocalSearchRequest,
        tool: LocalTool,
    ) -> Result<Json<LocalResponse>, String> {
        self.shared
            .run(move |svc| shapes::local(svc, &req, tool))
            .await
            .map(Json)
            .map_err(text)
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

/// The MCP service at `/mcp` of the HTTP router, stopping when `cancel` is cancelled.
pub fn http_service<S: Clone + Send + Sync + 'static>(
    shared: Arc<Shared>,
    cancel: CancellationToken,
) -> axum::Router<S> {
    let service: StreamableHttpService<SiftMcp, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(SiftMcp::new(shared.clone())),
        Default::default(),
        StreamableHttpServerConfig::default().with_cancellation_token(cancel),
    );
    axum::Router::new().nest_service("/mcp", service)
}

/// Serves MCP over standard input and output until the client closes them.
pub async fn serve_stdio(shared: Arc<Shared>) -> std::io::Result<()> {
    let running = SiftMcp::new(shared)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
