//! Times AMX tile loads and products in the core's L1 cache: `cargo run --release -p
//! sift-simd --example amx_tiles`. Prints nanoseconds per 16-row tile load with every row on
//! a 64-byte boundary and with every row straddling two cache lines, per tile store likewise,
//! and the GFLOP/s of the 2 x 2 tile block the products use (two activation tiles, two weight
//! tiles, four accumulators) with aligned operands. Why every buffer the tiles read or write
//! starts on a cache line. Prints a line and exits where the processor has no AMX tiles.
fn main() {
    if !sift_simd::bf16::amx::available() {
        println!("no AMX tiles here (or Linux does not grant them): nothing to time");
        return;
    }
    #[cfg(target_arch = "x86_64")]
    probe::run();
}

#[cfg(target_arch = "x86_64")]
mod probe {
    use std::arch::asm;
    use std::time::Instant;

    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct Line([u8; 64]);

    const N: usize = 1_000_000;

    /// ns per iteration of `f` over N iterations.
    fn time(f: impl Fn()) -> f64 {
        let t = Instant::now();
        for _ in 0..N {
            f();
        }
        t.elapsed().as_secs_f64() / N as f64 * 1e9
    }

    pub fn run() {
        let buf = vec![Line([0x3f; 64]); 1024];
        let mut out = vec![Line([0; 64]); 1024];
        // SAFETY: `available` granted the tiles; every load reads 16 rows `stride` apart
        // (at most 1,536 bytes) from inside `buf` (64 KiB) and every store writes inside
        // `out`; all offsets below stay under 32 KiB + 16 x 1,536 bytes.
        unsafe {
            // the products' configuration: eight tiles of 16 rows x 64 bytes
            sift_simd::bf16::amx::configure();
            let p = buf.as_ptr().cast::<u8>();
            let o = out.as_mut_ptr().cast::<u8>();
            for stride in [64usize, 256, 1536] {
                for (what, skew) in [("on cache lines", 0usize), ("across cache lines", 16)] {
                    let load = time(|| {
                        asm!(
                            "tileloadd tmm4, [{a} + {s}*1]",
                            "tileloadd tmm5, [{b} + {s}*1]",
                            "tileloadd tmm6, [{c} + {s}*1]",
                            "tileloadd tmm7, [{d} + {s}*1]",
                            a = in(reg) p.add(skew),
                            b = in(reg) p.add(skew + 64),
                            c = in(reg) p.add(skew + 128),
                            d = in(reg) p.add(skew + 192),
                            s = in(reg) stride,
                            options(nostack, readonly)
                        )
                    }) / 4.0;
                    let store = time(|| {
                        asm!(
                            "tilestored [{a} + {s}*1], tmm4",
                            a = in(reg) o.add(skew),
                            s = in(reg) stride,
                            options(nostack)
                        )
                    });
                    println!(
                        "rows {stride:>4} bytes apart, {what:<18}: {load:6.2} ns a tile load, {store:6.2} ns a tile store"
                    );
                }
            }
            let step = time(|| {
                asm!(
                    "tileloadd tmm4, [{a} + {s}*1]",
                    "tileloadd tmm6, [{b} + {s}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tileloadd tmm7, [{c} + {s}*1]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tileloadd tmm5, [{d} + {s}*1]",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a = in(reg) p,
                    b = in(reg) p.add(64),
                    c = in(reg) p.add(128),
                    d = in(reg) p.add(192),
                    s = in(reg) 256usize,
                    options(nostack, readonly)
                )
            });
            // four products of 16 x 16 outputs over 32 inputs, two FLOPs each
            println!(
                "2 x 2 block step, aligned operands in L1: {:.0} GFLOP/s on one core",
                4.0 * 16.0 * 16.0 * 32.0 * 2.0 / step
            );
            sift_simd::bf16::amx::release();
        }
    }
}
