//! Tests of the element-wise kernels: each against double precision, on the dispatched path
//! (hand-written AVX-512 where the processor has it) and the portable loops.
use super::*;

/// Normal values with standard deviation `sd`, the same on every run (a fixed splitmix64
/// stream through Box-Muller): bounds checked on them cannot flake.
fn noise(n: usize, sd: f32, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut uniform = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (uniform().max(1e-300), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32 * sd
        })
        .collect()
}

#[test]
fn erf_is_accurate() {
    // reference values of erf
    for (x, want) in [
        (0.0f32, 0.0f64),
        (0.5, 0.520_499_877_8),
        (1.0, 0.842_700_792_9),
        (-1.5, -0.966_105_146_5),
        (3.0, 0.999_977_909_5),
    ] {
        assert!((erf(x) as f64 - want).abs() < 3e-7, "erf({x})");
    }
}

/// erf by its Maclaurin series in double precision: for |x| <= 4.5 the largest term is
/// below 1e9, so cancellation leaves it good to about 1e-7 absolute at worst (far better
/// nearer 0; checked against reference values in the test).
fn erf_series(x: f64) -> f64 {
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn gelu_lanes_match_erf_in_double_precision() {
    for (x, want) in [
        (0.5, 0.520_499_877_8),
        (1.0, 0.842_700_792_9),
        (3.0, 0.999_977_909_5),
    ] {
        assert!((erf_series(x) - want).abs() < 1e-9, "series erf({x})");
    }
    // every 1/1024 over [-6.4, 6.4] (erf's argument to 4.5), and far out where it is ±1
    let mut xs: Vec<f32> = (-6554..=6554).map(|i| i as f32 / 1024.0).collect();
    xs.extend([-1e4f32, -50.0, -9.0, 9.0, 50.0, 1e4]);
    let mut got = xs.clone();
    act_slice(Act::Gelu, &mut got);
    for (&x, &g) in xs.iter().zip(&got) {
        let z = x as f64 / std::f64::consts::SQRT_2;
        let erf = if z.abs() <= 4.5 {
            erf_series(z)
        } else {
            z.signum()
        };
        let want = 0.5 * x as f64 * (1.0 + erf);
        // erf within 5e-7, plus the f32 rounding of the result
        let tol = 0.5 * (x as f64).abs() * 5e-7 + want.abs() * 2e-7 + 1e-12;
        assert!(
            (g as f64 - want).abs() <= tol,
            "gelu({x}) = {g}, want {want}"
        );
    }
}

#[test]
fn exp_approx_is_accurate() {
    let mut worst = 0f64;
    for i in -87_000..88_000 {
        let x = i as f32 / 1000.0;
        let want = (x as f64).exp();
        let rel = ((exp_approx(x) as f64 - want) / want).abs();
        worst = worst.max(rel);
    }
    assert!(worst < 5e-7, "worst relative error {worst}");
    assert_eq!(exp_approx(-1000.0), exp_approx(-87.3));
    assert!(exp_approx(1000.0).is_finite());
}

/// `act(x)` in double precision.
fn act_f64(act: Act, x: f32) -> f64 {
    let x = x as f64;
    let sigmoid = |z: f64| 1.0 / (1.0 + (-z).exp());
    match act {
        Act::Gelu => {
            let z = x / std::f64::consts::SQRT_2;
            0.5 * x
                * (1.0
                    + if z.abs() <= 4.5 {
                        erf_series(z)
                    } else {
                        z.signum()
                    })
        }
        Act::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044_715 * x * x * x)).tanh())
        }
        Act::QuickGelu => x * sigmoid(1.702 * x),
        Act::Relu => x.max(0.0),
        Act::Silu => x * sigmoid(x),
    }
}

#[test]
fn activations_match_double_precision_on_both_paths() {
    let xs: Vec<f32> = (0..20_000)
        .map(|i| (i as f32 - 10_000.0) / 1500.0)
        .collect();
    for act in [
        Act::Gelu,
        Act::GeluTanh,
        Act::QuickGelu,
        Act::Relu,
        Act::Silu,
    ] {
        // the dispatched kernel (hand-written AVX-512 GELU where the processor has it) and
        // the portable loops; 19,999 values: a tail shorter than a vector
        for (path, run) in [
            ("dispatched", act_slice as fn(Act, &mut [f32])),
            ("loops", act_slice_loops),
        ] {
            let mut got = xs.clone();
            run(act, &mut got[..19_999]);
            for (&x, &g) in xs[..19_999].iter().zip(&got) {
                let diff = (g as f64 - act_f64(act, x)).abs();
                assert!(diff < 2e-6, "{act:?} ({path}) at {x}: diff {diff}");
            }
            assert_eq!(got[19_999], xs[19_999], "{act:?} ({path}): past the slice");
        }
    }
}

#[test]
fn rounded_softmax_is_within_a_bf16_step_of_the_softmax_rounded() {
    let scores = noise(203, 3.0, 41);
    for visible in [203, 150, 1, 17] {
        let mut want = scores.clone();
        softmax_row(&mut want, visible);
        // the dispatched kernel (hand-written AVX-512 where the processor has it) and the
        // portable loops
        for (path, run) in [
            (
                "dispatched",
                softmax_row_bf16 as fn(&mut [f32], usize, &mut [u16]),
            ),
            ("loops", softmax_row_bf16_loops),
        ] {
            let mut row = scores.clone();
            let mut got = vec![u16::MAX; scores.len()];
            run(&mut row, visible, &mut got);
            // its exponential is good to about 4e-6: at most one bfloat16 step apart
            for (j, (&g, &p)) in got.iter().zip(&want).enumerate() {
                let w = crate::bf16::f32_to_bf16(p);
                assert!(
                    g.abs_diff(w) <= 1,
                    "{path}: visible {visible}, value {j}: {g:#x} vs {w:#x}"
                );
                assert_eq!(
                    g == 0,
                    w == 0,
                    "{path}: visible {visible}, value {j}: zeros stay zeros"
                );
            }
        }
    }
}
