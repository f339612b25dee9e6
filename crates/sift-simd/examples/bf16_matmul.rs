//! Times `PackedBf16::matmul_acc` on one shape: `cargo run --release -p sift-simd --example
//! bf16_matmul -- M K N [f32|dot|blocks]`; prints milliseconds and GFLOP/s (median of 5 after
//! 2 warm-ups). `blocks`: bfloat16 activations through `matmul_blocks`, each block of the
//! product handed to a sink that only reads it.
use sift_simd::bf16::{Kernel, PackedBf16, Rows, f32_to_bf16};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let dim = |i: usize, d: usize| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (m, k, n) = (dim(0, 262), dim(1, 4096), dim(2, 14336));
    let kernel = match a.get(3).map(String::as_str) {
        Some("f32") => Kernel::F32,
        Some("dot") => Kernel::DotBf16,
        _ => Kernel::best(),
    };
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let w: Vec<u16> = (0..n * k)
        .map(|i| f32_to_bf16(((i * 104_729) % 997) as f32 / 498.0 - 1.0))
        .collect();
    let packed = PackedBf16::pack(&w, n, k);
    drop(w);
    let blocks = a.get(3).map(String::as_str) == Some("blocks");
    let x16: Vec<u16> = x.iter().map(|&v| f32_to_bf16(v)).collect();
    let mut out = vec![0f32; m * n];
    // the sink only reads each block (the product alone is timed)
    let sink = |_first: usize, d: &mut [f32]| {
        std::hint::black_box(d.iter().step_by(64).sum::<f32>());
    };
    let mut times = Vec::new();
    for r in 0..7 {
        let t = std::time::Instant::now();
        if blocks {
            packed.matmul_blocks(Rows::Bf16(&x16), m, &sink);
        } else {
            packed.matmul_acc_with(kernel, &x, m, &mut out);
        }
        if r >= 2 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let t = times[times.len() / 2];
    println!(
        "{m} {k} {n} {}: {:.1} ms  {:.0} GFLOP/s",
        if blocks {
            "blocks".to_string()
        } else {
            format!("{kernel:?}")
        },
        t * 1e3,
        2.0 * (m * k * n) as f64 / t / 1e9
    );
}
