//! Retriever specs (`bm25`, `dense:<model>`, `hybrid:<a>+<b>[:w1,w2]`) and running them over
//! one domain.
use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use sift_core::Example;
use sift_embed::{Kind, TextEmbedder};
use sift_eval::{RunEntry, fusion};
use sift_index::{AnnMode, Bm25Domain, Bm25Params, DenseDomain, IndexDir};

use crate::models::{ModelFlags, load_text_model};

/// Reciprocal-rank-fusion constant.
pub const RRF_K: f64 = 60.0;

/// A parsed retriever spec.
#[derive(Debug, Clone, PartialEq)]
pub enum Retriever {
    /// BM25 over the domain's passages.
    Bm25,
    /// A dense index by name (slug, model name or spec).
    Dense(String),
    /// Fusion of several retrievers: reciprocal rank fusion, or weighted min-max-normalised
    /// score fusion when weights are given.
    Hybrid {
        /// Components.
        parts: Vec<Retriever>,
        /// Weights, one per component.
        weights: Option<Vec<f64>>,
    },
}

impl Retriever {
    /// Parses `bm25`, `dense:NAME` or `hybrid:A+B[:W1,W2]`.
    pub fn parse(spec: &str) -> Result<Retriever> {
        if spec == "bm25" {
            return Ok(Retriever::Bm25);
        }
        if let Some(name) = spec.strip_prefix("dense:") {
            if name.is_empty() {
                bail!("dense retriever needs a model: dense:<model>");
            }
            return Ok(Retriever::Dense(name.to_string()));
        }
        if let Some(rest) = spec.strip_prefix("hybrid:") {
            let (body, weights) = match rest.rsplit_once(':') {
                Some((body, w)) if w.split(',').all(|x| x.trim().parse::<f64>().is_ok()) => (
                    body,
                    Some(
                        w.split(',')
                            .map(|x| x.trim().parse().expect("checked"))
                            .collect::<Vec<f64>>(),
                    ),
                ),
                _ => (rest, None),
            };
            let parts = body
                .split('+')
                .map(Retriever::parse)
                .collect::<Result<Vec<_>>>()?;
            if parts.len() < 2 {
                bail!("hybrid retriever needs two or more parts: hybrid:bm25+dense:<model>");
            }
            if let Some(w) = &weights
                && (w.len() != parts.len() || w.iter().any(|x| !x.is_finite() || *x < 0.0))
            {
                bail!(
                    "hybrid weights: give one non-negative weight per part ({} parts)",
                    parts.len()
                );
            }
            return Ok(Retriever::Hybrid { parts, weights });
        }
        bail!("unknown retriever {spec:?}: expected bm25, dense:<model> or hybrid:<a>+<b>[:w1,w2]")
    }

    /// Dense names used anywhere in this retriever.
    pub fn dense_names(&self) -> Vec<String> {
        match self {
            Retriever::Bm25 => Vec::new(),
            Retriever::Dense(n) => vec![n.clone()],
            Retriever::Hybrid { parts, .. } => parts.iter().flat_map(|p| p.dense_names()).collect(),
        }
    }

    /// Human-readable description.
    pub fn describe(&self, bm25: &Bm25Params) -> String {
        match self {
            Retriever::Bm25 => format!(
                "bm25(k1={}, b={}, {})",
                bm25.k1,
                bm25.b,
                serde_json::to_value(bm25.weighting)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            ),
            Retriever::Dense(n) => format!("dense:{n}"),
            Retriever::Hybrid { parts, weights } => {
                let inner: Vec<String> = parts.iter().map(|p| p.describe(bm25)).collect();
                match weights {
                    None => format!("hybrid-rrf(k={RRF_K}: {})", inner.join(" + ")),
                    Some(w) => format!(
                        "hybrid-weighted({})",
                        inner
                            .iter()
                            .zip(w)
                            .map(|(p, w)| format!("{w}*{p}"))
                            .collect::<Vec<_>>()
                            .join(" + ")
                    ),
                }
            }
        }
    }
}

/// Search settings.
#[derive(Debug, Clone)]
pub struct SearchSettings {
    /// BM25 parameters.
    pub bm25: Bm25Params,
    /// Results per query (and per fused component).
    pub top_k: usize,
    /// Exact or HNSW; `None` = exact up to `AUTO_EXACT_MAX` vectors, HNSW above.
    pub ann: Option<AnnMode>,
    /// ef_search for HNSW (automatic mode).
    pub ef_search: usize,
}

/// Corpora up to this size are searched exactly in automatic mode.
pub const AUTO_EXACT_MAX: usize = 20_000;

/// Loaded models, shared across domains.
#[derive(Default)]
pub struct Models {
    by_name: HashMap<String, (String, TextEmbedder)>,
}

impl Models {
    /// Loads the models of every dense index `retriever` uses.
    pub fn load(
        &mut self,
        index: &IndexDir,
        retriever: &Retriever,
        flags: &ModelFlags,
        model_override: Option<&str>,
    ) -> Result<()> {
        for name in retriever.dense_names() {
            if self.by_name.contains_key(&name) {
                continue;
            }
            let (slug, info) = index.dense_info(&name)?;
            let spec = model_override.unwrap_or(&info.spec);
            let model = load_text_model(spec, flags).with_context(|| {
                format!("the index's dense:{slug} was built with {}", info.spec)
            })?;
            if model.dim() != info.dim {
                bail!(
                    "model {spec} has {} dimensions, the index dense:{slug} {}",
                    model.dim(),
                    info.dim
                );
            }
            self.by_name.insert(name, (slug.to_string(), model));
        }
        Ok(())
    }
}

/// One domain ready to search.
pub struct Domain<'a> {
    bm25: Option<Bm25Domain>,
    dense: HashMap<String, (DenseDomain, &'a TextEmbedder)>,
}

impl<'a> Domain<'a> {
    /// Opens what `retriever` needs of `domain`.
    pub fn open(
        index: &IndexDir,
        domain: &str,
        retriever: &Retriever,
        models: &'a Models,
    ) -> Result<Domain<'a>> {
        // BM25 holds the passage ids every retriever reports, so it is always opened.
        let bm25 = Some(index.bm25(domain)?);
        let mut dense = HashMap::new();
        for name in retriever.dense_names() {
            let (slug, model) = models.by_name.get(&name).context("model loaded")?;
            let d = index.dense(slug, domain)?;
            if d.len() != bm25.as_ref().map_or(0, |b| b.len()) {
                bail!(
                    "domain {domain}: dense:{slug} has {} vectors for {} passages",
                    d.len(),
                    bm25.as_ref().map_or(0, |b| b.len())
                );
            }
            dense.insert(name, (d, model));
        }
        Ok(Domain { bm25, dense })
    }

    /// The BM25 index (passage ids live there).
    pub fn bm25(&self) -> &Bm25Domain {
        self.bm25.as_ref().expect("always opened")
    }

    /// Runs `retriever` for every query; returns (query id, ranking) in query order.
    /// `exclusions(query id)` names passages to drop before the cut-off.
    pub fn run(
        &self,
        retriever: &Retriever,
        queries: &[Example],
        exclusions: &(dyn Fn(&str) -> Vec<String> + Sync),
        settings: &SearchSettings,
        on_query: &(dyn Fn() + Sync),
    ) -> Result<Vec<(String, Vec<RunEntry>)>> {
        let bm25 = self.bm25();
        let mut qvecs: HashMap<&str, Vec<Vec<f32>>> = HashMap::new();
        for (name, (_, model)) in &self.dense {
            let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
            qvecs.insert(name.as_str(), model.embed(&texts, Kind::Query)?);
        }
        (0..queries.len())
            .into_par_iter()
            .map_init(
                || bm25.scratch(),
                |scratch, i| -> Result<(String, Vec<RunEntry>)> {
                    let q = &queries[i];
                    let exclude: Vec<u32> = exclusions(&q.id)
                        .iter()
                        .filter_map(|id| bm25.ord(id))
                        .collect();
                    let ranking =
                        self.rank(retriever, scratch, i, &q.query, &exclude, &qvecs, settings)?;
                    on_query();
                    Ok((q.id.clone(), ranking))
                },
            )
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn rank(
        &self,
        retriever: &Retriever,
        scratch: &mut sift_index::Scratch,
        qi: usize,
        text: &str,
        exclude: &[u32],
        qvecs: &HashMap<&str, Vec<Vec<f32>>>,
        settings: &SearchSettings,
    ) -> Result<Vec<RunEntry>> {
        let bm25 = self.bm25();
        let entries = |hits: Vec<sift_index::Hit>| -> Vec<RunEntry> {
            hits.into_iter()
                .map(|h| RunEntry {
                    doc: bm25.id(h.ord).to_string(),
                    score: h.score as f64,
                })
                .collect()
        };
        Ok(match retriever {
            Retriever::Bm25 => {
                entries(bm25.search(scratch, text, settings.top_k, &settings.bm25, exclude)?)
            }
            Retriever::Dense(name) => {
                let (dense, _) = &self.dense[name];
                let mode = settings.ann.unwrap_or(if dense.len() <= AUTO_EXACT_MAX {
                    AnnMode::Exact
                } else {
                    AnnMode::Hnsw(settings.ef_search)
                });
                entries(dense.search(&qvecs[name.as_str()][qi], settings.top_k, mode, exclude)?)
            }
            Retriever::Hybrid { parts, weights } => {
                let lists = parts
                    .iter()
                    .map(|p| self.rank(p, scratch, qi, text, exclude, qvecs, settings))
                    .collect::<Result<Vec<_>>>()?;
                match weights {
                    None => fusion::rrf(&lists, RRF_K, settings.top_k),
                    Some(w) => fusion::weighted(&lists, w, settings.top_k),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(Retriever::parse("bm25").unwrap(), Retriever::Bm25);
        assert_eq!(
            Retriever::parse("dense:minilm").unwrap(),
            Retriever::Dense("minilm".into())
        );
        assert_eq!(
            Retriever::parse("hybrid:bm25+dense:minilm").unwrap(),
            Retriever::Hybrid {
                parts: vec![Retriever::Bm25, Retriever::Dense("minilm".into())],
                weights: None
            }
        );
        assert_eq!(
            Retriever::parse("hybrid:bm25+dense:minilm:0.3,0.7").unwrap(),
            Retriever::Hybrid {
                parts: vec![Retriever::Bm25, Retriever::Dense("minilm".into())],
                weights: Some(vec![0.3, 0.7])
            }
        );
        assert!(Retriever::parse("hybrid:bm25").is_err());
        assert!(Retriever::parse("hybrid:bm25+dense:x:1").is_err());
        assert!(Retriever::parse("tfidf").is_err());
        assert!(Retriever::parse("dense:").is_err());
    }
}
