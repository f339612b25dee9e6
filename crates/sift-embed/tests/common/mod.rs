//! The precision the parity suites run at, and its bounds.
//!
//! By default the suites load models in f32 and hold them to their f32 bounds. With
//! `SIFT_TEST_DTYPE=bf16` they load them in bfloat16 and hold them to [`BF16_MIN_COSINE`]
//! instead (`scripts/test` runs them so on the generic path, `SIFT_KERNELS=generic`: the
//! arithmetic a GPU runs in bf16).
#![allow(dead_code)]

use candle_core::DType;

/// The lowest cosine to the f32 reference a bfloat16 model may give (bf16 keeps 8 bits of
/// mantissa: 2-3 significant digits per value, through every layer; the hardest fixture
/// texts, all-MiniLM-L6-v2 on 512-token texts, give 0.994 on the generic path).
pub const BF16_MIN_COSINE: f64 = 0.99;

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

/// `f32_bound` in f32, [`BF16_MIN_COSINE`] in bf16.
pub fn min_cosine(f32_bound: f64) -> f64 {
    if bf16() { BF16_MIN_COSINE } else { f32_bound }
}

/// `f32_bound` in f32; in bf16 no bound on single values (the cosine bounds the vector),
/// except that they are finite.
pub fn max_abs_diff(f32_bound: f32) -> f32 {
    if bf16() { f32::MAX } else { f32_bound }
}
