//! Sift's HNSW graph (Malkov & Yashunin, "Efficient and robust approximate nearest neighbor
//! search using Hierarchical Navigable Small World graphs", 2018) for unit vectors under
//! inner product.
//!
//! - Build: every point draws its level (`floor(-ln(u) / ln(M))`, `u` from a hash of its
//!   ordinal, so levels do not depend on thread timing); points are inserted in parallel;
//!   each (point, level) link list has its own lock, held while the list is read (and its
//!   points scored) or changed; level-0 lists lie in one flat array, as hnswlib's do; a new point links to the `M` candidates chosen by the paper's heuristic
//!   (Algorithm 4, without keeping pruned ones) among `ef_construction` found on each level;
//!   a neighbour whose list is full (`M` links, `2 M` on level 0) re-selects with the same
//!   heuristic. Only a point that raises the top level serialises with others.
//! - Search: greedy descent through the upper levels, then a best-first search with `ef`
//!   candidates on level 0. After the build the lists are frozen into flat arrays (no locks,
//!   no per-search allocation: visited marks are per thread, stamped with an epoch).
//! - On disk: one little-endian file (`graph.bin`), checked when read.
use rayon::prelude::*;

use crate::dense::dot;

const MAGIC: &[u8; 8] = b"SIFTHNSW";
const VERSION: u32 = 1;
const MAX_LEVEL: u8 = 15;
const NO_UPPER: u32 = u32::MAX;
/// Largest M accepted (level 0 holds up to 2 M links).
pub const MAX_M: usize = 256;

mod build;
mod io;
mod search;

use search::{Cand, QUERY_BF16, SCRATCH, Walk, greedy, search_layer};

/// A stored vector element the graph computes similarities on: f32, or bfloat16 bits
/// (`u16`: half the memory read per point; see [`Hnsw::build`]).
trait Elem: Copy + Send + Sync + 'static {
    fn dot(a: &[Self], b: &[Self]) -> f32;
}

impl Elem for f32 {
    #[inline]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        dot(a, b)
    }
}

impl Elem for u16 {
    #[inline]
    fn dot(a: &[u16], b: &[u16]) -> f32 {
        sift_simd::bf16::dot(a, b)
    }
}

/// Whether graphs walk bfloat16 copies of the vectors: where the processor multiplies
/// bfloat16 pairs natively (AVX512-BF16), which halves the memory each visited point costs;
/// the results are scored again on the f32 vectors.
fn bf16_walk() -> bool {
    sift_simd::bf16::has_dot_bf16()
}

/// `v` rounded to bfloat16.
fn to_bf16(v: &[f32]) -> Vec<u16> {
    let mut out = sift_simd::mem::huge_vec(v.len(), || 0u16);
    out.par_chunks_mut(1 << 16)
        .zip(v.par_chunks(1 << 16))
        .for_each(|(d, s)| sift_simd::bf16::round_into(s, d));
    out
}

/// Asks the processor to start loading the first cache line of `x`.
#[inline(always)]
fn prefetch<E>(x: &[E]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; any address is allowed.
    unsafe {
        std::arch::x86_64::_mm_prefetch(x.as_ptr() as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Asks the processor to load all of `x` (one hint per 64-byte line): a 384-d f32 vector is
/// 24 lines, and the search spends most of its time waiting for them.
#[inline(always)]
fn prefetch_all<E>(x: &[E]) {
    for line in x.chunks((64 / std::mem::size_of::<E>()).max(1)) {
        prefetch(line);
    }
}

/// Link lists as the search reads them.
trait Links {
    /// Calls `f` with the links of `node` on `level`.
    fn with<R>(&self, node: u32, level: usize, f: impl FnOnce(&[u32]) -> R) -> R;
}

/// The vectors, row-major; with `remap`, point `i`'s vector is row `remap[i]`.
struct Vectors<'a, E> {
    data: &'a [E],
    dim: usize,
    remap: Option<&'a [u32]>,
}

impl<E> Clone for Vectors<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E> Copy for Vectors<'_, E> {}

impl<'a, E> Vectors<'a, E> {
    fn new(data: &'a [E], dim: usize) -> Self {
        Vectors {
            data,
            dim,
            remap: None,
        }
    }

    #[inline]
    fn get(&self, id: u32) -> &[E] {
        let row = self.remap.map_or(id, |r| r[id as usize]);
        let i = row as usize * self.dim;
        &self.data[i..i + self.dim]
    }

    fn len(&self) -> usize {
        self.data.len() / self.dim.max(1)
    }
}

/// A built graph, frozen for search.
#[derive(Debug, Clone)]
pub struct Hnsw {
    dim: usize,
    m: usize,
    m0: usize,
    entry: u32,
    top: usize,
    levels: Vec<u8>,
    /// Level-0 lists: `1 + m0` words per point (count, links).
    base: Vec<u32>,
    /// Start in `upper` of each point's level-1 list; `NO_UPPER` for level-0 points.
    upper_start: Vec<u32>,
    /// Upper lists: `1 + m` words each, levels 1.. of a point one after the other.
    upper: Vec<u32>,
    /// The copy of the graph the search walks where the processor has bfloat16 dot
    /// products ([`Hnsw::build`], [`Hnsw::attach`]); not part of the bytes.
    walk: Option<Walk>,
}

/// Graphs are equal when their links are ([`Hnsw::to_bytes`]): the bfloat16 copy of the
/// vectors a search walks is not part of the graph.
impl PartialEq for Hnsw {
    fn eq(&self, o: &Self) -> bool {
        (self.dim, self.m, self.entry, self.top) == (o.dim, o.m, o.entry, o.top)
            && self.levels == o.levels
            && self.base == o.base
            && self.upper_start == o.upper_start
            && self.upper == o.upper
    }
}

impl Links for Hnsw {
    #[inline]
    fn with<R>(&self, node: u32, level: usize, f: impl FnOnce(&[u32]) -> R) -> R {
        f(self.links(node, level))
    }
}

impl Hnsw {
    /// Builds the graph of `vectors` (row-major, `dim` each) with at most `m` links per
    /// point (`2 m` on level 0) and `ef_construction` candidates, in parallel.
    ///
    /// On processors with bfloat16 dot products (AVX512-BF16) similarities while building
    /// and walking are those of the vectors rounded to bfloat16: each visited point reads
    /// half the memory, the cost that dominates both. Search results are scored again on
    /// the f32 vectors ([`Hnsw::search`]).
    pub fn build(vectors: &[f32], dim: usize, m: usize, ef_construction: usize) -> Hnsw {
        if bf16_walk() {
            let walk = to_bf16(vectors);
            let mut g = Self::build_on(Vectors::new(&walk, dim), m, ef_construction);
            g.walk = Some(Walk::new(&g, &walk));
            g
        } else {
            Self::build_on(Vectors::new(vectors, dim), m, ef_construction)
        }
    }

    /// Prepares a graph read from bytes ([`Hnsw::from_bytes`]) to search `vectors`, the ones
    /// it was built on: their bfloat16 copy where the search walks one ([`Hnsw::build`]).
    pub fn attach(&mut self, vectors: &[f32]) {
        if bf16_walk() {
            self.walk = Some(Walk::new(self, &to_bf16(vectors)));
        }
    }

    /// Points.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// True for an empty graph.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    #[inline]
    fn links(&self, node: u32, level: usize) -> &[u32] {
        if level == 0 {
            let s = node as usize * (1 + self.m0);
            &self.base[s + 1..s + 1 + self.base[s] as usize]
        } else {
            let s = self.upper_start[node as usize] as usize + (level - 1) * (1 + self.m);
            &self.upper[s + 1..s + 1 + self.upper[s] as usize]
        }
    }

    /// The `k` points most similar to `query` found with `ef` candidates: (ordinal,
    /// inner product), best first. `vectors` must be the ones the graph was built on. Where
    /// the graph walks bfloat16 copies ([`Hnsw::build`]), the `ef` found are scored again
    /// on `vectors` (f32) before the `k` best are taken.
    pub fn search(&self, vectors: &[f32], query: &[f32], k: usize, ef: usize) -> Vec<(u32, f32)> {
        if self.is_empty() || k == 0 {
            return Vec::new();
        }
        let dim = self.dim;
        let v = Vectors::new(vectors, dim);
        let found = match &self.walk {
            Some(walk) if walk.vectors.len() == vectors.len() => {
                let mut found = QUERY_BF16.with(|q| {
                    let mut q = q.borrow_mut();
                    q.clear();
                    q.resize(query.len(), 0);
                    sift_simd::bf16::round_into(query, &mut q);
                    walk.search(self, &q, ef.max(k))
                });
                for c in &mut found {
                    c.sim = dot(query, v.get(c.id));
                }
                found.sort_unstable_by(|a, b| b.cmp(a));
                found
            }
            _ => self.walk(v, query, ef.max(k)),
        };
        found.into_iter().take(k).map(|c| (c.id, c.sim)).collect()
    }

    /// The greedy descent through the upper levels, then the `ef` best on level 0.
    fn walk<E: Elem>(&self, v: Vectors<'_, E>, q: &[E], ef: usize) -> Vec<Cand> {
        let mut cur = Cand {
            sim: E::dot(q, v.get(self.entry)),
            id: self.entry,
        };
        for lc in (1..=self.top).rev() {
            cur = greedy(self, v, q, cur, lc);
        }
        SCRATCH.with(|sc| search_layer(self, v, q, cur, ef, 0, &mut sc.borrow_mut()))
    }

    /// Points that no path of level-0 links reaches from the entry point (ascending); a
    /// search can only find them by scanning.
    pub fn unreachable(&self) -> Vec<u32> {
        let n = self.len();
        if n == 0 {
            return Vec::new();
        }
        let mut seen = vec![false; n];
        let mut stack = vec![self.entry];
        seen[self.entry as usize] = true;
        while let Some(x) = stack.pop() {
            for &y in self.links(x, 0) {
                if !seen[y as usize] {
                    seen[y as usize] = true;
                    stack.push(y);
                }
            }
        }
        (0..n as u32).filter(|&i| !seen[i as usize]).collect()
    }
}

#[cfg(test)]
mod tests;
