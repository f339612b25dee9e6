//! The layers and CPU kernels the models are built from (crate-private): which kernels run
//! ([`kernels`]), activations ([`act`]), linear layers ([`linear`]), normalisation
//! ([`norm`]), packed attention ([`attention`]), and the pre-norm transformer encoder of
//! CLIP and SigLIP ([`encoder`]). [`ops`] gathers what the models import.
pub(crate) mod act;
pub(crate) mod attention;
pub(crate) mod encoder;
pub(crate) mod kernels;
pub(crate) mod linear;
pub(crate) mod norm;
pub(crate) mod ops;
#[cfg(test)]
mod tests;
