//! `sift`: index, search and evaluate retrieval over BEIR and MM-BRIGHT corpora.
//!
//! The binary only parses flags, prints and draws progress bars: everything a library user
//! needs lives in the library crates (`sift-core`, `sift-embed`, `sift-index`, `sift-eval`
//! and, tying them together, `sift-retrieve`).
// The doc comments of the flag structs are `--help` text, written for a terminal, not rustdoc.
#![allow(rustdoc::invalid_html_tags, rustdoc::broken_intra_doc_links)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod models;
mod options;
mod progress;

/// Sift: reasoning-intensive multimodal retrieval, evaluated the way trec_eval scores it.
#[derive(Parser)]
#[command(name = "sift", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build (or rebuild) an index of a corpus: BM25 per domain, and dense vectors with HNSW
    /// for each `--dense` model.
    Index(cmd::index::Args),
    /// Search an index with one query.
    Search(cmd::search::Args),
    /// Score given (query, passage[, image]) pairs with a reranker: its raw scores.
    Rerank(cmd::rerank::Args),
    /// Evaluate a retriever on a task, or score an existing TREC run against qrels.
    Eval(Box<cmd::eval::Args>),
    /// Benchmarks: HNSW against exact search, embedding throughput, index build rates.
    #[command(subcommand)]
    Bench(cmd::bench::Cmd),
    /// Embed texts, or images with a vision-language model, and write the vectors (JSONL or
    /// .npy).
    Embed(cmd::embed::Args),
    /// List, inspect and download embedding models.
    #[command(subcommand)]
    Models(cmd::models::Cmd),
    /// Serve an index to search agents: JSON API, Serper, SerpAPI, readable pages and a
    /// Jina-compatible reader, OpenAI embeddings, MCP; every domain merged unless one is named.
    #[command(long_about = cmd::serve::LONG_ABOUT)]
    Serve(cmd::serve::Args),
    /// Read a whole corpus and report counts and problems (duplicate ids, bad rows, images
    /// that do not decode, judgements naming unknown ids).
    Check(cmd::check::Args),
    /// Generate text for each query with an OpenAI-compatible generator (captions of its
    /// images, reformulations, reasoning), cached and resumable.
    Generate(cmd::generate::Args),
    /// End-to-end RAG with a judge: answers from no evidence, the gold passages or a
    /// retriever's top k, scored 0-100 against the reference answers.
    Rag(cmd::rag::Args),
    /// One self-contained HTML report of evaluation directories: heatmaps, means with
    /// confidence intervals, paired significance tests, per-query drill-down.
    Report(cmd::report::Args),
}

fn main() -> ExitCode {
    // Output piped into a reader that stops early (`sift eval --json | head`) ends the process
    // quietly, as it does for other Unix tools, instead of a panic in `println!` on EPIPE.
    // SAFETY: called first, before any other thread exists; SIG_DFL is a valid disposition.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // SAFETY: still the only thread (see above).
    unsafe { sift_embed::tune_allocator() };
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Index(a) => cmd::index::run(a),
        Command::Search(a) => cmd::search::run(a),
        Command::Rerank(a) => cmd::rerank::run(a),
        Command::Eval(a) => cmd::eval::run(*a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Rag(a) => cmd::rag::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Embed(a) => cmd::embed::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Models(a) => cmd::models::run(a),
        Command::Serve(a) => cmd::serve::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `: `-separated, leaving out each cause whose text the message
/// already holds (library errors that name their source would otherwise print it twice).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
