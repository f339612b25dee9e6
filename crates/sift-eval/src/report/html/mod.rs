//! `sift report`: evaluation directories (`sift eval --out`) as one self-contained HTML
//! file (inline SVG, CSS and JavaScript; no network): per task a domain x retriever heatmap
//! of the metric, the mean of each retriever with a 95% bootstrap confidence interval over
//! queries, the paired comparison of any two retrievers (per-query differences, wins / ties
//! / losses, t-test and randomisation test with Holm's correction across domains), and a
//! per-query drill-down (query text and image thumbnails, each retriever's top 10 with
//! snippets, thumbnails for image candidates, gold and excluded marks, the query's metric),
//! filtered by domain, retriever and "B beats A". The figures are also given as SVG files.
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use rayon::prelude::*;
use serde_json::{Value, json};
use sift_core::{Corpus, Warnings};

use crate::Result;
use crate::stats;
use images::ImageTable;
use page::{pack, page};
use read::{Job, read_jobs, read_judgements, read_top};
use task::{CorpusCache, DrillDown, TaskCharts, Top, comparisons};

mod charts;
mod images;
mod page;
#[cfg(feature = "png")]
mod png;
mod read;
mod task;

#[cfg(feature = "png")]
pub use png::PngRenderer;

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

/// Builds the report of the evaluation directories `dirs` (each `sift eval --out`'s), with
/// query texts, passage snippets and thumbnails from `corpus` when given.
pub fn build_html_report(
    dirs: &[PathBuf],
    corpus: Option<&Corpus>,
    options: &HtmlOptions,
) -> Result<HtmlReport> {
    let names = dir_names(dirs);
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
    let tops: Vec<Top> = jobs
        .par_iter()
        .map(|j| {
            if j.run.is_file() {
                read_top(&j.run, options.top)
            } else {
                Ok(HashMap::new())
            }
        })
        .collect::<Result<_>>()?;
    let mut warnings = Warnings::new();
    let mut cache = CorpusCache::new(corpus, shown_passages(&jobs, &tops));
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
        let charts = TaskCharts::new(task, options, &tj, &domains, &labels);
        figures.push((format!("task{task}_heatmap.svg"), charts.heat.clone()));
        figures.push((format!("task{task}_means.svg"), charts.bar.clone()));
        figures.push((format!("task{task}_domains.svg"), charts.grouped.clone()));
        let comparisons = comparisons(&tj, options);
        // drill-down: every query of the task
        let judgements: Vec<(sift_core::Qrels, crate::Exclusions)> = (0..dirs.len())
            .map(|d| read_judgements(&dirs[d], task, &mut warnings))
            .collect::<Result<_>>()?;
        let drill = DrillDown {
            task,
            jobs: &tj,
            tops: ti.iter().map(|&i| &tops[i]).collect(),
            judgements: &judgements,
            options,
        };
        let (queries, docs) = drill.run(&domains, &mut cache, &mut imgs, &mut warnings);
        let TaskCharts {
            cells,
            bars,
            heat,
            bar,
            grouped,
        } = charts;
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
    let (html, made) = finish(&data, &names, corpus, &mut imgs, options, &mut warnings);
    Ok(HtmlReport {
        html,
        figures,
        thumbnails: (made, imgs.entries.len() - made),
        warnings,
    })
}

/// The name each evaluation directory goes by: its last component.
fn dir_names(dirs: &[PathBuf]) -> Vec<String> {
    dirs.iter()
        .map(|d| {
            d.file_name().map_or_else(
                || d.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// domain -> the passages some drill-down shows (their snippets are all that is kept of
/// the corpus's texts: a physics-sized domain is not held in memory).
fn shown_passages<'a>(jobs: &'a [Job], tops: &'a [Top]) -> HashMap<&'a str, HashSet<&'a str>> {
    let mut shown: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (j, top) in jobs.iter().zip(tops) {
        if j.task == "3" {
            continue;
        }
        for (domain, queries) in &j.per_query {
            let set = shown.entry(domain.as_str()).or_default();
            for q in queries.keys() {
                for (doc, _) in top.get(q).into_iter().flatten() {
                    set.insert(crate::split_pair_id(doc).0);
                }
            }
        }
    }
    shown
}

/// The page of `data`, with the thumbnails that fit what it leaves of its bound; returns
/// it and the thumbnails made.
fn finish(
    data: &Value,
    names: &[String],
    corpus: Option<&Corpus>,
    imgs: &mut ImageTable,
    options: &HtmlOptions,
    warnings: &mut Warnings,
) -> (String, usize) {
    // the image table is packed apart from the rest, which is packed once
    let data = pack(data);
    let mut html = page(&data, &pack(&imgs.to_json()), names);
    let mut made = 0;
    if let Some(c) = corpus {
        // the thumbnails get what the page leaves of its bound (a thumbnail's base64 text
        // grows ~2% through the page's gzip and base64)
        let room = options.max_page_bytes.saturating_sub(html.len()) * 100 / 103;
        made = imgs.thumbnails(
            c,
            options.thumbnail_budget.min(room),
            options.thumbnail_px,
            warnings,
        );
        if made > 0 {
            html = page(&data, &pack(&imgs.to_json()), names);
        }
    }
    (html, made)
}

#[cfg(test)]
mod tests;
