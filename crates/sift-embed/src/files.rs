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
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// `model.safetensors`, or every shard named by `model.safetensors.index.json`.
    pub weights: Vec<PathBuf>,
    /// sentence-transformers `1_Pooling/config.json`, when present.
    pub pooling: Option<PathBuf>,
    /// sentence-transformers `sentence_bert_config.json`, when present.
    pub sentence_config: Option<PathBuf>,
    /// `preprocessor_config.json` (image models), when present.
    pub preprocessor: Option<PathBuf>,
    /// `tokenizer_config.json`, when present.
    pub tokenizer_config: Option<PathBuf>,
}

const NO_TOKENIZER_JSON: &str = "missing: this model ships only a SentencePiece spiece.model \
(SigLIP v1); write tokenizer.json next to it once with `python3 models/siglip_tokenizer_json.py DIR`";

const OPTIONAL: [&str; 4] = [
    "1_Pooling/config.json",
    "sentence_bert_config.json",
    "preprocessor_config.json",
    "tokenizer_config.json",
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
        let tokenizer = need("tokenizer.json")?;
        let weights = if dir.join("model.safetensors").is_file() {
            vec![dir.join("model.safetensors")]
        } else if dir.join("model.safetensors.index.json").is_file() {
            shards(&dir.join("model.safetensors.index.json"))?
                .into_iter()
                .map(|f| dir.join(f))
                .collect()
        } else {
            return Err(Error::file(
                dir.join("model.safetensors"),
                "missing (nor is there a model.safetensors.index.json)",
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
        let tokenizer = get("tokenizer.json").map_err(|e| match get("spiece.model") {
            Ok(spm) => Error::file(
                spm.with_file_name("tokenizer.json"),
                format!("{NO_TOKENIZER_JSON} (the directory is the hub cache snapshot above)"),
            ),
            Err(_) => e,
        })?;
        let weights = match get("model.safetensors") {
            Ok(p) => vec![p],
            Err(first) => {
                let index = get("model.safetensors.index.json").map_err(|_| first)?;
                let mut out = Vec::new();
                for shard in shards(&index)? {
                    out.push(get(&shard)?);
                }
                out
            }
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
        })
    }
}

impl ModelFiles {
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
            ("tokenizer", Some(&self.tokenizer)),
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
