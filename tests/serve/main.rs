//! `sift serve` end to end: the binary is started on a free loopback port and spoken to by
//! real clients (ureq for HTTP, rmcp's client for MCP over stdio; OpenAI's and MCP's Python
//! clients in `python_clients_*`), over an index of the sample corpus with BM25 and the
//! tiny CLIP. The service's HTTP and MCP-over-HTTP behaviour on its own (errors, limits,
//! connections, shapes) is tested in-process by sift-serve's `http` tests; these are the
//! tests that need the command: its answers compared with other commands', its flags, exit
//! codes, signals and log, MCP over stdio, and the Python clients.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

#[path = "../common/mod.rs"]
mod common;
use common::serve::*;
use common::*;

mod api;
mod batching;
mod clients;
mod command_line;
mod mcp_stdio;
mod training;
