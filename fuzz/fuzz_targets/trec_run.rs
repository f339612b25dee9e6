#![no_main]
//! `cargo fuzz run trec_run`: see `../targets.rs` ([`targets::trec_run`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::trec_run(data));
