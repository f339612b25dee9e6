//! Dense vectors of one domain: stored vectors (f32 or f16) by passage ordinal, an HNSW graph
//! (Sift's own, [`crate::hnsw`]) persisted beside them, and exact flat search for small
//! corpora and verification.
use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bm25::Hit;
use crate::hnsw::Hnsw;
use crate::{Error, Result};
pub use sift_simd::dot;

const META: &str = "meta.json";
const VECTORS_F32: &str = "vectors.f32";
const VECTORS_F16: &str = "vectors.f16";
const GRAPH: &str = "graph.bin";

/// Storage precision of vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum VectorDtype {
    /// 32-bit floats.
    #[default]
    F32,
    /// 16-bit floats (half the disk; vectors are widened to f32 in memory).
    F16,
}

/// HNSW build parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnswParams {
    /// Maximum links per point on the upper levels (M); level 0 allows 2 M.
    pub m: usize,
    /// Candidate list size while building.
    pub ef_construction: usize,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 24,
            ef_construction: 200,
        }
    }
}

impl HnswParams {
    /// Checks the parameters: M within [2, 256], ef_construction >= M.
    pub fn validate(&self) -> Result<()> {
        if self.m < 2 || self.m > 256 {
            return Err(Error::InvalidParameter(format!(
                "HNSW M must be within [2, 256], got {}",
                self.m
            )));
        }
        if self.ef_construction < self.m {
            return Err(Error::InvalidParameter(format!(
                "ef_construction ({}) must be >= M ({})",
                self.ef_construction, self.m
            )));
        }
        Ok(())
    }
}

/// What the vectors of a domain are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DenseMeta {
    /// Model name.
    pub model: String,
    /// Dimension.
    pub dim: usize,
    /// Number of vectors (= passages).
    pub count: usize,
    /// Storage precision.
    pub dtype: VectorDtype,
    /// HNSW parameters.
    pub hnsw: HnswParams,
    /// Ordinals no level-0 path reaches from the graph's entry point (pruning can strand a
    /// point); searched exactly at query time so nothing is lost.
    pub unreachable: Vec<u32>,
}

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnMode {
    /// Exact: every vector is scored.
    Exact,
    /// HNSW with this `ef_search`.
    Hnsw(usize),
}

/// Vectors, their ids and graph of one domain, ready to search.
pub struct DenseDomain {
    meta: DenseMeta,
    vectors: Vec<f32>,
    ids: Vec<String>,
    graph: Hnsw,
}

/// Writes the vectors (row-major, `dim` per ordinal), their ids (one per vector: passage
/// ids or image paths) and HNSW graph of one domain into `dir`; [`DenseDomain::open`] reads
/// them back.
pub fn write(
    dir: &Path,
    model: &str,
    dim: usize,
    vectors: &[f32],
    ids: &[String],
    dtype: VectorDtype,
    params: HnswParams,
) -> Result<DenseMeta> {
    params.validate()?;
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let count = vectors.len() / dim.max(1);
    if ids.len() != count || count * dim != vectors.len() {
        return Err(Error::InvalidParameter(format!(
            "{} ids for {} values of {dim} dimensions",
            ids.len(),
            vectors.len()
        )));
    }
    // nothing non-finite reaches a generation (f16 holds magnitudes up to 65504)
    let limit = match dtype {
        VectorDtype::F32 => f32::MAX,
        VectorDtype::F16 => 65504.0,
    };
    if let Some(at) = vectors
        .iter()
        .position(|x| !x.is_finite() || x.abs() > limit)
    {
        return Err(Error::InvalidParameter(format!(
            "{model}: the vector of {:?} holds {} (value {} of {dim}), which {dtype:?} vectors cannot hold",
            ids[at / dim],
            vectors[at],
            at % dim
        )));
    }
    let ids_path = dir.join(crate::paths::IDS_FILE);
    fs::write(
        &ids_path,
        serde_json::to_vec(ids).expect("strings serialise"),
    )
    .map_err(|e| Error::io(&ids_path, e))?;
    let (name, bytes): (&str, Vec<u8>) = match dtype {
        VectorDtype::F32 => (
            VECTORS_F32,
            vectors.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        VectorDtype::F16 => (
            VECTORS_F16,
            vectors
                .iter()
                .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                .collect(),
        ),
    };
    let path = dir.join(name);
    let mut w = BufWriter::new(fs::File::create(&path).map_err(|e| Error::io(&path, e))?);
    w.write_all(&bytes).map_err(|e| Error::io(&path, e))?;
    w.flush().map_err(|e| Error::io(&path, e))?;
    // Search on what a reader will load (f16 rounding included), so the graph and the
    // stored vectors agree.
    let stored: Vec<f32> = match dtype {
        VectorDtype::F32 => vectors.to_vec(),
        VectorDtype::F16 => vectors
            .iter()
            .map(|x| half::f16::from_f32(*x).to_f32())
            .collect(),
    };
    let graph = Hnsw::build(&stored, dim, params.m, params.ef_construction);
    let unreachable = graph.unreachable();
    let graph_path = dir.join(GRAPH);
    fs::write(&graph_path, graph.to_bytes()).map_err(|e| Error::io(&graph_path, e))?;
    let meta = DenseMeta {
        model: model.to_string(),
        dim,
        count,
        dtype,
        hnsw: params,
        unreachable,
    };
    let meta_path = dir.join(META);
    fs::write(
        &meta_path,
        serde_json::to_vec_pretty(&meta).expect("serialises"),
    )
    .map_err(|e| Error::io(&meta_path, e))?;
    Ok(meta)
}

impl DenseDomain {
    /// Opens the vectors and graph written by a build.
    pub fn open(dir: &Path) -> Result<DenseDomain> {
        let meta_path = dir.join(META);
        let meta: DenseMeta =
            serde_json::from_slice(&fs::read(&meta_path).map_err(|e| Error::io(&meta_path, e))?)
                .map_err(|e| Error::Corrupt {
                    path: meta_path.clone(),
                    message: e.to_string(),
                })?;
        let (name, width) = match meta.dtype {
            VectorDtype::F32 => (VECTORS_F32, 4),
            VectorDtype::F16 => (VECTORS_F16, 2),
        };
        let path = dir.join(name);
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        if bytes.len() != meta.count * meta.dim * width {
            return Err(Error::Corrupt {
                path,
                message: format!(
                    "{} bytes, expected {} vectors of {} dimensions",
                    bytes.len(),
                    meta.count,
                    meta.dim
                ),
            });
        }
        let vectors: Vec<f32> = match meta.dtype {
            VectorDtype::F32 => bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            VectorDtype::F16 => bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        };
        if let Some(i) = vectors.iter().position(|x| !x.is_finite()) {
            return Err(Error::Corrupt {
                path,
                message: format!(
                    "vector {} holds a non-finite value (NaN or infinity)",
                    i / meta.dim.max(1)
                ),
            });
        }
        let graph_path = dir.join(GRAPH);
        let corrupt = |message: String| Error::Corrupt {
            path: graph_path.clone(),
            message,
        };
        let mut graph = Hnsw::from_bytes(
            &fs::read(&graph_path).map_err(|e| Error::io(&graph_path, e))?,
            meta.dim,
        )
        .map_err(|e| corrupt(format!("reading the HNSW graph: {e}")))?;
        if graph.len() != meta.count {
            return Err(corrupt(format!(
                "HNSW graph has {} points, expected {}",
                graph.len(),
                meta.count
            )));
        }
        graph.attach(&vectors);
        let ids_path = dir.join(crate::paths::IDS_FILE);
        let ids: Vec<String> =
            serde_json::from_slice(&fs::read(&ids_path).map_err(|e| Error::io(&ids_path, e))?)
                .map_err(|e| Error::Corrupt {
                    path: ids_path.clone(),
                    message: format!("not a JSON list of ids: {e}"),
                })?;
        if ids.len() != meta.count {
            return Err(Error::Corrupt {
                path: ids_path,
                message: format!("{} ids for {} vectors", ids.len(), meta.count),
            });
        }
        Ok(DenseDomain {
            meta,
            vectors,
            ids,
            graph,
        })
    }

    /// The id of an ordinal (passage id or image path).
    pub fn id(&self, ord: u32) -> &str {
        &self.ids[ord as usize]
    }

    /// Every id, by ordinal.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Metadata.
    pub fn meta(&self) -> &DenseMeta {
        &self.meta
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.meta.count
    }

    /// True when there are no vectors.
    pub fn is_empty(&self) -> bool {
        self.meta.count == 0
    }

    /// The stored vector of an ordinal.
    pub fn vector(&self, ord: u32) -> &[f32] {
        let d = self.meta.dim;
        &self.vectors[ord as usize * d..(ord as usize + 1) * d]
    }

    /// The `k` passages nearest to the unit vector `query` by inner product, best first
    /// (equal scores by ordinal). `exclude` ordinals are left out before the cut-off.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        mode: AnnMode,
        exclude: &[u32],
    ) -> Result<Vec<Hit>> {
        if query.len() != self.meta.dim {
            return Err(Error::InvalidParameter(format!(
                "query vector has {} dimensions, the index {}",
                query.len(),
                self.meta.dim
            )));
        }
        if query.iter().any(|x| !x.is_finite()) {
            return Err(Error::InvalidParameter(
                "query vector holds a non-finite value (NaN or infinity)".into(),
            ));
        }
        let mut hits: Vec<Hit> = match mode {
            AnnMode::Exact => (0..self.meta.count as u32)
                .map(|ord| Hit {
                    ord,
                    score: dot(query, self.vector(ord)),
                })
                .collect(),
            AnnMode::Hnsw(ef) => {
                let want = k + exclude.len();
                let mut hits: Vec<Hit> = self
                    .graph
                    .search(&self.vectors, query, want, ef.max(want))
                    .into_iter()
                    .map(|(ord, score)| Hit { ord, score })
                    .collect();
                for &ord in &self.meta.unreachable {
                    if !hits.iter().any(|h| h.ord == ord) {
                        hits.push(Hit {
                            ord,
                            score: dot(query, self.vector(ord)),
                        });
                    }
                }
                hits
            }
        };
        if !exclude.is_empty() {
            hits.retain(|h| !exclude.contains(&h.ord));
        }
        let order = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(a.ord.cmp(&b.ord));
        Ok(top_k(hits, k, order))
    }
}

/// The best `k` of `hits` under `order` (best first), sorted: a partial selection, then a
/// sort of the `k` kept.
fn top_k(
    mut hits: Vec<Hit>,
    k: usize,
    order: impl Fn(&Hit, &Hit) -> std::cmp::Ordering + Copy,
) -> Vec<Hit> {
    if k < hits.len() {
        if k == 0 {
            return Vec::new();
        }
        hits.select_nth_unstable_by(k - 1, order);
        hits.truncate(k);
    }
    hits.sort_unstable_by(order);
    hits
}
