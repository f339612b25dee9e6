#![no_main]
//! `cargo fuzz run serve_search`: see `../targets.rs` ([`targets::serve_search`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::serve_search(data));
