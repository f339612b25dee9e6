//! Matrix products with bfloat16 weights and f32 activations: `out += x · Wᵀ` for a linear
//! layer's weight `W` (`n` outputs × `k` inputs, row-major as checkpoints store it).
//!
//! The weight is packed once ([`PackedBf16::pack`]) into panels of 64 output columns whose
//! rows are pairs of consecutive inputs, the layout the AVX512-BF16 dot product `vdpbf16ps`
//! reads: one 64-byte line holds 16 columns × 2 inputs. The lines are in the order the Intel
//! AMX tiles read them (`line_at`): 16 consecutive lines (16 pairs of one group of 16
//! columns) are one contiguous 1 KiB weight tile. Three kernels run over it:
//!
//! - [`Kernel::Amx`] (Intel Sapphire Rapids and later, on Linux): the activations rounded to
//!   bfloat16 as below, multiplied on the AMX tiles (`tdpbf16ps`, [`amx`]) into f32;
//! - [`Kernel::DotBf16`] (processors with AVX512-BF16: AMD Zen 4 and later, Intel Cooper Lake
//!   and Sapphire Rapids and later): the activations are rounded to bfloat16 (to nearest,
//!   ties to even) and multiplied pairwise into f32 accumulators, two multiply-adds per lane
//!   per instruction, as PyTorch's bfloat16 matrix products do;
//! - [`Kernel::F32`] (everywhere else, and on request): the weights are widened to f32 in
//!   registers (exact) and multiplied with the unrounded f32 activations.
//!
//! All accumulate in f32. The product is split over the panels (and over rows when there
//! are fewer panels than threads) on rayon's pool; each task writes its own columns.
//!
//! The files, by concern: `pack` (the weight's layout, [`PackedBf16::pack`]) and `rows` (the
//! activations as the kernels read them, [`Rows`]); `product` (the entry points, the choice of
//! [`Kernel`], the register kernels' split over rayon's pool) and `amx_tasks` (the AMX
//! products' tasks and their scratch); the kernels, one file per instruction set: `avx512`
//! (AVX512-BF16, and the widening kernel at AVX-512F), [`amx`] (the tiles) and `widen` (the
//! widening kernel's dispatch, AVX2 and portable loops), over `block` (a task's share of a
//! panel) and `convert` (single values); `vector` (the dot product and a row's rounding);
//! [`attention`] (attention's two products on the tiles); `tests`.
mod amx_tasks;
mod avx512;
mod block;
mod convert;
mod pack;
mod product;
mod rows;
mod vector;
mod widen;

pub mod amx;
pub mod attention;

pub use convert::{bf16_to_f32, f32_to_bf16};
pub use pack::{PANEL, PackedBf16};
pub use product::{Epilogue, Kernel, MidSink, Tile, TileSink};
pub use rows::Rows;
pub use vector::{dot, has_dot_bf16, round_into};

#[cfg(test)]
pub(super) mod tests;
