//! Glue between `sift-embed` models and the index/eval commands.
use anyhow::{Context, Result};
use sift_embed::{
    DevicePref, Kind, ModelFiles, TextEmbedder, TextEmbedderOptions, registry, select_device,
};

/// Model flags shared by commands that embed.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelFlags {
    /// Device: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Texts per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
}

/// Loads a text model from a directory or hub id.
pub fn load_text_model(spec: &str, flags: &ModelFlags) -> Result<TextEmbedder> {
    let pref: DevicePref = flags.device.parse()?;
    let device = select_device(pref)?;
    let files = ModelFiles::resolve(spec)?;
    TextEmbedder::load(
        &files,
        &device,
        TextEmbedderOptions {
            batch_size: flags.batch_size.max(1),
            ..Default::default()
        },
    )
    .with_context(|| format!("loading model {spec}"))
}

/// The name a dense index of `model` goes by: the registry alias, else the model name made
/// safe for a directory.
pub fn slug(model: &TextEmbedder) -> String {
    if let Some(info) = registry::find(model.name()) {
        return info.alias.clone();
    }
    model
        .name()
        .rsplit('/')
        .next()
        .unwrap_or("model")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Embeds passages for the index builder.
pub struct Passages<'a>(pub &'a TextEmbedder);

impl sift_index::PassageEmbedder for Passages<'_> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn fingerprint(&self) -> String {
        format!(
            "{}|{:?}|{}|{:?}",
            self.0.name(),
            self.0.pooling(),
            self.0.max_seq_len(),
            self.0.prefix(Kind::Passage)
        )
    }
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, String> {
        self.0
            .embed(texts, Kind::Passage)
            .map_err(|e| e.to_string())
    }
}
