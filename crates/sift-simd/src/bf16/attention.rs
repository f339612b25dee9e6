//! One attention head's two matrix products on the AMX tiles, for encoders whose linear
//! layers already run in bfloat16 ([`super::Kernel::Amx`]): the scores `Q · Kᵀ` and the
//! context `P · V`, each operand rounded to bfloat16 (to nearest, ties to even) and every
//! product accumulated in f32, as PyTorch's bfloat16 attention does. The softmax between
//! them stays with the caller, in f32.
//!
//! A [`HeadProducts`] is a thread's scratch: [`HeadProducts::load_kv`] packs one head's keys
//! and values once (the keys as a weight whose output columns are the keys, the values
//! transposed, as a weight whose output columns are the head's features), then
//! [`HeadProducts::scores`] and [`HeadProducts::context`] run for each block of query rows.
//! The packing is [`super::PackedBf16::pack`]'s layout, so the products are
//! `amx::panel_rows` calls. Everything runs on the calling thread: the heads of a batch
//! are the caller's parallel tasks.
use super::{Line, Out, PANEL, Rows, amx, round_row};

/// Rows ahead whose values are prefetched while a head's rows are read: the rows of a fused
/// QKV matrix are kilobytes apart, further than the hardware prefetchers look, so each row
/// would otherwise wait on memory.
const AHEAD: usize = 12;

/// A thread's scratch for one head's products on the AMX tiles.
pub struct HeadProducts {
    /// Head size.
    d: usize,
    /// Keys packed.
    keys: usize,
    /// Input pairs per key panel (`d` in pairs, rounded up to a tile step).
    k_stride: usize,
    /// Input pairs per value panel (the keys in pairs, rounded up to a tile step).
    v_stride: usize,
    k: Vec<Line>,
    v: Vec<Line>,
    /// Query rows or probabilities, rounded.
    x: Vec<u16>,
}

impl HeadProducts {
    /// Scratch for heads of `d` features, or `None` where the processor has no AMX tiles
    /// (or Linux does not grant them).
    pub fn new(d: usize) -> Option<HeadProducts> {
        if !amx::available() || d == 0 {
            return None;
        }
        let k_stride = d.div_ceil(2).div_ceil(amx::STEP_PAIRS) * amx::STEP_PAIRS;
        Some(HeadProducts {
            d,
            keys: 0,
            k_stride,
            v_stride: 0,
            k: Vec::new(),
            v: Vec::new(),
            x: Vec::new(),
        })
    }

    /// Packs `keys` keys and values of the head: key `j` is `k[j * rs..j * rs + d]`, value
    /// `j` is `v[j * rs..j * rs + d]` (rows `rs` apart, as in a fused QKV matrix), f32 or
    /// already rounded. Panics when a row is out of bounds.
    pub fn load_kv(&mut self, k: Rows, v: Rows, rs: usize, keys: usize) {
        let d = self.d;
        assert!(keys == 0 || (k.len() >= (keys - 1) * rs + d && v.len() >= (keys - 1) * rs + d));
        self.keys = keys;
        // keys: panels of 64 keys, each key's features in pairs
        let panels = keys.div_ceil(PANEL);
        let ks = self.k_stride;
        self.k.clear();
        self.k.resize(panels * ks * 4, Line([0; 32]));
        let mut row = vec![0u16; 2 * ks];
        for j in 0..keys {
            k.prefetch((j + AHEAD) * rs, d);
            k.round_span(j * rs, d, &mut row);
            let (p, g, lane) = (j / PANEL, (j % PANEL) / 16, j % 16);
            let panel = &mut self.k[p * ks * 4..(p + 1) * ks * 4];
            for (q, pair) in row[..2 * d.div_ceil(2)].chunks_exact(2).enumerate() {
                let line = &mut panel[q * 4 + g].0;
                line[2 * lane] = pair[0];
                line[2 * lane + 1] = pair[1];
            }
        }
        // values, transposed: panels of 64 features, the keys in pairs
        let vs = keys.div_ceil(2).div_ceil(amx::STEP_PAIRS) * amx::STEP_PAIRS;
        self.v_stride = vs;
        let panels = d.div_ceil(PANEL);
        self.v.clear();
        self.v.resize(panels * vs * 4, Line([0; 32]));
        let (mut even, mut odd) = (vec![0u16; d], vec![0u16; d]);
        for q in 0..keys.div_ceil(2) {
            v.prefetch((2 * q + AHEAD) * rs, d);
            v.prefetch((2 * q + 1 + AHEAD) * rs, d);
            v.round_span(2 * q * rs, d, &mut even);
            if 2 * q + 1 < keys {
                v.round_span((2 * q + 1) * rs, d, &mut odd);
            } else {
                odd.fill(0);
            }
            for (f, (&e, &o)) in even.iter().zip(&odd).enumerate() {
                let (p, g, lane) = (f / PANEL, (f % PANEL) / 16, f % 16);
                let line = &mut self.v[(p * vs + q) * 4 + g].0;
                line[2 * lane] = e;
                line[2 * lane + 1] = o;
            }
        }
    }

    /// `scores = q · K[..kv]ᵀ`: `rows` query rows, row `i` at `q[i * rs..i * rs + d]` (f32
    /// or already rounded), against the first `kv` packed keys; `scores` is `rows × kv`
    /// row-major. Panics when `kv` exceeds the keys loaded or a slice is too short.
    pub fn scores(&mut self, q: Rows, rs: usize, rows: usize, kv: usize, scores: &mut [f32]) {
        let d = self.d;
        assert!(kv <= self.keys && scores.len() >= rows * kv);
        assert!(rows == 0 || q.len() >= (rows - 1) * rs + d);
        if rows == 0 || kv == 0 {
            return;
        }
        let xs = 2 * self.k_stride;
        let padded = rows.div_ceil(amx::BLOCK_ROWS) * amx::BLOCK_ROWS;
        fill_rows(&mut self.x, xs, padded, rows, |i, dst| {
            q.prefetch((i + AHEAD) * rs, d);
            q.round_span(i * rs, d, dst);
            dst[d..].fill(0);
        });
        let ks = self.k_stride;
        let dst = Out(scores.as_mut_ptr());
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AMX is available (`new`) and configured here for these calls; `x` holds
        // whole blocks of rows of `xs` values; each panel's lines are `ks` pairs; the output
        // is `rows × kv` (asserted) and each call writes its own columns.
        unsafe {
            amx::configure();
            for p in 0..kv.div_ceil(PANEL) {
                amx::panel_rows(&amx::PanelRows {
                    x: &self.x,
                    xs,
                    rows,
                    lines: &self.k[p * ks * 4..(p + 1) * ks * 4],
                    dst,
                    acc: false,
                    ld: kv,
                    r0: 0,
                    col0: p * PANEL,
                    cols: (kv - p * PANEL).min(PANEL),
                });
            }
            amx::release();
        }
    }

    /// The probabilities' rows as [`HeadProducts::context_rounded`] reads them, for the
    /// caller to fill: `rows` rows of `xs` bfloat16 values (the returned `xs`), each row's
    /// `kv` probabilities then zeros; rows past `rows` are zeroed here.
    pub fn probabilities(&mut self, rows: usize, kv: usize) -> (&mut [u16], usize) {
        let xs = kv.div_ceil(2 * amx::STEP_PAIRS) * 2 * amx::STEP_PAIRS;
        let padded = rows.div_ceil(amx::BLOCK_ROWS) * amx::BLOCK_ROWS;
        if self.x.len() < padded * xs {
            self.x.resize(padded * xs, 0);
        }
        self.x[rows * xs..padded * xs].fill(0);
        (&mut self.x[..rows * xs], xs)
    }

    /// [`HeadProducts::context`] of the probabilities written through
    /// [`HeadProducts::probabilities`] (same `rows` and `kv`).
    ///
    /// # Safety
    /// As [`HeadProducts::context`].
    pub unsafe fn context_rounded(&mut self, rows: usize, kv: usize, dst: *mut f32, ld: usize) {
        assert!(kv <= self.keys);
        let xs = kv.div_ceil(2 * amx::STEP_PAIRS) * 2 * amx::STEP_PAIRS;
        let padded = rows.div_ceil(amx::BLOCK_ROWS) * amx::BLOCK_ROWS;
        assert!(self.x.len() >= padded * xs);
        if rows == 0 {
            return;
        }
        if xs == 0 {
            for r in 0..rows {
                // SAFETY: row r of the output is the caller's (this function's contract).
                unsafe { std::ptr::write_bytes(dst.add(r * ld), 0, self.d) };
            }
            return;
        }
        let vs = self.v_stride;
        let out = Out(dst);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AMX is available (`new`) and configured here; `x` holds whole blocks of
        // rows of `xs` values, zero past `kv` (the caller's, and `probabilities`' padding
        // rows); `xs / 2 <= vs` pairs of each panel are read (kv <= keys); the output rows
        // are the caller's.
        unsafe {
            amx::configure();
            for pn in 0..self.d.div_ceil(PANEL) {
                amx::panel_rows(&amx::PanelRows {
                    x: &self.x,
                    xs,
                    rows,
                    lines: &self.v[pn * vs * 4..(pn + 1) * vs * 4],
                    dst: out,
                    acc: false,
                    ld,
                    r0: 0,
                    col0: pn * PANEL,
                    cols: (self.d - pn * PANEL).min(PANEL),
                });
            }
            amx::release();
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (vs, out);
    }

    /// `dst = p · V[..kv]`: `rows` rows of probabilities (`p` is `rows × kv` row-major)
    /// against the first `kv` packed values, written to `rows` rows of `d` values `ld`
    /// apart from `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of rows `0..rows`, values `0..d` at row stride `ld`,
    /// and written by no other thread meanwhile.
    pub unsafe fn context(&mut self, p: &[f32], rows: usize, kv: usize, dst: *mut f32, ld: usize) {
        assert!(kv <= self.keys && p.len() >= rows * kv);
        let (x, xs) = self.probabilities(rows, kv);
        for (i, row) in x.chunks_exact_mut(xs.max(1)).take(rows).enumerate() {
            round_row(&p[i * kv..(i + 1) * kv], &mut row[..kv]);
            row[kv..].fill(0);
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.context_rounded(rows, kv, dst, ld) }
    }
}

/// Makes `x` `padded` rows of `xs` values: `row(i, values)` writes each of the first `rows`
/// (all `xs` values), the rest are zero. Reuses `x`'s memory without clearing it first.
fn fill_rows(
    x: &mut Vec<u16>,
    xs: usize,
    padded: usize,
    rows: usize,
    mut row: impl FnMut(usize, &mut [u16]),
) {
    if x.len() < padded * xs {
        x.resize(padded * xs, 0);
    }
    for (i, r) in x[..padded * xs].chunks_exact_mut(xs).enumerate() {
        if i < rows {
            row(i, r);
        } else {
            r.fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::values;
    use super::super::{bf16_to_f32, f32_to_bf16};
    use super::*;

    fn r(x: f32) -> f64 {
        bf16_to_f32(f32_to_bf16(x)) as f64
    }

    #[test]
    fn products_equal_rounded_operands_multiplied_in_f64() {
        if !amx::available() {
            eprintln!("skipped: no AMX tiles on this processor");
            return;
        }
        // head sizes below, at and above a tile step and a panel; keys and rows not
        // multiples of a block; the fused QKV layout (rows `rs` apart)
        for (d, keys, rows) in [
            (32, 200, 77),
            (64, 65, 33),
            (80, 31, 5),
            (7, 3, 1),
            (128, 130, 40),
        ] {
            let mut h = HeadProducts::new(d).unwrap();
            let rs = 3 * d + 5;
            let qkv = values(rs * keys.max(rows), d as u64);
            let (q, k, v) = (&qkv[..], &qkv[d..], &qkv[2 * d..]);
            // the same rows already rounded pack the same head
            let bits: Vec<u16> = qkv.iter().map(|&x| f32_to_bf16(x)).collect();
            let mut hb = HeadProducts::new(d).unwrap();
            hb.load_kv(Rows::Bf16(&bits[d..]), Rows::Bf16(&bits[2 * d..]), rs, keys);
            h.load_kv(Rows::F32(k), Rows::F32(v), rs, keys);
            let mut sb = vec![0f32; rows * keys];
            hb.scores(Rows::Bf16(&bits), rs, rows, keys, &mut sb);
            for kv in [keys, keys / 2 + 1] {
                let mut s = vec![f32::NAN; rows * kv];
                h.scores(Rows::F32(q), rs, rows, kv, &mut s);
                if kv == keys {
                    assert_eq!(s, sb, "d {d}: bf16 rows");
                }
                for i in 0..rows {
                    for j in 0..kv {
                        let want: f64 = (0..d).map(|f| r(q[i * rs + f]) * r(k[j * rs + f])).sum();
                        let got = s[i * kv + j] as f64;
                        assert!(
                            (got - want).abs() < 1e-4,
                            "d {d} score {i},{j}: {got} vs {want}"
                        );
                    }
                }
                let p = values(rows * kv, 11);
                let ld = d + 3;
                let mut out = vec![f32::NAN; rows * ld];
                // SAFETY: out holds rows x ld values
                unsafe { h.context(&p, rows, kv, out.as_mut_ptr(), ld) };
                for i in 0..rows {
                    for f in 0..d {
                        let want: f64 = (0..kv).map(|j| r(p[i * kv + j]) * r(v[j * rs + f])).sum();
                        let got = out[i * ld + f] as f64;
                        assert!(
                            (got - want).abs() < 1e-4,
                            "d {d} context {i},{f}: {got} vs {want}"
                        );
                    }
                    assert!(
                        out[i * ld + d..(i + 1) * ld].iter().all(|x| x.is_nan()),
                        "wrote past d"
                    );
                }
            }
        }
    }
}
