#![no_main]
//! `cargo fuzz run beir_corpus`: see `../targets.rs` ([`targets::beir_corpus`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::beir_corpus(data));
