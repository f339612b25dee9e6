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
use super::amx;
use super::block::Out;
use super::pack::{BLOCK_ROWS, Line, PANEL, STEP_PAIRS, line_at};
use super::rows::{Rows, fill_rows};
use super::vector::{has_dot_bf16, round_row};
use crate::mem::{aligned, aligned_view};

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
    /// A block of context in f32 before [`HeadProducts::context_bf16`] rounds it.
    out: Vec<f32>,
}

impl HeadProducts {
    /// Scratch for heads of `d` features, or `None` where the processor has no AMX tiles
    /// (or Linux does not grant them).
    pub fn new(d: usize) -> Option<HeadProducts> {
        if !amx::available() || d == 0 {
            return None;
        }
        let k_stride = d.div_ceil(2).div_ceil(STEP_PAIRS) * STEP_PAIRS;
        Some(HeadProducts {
            d,
            keys: 0,
            k_stride,
            v_stride: 0,
            k: Vec::new(),
            v: Vec::new(),
            x: Vec::new(),
            out: Vec::new(),
        })
    }

    /// The head size these products were made for.
    pub fn head_dim(&self) -> usize {
        self.d
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
        // sized without clearing: the packing below writes every line a product reads
        // (the gathers) or clears them first (the portable loops)
        self.k.resize(panels * ks * 4, Line([0; 32]));
        let vs = keys.div_ceil(2).div_ceil(STEP_PAIRS) * STEP_PAIRS;
        self.v_stride = vs;
        self.v.resize(d.div_ceil(PANEL) * vs * 4, Line([0; 32]));
        #[cfg(target_arch = "x86_64")]
        if let (Rows::Bf16(k), Rows::Bf16(v)) = (k, v)
            && d.is_multiple_of(32)
            && rs.is_multiple_of(2)
            && k.as_ptr().cast::<u32>().is_aligned()
            && rs.checked_mul(16).is_some_and(|x| x <= i32::MAX as usize)
            && has_dot_bf16()
        {
            // SAFETY: AVX-512F and BW were detected (with AVX512-BF16); the rows are in
            // bounds (asserted above), whole pairs on 4-byte boundaries (checked).
            unsafe {
                pack_keys_avx512(&mut self.k, ks, k, rs, d, keys);
                pack_values_avx512(&mut self.v, vs, v, rs, d, keys);
            }
            // the value pairs past the keys meet the probabilities' zero padding: zero
            // them too (0 x a stale infinity would be NaN); the keys' lines past the last
            // key only reach output columns no product writes
            for pn in 0..d.div_ceil(PANEL) {
                let panel = &mut self.v[pn * vs * 4..(pn + 1) * vs * 4];
                for q in keys.div_ceil(2)..vs {
                    for g in 0..4 {
                        panel[line_at(vs, q, g)] = Line([0; 32]);
                    }
                }
            }
            return;
        }
        self.k.fill(Line([0; 32]));
        self.v.fill(Line([0; 32]));
        let mut row = vec![0u16; 2 * ks];
        for j in 0..keys {
            k.prefetch((j + AHEAD) * rs, d);
            k.round_span(j * rs, d, &mut row);
            let (p, g, lane) = (j / PANEL, (j % PANEL) / 16, j % 16);
            let panel = &mut self.k[p * ks * 4..(p + 1) * ks * 4];
            for (q, pair) in row[..2 * d.div_ceil(2)].chunks_exact(2).enumerate() {
                let line = &mut panel[line_at(ks, q, g)].0;
                line[2 * lane] = pair[0];
                line[2 * lane + 1] = pair[1];
            }
        }
        // values, transposed: panels of 64 features, the keys in pairs
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
                let line = &mut self.v[p * vs * 4 + line_at(vs, q, g)].0;
                line[2 * lane] = e;
                line[2 * lane + 1] = o;
            }
        }
    }

    /// `scores = q · K[..kv]ᵀ`: `rows` query rows, row `i` at `q[i * rs..i * rs + d]` (f32
    /// or already rounded), against the first `kv` packed keys; `scores` holds `rows` rows
    /// of `kv` scores, `ld >= kv` apart (a multiple of 16 on a 64-byte boundary stores
    /// the tiles' rows whole, a cache line each; any other layout goes through a buffer).
    /// Panics when `kv` exceeds the keys loaded, `ld < kv` or a slice is too short.
    pub fn scores(
        &mut self,
        q: Rows,
        rs: usize,
        rows: usize,
        kv: usize,
        scores: &mut [f32],
        ld: usize,
    ) {
        let d = self.d;
        assert!(kv <= self.keys && ld >= kv);
        assert!(rows == 0 || scores.len() >= (rows - 1) * ld + kv);
        assert!(rows == 0 || q.len() >= (rows - 1) * rs + d);
        if rows == 0 || kv == 0 {
            return;
        }
        let xs = 2 * self.k_stride;
        let padded = rows.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
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
        // is `rows` rows of `kv` values `ld` apart (asserted) and each call writes its own
        // columns.
        unsafe {
            amx::configure();
            let x = aligned_view(&self.x, padded * xs);
            for p in 0..kv.div_ceil(PANEL) {
                amx::panel_rows(&amx::PanelRows {
                    x,
                    xs,
                    rows,
                    lines: &self.k[p * ks * 4..(p + 1) * ks * 4],
                    dst,
                    acc: false,
                    ld,
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
        let xs = kv.div_ceil(2 * STEP_PAIRS) * 2 * STEP_PAIRS;
        let padded = rows.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
        let x = aligned(&mut self.x, padded * xs);
        x[rows * xs..].fill(0);
        (&mut x[..rows * xs], xs)
    }

    /// [`HeadProducts::context_rounded`] with the context itself rounded to bfloat16 (for
    /// a layer that rounds it anyway: a packed projection on the tiles): `rows` rows of `d`
    /// bits written from `dst`, `ld` apart, the f32 product going through a scratch block
    /// still in the cache.
    ///
    /// # Safety
    /// As [`HeadProducts::context`], for bfloat16 rows.
    pub unsafe fn context_bf16(&mut self, rows: usize, kv: usize, dst: *mut u16, ld: usize) {
        let d = self.d;
        let mut buf = std::mem::take(&mut self.out);
        // on a 64-byte boundary: the tiles store the context's rows whole
        let block = aligned(&mut buf, rows * d);
        // SAFETY: the block holds rows x d values (ld = d), this thread's alone.
        unsafe { self.context_rounded(rows, kv, block.as_mut_ptr(), d) };
        for (r, row) in block.chunks_exact(d.max(1)).enumerate() {
            // SAFETY: row r of the output, d values, is the caller's (this function's
            // contract).
            let out = unsafe { std::slice::from_raw_parts_mut(dst.add(r * ld), d) };
            round_row(row, out);
        }
        self.out = buf;
    }

    /// [`HeadProducts::context`] of the probabilities written through
    /// [`HeadProducts::probabilities`] (same `rows` and `kv`).
    ///
    /// # Safety
    /// As [`HeadProducts::context`].
    pub unsafe fn context_rounded(&mut self, rows: usize, kv: usize, dst: *mut f32, ld: usize) {
        assert!(kv <= self.keys);
        let xs = kv.div_ceil(2 * STEP_PAIRS) * 2 * STEP_PAIRS;
        let padded = rows.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
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
            // (panics unless `probabilities` made this many rows)
            let x = aligned_view(&self.x, padded * xs);
            for pn in 0..self.d.div_ceil(PANEL) {
                amx::panel_rows(&amx::PanelRows {
                    x,
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

/// [`HeadProducts::load_kv`]'s keys from bfloat16 rows: each line (16 keys' pair of
/// features) gathered in one instruction from the 16 keys' rows.
///
/// # Safety
/// AVX-512F must be available; key `j`'s `d` values (a multiple of 32) are
/// `k[j * rs..j * rs + d]`, in bounds, `k` on a 4-byte boundary, `rs` even and `16 * rs`
/// within `i32`; `lines` holds `keys.div_ceil(PANEL)` panels of `ks * 4` lines, zero.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_keys_avx512(
    lines: &mut [Line],
    ks: usize,
    k: &[u16],
    rs: usize,
    d: usize,
    keys: usize,
) {
    use std::arch::x86_64::*;
    let lane_rows = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((rs / 2) as i32),
    );
    for j0 in (0..keys).step_by(16) {
        let mask: __mmask16 = if keys - j0 >= 16 {
            !0
        } else {
            (1u16 << (keys - j0)) - 1
        };
        let (p, g) = (j0 / PANEL, (j0 % PANEL) / 16);
        for q in 0..d / 2 {
            // SAFETY: lanes j0 + lane < keys read key rows in bounds (the caller's
            // contract), 4 bytes at pair q; the line is inside panel p.
            unsafe {
                let base = k.as_ptr().add(j0 * rs + 2 * q).cast::<i32>();
                let pairs =
                    _mm512_mask_i32gather_epi32::<4>(_mm512_setzero_si512(), mask, lane_rows, base);
                let line = &mut lines[p * ks * 4 + line_at(ks, q, g)];
                _mm512_storeu_si512(line.0.as_mut_ptr().cast(), pairs);
            }
        }
    }
}

/// [`HeadProducts::load_kv`]'s values from bfloat16 rows, transposed: each pair of keys'
/// rows interleaved 32 features at a time into two lines.
///
/// # Safety
/// AVX-512F and BW must be available; value `j`'s `d` values (a multiple of 32) are
/// `v[j * rs..j * rs + d]`, in bounds; `lines` holds `d.div_ceil(PANEL)` panels of `vs * 4`
/// lines (`vs >= keys.div_ceil(2)`), zero.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_values_avx512(
    lines: &mut [Line],
    vs: usize,
    v: &[u16],
    rs: usize,
    d: usize,
    keys: usize,
) {
    use std::arch::x86_64::*;
    // value i of the even key then of the odd one: features 0..16 of the 32, then 16..32
    let lo = _mm512_set_epi16(
        47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4,
        35, 3, 34, 2, 33, 1, 32, 0,
    );
    let hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for q in 0..keys.div_ceil(2) {
        for c in 0..d / 32 {
            let (pn, g) = (c / 2, (c % 2) * 2);
            // SAFETY: rows 2q (and 2q + 1 when it is a key) are in bounds (the caller's
            // contract), 32 values from feature 32c; the lines are inside panel pn.
            unsafe {
                let even = _mm512_loadu_si512(v.as_ptr().add(2 * q * rs + 32 * c).cast());
                let odd = if 2 * q + 1 < keys {
                    _mm512_loadu_si512(v.as_ptr().add((2 * q + 1) * rs + 32 * c).cast())
                } else {
                    _mm512_setzero_si512()
                };
                let at = pn * vs * 4;
                _mm512_storeu_si512(
                    lines[at + line_at(vs, q, g)].0.as_mut_ptr().cast(),
                    _mm512_permutex2var_epi16(even, lo, odd),
                );
                _mm512_storeu_si512(
                    lines[at + line_at(vs, q, g + 1)].0.as_mut_ptr().cast(),
                    _mm512_permutex2var_epi16(even, hi, odd),
                );
            }
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
            // an odd row stride (the packing's portable loops) and an even one (its AVX-512
            // gathers and interleaves, for bfloat16 rows of whole 32-value blocks)
            for rs in [3 * d + 5, 3 * d + 6] {
                let mut h = HeadProducts::new(d).unwrap();
                let qkv = values(rs * keys.max(rows), d as u64);
                let (q, k, v) = (&qkv[..], &qkv[d..], &qkv[2 * d..]);
                // the same rows already rounded pack the same head
                let bits: Vec<u16> = qkv.iter().map(|&x| f32_to_bf16(x)).collect();
                let mut hb = HeadProducts::new(d).unwrap();
                hb.load_kv(Rows::Bf16(&bits[d..]), Rows::Bf16(&bits[2 * d..]), rs, keys);
                h.load_kv(Rows::F32(k), Rows::F32(v), rs, keys);
                let bits_of = |l: &[Line]| l.iter().flat_map(|l| l.0).collect::<Vec<u16>>();
                assert_eq!(bits_of(&hb.k), bits_of(&h.k), "d {d}, rs {rs}: packed keys");
                assert_eq!(
                    bits_of(&hb.v),
                    bits_of(&h.v),
                    "d {d}, rs {rs}: packed values"
                );
                let mut sb = vec![0f32; rows * keys];
                hb.scores(Rows::Bf16(&bits), rs, rows, keys, &mut sb, keys);
                // scratch that held a longer head of NaNs before packs the same products
                let nan = vec![0x7FC0u16; rs * (keys + 70)];
                let mut hs = HeadProducts::new(d).unwrap();
                hs.load_kv(
                    Rows::Bf16(&nan[d..]),
                    Rows::Bf16(&nan[2 * d..]),
                    rs,
                    keys + 70,
                );
                hs.load_kv(Rows::Bf16(&bits[d..]), Rows::Bf16(&bits[2 * d..]), rs, keys);
                let mut ss = vec![0f32; rows * keys];
                hs.scores(Rows::Bf16(&bits), rs, rows, keys, &mut ss, keys);
                assert_eq!(ss, sb, "d {d}, rs {rs}: scores after stale scratch");
                for kv in [keys, keys / 2 + 1] {
                    let mut s = vec![f32::NAN; rows * kv];
                    h.scores(Rows::F32(q), rs, rows, kv, &mut s, kv);
                    if kv == keys {
                        assert_eq!(s, sb, "d {d}: bf16 rows");
                    }
                    // rows a multiple of 16 apart on a cache line (the tiles' rows stored
                    // whole): the same scores, the gaps between rows untouched
                    let ld = kv.next_multiple_of(16);
                    let mut buf = Vec::new();
                    let wide = aligned(&mut buf, rows * ld);
                    wide.fill(f32::NAN);
                    h.scores(Rows::F32(q), rs, rows, kv, wide, ld);
                    for i in 0..rows {
                        assert_eq!(&wide[i * ld..i * ld + kv], &s[i * kv..(i + 1) * kv]);
                        assert!(wide[i * ld + kv..(i + 1) * ld].iter().all(|x| x.is_nan()));
                    }
                    for i in 0..rows {
                        for j in 0..kv {
                            let want: f64 =
                                (0..d).map(|f| r(q[i * rs + f]) * r(k[j * rs + f])).sum();
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
                    let mut out_s = vec![f32::NAN; rows * ld];
                    // SAFETY: as above
                    unsafe { hs.context(&p, rows, kv, out_s.as_mut_ptr(), ld) };
                    assert_eq!(
                        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        out_s.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        "d {d}, rs {rs}, kv {kv}: context after stale scratch"
                    );
                    for i in 0..rows {
                        for f in 0..d {
                            let want: f64 =
                                (0..kv).map(|j| r(p[i * kv + j]) * r(v[j * rs + f])).sum();
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
}
