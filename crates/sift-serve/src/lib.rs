//! Sift as an offline search service for agents and benchmarks, over any index Sift builds:
//!
//! - a versioned JSON API ([`api`]) with an OpenAPI document at `/openapi.json`: search
//!   passages, corpus images or Task 4 passage+image pairs by text and/or images (reverse
//!   image search, crop-and-search on InterLV's 0-1000 box scale), fetch passages and image
//!   bytes by id, list what is served, fuse result lists, score hits against qrels;
//! - the shapes agent harnesses already call: Serper's `POST /search`, `/images` and
//!   `/lens`, pyserini's `GET /v1/{index}/search` and `/doc/{id}`, InterLV-Search's local
//!   tools, and OpenAI's `GET /v1/models` and `POST /v1/embeddings`;
//! - an MCP server ([`mcp`], rmcp) over stdio or streamable HTTP at `/mcp`.
//!
//! [`Service`] holds the index, its models and the corpus, loaded once; its methods are
//! synchronous and CPU-bound, and [`http`] runs them on blocking threads under a
//! concurrency limit and a per-request time limit. The service only reads: ids are looked
//! up in what the index and corpus hold, never joined to paths.
//!
//! Search the bundled sample corpus's index through the service, without HTTP:
//!
//! ```
//! use sift_core::Corpus;
//! use sift_index::{BuildOptions, IndexDir, NoProgress};
//! use sift_serve::{ServeConfig, Service, api::SearchRequest};
//!
//! let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample");
//! let corpus = Corpus::open(sample)?;
//! let dir = tempfile::tempdir()?;
//! let root = dir.path().join("index");
//! IndexDir::build(&root, &corpus, &["biology".to_string()], &BuildOptions::default(), &[], &NoProgress)?;
//! let mut config = ServeConfig::new(&root);
//! config.corpus = Some(sample.into());
//! let service = Service::load(&config)?;
//! let res = service.search(&SearchRequest {
//!     query: "how do plants make sugar".into(),
//!     top_k: 3,
//!     ..SearchRequest::default()
//! })?;
//! assert_eq!(res.hits.len(), 3);
//! assert!(res.hits[0].text.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod api;
mod error;
pub mod http;
pub mod images;
pub mod mcp;
pub mod openapi;
pub mod pages;
mod server;
mod service;
pub mod shapes;

use std::net::SocketAddr;
use std::sync::Arc;

pub use error::{ApiError, Error, ErrorKind};
pub use http::{AccessLog, HttpOptions, Shared};
pub use server::Stopped;
pub use service::{
    Limits, Page, ServeConfig, Service, document_path, encode_path, image_path, page_path,
};
use tokio_util::sync::CancellationToken;

/// Serves HTTP (and MCP at `/mcp` when `options.mcp`) on `listener` until `shutdown`
/// resolves; then stops accepting connections, ends MCP streams, lets the requests in
/// flight finish for at most `options.shutdown_grace` and closes the connections still open
/// after it. Every connection has `options.header_timeout` to send each request's headers
/// (idle kept-alive connections are closed after it too) and `options.body_timeout` for its
/// body. `on_listening` is called once with the bound address.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    options: &HttpOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_listening: impl FnOnce(SocketAddr),
) -> std::io::Result<Stopped> {
    let cancel = CancellationToken::new();
    let mcp = options.mcp.then(|| {
        mcp::http_service(
            shared.clone(),
            cancel.child_token(),
            options.max_mcp_sessions,
        )
    });
    let app = http::router(shared, options.max_body_bytes, mcp);
    on_listening(listener.local_addr()?);
    server::serve(
        listener,
        app,
        server::ConnOptions {
            header_timeout: options.header_timeout,
            shutdown_grace: options.shutdown_grace,
        },
        shutdown,
        // MCP streams end too, so that the connections carrying them can close
        move || cancel.cancel(),
    )
    .await
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
