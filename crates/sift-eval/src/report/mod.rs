//! Reports: per-domain result tables (Markdown and JSON), and `sift report`'s HTML page
//! of evaluation directories ([`html`]).
use std::collections::BTreeMap;

use serde::Serialize;

use crate::metrics::{Metrics, mean_of};

pub mod html;

/// Metrics of one domain.
#[derive(Debug, Clone, Serialize)]
pub struct DomainResult {
    /// Domain name.
    pub domain: String,
    /// Number of evaluated queries.
    pub queries: usize,
    /// Mean metrics over the domain's queries.
    pub metrics: Metrics,
}

/// Results of one task and retriever over several domains.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Task name (`1`, ...).
    pub task: String,
    /// Retriever description.
    pub retriever: String,
    /// Per-domain results, in domain order.
    pub per_domain: Vec<DomainResult>,
}

impl Report {
    /// Unweighted mean over domains (MM-BRIGHT's headline aggregation).
    pub fn mean(&self) -> Metrics {
        mean_of(self.per_domain.iter().map(|d| &d.metrics))
    }

    /// JSON: `{"task", "retriever", "metrics": {...mean}, "per_domain": {domain: {...}},
    /// "queries": {domain: n}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let per_domain: BTreeMap<&str, &Metrics> = self
            .per_domain
            .iter()
            .map(|d| (d.domain.as_str(), &d.metrics))
            .collect();
        let queries: BTreeMap<&str, usize> = self
            .per_domain
            .iter()
            .map(|d| (d.domain.as_str(), d.queries))
            .collect();
        serde_json::json!({
            "task": self.task,
            "retriever": self.retriever,
            "metrics": self.mean(),
            "per_domain": per_domain,
            "queries": queries,
        })
    }

    /// A Markdown table with one row per domain and a mean row, values in percent.
    pub fn to_markdown(&self, columns: &[&str]) -> String {
        let mut s = String::new();
        s.push_str("| domain | queries |");
        for c in columns {
            s.push_str(&format!(" {c} |"));
        }
        s.push_str("\n|---|---:|");
        for _ in columns {
            s.push_str("---:|");
        }
        s.push('\n');
        let row = |s: &mut String, name: &str, n: String, m: &Metrics| {
            s.push_str(&format!("| {name} | {n} |"));
            for c in columns {
                match m.get(*c) {
                    Some(v) => s.push_str(&format!(" {:.2} |", v * 100.0)),
                    None => s.push_str(" - |"),
                }
            }
            s.push('\n');
        };
        for d in &self.per_domain {
            row(&mut s, &d.domain, d.queries.to_string(), &d.metrics);
        }
        if self.per_domain.len() > 1 {
            let total: usize = self.per_domain.iter().map(|d| d.queries).sum();
            row(&mut s, "**mean**", total.to_string(), &self.mean());
        }
        s
    }
}
