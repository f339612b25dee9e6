//! Tests of the layers and kernels across their paths.
use crate::layers::act::*;
use crate::layers::attention::flash::*;
use crate::layers::attention::padded::*;
use crate::layers::attention::*;
use crate::layers::linear::*;
use candle_core::{DType, Tensor};
use candle_nn::Linear;
use sift_simd::elementwise::act_slice;

/// [`Attention`] run once: bidirectional, or causal when `causal`.
fn attention(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
) -> candle_core::Result<Tensor> {
    attention_windowed(qkv, segments, heads, head_dim, causal, None)
}

/// [`attention`] where, with `window` (causal only), a token sees only the latest positions
/// ([`Attention::windowed`]).
fn attention_windowed(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    causal: bool,
    window: Option<usize>,
) -> candle_core::Result<Tensor> {
    // the field itself, not `windowed` (which makes it causal): a window without causal
    // attention must be refused
    let mut a = Attention::new(segments, heads, head_dim).causal(causal);
    a.window = window;
    a.run(qkv)
}

/// [`Attention::biased`] run once.
fn attention_biased(
    qkv: &Tensor,
    segments: &[Segment],
    heads: usize,
    head_dim: usize,
    bias: ScoreBias,
) -> candle_core::Result<Tensor> {
    Attention::new(segments, heads, head_dim)
        .biased(bias)
        .run(qkv)
}

/// Normal noise `(rows, cols)` with standard deviation `sd`, the same on every run (a
/// fixed splitmix64 stream through Box-Muller): bounds checked on it cannot flake.
fn noise(rows: usize, cols: usize, sd: f32, seed: u64) -> Tensor {
    let mut state = seed;
    let mut uniform = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let values: Vec<f32> = (0..rows * cols)
        .map(|_| {
            let (u, v) = (uniform().max(1e-300), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32 * sd
        })
        .collect();
    Tensor::from_vec(values, (rows, cols), &candle_core::Device::Cpu).unwrap()
}

/// The largest absolute difference between two tensors of one shape, in f32.
fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let f32 = |x: &Tensor| x.to_dtype(DType::F32).unwrap();
    (f32(a) - f32(b))
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap()
}

#[test]
fn overlapping_unordered_or_overflowing_segments_are_refused() {
    let seg = |start, len| Segment {
        start,
        len,
        keys: len,
    };
    let qkv = Tensor::zeros((10, 3 * 4), DType::F32, &candle_core::Device::Cpu).unwrap();
    let run = |segs: &[Segment]| attention(&qkv, segs, 2, 2, false);
    assert!(run(&[seg(0, 4), seg(4, 6)]).is_ok());
    assert!(run(&[seg(0, 5), seg(4, 6)]).is_err(), "overlap");
    assert!(run(&[seg(4, 6), seg(0, 4)]).is_err(), "order");
    assert!(run(&[seg(6, 6)]).is_err(), "beyond the rows");
    assert!(run(&[seg(usize::MAX - 1, 3)]).is_err(), "overflow");
}

/// `act(x)` through candle, one value.
fn act_f32_reference(act: Act, x: f32) -> f32 {
    let t = Tensor::new(&[x], &candle_core::Device::Cpu).unwrap();
    apply_act(act, &t).unwrap().to_vec1::<f32>().unwrap()[0]
}

#[test]
fn parallel_activations_match_candle() {
    let dev = candle_core::Device::Cpu;
    let xs: Vec<f32> = (0..20_000)
        .map(|i| (i as f32 - 10_000.0) / 1500.0)
        .collect();
    let x = Tensor::from_vec(xs.clone(), 20_000, &dev).unwrap();
    for act in [
        Act::Gelu,
        Act::GeluTanh,
        Act::QuickGelu,
        Act::Relu,
        Act::Silu,
    ] {
        // the dispatched kernel (hand-written AVX-512 GELU where the processor has it; the
        // portable loops are held to double precision in sift-simd); 19,999 values: a tail
        // shorter than a vector
        let mut fast = xs.clone();
        act_slice(act, &mut fast[..19_999]);
        fast[19_999] = act_f32_reference(act, xs[19_999]);
        let got = Tensor::from_vec(fast, 20_000, &dev).unwrap();
        let diff = (got - apply_act(act, &x).unwrap())
            .unwrap()
            .abs()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(diff < 2e-6, "{act:?}: max diff {diff}");
    }
}

#[test]
fn fused_linear_matches_matmul() {
    let dev = candle_core::Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (37, 24), &dev).unwrap();
    let w = Tensor::randn(0f32, 1.0, (19, 24), &dev).unwrap();
    let b = Tensor::randn(0f32, 1.0, 19, &dev).unwrap();
    let r = Tensor::randn(0f32, 1.0, (37, 19), &dev).unwrap();
    let l = Linear::new(w.clone(), Some(b.clone()));
    let plain = x
        .matmul(&w.t().unwrap())
        .unwrap()
        .broadcast_add(&b)
        .unwrap();
    assert!(max_diff(&linear(&l, &x, None).unwrap(), &plain) < 1e-5);
    let with_res = (&plain + &r).unwrap();
    assert!(max_diff(&linear(&l, &x, Some(&r)).unwrap(), &with_res) < 1e-5);
    let act = linear_act(&l, &x, None, Some(Act::Gelu)).unwrap();
    assert!(max_diff(&act, &plain.gelu_erf().unwrap()) < 1e-5);
    let no_bias = Linear::new(w.clone(), None);
    let plain = x.matmul(&w.t().unwrap()).unwrap();
    assert!(max_diff(&linear(&no_bias, &x, None).unwrap(), &plain) < 1e-5);
}

#[test]
fn packed_attention_matches_the_tensor_version() {
    let dev = candle_core::Device::Cpu;
    let (heads, d) = (3, 4);
    let qkv = Tensor::randn(0f32, 1.0, (17, 3 * heads * d), &dev).unwrap();
    let mut segs = Segment::packed([5, 1, 11]);
    segs[2].keys = 7;
    for causal in [false, true] {
        let fast = attention(&qkv, &segs, heads, d, causal).unwrap();
        // the portable path, forced by going through f64
        let slow = attention(&qkv.to_dtype(DType::F64).unwrap(), &segs, heads, d, causal)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let diff = max_diff(&fast, &slow);
        assert!(diff < 1e-5, "causal {causal}: {diff}");
    }
}

#[test]
fn padded_buckets_match_the_cpu_kernel_in_f32_and_bf16() {
    // lengths from 1 to 90: several buckets; gaps between segments; masked keys
    let (heads, d) = (2, 8);
    let lens = [3usize, 90, 1, 17, 18, 40, 41, 5, 64, 2];
    let mut segs = Vec::new();
    let mut start = 2;
    for (i, &len) in lens.iter().enumerate() {
        let keys = if i % 3 == 0 { len.div_ceil(2) } else { len };
        segs.push(Segment { start, len, keys });
        start += len + i % 2;
    }
    let tokens = start + 3;
    assert!(buckets(&segs, heads).len() > 2, "several buckets");
    // scores of a few units, as with the models' scaled queries
    let qkv = noise(tokens, 3 * heads * d, 0.6, 1);
    for (causal, window) in [(false, None), (true, None), (true, Some(7))] {
        let fast = attention_windowed(&qkv, &segs, heads, d, causal, window).unwrap();
        let padded =
            attention_padded(&qkv, &segs, heads, d, causal, window, ScoreBias::default()).unwrap();
        assert_eq!(padded.dims(), fast.dims());
        let diff = |a: &Tensor| max_diff(a, &fast);
        assert!(
            diff(&padded) < 1e-5,
            "f32, causal {causal}: {}",
            diff(&padded)
        );
        // bf16 against f32 on the same (rounded) inputs: what is left is bf16's rounding
        // of scores, probabilities and products (8 bits of mantissa)
        let rounded = qkv.to_dtype(DType::BF16).unwrap();
        let want = attention_windowed(
            &rounded.to_dtype(DType::F32).unwrap(),
            &segs,
            heads,
            d,
            causal,
            window,
        )
        .unwrap();
        let bf16 = attention_padded(
            &rounded,
            &segs,
            heads,
            d,
            causal,
            window,
            ScoreBias::default(),
        )
        .unwrap();
        assert_eq!(bf16.dtype(), DType::BF16);
        let err = max_diff(&bf16, &want);
        eprintln!("bf16, causal {causal}: {err}");
        assert!(err < 0.02, "bf16, causal {causal}: {err}");
    }
}

#[test]
fn rounded_outputs_are_the_values_the_next_layer_would_round() {
    // a packed layer's bfloat16 output (bias and GELU in f32, then one rounding) equals its
    // f32 output rounded, and the next packed layer reads either dtype to the same result;
    // few rows (the product written whole, then rounded) and many (rounded from the tasks'
    // scratch blocks)
    // exact GELU and no activation (bias, activation and rounding in one pass), the tanh
    // GELU (the passes one after another)
    for rows in [150, 1000] {
        for act in [Some(Act::Gelu), None, Some(Act::GeluTanh)] {
            rounded_output_case(rows, act);
        }
    }
}

fn rounded_output_case(rows: usize, act: Option<Act>) {
    let (inp, out) = (64, 96);
    let w = noise(out, inp, 0.2, 31);
    let b = noise(1, out, 0.1, 32).flatten_all().unwrap();
    let x = noise(rows, inp, 1.0, 33);
    let first = Proj::Packed(Box::new(PackedLinear::new(&w, Some(&b), None).unwrap()));
    let next = PackedLinear::new(&noise(inp, out, 0.2, 34), None, None).unwrap();
    let f32_out = first.forward(&x, None, act).unwrap();
    let rounded = first.forward_rounded(&x, act).unwrap();
    if !first.rounds_output() {
        eprintln!("skipped: rounded outputs (no AMX tiles: the output stays f32)");
        assert_eq!(max_diff(&rounded, &f32_out), 0.0);
        return;
    }
    assert_eq!(rounded.dtype(), DType::BF16);
    let want = f32_out.to_dtype(DType::BF16).unwrap();
    assert_eq!(max_diff(&rounded, &want), 0.0);
    let from_f32 = next.forward(&f32_out, Some(&x), None).unwrap();
    let from_bf16 = next.forward(&rounded, Some(&x), None).unwrap();
    assert_eq!(from_bf16.dtype(), DType::F32);
    assert_eq!(max_diff(&from_bf16, &from_f32), 0.0);
}

#[test]
fn bf16_tile_products_match_the_f32_kernel_within_bf16_rounding() {
    if !sift_simd::bf16::amx::available() {
        eprintln!("skipped: no AMX tiles on this processor (the bf16 flag changes nothing)");
        return;
    }
    // head sizes below a tile step (8), at one (32) and a panel (64); gaps, masked keys,
    // a sequence longer than a score block (600: its keys split into several panels)
    let lens = [3usize, 90, 1, 17, 600, 41, 64];
    for (heads, d) in [(2, 8), (3, 32), (2, 64)] {
        let mut segs = Vec::new();
        let mut start = 1;
        for (i, &len) in lens.iter().enumerate() {
            let keys = if i % 3 == 0 { len.div_ceil(2) } else { len };
            segs.push(Segment { start, len, keys });
            start += len + i % 2;
        }
        let tokens = start + 2;
        let qkv = noise(tokens, 3 * heads * d, 0.6, d as u64);
        let slopes: Vec<f32> = (0..heads).map(|h| 0.1 / (h + 1) as f32).collect();
        let keys: Vec<f32> = (0..tokens)
            .map(|t| if t % 7 == 0 { -10000.0 } else { 0.0 })
            .collect();
        let biased = ScoreBias {
            alibi: Some(&slopes),
            keys: Some(&keys),
        };
        for (causal, window, bias) in [
            (false, None, ScoreBias::default()),
            (true, None, ScoreBias::default()),
            (true, Some(9), ScoreBias::default()),
            (false, None, biased),
        ] {
            let run_on = |segs: &[Segment], x: &Tensor, bf16: bool, rounded: bool| {
                let mut a = Attention::new(segs, heads, d)
                    .causal(causal)
                    .biased(bias)
                    .bf16(bf16)
                    .rounded_output(rounded);
                a.window = window;
                a.run(x).unwrap()
            };
            let run = |x: &Tensor, bf16: bool| run_on(&segs, x, bf16, false);
            let tiles = run(&qkv, true);
            // the context rounded by the op is the f32 context rounded, gaps between the
            // segments (zero) included; and so where the segments cover every row
            let packed = Segment::packed(lens);
            let whole = qkv.narrow(0, 0, lens.iter().sum()).unwrap();
            let mut cases = vec![(&segs[..], &qkv, tiles.clone())];
            if bias.keys.is_none() {
                cases.push((&packed[..], &whole, run_on(&packed, &whole, true, false)));
            }
            for (segs, x, f32_out) in cases {
                let rounded = run_on(segs, x, true, true);
                assert_eq!(rounded.dtype(), DType::BF16);
                let want = f32_out.to_dtype(DType::BF16).unwrap();
                assert_eq!(max_diff(&rounded, &want), 0.0, "d {d}: rounded context");
            }
            // the f32 kernel on the rounded inputs: what is left is the probabilities'
            // rounding (8 bits of mantissa)
            let rounded = qkv
                .to_dtype(DType::BF16)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap();
            let err = max_diff(&tiles, &run(&rounded, false));
            assert!(
                err < 0.01,
                "d {d}, causal {causal}, window {window:?}: {err}"
            );
            let err = max_diff(&tiles, &run(&qkv, false));
            assert!(
                err < 0.03,
                "d {d}, causal {causal}, window {window:?}: {err} vs f32"
            );
            assert!(err > 0.0, "the tiles ran");
        }
    }
}

#[test]
fn score_biases_match_a_plain_softmax_on_every_path() {
    // ALiBi and per-key biases (-10000 on some keys, as on padding ids) over ragged
    // sequences: the fused CPU kernel, the padded batches (f32 and bf16) and the portable
    // path against softmax(q k^T + bias) v written out in f64
    let dev = candle_core::Device::Cpu;
    let (heads, d) = (3, 8);
    let lens = [4usize, 1, 23, 9, 24];
    let segs = Segment::packed(lens);
    let tokens: usize = lens.iter().sum();
    let slopes = [0.5f32, 0.25, 0.0625];
    let keys: Vec<f32> = (0..tokens)
        .map(|r| {
            if r % 5 == 3 {
                -10000.0
            } else {
                0.01 * r as f32
            }
        })
        .collect();
    let qkv = noise(tokens, 3 * heads * d, 0.6, 2);
    let x: Vec<Vec<f32>> = qkv.to_vec2().unwrap();
    let h = heads * d;
    let mut want = vec![0f32; tokens * h];
    for s in &segs {
        for hd in 0..heads {
            for i in 0..s.len {
                let q = &x[s.start + i][hd * d..(hd + 1) * d];
                let sc: Vec<f64> = (0..s.len)
                    .map(|j| {
                        let k = &x[s.start + j][h + hd * d..h + (hd + 1) * d];
                        let dot: f64 = q.iter().zip(k).map(|(a, b)| (a * b) as f64).sum();
                        dot - (slopes[hd] as f64) * (i as f64 - j as f64).abs()
                            + keys[s.start + j] as f64
                    })
                    .collect();
                let max = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for c in 0..d {
                    let v: f64 = (0..s.len)
                        .map(|j| e[j] / sum * x[s.start + j][2 * h + hd * d + c] as f64)
                        .sum();
                    want[(s.start + i) * h + hd * d + c] = v as f32;
                }
            }
        }
    }
    let want = Tensor::from_vec(want, (tokens, h), &dev).unwrap();
    let bias = ScoreBias {
        alibi: Some(&slopes),
        keys: Some(&keys),
    };
    let err = |got: &Tensor| max_diff(got, &want);
    let fused = attention_biased(&qkv, &segs, heads, d, bias).unwrap();
    assert!(err(&fused) < 1e-5, "fused: {}", err(&fused));
    let padded = attention_padded(&qkv, &segs, heads, d, false, None, bias).unwrap();
    assert!(err(&padded) < 1e-5, "padded: {}", err(&padded));
    let portable =
        attention_biased(&qkv.to_dtype(DType::F64).unwrap(), &segs, heads, d, bias).unwrap();
    assert!(err(&portable) < 1e-5, "portable: {}", err(&portable));
    let bf16 = attention_padded(
        &qkv.to_dtype(DType::BF16).unwrap(),
        &segs,
        heads,
        d,
        false,
        None,
        bias,
    )
    .unwrap();
    eprintln!("biased bf16: {}", err(&bf16));
    assert!(err(&bf16) < 0.03, "bf16: {}", err(&bf16));
    // without biases the same entry is plain attention; mismatched biases are errors
    let plain = attention_biased(&qkv, &segs, heads, d, ScoreBias::default()).unwrap();
    let unbiased = attention(&qkv, &segs, heads, d, false).unwrap();
    assert_eq!(max_diff(&plain, &unbiased), 0.0);
    let short = ScoreBias {
        alibi: Some(&slopes[..2]),
        keys: None,
    };
    assert!(attention_biased(&qkv, &segs, heads, d, short).is_err());
    let few_keys = ScoreBias {
        alibi: None,
        keys: Some(&keys[1..]),
    };
    assert!(attention_biased(&qkv, &segs, heads, d, few_keys).is_err());
}

#[test]
fn equal_sequences_run_in_place_and_others_are_gathered() {
    // images' patches: sequences of one length, one after the other: the padded path takes
    // their rows as they lie (no gathers, no reordering) and gives the fused kernel's context
    let (heads, d) = (4, 8);
    let qkv = noise(5 * 9, 3 * heads * d, 0.6, 3);
    let segs = Segment::packed([9; 5]);
    let plan = PaddedPlan::new(&segs, heads, false, None, ScoreBias::default(), &qkv).unwrap();
    assert_eq!(plan.buckets.len(), 1);
    assert!(matches!(plan.buckets[0].gather, Gather::Rows { start: 0 }));
    assert!(plan.buckets[0].keep.is_none() && plan.buckets[0].masks.is_empty());
    assert!(plan.order.is_none());
    let want = attention(&qkv, &segs, heads, d, false).unwrap();
    let got = plan.run(&qkv, heads, d).unwrap();
    assert!(max_diff(&got, &want) < 1e-5, "{}", max_diff(&got, &want));
    // the same lengths with a row between two of them, or a masked key: gathered
    let mut gap = Segment::packed([9; 5]);
    for s in &mut gap[3..] {
        s.start += 1;
    }
    let wide = noise(5 * 9 + 1, 3 * heads * d, 0.6, 4);
    let mut masked = segs.clone();
    masked[2].keys = 4;
    for (segs, qkv) in [(&gap, &wide), (&masked, &qkv)] {
        let plan = PaddedPlan::new(segs, heads, false, None, ScoreBias::default(), qkv).unwrap();
        assert!(matches!(plan.buckets[0].gather, Gather::Index { .. }));
        let want = attention(qkv, segs, heads, d, false).unwrap();
        let got = plan.run(qkv, heads, d).unwrap();
        assert!(max_diff(&got, &want) < 1e-5, "{}", max_diff(&got, &want));
    }
    // a row outside every segment gets a zero context
    let gap_row = Tensor::zeros((1, heads * d), DType::F32, &candle_core::Device::Cpu).unwrap();
    let got = attention_padded(&wide, &gap, heads, d, false, None, ScoreBias::default()).unwrap();
    assert_eq!(max_diff(&got.narrow(0, 27, 1).unwrap(), &gap_row), 0.0);
    // no tokens at all
    let empty = Tensor::zeros((0, 3 * heads * d), DType::F32, &candle_core::Device::Cpu).unwrap();
    let got = attention_padded(&empty, &[], heads, d, false, None, ScoreBias::default());
    assert_eq!(got.unwrap().dims(), &[0, heads * d]);
}

/// flash-attn's variable-length forward as its documentation states it ([`FlashLayout`]'s
/// "semantics relied on"), in f64 on the CPU: sequence `b` has the query rows
/// `cu_q[b]..cu_q[b + 1]` of `qkv` and the key / value rows `cu_k[b]..cu_k[b + 1]` of the
/// packed keys (`kv_rows` of `qkv`, or all of it); softmax scale 1.
fn flash_varlen_model(
    qkv: &Tensor,
    l: &FlashLayout,
    heads: usize,
    d: usize,
    slopes: Option<&[f32]>,
) -> Tensor {
    let rows: Vec<Vec<f32>> = qkv.to_dtype(DType::F32).unwrap().to_vec2().unwrap();
    let kv: Vec<&Vec<f32>> = match &l.kv_rows {
        Some(r) => r.iter().map(|&r| &rows[r as usize]).collect(),
        None => rows.iter().collect(),
    };
    let h = heads * d;
    let mut out = vec![vec![0f32; h]; rows.len()];
    for b in 0..l.cu_q.len() - 1 {
        let (q0, q1) = (l.cu_q[b] as usize, l.cu_q[b + 1] as usize);
        let (k0, k1) = (l.cu_k[b] as usize, l.cu_k[b + 1] as usize);
        let (lq, lk) = ((q1 - q0) as i64, (k1 - k0) as i64);
        for i in 0..lq {
            let shift = i + lk - lq;
            let visible = |j: i64| {
                l.left.is_none_or(|w| j >= shift - w as i64)
                    && l.right.is_none_or(|w| j <= shift + w as i64)
            };
            for hd in 0..heads {
                let q = &rows[q0 + i as usize][hd * d..(hd + 1) * d];
                let scores: Vec<(usize, f64)> = (0..lk)
                    .filter(|&j| visible(j))
                    .map(|j| {
                        let k = &kv[k0 + j as usize][h + hd * d..h + (hd + 1) * d];
                        let dot: f64 = q.iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum();
                        let alibi =
                            slopes.map_or(0.0, |s| -(s[hd] as f64) * (shift - j).abs() as f64);
                        (j as usize, dot + alibi)
                    })
                    .collect();
                let top = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = scores.iter().map(|s| (s.1 - top).exp()).sum();
                for (j, sc) in &scores {
                    let w = (sc - top).exp() / total;
                    let v = &kv[k0 + j][2 * h + hd * d..2 * h + (hd + 1) * d];
                    for (o, x) in out[q0 + i as usize][hd * d..(hd + 1) * d].iter_mut().zip(v) {
                        *o += (w * *x as f64) as f32;
                    }
                }
            }
        }
    }
    Tensor::new(out, &candle_core::Device::Cpu).unwrap()
}

#[test]
fn flash_layout_gives_the_padded_paths_context() {
    // what the flash path hands flash attention (offsets, key rows, window), run through
    // a model of flash attention's documented masking and ALiBi, gives the context of the
    // padded path, the one checked against the published models
    let (heads, d) = (2, 8);
    let lens = [5, 9, 1, 12, 3];
    let tokens: usize = lens.iter().sum();
    let packed = Segment::packed(lens);
    let mut masked = packed.clone();
    masked[1].keys = 4;
    masked[3].keys = 7;
    let slopes = [0.5f32, 0.125];
    let alibi = ScoreBias {
        alibi: Some(&slopes),
        keys: None,
    };
    let zeros = vec![0f32; tokens];
    let alibi_zero_keys = ScoreBias {
        alibi: Some(&slopes),
        keys: Some(&zeros),
    };
    let none = ScoreBias::default();
    let qkv = noise(tokens, 3 * heads * d, 0.7, 31);
    for (name, segs, causal, window, bias) in [
        ("bidirectional", &packed, false, None, none),
        ("masked keys", &masked, false, None, none),
        ("causal", &packed, true, None, none),
        ("sliding window", &packed, true, Some(3), none),
        ("ALiBi", &packed, false, None, alibi),
        (
            "ALiBi, zero key biases",
            &packed,
            false,
            None,
            alibi_zero_keys,
        ),
    ] {
        let layout = FlashLayout::new(segs, tokens, d, causal, window, bias)
            .unwrap_or_else(|| panic!("{name}: no flash layout"));
        let got = flash_varlen_model(&qkv, &layout, heads, d, bias.alibi);
        let want = attention_padded(&qkv, segs, heads, d, causal, window, bias).unwrap();
        let diff = max_diff(&got, &want);
        assert!(diff < 1e-5, "{name}: max diff {diff}");
    }
    // the layout itself, for the sequences with masked keys
    let l = FlashLayout::new(&masked, tokens, d, false, None, none).unwrap();
    assert_eq!(l.cu_q, [0, 5, 14, 15, 27, 30]);
    assert_eq!(l.cu_k, [0, 5, 9, 10, 17, 20]);
    let rows: Vec<u32> = [0..5, 5..9, 14..15, 15..22, 27..30]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(l.kv_rows.as_deref(), Some(&rows[..]));
    assert_eq!((l.max_q, l.max_k, l.left, l.right), (12, 7, None, None));
    // where flash attention cannot give Sift's result, the padded path runs instead
    let mut gap = packed.clone();
    for s in &mut gap[2..] {
        s.start += 1;
    }
    let mut empty = Segment::packed([5, 0, 9]);
    empty[1].keys = 0;
    let key_bias: Vec<f32> = (0..tokens)
        .map(|r| if r == 3 { -10000.0 } else { 0.0 })
        .collect();
    let keyed = ScoreBias {
        alibi: None,
        keys: Some(&key_bias),
    };
    for (name, segs, tokens, d, causal, bias) in [
        ("a row between sequences", &gap, tokens + 1, d, false, none),
        ("a row after the last", &packed, tokens + 1, d, false, none),
        ("an empty sequence", &empty, 14, d, false, none),
        ("key biases", &packed, tokens, d, false, keyed),
        ("causal with masked keys", &masked, tokens, d, true, none),
        ("ALiBi with masked keys", &masked, tokens, d, false, alibi),
        ("a head size of 12", &packed, tokens, 12, false, none),
        ("a head size of 520", &packed, tokens, 520, false, none),
    ] {
        assert!(
            FlashLayout::new(segs, tokens, d, causal, None, bias).is_none(),
            "{name}"
        );
    }
}

#[test]
fn one_plan_serves_every_layer() {
    // the padded path's preparation, made on the first run, gives every later layer (other
    // inputs, same segments) what a fresh run gives it; another dtype gets its own
    let (heads, d) = (2, 8);
    let mut segs = Segment::packed([7, 30, 2, 31, 12]);
    segs[1].keys = 20;
    for s in &mut segs[3..] {
        s.start += 2;
    }
    let tokens = segs[4].start + segs[4].len + 1;
    let slopes = [0.5f32, 0.125];
    let keys: Vec<f32> = (0..tokens)
        .map(|r| if r % 7 == 1 { -10000.0 } else { 0.0 })
        .collect();
    let bias = ScoreBias {
        alibi: Some(&slopes),
        keys: Some(&keys),
    };
    let windowed = Attention::new(&segs, heads, d).windowed(Some(5));
    let biased = Attention::new(&segs, heads, d).biased(bias);
    for (layer, dtype) in [
        (0, DType::BF16),
        (1, DType::BF16),
        (2, DType::F64),
        (3, DType::BF16),
    ] {
        let qkv = noise(tokens, 3 * heads * d, 0.6, 10 + layer)
            .to_dtype(dtype)
            .unwrap();
        let fresh =
            attention_padded(&qkv, &segs, heads, d, true, Some(5), ScoreBias::default()).unwrap();
        assert_eq!(
            max_diff(&windowed.run(&qkv).unwrap(), &fresh),
            0.0,
            "layer {layer}"
        );
        let fresh = attention_padded(&qkv, &segs, heads, d, false, None, bias).unwrap();
        assert_eq!(
            max_diff(&biased.run(&qkv).unwrap(), &fresh),
            0.0,
            "layer {layer}"
        );
    }
    // a run with the wrong number of rows is refused, not served from the plan
    let short = noise(tokens - 2, 3 * heads * d, 0.6, 20)
        .to_dtype(DType::BF16)
        .unwrap();
    assert!(windowed.run(&short).is_err());
}

#[test]
fn buckets_keep_padding_and_score_memory_bounded() {
    let segs = Segment::packed([10, 11, 12, 100, 101, 1000]);
    let groups = buckets(&segs, 4);
    assert_eq!(groups, vec![vec![0, 1, 2], vec![3, 4], vec![5]]);
    // a long sequence is never batched past the score budget
    let long = Segment::packed([4000, 4000, 4000]);
    let groups = buckets(&long, 16);
    assert_eq!(groups, vec![vec![0], vec![1], vec![2]]);
    // every segment lands in exactly one bucket; empty ones in none
    let mixed = Segment::packed([0, 5, 0, 7]);
    let mut all: Vec<usize> = buckets(&mixed, 1).concat();
    all.sort();
    assert_eq!(all, vec![1, 3]);
}

#[test]
fn causal_attention_ignores_later_tokens() {
    let dev = candle_core::Device::Cpu;
    // one head of size 2, a sequence of 3 tokens; token 0 must see only itself
    let qkv = Tensor::from_vec(
        vec![
            1f32, 0., 1., 0., 5., 6., //
            0., 1., 0., 1., 7., 8., //
            1., 1., 1., 1., 9., 10.,
        ],
        (3, 6),
        &dev,
    )
    .unwrap();
    let seg = Segment::packed([3]);
    let ctx = attention(&qkv, &seg, 1, 2, true).unwrap();
    let row0: Vec<f32> = ctx.get(0).unwrap().to_vec1().unwrap();
    assert_eq!(row0, vec![5., 6.]);
    let full = attention(&qkv, &seg, 1, 2, false).unwrap();
    let row0: Vec<f32> = full.get(0).unwrap().to_vec1().unwrap();
    assert!(row0[0] > 5.5);
}

#[test]
fn blocked_attention_matches_the_generic_path() {
    // sequences long enough for several row blocks; one with masked trailing keys
    let (heads, d) = (2, 8);
    let segments = [
        Segment {
            start: 0,
            len: 700,
            keys: 700,
        },
        Segment {
            start: 700,
            len: 800,
            keys: 600,
        },
    ];
    let tokens = 1500;
    let vals: Vec<f32> = (0..tokens * 3 * heads * d)
        .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 0.8)
        .collect();
    let dev = candle_core::Device::Cpu;
    let qkv = Tensor::from_vec(vals, (tokens, 3 * heads * d), &dev).unwrap();
    // a sliding window shorter than a block and one longer than the sequences
    for (causal, window) in [
        (false, None),
        (true, None),
        (true, Some(100)),
        (true, Some(5000)),
    ] {
        let fast = attention_windowed(&qkv, &segments, heads, d, causal, window).unwrap();
        // f64 takes the generic (candle ops) path
        let slow = attention_windowed(
            &qkv.to_dtype(DType::F64).unwrap(),
            &segments,
            heads,
            d,
            causal,
            window,
        )
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
        let diff = (fast - slow)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(
            diff < 1e-5,
            "causal {causal}, window {window:?}: max diff {diff}"
        );
    }
    let windowed = attention_windowed(&qkv, &segments, heads, d, true, Some(100)).unwrap();
    let full = attention(&qkv, &segments, heads, d, true).unwrap();
    let moved = (windowed - full).unwrap().abs().unwrap().max_all().unwrap();
    assert!(
        moved.to_scalar::<f32>().unwrap() > 1e-3,
        "the window changes the context"
    );
    assert!(attention_windowed(&qkv, &segments, heads, d, false, Some(4)).is_err());
}

#[test]
fn layer_norm_rows_match_candle() {
    use crate::layers::norm::Norm;
    use candle_core::Module;
    // 37 features: a tail shorter than a vector; values far from zero (a mean to remove)
    for width in [37usize, 384] {
        let x = (noise(53, width, 2.0, 61) + 3.0).unwrap();
        let w = (noise(1, width, 0.5, 62).flatten_all().unwrap() + 1.0).unwrap();
        let b = noise(1, width, 0.1, 63).flatten_all().unwrap();
        let ln = candle_nn::LayerNorm::new(w, b, 1e-12);
        let want = ln.forward(&x).unwrap();
        let norm = Norm::new(ln).unwrap();
        let got = norm.forward(&x).unwrap();
        let err = max_diff(&got, &want);
        assert!(err < 2e-5, "width {width}: {err}");
    }
}

#[test]
fn normalised_packed_outputs_equal_the_product_then_the_norm() {
    use crate::layers::norm::Norm;
    // few rows (the product written whole, then normalised) and many (normalised in the
    // tasks' scratch blocks); 96 outputs: a panel and a half
    for rows in [150, 1000] {
        let (inp, out) = (64, 96);
        let w = noise(out, inp, 0.2, 71);
        let b = noise(1, out, 0.1, 72).flatten_all().unwrap();
        let x = noise(rows, inp, 1.0, 73);
        let residual = noise(rows, out, 1.0, 74);
        let ln = candle_nn::LayerNorm::new(
            (noise(1, out, 0.3, 75).flatten_all().unwrap() + 1.0).unwrap(),
            noise(1, out, 0.1, 76).flatten_all().unwrap(),
            1e-12,
        );
        let norm = Norm::new(ln).unwrap();
        let proj = Proj::Packed(Box::new(PackedLinear::new(&w, Some(&b), None).unwrap()));
        let want = norm
            .forward(&proj.forward(&x, Some(&residual), None).unwrap())
            .unwrap();
        let (got, rounded) = proj.forward_norm(&x, &residual, &norm).unwrap();
        assert_eq!(max_diff(&got, &want), 0.0, "{rows} rows");
        match rounded {
            Some(r) => {
                assert!(proj.rounds_output());
                assert_eq!(r.dtype(), DType::BF16);
                let want = want.to_dtype(DType::BF16).unwrap();
                assert_eq!(max_diff(&r, &want), 0.0, "{rows} rows, rounded");
            }
            None => {
                assert!(!proj.rounds_output());
                eprintln!("skipped: the rounded rows (no AMX tiles: they stay f32)");
            }
        }
        // candle's layer: the product, then the norm, no rounded rows
        let dense = Proj::Dense(Linear::new(w.clone(), Some(b.clone())));
        let (got, rounded) = dense.forward_norm(&x, &residual, &norm).unwrap();
        assert!(rounded.is_none());
        let want = norm
            .forward(&dense.forward(&x, Some(&residual), None).unwrap())
            .unwrap();
        assert_eq!(max_diff(&got, &want), 0.0);
    }
}

#[test]
fn a_feed_forward_block_run_as_one_equals_its_two_layers() {
    use crate::layers::norm::Norm;
    // few rows (the layers one after the other) and many (the middle rows kept in the
    // tasks' scratch); 96 middle features (a panel and a half), 64 outputs; exact GELU and
    // no activation (fused between the products) and the tanh GELU (never fused)
    for rows in [150, 1000] {
        for act in [Some(Act::Gelu), None, Some(Act::GeluTanh)] {
            let (inp, mid, out) = (64, 96, 64);
            let up = noise(mid, inp, 0.2, 81);
            let c = noise(1, mid, 0.1, 82).flatten_all().unwrap();
            let w = noise(out, mid, 0.2, 83);
            let b = noise(1, out, 0.1, 84).flatten_all().unwrap();
            let x = noise(rows, inp, 1.0, 85);
            let residual = noise(rows, out, 1.0, 86);
            let ln = candle_nn::LayerNorm::new(
                (noise(1, out, 0.3, 87).flatten_all().unwrap() + 1.0).unwrap(),
                noise(1, out, 0.1, 88).flatten_all().unwrap(),
                1e-12,
            );
            let norm = Norm::new(ln).unwrap();
            let up = Proj::Packed(Box::new(PackedLinear::new(&up, Some(&c), None).unwrap()));
            let down = Proj::Packed(Box::new(PackedLinear::new(&w, Some(&b), None).unwrap()));
            let m = up.forward_rounded(&x, act).unwrap();
            let (want, want16) = down.forward_norm(&m, &residual, &norm).unwrap();
            let (got, got16) = down
                .forward_mlp_norm(&up, act, &x, &residual, &norm)
                .unwrap();
            assert_eq!(max_diff(&got, &want), 0.0, "{rows} rows, {act:?}");
            assert_eq!(got16.is_some(), want16.is_some());
            if let (Some(g), Some(w)) = (got16, want16) {
                assert_eq!(g.dtype(), DType::BF16);
                assert_eq!(max_diff(&g, &w), 0.0, "{rows} rows, {act:?}: rounded");
            }
            // and against f32 layers through candle's ops within bfloat16 rounding
            let plain = norm
                .forward(
                    &(down.forward(&up.forward(&x, None, act).unwrap(), Some(&residual), None))
                        .unwrap(),
                )
                .unwrap();
            assert!(max_diff(&got, &plain) < 0.05, "{rows} rows, {act:?}: f32");
        }
    }
}
