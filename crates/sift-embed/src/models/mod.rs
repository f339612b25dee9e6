//! The model families, one module each, named after their upstream weights: BERT-family
//! sentence encoders ([`text`] over [`bert`]), CLIP and SigLIP ([`vision`] over [`clip`] and
//! [`siglip`]), and GME ([`gme`] over [`qwen2vl`]).
pub mod bert;
pub mod clip;
pub mod decoder;
pub mod gme;
pub mod qwen2vl;
pub mod siglip;
pub mod text;
pub mod truncate;
pub mod vision;
