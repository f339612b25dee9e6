#![no_main]
//! `cargo fuzz run safetensors`: see `../targets.rs` ([`targets::safetensors`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::safetensors(data));
