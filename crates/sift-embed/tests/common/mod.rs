//! The precision the parity suites run at, and its bounds.
//!
//! By default the suites load models in f32 and hold them to their f32 bounds. With
//! `SIFT_TEST_DTYPE=bf16` they load them in bfloat16 and hold them to a cosine bound
//! instead: [`PACKED_BF16_MIN_COSINE`] on the CPU's packed path (bfloat16 weights, f32
//! activations), [`BF16_MIN_COSINE`] on the generic path (`SIFT_KERNELS=generic`: the
//! arithmetic a GPU runs in bf16). `scripts/test` runs both.
#![allow(dead_code)]

use candle_core::DType;

/// The lowest cosine to the f32 reference a bfloat16 model may give (bf16 keeps 8 bits of
/// mantissa: 2-3 significant digits per value, through every layer; the hardest fixture
/// texts, all-MiniLM-L6-v2 on 512-token texts, give 0.994 on the generic path).
pub const BF16_MIN_COSINE: f64 = 0.99;

/// The lowest cosine to the f32 reference a bfloat16 model may give on the CPU's packed
/// path, where only the linear layers' weights are rounded to bfloat16 and everything else
/// (activations, attention, norms, residuals, accumulation) stays f32: the bound `--dtype
/// auto` promises before it picks bf16.
pub const PACKED_BF16_MIN_COSINE: f64 = 0.999;

/// The dtype models load in: `SIFT_TEST_DTYPE` (`f32`, the default, or `bf16`). Also checks
/// that the kernels asked for with `SIFT_KERNELS` are the ones running.
pub fn dtype() -> DType {
    precision().dtype()
}

/// [`dtype`] as the embedder's option.
#[allow(dead_code)]
pub fn precision() -> sift_embed::Precision {
    let generic = std::env::var("SIFT_KERNELS").as_deref() == Ok("generic");
    assert_eq!(
        sift_embed::Kernels::current() == sift_embed::Kernels::Generic,
        generic,
        "SIFT_KERNELS is not in effect"
    );
    match std::env::var("SIFT_TEST_DTYPE").as_deref() {
        Err(_) | Ok("") | Ok("f32") => sift_embed::Precision::F32,
        Ok("bf16") => sift_embed::Precision::Bf16,
        Ok(other) => panic!("SIFT_TEST_DTYPE={other:?}: expected f32 or bf16"),
    }
}

/// Whether the suites run in bfloat16.
pub fn bf16() -> bool {
    dtype() == DType::BF16
}

/// `f32_bound` in f32; in bf16 [`PACKED_BF16_MIN_COSINE`] on the CPU's fused kernels,
/// [`BF16_MIN_COSINE`] on the generic path.
pub fn min_cosine(f32_bound: f64) -> f64 {
    min_cosine_packed(f32_bound, PACKED_BF16_MIN_COSINE)
}

/// [`min_cosine`] with a looser packed bound, for a family that does not hold
/// [`PACKED_BF16_MIN_COSINE`] (and that `--dtype auto` therefore keeps in f32).
pub fn min_cosine_packed(f32_bound: f64, packed_bound: f64) -> f64 {
    match (bf16(), sift_embed::Kernels::current()) {
        (false, _) => f32_bound,
        (true, sift_embed::Kernels::Auto) => packed_bound,
        (true, sift_embed::Kernels::Generic) => BF16_MIN_COSINE,
    }
}

/// `f32_bound` in f32; in bf16 no bound on single values (the cosine bounds the vector),
/// except that they are finite.
pub fn max_abs_diff(f32_bound: f32) -> f32 {
    if bf16() { f32::MAX } else { f32_bound }
}
