//! Tests of the products and vector functions across their kernels.
use super::vector::round_row;
use super::*;
use crate::mem::aligned;
use std::mem::MaybeUninit;

/// Reproducible values in [-1, 1) (an LCG), for the products' tests.
pub(in crate::bf16) fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn rounding_is_to_nearest_even() {
    assert_eq!(f32_to_bf16(1.0), 0x3F80);
    // 1 + 2^-8 is halfway between 1 and the next bfloat16: ties to even (1)
    assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8000)), 0x3F80);
    // 1 + 3 * 2^-8 is halfway above an odd one: rounds up
    assert_eq!(f32_to_bf16(f32::from_bits(0x3F81_8000)), 0x3F82);
    assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8001)), 0x3F81);
    assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    assert_eq!(f32_to_bf16(f32::INFINITY), 0x7F80);
    assert_eq!(f32_to_bf16(-0.0), 0x8000);
    let mut a = vec![0u16; 40];
    let src = values(37, 9);
    round_row(&src, &mut a);
    for (j, (&d, &s)) in a.iter().zip(&src).enumerate() {
        assert_eq!(d, f32_to_bf16(s), "value {j}");
    }
    assert!(a[37..].iter().all(|&d| d == 0));
}

#[test]
fn products_match_a_double_precision_reference_on_both_kernels() {
    // odd inputs, a partial last panel, rows not a multiple of the tiles, more input
    // pairs than a cache block; outputs on a cache line whose rows are too (the AMX
    // kernel's runs of tile steps, whole blocks added to in place: 45 x 600 x 128)
    for &(m, k, n) in &[
        (1, 1, 1),
        (3, 7, 5),
        (7, 64, 64),
        (13, 250, 130),
        (2, 200, 65),
        (9, 1, 70),
        (40, 100, 200),
        (70, 33, 64),
        (45, 600, 128),
    ] {
        let x = values(m * k, (m * 31 + k) as u64);
        let wf = values(n * k, (n * 17 + k) as u64);
        let w: Vec<u16> = wf.iter().map(|&v| f32_to_bf16(v)).collect();
        let packed = PackedBf16::pack(&w, n, k);
        let base = values(m * n, 5);
        // every kernel this processor runs: the dot product, and the widening one at
        // each instruction level up to the processor's
        let mut runs = vec![
            (Kernel::DotBf16, crate::level()),
            (Kernel::F32, crate::Level::Baseline),
        ];
        if crate::level() != crate::Level::Baseline {
            runs.push((Kernel::F32, crate::Level::Avx2));
        }
        if crate::level() == crate::Level::Avx512 {
            runs.push((Kernel::F32, crate::Level::Avx512));
        }
        if amx::available() {
            runs.push((Kernel::Amx, crate::level()));
        } else if (m, k, n) == (1, 1, 1) {
            eprintln!("skipped: the AMX kernel (this processor or OS has no AMX tiles)");
        }
        for (kernel, level) in runs {
            let rounded = (kernel == Kernel::DotBf16 && has_dot_bf16())
                || (kernel == Kernel::Amx && amx::available());
            let mut buf = Vec::new();
            let out = aligned(&mut buf, m * n);
            out.copy_from_slice(&base);
            packed.matmul_acc_at(kernel, level, &x, m, out);
            for r in 0..m {
                for c in 0..n {
                    let want: f64 = base[r * n + c] as f64
                        + (0..k)
                            .map(|j| {
                                let a = x[r * k + j];
                                let a = if rounded {
                                    bf16_to_f32(f32_to_bf16(a))
                                } else {
                                    a
                                };
                                a as f64 * bf16_to_f32(w[c * k + j]) as f64
                            })
                            .sum::<f64>();
                    let got = out[r * n + c] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + k as f64).sqrt(),
                        "{kernel:?} {level:?} {m}x{k}x{n} at ({r}, {c}): {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn bf16_dot_matches_a_double_precision_sum_at_every_length() {
    for n in [0usize, 1, 31, 32, 33, 127, 128, 129, 384, 1000] {
        let a: Vec<u16> = values(n, 7).iter().map(|&v| f32_to_bf16(v)).collect();
        let b: Vec<u16> = values(n, 8).iter().map(|&v| f32_to_bf16(v)).collect();
        let want: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| bf16_to_f32(*x) as f64 * bf16_to_f32(*y) as f64)
            .sum();
        let got = dot(&a, &b) as f64;
        assert!(
            (got - want).abs() <= 1e-4 * (1.0 + n as f64).sqrt(),
            "n {n}: {got} vs {want}"
        );
    }
}

#[test]
fn written_products_equal_accumulated_ones_and_run_the_epilogue_once_per_row() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(8)
        .build()
        .unwrap();
    // rows outweighing the weight (chunks of rows on the tiles), a weight outweighing
    // the rows (panels outermost), a single row, an odd number of inputs
    for (m, k, n) in [(301, 70, 150), (5, 300, 200), (1, 64, 70), (130, 33, 64)] {
        let x = values(m * k, 5);
        let w: Vec<u16> = values(n * k, 6).iter().map(|&v| f32_to_bf16(v)).collect();
        let packed = PackedBf16::pack(&w, n, k);
        let mut kernels = vec![Kernel::F32];
        if has_dot_bf16() {
            kernels.push(Kernel::DotBf16);
        }
        if amx::available() {
            kernels.push(Kernel::Amx);
        } else {
            eprintln!("skipped: the AMX kernel's written products (no AMX tiles)");
        }
        for kernel in kernels {
            let mut want = vec![0f32; m * n];
            packed.matmul_acc_with(kernel, &x, m, &mut want);
            for threads in [1, 8] {
                let run = || {
                    // garbage where the product writes: every element must be written
                    let mut out = vec![MaybeUninit::new(f32::NAN); m * n];
                    packed
                        .matmul_into_with(kernel, &x, m, &mut out, None)
                        .to_vec()
                };
                let got = if threads == 1 {
                    run()
                } else {
                    pool.install(run)
                };
                assert_eq!(got, want, "{kernel:?} {m}x{k}x{n}, {threads} threads");
                // the epilogue sees every row once, with its index
                let seen: Vec<std::sync::atomic::AtomicUsize> =
                    (0..m).map(|_| Default::default()).collect();
                let then = |first: usize, rows: &mut [f32]| {
                    assert_eq!(rows.len() % n, 0);
                    for (i, row) in rows.chunks_mut(n).enumerate() {
                        seen[first + i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        row.iter_mut().for_each(|v| *v += (first + i) as f32);
                    }
                };
                let fused = || {
                    let mut out = vec![MaybeUninit::new(f32::NAN); m * n];
                    packed
                        .matmul_into_with(kernel, &x, m, &mut out, Some(&then))
                        .to_vec()
                };
                let got = if threads == 1 {
                    fused()
                } else {
                    pool.install(fused)
                };
                let shifted: Vec<f32> = want
                    .chunks(n)
                    .enumerate()
                    .flat_map(|(r, row)| row.iter().map(move |v| v + r as f32))
                    .collect();
                assert_eq!(got, shifted, "{kernel:?} {m}x{k}x{n} epilogue");
                assert!(
                    seen.iter()
                        .all(|c| c.load(std::sync::atomic::Ordering::Relaxed) == 1)
                );
            }
        }
    }
}

#[test]
fn rounded_rows_and_blocks_equal_the_written_product() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(8)
        .build()
        .unwrap();
    // many chunks of rows (scratch blocks on the tiles), few (the panels split between
    // tasks: written whole first), a weight outweighing the rows, two rows, odd inputs,
    // a weight over a core's L2 cache (taller chunks of rows), rows a multiple of 16
    // columns long with more than one run of tile steps (the AMX tasks' scratch)
    for (m, k, n) in [
        (1300, 1024, 1100),
        (300, 600, 320),
        (301, 70, 150),
        (40, 64, 300),
        (5, 300, 200),
        (2, 64, 70),
        (130, 33, 64),
    ] {
        let x = values(m * k, 7);
        let xb: Vec<u16> = x.iter().map(|&v| f32_to_bf16(v)).collect();
        let w: Vec<u16> = values(n * k, 8).iter().map(|&v| f32_to_bf16(v)).collect();
        let packed = PackedBf16::pack(&w, n, k);
        let mut want = vec![MaybeUninit::new(f32::NAN); m * n];
        let want = packed.matmul_into(&x, m, &mut want, None).to_vec();
        // spot checks against a double-precision product of the bfloat16 values (the
        // last row and column included)
        for t in 0..200.max(m) {
            let (i, j) = (t * 7919 % m, t * 104_729 % n);
            let (i, j) = if t == 0 { (m - 1, n - 1) } else { (i, j) };
            let exact: f64 = (0..k)
                .map(|c| {
                    // (the widening kernel reads the rows unrounded)
                    let a = if has_dot_bf16() {
                        bf16_to_f32(xb[i * k + c]) as f64
                    } else {
                        x[i * k + c] as f64
                    };
                    a * bf16_to_f32(w[j * k + c]) as f64
                })
                .sum();
            let got = want[i * n + j] as f64;
            assert!(
                (got - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                "{m}x{k}x{n} ({i}, {j}): {got} vs {exact}"
            );
        }
        for threads in [1, 8] {
            let run = || {
                let mut out = vec![MaybeUninit::new(f32::NAN); m * n];
                let pre = packed
                    .matmul_rows_into(Rows::Bf16(&xb), m, &mut out, None)
                    .to_vec();
                let blocks: Vec<std::sync::Mutex<Vec<f32>>> =
                    (0..m).map(|_| Default::default()).collect();
                let sink = |first: usize, rows: &mut [f32]| {
                    assert_eq!(rows.len() % n, 0);
                    for (i, row) in rows.chunks(n).enumerate() {
                        blocks[first + i].lock().unwrap().extend_from_slice(row);
                    }
                };
                packed.matmul_blocks(Rows::F32(&x), m, &sink);
                let blocks: Vec<f32> = blocks
                    .into_iter()
                    .flat_map(|b| b.into_inner().unwrap())
                    .collect();
                // the tiles, each element handed over once
                let tiles: Vec<std::sync::Mutex<(f32, usize)>> =
                    (0..m * n).map(|_| Default::default()).collect();
                let sink = |t: Tile| {
                    assert!(t.cols <= t.ld && t.col + t.cols <= n);
                    assert_eq!(t.values.len() % t.ld, 0);
                    for (i, row) in t.values.chunks(t.ld).enumerate() {
                        for (j, &v) in row[..t.cols].iter().enumerate() {
                            let mut e = tiles[(t.row + i) * n + t.col + j].lock().unwrap();
                            *e = (v, e.1 + 1);
                        }
                    }
                };
                packed.matmul_tiles(Rows::F32(&x), m, &sink);
                let tiles: Vec<(f32, usize)> =
                    tiles.into_iter().map(|t| t.into_inner().unwrap()).collect();
                assert!(tiles.iter().all(|t| t.1 == 1), "{m}x{k}x{n}: tiles once");
                let tiles: Vec<f32> = tiles.into_iter().map(|t| t.0).collect();
                (pre, blocks, tiles)
            };
            let (pre, blocks, tiles) = if threads == 1 {
                run()
            } else {
                pool.install(run)
            };
            // pre-rounded rows: where the kernel rounds (AMX, AVX512-BF16), the same
            // product; the widening kernel multiplies unrounded f32 rows otherwise
            if has_dot_bf16() {
                assert_eq!(pre, want, "{m}x{k}x{n} bf16 rows, {threads} threads");
            }
            // each row handed over once, as written
            assert_eq!(blocks, want, "{m}x{k}x{n} blocks, {threads} threads");
            assert_eq!(tiles, want, "{m}x{k}x{n} tiles, {threads} threads");
        }
    }
}

#[test]
fn paired_products_equal_the_products_one_after_the_other() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(8)
        .build()
        .unwrap();
    // many chunks of rows with a middle of several panels (a partial last one), a
    // weight over a core's L2 cache, few rows (the products one after the other)
    for (m, k, n, n2) in [
        (300, 600, 320, 200),
        (1300, 256, 1100, 64),
        (5, 64, 70, 40),
        (64, 40, 33, 17),
    ] {
        let x = values(m * k, 11);
        let bits = |len: usize, seed: u64| -> Vec<u16> {
            values(len, seed).iter().map(|&v| f32_to_bf16(v)).collect()
        };
        let (first, second) = (
            PackedBf16::pack(&bits(n * k, 12), n, k),
            PackedBf16::pack(&bits(n2 * n, 13), n2, n),
        );
        let bias = values(n, 14);
        // the reference: the first product written whole, biased and rounded, then the
        // second
        let mut a = vec![MaybeUninit::new(0f32); m * n];
        let a = first.matmul_into(&x, m, &mut a, None);
        let mid: Vec<u16> = a
            .chunks(n)
            .flat_map(|r| r.iter().zip(&bias).map(|(v, b)| f32_to_bf16(v + b)))
            .collect();
        let mut want = vec![MaybeUninit::new(0f32); m * n2];
        let want = second
            .matmul_rows_into(Rows::Bf16(&mid), m, &mut want, None)
            .to_vec();
        let midsink = |t: Tile, rows: &mut [u16], ld: usize| {
            for (i, r) in t.values.chunks(t.ld).enumerate() {
                for j in 0..t.cols {
                    rows[i * ld + j] = f32_to_bf16(r[j] + bias[t.col + j]);
                }
            }
        };
        for threads in [1, 8] {
            let run = || {
                let got: Vec<std::sync::Mutex<Vec<f32>>> =
                    (0..m).map(|_| Default::default()).collect();
                let sink = |first: usize, rows: &mut [f32]| {
                    for (i, row) in rows.chunks(n2).enumerate() {
                        got[first + i].lock().unwrap().extend_from_slice(row);
                    }
                };
                first.matmul_pair(&second, Rows::F32(&x), m, &midsink, &sink);
                got.into_iter()
                    .flat_map(|b| b.into_inner().unwrap())
                    .collect::<Vec<f32>>()
            };
            let got = if threads == 1 {
                run()
            } else {
                pool.install(run)
            };
            assert_eq!(got, want, "{m}x{k}x{n}x{n2}, {threads} threads");
        }
    }
}

#[test]
fn row_splitting_with_many_threads_writes_every_element_once() {
    // one panel, many rows: the rows are split across 8 threads
    let (m, k, n) = (101, 33, 40);
    let x = values(m * k, 1);
    let w: Vec<u16> = values(n * k, 2).iter().map(|&v| f32_to_bf16(v)).collect();
    let packed = PackedBf16::pack(&w, n, k);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(8)
        .build()
        .unwrap();
    let mut many = vec![1.0f32; m * n];
    pool.install(|| packed.matmul_acc_with(Kernel::F32, &x, m, &mut many));
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let mut single = vec![1.0f32; m * n];
    one.install(|| packed.matmul_acc_with(Kernel::F32, &x, m, &mut single));
    assert_eq!(many, single);
    // the tiles: rows split into whole blocks across the threads
    if amx::available() {
        let (m, k, n) = (301, 70, 150);
        let x = values(m * k, 3);
        let w: Vec<u16> = values(n * k, 4).iter().map(|&v| f32_to_bf16(v)).collect();
        let packed = PackedBf16::pack(&w, n, k);
        let mut many = vec![1.0f32; m * n];
        pool.install(|| packed.matmul_acc_with(Kernel::Amx, &x, m, &mut many));
        let mut single = vec![1.0f32; m * n];
        one.install(|| packed.matmul_acc_with(Kernel::Amx, &x, m, &mut single));
        assert_eq!(many, single);
        let mut dot = vec![1.0f32; m * n];
        packed.matmul_acc_with(Kernel::F32, &x, m, &mut dot);
        let worst = many
            .iter()
            .zip(&dot)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 0.1, "AMX vs widened f32: {worst}");
    } else {
        eprintln!("skipped: the AMX kernel across threads (no AMX tiles)");
    }
}
