#![no_main]
//! `cargo fuzz run image`: see `../targets.rs` ([`targets::image`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::image(data));
