//! Dense vectors of one domain: stored vectors (f32 or f16) by passage ordinal, an HNSW graph
//! (hnsw_rs) persisted beside them, and exact flat search for small corpora and verification.
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use hnsw_rs::anndists::dist::Distance;
use hnsw_rs::api::AnnT;
use hnsw_rs::hnsw::Hnsw;
use hnsw_rs::hnswio::HnswIo;
use serde::{Deserialize, Serialize};

use crate::bm25::{Hit, top_k};
use crate::{Error, Result};

const META: &str = "meta.json";
const VECTORS_F32: &str = "vectors.f32";
const VECTORS_F16: &str = "vectors.f16";
const GRAPH: &str = "hnsw";

/// Storage precision of vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
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
    /// Maximum connections per node (hnsw_rs `max_nb_connection`, often called M).
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
    /// hnsw_rs exits the process above 256 connections: refuse such values first.
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
    /// Ordinals the graph could not reach after building (hnsw_rs parallel insertion can
    /// strand points); searched exactly at query time so nothing is lost.
    pub unreachable: Vec<u32>,
}

/// Inner product of two equally long vectors: 16 accumulators so it vectorises, compiled for
/// AVX2/FMA behind run-time detection (the crate itself targets baseline x86-64).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the features were detected.
        return unsafe { dot_avx2(a, b) };
    }
    dot_portable(a, b)
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_portable(a, b)
}

#[inline(always)]
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// 1 - dot for unit vectors, clamped at 0 (rounding can push a dot product past 1, which
/// hnsw_rs's own `DistDot` turns into a panic).
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitDot;

impl Distance<f32> for UnitDot {
    fn eval(&self, va: &[f32], vb: &[f32]) -> f32 {
        (1.0 - dot(va, vb)).max(0.0)
    }
}

type Graph<'a> = Hnsw<'a, f32, UnitDot>;

self_cell::self_cell!(
    struct LoadedGraph {
        owner: HnswIo,
        #[not_covariant]
        dependent: Graph,
    }
);

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnMode {
    /// Exact: every vector is scored.
    Exact,
    /// HNSW with this `ef_search`.
    Hnsw(usize),
}

/// Vectors and graph of one domain, ready to search.
pub struct DenseDomain {
    meta: DenseMeta,
    vectors: Vec<f32>,
    graph: LoadedGraph,
}

/// Writes the vectors (row-major, `dim` per passage ordinal) and HNSW graph of one domain
/// into `dir`; [`DenseDomain::open`] reads them back.
pub fn write(
    dir: &Path,
    model: &str,
    dim: usize,
    vectors: &[f32],
    dtype: VectorDtype,
    params: HnswParams,
) -> Result<DenseMeta> {
    params.validate()?;
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let count = vectors.len() / dim.max(1);
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
    let graph = build_graph(&stored, dim, params);
    // A point is its own nearest neighbour: a modest ef finds it whenever it is reachable.
    let unreachable = unreachable_points(&graph, &stored, dim, 64);
    graph.file_dump(dir, GRAPH).map_err(|e| Error::Corrupt {
        path: dir.to_path_buf(),
        message: format!("writing the HNSW graph: {e}"),
    })?;
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

fn build_graph(vectors: &[f32], dim: usize, params: HnswParams) -> Graph<'static> {
    let count = vectors.len() / dim;
    let layers = 16;
    let graph = Hnsw::new(
        params.m,
        count.max(1),
        layers,
        params.ef_construction,
        UnitDot,
    );
    let items: Vec<(&[f32], usize)> = vectors.chunks_exact(dim).zip(0..).collect();
    graph.parallel_insert_slice(&items);
    graph
}

/// Points that a search for their own vector does not return (the reported hnsw_rs
/// parallel-insert defect).
fn unreachable_points(graph: &Graph<'_>, vectors: &[f32], dim: usize, ef: usize) -> Vec<u32> {
    use rayon::prelude::*;
    let mut out: Vec<u32> = vectors
        .par_chunks_exact(dim)
        .enumerate()
        .filter(|(i, v)| !graph.search(v, 10, ef).iter().any(|n| n.d_id == *i))
        .map(|(i, _)| i as u32)
        .collect();
    out.sort_unstable();
    out
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
        let corrupt = |message: String| Error::Corrupt {
            path: dir.to_path_buf(),
            message,
        };
        let graph = LoadedGraph::try_new(HnswIo::new(dir, GRAPH), |io| {
            io.load_hnsw_with_dist(UnitDot)
                .map_err(|e| corrupt(format!("reading the HNSW graph: {e}")))
        })?;
        let points = graph.with_dependent(|_, g| g.get_nb_point());
        if points != meta.count {
            return Err(corrupt(format!(
                "HNSW graph has {points} points, expected {}",
                meta.count
            )));
        }
        Ok(DenseDomain {
            meta,
            vectors,
            graph,
        })
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
                    .with_dependent(|_, g| g.search(query, want, ef.max(want)))
                    .into_iter()
                    .map(|n| Hit {
                        ord: n.d_id as u32,
                        score: dot(query, self.vector(n.d_id as u32)),
                    })
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

/// Path of a domain's dense directory inside a generation.
pub(crate) fn domain_dir(gen_dir: &Path, slug: &str, domain: &str) -> PathBuf {
    gen_dir.join("dense").join(slug).join(domain)
}
