//! A decoder language model's settings: [`DecoderConfig`], its `config.json` (Mistral, Qwen2,
//! Qwen3, Llama, and Qwen2-VL's language model, GME's) as transformers 4 and 5 write it, read
//! by serde and resolved into the [`TextConfig`] the model runs with, each family's defaults
//! applied.
use serde::Deserialize;

/// The language model's settings, resolved from a `config.json` by
/// [`DecoderConfig::resolve`].
#[derive(Debug, Clone)]
pub struct TextConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// MLP activation.
    pub hidden_act: String,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Rotary base (`rope_theta`, or `rope_parameters.rope_theta`).
    pub rope_theta: f64,
    /// Frequency bands of the temporal, height and width positions (halves of the head
    /// dimension; `rope_scaling.mrope_section` or `rope_parameters.mrope_section`).
    pub mrope_section: Vec<usize>,
    /// Whether the query / key / value projections have biases (Qwen2: yes; Mistral,
    /// Llama, Qwen3: no).
    pub qkv_bias: bool,
    /// RMSNorm of each query and key head before the rotation (Qwen3's `q_norm`, `k_norm`).
    pub qk_norm: bool,
    /// Head dimension when the config gives one that is not hidden / heads (Qwen3).
    pub head_dim_override: Option<usize>,
    /// Llama 3's rotary frequency scaling (`rope_type` llama3).
    pub llama3_rope: Option<Llama3Rope>,
    /// Mistral's sliding window: each token attends to this many latest positions (causal
    /// attention only; every layer).
    pub attention_window: Option<usize>,
}

/// Llama 3's rotary scaling (transformers' `_compute_llama3_parameters`): long wavelengths
/// divided by `factor`, short ones kept, a smooth blend between.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Rope {
    /// `factor`.
    pub factor: f64,
    /// `low_freq_factor`.
    pub low_freq_factor: f64,
    /// `high_freq_factor`.
    pub high_freq_factor: f64,
    /// `original_max_position_embeddings`.
    pub original_max_position_embeddings: f64,
}

impl Llama3Rope {
    /// Scales rotary inverse frequencies.
    pub fn apply(&self, inv_freq: &mut [f32]) {
        let old = self.original_max_position_embeddings;
        let low_wavelen = old / self.low_freq_factor;
        let high_wavelen = old / self.high_freq_factor;
        for f in inv_freq.iter_mut() {
            let freq = *f as f64;
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let scaled = if wavelen > low_wavelen {
                freq / self.factor
            } else if wavelen < high_wavelen {
                freq
            } else {
                let smooth = (old / wavelen - self.low_freq_factor)
                    / (self.high_freq_factor - self.low_freq_factor);
                (1.0 - smooth) * freq / self.factor + smooth * freq
            };
            *f = scaled as f32;
        }
    }
}

impl TextConfig {
    /// Dimension of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim_override
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }
}

#[cfg(test)]
mod llama3_tests {
    use super::*;

    #[test]
    fn llama3_scaling_keeps_short_and_divides_long_wavelengths() {
        let r = Llama3Rope {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        // wavelengths 2 pi / f: 6.3 (kept), 1e6 (divided by 8), 4000 (blended)
        let mut f = [
            1.0f32,
            (2.0 * std::f64::consts::PI / 1e6) as f32,
            (2.0 * std::f64::consts::PI / 4000.0) as f32,
        ];
        let before = f;
        r.apply(&mut f);
        assert_eq!(f[0], before[0]);
        assert!((f[1] - before[1] / 8.0).abs() < 1e-12);
        assert!(f[2] < before[2] && f[2] > before[2] / 8.0);
    }
}

/// The rotary settings: transformers 4's `rope_scaling`, 5's `rope_parameters`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RopeParameters {
    /// `rope_type`: `default`, `llama3`, ...
    pub rope_type: Option<String>,
    /// `type`, the older key (`mrope` in Qwen2-VL configs; transformers 5 writes both, the
    /// new one `default`).
    #[serde(rename = "type")]
    pub legacy_type: Option<String>,
    /// Rotary base (transformers 5 keeps it here).
    pub rope_theta: Option<f64>,
    /// Qwen2-VL's frequency bands of the temporal, height and width positions.
    pub mrope_section: Option<Vec<usize>>,
    /// Llama 3's `factor`.
    pub factor: Option<f64>,
    /// Llama 3's `low_freq_factor`.
    pub low_freq_factor: Option<f64>,
    /// Llama 3's `high_freq_factor`.
    pub high_freq_factor: Option<f64>,
    /// Llama 3's `original_max_position_embeddings`.
    pub original_max_position_embeddings: Option<f64>,
}

/// An id or a list of ids (`eos_token_id`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Ids {
    /// One id.
    One(u32),
    /// Several; the first counts.
    Many(Vec<u32>),
}

impl Ids {
    /// The first id.
    pub fn first(&self) -> Option<u32> {
        match self {
            Ids::One(i) => Some(*i),
            Ids::Many(v) => v.first().copied(),
        }
    }
}

/// A decoder's `config.json`, every key optional: [`DecoderConfig::resolve`] applies the
/// family's defaults (transformers' config classes') to what is absent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DecoderConfig {
    /// `mistral`, `qwen2`, `qwen3`, `llama`, `qwen2_vl`.
    pub model_type: Option<String>,
    /// Vocabulary size.
    pub vocab_size: Option<usize>,
    /// Hidden size.
    pub hidden_size: Option<usize>,
    /// MLP width.
    pub intermediate_size: Option<usize>,
    /// Decoder layers.
    pub num_hidden_layers: Option<usize>,
    /// Query heads.
    pub num_attention_heads: Option<usize>,
    /// Key/value heads.
    pub num_key_value_heads: Option<usize>,
    /// MLP activation.
    pub hidden_act: Option<String>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: Option<f64>,
    /// Rotary base (transformers 4).
    pub rope_theta: Option<f64>,
    /// Rotary scaling (transformers 4).
    pub rope_scaling: Option<RopeParameters>,
    /// Rotary settings (transformers 5).
    pub rope_parameters: Option<RopeParameters>,
    /// Head size, when it is not hidden / heads (Qwen3).
    pub head_dim: Option<usize>,
    /// Biases on the query / key / value projections.
    pub attention_bias: Option<bool>,
    /// Longest sequence.
    pub max_position_embeddings: Option<usize>,
    /// Sliding-window length.
    pub sliding_window: Option<usize>,
    /// Whether the sliding window is used (Qwen2's flag).
    pub use_sliding_window: Option<bool>,
    /// End-of-sequence id(s).
    pub eos_token_id: Option<Ids>,
    /// Qwen2-VL's image token (at the top level or in `text_config`).
    pub image_token_id: Option<u32>,
}

/// The defaults of a family's config class (transformers') for keys a `config.json` leaves
/// out; `kv_heads` `None`: as many as the query heads.
struct Defaults {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f64,
    rope_theta: f64,
}

impl DecoderConfig {
    /// The rotary settings, whichever version wrote them.
    fn rope(&self) -> Option<&RopeParameters> {
        self.rope_scaling.as_ref().or(self.rope_parameters.as_ref())
    }

    /// `rope_theta`, at the top level or in the rotary settings.
    fn rope_theta(&self) -> Option<f64> {
        self.rope_theta.or_else(|| {
            [self.rope_parameters.as_ref(), self.rope_scaling.as_ref()]
                .into_iter()
                .flatten()
                .find_map(|r| r.rope_theta)
        })
    }

    fn defaults(&self) -> Defaults {
        let d = |vocab_size, intermediate_size, kv_heads, head_dim, rms_norm_eps| Defaults {
            vocab_size,
            hidden_size: 4096,
            intermediate_size,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            kv_heads,
            head_dim,
            rms_norm_eps,
            rope_theta: 10_000.0,
        };
        match self.model_type.as_deref() {
            Some("mistral") => d(32000, 14336, Some(8), None, 1e-6),
            Some("qwen2") => d(151936, 22016, Some(32), None, 1e-6),
            Some("qwen3") => d(151936, 22016, Some(32), Some(128), 1e-6),
            Some("llama") => d(32000, 11008, None, None, 1e-6),
            // Qwen2VLTextConfig
            _ => Defaults {
                vocab_size: 152064,
                hidden_size: 8192,
                intermediate_size: 29568,
                num_hidden_layers: 80,
                num_attention_heads: 64,
                kv_heads: Some(8),
                head_dim: None,
                rms_norm_eps: 1e-5,
                rope_theta: 1_000_000.0,
            },
        }
    }

    /// The language model's settings, the family's defaults filled in: rotary positions one
    /// dimensional for decoders (Qwen2-VL's three bands for it), Llama 3's scaling, Qwen3's
    /// q/k norms, q/k/v biases (`attention_bias`, else Qwen2's and Qwen2-VL's yes). The
    /// sliding window is left to the caller (it depends on the length embedded).
    pub fn resolve(&self) -> Result<TextConfig, String> {
        let d = self.defaults();
        let model_type = self.model_type.as_deref().unwrap_or("qwen2_vl");
        let heads = self.num_attention_heads.unwrap_or(d.num_attention_heads);
        let mut cfg = TextConfig {
            vocab_size: self.vocab_size.unwrap_or(d.vocab_size),
            hidden_size: self.hidden_size.unwrap_or(d.hidden_size),
            intermediate_size: self.intermediate_size.unwrap_or(d.intermediate_size),
            num_hidden_layers: self.num_hidden_layers.unwrap_or(d.num_hidden_layers),
            num_attention_heads: heads,
            num_key_value_heads: self.num_key_value_heads.or(d.kv_heads).unwrap_or(heads),
            hidden_act: self.hidden_act.clone().unwrap_or_else(|| "silu".into()),
            rms_norm_eps: self.rms_norm_eps.unwrap_or(d.rms_norm_eps),
            rope_theta: self.rope_theta().unwrap_or(d.rope_theta),
            mrope_section: Vec::new(),
            qkv_bias: self
                .attention_bias
                .unwrap_or(matches!(model_type, "qwen2" | "qwen2_vl")),
            qk_norm: model_type == "qwen3",
            head_dim_override: self.head_dim.or(d.head_dim),
            llama3_rope: None,
            attention_window: None,
        };
        if cfg.num_attention_heads == 0
            || cfg.num_key_value_heads == 0
            || !cfg
                .num_attention_heads
                .is_multiple_of(cfg.num_key_value_heads)
        {
            return Err("num_attention_heads / num_key_value_heads do not divide".into());
        }
        if cfg.head_dim_override.is_none()
            && !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            return Err(
                "hidden_size is not a multiple of num_attention_heads, and no head_dim".into(),
            );
        }
        if !cfg.head_dim().is_multiple_of(2) {
            return Err(format!("odd head_dim {}", cfg.head_dim()));
        }
        let rope = self.rope();
        let rope_type = rope
            .and_then(
                |r| match (r.rope_type.as_deref(), r.legacy_type.as_deref()) {
                    (Some("default") | None, Some(legacy)) => Some(legacy),
                    (kind, _) => kind,
                },
            )
            .unwrap_or("default");
        cfg.mrope_section = match model_type {
            "qwen2_vl" => rope
                .and_then(|r| r.mrope_section.clone())
                .or_else(|| {
                    [self.rope_parameters.as_ref(), self.rope_scaling.as_ref()]
                        .into_iter()
                        .flatten()
                        .find_map(|r| r.mrope_section.clone())
                })
                .unwrap_or_else(|| vec![16, 24, 24]),
            // plain rotary positions: every frequency follows the one position
            _ => vec![cfg.head_dim() / 2, 0, 0],
        };
        match (model_type, rope_type) {
            ("qwen2_vl", _) | (_, "default") => {}
            (_, "llama3") => {
                let r = rope.expect("a rope type comes from a rotary settings object");
                let num = |v: Option<f64>, k: &str| {
                    v.ok_or_else(|| format!("llama3 rotary scaling without {k}"))
                };
                cfg.llama3_rope = Some(Llama3Rope {
                    factor: num(r.factor, "factor")?,
                    low_freq_factor: num(r.low_freq_factor, "low_freq_factor")?,
                    high_freq_factor: num(r.high_freq_factor, "high_freq_factor")?,
                    original_max_position_embeddings: num(
                        r.original_max_position_embeddings,
                        "original_max_position_embeddings",
                    )?,
                });
            }
            (_, other) => return Err(format!("rotary scaling {other:?} is not supported yet")),
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> DecoderConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn transformers_5_qwen2_vl_rope_parameters_with_both_type_keys_parse() {
        // what transformers 5.24 writes for Qwen2-VL: `rope_type` default beside `type` mrope
        let vl = parse(
            r#"{"model_type": "qwen2_vl", "rope_parameters": {"mrope_section": [2, 3, 3],
                "rope_theta": 1000000.0, "rope_type": "default", "type": "mrope"}}"#,
        )
        .resolve()
        .unwrap();
        assert_eq!(vl.mrope_section, vec![2, 3, 3]);
        let llama = parse(
            r#"{"model_type": "llama", "rope_scaling": {"type": "llama3", "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}}"#,
        )
        .resolve()
        .unwrap();
        assert!(
            llama.llama3_rope.is_some(),
            "the older key alone still names the scaling"
        );
    }

    #[test]
    fn each_family_takes_its_own_defaults() {
        let mistral = parse(r#"{"model_type": "mistral"}"#).resolve().unwrap();
        assert_eq!(
            (
                mistral.num_key_value_heads,
                mistral.rope_theta,
                mistral.qkv_bias
            ),
            (8, 10_000.0, false)
        );
        assert_eq!(mistral.mrope_section, vec![64, 0, 0]);
        let llama = parse(r#"{"model_type": "llama", "num_attention_heads": 16}"#)
            .resolve()
            .unwrap();
        assert_eq!(llama.num_key_value_heads, 16, "as many as the query heads");
        let qwen2 = parse(r#"{"model_type": "qwen2"}"#).resolve().unwrap();
        assert!(qwen2.qkv_bias && !qwen2.qk_norm);
        let qwen3 = parse(r#"{"model_type": "qwen3"}"#).resolve().unwrap();
        assert!(qwen3.qk_norm && !qwen3.qkv_bias);
        assert_eq!(qwen3.head_dim(), 128);
        let vl = parse(r#"{"model_type": "qwen2_vl"}"#).resolve().unwrap();
        assert_eq!(
            (vl.rope_theta, vl.mrope_section.clone()),
            (1e6, vec![16, 24, 24])
        );
    }

    #[test]
    fn rotary_settings_are_read_from_either_transformers_version() {
        let v4 = parse(
            r#"{"model_type": "llama", "rope_theta": 500000.0, "rope_scaling": {"rope_type":
            "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}}"#,
        )
        .resolve()
        .unwrap();
        let v5 = parse(
            r#"{"model_type": "llama", "rope_parameters": {"rope_type": "llama3",
            "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#,
        )
        .resolve()
        .unwrap();
        for c in [&v4, &v5] {
            assert_eq!(c.rope_theta, 500000.0);
            assert_eq!(c.llama3_rope.map(|r| r.factor), Some(8.0));
        }
        let bad = parse(r#"{"model_type": "mistral", "rope_scaling": {"type": "dynamic"}}"#);
        assert!(bad.resolve().unwrap_err().contains("dynamic"));
        let short = parse(r#"{"model_type": "llama", "rope_scaling": {"rope_type": "llama3"}}"#);
        assert!(short.resolve().unwrap_err().contains("factor"));
    }

    #[test]
    fn heads_that_do_not_divide_are_refused_and_eos_lists_give_their_first() {
        let c = parse(
            r#"{"model_type": "mistral", "num_attention_heads": 6, "num_key_value_heads": 4}"#,
        );
        assert!(c.resolve().is_err());
        let c = parse(r#"{"model_type": "qwen2", "eos_token_id": [7, 9]}"#);
        assert_eq!(c.eos_token_id.and_then(|e| e.first()), Some(7));
    }
}
