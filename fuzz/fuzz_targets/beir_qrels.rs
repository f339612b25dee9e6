#![no_main]
//! `cargo fuzz run beir_qrels`: see `../targets.rs` ([`targets::beir_qrels`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::beir_qrels(data));
