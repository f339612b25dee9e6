//! The layers the models are built from: which kernels run
//! ([`kernels`]), activations ([`act`]), linear layers ([`linear`]), normalisation
//! ([`norm`]), packed attention ([`attention`]), rotary positions ([`rotary`]), and the pre-norm
//! transformer encoder of CLIP and SigLIP ([`encoder`]). [`ops`] gathers what the models import.
pub mod act;
pub mod attention;
pub mod encoder;
pub mod kernels;
pub mod linear;
pub mod norm;
pub mod ops;
pub mod rotary;
#[cfg(test)]
mod tests;
