#![no_main]
//! `cargo fuzz run serve_eval`: see `../targets.rs` ([`targets::serve_eval`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::serve_eval(data));
