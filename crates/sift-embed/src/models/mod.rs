//! The model families, one module each, named after their upstream weights: BERT-family
//! sentence encoders ([`text`] over [`bert`]), CLIP and SigLIP ([`vision`] over [`clip`] and
//! [`siglip`]), GME ([`gme`] over [`qwen2vl`]), decoder LLMs ([`decoder`]), Nomic Embed
//! ([`nomic_pair`] over [`nomic`] and [`nomic_vision`]), and Jina-CLIP v1 ([`jina_clip`] over
//! [`jina_bert`] and [`eva`]; v2 over [`xlm_roberta`] and [`eva`]).
pub mod bert;
pub mod clip;
pub mod decoder;
pub mod eva;
pub mod gme;
pub mod jina_bert;
pub mod jina_clip;
pub mod nomic;
pub mod nomic_pair;
pub mod nomic_vision;
pub mod qwen2vl;
pub mod siglip;
pub mod text;
pub mod truncate;
pub mod vision;
pub mod xlm_roberta;
