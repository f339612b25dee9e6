#![no_main]
//! `cargo fuzz run mcp_messages`: see `../targets.rs` ([`targets::mcp_messages`]).
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::mcp_messages(data));
