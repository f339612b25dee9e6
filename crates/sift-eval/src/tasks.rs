//! Assembly of evaluation tasks from a corpus (`shared/docs/mm-bright-protocol.md`,
//! "Qrels per task").
use std::collections::HashSet;
use std::path::Path;

use sift_core::{Corpus, Example, Layout, Qrels, WarningKind, Warnings};

use crate::Result;
use crate::metrics::Exclusions;

/// Queries, judgements and exclusions of one task on one domain.
#[derive(Debug, Clone, Default)]
pub struct TaskData {
    /// Domain name.
    pub domain: String,
    /// Queries to run (only those with judgements).
    pub queries: Vec<Example>,
    /// Judgements.
    pub qrels: Qrels,
    /// Per-query passages removed from the ranking before scoring.
    pub exclusions: Exclusions,
    /// Queries dropped because they have no judgements.
    pub dropped_no_qrels: usize,
    /// Problems counted while reading.
    pub warnings: Warnings,
}

/// Task 1 (query text -> passages) on `domain`.
///
/// MM-BRIGHT: `examples` rows; `qrels[qid][gold_id] = 1`; each query's `negative_ids` are
/// excluded from its ranking (as the reference code does). BEIR: `queries.jsonl` with the
/// graded qrels of `split`; no exclusions. Queries with no judgements are dropped before
/// scoring, and counted.
pub fn task1(corpus: &Corpus, domain: &str, split: &str) -> Result<TaskData> {
    let mut warnings = Warnings::new();
    let examples = corpus.examples(domain, false, &mut warnings)?;
    let mut data = TaskData {
        domain: domain.to_string(),
        ..TaskData::default()
    };
    match corpus.layout() {
        Layout::MmBright => {
            for ex in examples {
                if ex.gold_ids.is_empty() {
                    data.dropped_no_qrels += 1;
                    continue;
                }
                let judged = data.qrels.entry(ex.id.clone()).or_default();
                for gold in &ex.gold_ids {
                    judged.insert(gold.clone(), 1);
                }
                let excluded: std::collections::BTreeSet<String> =
                    ex.negative_ids.iter().cloned().collect();
                if !excluded.is_empty() {
                    data.exclusions.insert(ex.id.clone(), excluded);
                }
                data.queries.push(ex);
            }
        }
        Layout::Beir => {
            let known: HashSet<&str> = examples.iter().map(|e| e.id.as_str()).collect();
            data.qrels = corpus.beir_qrels(split, Some(&known), &mut warnings)?;
            data.qrels.retain(|_, judged| !judged.is_empty());
            let total = examples.len();
            data.queries = examples
                .into_iter()
                .filter(|e| data.qrels.contains_key(&e.id))
                .collect();
            data.dropped_no_qrels = total - data.queries.len();
        }
    }
    data.warnings = warnings;
    Ok(data)
}

/// Counts qrels entries naming documents that `known` does not contain. They are kept: as in
/// trec_eval, a relevant document that cannot be retrieved still counts in the ideal ranking.
pub fn check_qrels_ids(
    qrels: &Qrels,
    known: impl Fn(&str) -> bool,
    source: &Path,
    warnings: &mut Warnings,
) {
    for (qid, docs) in qrels {
        for doc in docs.keys() {
            if !known(doc) {
                warnings.push(
                    WarningKind::UnknownDocId,
                    source,
                    String::new(),
                    format!(
                        "query {qid:?} judges unknown document {doc:?} (kept; never retrievable)"
                    ),
                );
            }
        }
    }
}
