#![no_main]
//! `cargo fuzz run generator_replies`: see `../targets.rs` ([`targets::generator_replies`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::generator_replies(data));
