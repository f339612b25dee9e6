#![no_main]
//! `cargo fuzz run serve_fuse`: see `../targets.rs` ([`targets::serve_fuse`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::serve_fuse(data));
