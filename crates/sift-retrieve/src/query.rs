//! Query encoding: each query's text (and, for Tasks 2-4 with models that embed images, its
//! images) as one vector per dense model.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sift_core::{Example, WarningKind, Warnings};
use sift_embed::{Embedder, JointInput, PreparedImage, Role};

use crate::Result;
use crate::models::ModelSet;
use crate::spec::RetrieverSpec;

/// The task instruction queries carry, for models that take one
/// ([`Embedder::takes_instruction`]: a prompt format for one in the registry, or GME's
/// system prompt); other models embed queries as they always do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Instructions {
    /// The reference code's: MM-BRIGHT's configs give no instruction, so every model uses its
    /// default query prefix (E5-Mistral: none; GritLM: `<|embed|>\n`).
    #[default]
    Reference,
    /// BRIGHT's per-domain instruction for each model BRIGHT has one for (the registry's
    /// `bright_instruction`, e.g. "Given a {domain} post, retrieve relevant passages that
    /// help answer the post"), in the model's prompt format; the default for the others.
    Bright,
    /// One instruction for every model that takes one; `{domain}` stands for the domain.
    Text(String),
    /// Per-domain instructions read from a JSON object (domain -> instruction; `"*"`: every
    /// domain not named); `{domain}` stands for the domain.
    PerDomain {
        /// The file they came from (for errors).
        source: PathBuf,
        /// Domain -> instruction.
        map: BTreeMap<String, String>,
    },
}

impl Instructions {
    /// Reads per-domain instructions from a JSON file (`{"biology": "...", "*": "..."}`).
    pub fn from_file(path: &Path) -> Result<Instructions> {
        let text = std::fs::read_to_string(path).map_err(|source| crate::Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let map: BTreeMap<String, String> = serde_json::from_str(&text).map_err(|e| {
            crate::Error::Unsupported(format!(
                "{}: not a JSON object of domain -> instruction strings: {e}",
                path.display()
            ))
        })?;
        Ok(Instructions::PerDomain {
            source: path.to_path_buf(),
            map,
        })
    }

    /// Lower-case name (`reference`, `bright`, `text`, `file`).
    pub fn name(&self) -> &'static str {
        match self {
            Instructions::Reference => "reference",
            Instructions::Bright => "bright",
            Instructions::Text(_) => "text",
            Instructions::PerDomain { .. } => "file",
        }
    }

    /// The instruction `embedder`'s queries in `domain` carry (`None`: its default prefix).
    pub fn for_model(&self, embedder: &Embedder, domain: &str) -> Result<Option<String>> {
        if !embedder.takes_instruction() {
            return Ok(None);
        }
        let fill = |t: &str| t.replace("{domain}", domain);
        Ok(match self {
            Instructions::Reference => None,
            Instructions::Bright => embedder.bright_instruction().map(fill),
            Instructions::Text(t) => Some(fill(t)),
            Instructions::PerDomain { source, map } => {
                let t = map.get(domain).or_else(|| map.get("*")).ok_or_else(|| {
                    crate::Error::Unsupported(format!(
                        "{}: no instruction for domain {domain:?} (and no \"*\" entry)",
                        source.display()
                    ))
                })?;
                Some(fill(t))
            }
        })
    }
}

/// How a model that embeds images combines a query's text and images into one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum QueryImages {
    /// Text and images weighted equally: the text vector plus the mean of the vectors of all
    /// the query's images, renormalised; a query without images uses its text vector. GME
    /// embeds the text and every image in one prompt.
    All,
    /// The reference code's rule: normalise((text + first image) / 2), a blank white image
    /// standing in when the query has none. GME embeds the text and the first image.
    First,
}

impl QueryImages {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            QueryImages::All => "all",
            QueryImages::First => "first",
        }
    }
}

/// Query vectors by dense index name, one per query in query order.
#[derive(Debug, Clone, Default)]
pub struct QueryVectors {
    by_name: HashMap<String, Vec<Vec<f32>>>,
}

impl QueryVectors {
    /// The vector of query `i` for the dense index a retriever called `name`.
    pub fn get(&self, name: &str, i: usize) -> Option<&[f32]> {
        self.by_name.get(name)?.get(i).map(Vec::as_slice)
    }

    /// Sets the vectors of dense index `name`.
    pub fn insert(&mut self, name: &str, vectors: Vec<Vec<f32>>) {
        self.by_name.insert(name.to_string(), vectors);
    }
}

/// Embeds `queries` for every dense index `retriever` uses. With `images` (Tasks 2-4), models
/// that embed images combine each query's text with its images (`query_images`: normalised
/// path -> encoded bytes) as `images` says; text models, and every model without `images`,
/// use the text alone. Query images that are missing or do not decode are skipped and
/// counted in `warnings` (naming `source`).
#[allow(clippy::too_many_arguments)]
pub fn encode_queries(
    models: &ModelSet,
    retriever: &RetrieverSpec,
    queries: &[Example],
    images: Option<QueryImages>,
    query_images: &HashMap<String, Vec<u8>>,
    instructions: &Instructions,
    domain: &str,
    warnings: &mut Warnings,
    source: &Path,
) -> Result<QueryVectors> {
    let mut out = QueryVectors::default();
    let mut names = retriever.dense_names();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let embedder = models
            .get(name)
            .ok_or_else(|| crate::Error::Unsupported(format!("dense:{name} is not loaded")))?;
        let instruction = instructions.for_model(embedder, domain)?;
        let instruction = instruction.as_deref();
        let vectors = match images {
            Some(mode) if embedder.capabilities().joint => joint_vectors(
                embedder,
                queries,
                mode,
                query_images,
                instruction,
                warnings,
                source,
            )?,
            Some(mode) if embedder.capabilities().images => fused_vectors(
                embedder,
                queries,
                mode,
                query_images,
                instruction,
                warnings,
                source,
            )?,
            _ => {
                let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
                embedder.embed_queries(&texts, instruction)?
            }
        };
        out.insert(name, vectors);
    }
    Ok(out)
}

/// `normalise(a + b)`.
pub fn normalized_sum(a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut v: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Models with separate towers: the text vector fused with the query images' vectors.
fn fused_vectors(
    embedder: &Embedder,
    queries: &[Example],
    mode: QueryImages,
    query_images: &HashMap<String, Vec<u8>>,
    instruction: Option<&str>,
    warnings: &mut Warnings,
    source: &Path,
) -> Result<Vec<Vec<f32>>> {
    let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
    let text = embedder.embed_queries(&texts, instruction)?;
    // embed each distinct query image once
    let mut paths: Vec<&str> = queries
        .iter()
        .flat_map(|q| q.image_paths.iter().map(String::as_str))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let mut bytes: Vec<&[u8]> = Vec::new();
    let mut present: Vec<&str> = Vec::new();
    for p in &paths {
        match query_images.get(*p) {
            Some(b) => {
                bytes.push(b);
                present.push(p);
            }
            None => warnings.push(
                WarningKind::MissingImageBytes,
                source,
                String::new(),
                format!("query image {p:?} is not in examples_images: skipped"),
            ),
        }
    }
    let mut ok_paths = Vec::new();
    let mut inputs = Vec::new();
    for (p, r) in present.iter().zip(embedder.prepare_images(&bytes)) {
        match r {
            Ok(x) => {
                ok_paths.push(*p);
                inputs.push(x);
            }
            Err(e) => warnings.push(
                WarningKind::UndecodableImage,
                source,
                String::new(),
                format!("query image {p:?}: {e}: skipped"),
            ),
        }
    }
    let vecs = embedder.embed_images(&inputs)?;
    let by_path: HashMap<&str, &Vec<f32>> = ok_paths.into_iter().zip(&vecs).collect();
    let blank = match mode {
        QueryImages::First => Some(embedder.blank_image_vector()?),
        QueryImages::All => None,
    };
    Ok(queries
        .iter()
        .zip(text)
        .map(|(q, t)| match mode {
            QueryImages::First => {
                // the first query image; the blank image when it is absent
                let first = q
                    .image_paths
                    .first()
                    .and_then(|p| by_path.get(p.as_str()).copied())
                    .unwrap_or_else(|| blank.as_ref().expect("set for first"));
                normalized_sum(&t, first)
            }
            QueryImages::All => {
                let imgs: Vec<&Vec<f32>> = q
                    .image_paths
                    .iter()
                    .filter_map(|p| by_path.get(p.as_str()).copied())
                    .collect();
                if imgs.is_empty() {
                    return t;
                }
                let mut mean = vec![0f32; t.len()];
                for v in &imgs {
                    mean.iter_mut().zip(v.iter()).for_each(|(m, x)| *m += x);
                }
                let n = imgs.len() as f32;
                mean.iter_mut().for_each(|m| *m /= n);
                normalized_sum(&t, &mean)
            }
        })
        .collect())
}

/// Models that read text and images in one input (GME): each query's text and images in one
/// prompt: every image with [`QueryImages::All`], the first with [`QueryImages::First`]; a
/// query without images is its text alone. With several images each gets at most an equal
/// share of the prompt length.
fn joint_vectors(
    embedder: &Embedder,
    queries: &[Example],
    mode: QueryImages,
    query_images: &HashMap<String, Vec<u8>>,
    instruction: Option<&str>,
    warnings: &mut Warnings,
    source: &Path,
) -> Result<Vec<Vec<f32>>> {
    let mut prepared: Vec<Vec<PreparedImage>> = Vec::with_capacity(queries.len());
    for q in queries {
        let paths: &[String] = match mode {
            QueryImages::All => &q.image_paths,
            QueryImages::First => &q.image_paths[..q.image_paths.len().min(1)],
        };
        let mut imgs = Vec::new();
        for p in paths {
            let Some(bytes) = query_images.get(p) else {
                warnings.push(
                    WarningKind::MissingImageBytes,
                    source,
                    q.id.clone(),
                    format!("query image {p:?} is not in examples_images: skipped"),
                );
                continue;
            };
            match embedder.prepare_query_image(bytes, paths.len()) {
                Ok(img) => imgs.push(img),
                Err(e) => warnings.push(
                    WarningKind::UndecodableImage,
                    source,
                    q.id.clone(),
                    format!("query image {p:?}: {e}: skipped"),
                ),
            }
        }
        prepared.push(imgs);
    }
    let refs: Vec<Vec<&PreparedImage>> = prepared.iter().map(|v| v.iter().collect()).collect();
    let inputs: Vec<JointInput<'_>> = queries
        .iter()
        .zip(&refs)
        .map(|(q, imgs)| JointInput {
            text: Some(q.query.as_str()),
            images: imgs,
        })
        .collect();
    Ok(embedder.embed_joint_queries(&inputs, Role::Query, instruction)?)
}
