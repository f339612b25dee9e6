//! Sift as an offline search service for agents and benchmarks, over any index Sift builds:
//!
//! - a versioned JSON API ([`sift_service::api`]) with an OpenAPI document at `/openapi.json`: search
//!   passages, corpus images or Task 4 passage+image pairs by text and/or images (reverse
//!   image search, crop-and-search on InterLV's 0-1000 box scale), fetch passages and image
//!   bytes by id, list what is served, fuse result lists, score hits against qrels;
//! - the shapes agent harnesses already call: Serper's `POST /search`, `/images` and
//!   `/lens`, pyserini's `GET /v1/{index}/search` and `/doc/{id}`, InterLV-Search's local
//!   tools, and OpenAI's `GET /v1/models` and `POST /v1/embeddings`;
//! - an MCP server ([`mcp`], rmcp) over stdio or streamable HTTP at `/mcp`.
//!
//! Every request is answered by [`sift_service::Service`], the one-query core that the
//! command line and the Python package call too: this crate holds only the transports, each
//! a thin adapter. [`http`] runs the service's synchronous, CPU-bound methods on blocking
//! threads under a concurrency limit and a per-request time limit; [`mcp`] offers the same
//! as tools; [`shapes`] turns its answers into the shapes the harnesses read.
#![warn(missing_docs)]

pub mod http;
pub mod mcp;
pub mod openapi;
mod server;
pub mod shapes;

use std::net::SocketAddr;
use std::sync::Arc;

pub use http::{AccessLog, HttpOptions, Shared};
pub use server::Stopped;
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

/// A future that resolves on SIGTERM or Ctrl-C (SIGINT). The handlers are installed when
/// this is called, not when the future is first polled: a signal that comes between the
/// two (right after the listening line, or the `--address-file` written) is caught rather
/// than killing the process with the default action. Call it inside the runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // a handler that cannot be installed waits for ever, as before
        let mut term = signal(SignalKind::terminate()).ok();
        let mut int = signal(SignalKind::interrupt()).ok();
        async move {
            let term = async {
                match term.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let int = async {
                match int.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = term => {},
                () = int => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
