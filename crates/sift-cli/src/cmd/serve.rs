use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use sift_retrieve::SearchSettings;
use sift_serve::{AccessLog, HttpOptions, Shared};
use sift_service::{Limits, ServeConfig, Service};

use crate::models::ModelFlags;
use crate::options::Bm25Flags;

mod address_file;

/// `sift serve --help`'s description.
pub const LONG_ABOUT: &str = "Serve an index to search agents and benchmarks, read-only: a JSON API (OpenAPI at /openapi.json), Serper's /search, /images, /lens, /videos and /news (GET or POST), SerpAPI's GET /search and /search.json (engine=google, google_images, google_lens), readable pages for every link a hit carries (/v1/{domain}/page/{id}: HTML, Markdown or text) and a Jina-Reader-compatible GET /r/{url}, OpenAI-compatible /v1/models, /v1/embeddings and /v1/chat/completions (--generator), Cohere-compatible /v1/rerank (--rerank), Search-R1's and verl's POST /retrieve (BrowseComp-Plus's single query too) R1-Searcher's POST /queries and text-embeddings-inference's POST /embed, pyserini-style /v1/{domain}/search and /doc/{id}, and MCP tools over streamable HTTP at /mcp (or over stdio with --mcp-stdio).\n\nA request that names no domain searches every domain served (all of the index, or those given with --domain) and merges the hits into one ranking: BM25 is scored with the statistics of all those domains summed, as one index over them would score it, and dense scores are cosines of one model, comparable as they are.\n\nModels and the corpus are loaded once at start. Passage texts and images come from --corpus (kept in memory; images listed from folders are read on request); without it, results carry ids and scores only. SIGTERM or Ctrl-C stops taking connections, gives the requests in flight --shutdown-grace to finish, closes the connections still open and exits. A client has --header-timeout for each request's headers (a kept-alive connection idle that long is closed) and --body-timeout for its body.";

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
sift serve --index target/sample-index --corpus corpora/sample\n  \
curl -s localhost:8080/v1/search -d '{\"query\": \"how do plants make sugar\", \"domain\": \"biology\"}'\n  \
SERPER_BASE_URL=http://127.0.0.1:8080 my-agent ...   # Serper: POST or GET /search, /images, /lens\n  \
curl -s 'localhost:8080/search.json?engine=google&q=photosynthesis'   # SerpAPI\n  \
curl -s localhost:8080/r/http://localhost:8080/v1/biology/page/<id>   # Jina Reader\n  \
sift serve --index target/sample-index --corpus corpora/sample --mcp-stdio   # MCP client config\n  \
sift serve --generator Qwen/Qwen2-VL-2B-Instruct --rerank cross-encoder/ms-marco-MiniLM-L-6-v2   # no index: chat and rerank only")]
pub struct Args {
    /// Index directory. Without one, the service only answers chat completions
    /// (--generator) and reranks given documents (--rerank, `POST /v1/rerank`).
    #[arg(long, required_unless_present_any = ["generator", "rerank"])]
    index: Option<PathBuf>,
    /// The corpus the index was built from (a directory, or a knowledge-base .jsonl /
    /// .parquet file): passage texts, images, page links.
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// How Task 4's pairs link passages and images: regex (equal 8-hex base keys, the
    /// reference code) or source-id (the annotations' source_passage_id; needs --corpus).
    #[arg(long, value_enum, default_value = "regex")]
    pair_link: sift_eval::PairLink,
    /// Prepare MM-BRIGHT's reference code's query rule for images and pairs at start (its
    /// white stand-in images and, for a reference-profile index, the pair vectors it
    /// embeds), so that searches may ask for `"fusion": "reference"` on every candidate
    /// kind (passages take it without this).
    #[arg(long)]
    reference_fusion: bool,
    /// A local generator for OpenAI's `POST /v1/chat/completions`: a Qwen2-VL- or
    /// Qwen2.5-VL-Instruct checkpoint (directory or hub id), loaded on --device; the `model` requests name is
    /// this value.
    #[arg(long)]
    generator: Option<String>,
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
    /// Once listening, write this server's address into DIR for trainers that find N
    /// servers (ASearcher's RAG_SERVER_ADDR_DIR): `DIR/Host<ip>_IP<port>.txt` holding
    /// `<ip>:<port>` (the port bound, --addr HOST:0 included), written atomically and
    /// removed when the server stops on SIGTERM or Ctrl-C. The IP is --advertise-host,
    /// else --addr's, else (0.0.0.0 or ::) the address this machine's default route leaves
    /// from. DIR is created if missing.
    #[arg(long, value_name = "DIR", conflicts_with = "mcp_stdio")]
    address_file: Option<PathBuf>,
    /// The host (IP address or hostname) written by --address-file, where other machines
    /// reach this server (behind NAT, or a name the cluster resolves).
    #[arg(long, value_name = "HOST", requires = "address_file", value_parser = address_file::check_host)]
    advertise_host: Option<String>,
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
    /// Requests worked on at once (each on its own thread, 1 to 1024); more wait. Default:
    /// the number of CPU threads.
    #[arg(long, value_parser = crate::options::positive)]
    max_concurrency: Option<usize>,
    /// Time limit of one request, waiting for a worker included (seconds, 0.001 to 86400).
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Time a client has to send a request's headers, from when the connection is ready
    /// for them: opened, or its previous answer sent, so a kept-alive connection idle this
    /// long is closed (seconds, 0.001 to 3600).
    #[arg(long, default_value_t = 30.0)]
    header_timeout: f64,
    /// Time a client has to send a request's body, from the end of its headers; past it
    /// the answer is a 408 and the connection is closed (seconds, 0.001 to 86400).
    #[arg(long, default_value_t = 60.0)]
    body_timeout: f64,
    /// On SIGTERM or Ctrl-C: how long requests in flight have to finish before the
    /// connections still open are closed and the service exits (seconds, 0 to 3600).
    #[arg(long, default_value_t = 10.0)]
    shutdown_grace: f64,
    /// MCP sessions over HTTP open at once (1 to 100000); a new one past it is refused
    /// with a 503 until one is closed or expires (5 minutes idle).
    #[arg(long, default_value_t = 256)]
    max_mcp_sessions: usize,
    /// An API key every request but /healthz must carry (X-API-KEY, Authorization: Bearer,
    /// or ?api_key=), as Serper and SerpAPI check theirs; whitespace around it is trimmed
    /// (with a warning), an empty key is an error. Default: keys are accepted and ignored.
    #[arg(long, env = "SIFT_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest request body (bytes, 1 to 4 GiB).
    #[arg(long, default_value_t = 32 << 20, value_parser = crate::options::positive)]
    max_body_bytes: usize,
    /// Largest image in a request (encoded bytes, 1 to 4 GiB).
    #[arg(long, default_value_t = 16 << 20, value_parser = crate::options::positive)]
    max_image_bytes: usize,
    /// Largest image in a request (pixels, read from its header before decoding; 1 to
    /// 10^12).
    #[arg(long, default_value_t = 40_000_000)]
    max_image_pixels: u64,
    /// Images in one request: a search's query images, an embeddings request's image
    /// inputs (1 to 1024).
    #[arg(long, default_value_t = 8, value_parser = crate::options::positive)]
    max_images: usize,
    /// Queries in one batch request: Search-R1's and verl's `POST /retrieve`, R1-Searcher's
    /// `POST /queries` (1 to 1000000; past it a 413 naming the limit).
    #[arg(long, default_value_t = 4096, value_parser = crate::options::int_in::<usize>(1, 1_000_000))]
    max_batch_queries: usize,
    /// Text queries encoded in one batch: the queries of concurrent requests (and the chunks
    /// of a large one) are encoded together, up to this many (1 to 4096).
    #[arg(long, default_value_t = 64, value_parser = crate::options::int_in::<usize>(1, 4096))]
    query_batch: usize,
    /// Longest time a text query waits for others to fill its batch, milliseconds (0 to
    /// 1000). A busy service batches without waiting: queries queue while a batch encodes.
    #[arg(long, default_value_t = 2, value_parser = crate::options::int_in::<u64>(0, 1000))]
    query_batch_wait_ms: u64,
    /// Text queries waiting to be encoded at once; a request past it is refused at once
    /// (503 with Retry-After: 1) instead of waiting (1 to 10000000).
    #[arg(long, default_value_t = 16_384, value_parser = crate::options::int_in::<usize>(1, 10_000_000))]
    max_queued_queries: usize,
    /// Batch searches (`POST /retrieve`, `POST /queries`) worked on at once, beside
    /// --max-concurrency: they mostly wait for their shared encoding batch (1 to 65536).
    #[arg(long, default_value_t = 256, value_parser = crate::options::int_in::<usize>(1, 65_536))]
    max_batched_requests: usize,
    /// Requests waiting for a worker at once; one more is refused at once (503 with
    /// Retry-After: 1) rather than queued to time out (1 to 1000000).
    #[arg(long, default_value_t = 4096, value_parser = crate::options::int_in::<usize>(1, 1_000_000))]
    max_waiting: usize,
    /// Pixels of all the images of one request together (read from their headers before
    /// any is decoded; 1 to 10^13).
    #[arg(long, default_value_t = 100_000_000)]
    max_request_pixels: u64,
    /// Largest top_k (1 to 1000000).
    #[arg(long, default_value_t = 1000, value_parser = crate::options::positive)]
    max_top_k: usize,
    /// Characters of each result's text when a request does not say (0 to 100000000).
    #[arg(long, default_value_t = 1200)]
    text_chars: usize,
    #[command(flatten)]
    search: crate::options::SearchFlags,
    #[command(flatten)]
    model_flags: ModelFlags,
    #[command(flatten)]
    bm25: Bm25Flags,
    // every search's hits go through --rerank (its --rerank-depth of them); needs --corpus
    #[command(flatten)]
    rerank: crate::options::RerankFlags,
}

/// A number of seconds from `min` to `max`, as a duration; the error names the flag and the
/// range.
fn seconds(flag: &str, value: f64, min: f64, max: f64) -> Result<Duration> {
    if value.is_finite() && (min..=max).contains(&value) {
        Ok(Duration::from_secs_f64(value))
    } else {
        anyhow::bail!("{flag} is {value}: give a number of seconds from {min} to {max}")
    }
}

/// `value` within `min..=max`; the error names the flag and the range.
fn within<T: PartialOrd + Copy + std::fmt::Display>(
    flag: &str,
    value: T,
    min: T,
    max: T,
) -> Result<T> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        anyhow::bail!("{flag} is {value}: give {min} to {max}")
    }
}

/// The largest --max-concurrency: each request in flight is a thread of its own.
const MAX_CONCURRENCY: usize = 1024;
const GIB4: usize = 4 << 30;

/// The flags' values checked against their ranges, as the service's options: unbounded,
/// huge values overflow `Instant + Duration` (the durations), make the semaphore panic
/// (--max-concurrency), overflow the image size check (--max-image-bytes) or ask for
/// allocations that cannot be made (--max-top-k, --ef-search). (--k1 and --b are checked
/// when the service loads.)
fn http_options(a: &Args) -> Result<HttpOptions> {
    within("--max-image-bytes", a.max_image_bytes, 1, GIB4)?;
    within(
        "--max-image-pixels",
        a.max_image_pixels,
        1,
        1_000_000_000_000,
    )?;
    within("--max-images", a.max_images, 1, 1024)?;
    within(
        "--max-request-pixels",
        a.max_request_pixels,
        1,
        10_000_000_000_000,
    )?;
    within("--max-top-k", a.max_top_k, 1, 1_000_000)?;
    within("--text-chars", a.text_chars, 0, 100_000_000)?;
    within("--ef-search", a.search.ef_search, 1, 100_000)?;
    let mut options = HttpOptions {
        timeout: seconds("--timeout", a.timeout, 0.001, 86_400.0)?,
        header_timeout: seconds("--header-timeout", a.header_timeout, 0.001, 3_600.0)?,
        body_timeout: seconds("--body-timeout", a.body_timeout, 0.001, 86_400.0)?,
        shutdown_grace: seconds("--shutdown-grace", a.shutdown_grace, 0.0, 3_600.0)?,
        max_mcp_sessions: within("--max-mcp-sessions", a.max_mcp_sessions, 1, 100_000)?,
        max_body_bytes: within("--max-body-bytes", a.max_body_bytes, 1, GIB4)?,
        access_log: if a.quiet {
            AccessLog::Off
        } else if a.json {
            AccessLog::Json
        } else {
            AccessLog::Text
        },
        mcp: !a.no_mcp,
        api_key: match a.api_key.as_deref() {
            None => None,
            Some(raw) => {
                let (key, trimmed) = sift_serve::http::check_api_key(raw)?;
                if trimmed {
                    eprintln!(
                        "sift serve: warning: the API key (--api-key or SIFT_API_KEY) had \
                         whitespace around it; it was trimmed, as clients' keys are"
                    );
                }
                Some(key)
            }
        },
        max_batched_requests: a.max_batched_requests,
        max_waiting: a.max_waiting,
        ..HttpOptions::default()
    };
    if let Some(n) = a.max_concurrency {
        options.max_concurrency = within("--max-concurrency", n, 1, MAX_CONCURRENCY)?;
    }
    options.max_concurrency = options.max_concurrency.min(MAX_CONCURRENCY);
    Ok(options)
}

/// `--address-file DIR`'s file for a server listening on `bound`, announced on stderr.
fn write_address_file(
    dir: &std::path::Path,
    bound: SocketAddr,
    advertise: Option<&str>,
) -> Result<address_file::AddressFile> {
    let host = address_file::advertised_host(bound, advertise)?;
    let file = address_file::AddressFile::write(dir, &host, bound.port())?;
    eprintln!(
        "sift serve: address {} written to {}",
        file.contents(),
        file.path().display()
    );
    Ok(file)
}

pub fn run(a: Args) -> Result<()> {
    let options = http_options(&a)?;
    let bm25 = match &a.index {
        Some(index) => Some(
            a.bm25
                .apply(sift_index::IndexDir::open(index)?.manifest().bm25),
        ),
        None => None,
    };
    let config = ServeConfig {
        index: a.index.clone(),
        corpus: a.corpus.clone(),
        retrievers: a.retriever.clone(),
        domains: a.domain.clone(),
        model_options: a.model_flags.options()?,
        bm25,
        settings: SearchSettings {
            ann: a.search.ann,
            ef_search: a.search.ef_search,
            ..SearchSettings::default()
        },
        limits: Limits {
            max_top_k: a.max_top_k,
            text_chars: a.text_chars,
            max_images: a.max_images,
            max_request_pixels: a.max_request_pixels,
            max_inputs: Limits::default().max_inputs,
            max_batch_queries: a.max_batch_queries,
            max_new_tokens: Limits::default().max_new_tokens,
            image: sift_service::images::ImageLimits {
                max_bytes: a.max_image_bytes,
                max_pixels: a.max_image_pixels,
            },
        },
        generator: a.generator.clone(),
        rerank: {
            let mut stages = a.rerank.stages(&a.model_flags, None)?;
            if stages.len() > 1 {
                anyhow::bail!("sift serve takes one --rerank");
            }
            stages.pop()
        },
        pair_link: a.pair_link,
        reference_fusion: a.reference_fusion,
        model_dir: None,
        allow_partial_shards: false,
        batch: sift_service::BatchOptions {
            max_batch: a.query_batch,
            max_wait: std::time::Duration::from_millis(a.query_batch_wait_ms),
            max_queued: a.max_queued_queries,
        },
    };
    let started = std::time::Instant::now();
    let service = Service::load(&config).with_context(|| match &a.index {
        Some(index) => format!("loading {} for serving", index.display()),
        None => "loading the models for serving".to_string(),
    })?;
    let info = service.info();
    let models: Vec<String> = service.models().data.into_iter().map(|m| m.id).collect();
    eprintln!(
        "sift serve: {} domain(s), retrievers {}, models {}, loaded in {:.1}s",
        info.domains.len(),
        if info.retrievers.is_empty() {
            "none (no index)".to_string()
        } else {
            info.retrievers
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        },
        if models.is_empty() {
            "none".to_string()
        } else {
            models.join(", ")
        },
        started.elapsed().as_secs_f64()
    );
    let shared = Shared::new(service, &options);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // every request in flight holds a blocking thread; tokio's own (stdin, files) too
        .max_blocking_threads(512.max(options.max_concurrency + 64))
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(async move {
        if a.mcp_stdio {
            eprintln!("sift serve: MCP on standard input and output");
            return sift_serve::mcp::serve_stdio(shared)
                .await
                .context("serving MCP over stdio");
        }
        let listener = tokio::net::TcpListener::bind(a.addr)
            .await
            .with_context(|| format!("listening on {}", a.addr))?;
        // the handlers installed before anything is announced
        let signal = sift_serve::shutdown_signal();
        // written before the listening line
        let address_file = match &a.address_file {
            Some(dir) => Some(write_address_file(
                dir,
                listener.local_addr()?,
                a.advertise_host.as_deref(),
            )?),
            None => None,
        };
        let shutdown = async move {
            signal.await;
            // removed as the server starts draining, so that trainers re-reading the
            // directory stop picking it (dropped with this future, it goes too when
            // serving fails)
            drop(address_file);
        };
        let stopped = sift_serve::serve_http(listener, shared, &options, shutdown, |addr| {
            eprintln!("sift serve: listening on http://{addr}");
        })
        .await
        .context("serving HTTP")?;
        if stopped.dropped > 0 {
            eprintln!(
                "sift serve: closed {} connection(s) still open after the {} s grace period",
                stopped.dropped, a.shutdown_grace
            );
        }
        eprintln!("sift serve: stopped");
        Ok(())
    });
    // work still running on blocking threads (a search past its time limit) is not waited for
    runtime.shutdown_background();
    result
}
