use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::registry;
use crate::{Error, Result};

/// The files of a model in Hugging Face layout.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// Name used for the registry look-up and in index metadata (hub id, or the directory).
    pub name: String,
    /// `config.json`.
    pub config: PathBuf,
    /// `tokenizer.json`; for BERT checkpoints that predate it, their WordPiece `vocab.txt`
    /// ([`ModelFiles::load_tokenizer`] builds the tokenizer transformers would).
    pub tokenizer: PathBuf,
    /// `model.safetensors`, every shard named by `model.safetensors.index.json`, or an older
    /// checkpoint's `pytorch_model.bin` ([`ModelFiles::var_builder`] reads either).
    pub weights: Vec<PathBuf>,
    /// sentence-transformers `1_Pooling/config.json`, when present.
    pub pooling: Option<PathBuf>,
    /// sentence-transformers `sentence_bert_config.json`, when present.
    pub sentence_config: Option<PathBuf>,
    /// `preprocessor_config.json` (image models), when present.
    pub preprocessor: Option<PathBuf>,
    /// `tokenizer_config.json`, when present.
    pub tokenizer_config: Option<PathBuf>,
    /// sentence-transformers `config_sentence_transformers.json`, when present (where
    /// sentence-transformers 6 keeps a cross-encoder's activation).
    pub st_config: Option<PathBuf>,
}

const NO_TOKENIZER_JSON: &str = "missing: this model ships only a SentencePiece spiece.model \
(SigLIP v1); write tokenizer.json next to it once with `python3 models/siglip_tokenizer_json.py DIR`";

/// A BERT checkpoint's WordPiece vocabulary, for those without `tokenizer.json`.
const VOCAB: &str = "vocab.txt";

/// PyTorch's pickled weights, for checkpoints without safetensors.
const PTH: &str = "pytorch_model.bin";

const OPTIONAL: [&str; 5] = [
    "1_Pooling/config.json",
    "sentence_bert_config.json",
    "preprocessor_config.json",
    "tokenizer_config.json",
    "config_sentence_transformers.json",
];

impl ModelFiles {
    /// Finds a model: `spec` is a local directory, or a hub id / registry alias fetched through
    /// hf-hub (feature `hub`; its cache is used first, so a cached model works offline).
    pub fn resolve(spec: &str) -> Result<ModelFiles> {
        let path = Path::new(spec);
        if path.is_dir() {
            return Self::from_dir(path);
        }
        if looks_like_a_path(spec) || path.exists() {
            return Err(Error::NotFound {
                spec: spec.to_string(),
                message: if path.exists() {
                    "is a file, not a model directory".into()
                } else {
                    "no such directory (a hub id has the form `org/name`)".into()
                },
            });
        }
        let id = registry::find(spec).map_or(spec, |m| m.id.as_str());
        Self::from_hub(spec, id)
    }

    /// A model in a local directory.
    pub fn from_dir(dir: &Path) -> Result<ModelFiles> {
        let need = |name: &str| -> Result<PathBuf> {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(Error::file(
                    p,
                    "missing (expected Hugging Face layout: config.json, tokenizer.json, model.safetensors)",
                ))
            }
        };
        let config = need("config.json")?;
        if !dir.join("tokenizer.json").is_file() && dir.join("spiece.model").is_file() {
            return Err(Error::file(dir.join("tokenizer.json"), NO_TOKENIZER_JSON));
        }
        let tokenizer = if !dir.join("tokenizer.json").is_file() && dir.join(VOCAB).is_file() {
            dir.join(VOCAB)
        } else if !dir.join("tokenizer.json").is_file() && image_only(&config) {
            // an image-only checkpoint (Nomic Embed Vision) tokenises with its text partner
            dir.join("tokenizer.json")
        } else {
            need("tokenizer.json")?
        };
        let weights = if dir.join("model.safetensors").is_file() {
            vec![dir.join("model.safetensors")]
        } else if dir.join("model.safetensors.index.json").is_file() {
            shards(&dir.join("model.safetensors.index.json"))?
                .into_iter()
                .map(|f| dir.join(f))
                .collect()
        } else if dir.join(PTH).is_file() {
            vec![dir.join(PTH)]
        } else {
            return Err(Error::file(
                dir.join("model.safetensors"),
                "missing (nor is there a model.safetensors.index.json or a pytorch_model.bin)",
            ));
        };
        for w in &weights {
            if !w.is_file() {
                return Err(Error::file(w, "weight shard missing"));
            }
        }
        let opt = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        let name = dir
            .canonicalize()
            .unwrap_or_else(|_| dir.to_path_buf())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(ModelFiles {
            name,
            config,
            tokenizer,
            weights,
            pooling: opt(OPTIONAL[0]),
            sentence_config: opt(OPTIONAL[1]),
            preprocessor: opt(OPTIONAL[2]),
            tokenizer_config: opt(OPTIONAL[3]),
            st_config: opt(OPTIONAL[4]),
        })
    }

    #[cfg(not(feature = "hub"))]
    fn from_hub(spec: &str, _id: &str) -> Result<ModelFiles> {
        Err(Error::NotFound {
            spec: spec.to_string(),
            message: "not a local directory, and this build cannot download models (rebuild with the `hub` feature, or pass a directory in Hugging Face layout)".into(),
        })
    }

    #[cfg(feature = "hub")]
    fn from_hub(spec: &str, id: &str) -> Result<ModelFiles> {
        use hf_hub::api::sync::ApiBuilder;
        use hf_hub::{Cache, Repo};
        let not_found = |message: String| Error::NotFound {
            spec: spec.to_string(),
            message,
        };
        let cache = Cache::from_env();
        let cached = cache.repo(Repo::model(id.to_string()));
        let api = ApiBuilder::from_cache(cache.clone())
            .with_progress(true)
            .build()
            .map_err(|e| not_found(format!("hub client: {e}")))?;
        let repo = api.model(id.to_string());
        let get = |file: &str| -> Result<PathBuf> {
            if let Some(p) = cached.get(file) {
                return Ok(p);
            }
            repo.get(file).map_err(|e| {
                not_found(format!(
                    "{file}: {e} (not in the hub cache, and the download failed)"
                ))
            })
        };
        let config = get("config.json")?;
        let tokenizer = match get("tokenizer.json") {
            Ok(p) => p,
            Err(e) => match (get(VOCAB), get("spiece.model")) {
                (Ok(vocab), _) => vocab,
                (Err(_), Ok(spm)) => {
                    return Err(Error::file(
                        spm.with_file_name("tokenizer.json"),
                        format!(
                            "{NO_TOKENIZER_JSON} (the directory is the hub cache snapshot above)"
                        ),
                    ));
                }
                (Err(_), Err(_)) if image_only(&config) => config.with_file_name("tokenizer.json"),
                (Err(_), Err(_)) => return Err(e),
            },
        };
        let weights = match get("model.safetensors") {
            Ok(p) => vec![p],
            Err(first) => match get("model.safetensors.index.json") {
                Ok(index) => {
                    let mut out = Vec::new();
                    for shard in shards(&index)? {
                        out.push(get(&shard)?);
                    }
                    out
                }
                Err(_) => vec![get(PTH).map_err(|_| first)?],
            },
        };
        Ok(ModelFiles {
            name: id.to_string(),
            config,
            tokenizer,
            weights,
            pooling: get(OPTIONAL[0]).ok(),
            sentence_config: get(OPTIONAL[1]).ok(),
            preprocessor: get(OPTIONAL[2]).ok(),
            tokenizer_config: get(OPTIONAL[3]).ok(),
            st_config: get(OPTIONAL[4]).ok(),
        })
    }
}

impl ModelFiles {
    /// The tokenizer: `tokenizer.json` as it is, or, from a BERT `vocab.txt`, the WordPiece
    /// tokenizer transformers builds from it (`BertTokenizerFast`: BERT normaliser with
    /// `do_lower_case`, `tokenize_chinese_chars` and `strip_accents` from
    /// `tokenizer_config.json`, BERT pre-tokeniser, `[CLS] $A [SEP]`, words of more than 100
    /// characters as `[UNK]`).
    pub fn load_tokenizer(&self) -> Result<tokenizers::Tokenizer> {
        if self.tokenizer.file_name().is_none_or(|n| n != VOCAB) {
            return tokenizers::Tokenizer::from_file(&self.tokenizer)
                .map_err(|e| Error::file(&self.tokenizer, e));
        }
        use tokenizers::models::wordpiece::WordPiece;
        use tokenizers::normalizers::BertNormalizer;
        use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
        use tokenizers::processors::bert::BertProcessing;
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct Config {
            do_lower_case: Option<bool>,
            tokenize_chinese_chars: Option<bool>,
            strip_accents: Option<bool>,
            unk_token: Option<String>,
            cls_token: Option<String>,
            sep_token: Option<String>,
            pad_token: Option<String>,
            mask_token: Option<String>,
        }
        let config: Config = match &self.tokenizer_config {
            Some(p) => read_json(p)?,
            None => Config::default(),
        };
        let vocab = &self.tokenizer;
        let bad = |e: String| Error::file(vocab, e);
        let unk = config.unk_token.clone().unwrap_or_else(|| "[UNK]".into());
        let model = WordPiece::from_file(&vocab.to_string_lossy())
            .unk_token(unk)
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(100)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        let mut tok = tokenizers::Tokenizer::new(model);
        let lowercase = config.do_lower_case.unwrap_or(true);
        tok.with_normalizer(Some(BertNormalizer::new(
            true,
            config.tokenize_chinese_chars.unwrap_or(true),
            config.strip_accents,
            lowercase,
        )))
        .map_err(|e| bad(e.to_string()))?;
        tok.with_pre_tokenizer(Some(BertPreTokenizer));
        // the special tokens, matched whole in the text as transformers does ("[CLS]" typed
        // in a passage is the CLS token); those the vocabulary lacks are left out
        let specials: Vec<tokenizers::AddedToken> = [
            (&config.pad_token, "[PAD]"),
            (&config.unk_token, "[UNK]"),
            (&config.cls_token, "[CLS]"),
            (&config.sep_token, "[SEP]"),
            (&config.mask_token, "[MASK]"),
        ]
        .into_iter()
        .map(|(t, d)| t.clone().unwrap_or_else(|| d.to_string()))
        .filter(|t| tok.token_to_id(t).is_some())
        .map(|t| tokenizers::AddedToken::from(t, true))
        .collect();
        tok.add_special_tokens(specials)
            .map_err(|e| bad(e.to_string()))?;
        let special = |t: Option<String>, default: &str| -> Result<(String, u32)> {
            let t = t.unwrap_or_else(|| default.to_string());
            let id = tok
                .token_to_id(&t)
                .ok_or_else(|| bad(format!("the vocabulary has no {t} token")))?;
            Ok((t, id))
        };
        let cls = special(config.cls_token, "[CLS]")?;
        let sep = special(config.sep_token, "[SEP]")?;
        tok.with_post_processor(Some(BertProcessing::new(sep, cls)));
        tok.with_decoder(Some(tokenizers::decoders::wordpiece::WordPiece::default()));
        Ok(tok)
    }

    /// The weights, memory-mapped (safetensors) or read (`pytorch_model.bin`).
    pub fn var_builder(
        &self,
        dtype: candle_core::DType,
        device: &candle_core::Device,
    ) -> Result<candle_nn::VarBuilder<'static>> {
        if let [w] = self.weights.as_slice()
            && w.file_name().is_some_and(|n| n == PTH)
        {
            return candle_nn::VarBuilder::from_pth(w, dtype, device)
                .map_err(|e| Error::file(w, format!("cannot read the PyTorch weights: {e}")));
        }
        let store = SafetensorsFiles::open(&self.weights)?;
        Ok(candle_nn::VarBuilder::from_backend(
            Box::new(store),
            dtype,
            device.clone(),
        ))
    }

    /// A hash of everything in the model's files that decides its vectors: the weights (every
    /// byte of every shard), `config.json`, the tokenizer and its config, the image processor
    /// and sentence-transformers settings. Two directories hold the same model exactly when
    /// their hashes agree, whatever they are called; replacing `model.safetensors` in place
    /// changes it. Reading multi-gigabyte weights takes a few seconds (xxh3-128 runs at
    /// memory speed; the model is read from disk anyway to load it).
    pub fn content_hash(&self) -> Result<String> {
        use std::io::Read;
        let mut hasher = twox_hash::XxHash3_128::new();
        let mut buf = vec![0u8; 1 << 20];
        let files = [
            ("config", Some(&self.config)),
            (
                "tokenizer",
                Some(&self.tokenizer).filter(|t| t.is_file() || !image_only(&self.config)),
            ),
            ("tokenizer_config", self.tokenizer_config.as_ref()),
            ("pooling", self.pooling.as_ref()),
            ("sentence_config", self.sentence_config.as_ref()),
            ("preprocessor", self.preprocessor.as_ref()),
        ]
        .into_iter()
        .chain(self.weights.iter().map(|w| ("weights", Some(w))));
        for (role, path) in files {
            let Some(path) = path else {
                hasher.write(format!("{role}:none;").as_bytes());
                continue;
            };
            let mut file = std::fs::File::open(path).map_err(|e| Error::file(path, e))?;
            let len = file.metadata().map_err(|e| Error::file(path, e))?.len();
            hasher.write(format!("{role}:{len};").as_bytes());
            loop {
                let n = file.read(&mut buf).map_err(|e| Error::file(path, e))?;
                if n == 0 {
                    break;
                }
                hasher.write(&buf[..n]);
            }
        }
        Ok(format!("xxh3-128:{:032x}", hasher.finish_128()))
    }
}

/// What a fingerprint says of a device: vectors computed on another kind of device differ in
/// their last digits.
pub(crate) fn device_class(device: &candle_core::Device) -> &'static str {
    match device {
        candle_core::Device::Cpu => "cpu",
        candle_core::Device::Cuda(_) => "cuda",
        candle_core::Device::Metal(_) => "metal",
    }
}

/// Whether `spec` can only be meant as a path: absolute, relative with `.`/`..`/`~`, or with
/// more than one `/` (hub ids are `org/name`, or a bare name).
fn looks_like_a_path(spec: &str) -> bool {
    spec.starts_with(['/', '.', '~'])
        || spec.contains('\\')
        || spec.matches('/').count() > 1
        || spec.ends_with('/')
}

/// Reads a JSON file of a model (a UTF-8 byte-order mark, which some editors write, is
/// skipped); errors name the file.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|e| Error::file(path, e))?;
    let text = std::str::from_utf8(without_bom(&bytes))
        .map_err(|e| Error::file(path, format!("not UTF-8: {e}")))?;
    serde_json::from_str(text).map_err(|e| Error::file(path, format!("invalid JSON: {e}")))
}

/// `bytes` without a leading UTF-8 byte-order mark.
pub(crate) fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes)
}

/// Shard file names of a safetensors index.
fn shards(index: &Path) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Index {
        weight_map: std::collections::HashMap<String, String>,
    }
    let parsed: Index = read_json(index)?;
    let set: BTreeSet<String> = parsed.weight_map.into_values().collect();
    Ok(set.into_iter().collect())
}

/// Whether `config.json` at `config` is an image-only checkpoint (Nomic Embed Vision), which
/// has no tokenizer of its own.
fn image_only(config: &Path) -> bool {
    read_json::<serde_json::Value>(config).is_ok_and(|v| is_nomic_vision_config(&v))
}

/// Whether a `config.json` is Nomic Embed Vision's (`architectures` names
/// `NomicVisionModel`).
pub(crate) fn is_nomic_vision_config(value: &serde_json::Value) -> bool {
    value
        .get("architectures")
        .and_then(|a| a.as_array())
        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("NomicVisionModel")))
}

/// Safetensors checkpoints read tensor by tensor with positioned reads (not memory-mapped):
/// the only copy of a weight in the process is the tensor made from it, so loading a model
/// needs its size in memory once, not twice (a mapped file's pages count against the
/// process while the tensors copied out of them are alive), and a model converted or packed
/// at load time peaks at its converted size.
struct SafetensorsFiles {
    files: Vec<(PathBuf, std::fs::File)>,
    tensors: std::collections::HashMap<String, Entry>,
}

/// Where a tensor lies: its file, dtype, shape and absolute byte range.
struct Entry {
    file: usize,
    dtype: candle_core::DType,
    shape: Vec<usize>,
    start: u64,
    end: u64,
}

impl SafetensorsFiles {
    fn open(paths: &[PathBuf]) -> Result<SafetensorsFiles> {
        use std::io::Read;
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors = std::collections::HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let bad = |m: String| Error::file(path, format!("not a safetensors file: {m}"));
            let mut f = std::fs::File::open(path).map_err(|e| Error::file(path, e))?;
            let size = f.metadata().map_err(|e| Error::file(path, e))?.len();
            let mut len = [0u8; 8];
            f.read_exact(&mut len)
                .map_err(|e| bad(format!("no header length ({e})")))?;
            let len = u64::from_le_bytes(len);
            if len > 100 << 20 || 8 + len > size {
                return Err(bad(format!(
                    "a header of {len} bytes in a {size}-byte file"
                )));
            }
            let mut header = vec![0u8; len as usize];
            f.read_exact(&mut header)
                .map_err(|e| bad(format!("header cut short ({e})")))?;
            let header: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
            let base = 8 + len;
            for (name, t) in header {
                if name == "__metadata__" {
                    continue;
                }
                let field = |k: &str| t.get(k).ok_or_else(|| bad(format!("{name}: no {k}")));
                let dtype = match field("dtype")?.as_str().unwrap_or("") {
                    "BF16" => candle_core::DType::BF16,
                    "F16" => candle_core::DType::F16,
                    "F32" => candle_core::DType::F32,
                    "F64" => candle_core::DType::F64,
                    "I64" => candle_core::DType::I64,
                    "U32" => candle_core::DType::U32,
                    "U8" | "BOOL" => candle_core::DType::U8,
                    other => return Err(bad(format!("{name}: dtype {other:?} is not supported"))),
                };
                let shape: Vec<usize> = serde_json::from_value(field("shape")?.clone())
                    .map_err(|e| bad(format!("{name}: shape: {e}")))?;
                let offsets: [u64; 2] = serde_json::from_value(field("data_offsets")?.clone())
                    .map_err(|e| bad(format!("{name}: data_offsets: {e}")))?;
                let bytes = shape.iter().product::<usize>() as u64 * dtype.size_in_bytes() as u64;
                if offsets[1] < offsets[0]
                    || offsets[1] - offsets[0] != bytes
                    || base + offsets[1] > size
                {
                    return Err(bad(format!(
                        "{name}: bytes {}..{} do not hold a {dtype:?} tensor of shape {shape:?} \
                         inside the file",
                        offsets[0], offsets[1]
                    )));
                }
                tensors.insert(
                    name,
                    Entry {
                        file: i,
                        dtype,
                        shape,
                        start: base + offsets[0],
                        end: base + offsets[1],
                    },
                );
            }
            files.push((path.clone(), f));
        }
        Ok(SafetensorsFiles { files, tensors })
    }
}

impl candle_nn::var_builder::SimpleBackend for SafetensorsFiles {
    fn get(
        &self,
        s: candle_core::Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: candle_core::DType,
        dev: &candle_core::Device,
    ) -> candle_core::Result<candle_core::Tensor> {
        if let Some(e) = self.tensors.get(name)
            && e.shape != s.dims()
        {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: e.shape.clone().into(),
            }
            .bt());
        }
        self.get_unchecked(name, dtype, dev)
    }

    fn get_unchecked(
        &self,
        name: &str,
        dtype: candle_core::DType,
        dev: &candle_core::Device,
    ) -> candle_core::Result<candle_core::Tensor> {
        use std::os::unix::fs::FileExt;
        let e = self.tensors.get(name).ok_or_else(|| {
            candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            }
            .bt()
        })?;
        let (path, file) = &self.files[e.file];
        let mut bytes = vec![0u8; (e.end - e.start) as usize];
        file.read_exact_at(&mut bytes, e.start).map_err(|err| {
            candle_core::Error::Msg(format!("{}: reading {name}: {err}", path.display()))
        })?;
        let t = candle_core::Tensor::from_raw_buffer(
            &bytes,
            e.dtype,
            &e.shape,
            &candle_core::Device::Cpu,
        )?;
        drop(bytes);
        t.to_dtype(dtype)?.to_device(dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Tensor};

    #[test]
    fn safetensors_are_read_by_name_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let a = Tensor::arange(0f32, 6.0, &Device::Cpu)
            .unwrap()
            .reshape((2, 3))
            .unwrap();
        let b = Tensor::new(&[1u32, 2, 3], &Device::Cpu).unwrap();
        candle_core::safetensors::save(
            &std::collections::HashMap::from([("a".to_string(), a.clone()), ("b".into(), b)]),
            &path,
        )
        .unwrap();
        let store = SafetensorsFiles::open(std::slice::from_ref(&path)).unwrap();
        let vb = candle_nn::VarBuilder::from_backend(Box::new(store), DType::BF16, Device::Cpu);
        let got = vb.get((2, 3), "a").unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        assert_eq!(
            got.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap(),
            a.to_vec2::<f32>().unwrap()
        );
        assert!(vb.contains_tensor("b") && !vb.contains_tensor("c"));
        let wrong = vb.get((3, 2), "a").unwrap_err().to_string();
        assert!(wrong.contains("shape mismatch for a"), "{wrong}");
        assert!(vb.get(3, "c").is_err());

        // cut inside the data, and inside the header: the error names the file
        let bytes = std::fs::read(&path).unwrap();
        for cut in [bytes.len() - 4, 20, 3] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let e = SafetensorsFiles::open(std::slice::from_ref(&path))
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains("model.safetensors") && e.contains("not a safetensors file"),
                "{e}"
            );
        }
    }
}
