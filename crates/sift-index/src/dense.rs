//! Dense vectors of one domain: stored vectors (f32 or f16) by passage ordinal, an HNSW graph
//! (Sift's own, [`crate::hnsw`]) persisted beside them, and exact flat search for small
//! corpora and verification.
use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bm25::{Hit, top_k};
use crate::hnsw::Hnsw;
use crate::{Error, Result};

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

/// Inner product of two equally long vectors: 16 accumulators so it vectorises, compiled for
/// AVX-512 or AVX2/FMA behind run-time detection (the crate itself targets baseline x86-64).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match simd_level() {
        // SAFETY: the features were detected.
        Simd::Avx512 => return unsafe { dot_avx512(a, b) },
        Simd::Avx2 => return unsafe { dot_avx2(a, b) },
        Simd::None => {}
    }
    dot_portable(a, b)
}

#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Simd {
    Avx512,
    Avx2,
    None,
}

#[cfg(target_arch = "x86_64")]
fn simd_level() -> Simd {
    use std::arch::is_x86_feature_detected as has;
    static LEVEL: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        if has!("avx512f") && has!("fma") {
            Simd::Avx512
        } else if has!("avx2") && has!("fma") {
            Simd::Avx2
        } else {
            Simd::None
        }
    })
}

/// Four independent 8-wide FMA accumulators (32 values per step) so the additions do not
/// wait on each other.
///
/// # Safety
///
/// The processor must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: every load reads 8 values at i + 8 * j + 8 <= n.
    unsafe {
        let mut s = [_mm256_setzero_ps(); 4];
        while i + 32 <= n {
            for (j, acc) in s.iter_mut().enumerate() {
                let o = i + 8 * j;
                *acc =
                    _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(o)), _mm256_loadu_ps(pb.add(o)), *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            s[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s[0]);
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3]));
        let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        let mut sum = _mm_cvtss_f32(h);
        while i < n {
            sum += a[i] * b[i];
            i += 1;
        }
        sum
    }
}

/// Four independent 16-wide FMA accumulators (64 values per step).
///
/// # Safety
///
/// The processor must have AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    // SAFETY: every load reads 16 values at i + 16 * j + 16 <= n.
    unsafe {
        let mut s = [_mm512_setzero_ps(); 4];
        while i + 64 <= n {
            for (j, acc) in s.iter_mut().enumerate() {
                let o = i + 16 * j;
                *acc =
                    _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(o)), _mm512_loadu_ps(pb.add(o)), *acc);
            }
            i += 64;
        }
        while i + 16 <= n {
            s[0] = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s[0]);
            i += 16;
        }
        let v = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
        let mut sum = _mm512_reduce_add_ps(v);
        while i < n {
            sum += a[i] * b[i];
            i += 1;
        }
        sum
    }
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
        let graph = Hnsw::from_bytes(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_double_precision_sum_at_every_length() {
        for n in [
            0usize, 1, 7, 8, 15, 16, 31, 33, 63, 64, 65, 100, 384, 1000, 1152,
        ] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
                .collect();
            let b: Vec<f32> = (0..n)
                .map(|i| ((i * 104_729) % 97) as f32 / 48.0 - 1.0)
                .collect();
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            for got in [dot(&a, &b), dot_portable(&a, &b)] {
                assert!(
                    (got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "n {n}: {got} vs {want}"
                );
            }
        }
    }
}
