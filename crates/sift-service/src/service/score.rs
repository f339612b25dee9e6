//! Fusing rankings and scoring hits the caller brings (`/v1/fuse`, `/v1/eval`).
use std::collections::{BTreeMap, HashMap};

use sift_eval::RunEntry;
use sift_retrieve::RankFusion;

use crate::api::{EvalRequest, EvalResponse, FuseRequest, FuseResponse, ScoredId};
use crate::error::ApiError;

use super::*;

impl Service {
    /// Rank fusion of result lists.
    pub fn fuse(&self, req: &FuseRequest) -> Result<FuseResponse, ApiError> {
        if req.lists.is_empty() {
            return Err(ApiError::invalid("lists", "no list to fuse"));
        }
        self.check_top_k(req.top_k)?;
        let fusion = parse_fusion(&req.method, req.lists.len())?;
        let lists: Vec<Vec<RunEntry>> = req
            .lists
            .iter()
            .enumerate()
            .map(|(l, list)| {
                list.iter()
                    .enumerate()
                    .map(|(i, s)| {
                        if s.score.is_finite() {
                            Ok(RunEntry {
                                doc: s.id.clone(),
                                score: s.score,
                            })
                        } else {
                            Err(ApiError::invalid(
                                format!("lists[{l}][{i}].score"),
                                "not a finite number",
                            ))
                        }
                    })
                    .collect()
            })
            .collect::<Result<_, _>>()?;
        Ok(FuseResponse {
            hits: sift_retrieve::fuse(&lists, &fusion, req.top_k)
                .into_iter()
                .map(|e| ScoredId {
                    id: e.doc,
                    score: e.score,
                })
                .collect(),
        })
    }

    /// Scores a run against judgements (trec_eval's measures).
    pub fn eval(&self, req: &EvalRequest) -> Result<EvalResponse, ApiError> {
        score_hits(req)
    }
}

/// Scores `req` by the rules `sift eval --run --qrels` applies to files: a query listed twice
/// in the run, a document listed twice for a query, non-finite scores and ids a TREC file
/// cannot hold are errors naming the member; a judgement given twice keeps its last grade
/// and is counted; a run none of whose queries is judged is an error, not an empty answer.
pub fn score_hits(req: &EvalRequest) -> Result<EvalResponse, ApiError> {
    let id_check = |field: String, id: &str| match sift_core::id_problem(id) {
        Some(problem) => Err(ApiError::invalid(field, format!("{id:?} {problem}"))),
        None => Ok(()),
    };
    let mut run = sift_eval::Run::new();
    for (qid, hits) in &req.run.0 {
        id_check(format!("run.{qid}"), qid)?;
        if run.contains_key(qid) {
            return Err(ApiError::invalid(
                format!("run.{qid}"),
                "the query is listed twice: give each query's hits once",
            ));
        }
        let mut entries = Vec::with_capacity(hits.len());
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(hits.len());
        for (i, h) in hits.iter().enumerate() {
            if !h.score.is_finite() {
                return Err(ApiError::invalid(
                    format!("run.{qid}[{i}].score"),
                    "not a finite number",
                ));
            }
            id_check(format!("run.{qid}[{i}].id"), &h.id)?;
            if let Some(first) = seen.insert(&h.id, i) {
                return Err(ApiError::invalid(
                    format!("run.{qid}[{i}].id"),
                    format!(
                        "{:?} is listed twice for this query (first at [{first}])",
                        h.id
                    ),
                ));
            }
            entries.push(RunEntry {
                doc: h.id.clone(),
                score: h.score,
            });
        }
        run.insert(qid.clone(), entries);
    }
    if run.is_empty() {
        return Err(ApiError::invalid(
            "run",
            "the run is empty: nothing to score",
        ));
    }
    let mut warnings: BTreeMap<String, u64> = BTreeMap::new();
    let mut qrels = sift_core::Qrels::new();
    for (qid, judged) in &req.qrels.0 {
        id_check(format!("qrels.{qid}"), qid)?;
        let grades = qrels.entry(qid.clone()).or_default();
        for (doc, grade) in &judged.0 {
            id_check(format!("qrels.{qid}.{doc}"), doc)?;
            if grades.insert(doc.clone(), *grade).is_some() {
                *warnings
                    .entry(sift_core::WarningKind::DuplicateQrel.name().to_string())
                    .or_default() += 1;
            }
        }
    }
    let e = sift_eval::score_run(&run, &qrels, &Default::default(), false);
    if e.per_query.is_empty() {
        return Err(ApiError::invalid(
            "qrels",
            format!(
                "nothing to score: none of the run's {} queries is judged ({} judged queries)",
                run.len(),
                qrels.values().filter(|j| !j.is_empty()).count()
            ),
        ));
    }
    let unjudged = run.len() - e.per_query.len();
    if unjudged > 0 {
        warnings.insert("unjudged_query".into(), unjudged as u64);
    }
    Ok(EvalResponse {
        queries: e.per_query.len(),
        mean: e.mean,
        per_query: e.per_query,
        warnings,
    })
}

/// `rrf`, `rrf:<k>` or `weighted:<w1>,<w2>,...` over `lists` lists.
fn parse_fusion(method: &str, lists: usize) -> Result<RankFusion, ApiError> {
    let bad = |m: String| ApiError::invalid("method", m);
    match method.split_once(':') {
        None if method == "rrf" => Ok(RankFusion::Rrf {
            k: sift_retrieve::RRF_K,
        }),
        Some(("rrf", k)) => match k.parse::<f64>() {
            Ok(k) if k.is_finite() && k >= 0.0 => Ok(RankFusion::Rrf { k }),
            _ => Err(bad(format!("{k:?}: rrf's k is a number >= 0"))),
        },
        Some(("weighted", w)) => {
            let w: Vec<f64> = w
                .split(',')
                .map(|x| x.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("{w:?}: weights are numbers, comma-separated")))?;
            if !w.iter().map(|x| x.abs()).sum::<f64>().is_finite() {
                return Err(bad(format!(
                    "{w:?}: the weights' sum overflows; give smaller weights"
                )));
            }
            if w.len() != lists {
                return Err(bad(format!(
                    "{} weights for {lists} lists: give one per list",
                    w.len()
                )));
            }
            Ok(RankFusion::Weighted(w))
        }
        _ => Err(bad(format!(
            "{method:?}: give rrf, rrf:<k> or weighted:<w1>,<w2>,..."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_methods_parse_and_name_their_errors() {
        assert_eq!(parse_fusion("rrf", 2).unwrap(), RankFusion::Rrf { k: 60.0 });
        assert_eq!(
            parse_fusion("rrf:10", 2).unwrap(),
            RankFusion::Rrf { k: 10.0 }
        );
        assert_eq!(
            parse_fusion("weighted:0.3,0.7", 2).unwrap(),
            RankFusion::Weighted(vec![0.3, 0.7])
        );
        assert!(parse_fusion("weighted:1", 2).is_err());
        let e = parse_fusion("borda", 2).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("method"));
    }
}
