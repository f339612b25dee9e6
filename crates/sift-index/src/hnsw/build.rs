//! The build: levels drawn per point, link lists under per-list locks, points inserted
//! in parallel, then the lists frozen into flat arrays.
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::sync::{Mutex, MutexGuard, RwLock};

use rayon::prelude::*;

use super::search::{Cand, SCRATCH, Scratch, greedy, search_layer, select};
use super::{Elem, Hnsw, Links, MAX_LEVEL, MAX_M, NO_UPPER, Vectors};

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

impl Hnsw {
    pub(super) fn build_on<E: Elem>(v: Vectors<'_, E>, m: usize, ef_construction: usize) -> Hnsw {
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
}
