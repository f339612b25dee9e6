#![no_main]
//! `cargo fuzz run parquet`: see `../targets.rs` ([`targets::parquet`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::parquet(data));
