#![no_main]
//! `cargo fuzz run exclusions`: see `../targets.rs` ([`targets::exclusions`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::exclusions(data));
