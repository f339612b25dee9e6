//! The search: visited marks and per-thread scratch, the greedy descent, the best-first
//! search of one level, the neighbour selection heuristic, and the bfloat16 copy of a
//! graph that a search walks.
use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::{Elem, Hnsw, Links, Vectors, prefetch_all};

/// A point and its similarity to the query (ordered by similarity, then ordinal).
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand {
    pub(super) sim: f32,
    pub(super) id: u32,
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
pub(super) struct Scratch {
    visited: Visited,
    candidates: BinaryHeap<Cand>,
    results: BinaryHeap<Reverse<Cand>>,
    /// The unvisited neighbours of the point being expanded.
    todo: Vec<u32>,
}

thread_local! {
    pub(super) static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// The query rounded to bfloat16, for graphs that walk bfloat16 vectors.
    pub(super) static QUERY_BF16: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// Greedy walk on `level` from `cur` to a local maximum of similarity to `q`.
pub(super) fn greedy<E: Elem>(
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
pub(super) fn search_layer<E: Elem>(
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
pub(super) fn select<E: Elem>(v: Vectors<'_, E>, cands: &[Cand], m: usize) -> Vec<u32> {
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

/// The copy of a graph a search walks on bfloat16 vectors: the vectors rounded to bfloat16
/// and the level-0 links, both renumbered in breadth-first order from the entry point, so
/// that linked points sit near each other in memory and a visit to a neighbour more often
/// finds its vector (and its page) in the cache. The upper levels keep the graph's own
/// numbering (`num` maps it to a row here), level 0 is walked in the new one, and results
/// are mapped back (`ord`).
#[derive(Debug, Clone)]
pub(super) struct Walk {
    /// The vectors rounded to bfloat16, row `i` the point numbered `i`.
    pub(super) vectors: Vec<u16>,
    /// Level-0 lists, `1 + m0` words per point (count, links), in the new numbering.
    pub(super) base: Vec<u32>,
    pub(super) m0: usize,
    /// Ordinal of each new number.
    pub(super) ord: Vec<u32>,
    /// New number of each ordinal.
    pub(super) num: Vec<u32>,
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
    pub(super) fn new(g: &Hnsw, rounded: &[u16]) -> Walk {
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
    pub(super) fn search(&self, g: &Hnsw, q: &[u16], ef: usize) -> Vec<Cand> {
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
