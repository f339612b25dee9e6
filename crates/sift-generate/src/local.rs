//! The embedded generator: a Qwen2-VL- or Qwen2.5-VL-Instruct checkpoint run in candle,
//! prompts made with the model's own chat template (`chat_template.jinja`, or
//! `tokenizer_config.json`'s `chat_template`, rendered by minijinja), decoded with a KV cache
//! one token at a time: greedy, or sampled (temperature, top-p, seeded), stopping at the
//! model's end tokens, `max_new_tokens` or a stop string. Images go through the Qwen2-VL
//! processor (transformers' PIL backend: one bicubic `smart_resize` within the checkpoint's
//! `preprocessor_config.json` pixel bounds) and the vision tower, their merged tokens taking
//! the places of the prompt's `<|image_pad|>` runs, with Qwen2-VL's multimodal positions.
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde_json::Value;
use sift_embed::{GmeImage, GmeProcessor, ModelFiles};
use sift_nn::models::qwen2vl::{
    KvCache, LmHead, Qwen2VlConfig, TextModel, VisionTower, mrope_positions, place_image_tokens,
};

use crate::request::{Generation, Message, Part, Request, Sampling, Usage};
use crate::{Error, Generator, Result};

/// A Qwen2-VL or Qwen2.5-VL checkpoint loaded for generation (the two share the language
/// model, processor and multimodal positions; their vision towers differ: see
/// `sift_nn::models::qwen2vl`).
pub struct LocalQwen2Vl {
    name: String,
    text: TextModel,
    vision: VisionTower,
    processor: GmeProcessor,
    image_token: u32,
    patch_values: usize,
    /// The activations' dtype (f32 where the weights are packed bfloat16 on the CPU).
    activations: DType,
    head: LmHead,
    tokenizer: tokenizers::Tokenizer,
    template: Option<String>,
    eos: Vec<u32>,
    device: Device,
}

impl std::fmt::Debug for LocalQwen2Vl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalQwen2Vl")
            .field("name", &self.name)
            .finish()
    }
}

fn model_err(name: &str, e: impl std::fmt::Display) -> Error {
    Error::Model {
        model: name.to_string(),
        message: e.to_string(),
    }
}

impl LocalQwen2Vl {
    /// Loads `spec` (a local directory or a hub id) onto `device` in f32.
    pub fn load(spec: &str, device: &Device) -> Result<LocalQwen2Vl> {
        Self::load_with(spec, device, DType::F32)
    }

    /// Loads `spec` onto `device` with weights in `dtype`: bf16 on the CPU packs every
    /// linear layer for the processor's bfloat16 kernels (AMX, AVX512-BF16) and runs norms,
    /// attention, residuals and the logits in f32, as the embedders do.
    pub fn load_with(spec: &str, device: &Device, dtype: DType) -> Result<LocalQwen2Vl> {
        let err = |e: &dyn std::fmt::Display| model_err(spec, e);
        let files = ModelFiles::resolve(spec).map_err(|e| err(&e))?;
        let dir = files
            .config
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let config: Value = sift_embed::read_json(&files.config).map_err(|e| err(&e))?;
        let cfg = Qwen2VlConfig::from_json(&config).map_err(|e| err(&e))?;
        let vb = files.var_builder(dtype, device).map_err(|e| err(&e))?;
        let text = TextModel::new(&vb, &cfg.text).map_err(|e| err(&e))?;
        let vision = VisionTower::new(&vb, &cfg.vision).map_err(|e| err(&e))?;
        // the processor's pixel bounds: preprocessor_config.json (min_pixels / max_pixels,
        // or size.shortest_edge / longest_edge), else Qwen2-VL's defaults
        let pre: Option<Value> = sift_embed::read_json(&dir.join("preprocessor_config.json")).ok();
        let bound = |keys: [&str; 2], default: u64| -> u64 {
            pre.as_ref()
                .and_then(|p| {
                    p.get(keys[0])
                        .or_else(|| p.get("size").and_then(|s| s.get(keys[1])))
                })
                .and_then(Value::as_u64)
                .unwrap_or(default)
        };
        let v = &cfg.vision;
        let unit = (v.patch_size * v.spatial_merge_size).pow(2) as u64;
        let processor = GmeProcessor::new(
            v.patch_size,
            v.spatial_merge_size,
            v.temporal_patch_size,
            bound(["min_pixels", "shortest_edge"], 56 * 56) / unit,
            bound(["max_pixels", "longest_edge"], 28 * 28 * 1280) / unit,
        );
        let head = text.lm_head(&vb).map_err(|e| err(&e))?;
        let tokenizer = files.load_tokenizer().map_err(|e| err(&e))?;
        // a chat template is needed for chats only (a scoring model's plain prompts need none)
        let template = chat_template(&dir);
        // end tokens: generation_config.json's eos_token_id, else config.json's
        let generation: Option<Value> =
            sift_embed::read_json(&dir.join("generation_config.json")).ok();
        let eos_of = |v: Option<&Value>| -> Vec<u32> {
            match v {
                Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| x.as_u64())
                    .map(|x| x as u32)
                    .collect(),
                _ => Vec::new(),
            }
        };
        let mut eos = eos_of(generation.as_ref().and_then(|g| g.get("eos_token_id")));
        if eos.is_empty() {
            eos = eos_of(config.get("eos_token_id").or_else(|| {
                config
                    .get("text_config")
                    .and_then(|t| t.get("eos_token_id"))
            }));
        }
        if eos.is_empty() {
            eos.extend(tokenizer.token_to_id("<|im_end|>"));
        }
        Ok(LocalQwen2Vl {
            name: spec.to_string(),
            text,
            vision,
            patch_values: cfg.vision.patch_values(),
            activations: sift_embed::activation_dtype(dtype, device),
            processor,
            image_token: cfg.image_token_id,
            head,
            tokenizer,
            template,
            eos,
            device: device.clone(),
        })
    }

    /// The prompt text of `messages` as the model's chat template renders it, the
    /// assistant's turn opened (`add_generation_prompt`).
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<String> {
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| {
                let only_text = m.content.iter().all(|p| matches!(p, Part::Text(_)));
                let content = if only_text {
                    Value::String(
                        m.content
                            .iter()
                            .map(|p| match p {
                                Part::Text(t) => t.as_str(),
                                Part::Image { .. } => "",
                            })
                            .collect(),
                    )
                } else {
                    Value::Array(
                        m.content
                            .iter()
                            .map(|p| match p {
                                Part::Text(t) => serde_json::json!({"type": "text", "text": t}),
                                Part::Image { .. } => serde_json::json!({"type": "image"}),
                            })
                            .collect(),
                    )
                };
                serde_json::json!({"role": m.role, "content": content})
            })
            .collect();
        let mut env = minijinja::Environment::new();
        let template = self.template.as_deref().ok_or_else(|| {
            model_err(
                &self.name,
                "no chat template (chat_template.jinja, or chat_template in tokenizer_config.json)",
            )
        })?;
        env.add_template("chat", template)
            .map_err(|e| model_err(&self.name, format!("chat template: {e}")))?;
        env.get_template("chat")
            .and_then(|t| {
                t.render(minijinja::context! {
                    messages => msgs,
                    add_generation_prompt => true,
                })
            })
            .map_err(|e| model_err(&self.name, format!("chat template: {e}")))
    }

    /// Token ids of `text` (no special tokens added: the template wrote them).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| model_err(&self.name, e))
    }

    /// The ids generated after `prompt` (prefilled at positions 0.. on all three M-RoPE
    /// axes, as for text), up to an end token (included, as transformers' `generate` returns
    /// it) or `sampling.max_new_tokens`.
    pub fn generate_ids(&self, prompt: &[u32], sampling: &Sampling) -> Result<Vec<u32>> {
        self.generate_with_images(prompt, &[], sampling)
    }

    /// The images of a request, preprocessed.
    pub fn prepare_images(&self, images: &[&[u8]]) -> Result<Vec<GmeImage>> {
        images
            .iter()
            .enumerate()
            .map(|(i, b)| {
                self.processor
                    .prepare_processor_only(b)
                    .map_err(|e| Error::Invalid(format!("images[{i}]: {e}")))
            })
            .collect()
    }

    /// `ids` with each `<|image_pad|>` repeated to its image's number of merged tokens.
    pub fn expand_image_tokens(&self, ids: &[u32], images: &[GmeImage]) -> Result<Vec<u32>> {
        let m = self.processor.merge * self.processor.merge;
        let mut images = images.iter();
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            if id == self.image_token {
                let img = images
                    .next()
                    .ok_or_else(|| Error::Invalid("more image placeholders than images".into()))?;
                out.extend(std::iter::repeat_n(id, img.len() / m));
            } else {
                out.push(id);
            }
        }
        if images.next().is_some() {
            return Err(Error::Invalid("more images than image placeholders".into()));
        }
        Ok(out)
    }

    /// [`LocalQwen2Vl::generate_ids`] for a prompt whose image tokens (expanded:
    /// [`LocalQwen2Vl::expand_image_tokens`]) take `images`' merged embeddings, at
    /// Qwen2-VL's multimodal positions; decoding continues past the largest position.
    pub fn generate_with_images(
        &self,
        prompt: &[u32],
        images: &[GmeImage],
        sampling: &Sampling,
    ) -> Result<Vec<u32>> {
        sampling.check()?;
        let err = |e: candle_core::Error| model_err(&self.name, e);
        let mut cache = self.text.new_cache();
        let (mut logits, mut next_position) = self.prefill(prompt, images, &mut cache)?;
        let mut rng = sampling.seed.unwrap_or(0x5EED) ^ 0x9E37_79B9_7F4A_7C15;
        let mut out = Vec::new();
        while out.len() < sampling.max_new_tokens as usize {
            let next = pick(&logits, sampling, &mut rng);
            out.push(next);
            if self.eos.contains(&next) || out.len() == sampling.max_new_tokens as usize {
                break;
            }
            let x = self.text.embed_tokens(&[next]).map_err(err)?;
            let hidden = self
                .text
                .forward_cached(x, &[[next_position; 3]], &mut cache)
                .map_err(err)?;
            logits = self.logits(&hidden)?;
            next_position += 1;
        }
        Ok(out)
    }

    /// The logits of the token after `prompt` (image tokens expanded, taking `images`), in
    /// f32: what greedy decoding takes the arg-max of, and what a yes/no scorer reads.
    pub fn next_token_logits(&self, prompt: &[u32], images: &[GmeImage]) -> Result<Vec<f32>> {
        Ok(self.prefill(prompt, images, &mut self.text.new_cache())?.0)
    }

    /// The final hidden state (after the last norm) of `prompt`'s last token (image tokens
    /// expanded, taking `images`), in f32: what a scoring head on top of the model reads.
    pub fn last_hidden_state(&self, prompt: &[u32], images: &[GmeImage]) -> Result<Vec<f32>> {
        let hidden = self
            .prefill_hidden(prompt, images, &mut self.text.new_cache())?
            .0;
        hidden
            .to_dtype(DType::F32)
            .and_then(|h| h.flatten_all())
            .and_then(|h| h.to_vec1::<f32>())
            .map_err(|e| model_err(&self.name, e))
    }

    /// Runs `prompt` (its image tokens taking `images`' embeddings, at Qwen2-VL's
    /// multimodal positions) into `cache`: the next token's logits, and the position the
    /// tokens after it take (one past the largest).
    fn prefill(
        &self,
        prompt: &[u32],
        images: &[GmeImage],
        cache: &mut KvCache,
    ) -> Result<(Vec<f32>, u32)> {
        let (hidden, next) = self.prefill_hidden(prompt, images, cache)?;
        Ok((self.logits(&hidden)?, next))
    }

    /// [`Self::prefill`]'s final hidden state of the last token, before the LM head.
    fn prefill_hidden(
        &self,
        prompt: &[u32],
        images: &[GmeImage],
        cache: &mut KvCache,
    ) -> Result<(Tensor, u32)> {
        let err = |e: candle_core::Error| model_err(&self.name, e);
        if prompt.is_empty() {
            return Err(Error::Invalid("an empty prompt".into()));
        }
        let grids: Vec<[usize; 3]> = images.iter().map(|i| i.grid).collect();
        let mut positions = Vec::with_capacity(prompt.len());
        mrope_positions(
            prompt,
            self.image_token,
            &grids,
            self.processor.merge,
            &mut positions,
        );
        let mut x = self.text.embed_tokens(prompt).map_err(err)?;
        if !images.is_empty() {
            x = self.with_image_embeddings(x, prompt, images).map_err(err)?;
        }
        let next = positions.iter().flatten().max().map_or(0, |&p| p + 1);
        let hidden = self
            .text
            .forward_cached(x, &positions, cache)
            .map_err(err)?;
        Ok((hidden, next))
    }

    /// The f32 next-token logits of a final hidden state.
    fn logits(&self, hidden: &Tensor) -> Result<Vec<f32>> {
        self.text
            .logits(hidden, &self.head)
            .and_then(|l| l.to_dtype(DType::F32))
            .and_then(|l| l.flatten_all())
            .and_then(|l| l.to_vec1::<f32>())
            .map_err(|e| model_err(&self.name, e))
    }

    /// The prompt's embeddings `x` with its image tokens' rows replaced, in order, by the
    /// vision tower's merged tokens of `images`.
    fn with_image_embeddings(
        &self,
        x: Tensor,
        ids: &[u32],
        images: &[GmeImage],
    ) -> candle_core::Result<Tensor> {
        let grids: Vec<[usize; 3]> = images.iter().map(|i| i.grid).collect();
        let mut flat = Vec::with_capacity(images.iter().map(|i| i.patches.len()).sum());
        for img in images {
            flat.extend_from_slice(&img.patches);
        }
        let n = flat.len() / self.patch_values;
        let patches = Tensor::from_vec(flat, (n, self.patch_values), &self.device)?
            .to_dtype(self.activations)?;
        let embeds = self.vision.forward(&patches, &grids)?;
        place_image_tokens(&x, &embeds, ids, self.image_token)
    }
}

/// The chat template of the checkpoint in `dir`.
fn chat_template(dir: &Path) -> Option<String> {
    if let Ok(t) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
        return Some(t);
    }
    let cfg: Value = sift_embed::read_json(&dir.join("tokenizer_config.json")).ok()?;
    match cfg.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        // a list of named templates: the default one
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
        _ => None,
    }
}

/// The next token: the arg-max (the first of equal maxima, as `torch.argmax`) when the
/// temperature is 0, else a sample of the tempered distribution cut to its top-p mass.
fn pick(logits: &[f32], s: &Sampling, rng: &mut u64) -> u32 {
    if s.temperature <= 0.0 {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        return best as u32;
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut p: Vec<(usize, f64)> = logits
        .iter()
        .enumerate()
        .map(|(i, &v)| (i, (((v - max) / s.temperature) as f64).exp()))
        .collect();
    let total: f64 = p.iter().map(|x| x.1).sum();
    p.iter_mut().for_each(|x| x.1 /= total);
    p.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut kept = 0.0;
    let mut n = 0;
    for x in &p {
        kept += x.1;
        n += 1;
        if kept >= s.top_p as f64 {
            break;
        }
    }
    // splitmix64
    *rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *rng;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let mut u = (z >> 11) as f64 / (1u64 << 53) as f64 * kept;
    for x in &p[..n] {
        if u < x.1 {
            return x.0 as u32;
        }
        u -= x.1;
    }
    p[n - 1].0 as u32
}

impl Generator for LocalQwen2Vl {
    fn model_id(&self) -> &str {
        &self.name
    }

    fn generate(&self, request: &Request) -> Result<Generation> {
        let bytes: Vec<&[u8]> = request
            .messages
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|p| match p {
                Part::Image { bytes, .. } => Some(bytes.as_slice()),
                Part::Text(_) => None,
            })
            .collect();
        let images = self.prepare_images(&bytes)?;
        let prompt = self.tokenize(&self.chat_prompt(&request.messages)?)?;
        let prompt = self.expand_image_tokens(&prompt, &images)?;
        let ids = self.generate_with_images(&prompt, &images, &request.sampling)?;
        let ended = ids.last().is_some_and(|t| self.eos.contains(t));
        let mut text = self
            .tokenizer
            .decode(&ids, true)
            .map_err(|e| model_err(&self.name, e))?;
        let mut finish = if ended { "stop" } else { "length" };
        if let Some(cut) = request
            .sampling
            .stop
            .iter()
            .filter_map(|s| text.find(s.as_str()))
            .min()
        {
            text.truncate(cut);
            finish = "stop";
        }
        Ok(Generation {
            text,
            finish_reason: Some(finish.into()),
            usage: Usage {
                prompt_tokens: prompt.len() as u64,
                completion_tokens: ids.len() as u64,
            },
        })
    }
}
