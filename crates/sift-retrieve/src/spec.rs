//! Retriever specs: `bm25`, `dense:<model>`, `hybrid:<a>+<b>[+...][:<wa>,<wb>...]`.
use std::fmt;
use std::str::FromStr;

use crate::error::SpecError;

/// The reciprocal-rank-fusion constant of hybrid retrievers without weights.
pub const RRF_K: f64 = 60.0;

/// How a hybrid retriever combines its parts' rankings.
#[derive(Debug, Clone, PartialEq)]
pub enum RankFusion {
    /// Reciprocal rank fusion with constant `k` ([`crate::fusion::rrf`]).
    Rrf {
        /// The constant (60 in specs).
        k: f64,
    },
    /// Min-max-normalised scores, weighted and summed, one weight per part
    /// ([`crate::fusion::weighted`]).
    Weighted(Vec<f64>),
}

/// A retriever, as written in a spec.
#[derive(Debug, Clone, PartialEq)]
pub enum RetrieverSpec {
    /// BM25 over the domain's passages.
    Bm25,
    /// A dense index of the index directory, by name (slug, model name or spec).
    Dense(String),
    /// Several retrievers fused.
    Hybrid {
        /// The parts (two or more).
        parts: Vec<RetrieverSpec>,
        /// How their rankings are combined.
        fusion: RankFusion,
    },
}

impl RetrieverSpec {
    /// The dense index names used anywhere in this retriever.
    pub fn dense_names(&self) -> Vec<&str> {
        match self {
            RetrieverSpec::Bm25 => Vec::new(),
            RetrieverSpec::Dense(n) => vec![n.as_str()],
            RetrieverSpec::Hybrid { parts, .. } => {
                parts.iter().flat_map(|p| p.dense_names()).collect()
            }
        }
    }

    /// A description with the BM25 parameters in use (for report titles).
    pub fn describe(&self, bm25: &sift_index::Bm25Params) -> String {
        match self {
            RetrieverSpec::Bm25 => format!(
                "bm25(k1={}, b={}, {})",
                bm25.k1,
                bm25.b,
                bm25.scoring.name()
            ),
            RetrieverSpec::Dense(n) => format!("dense:{n}"),
            RetrieverSpec::Hybrid { parts, fusion } => {
                let inner: Vec<String> = parts.iter().map(|p| p.describe(bm25)).collect();
                match fusion {
                    RankFusion::Rrf { k } => format!("hybrid-rrf(k={k}: {})", inner.join(" + ")),
                    RankFusion::Weighted(w) => format!(
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

impl fmt::Display for RetrieverSpec {
    /// The spec, as [`FromStr`] reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetrieverSpec::Bm25 => write!(f, "bm25"),
            RetrieverSpec::Dense(n) => write!(f, "dense:{n}"),
            RetrieverSpec::Hybrid { parts, fusion } => {
                let parts: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
                write!(f, "hybrid:{}", parts.join("+"))?;
                if let RankFusion::Weighted(w) = fusion {
                    let w: Vec<String> = w.iter().map(|x| x.to_string()).collect();
                    write!(f, ":{}", w.join(","))?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for RetrieverSpec {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<RetrieverSpec, SpecError> {
        let bad = |message: String| SpecError {
            spec: spec.to_string(),
            message,
        };
        if spec == "bm25" {
            return Ok(RetrieverSpec::Bm25);
        }
        if let Some(name) = spec.strip_prefix("dense:") {
            if name.is_empty() {
                return Err(bad("a dense retriever needs a model: dense:<model>".into()));
            }
            return Ok(RetrieverSpec::Dense(name.to_string()));
        }
        if let Some(rest) = spec.strip_prefix("hybrid:") {
            // a last `:part` holding a comma (or only a number) is the weights
            let (body, weights) = match rest.rsplit_once(':') {
                Some((body, w)) if w.contains(',') || w.trim().parse::<f64>().is_ok() => {
                    let weights = w
                        .split(',')
                        .map(|x| x.trim().parse::<f64>())
                        .collect::<std::result::Result<Vec<f64>, _>>()
                        .map_err(|_| {
                            bad(format!(
                                "hybrid weights {w:?} are not numbers: give one weight per part, e.g. hybrid:bm25+dense:minilm:0.3,0.7"
                            ))
                        })?;
                    (body, Some(weights))
                }
                _ => (rest, None),
            };
            let parts = body
                .split('+')
                .map(RetrieverSpec::from_str)
                .collect::<Result<Vec<_>, _>>()?;
            if parts.len() < 2 {
                return Err(bad(
                    "a hybrid retriever needs two or more parts: hybrid:bm25+dense:<model>".into(),
                ));
            }
            let fusion = match weights {
                None => RankFusion::Rrf { k: RRF_K },
                Some(w)
                    if w.len() != parts.len()
                        || w.iter().any(|x| !x.is_finite() || *x < 0.0)
                        || w.iter().all(|x| *x == 0.0)
                        || !w.iter().sum::<f64>().is_finite() =>
                {
                    return Err(bad(format!(
                        "hybrid weights: give one non-negative weight per part ({} parts), not all zero, summing to a finite number",
                        parts.len()
                    )));
                }
                Some(w) => RankFusion::Weighted(w),
            };
            return Ok(RetrieverSpec::Hybrid { parts, fusion });
        }
        Err(bad(
            "unknown retriever: expected bm25, dense:<model> or hybrid:<a>+<b>[:w1,w2]".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<RetrieverSpec, SpecError> {
        s.parse()
    }

    #[test]
    fn parses_and_prints_specs() {
        assert_eq!(parse("bm25").unwrap(), RetrieverSpec::Bm25);
        assert_eq!(
            parse("dense:minilm").unwrap(),
            RetrieverSpec::Dense("minilm".into())
        );
        assert_eq!(
            parse("hybrid:bm25+dense:minilm").unwrap(),
            RetrieverSpec::Hybrid {
                parts: vec![RetrieverSpec::Bm25, RetrieverSpec::Dense("minilm".into())],
                fusion: RankFusion::Rrf { k: RRF_K },
            }
        );
        let weighted = parse("hybrid:bm25+dense:minilm:0.3,0.7").unwrap();
        assert_eq!(
            weighted,
            RetrieverSpec::Hybrid {
                parts: vec![RetrieverSpec::Bm25, RetrieverSpec::Dense("minilm".into())],
                fusion: RankFusion::Weighted(vec![0.3, 0.7]),
            }
        );
        for s in [
            "bm25",
            "dense:x",
            "hybrid:bm25+dense:x",
            "hybrid:bm25+dense:x:0.3,0.7",
        ] {
            assert_eq!(parse(s).unwrap().to_string(), s);
        }
        assert_eq!(weighted.dense_names(), ["minilm"]);
        assert!(parse("hybrid:bm25").is_err());
        assert!(parse("hybrid:bm25+dense:x:1").is_err());
        assert!(parse("tfidf").is_err());
        assert!(parse("dense:").is_err());
        let err = parse("hybrid:bm25+dense:x:a,b").unwrap_err();
        assert!(err.to_string().contains("are not numbers"), "{err}");
        assert!(parse("hybrid:bm25+dense:x:0,0").is_err());
    }
}
