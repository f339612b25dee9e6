//! Query encoding: each query's text (and, for Tasks 2-4 with models that embed images, its
//! images) as one vector per dense model.
use std::collections::HashMap;
use std::path::Path;

use sift_core::{Example, WarningKind, Warnings};
use sift_embed::{Embedder, JointInput, PreparedImage, Role};

use crate::Result;
use crate::models::ModelSet;
use crate::spec::RetrieverSpec;

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
pub fn encode_queries(
    models: &ModelSet,
    retriever: &RetrieverSpec,
    queries: &[Example],
    images: Option<QueryImages>,
    query_images: &HashMap<String, Vec<u8>>,
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
        let vectors = match images {
            Some(mode) if embedder.capabilities().joint => {
                joint_vectors(embedder, queries, mode, query_images, warnings, source)?
            }
            Some(mode) if embedder.capabilities().images => {
                fused_vectors(embedder, queries, mode, query_images, warnings, source)?
            }
            _ => {
                let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
                embedder.embed_texts(&texts, Role::Query)?
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
    warnings: &mut Warnings,
    source: &Path,
) -> Result<Vec<Vec<f32>>> {
    let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
    let text = embedder.embed_texts(&texts, Role::Query)?;
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
    Ok(embedder.embed_joint(&inputs, Role::Query)?)
}
