//! The report's inputs: the jobs of an evaluation directory's results.json, the top of
//! each run, and the qrels and exclusions.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sift_core::Warnings;

use crate::{Error, Result, run_file_name};

/// One job of an evaluation directory.
pub(super) struct Job {
    /// `1`..`4`.
    pub(super) task: String,
    pub(super) label: String,
    pub(super) per_domain: BTreeMap<String, f64>,
    /// domain -> query -> metric value
    pub(super) per_query: BTreeMap<String, BTreeMap<String, f64>>,
    pub(super) run: PathBuf,
    pub(super) dir: usize,
}

fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::Report(format!("{}: {}", path.display(), message.into()))
}

/// The largest `results.json` a report reads (4 GiB; `sift eval` writes a few MB for
/// MM-BRIGHT's 29 domains x 4 tasks).
const RESULTS_JSON_LIMIT: u64 = 4 << 30;

/// Reads the jobs of `dir`'s results.json.
pub(super) fn read_jobs(
    dir: &Path,
    d: usize,
    metric: &str,
    prefix: Option<&str>,
) -> Result<Vec<Job>> {
    let path = dir.join("results.json");
    let text = sift_core::read_regular_text(&path, RESULTS_JSON_LIMIT)?;
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(&path, e.to_string()))?;
    let reports: Vec<&Value> = match value.get("reports").and_then(Value::as_array) {
        Some(list) => list.iter().collect(),
        None => vec![&value],
    };
    let mut jobs = Vec::new();
    for (i, r) in reports.into_iter().enumerate() {
        let field = |name: &str| {
            r.get(name)
                .ok_or_else(|| bad(&path, format!("report {i}: no {name:?}")))
        };
        let task_full = field("task")?.as_str().unwrap_or_default().to_string();
        let task = task_full
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        let label = field("label")?.as_str().unwrap_or_default().to_string();
        let mut per_domain = BTreeMap::new();
        for (domain, m) in field("per_domain")?.as_object().into_iter().flatten() {
            if let Some(v) = m.get(metric).and_then(Value::as_f64) {
                per_domain.insert(domain.clone(), v);
            }
        }
        let mut per_query = BTreeMap::new();
        let Some(pq) = r.get("per_query").and_then(Value::as_object) else {
            return Err(bad(
                &path,
                format!(
                    "report {i} ({label}) has no per-query metrics: evaluate again with \
                     `sift eval --out` (which writes them)"
                ),
            ));
        };
        for (domain, queries) in pq {
            let mut m = BTreeMap::new();
            for (q, metrics) in queries.as_object().into_iter().flatten() {
                if let Some(v) = metrics.get(metric).and_then(Value::as_f64) {
                    m.insert(q.clone(), v);
                }
            }
            per_query.insert(domain.clone(), m);
        }
        let task_enum: crate::Task = task.parse().map_err(|e: String| bad(&path, e))?;
        jobs.push(Job {
            run: dir.join("runs").join(run_file_name(task_enum, &label)),
            task,
            label: match prefix {
                Some(p) => format!("{p}: {label}"),
                None => label,
            },
            per_domain,
            per_query,
            dir: d,
        });
    }
    Ok(jobs)
}

/// The first `top` entries of each query of a TREC run (read line by line; a run is in
/// rank order per query, as Sift writes them, but any order is sorted here).
pub(super) fn read_top(path: &Path, top: usize) -> Result<HashMap<String, Vec<(String, f64)>>> {
    let mut lines = sift_core::Lines::open(path)?.with_line_limit(crate::TREC_LINE_LIMIT);
    let mut out: HashMap<String, Vec<(String, f64, u64)>> = HashMap::new();
    while let Some((n, line)) = lines.next_line()? {
        let mut f = line.split_whitespace();
        let (Some(q), Some(_), Some(doc), Some(rank), Some(score), Some(_)) =
            (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad(path, format!("line {n}: not a TREC run line")));
        };
        let score: f64 = match score.parse() {
            Ok(s) if f64::is_finite(s) => s,
            _ => {
                return Err(bad(
                    path,
                    format!("line {n}: score {score:?} is not a finite number"),
                ));
            }
        };
        let rank: u64 = rank.parse().unwrap_or(u64::MAX);
        let list = match out.get_mut(q) {
            Some(list) => list,
            None => out.entry(q.to_string()).or_default(),
        };
        if list.len() < top || rank <= top as u64 {
            list.push((doc.to_string(), score, rank));
        }
    }
    Ok(out
        .into_iter()
        .map(|(q, mut l)| {
            l.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
            l.truncate(top);
            (q, l.into_iter().map(|(d, s, _)| (d, s)).collect())
        })
        .collect())
}

/// The qrels and exclusions of `task` in `dir` (empty when absent); problems in the qrels
/// are counted in `warnings`.
pub(super) fn read_judgements(
    dir: &Path,
    task: &str,
    warnings: &mut Warnings,
) -> Result<(sift_core::Qrels, crate::Exclusions)> {
    let q = dir.join("qrels").join(format!("task{task}.qrels"));
    let x = dir.join("qrels").join(format!("task{task}.exclusions"));
    let qrels = if q.is_file() {
        crate::read_qrels(&q, warnings)?
    } else {
        Default::default()
    };
    let excl = if x.is_file() {
        crate::read_exclusions(&x)?
    } else {
        Default::default()
    };
    Ok((qrels, excl))
}
