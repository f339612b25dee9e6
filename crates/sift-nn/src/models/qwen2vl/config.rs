//! A Qwen2-VL or Qwen2.5-VL checkpoint's `config.json` ([`Qwen2VlConfig`]): its vision
//! tower's settings ([`VisionConfig`]) and its language model's ([`TextConfig`], read as a
//! [`DecoderConfig`]), and where the checkpoint's weights lie ([`pick`]).
use candle_nn::VarBuilder;
use serde::Deserialize;
use serde_json::Value;

use super::text_config::{DecoderConfig, TextConfig};
use crate::layers::ops::parse_act;

/// `vision_config` of a Qwen2-VL checkpoint (transformers' `Qwen2VLVisionConfig` defaults).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct VisionConfig {
    /// Blocks.
    pub depth: usize,
    /// Width of the blocks.
    pub embed_dim: usize,
    /// Output width of the merger (the language model's hidden size).
    pub hidden_size: usize,
    /// Block MLP activation.
    pub hidden_act: String,
    /// MLP width as a multiple of `embed_dim`.
    pub mlp_ratio: f64,
    /// Attention heads.
    pub num_heads: usize,
    /// Input channels.
    #[serde(alias = "in_chans")]
    pub in_channels: usize,
    /// Patch side in pixels.
    pub patch_size: usize,
    /// Patches merged per side into one language-model token.
    pub spatial_merge_size: usize,
    /// Frames per patch (an image is repeated to fill them).
    pub temporal_patch_size: usize,
    /// Qwen2.5-VL's blocks and window attention (`None`: a Qwen2-VL tower).
    #[serde(skip)]
    pub qwen25: Option<Qwen25Vision>,
}

/// What a Qwen2.5-VL vision tower has that Qwen2-VL's has not.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen25Vision {
    /// Width of the blocks' gated MLP (`intermediate_size`).
    pub intermediate_size: usize,
    /// Side of an attention window in pixels (`window_size`).
    pub window_size: usize,
    /// Blocks attending over the whole image (`fullatt_block_indexes`); the rest attend
    /// within windows.
    pub full_attention_blocks: Vec<usize>,
}

/// `vision_config` of a Qwen2.5-VL checkpoint as written (transformers'
/// `Qwen2_5_VLVisionConfig` defaults): its `hidden_size` is the blocks' width and
/// `out_hidden_size` the merger's output.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
struct Qwen25VisionJson {
    depth: usize,
    hidden_size: usize,
    hidden_act: String,
    intermediate_size: usize,
    num_heads: usize,
    #[serde(alias = "in_chans")]
    in_channels: usize,
    patch_size: usize,
    spatial_merge_size: usize,
    temporal_patch_size: usize,
    window_size: usize,
    out_hidden_size: usize,
    fullatt_block_indexes: Vec<usize>,
}

impl Default for Qwen25VisionJson {
    fn default() -> Self {
        Qwen25VisionJson {
            depth: 32,
            hidden_size: 3584,
            hidden_act: "silu".into(),
            intermediate_size: 3420,
            num_heads: 16,
            in_channels: 3,
            patch_size: 14,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            window_size: 112,
            out_hidden_size: 3584,
            fullatt_block_indexes: vec![7, 15, 23, 31],
        }
    }
}

impl From<Qwen25VisionJson> for VisionConfig {
    fn from(v: Qwen25VisionJson) -> Self {
        VisionConfig {
            depth: v.depth,
            embed_dim: v.hidden_size,
            hidden_size: v.out_hidden_size,
            hidden_act: v.hidden_act,
            mlp_ratio: v.intermediate_size as f64 / v.hidden_size.max(1) as f64,
            num_heads: v.num_heads,
            in_channels: v.in_channels,
            patch_size: v.patch_size,
            spatial_merge_size: v.spatial_merge_size,
            temporal_patch_size: v.temporal_patch_size,
            qwen25: Some(Qwen25Vision {
                intermediate_size: v.intermediate_size,
                window_size: v.window_size,
                full_attention_blocks: v.fullatt_block_indexes,
            }),
        }
    }
}

impl Default for VisionConfig {
    fn default() -> Self {
        VisionConfig {
            depth: 32,
            embed_dim: 1280,
            hidden_size: 3584,
            hidden_act: "quick_gelu".into(),
            mlp_ratio: 4.0,
            num_heads: 16,
            in_channels: 3,
            patch_size: 14,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            qwen25: None,
        }
    }
}

impl VisionConfig {
    /// Values per flattened patch: channels x frames x patch x patch.
    pub fn patch_values(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }
}

/// A Qwen2-VL or Qwen2.5-VL `config.json`.
#[derive(Debug, Clone)]
pub struct Qwen2VlConfig {
    /// The language model.
    pub text: TextConfig,
    /// The vision tower.
    pub vision: VisionConfig,
    /// Token id of each image token (`<|image_pad|>`).
    pub image_token_id: u32,
}

impl Qwen2VlConfig {
    /// Parses `config.json` (flat transformers-4 form, or with `text_config`); a Qwen2.5-VL
    /// one (`model_type` `qwen2_5_vl`) by its own vision settings.
    pub fn from_json(value: &Value) -> std::result::Result<Self, String> {
        let text_value = value.get("text_config").unwrap_or(value);
        let mut raw: DecoderConfig =
            serde_json::from_value(text_value.clone()).map_err(|e| format!("text config: {e}"))?;
        // the language model of a Qwen2-VL checkpoint, whatever its text config calls itself
        raw.model_type = Some("qwen2_vl".into());
        // transformers 5 keeps the rotary settings and the image token at the top level
        if raw.rope_scaling.is_none() && raw.rope_parameters.is_none() {
            let top: DecoderConfig =
                serde_json::from_value(value.clone()).map_err(|e| format!("config: {e}"))?;
            raw.rope_scaling = top.rope_scaling.or(top.rope_parameters);
            raw.rope_theta = raw.rope_theta.or(top.rope_theta);
        }
        let text = raw.resolve()?;
        let model_type = |v: Option<&Value>| {
            v.and_then(|v| v.get("model_type"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let qwen25 = model_type(Some(value)).as_deref() == Some("qwen2_5_vl")
            || model_type(value.get("vision_config")).as_deref() == Some("qwen2_5_vl_vision");
        let vision_value = value
            .get("vision_config")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        let vision: VisionConfig = if qwen25 {
            serde_json::from_value::<Qwen25VisionJson>(vision_value)
                .map_err(|e| format!("vision_config: {e}"))?
                .into()
        } else {
            serde_json::from_value(vision_value).map_err(|e| format!("vision_config: {e}"))?
        };
        let image_token_id = raw
            .image_token_id
            .or_else(|| {
                value
                    .get("image_token_id")
                    .and_then(Value::as_u64)
                    .map(|v| v as u32)
            })
            .unwrap_or(151_655);
        let cfg = Qwen2VlConfig {
            text,
            vision,
            image_token_id,
        };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let t = &self.text;
        if t.num_attention_heads == 0
            || !t.hidden_size.is_multiple_of(t.num_attention_heads)
            || t.num_key_value_heads == 0
            || !t.num_attention_heads.is_multiple_of(t.num_key_value_heads)
        {
            return Err(format!(
                "hidden_size {} / num_attention_heads {} / num_key_value_heads {} do not divide",
                t.hidden_size, t.num_attention_heads, t.num_key_value_heads
            ));
        }
        if self.text.mrope_section.len() != 3
            || self.text.mrope_section.iter().sum::<usize>() * 2 != t.head_dim()
        {
            return Err(format!(
                "mrope_section {:?} must be three bands summing to head_dim / 2 = {}",
                t.mrope_section,
                t.head_dim() / 2
            ));
        }
        let v = &self.vision;
        if v.num_heads == 0 || !v.embed_dim.is_multiple_of(v.num_heads) {
            return Err(format!(
                "vision embed_dim {} is not a multiple of {} heads",
                v.embed_dim, v.num_heads
            ));
        }
        if let Some(q) = &v.qwen25
            && q.window_size < v.spatial_merge_size * v.patch_size
        {
            return Err(format!(
                "vision window_size {} is smaller than one merged token ({} pixels)",
                q.window_size,
                v.spatial_merge_size * v.patch_size
            ));
        }
        if !(v.embed_dim / v.num_heads).is_multiple_of(4) {
            return Err("vision head dimension must be a multiple of 4 (2-D rotary)".into());
        }
        if v.hidden_size != t.hidden_size {
            return Err(format!(
                "vision_config.hidden_size {} differs from the language model's {}",
                v.hidden_size, t.hidden_size
            ));
        }
        if parse_act(&v.hidden_act).is_none() || parse_act(&t.hidden_act).is_none() {
            return Err(format!(
                "unsupported activation ({} / {})",
                v.hidden_act, t.hidden_act
            ));
        }
        Ok(())
    }
}

/// Loads a weight under the first prefix of `prefixes` that has it (published and
/// transformers-5 layouts).
pub(super) fn pick<'a>(vb: &VarBuilder<'a>, prefixes: &[&str], probe: &str) -> VarBuilder<'a> {
    for p in prefixes {
        if vb.contains_tensor(&format!("{p}.{probe}")) {
            return vb.pp(*p);
        }
    }
    vb.pp(prefixes[0])
}

#[cfg(test)]
mod tests {
    use super::{Qwen2VlConfig, Qwen25Vision};

    #[test]
    fn qwen2_5_vl_configs_read_in_the_published_and_the_transformers_5_layouts() {
        let published: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../models/fixtures/qwen2_5_vl_instruct/tiny/config.json"
            ))
            .unwrap(),
        )
        .unwrap();
        // what transformers 5.24's `to_dict` writes for the same checkpoint
        let nested = serde_json::json!({
            "model_type": "qwen2_5_vl", "image_token_id": 726,
            "text_config": {"model_type": "qwen2_5_vl_text", "vocab_size": 768,
                "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
                "rms_norm_eps": 1e-6, "rope_parameters": {"type": "mrope",
                "mrope_section": [2, 3, 3], "rope_theta": 1e6, "rope_type": "default"}},
            "vision_config": {"model_type": "qwen2_5_vl_vision", "depth": 4, "hidden_size": 32,
                "hidden_act": "silu", "intermediate_size": 48, "num_heads": 4,
                "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
                "temporal_patch_size": 2, "tokens_per_second": 2, "window_size": 56,
                "out_hidden_size": 64, "fullatt_block_indexes": [1, 3],
                "rope_parameters": {"rope_theta": 10000.0, "rope_type": "axial"}}
        });
        for value in [published, nested] {
            let cfg = Qwen2VlConfig::from_json(&value).unwrap();
            let v = &cfg.vision;
            assert_eq!((v.embed_dim, v.hidden_size, v.depth), (32, 64, 4));
            assert_eq!(
                v.qwen25,
                Some(Qwen25Vision {
                    intermediate_size: 48,
                    window_size: 56,
                    full_attention_blocks: vec![1, 3],
                })
            );
            assert_eq!(cfg.text.mrope_section, vec![2, 3, 3]);
            assert_eq!(cfg.image_token_id, 726);
        }
        // a Qwen2-VL config stays one
        let gme: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../models/fixtures/gme/tiny-gme/config.json"
            ))
            .unwrap(),
        )
        .unwrap();
        let cfg = Qwen2VlConfig::from_json(&gme).unwrap();
        assert_eq!((cfg.vision.embed_dim, cfg.vision.qwen25), (32, None));
        // a window narrower than one merged token is refused
        let mut bad = serde_json::json!({"model_type": "qwen2_5_vl", "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "vision_config": {"hidden_size": 32, "num_heads": 4, "out_hidden_size": 64}});
        bad["vision_config"]["window_size"] = 20.into();
        let e = Qwen2VlConfig::from_json(&bad).unwrap_err();
        assert!(e.contains("window_size 20"), "{e}");
    }
}
