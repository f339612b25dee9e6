#![no_main]
//! `cargo fuzz run manifest`: see `../targets.rs` ([`targets::manifest`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::manifest(data));
