//! The graph on disk: one little-endian file, checked when read.
use super::{Hnsw, MAGIC, MAX_LEVEL, MAX_M, NO_UPPER, VERSION};

impl Hnsw {
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
