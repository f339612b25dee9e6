//! A task's part of the page: its figures, the paired comparisons of its retrievers, and
//! the drill-down into its queries.
use std::collections::{HashMap, HashSet};

use rayon::prelude::*;
use serde_json::{Value, json};
use sift_core::{Corpus, Warnings};

use super::HtmlOptions;
use super::charts::{bars_svg, grouped_svg, heatmap_svg};
use super::images::{ImageTable, drain, unreadable};
use super::read::Job;
use crate::stats;

/// The first entries of each query of a run: query -> (document, score).
pub(super) type Top = HashMap<String, Vec<(String, f64)>>;

/// A task's figures and what they show.
pub(super) struct TaskCharts {
    /// retriever -> domain -> the metric
    pub(super) cells: Vec<Vec<Option<f64>>>,
    /// Each retriever's mean over domains, mean over queries, and 95% bootstrap interval.
    pub(super) bars: Vec<(f64, f64, (f64, f64))>,
    pub(super) heat: String,
    pub(super) bar: String,
    pub(super) grouped: String,
}

impl TaskCharts {
    /// The heatmap, the means and the grouped bars of the jobs `tj` of `task`.
    pub(super) fn new(
        task: &str,
        options: &HtmlOptions,
        tj: &[&Job],
        domains: &[String],
        labels: &[String],
    ) -> TaskCharts {
        let cells: Vec<Vec<Option<f64>>> = tj
            .iter()
            .map(|j| {
                domains
                    .iter()
                    .map(|d| j.per_domain.get(d).copied())
                    .collect()
            })
            .collect();
        let heat = heatmap_svg(task, &options.metric, domains, labels, &cells);
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
        let bar = bars_svg(task, &options.metric, labels, &bars);
        let grouped = grouped_svg(task, &options.metric, domains, labels, &cells);
        TaskCharts {
            cells,
            bars,
            heat,
            bar,
            grouped,
        }
    }
}

/// Every pair's comparison (a < b; the page swaps sides for b < a), in parallel.
pub(super) fn comparisons(tj: &[&Job], options: &HtmlOptions) -> Vec<Value> {
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
}

/// What the drill-downs read of the corpus, once per domain.
pub(super) struct CorpusCache<'a> {
    corpus: Option<&'a Corpus>,
    /// domain -> the passages some drill-down shows
    shown: HashMap<&'a str, HashSet<&'a str>>,
    /// domain -> passage id -> snippet (read once per domain)
    texts: HashMap<String, HashMap<String, String>>,
    /// (domain, multimodal) -> query id -> query
    queries: HashMap<(String, bool), HashMap<String, sift_core::Example>>,
}

impl<'a> CorpusCache<'a> {
    pub(super) fn new(
        corpus: Option<&'a Corpus>,
        shown: HashMap<&'a str, HashSet<&'a str>>,
    ) -> Self {
        CorpusCache {
            corpus,
            shown,
            texts: HashMap::new(),
            queries: HashMap::new(),
        }
    }

    /// Reads the queries of `key` (domain, multimodal) and the snippets of `key.0`'s shown
    /// passages, each the first time it is asked for.
    fn read(&mut self, key: &(String, bool), options: &HtmlOptions, warnings: &mut Warnings) {
        let domain = &key.0;
        // Tasks 2-4 share the multimodal queries: read (and their problems counted) once
        if let Some(c) = self.corpus
            && !self.queries.contains_key(key)
        {
            let mut m = HashMap::new();
            match c.examples(domain, key.1, warnings) {
                Ok(v) => m.extend(v.into_iter().map(|e| (e.id.clone(), e))),
                Err(e) => unreadable(warnings, c, format!("queries of {domain}"), &e),
            }
            self.queries.insert(key.clone(), m);
        }
        if let Some(c) = self.corpus {
            let place = |what: &str| format!("{what} of {domain}");
            if !self.texts.contains_key(domain) {
                let wanted = self.shown.get(domain.as_str());
                let mut m = HashMap::new();
                drain(c.passages(domain), c, place("passages"), warnings, |p| {
                    if wanted.is_some_and(|w| w.contains(p.id.as_str())) {
                        let s = snippet(&p.text, options.snippet_chars);
                        m.insert(p.id, s);
                    }
                });
                self.texts.insert(domain.clone(), m);
            }
        }
    }
}

/// The drill-down of one task: its jobs, their runs' top entries and the judgements of
/// each evaluation directory.
pub(super) struct DrillDown<'a> {
    pub(super) task: &'a str,
    pub(super) jobs: &'a [&'a Job],
    /// The top entries of each job's run.
    pub(super) tops: Vec<&'a Top>,
    /// The qrels and exclusions of each evaluation directory.
    pub(super) judgements: &'a [(sift_core::Qrels, crate::Exclusions)],
    pub(super) options: &'a HtmlOptions,
}

/// Every document a task shows, once: id, snippet, its image's slot in the image table.
#[derive(Default)]
struct Docs {
    index: HashMap<String, usize>,
    docs: Vec<Value>,
}

impl DrillDown<'_> {
    /// Every query of the task in `domains`, and the documents their results show.
    pub(super) fn run(
        &self,
        domains: &[String],
        cache: &mut CorpusCache,
        imgs: &mut ImageTable,
        warnings: &mut Warnings,
    ) -> (Vec<Value>, Vec<Value>) {
        let mut queries = Vec::new();
        let mut docs = Docs::default();
        for domain in domains {
            let mut qids: Vec<&String> = self
                .jobs
                .iter()
                .flat_map(|j| j.per_query.get(domain).into_iter().flat_map(|m| m.keys()))
                .collect();
            qids.sort();
            qids.dedup();
            let key = (domain.clone(), self.task != "1");
            cache.read(&key, self.options, warnings);
            let no_queries = HashMap::new();
            let examples = cache.queries.get(&key).unwrap_or(&no_queries);
            let texts = cache.texts.get(domain);
            for q in qids {
                let ex = examples.get(q.as_str());
                let qimgs: Vec<Value> = ex
                    .map(|e| e.image_paths.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|p| json!(imgs.query(domain, p)))
                    .collect();
                let results = self.results(domain, q, texts, imgs, &mut docs);
                queries.push(json!({
                    "domain": domain, "id": q,
                    "text": ex.map(|e| e.query.clone()),
                    "images": qimgs,
                    "results": results,
                }));
            }
        }
        let mut docs = docs.docs;
        // every task's snippets within the budget: each cut to budget / documents
        let per_doc = self.options.snippet_budget / docs.len().max(1);
        if per_doc < self.options.snippet_chars {
            for d in &mut docs {
                if let Some(Value::String(t)) = d.get_mut(1) {
                    *t = snippet(t.trim_end_matches('…'), per_doc);
                }
            }
        }
        (queries, docs)
    }

    /// The image shown for a document of the task, if any.
    fn image_of(&self, doc: &str) -> Option<String> {
        if self.task == "3" {
            Some(doc.to_string())
        } else {
            crate::split_pair_id(doc).1.map(str::to_string)
        }
    }

    /// Each job's value and hits for query `q` of `domain`.
    fn results(
        &self,
        domain: &str,
        q: &str,
        texts: Option<&HashMap<String, String>>,
        imgs: &mut ImageTable,
        docs: &mut Docs,
    ) -> Vec<Value> {
        let mut results = Vec::new();
        for (ji, j) in self.jobs.iter().enumerate() {
            let (qrels, excl) = &self.judgements[j.dir];
            let gold = qrels.get(q);
            let excluded: HashSet<&str> = excl
                .get(q)
                .map(|s| s.iter().map(String::as_str).collect())
                .unwrap_or_default();
            let hits: Vec<Value> = self.tops[ji]
                .get(q)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(rank, (doc, score))| {
                    let image = self
                        .image_of(doc)
                        .map(|id| imgs.candidate(domain, &id, rank));
                    let at = match docs.index.get(doc) {
                        Some(&i) => i,
                        None => {
                            let passage = crate::split_pair_id(doc).0;
                            // the snippet is cut once every document is known
                            let text = texts.and_then(|m| m.get(passage));
                            docs.docs.push(json!([doc, text, image]));
                            docs.index.insert(doc.clone(), docs.docs.len() - 1);
                            docs.docs.len() - 1
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
        results
    }
}

/// The first `chars` characters of `text`, with `…` when it is longer.
fn snippet(text: &str, chars: usize) -> String {
    let mut s: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        s.push('…');
    }
    s
}
