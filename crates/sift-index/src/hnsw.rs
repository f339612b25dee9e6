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
use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::sync::{Mutex, MutexGuard, RwLock};

use rayon::prelude::*;

use crate::dense::dot;

const MAGIC: &[u8; 8] = b"SIFTHNSW";
const VERSION: u32 = 1;
const MAX_LEVEL: u8 = 15;
const NO_UPPER: u32 = u32::MAX;
/// Largest M accepted (level 0 holds up to 2 M links).
pub const MAX_M: usize = 256;

/// A point and its similarity to the query (ordered by similarity, then ordinal).
#[derive(Debug, Clone, Copy)]
struct Cand {
    sim: f32,
    id: u32,
}

impl PartialEq for Cand {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Cand {
    fn cmp(&self, o: &Self) -> Ordering {
        self.sim.total_cmp(&o.sim).then(o.id.cmp(&self.id))
    }
}

/// Visited marks of one thread: a point is visited when its mark equals the epoch.
#[derive(Default)]
struct Visited {
    marks: Vec<u32>,
    epoch: u32,
}

impl Visited {
    fn reset(&mut self, n: usize) {
        if self.marks.len() < n {
            self.marks.resize(n, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.fill(0);
            self.epoch = 1;
        }
    }

    /// Marks `id`; true if it was not marked yet.
    #[inline]
    fn insert(&mut self, id: u32) -> bool {
        let m = &mut self.marks[id as usize];
        if *m == self.epoch {
            false
        } else {
            *m = self.epoch;
            true
        }
    }
}

/// Per-thread search state, reused across searches.
#[derive(Default)]
struct Scratch {
    visited: Visited,
    candidates: BinaryHeap<Cand>,
    results: BinaryHeap<Reverse<Cand>>,
    /// The unvisited neighbours of the point being expanded.
    todo: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// The query rounded to bfloat16, for graphs that walk bfloat16 vectors.
    static QUERY_BF16: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

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

/// Greedy walk on `level` from `cur` to a local maximum of similarity to `q`.
fn greedy<E: Elem>(
    links: &impl Links,
    v: Vectors<'_, E>,
    q: &[E],
    mut cur: Cand,
    level: usize,
) -> Cand {
    loop {
        let next = links.with(cur.id, level, |ns| {
            let mut best = cur;
            for &n in ns {
                let s = E::dot(q, v.get(n));
                if s > best.sim {
                    best = Cand { sim: s, id: n };
                }
            }
            best
        });
        if next.id == cur.id {
            return cur;
        }
        cur = next;
    }
}

/// Best-first search on `level` from `entry` keeping `ef` results; best first.
fn search_layer<E: Elem>(
    links: &impl Links,
    v: Vectors<'_, E>,
    q: &[E],
    entry: Cand,
    ef: usize,
    level: usize,
    scratch: &mut Scratch,
) -> Vec<Cand> {
    let Scratch {
        visited,
        candidates,
        results,
        todo,
    } = scratch;
    visited.reset(v.len());
    visited.insert(entry.id);
    candidates.clear();
    results.clear();
    candidates.push(entry);
    results.push(Reverse(entry));
    while let Some(c) = candidates.pop() {
        let worst = results.peek().expect("non-empty").0.sim;
        if c.sim < worst && results.len() >= ef {
            break;
        }
        links.with(c.id, level, |ns| {
            // the unvisited neighbours first (independent loads of their marks), then each
            // scored while the next one's vector is being fetched
            todo.clear();
            todo.extend(ns.iter().copied().filter(|&n| visited.insert(n)));
            if let Some(&first) = todo.first() {
                prefetch_all(v.get(first));
            }
            let mut worst = worst;
            for (i, &n) in todo.iter().enumerate() {
                if let Some(&next) = todo.get(i + 1) {
                    prefetch_all(v.get(next));
                }
                let s = E::dot(q, v.get(n));
                if results.len() < ef || s > worst {
                    let cand = Cand { sim: s, id: n };
                    candidates.push(cand);
                    results.push(Reverse(cand));
                    if results.len() > ef {
                        results.pop();
                    }
                    worst = results.peek().expect("non-empty").0.sim;
                }
            }
        });
    }
    let mut out: Vec<Cand> = results.drain().map(|r| r.0).collect();
    out.sort_unstable_by(|a, b| b.cmp(a));
    out
}

/// The paper's neighbour heuristic: walking `cands` best first, keep a candidate unless a
/// kept one is closer to it than the base point is; at most `m`.
fn select<E: Elem>(v: Vectors<'_, E>, cands: &[Cand], m: usize) -> Vec<u32> {
    let mut kept: Vec<u32> = Vec::with_capacity(m);
    for c in cands {
        if kept.len() >= m {
            break;
        }
        let cv = v.get(c.id);
        if kept.iter().all(|&r| E::dot(cv, v.get(r)) <= c.sim) {
            kept.push(c.id);
        }
    }
    kept
}

/// Level of point `i`: `floor(-ln(u) * ml)`, `u` in (0, 1] from a hash of `i`.
fn level_of(i: u32, ml: f64) -> u8 {
    // splitmix64
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    ((-u.ln() * ml).floor() as u64).min(MAX_LEVEL as u64) as u8
}

/// The graph while it is built. Level-0 lists, which every search reads, live in one flat
/// array (`1 + 2 M` words per point: count, links) with one lock per point, so reading a
/// point's links touches one place in memory, as hnswlib lays them out; upper-level lists
/// (a `1 / M` fraction of points) are vectors with a lock each. A list is read and changed
/// only under its lock, and a search holds it while it scores that list's points (no copy).
struct Building<'a, E> {
    v: Vectors<'a, E>,
    m: usize,
    m0: usize,
    ef_construction: usize,
    levels: Vec<u8>,
    /// Level-0 lists, `1 + m0` words per point; read and written only through
    /// [`Building::lock0`], under `locks0` of the point.
    base: Vec<AtomicU32>,
    locks0: Vec<Mutex<()>>,
    /// Index in `upper` of each point's level-1 list (its levels follow); unused for
    /// level-0 points.
    upper_offset: Vec<usize>,
    upper: Vec<Mutex<Vec<u32>>>,
    /// (entry point, top level).
    entry: RwLock<(u32, usize)>,
    /// Held by an insertion that raises the top level, for all of it.
    grow: Mutex<()>,
}

/// A point's level-0 list with the point's lock held. It is the only way to the point's
/// words in [`Building::base`] ([`Building::lock0`]), so every read and write of them happens
/// under that lock, and the list it lends out cannot change while it is borrowed.
struct Level0<'a> {
    _held: MutexGuard<'a, ()>,
    /// The count, then `m0` link slots.
    words: &'a [AtomicU32],
}

impl Level0<'_> {
    /// The links.
    fn links(&self) -> &[u32] {
        let len = self.words[0].load(AtomicOrdering::Relaxed) as usize;
        let words = &self.words[1..1 + len];
        // SAFETY: AtomicU32 has the size, alignment and bit validity of u32. The words are
        // written only through a `Level0` of this point (`set`), which takes the point's
        // lock: `self` holds it, and the slice borrows `self`, so nothing writes them while
        // the slice lives.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u32>(), len) }
    }

    /// Replaces the links (at most `m0`).
    fn set(&mut self, links: &[u32]) {
        for (w, &x) in self.words[1..].iter().zip(links) {
            w.store(x, AtomicOrdering::Relaxed);
        }
        self.words[0].store(links.len() as u32, AtomicOrdering::Relaxed);
    }
}

impl<E: Elem> Links for Building<'_, E> {
    #[inline]
    fn with<R>(&self, node: u32, level: usize, f: impl FnOnce(&[u32]) -> R) -> R {
        if level == 0 {
            f(self.lock0(node).links())
        } else {
            let l = self.upper[self.upper_offset[node as usize] + level - 1]
                .lock()
                .expect("no panics while a list is held");
            f(&l)
        }
    }
}

impl<E: Elem> Building<'_, E> {
    /// Sets the links of `node` on `level` to `links` (at most the level's capacity).
    fn set_links(&self, node: u32, level: usize, links: &[u32]) {
        if level == 0 {
            self.lock0(node).set(links);
        } else {
            *self.upper[self.upper_offset[node as usize] + level - 1]
                .lock()
                .expect("not poisoned") = links.to_vec();
        }
    }

    /// `node`'s level-0 list, locked: the only way to its words.
    fn lock0(&self, node: u32) -> Level0<'_> {
        let held = self.locks0[node as usize]
            .lock()
            .expect("no panics while a list is held");
        let start = node as usize * (1 + self.m0);
        Level0 {
            _held: held,
            words: &self.base[start..start + 1 + self.m0],
        }
    }

    /// Adds `q` to the links of `n` on `level`, re-selecting with the heuristic when the
    /// list is full.
    fn link_back(&self, n: u32, q: u32, level: usize, cap: usize) {
        let reselect = |l: &[u32]| -> Option<Vec<u32>> {
            if l.contains(&q) {
                return None;
            }
            let mut out = l.to_vec();
            if l.len() < cap {
                out.push(q);
                return Some(out);
            }
            let nv = self.v.get(n);
            let mut cands: Vec<Cand> = l
                .iter()
                .map(|&x| Cand {
                    sim: E::dot(nv, self.v.get(x)),
                    id: x,
                })
                .collect();
            cands.push(Cand {
                sim: E::dot(nv, self.v.get(q)),
                id: q,
            });
            cands.sort_unstable_by(|a, b| b.cmp(a));
            Some(select(self.v, &cands, cap))
        };
        if level == 0 {
            let mut list = self.lock0(n);
            if let Some(new) = reselect(list.links()) {
                list.set(&new);
            }
        } else {
            let mut l = self.upper[self.upper_offset[n as usize] + level - 1]
                .lock()
                .expect("not poisoned");
            if let Some(new) = reselect(&l) {
                *l = new;
            }
        }
    }

    fn insert(&self, q: u32, scratch: &mut Scratch) {
        let level = self.levels[q as usize] as usize;
        let qv = self.v.get(q);
        let (_, top) = *self.entry.read().expect("not poisoned");
        let _grow = (level > top).then(|| self.grow.lock().expect("not poisoned"));
        let (entry, top) = *self.entry.read().expect("not poisoned");
        let mut cur = Cand {
            sim: E::dot(qv, self.v.get(entry)),
            id: entry,
        };
        for lc in (level + 1..=top).rev() {
            cur = greedy(self, self.v, qv, cur, lc);
        }
        for lc in (0..=level.min(top)).rev() {
            let found = search_layer(self, self.v, qv, cur, self.ef_construction, lc, scratch);
            let chosen = select(self.v, &found, self.m);
            self.set_links(q, lc, &chosen);
            let cap = if lc == 0 { self.m0 } else { self.m };
            for &n in &chosen {
                self.link_back(n, q, lc, cap);
            }
            cur = found[0];
        }
        if level > top {
            *self.entry.write().expect("not poisoned") = (q, level);
        }
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

/// The copy of a graph a search walks on bfloat16 vectors: the vectors rounded to bfloat16
/// and the level-0 links, both renumbered in breadth-first order from the entry point, so
/// that linked points sit near each other in memory and a visit to a neighbour more often
/// finds its vector (and its page) in the cache. The upper levels keep the graph's own
/// numbering (`num` maps it to a row here), level 0 is walked in the new one, and results
/// are mapped back (`ord`).
#[derive(Debug, Clone)]
struct Walk {
    /// The vectors rounded to bfloat16, row `i` the point numbered `i`.
    vectors: Vec<u16>,
    /// Level-0 lists, `1 + m0` words per point (count, links), in the new numbering.
    base: Vec<u32>,
    m0: usize,
    /// Ordinal of each new number.
    ord: Vec<u32>,
    /// New number of each ordinal.
    num: Vec<u32>,
}

impl Links for Walk {
    #[inline]
    fn with<R>(&self, node: u32, _level: usize, f: impl FnOnce(&[u32]) -> R) -> R {
        let s = node as usize * (1 + self.m0);
        f(&self.base[s + 1..s + 1 + self.base[s] as usize])
    }
}

impl Walk {
    /// The walk copy of `g` from `rounded`, its vectors rounded to bfloat16 (by ordinal).
    fn new(g: &Hnsw, rounded: &[u16]) -> Walk {
        let (n, dim, m0) = (g.len(), g.dim, g.m0);
        // breadth-first from the entry point; points no level-0 path reaches follow in
        // ordinal order, each starting its own search
        let mut num = vec![u32::MAX; n];
        let mut ord: Vec<u32> = Vec::with_capacity(n);
        let mut head = 0;
        let mut next_root = 0usize;
        let mut root = (n > 0).then_some(g.entry);
        while let Some(r) = root {
            num[r as usize] = ord.len() as u32;
            ord.push(r);
            while head < ord.len() {
                let x = ord[head];
                head += 1;
                for &y in g.links(x, 0) {
                    if num[y as usize] == u32::MAX {
                        num[y as usize] = ord.len() as u32;
                        ord.push(y);
                    }
                }
            }
            while next_root < n && num[next_root] != u32::MAX {
                next_root += 1;
            }
            root = (next_root < n).then_some(next_root as u32);
        }
        let mut vectors = sift_simd::mem::huge_vec(rounded.len(), || 0u16);
        vectors
            .par_chunks_mut(dim.max(1))
            .zip(ord.par_iter())
            .for_each(|(d, &o)| {
                d.copy_from_slice(&rounded[o as usize * dim..(o as usize + 1) * dim])
            });
        let mut base = sift_simd::mem::huge_vec(n * (1 + m0), || 0u32);
        base.par_chunks_mut(1 + m0)
            .zip(ord.par_iter())
            .for_each(|(d, &o)| {
                let links = g.links(o, 0);
                d[0] = links.len() as u32;
                for (w, &l) in d[1..].iter_mut().zip(links) {
                    *w = num[l as usize];
                }
            });
        Walk {
            vectors,
            base,
            m0,
            ord,
            num,
        }
    }

    /// The greedy descent through `g`'s upper levels, then the `ef` best on level 0 (by
    /// ordinal, similarities on the bfloat16 vectors); `q` is the query rounded.
    fn search(&self, g: &Hnsw, q: &[u16], ef: usize) -> Vec<Cand> {
        let upper = Vectors {
            data: &self.vectors,
            dim: g.dim,
            remap: Some(&self.num),
        };
        let mut cur = Cand {
            sim: u16::dot(q, upper.get(g.entry)),
            id: g.entry,
        };
        for lc in (1..=g.top).rev() {
            cur = greedy(g, upper, q, cur, lc);
        }
        let start = Cand {
            sim: cur.sim,
            id: self.num[cur.id as usize],
        };
        let level0 = Vectors::new(&self.vectors, g.dim);
        let mut found =
            SCRATCH.with(|sc| search_layer(self, level0, q, start, ef, 0, &mut sc.borrow_mut()));
        for c in &mut found {
            c.id = self.ord[c.id as usize];
        }
        found
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

    fn build_on<E: Elem>(v: Vectors<'_, E>, m: usize, ef_construction: usize) -> Hnsw {
        let (n, dim) = (v.len(), v.dim);
        let m = m.clamp(2, MAX_M);
        let m0 = 2 * m;
        let ml = 1.0 / (m as f64).ln();
        let levels: Vec<u8> = (0..n as u32).map(|i| level_of(i, ml)).collect();
        let mut upper_offset = vec![0usize; n];
        let mut uppers = 0;
        for (i, &l) in levels.iter().enumerate() {
            upper_offset[i] = uppers;
            uppers += l as usize;
        }
        let b = Building {
            v,
            m,
            m0,
            ef_construction: ef_construction.max(m),
            entry: RwLock::new((0, levels.first().copied().unwrap_or(0) as usize)),
            base: sift_simd::mem::huge_vec(n * (1 + m0), || AtomicU32::new(0)),
            locks0: (0..n).map(|_| Mutex::new(())).collect(),
            upper_offset,
            upper: (0..uppers).map(|_| Mutex::new(Vec::new())).collect(),
            levels,
            grow: Mutex::new(()),
        };
        if n > 1 {
            (1..n as u32).into_par_iter().for_each(|i| {
                SCRATCH.with(|sc| b.insert(i, &mut sc.borrow_mut()));
            });
        }
        let (entry, top) = *b.entry.read().expect("not poisoned");
        let mut base = sift_simd::mem::huge_vec(b.base.len(), || 0u32);
        base.iter_mut()
            .zip(b.base)
            .for_each(|(d, a)| *d = a.into_inner());
        let lists: Vec<Vec<u32>> = b
            .upper
            .into_iter()
            .map(|l| l.into_inner().expect("not poisoned"))
            .collect();
        let mut upper_start = vec![NO_UPPER; n];
        let mut upper = Vec::new();
        for i in 0..n {
            if b.levels[i] > 0 {
                upper_start[i] = upper.len() as u32;
                for lc in 1..=b.levels[i] as usize {
                    let l = &lists[b.upper_offset[i] + lc - 1];
                    upper.push(l.len() as u32);
                    upper.extend_from_slice(l);
                    upper.extend(std::iter::repeat_n(0, m - l.len()));
                }
            }
        }
        Hnsw {
            dim,
            m,
            m0,
            entry,
            top: if n == 0 { 0 } else { top },
            levels: b.levels,
            base,
            upper_start,
            upper,
            walk: None,
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

    /// The graph as bytes (see [`Hnsw::from_bytes`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let n = self.len();
        let mut out = Vec::with_capacity(40 + n + 4 * (self.base.len() + n + self.upper.len()));
        out.extend_from_slice(MAGIC);
        for x in [
            VERSION,
            self.dim as u32,
            self.m as u32,
            n as u32,
            self.entry,
            self.top as u32,
            self.upper.len() as u32,
        ] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend_from_slice(&self.levels);
        for w in self.base.iter().chain(&self.upper_start).chain(&self.upper) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Reads [`Hnsw::to_bytes`]'s output, checking every count and link, for `dim`-sized
    /// vectors ([`Hnsw::attach`] the vectors before searching).
    pub fn from_bytes(bytes: &[u8], dim: usize) -> std::result::Result<Hnsw, String> {
        let header = 8 + 7 * 4;
        if bytes.len() < header || &bytes[..8] != MAGIC {
            return Err("not a Sift HNSW graph".into());
        }
        let word = |i: usize| {
            u32::from_le_bytes(bytes[8 + 4 * i..12 + 4 * i].try_into().expect("4 bytes"))
        };
        if word(0) != VERSION {
            return Err(format!("graph format {} (expected {VERSION})", word(0)));
        }
        let (gdim, m, n, entry, top, upper_len) = (
            word(1) as usize,
            word(2) as usize,
            word(3) as usize,
            word(4),
            word(5) as usize,
            word(6) as usize,
        );
        if gdim != dim {
            return Err(format!(
                "graph of {gdim}-dimensional vectors, expected {dim}"
            ));
        }
        if !(2..=MAX_M).contains(&m) {
            return Err(format!("M = {m}"));
        }
        let m0 = 2 * m;
        let words = n * (1 + m0) + n + upper_len;
        if bytes.len() != header + n + 4 * words {
            return Err(format!(
                "{} bytes, expected {}",
                bytes.len(),
                header + n + 4 * words
            ));
        }
        let levels = bytes[header..header + n].to_vec();
        let mut it = bytes[header + n..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        // the level-0 links, read at random by every search: on huge pages where allowed
        let mut base = sift_simd::mem::huge_vec(n * (1 + m0), || 0u32);
        base.iter_mut().zip(it.by_ref()).for_each(|(d, w)| *d = w);
        let upper_start: Vec<u32> = it.by_ref().take(n).collect();
        let upper: Vec<u32> = it.collect();
        let g = Hnsw {
            dim,
            m,
            m0,
            entry,
            top,
            levels,
            base,
            upper_start,
            upper,
            walk: None,
        };
        g.check()?;
        Ok(g)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        if self.entry as usize >= n || self.levels[self.entry as usize] as usize != self.top {
            return Err("entry point is not a top-level point".into());
        }
        let bad_list = |l: &[u32], cap: usize| l.len() > cap || l.iter().any(|&x| x as usize >= n);
        for i in 0..n {
            let s = i * (1 + self.m0);
            let c = self.base[s] as usize;
            if c > self.m0 || bad_list(&self.base[s + 1..s + 1 + c], self.m0) {
                return Err(format!("point {i}: bad level-0 links"));
            }
            let lv = self.levels[i] as usize;
            if lv > MAX_LEVEL as usize || lv > self.top {
                return Err(format!("point {i}: level {lv}"));
            }
            let start = self.upper_start[i];
            if (lv == 0) != (start == NO_UPPER) {
                return Err(format!("point {i}: upper lists do not match its level"));
            }
            for lc in 1..=lv {
                let s = start as usize + (lc - 1) * (1 + self.m);
                if s + 1 + self.m > self.upper.len() {
                    return Err(format!("point {i}: upper lists out of range"));
                }
                let c = self.upper[s] as usize;
                if c > self.m || bad_list(&self.upper[s + 1..s + 1 + c], self.m) {
                    return Err(format!("point {i}: bad level-{lc} links"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let mut v: Vec<f32> = (0..n * dim).map(|_| next()).collect();
        for row in v.chunks_exact_mut(dim) {
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }

    #[test]
    fn finds_exact_neighbours_and_round_trips() {
        let (n, dim) = (3000, 16);
        let v = unit_vectors(n, dim, 1);
        let g = Hnsw::build(&v, dim, 12, 100);
        assert_eq!(g.len(), n);
        let mut hits = 0;
        for q in (0..n).step_by(30) {
            let query = &v[q * dim..(q + 1) * dim];
            let mut exact: Vec<(u32, f32)> = (0..n as u32)
                .map(|i| (i, dot(query, &v[i as usize * dim..(i as usize + 1) * dim])))
                .collect();
            exact.sort_by(|a, b| b.1.total_cmp(&a.1));
            let got = g.search(&v, query, 10, 64);
            hits += exact[..10]
                .iter()
                .filter(|e| got.iter().any(|h| h.0 == e.0))
                .count();
        }
        let recall = hits as f64 / (100 * 10) as f64;
        assert!(recall >= 0.98, "recall {recall}");
        let back = Hnsw::from_bytes(&g.to_bytes(), dim).unwrap();
        assert_eq!(back, g);
        assert!(g.unreachable().len() < n / 100);
    }

    #[test]
    fn the_walk_renumbers_every_point_once_and_keeps_the_links() {
        // level 0: 0 - 1 - 2 reachable from the entry (0); 3 - 4 apart, reachable from no one
        let (n, m0) = (5, 4);
        let lists: [&[u32]; 5] = [&[1], &[0, 2], &[1], &[4], &[3]];
        let mut base = vec![0u32; n * (1 + m0)];
        for (i, l) in lists.iter().enumerate() {
            base[i * (1 + m0)] = l.len() as u32;
            base[i * (1 + m0) + 1..i * (1 + m0) + 1 + l.len()].copy_from_slice(l);
        }
        let g = Hnsw {
            dim: 2,
            m: 2,
            m0,
            entry: 0,
            top: 0,
            levels: vec![0; n],
            base,
            upper_start: vec![NO_UPPER; n],
            upper: Vec::new(),
            walk: None,
        };
        let rounded: Vec<u16> = (0..2 * n as u16).collect();
        let w = Walk::new(&g, &rounded);
        // breadth-first from the entry, then the unreached points in ordinal order
        assert_eq!(w.ord, [0, 1, 2, 3, 4]);
        for (new, &o) in w.ord.iter().enumerate() {
            assert_eq!(w.num[o as usize] as usize, new);
            assert_eq!(
                &w.vectors[2 * new..2 * new + 2],
                &rounded[2 * o as usize..2 * o as usize + 2]
            );
            let mapped: Vec<u32> = w.with(new as u32, 0, |l| {
                l.iter().map(|&x| w.ord[x as usize]).collect()
            });
            assert_eq!(mapped, g.links(o, 0));
        }
        // an entry in the middle renumbers its neighbours first
        let g = Hnsw { entry: 2, ..g };
        let w = Walk::new(&g, &rounded);
        assert_eq!(w.ord, [2, 1, 0, 3, 4]);
    }

    #[test]
    fn damaged_bytes_are_errors() {
        let v = unit_vectors(200, 8, 2);
        let g = Hnsw::build(&v, 8, 4, 20);
        let bytes = g.to_bytes();
        assert!(Hnsw::from_bytes(&bytes[..bytes.len() - 1], 8).is_err());
        assert!(Hnsw::from_bytes(&bytes, 9).is_err());
        let mut bad = bytes.clone();
        // a link to a point that does not exist
        let first_link = 8 + 7 * 4 + 200 + 4;
        bad[first_link..first_link + 4].copy_from_slice(&1000u32.to_le_bytes());
        assert!(Hnsw::from_bytes(&bad, 8).is_err());
        assert!(Hnsw::from_bytes(b"nonsense", 8).is_err());
    }

    #[test]
    fn tiny_graphs() {
        assert!(
            Hnsw::build(&[], 4, 8, 16)
                .search(&[], &[1.0, 0.0, 0.0, 0.0], 3, 8)
                .is_empty()
        );
        let v = [1.0, 0.0, 0.0, 1.0];
        let g = Hnsw::build(&v, 2, 8, 16);
        assert_eq!(g.search(&v, &[0.0, 1.0], 2, 8)[0].0, 1);
        assert!(g.unreachable().is_empty());
    }
}
