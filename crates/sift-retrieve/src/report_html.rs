//! `sift report`: evaluation directories (`sift eval --out`) as one self-contained HTML
//! file (inline SVG, CSS and JavaScript; no network): per task a domain x retriever heatmap
//! of the metric, the mean of each retriever with a 95% bootstrap confidence interval over
//! queries, the paired comparison of any two retrievers (per-query differences, wins / ties
//! / losses, t-test and randomisation test with Holm's correction across domains), and a
//! per-query drill-down (query text and image thumbnails, each retriever's top 10 with
//! snippets, thumbnails for image candidates, gold and excluded marks, the query's metric),
//! filtered by domain, retriever and "B beats A". The figures are also given as SVG files.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::{Value, json};
use sift_core::{Corpus, WarningKind, Warnings};
use sift_eval::stats;

use crate::{Error, Result, run_file_name};

/// How the report is made.
#[derive(Debug, Clone)]
pub struct HtmlOptions {
    /// The metric of the heatmaps, bars and comparisons (`ndcg@10`).
    pub metric: String,
    /// Resamples of the bootstrap and the randomisation test.
    pub resamples: usize,
    /// Their seed.
    pub seed: u64,
    /// Results shown per retriever and query in the drill-down.
    pub top: usize,
    /// Characters of a passage's snippet, at most.
    pub snippet_chars: usize,
    /// Characters of every task's snippets together, at most: with more documents to show,
    /// each snippet is cut shorter (MM-BRIGHT's 10 retrievers' top 10 show ~80k passages
    /// per task).
    pub snippet_budget: usize,
    /// Longest side of a thumbnail (pixels).
    pub thumbnail_px: u32,
    /// Bytes of thumbnails at most (JPEG, base64; 8 MB), and never more than the page's
    /// bound leaves. Each domain gets an even share of what is left, given to its query
    /// images first, then to the candidates' images by rank; images past it are named,
    /// not shown.
    pub thumbnail_budget: usize,
    /// Bytes of the page at most: the thumbnails get what the rest leaves, up to
    /// `thumbnail_budget` (20 MB by default).
    pub max_page_bytes: usize,
}

impl Default for HtmlOptions {
    fn default() -> Self {
        HtmlOptions {
            metric: "ndcg@10".into(),
            resamples: 2_000,
            seed: stats::SEED,
            top: 10,
            snippet_chars: 240,
            snippet_budget: 2_000_000,
            thumbnail_px: 96,
            thumbnail_budget: 8 << 20,
            max_page_bytes: 20_000_000,
        }
    }
}

/// The report: the page and its figures.
#[derive(Debug, Clone)]
pub struct HtmlReport {
    /// The self-contained page.
    pub html: String,
    /// (file name, SVG) of every figure.
    pub figures: Vec<(String, String)>,
    /// Thumbnails embedded, and images shown without one (past the budget, undecodable, or
    /// not in the corpus).
    pub thumbnails: (usize, usize),
    /// Problems counted: parts of the corpus that could not be read (their texts and images
    /// are not shown), rows of the qrels read as `sift eval` reads them.
    pub warnings: Warnings,
}

/// One job of an evaluation directory.
struct Job {
    /// `1`..`4`.
    task: String,
    label: String,
    per_domain: BTreeMap<String, f64>,
    /// domain -> query -> metric value
    per_query: BTreeMap<String, BTreeMap<String, f64>>,
    run: PathBuf,
    dir: usize,
}

fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::Unsupported(format!("{}: {}", path.display(), message.into()))
}

/// The largest `results.json` a report reads (4 GiB; `sift eval` writes a few MB for
/// MM-BRIGHT's 29 domains x 4 tasks).
const RESULTS_JSON_LIMIT: u64 = 4 << 30;

/// Reads the jobs of `dir`'s results.json.
fn read_jobs(dir: &Path, d: usize, metric: &str, prefix: Option<&str>) -> Result<Vec<Job>> {
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
        let task_enum: sift_eval::Task = task.parse().map_err(|e: String| bad(&path, e))?;
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
fn read_top(path: &Path, top: usize) -> Result<HashMap<String, Vec<(String, f64)>>> {
    let mut lines = sift_core::Lines::open(path)?.with_line_limit(sift_eval::TREC_LINE_LIMIT);
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
fn read_judgements(
    dir: &Path,
    task: &str,
    warnings: &mut Warnings,
) -> Result<(sift_core::Qrels, sift_eval::Exclusions)> {
    let q = dir.join("qrels").join(format!("task{task}.qrels"));
    let x = dir.join("qrels").join(format!("task{task}.exclusions"));
    let qrels = if q.is_file() {
        sift_eval::read_qrels(&q, warnings)?
    } else {
        Default::default()
    };
    let excl = if x.is_file() {
        sift_eval::read_exclusions(&x)?
    } else {
        Default::default()
    };
    Ok((qrels, excl))
}

/// Every image the page shows, once (query images and candidates' images), and the
/// thumbnail each is given.
#[derive(Default)]
struct ImageTable {
    /// (domain, query image?, id) -> slot
    index: HashMap<(String, bool, String), usize>,
    /// (domain, query image?, id, thumbnail)
    entries: Vec<(String, bool, String, Option<String>)>,
    /// domain -> query images' slots as shown, and (rank, slot) of candidates' images as
    /// shown: the order the domain's share of the thumbnails' budget is given out in
    priority: BTreeMap<String, Shown>,
}

/// A domain's query images' slots, and (rank, slot) of its candidates' images, as shown.
type Shown = (Vec<usize>, Vec<(usize, usize)>);

impl ImageTable {
    fn slot(&mut self, domain: &str, query: bool, id: &str) -> usize {
        let key = (domain.to_string(), query, id.to_string());
        if let Some(&s) = self.index.get(&key) {
            return s;
        }
        self.entries
            .push((domain.to_string(), query, id.to_string(), None));
        self.index.insert(key, self.entries.len() - 1);
        self.entries.len() - 1
    }

    /// A query image shown.
    fn query(&mut self, domain: &str, id: &str) -> usize {
        let s = self.slot(domain, true, id);
        self.priority
            .entry(domain.to_string())
            .or_default()
            .0
            .push(s);
        s
    }

    /// A candidate's image shown at `rank` (0-based).
    fn candidate(&mut self, domain: &str, id: &str, rank: usize) -> usize {
        let s = self.slot(domain, false, id);
        let p = self.priority.entry(domain.to_string()).or_default();
        p.1.push((rank, s));
        s
    }

    /// The domain's slots in the order thumbnails go to them: its query images, then its
    /// candidates' images by rank (every retriever's first, then their second, ...), each
    /// once.
    fn order(&self, domain: &str) -> Vec<usize> {
        let Some((queries, candidates)) = self.priority.get(domain) else {
            return Vec::new();
        };
        let mut candidates = candidates.clone();
        candidates.sort_by_key(|&(rank, _)| rank);
        let mut seen = HashSet::new();
        queries
            .iter()
            .copied()
            .chain(candidates.into_iter().map(|(_, s)| s))
            .filter(|&s| seen.insert(s))
            .collect()
    }

    /// Makes thumbnails within `budget` bytes: every domain in turn is given an even share
    /// of what is left, spent in [`ImageTable::order`]; images are read from the corpus
    /// one domain at a time and thumbnailed in parallel. Returns the thumbnails made.
    fn thumbnails(
        &mut self,
        corpus: &Corpus,
        budget: usize,
        px: u32,
        warnings: &mut Warnings,
    ) -> usize {
        let domains: Vec<String> = self.priority.keys().cloned().collect();
        let (mut used, mut made) = (0, 0);
        let chunk = 4 * rayon::current_num_threads().max(1);
        for (n, domain) in domains.iter().enumerate() {
            let share = (budget - used) / (domains.len() - n);
            // a thumbnail is rarely under 500 bytes: more than share / 500 are never needed
            let order: Vec<usize> = self
                .order(domain)
                .into_iter()
                .take(share / 500 + chunk)
                .collect();
            if share == 0 || order.is_empty() {
                continue;
            }
            let mut bytes: HashMap<usize, Vec<u8>> = HashMap::new();
            for query in [true, false] {
                let wanted: HashMap<&str, usize> = order
                    .iter()
                    .filter(|&&s| self.entries[s].1 == query)
                    .map(|&s| (self.entries[s].2.as_str(), s))
                    .collect();
                if wanted.is_empty() {
                    continue;
                }
                let (stream, what) = if query {
                    (corpus.query_images(domain), "query images")
                } else {
                    (corpus.images(domain), "images")
                };
                let place = format!("{what} of {domain}");
                drain(stream, corpus, place, warnings, |r| {
                    if let Some(&s) = wanted.get(r.path.as_str()) {
                        bytes.insert(s, r.bytes);
                    }
                });
            }
            // the first that does not fit ends the domain's share: the thumbnails shown
            // are always the first in its order
            let (mut spent, mut full) = (0, false);
            for part in order.chunks(chunk) {
                if full {
                    break;
                }
                let urls: Vec<Option<String>> = part
                    .par_iter()
                    .map(|s| bytes.get(s).and_then(|b| thumbnail(b, px)))
                    .collect();
                for (&s, url) in part.iter().zip(urls) {
                    let Some(u) = url else { continue };
                    if full || spent + u.len() > share {
                        full = true;
                        continue;
                    }
                    spent += u.len();
                    made += 1;
                    self.entries[s].3 = Some(u);
                }
            }
            used += spent;
        }
        made
    }

    /// `[id, thumbnail]` of every slot.
    fn to_json(&self) -> Value {
        Value::Array(
            self.entries
                .iter()
                .map(|(_, _, id, src)| json!([id, src]))
                .collect(),
        )
    }
}

/// Counts a part of the corpus the report could not read.
fn unreadable(warnings: &mut Warnings, corpus: &Corpus, place: String, e: &sift_core::Error) {
    warnings.push(
        WarningKind::UnreadableCorpus,
        corpus.root(),
        place,
        format!("{e} (not shown in the report)"),
    );
}

/// Gives `keep` every item of a corpus stream; an error is counted and ends the stream.
fn drain<T>(
    items: sift_core::Result<impl Iterator<Item = sift_core::Result<T>>>,
    corpus: &Corpus,
    place: String,
    warnings: &mut Warnings,
    mut keep: impl FnMut(T),
) {
    let items = match items {
        Ok(items) => items,
        Err(e) => return unreadable(warnings, corpus, place, &e),
    };
    for item in items {
        match item {
            Ok(t) => keep(t),
            Err(e) => {
                let place = format!("{place}, from this error on");
                return unreadable(warnings, corpus, place, &e);
            }
        }
    }
}

fn thumbnail(bytes: &[u8], px: u32) -> Option<String> {
    use base64::Engine as _;
    let img = image::load_from_memory(bytes).ok()?;
    let small = img.thumbnail(px, px).to_rgb8();
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 70)
        .encode_image(&small)
        .ok()?;
    Some(format!(
        "data:image/jpeg;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(out)
    ))
}

fn snippet(text: &str, chars: usize) -> String {
    let mut s: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        s.push('…');
    }
    s
}

/// Builds the report of the evaluation directories `dirs` (each `sift eval --out`'s), with
/// query texts, passage snippets and thumbnails from `corpus` when given.
pub fn build_html_report(
    dirs: &[PathBuf],
    corpus: Option<&Corpus>,
    options: &HtmlOptions,
) -> Result<HtmlReport> {
    let names: Vec<String> = dirs
        .iter()
        .map(|d| {
            d.file_name().map_or_else(
                || d.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let mut jobs = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let prefix = (dirs.len() > 1).then_some(names[i].as_str());
        jobs.extend(read_jobs(dir, i, &options.metric, prefix)?);
    }
    let mut tasks: Vec<String> = jobs.iter().map(|j| j.task.clone()).collect();
    tasks.sort();
    tasks.dedup();
    let mut figures = Vec::new();
    let mut imgs = ImageTable::default();
    // every run's top entries, read once
    let tops: Vec<HashMap<String, Vec<(String, f64)>>> = jobs
        .par_iter()
        .map(|j| {
            if j.run.is_file() {
                read_top(&j.run, options.top)
            } else {
                Ok(HashMap::new())
            }
        })
        .collect::<Result<_>>()?;
    // domain -> the passages some drill-down shows (their snippets are all that is kept of
    // the corpus's texts: a physics-sized domain is not held in memory)
    let mut shown: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (j, top) in jobs.iter().zip(&tops) {
        if j.task == "3" {
            continue;
        }
        for (domain, queries) in &j.per_query {
            let set = shown.entry(domain.as_str()).or_default();
            for q in queries.keys() {
                for (doc, _) in top.get(q).into_iter().flatten() {
                    set.insert(sift_eval::split_pair_id(doc).0);
                }
            }
        }
    }
    let mut warnings = Warnings::new();
    // domain -> passage id -> snippet (read once per domain)
    let mut texts: HashMap<String, HashMap<String, String>> = HashMap::new();
    // (domain, multimodal) -> query id -> query
    let mut queries_read: HashMap<(String, bool), HashMap<String, sift_core::Example>> =
        HashMap::new();
    let mut data_tasks = Vec::new();
    for task in &tasks {
        let ti: Vec<usize> = (0..jobs.len()).filter(|&i| &jobs[i].task == task).collect();
        let tj: Vec<&Job> = ti.iter().map(|&i| &jobs[i]).collect();
        let mut domains: Vec<String> = tj
            .iter()
            .flat_map(|j| j.per_domain.keys().cloned())
            .collect();
        domains.sort();
        domains.dedup();
        let labels: Vec<String> = tj.iter().map(|j| j.label.clone()).collect();
        // heatmap and bars
        let cells: Vec<Vec<Option<f64>>> = tj
            .iter()
            .map(|j| {
                domains
                    .iter()
                    .map(|d| j.per_domain.get(d).copied())
                    .collect()
            })
            .collect();
        let heat = heatmap_svg(task, &options.metric, &domains, &labels, &cells);
        let bars: Vec<(f64, f64, (f64, f64))> = tj
            .par_iter()
            .map(|j| {
                let means: Vec<f64> = j.per_domain.values().copied().collect();
                let pooled: Vec<f64> = j
                    .per_query
                    .values()
                    .flat_map(|m| m.values().copied())
                    .collect();
                let ci = stats::bootstrap_ci(&pooled, 0.95, options.resamples, options.seed);
                (stats::mean(&means), stats::mean(&pooled), ci)
            })
            .collect();
        let bar = bars_svg(task, &options.metric, &labels, &bars);
        let grouped = grouped_svg(task, &options.metric, &domains, &labels, &cells);
        figures.push((format!("task{task}_heatmap.svg"), heat.clone()));
        figures.push((format!("task{task}_means.svg"), bar.clone()));
        figures.push((format!("task{task}_domains.svg"), grouped.clone()));
        // every pair's comparison (a < b; the page swaps sides for b < a), in parallel
        let per_query: Vec<stats::PerQuery> = tj
            .iter()
            .map(|j| {
                j.per_query
                    .iter()
                    .map(|(d, m)| {
                        let queries = m
                            .iter()
                            .map(|(q, v)| (q.clone(), [(options.metric.clone(), *v)].into()))
                            .collect();
                        (d.clone(), queries)
                    })
                    .collect()
            })
            .collect();
        let pairs: Vec<(usize, usize)> = (0..tj.len())
            .flat_map(|a| (a + 1..tj.len()).map(move |b| (a, b)))
            .collect();
        let comparisons: Vec<Value> = {
            pairs
                .par_iter()
                .map(|&(a, b)| {
                    let c = stats::compare_domains(
                        &per_query[a],
                        &per_query[b],
                        &options.metric,
                        options.resamples,
                        options.seed,
                    );
                    json!({"a": a, "b": b, "domains": c})
                })
                .collect()
        };
        // drill-down: every query of the task
        let mut queries = Vec::new();
        let judgements: Vec<(sift_core::Qrels, sift_eval::Exclusions)> = (0..dirs.len())
            .map(|d| read_judgements(&dirs[d], task, &mut warnings))
            .collect::<Result<_>>()?;
        // the image shown for a document of the task, if any
        let image_of = |doc: &'_ str| -> Option<String> {
            if task == "3" {
                Some(doc.to_string())
            } else {
                sift_eval::split_pair_id(doc).1.map(str::to_string)
            }
        };
        // every document shown once per task: id, snippet, its image's slot in the image table
        let mut doc_index: HashMap<String, usize> = HashMap::new();
        let mut docs: Vec<Value> = Vec::new();
        for domain in &domains {
            let mut qids: Vec<&String> = tj
                .iter()
                .flat_map(|j| j.per_query.get(domain).into_iter().flat_map(|m| m.keys()))
                .collect();
            qids.sort();
            qids.dedup();
            // Tasks 2-4 share the multimodal queries: read (and their problems counted) once
            let key = (domain.clone(), task != "1");
            if let Some(c) = corpus
                && !queries_read.contains_key(&key)
            {
                let mut m = HashMap::new();
                match c.examples(domain, key.1, &mut warnings) {
                    Ok(v) => m.extend(v.into_iter().map(|e| (e.id.clone(), e))),
                    Err(e) => unreadable(&mut warnings, c, format!("queries of {domain}"), &e),
                }
                queries_read.insert(key.clone(), m);
            }
            let no_queries = HashMap::new();
            let examples = queries_read.get(&key).unwrap_or(&no_queries);
            if let Some(c) = corpus {
                let place = |what: &str| format!("{what} of {domain}");
                if !texts.contains_key(domain) {
                    let wanted = shown.get(domain.as_str());
                    let mut m = HashMap::new();
                    drain(
                        c.passages(domain),
                        c,
                        place("passages"),
                        &mut warnings,
                        |p| {
                            if wanted.is_some_and(|w| w.contains(p.id.as_str())) {
                                let s = snippet(&p.text, options.snippet_chars);
                                m.insert(p.id, s);
                            }
                        },
                    );
                    texts.insert(domain.clone(), m);
                }
            }
            for q in qids {
                let ex = examples.get(q.as_str());
                let qimgs: Vec<Value> = ex
                    .map(|e| e.image_paths.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|p| json!(imgs.query(domain, p)))
                    .collect();
                let mut results = Vec::new();
                for (ji, j) in tj.iter().enumerate() {
                    let (qrels, excl) = &judgements[j.dir];
                    let gold = qrels.get(q.as_str());
                    let excluded: HashSet<&str> = excl
                        .get(q.as_str())
                        .map(|s| s.iter().map(String::as_str).collect())
                        .unwrap_or_default();
                    let hits: Vec<Value> = tops[ti[ji]]
                        .get(q.as_str())
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .enumerate()
                        .map(|(rank, (doc, score))| {
                            let image = image_of(doc).map(|id| imgs.candidate(domain, &id, rank));
                            let at = match doc_index.get(doc) {
                                Some(&i) => i,
                                None => {
                                    let passage = sift_eval::split_pair_id(doc).0;
                                    // the snippet is cut once every document is known
                                    let text = texts.get(domain).and_then(|m| m.get(passage));
                                    docs.push(json!([doc, text, image]));
                                    doc_index.insert(doc.clone(), docs.len() - 1);
                                    docs.len() - 1
                                }
                            };
                            let grade = gold.and_then(|g| g.get(doc)).copied().unwrap_or(0);
                            let score = (score * 1e4).round() / 1e4;
                            json!([at, score, grade, excluded.contains(doc.as_str()) as u8])
                        })
                        .collect();
                    results.push(json!({
                        "value": j.per_query.get(domain).and_then(|m| m.get(q)),
                        "hits": hits,
                    }));
                }
                queries.push(json!({
                    "domain": domain, "id": q,
                    "text": ex.map(|e| e.query.clone()),
                    "images": qimgs,
                    "results": results,
                }));
            }
        }
        // every task's snippets within the budget: each cut to budget / documents
        let per_doc = options.snippet_budget / docs.len().max(1);
        if per_doc < options.snippet_chars {
            for d in &mut docs {
                if let Some(Value::String(t)) = d.get_mut(1) {
                    *t = snippet(t.trim_end_matches('…'), per_doc);
                }
            }
        }
        data_tasks.push(json!({
            "task": task, "domains": domains, "labels": labels,
            "cells": cells, "bars": bars.iter().map(|(m, p, ci)| json!({"mean": m, "pooled": p, "lo": ci.0, "hi": ci.1})).collect::<Vec<_>>(),
            "heatmap": heat, "barsSvg": bar, "grouped": grouped,
            "comparisons": comparisons, "queries": queries, "docs": docs,
        }));
    }
    let data = json!({
        "metric": options.metric, "dirs": names, "tasks": data_tasks,
        "resamples": options.resamples, "seed": options.seed,
    });
    // the image table is packed apart from the rest, which is packed once
    let data = pack(&data);
    let mut html = page(&data, &pack(&imgs.to_json()), &names);
    let mut made = 0;
    if let Some(c) = corpus {
        // the thumbnails get what the page leaves of its bound (a thumbnail's base64 text
        // grows ~2% through the page's gzip and base64)
        let room = options.max_page_bytes.saturating_sub(html.len()) * 100 / 103;
        made = imgs.thumbnails(
            c,
            options.thumbnail_budget.min(room),
            options.thumbnail_px,
            &mut warnings,
        );
        if made > 0 {
            html = page(&data, &pack(&imgs.to_json()), &names);
        }
    }
    Ok(HtmlReport {
        html,
        figures,
        thumbnails: (made, imgs.entries.len() - made),
        warnings,
    })
}

#[cfg(feature = "png")]
/// Renders SVG figures to PNG (white background, `scale` pixels per SVG unit), with the
/// system's fonts loaded once; sans-serif text falls back to DejaVu Sans or Liberation
/// Sans where the system has them.
pub struct PngRenderer {
    options: resvg::usvg::Options<'static>,
    scale: f32,
}

#[cfg(feature = "png")]
impl PngRenderer {
    /// A renderer at `scale` (2: twice the SVG's size, for print).
    pub fn new(scale: f32) -> PngRenderer {
        let mut options = resvg::usvg::Options::default();
        let db = options.fontdb_mut();
        db.load_system_fonts();
        for family in ["DejaVu Sans", "Liberation Sans", "Arial"] {
            let has = db
                .faces()
                .any(|f| f.families.iter().any(|(name, _)| name == family));
            if has {
                db.set_sans_serif_family(family);
                break;
            }
        }
        PngRenderer { options, scale }
    }

    /// The PNG of `svg` (`name` in errors).
    pub fn render(&self, name: &str, svg: &str) -> Result<Vec<u8>> {
        let err = |m: String| Error::Unsupported(format!("figure {name}: {m}"));
        let tree =
            resvg::usvg::Tree::from_str(svg, &self.options).map_err(|e| err(e.to_string()))?;
        let size = tree.size().to_int_size();
        let (w, h) = (
            (size.width() as f32 * self.scale).ceil() as u32,
            (size.height() as f32 * self.scale).ceil() as u32,
        );
        let mut pixmap = resvg::tiny_skia::Pixmap::new(w, h)
            .ok_or_else(|| err(format!("cannot make a {w}x{h} image")))?;
        pixmap.fill(resvg::tiny_skia::Color::WHITE);
        resvg::render(
            &tree,
            resvg::tiny_skia::Transform::from_scale(self.scale, self.scale),
            &mut pixmap.as_mut(),
        );
        pixmap.encode_png().map_err(|e| err(e.to_string()))
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// White (0) to dark blue (1).
fn color(v: f64) -> String {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    format!(
        "rgb({},{},{})",
        lerp(247.0, 8.0),
        lerp(251.0, 48.0),
        lerp(255.0, 107.0)
    )
}

fn heatmap_svg(
    task: &str,
    metric: &str,
    domains: &[String],
    labels: &[String],
    cells: &[Vec<Option<f64>>],
) -> String {
    let (cw, ch, left, top) = (56.0, 22.0, 260.0, 110.0);
    let w = left + cw * domains.len() as f64 + 20.0;
    let h = top + ch * labels.len() as f64 + 30.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heatmap\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"11\"><title>Task {task}: {} by domain and retriever</title>",
        esc(metric)
    );
    for (c, d) in domains.iter().enumerate() {
        let x = left + cw * c as f64 + cw / 2.0;
        let _ = write!(
            s,
            "<text transform=\"translate({x},{}) rotate(-45)\" class=\"domain\">{}</text>",
            top - 6.0,
            esc(d)
        );
    }
    for (r, l) in labels.iter().enumerate() {
        let y = top + ch * r as f64;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"retriever\">{}</text>",
            left - 6.0,
            y + ch * 0.7,
            esc(l)
        );
        for (c, v) in cells[r].iter().enumerate() {
            let x = left + cw * c as f64;
            match v {
                Some(v) => {
                    let fg = if *v > 0.55 { "#fff" } else { "#000" };
                    let _ = write!(
                        s,
                        "<rect class=\"cell\" x=\"{x}\" y=\"{y}\" width=\"{cw}\" height=\"{ch}\" fill=\"{}\"><title>{} / {}: {:.4}</title></rect>\
                         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{fg}\">{:.1}</text>",
                        color(*v),
                        esc(&domains[c]),
                        esc(l),
                        v,
                        x + cw / 2.0,
                        y + ch * 0.7,
                        v * 100.0
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        "<rect x=\"{x}\" y=\"{y}\" width=\"{cw}\" height=\"{ch}\" fill=\"#eee\"/>"
                    );
                }
            }
        }
    }
    s.push_str("</svg>");
    s
}

/// A qualitative palette (Tableau 10) for retrievers.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Bars grouped by domain: one bar per retriever in each domain's group, with a legend.
fn grouped_svg(
    task: &str,
    metric: &str,
    domains: &[String],
    labels: &[String],
    cells: &[Vec<Option<f64>>],
) -> String {
    let (bw, gap, height, left, top) = (8.0, 10.0, 160.0, 40.0, 20.0);
    let group = bw * labels.len() as f64 + gap;
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
    let w = (left + group * domains.len() as f64 + 20.0).max(left + 20.0 + 6.5 * longest);
    let legend = 16.0 * labels.len() as f64;
    let h = top + height + 90.0 + legend;
    let y = |v: f64| top + height * (1.0 - v.clamp(0.0, 1.0));
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"grouped\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"11\"><title>Task {task}: {} per domain, a bar per retriever</title>",
        esc(metric)
    );
    for t in [0.0, 0.5, 1.0] {
        let _ = write!(
            s,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0}</text>",
            left + group * domains.len() as f64,
            y(t),
            y(t),
            left - 4.0,
            y(t) + 4.0,
            t * 100.0
        );
    }
    for (c, d) in domains.iter().enumerate() {
        let x0 = left + group * c as f64;
        for (r, l) in labels.iter().enumerate() {
            if let Some(v) = cells[r][c] {
                let _ = write!(
                    s,
                    "<rect class=\"gbar\" x=\"{}\" y=\"{}\" width=\"{bw}\" height=\"{}\" fill=\"{}\"><title>{} / {}: {:.4}</title></rect>",
                    x0 + bw * r as f64,
                    y(v),
                    top + height - y(v),
                    PALETTE[r % PALETTE.len()],
                    esc(d),
                    esc(l),
                    v
                );
            }
        }
        let _ = write!(
            s,
            "<text transform=\"translate({},{}) rotate(-45)\" text-anchor=\"end\">{}</text>",
            x0 + group / 2.0,
            top + height + 12.0,
            esc(d)
        );
    }
    for (r, l) in labels.iter().enumerate() {
        let ly = top + height + 80.0 + 16.0 * r as f64;
        let _ = write!(
            s,
            "<rect x=\"{left}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            ly - 9.0,
            PALETTE[r % PALETTE.len()],
            left + 14.0,
            ly,
            esc(l)
        );
    }
    s.push_str("</svg>");
    s
}

fn bars_svg(
    task: &str,
    metric: &str,
    labels: &[String],
    bars: &[(f64, f64, (f64, f64))],
) -> String {
    let (bh, left, width) = (20.0, 260.0, 400.0);
    let h = bh * labels.len() as f64 + 40.0;
    let x = |v: f64| left + width * v.clamp(0.0, 1.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" width=\"{}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"11\"><title>Task {task}: mean {} over queries with 95% bootstrap CI</title>",
        left + width + 60.0,
        esc(metric)
    );
    for (r, (l, (_, pooled, (lo, hi)))) in labels.iter().zip(bars).enumerate() {
        let y = 10.0 + bh * r as f64;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect class=\"bar\" x=\"{left}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#4a78b5\"><title>{}: {:.4} [{:.4}, {:.4}]</title></rect>\
             <line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#000\"/>\
             <text x=\"{}\" y=\"{}\">{:.1}</text>",
            left - 6.0,
            y + bh * 0.7,
            esc(l),
            y + 3.0,
            x(*pooled) - left,
            bh - 6.0,
            esc(l),
            pooled,
            lo,
            hi,
            x(*lo),
            x(*hi),
            y + bh / 2.0,
            y + bh / 2.0,
            x(*hi) + 4.0,
            y + bh * 0.7,
            pooled * 100.0
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#888\"/></svg>",
        left + width,
        h - 25.0,
        h - 25.0
    );
    s
}

/// The page: the data as gzip-compressed JSON in base64 (the browser's own
/// `DecompressionStream` inflates it) and the script that renders it.
/// `value` as the page carries it: JSON, gzip, base64.
fn pack(value: &Value) -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    gz.write_all(value.to_string().as_bytes())
        .expect("writing to memory");
    base64::engine::general_purpose::STANDARD.encode(gz.finish().expect("in memory"))
}

/// The page: the packed data and image table, the style and the renderer.
fn page(data: &str, images: &str, names: &[String]) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Sift report: {}</title><style>{CSS}</style></head><body>\
         <h1>Sift report</h1><p class=\"sub\">{}</p><nav id=\"tasks\"></nav><main id=\"main\"></main>\
         <script id=\"data\" type=\"application/gzip-base64\">{data}</script>\
         <script id=\"images\" type=\"application/gzip-base64\">{images}</script><script>{JS}</script></body></html>\n",
        esc(&names.join(", ")),
        esc(&names.join(", "))
    )
}

const CSS: &str = r##"
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{margin:0}.sub{color:#666}nav button{margin-right:.4em}nav button.on{font-weight:bold}
section{margin:1.2em 0}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.query{border:1px solid #ddd;margin:.5em 0;padding:.5em}
.hits{display:flex;flex-wrap:wrap;gap:1em}.hits ol{width:320px;font-size:12px;margin:0;padding-left:1.4em}
.gold{background:#dff3df}.excluded{text-decoration:line-through;color:#999}
img.thumb{max-width:96px;max-height:96px;margin:2px;vertical-align:middle}
.qlist{max-height:300px;overflow:auto;border:1px solid #ddd;font-size:13px}
.qlist div{cursor:pointer;padding:1px 4px}.qlist div.on{background:#e8eefc}
"##;

const JS: &str = r##"
let D;
async function unpack(id){const t=atob(document.getElementById(id).textContent.trim());const b=new Uint8Array(t.length);for(let i=0;i<t.length;i++)b[i]=t.charCodeAt(i);
 const s=new Blob([b]).stream().pipeThrough(new DecompressionStream('gzip'));return JSON.parse(await new Response(s).text())}
async function load(){const[d,images]=await Promise.all([unpack('data'),unpack('images')]);d.images=images;return d}
const $=(t,a={},...k)=>{const e=document.createElement(t);for(const[n,v]of Object.entries(a))n==='html'?e.innerHTML=v:e.setAttribute(n,v);k.forEach(c=>e.append(c));return e};
const f4=v=>v==null||Number.isNaN(v)?'-':(v<1e-4&&v>0?v.toExponential(1):v.toFixed(4));
let cur=0;
function nav(){const n=document.getElementById('tasks');n.innerHTML='';D.tasks.forEach((t,i)=>{const b=$('button',{class:i===cur?'on':''},'Task '+t.task);b.onclick=()=>{cur=i;nav();show()};n.append(b)})}
function show(){const t=D.tasks[cur],m=document.getElementById('main');m.innerHTML='';
 m.append($('section',{id:'overview'},$('h2',{},'Task '+t.task+': '+D.metric+' by domain'),$('div',{html:t.heatmap}),$('h3',{},'Mean over queries, 95% bootstrap CI ('+D.resamples+' resamples)'),$('div',{html:t.barsSvg}),$('h3',{},'Per domain'),$('div',{html:t.grouped})));
 const sa=$('select',{id:'a'}),sb=$('select',{id:'b'});t.labels.forEach((l,i)=>{sa.append($('option',{value:i},l));sb.append($('option',{value:i},l))});if(t.labels.length>1)sb.value=1;
 const cmp=$('div',{id:'comparison'});
 m.append($('section',{},$('h2',{},'Paired comparison'),$('label',{},'A ',sa),' ',$('label',{},'B ',sb),cmp));
 const dom=$('select',{id:'domain'},$('option',{value:''},'every domain'));t.domains.forEach(d=>dom.append($('option',{value:d},d)));
 const ret=$('select',{id:'retriever'},$('option',{value:''},'every retriever'));t.labels.forEach((l,i)=>ret.append($('option',{value:i},l)));
 const beats=$('input',{type:'checkbox',id:'beats'}),search=$('input',{type:'search',id:'search',placeholder:'query text or id'});
 const list=$('div',{class:'qlist',id:'qlist'}),detail=$('div',{id:'detail'});
 m.append($('section',{id:'drill'},$('h2',{},'Queries'),$('label',{},'domain ',dom),' ',$('label',{},'retriever ',ret),' ',$('label',{},beats,' B beats A'),' ',search,list,detail));
 const render=()=>{renderCmp(t,+sa.value,+sb.value,cmp);renderList(t,+sa.value,+sb.value,dom.value,ret.value,beats.checked,search.value.toLowerCase(),list,detail)};
 [sa,sb,dom,ret,beats].forEach(e=>e.onchange=render);search.oninput=render;render()}
function pair(t,a,b){const c=t.comparisons.find(c=>c.a===Math.min(a,b)&&c.b===Math.max(a,b));if(a<b)return c;
 return{a,b,domains:c.domains.map(d=>({...d,mean_a:d.mean_b,mean_b:d.mean_a,wins:d.losses,losses:d.wins,t:-d.t}))}}
function renderCmp(t,a,b,el){el.innerHTML='';if(a===b){el.append($('p',{},'Choose two retrievers.'));return}
 const c=pair(t,a,b);const tb=$('table',{class:'cmp'});
 tb.append($('tr',{},...['domain','queries','A','B','A − B','wins/ties/losses','t-test p','Holm','randomisation p','Holm'].map(h=>$('th',{},h))));
 c.domains.forEach(d=>tb.append($('tr',{},$('td',{class:'l'},d.domain),$('td',{},d.n),$('td',{},f4(d.mean_a)),$('td',{},f4(d.mean_b)),$('td',{},(d.mean_a-d.mean_b).toFixed(4)),$('td',{},d.wins+'/'+d.ties+'/'+d.losses),$('td',{},f4(d.t_p)),$('td',{},f4(d.t_p_holm)),$('td',{},f4(d.perm_p)+(d.perm_exact?' (exact)':'')),$('td',{},f4(d.perm_p_holm)))));
 el.append(tb,$('p',{class:'sub'},'Holm: p-values adjusted across the domains (family-wise error of testing each domain); "all" pools every query.'));
 const diffs=t.queries.map(q=>(q.results[a].value??0)-(q.results[b].value??0)).sort((x,y)=>x-y);
 const W=600,H=120,n=diffs.length;let s='<svg xmlns="http://www.w3.org/2000/svg" class="diffs" width="'+W+'" height="'+H+'"><line x1="0" x2="'+W+'" y1="'+H/2+'" y2="'+H/2+'" stroke="#888"/>';
 diffs.forEach((d,i)=>{const x=i*W/Math.max(n,1),h=Math.abs(d)*H/2;s+='<rect x="'+x+'" width="'+Math.max(W/Math.max(n,1)-1,1)+'" y="'+(d>0?H/2-h:H/2)+'" height="'+h+'" fill="'+(d>0?'#2a7':'#c44')+'"/>'});
 el.append($('p',{},'Per-query differences A − B, sorted'),$('div',{html:s+'</svg>'}))}
function renderList(t,a,b,dom,ret,beats,txt,list,detail){list.innerHTML='';let shown=0;
 t.queries.forEach((q,i)=>{if(dom&&q.domain!==dom)return;if(beats&&!((q.results[b].value??0)>(q.results[a].value??0)))return;
  if(txt&&!(q.id.toLowerCase().includes(txt)||(q.text||'').toLowerCase().includes(txt)))return;
  const v=ret===''?q.results.map(r=>f4(r.value)).join(' / '):f4(q.results[+ret].value);
  const row=$('div',{class:'q','data-i':i},q.domain+' · '+q.id+' · '+v+' · '+(q.text||'').slice(0,90));row.onclick=()=>{list.querySelectorAll('.on').forEach(e=>e.classList.remove('on'));row.classList.add('on');renderQuery(t,q,ret,detail)};list.append(row);shown++});
 list.dataset.count=shown;if(!shown)list.append($('p',{},'No query matches.'))}
function renderQuery(t,q,ret,el){el.innerHTML='';const box=$('div',{class:'query'},$('h3',{},q.domain+' / '+q.id),$('p',{},q.text||'(no corpus given: query text unknown)'));
 q.images.forEach(ix=>{const[id,src]=D.images[ix];box.append(src?$('img',{class:'thumb qimg',src,title:id,alt:id}):$('span',{class:'noimg'},'['+id+'] '))});
 const hits=$('div',{class:'hits'});t.labels.forEach((l,ri)=>{if(ret!==''&&+ret!==ri)return;const r=q.results[ri];const ol=$('ol',{});
  r.hits.forEach(([di,score,grade,ex])=>{const[id,text,ix]=t.docs[di];const[image,src]=ix==null?[]:D.images[ix];const li=$('li',{class:(grade>0?'gold ':'')+(ex?'excluded':'')},(grade>0?'✓'+grade+' ':'')+id+' ('+score.toFixed(3)+')');
   if(src)li.append($('br'),$('img',{class:'thumb cand',src,alt:image||''}));if(text)li.append($('div',{},text));ol.append(li)});
  hits.append($('div',{},$('h4',{},l+' — '+D.metric+' '+f4(r.value)),ol))});box.append(hits);el.append(box)}
// #task=<n>&query=<domain>/<id>&a=<i>&b=<j>: a view to open (links, screenshots)
function fromHash(){const h=new URLSearchParams(location.hash.slice(1));const ti=D.tasks.findIndex(t=>t.task===h.get('task'));if(ti>=0)cur=ti;nav();show();
 const t=D.tasks[cur];for(const k of['a','b'])if(h.get(k)!==null){const e=document.getElementById(k);e.value=h.get(k);e.dispatchEvent(new Event('change'))}
 const q=h.get('query');if(q){const i=t.queries.findIndex(x=>x.domain+'/'+x.id===q);const row=document.querySelector('#qlist [data-i="'+i+'"]');if(row){row.click();row.scrollIntoView()}}}
load().then(d=>{D=d;fromHash();window.onhashchange=fromHash;document.body.dataset.ready='1';document.body.dataset.readyMs=Math.round(performance.now())}).catch(e=>{document.body.dataset.error=String(e);throw e});
"##;

#[cfg(test)]
#[path = "report_html_tests.rs"]
mod tests;
