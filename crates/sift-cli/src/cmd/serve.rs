use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use sift_retrieve::{Ann, SearchSettings};
use sift_serve::{AccessLog, HttpOptions, Limits, ServeConfig, Service, Shared};

use crate::models::ModelFlags;
use crate::options::Bm25Flags;

/// Serve an index to search agents and benchmarks, read-only: a JSON API (OpenAPI at
/// /openapi.json), Serper-compatible /search, /images and /lens, OpenAI-compatible
/// /v1/models and /v1/embeddings, pyserini-style /v1/{domain}/search and /doc/{id}, and MCP
/// tools over streamable HTTP at /mcp (or over stdio with --mcp-stdio).
///
/// Models and the corpus are loaded once at start. Passage texts and images come from
/// --corpus (kept in memory; images listed from folders are read on request); without it,
/// results carry ids and scores only. SIGTERM or Ctrl-C stops taking connections and
/// finishes the requests in flight.
#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
sift serve --index target/sample-index --corpus corpora/sample\n  \
curl -s localhost:8080/v1/search -d '{\"query\": \"how do plants make sugar\", \"domain\": \"biology\"}'\n  \
SERPER_BASE_URL=http://127.0.0.1:8080 my-agent ...   # Serper-shaped POST /search, /images, /lens\n  \
sift serve --index target/sample-index --corpus corpora/sample --mcp-stdio   # MCP client config")]
pub struct Args {
    /// Index directory.
    #[arg(long)]
    index: PathBuf,
    /// The corpus the index was built from (passage texts, images, page links).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// A retriever to serve (repeat; the first is the default): bm25, dense:<model>,
    /// hybrid:<a>+<b>[:<wa>,<wb>]. Default: bm25 and every dense index.
    #[arg(long)]
    retriever: Vec<String>,
    /// A domain to serve (repeat). Default: every domain of the index.
    #[arg(long)]
    domain: Vec<String>,
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Serve MCP over standard input and output instead of HTTP (for MCP clients that start
    /// the server themselves).
    #[arg(long)]
    mcp_stdio: bool,
    /// Do not serve MCP at /mcp.
    #[arg(long, conflicts_with = "mcp_stdio")]
    no_mcp: bool,
    /// Access logs as JSON lines on standard error.
    #[arg(long)]
    json: bool,
    /// No access logs.
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
    /// Requests worked on at once (each on its own thread); more wait. Default: the
    /// number of CPU threads.
    #[arg(long, value_parser = crate::options::positive)]
    max_concurrency: Option<usize>,
    /// Time limit of one request, waiting for a worker included (seconds).
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Largest request body (bytes).
    #[arg(long, default_value_t = 32 << 20, value_parser = crate::options::positive)]
    max_body_bytes: usize,
    /// Largest image in a request (encoded bytes).
    #[arg(long, default_value_t = 16 << 20, value_parser = crate::options::positive)]
    max_image_bytes: usize,
    /// Largest image in a request (pixels, read from its header before decoding).
    #[arg(long, default_value_t = 40_000_000)]
    max_image_pixels: u64,
    /// Images in one request.
    #[arg(long, default_value_t = 8, value_parser = crate::options::positive)]
    max_images: usize,
    /// Largest top_k.
    #[arg(long, default_value_t = 1000, value_parser = crate::options::positive)]
    max_top_k: usize,
    /// Characters of each result's text when a request does not say.
    #[arg(long, default_value_t = 1200)]
    text_chars: usize,
    /// Dense search: exact, hnsw, or auto (exact up to 20,000 vectors, HNSW above).
    #[arg(long, value_enum, default_value = "auto")]
    ann: Ann,
    /// HNSW candidate list size.
    #[arg(long, default_value_t = 128, value_parser = crate::options::positive)]
    ef_search: usize,
    #[command(flatten)]
    model_flags: ModelFlags,
    #[command(flatten)]
    bm25: Bm25Flags,
}

pub fn run(a: Args) -> Result<()> {
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        anyhow::bail!("--timeout must be a positive number of seconds");
    }
    let base_bm25 = sift_index::IndexDir::open(&a.index)?.manifest().bm25;
    let config = ServeConfig {
        index: a.index.clone(),
        corpus: a.corpus.clone(),
        retrievers: a.retriever.clone(),
        domains: a.domain.clone(),
        model_options: a.model_flags.options()?,
        bm25: Some(a.bm25.apply(base_bm25)),
        settings: SearchSettings {
            ann: a.ann.mode(a.ef_search),
            ef_search: a.ef_search,
            ..SearchSettings::default()
        },
        limits: Limits {
            max_top_k: a.max_top_k,
            text_chars: a.text_chars,
            max_images: a.max_images,
            max_inputs: Limits::default().max_inputs,
            image: sift_serve::images::ImageLimits {
                max_bytes: a.max_image_bytes,
                max_pixels: a.max_image_pixels,
            },
        },
    };
    let started = std::time::Instant::now();
    let service = Service::load(&config)
        .with_context(|| format!("loading {} for serving", a.index.display()))?;
    let info = service.info();
    eprintln!(
        "sift serve: {} domain(s), retrievers {}, loaded in {:.1}s",
        info.domains.len(),
        info.retrievers
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        started.elapsed().as_secs_f64()
    );
    let mut options = HttpOptions {
        timeout: Duration::from_secs_f64(a.timeout),
        max_body_bytes: a.max_body_bytes,
        access_log: if a.quiet {
            AccessLog::Off
        } else if a.json {
            AccessLog::Json
        } else {
            AccessLog::Text
        },
        mcp: !a.no_mcp,
        ..HttpOptions::default()
    };
    if let Some(n) = a.max_concurrency {
        options.max_concurrency = n;
    }
    let shared = Shared::new(service, &options);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        if a.mcp_stdio {
            eprintln!("sift serve: MCP on standard input and output");
            return sift_serve::mcp::serve_stdio(shared)
                .await
                .context("serving MCP over stdio");
        }
        let listener = tokio::net::TcpListener::bind(a.addr)
            .await
            .with_context(|| format!("listening on {}", a.addr))?;
        sift_serve::serve_http(
            listener,
            shared,
            &options,
            sift_serve::shutdown_signal(),
            |addr| {
                eprintln!("sift serve: listening on http://{addr}");
            },
        )
        .await
        .context("serving HTTP")?;
        eprintln!("sift serve: stopped");
        Ok(())
    })
}
