//! The layers and CPU kernels the models are built from (crate-private): fused linear layers,
//! activations, packed attention ([`ops`]) and the pre-norm transformer encoder of CLIP and
//! SigLIP ([`encoder`]).
pub(crate) mod encoder;
pub(crate) mod ops;
