#![no_main]
//! `cargo fuzz run trec_qrels`: see `../targets.rs` ([`targets::trec_qrels`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::trec_qrels(data));
