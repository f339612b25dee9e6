pub mod bench;
pub mod chats;
pub mod check;
pub mod embed;
pub mod eval;
pub mod generate;
pub mod index;
pub mod models;
pub mod rag;
pub mod report;
pub mod rerank;
pub mod search;
pub mod serve;

use sift_core::Warnings;

/// Prints a warning summary to stderr.
pub fn report_warnings(what: &str, warnings: &Warnings) {
    if warnings.is_empty() {
        return;
    }
    eprintln!("warning: {what}: {} problem(s) counted", warnings.total());
    for (kind, n) in warnings.counts() {
        eprintln!("  {:<24} {n}", kind.name());
    }
    for w in warnings.examples() {
        eprintln!("  e.g. {w}");
    }
}
