//! End-to-end tests of the `sift` binary: the README quickstart on the bundled sample, the
//! Cranfield acceptance check, and bad input of every kind (each must give a clear error
//! naming file and line/row, or a counted warning; never a panic or a half-written index).
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::Value;

#[path = "../common/mod.rs"]
mod common;
use common::*;

mod bad_input;
mod bench_eval;
mod embed;
mod faiss;
mod knowledge_base;
mod models;
mod quickstart;
mod tasks;
