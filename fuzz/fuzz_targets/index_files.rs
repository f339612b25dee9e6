#![no_main]
//! `cargo fuzz run index_files`: see `../targets.rs` ([`targets::index_files`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::index_files(data));
