//! The networks: pure candle modules, one per architecture, each with a serde config as
//! transformers writes it (candle-transformers' style): BERT ([`bert`]), NomicBERT
//! ([`nomic`]), JinaBERT ([`jina_bert`]), XLM-RoBERTa with LoRA ([`xlm_roberta`]), CLIP's and
//! SigLIP's towers ([`clip`], [`siglip`]), EVA02 ([`eva`]), Nomic's vision tower
//! ([`nomic_vision`]), Qwen2-VL's vision towers and decoder language model, which Mistral, Llama and
//! Qwen3 run on too ([`qwen2vl`]). They know no files, tokenizers or prompts: the
//! embedders do (sift-embed's).
pub mod bert;
pub mod clip;
pub mod eva;
pub mod jina_bert;
pub mod nomic;
pub mod nomic_vision;
pub mod qwen2vl;
pub mod siglip;
pub mod xlm_roberta;
