//! Query encoding: each query's text (and, for Tasks 2-4 with models that embed images, its
//! images) as one vector per dense model.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sift_core::{Example, WarningKind, Warnings};
use sift_embed::image::Decode;
use sift_embed::profile::BgeVlCut;
use sift_embed::{Embedder, JointInput, PreparedImage, ReferenceModel, Role};
use sift_eval::Task;

use crate::Result;
use crate::models::ModelSet;
use crate::reference::{MissingImage, ReferenceFusion, reference_rule};
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
        let text = sift_core::read_regular_text(path, sift_core::TEXT_FILE_LIMIT)?;
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
    /// normalise((text + first image) / 2) of the unit vectors, a blank white image
    /// standing in when the query has none. GME embeds the text and the first image.
    First,
    /// MM-BRIGHT's reference code's rule for each model and task ([`reference_rule`]): the
    /// first image only, fused as the reference fuses that model's vectors.
    Reference,
}

/// Which query-image modes an evaluation runs: one of [`QueryImages`], or `All` and `First`
/// both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum QueryFusion {
    /// Text and the mean of all query images, weighted equally
    All,
    /// Text and the first image (a blank white image when there is none)
    First,
    /// MM-BRIGHT's reference code's rule for each model and task
    Reference,
    /// All and first, each its own row
    Both,
}

impl QueryFusion {
    /// The modes run.
    pub fn modes(self) -> Vec<QueryImages> {
        match self {
            QueryFusion::All => vec![QueryImages::All],
            QueryFusion::First => vec![QueryImages::First],
            QueryFusion::Reference => vec![QueryImages::Reference],
            QueryFusion::Both => vec![QueryImages::All, QueryImages::First],
        }
    }

    /// The protocol and query fusion an evaluation runs by default under `profile`: a
    /// reference profile's are the released code's ([`Protocol::Legacy`]: its qrels make
    /// every pair of a gold passage relevant, and its negative ids, passage ids, never
    /// match a pair id, eval_runner.py:260-268; and its fusion rule per model), otherwise
    /// the paper's with all query images.
    ///
    /// [`Protocol::Legacy`]: sift_eval::Protocol::Legacy
    pub fn defaults(profile: sift_embed::Profile) -> (sift_eval::Protocol, QueryFusion) {
        if profile.is_reference() {
            (sift_eval::Protocol::Legacy, QueryFusion::Reference)
        } else {
            (sift_eval::Protocol::Paper, QueryFusion::All)
        }
    }
}

impl std::str::FromStr for QueryFusion {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "all" => Ok(QueryFusion::All),
            "first" => Ok(QueryFusion::First),
            "reference" => Ok(QueryFusion::Reference),
            "both" => Ok(QueryFusion::Both),
            other => Err(format!(
                "query fusion {other:?}: give all, first, reference or both"
            )),
        }
    }
}

impl QueryImages {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            QueryImages::All => "all",
            QueryImages::First => "first",
            QueryImages::Reference => "reference",
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

/// Embeds `queries` of `task` for every dense index `retriever` uses. With `images` (Tasks
/// 2-4), models that embed images combine each query's text with its images
/// (`query_images`: normalised path -> encoded bytes) as `images` says; text models, and
/// every model without `images`, use the text alone. Query images that are missing or do
/// not decode are skipped and counted in `warnings` (naming `source`).
#[allow(clippy::too_many_arguments)]
pub fn encode_queries(
    models: &ModelSet,
    retriever: &RetrieverSpec,
    task: Task,
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
        let mut batch = Batch {
            queries,
            query_images,
            instruction,
            warnings: &mut *warnings,
            source,
        };
        let vectors = match images {
            Some(QueryImages::Reference) if embedder.capabilities().images => {
                reference_vectors(embedder, task, &mut batch)?
            }
            Some(mode) if embedder.capabilities().joint => {
                joint_vectors(embedder, mode, &mut batch)?
            }
            Some(mode) if embedder.capabilities().images => {
                fused_vectors(embedder, mode, &mut batch)?
            }
            _ => {
                let texts: Vec<&str> = queries.iter().map(|q| q.query.as_str()).collect();
                embedder.embed_queries(&texts, instruction)?
            }
        };
        out.insert(name, vectors);
    }
    Ok(out)
}

/// One query's vectors for every dense index `retriever` uses: its text and its images
/// (encoded bytes, in order), fused as `images_mode` says for `task`, as [`encode_queries`]
/// does for a task's queries. A query with images and no text is the mean of its images'
/// unit vectors, renormalised. Images that are missing or do not decode are counted in
/// `warnings` (as `images[i]`), or, for a query of images alone, refused.
#[allow(clippy::too_many_arguments)]
pub fn encode_query(
    models: &ModelSet,
    retriever: &RetrieverSpec,
    task: Task,
    text: &str,
    images: &[&[u8]],
    images_mode: Option<QueryImages>,
    instructions: &Instructions,
    domain: &str,
    warnings: &mut Warnings,
) -> Result<QueryVectors> {
    let mut names = retriever.dense_names();
    names.sort_unstable();
    names.dedup();
    if text.trim().is_empty() && !images.is_empty() {
        let mut out = QueryVectors::default();
        for name in names {
            let model = models
                .get(name)
                .ok_or_else(|| crate::Error::Unsupported(format!("dense:{name} is not loaded")))?;
            let prepared = model
                .prepare_images(images)
                .into_iter()
                .enumerate()
                .map(|(i, r)| {
                    r.map_err(|e| crate::Error::QueryImage {
                        index: i,
                        message: e.to_string(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let vecs = model.embed_images(&prepared)?;
            let mut mean = vec![0f32; model.dim()];
            for v in &vecs {
                mean.iter_mut().zip(v).for_each(|(m, x)| *m += x);
            }
            let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            mean.iter_mut().for_each(|x| *x /= norm);
            out.insert(name, vec![mean]);
        }
        return Ok(out);
    }
    let ids: Vec<String> = (0..images.len()).map(|i| format!("images[{i}]")).collect();
    let query_images: HashMap<String, Vec<u8>> = ids
        .iter()
        .cloned()
        .zip(images.iter().map(|b| b.to_vec()))
        .collect();
    let example = Example {
        id: "query".into(),
        query: text.to_string(),
        image_paths: ids,
        ..Example::default()
    };
    encode_queries(
        models,
        retriever,
        task,
        std::slice::from_ref(&example),
        images_mode,
        &query_images,
        instructions,
        domain,
        warnings,
        Path::new("query"),
    )
}

/// `normalise(a + b)`.
pub fn normalized_sum(a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut v: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// A task's queries as one model encodes them: their image bytes (normalised path ->
/// encoded bytes), the model's instruction, and where skipped images are counted.
struct Batch<'a> {
    queries: &'a [Example],
    query_images: &'a HashMap<String, Vec<u8>>,
    instruction: Option<&'a str>,
    warnings: &'a mut Warnings,
    /// The file the queries came from (named in warnings).
    source: &'a Path,
}

/// Models with separate towers: the text vector fused with the query images' vectors.
fn fused_vectors(
    embedder: &Embedder,
    mode: QueryImages,
    b: &mut Batch<'_>,
) -> Result<Vec<Vec<f32>>> {
    let Batch {
        queries,
        query_images,
        instruction,
        ref mut warnings,
        source,
    } = *b;
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
        QueryImages::All | QueryImages::Reference => None,
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
            QueryImages::All | QueryImages::Reference => {
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

/// Which of a query's images to prepare.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Every one.
    All,
    /// `image_paths[0]` only.
    First,
    /// The first that loads: the reference code's data loader drops the query's images that
    /// are missing or do not decode before it takes the first (MM-BRIGHT `src/data.py`
    /// 186-222: `_load_images_parquet` keeps the images Pillow decodes,
    /// `get_query_pil_images` the query's paths among them), so the first image is the
    /// first that loads, not `image_paths[0]`.
    FirstThatLoads,
}

/// Each query's images prepared for `embedder` as one input holds them (those `take` names);
/// images that are missing or do not decode are skipped and counted in `warnings`.
fn prepare_query_images(
    embedder: &Embedder,
    b: &mut Batch<'_>,
    take: Take,
    load: (Decode, Option<(u32, u32)>),
) -> Vec<Vec<PreparedImage>> {
    let Batch {
        queries,
        query_images,
        ref mut warnings,
        source,
        ..
    } = *b;
    let mut prepared: Vec<Vec<PreparedImage>> = Vec::with_capacity(queries.len());
    for q in queries {
        let paths: &[String] = match take {
            Take::All | Take::FirstThatLoads => &q.image_paths,
            Take::First => &q.image_paths[..q.image_paths.len().min(1)],
        };
        // each image's share of one input: a single image has it whole
        let share = if take == Take::All { paths.len() } else { 1 };
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
            match embedder.prepare_query_image_with(bytes, share, load.0, load.1) {
                Ok(img) => {
                    imgs.push(img);
                    if take == Take::FirstThatLoads {
                        break;
                    }
                }
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
    prepared
}

/// Models that read text and images in one input (GME): each query's text and images in one
/// prompt: every image with [`QueryImages::All`], the first with [`QueryImages::First`]; a
/// query without images is its text alone. With several images each gets at most an equal
/// share of the prompt length.
fn joint_vectors(
    embedder: &Embedder,
    mode: QueryImages,
    b: &mut Batch<'_>,
) -> Result<Vec<Vec<f32>>> {
    let take = if mode == QueryImages::All {
        Take::All
    } else {
        Take::First
    };
    let load = (embedder.image_decode(), None);
    let prepared = prepare_query_images(embedder, b, take, load);
    let refs: Vec<Vec<&PreparedImage>> = prepared.iter().map(|v| v.iter().collect()).collect();
    let inputs: Vec<JointInput<'_>> = b
        .queries
        .iter()
        .zip(&refs)
        .map(|(q, imgs)| JointInput {
            text: Some(q.query.as_str()),
            images: imgs,
        })
        .collect();
    Ok(embedder.embed_joint_queries(&inputs, Role::Query, b.instruction)?)
}

/// [`QueryImages::Reference`]: each query's text and first image fused by the reference
/// code's rule for the model and task ([`reference_rule`]). The first image is the first
/// that loads ([`Take::FirstThatLoads`]); a query none of whose images loads has none (the
/// images passed over are counted in `warnings`).
fn reference_vectors(embedder: &Embedder, task: Task, b: &mut Batch<'_>) -> Result<Vec<Vec<f32>>> {
    let (queries, instruction) = (b.queries, b.instruction);
    // Nomic's Task 4 queries: the first 8,000 characters, then the prefix
    // (task4_pair.py:1147)
    let cut = embedder.reference_model() == ReferenceModel::Nomic && task == Task::Pairs;
    // BGE-VL's queries: each task's own character cut (Task 2's is the embedder's own)
    let bge_cut = match (embedder.reference_model(), task) {
        (ReferenceModel::BgeVl, Task::Images) => Some(BgeVlCut::Task3Query),
        (ReferenceModel::BgeVl, Task::Pairs) => Some(BgeVlCut::Task4Query),
        _ => None,
    };
    let bge_texts: Vec<String> = match bge_cut {
        Some(c) => queries
            .iter()
            .map(|q| embedder.reference_text(&q.query, c))
            .collect::<std::result::Result<_, _>>()?,
        None => Vec::new(),
    };
    let texts: Vec<&str> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| match (cut, bge_cut) {
            (true, _) => {
                sift_embed::profile::first_chars(&q.query, sift_embed::profile::NOMIC_DOC_CHARS)
            }
            (false, Some(_)) => bge_texts[i].as_str(),
            (false, None) => q.query.as_str(),
        })
        .collect();
    let Some(rule) = reference_rule(embedder.reference_model(), task, embedder.profile()) else {
        return Ok(embedder.embed_queries(&texts, instruction)?);
    };
    let decode = Decode {
        orient: rule.orient,
        ..embedder.image_decode()
    };
    let firsts: Vec<Option<PreparedImage>> =
        prepare_query_images(embedder, b, Take::FirstThatLoads, (decode, rule.resize))
            .into_iter()
            .map(|v| v.into_iter().next())
            .collect();
    let blank = match (rule.missing, rule.white) {
        (MissingImage::WhiteImage, _) | (_, Some(_)) => Some(embedder.blank_image()?),
        (MissingImage::TextAlone, None) => None,
    };
    // each query's image: its first (or, where the rule replaces it, the white one), else
    // the stand-in (none: the text alone)
    let images: Vec<Option<&PreparedImage>> = firsts
        .iter()
        .map(|f| match (f, rule.white, rule.missing) {
            (Some(_), Some(_), _) => blank.as_ref(),
            (Some(f), None, _) => Some(f),
            (None, _, MissingImage::WhiteImage) => blank.as_ref(),
            (None, _, MissingImage::TextAlone) => None,
        })
        .collect();
    match rule.fusion {
        ReferenceFusion::RawFeatures | ReferenceFusion::Joint => {
            let one: Vec<Vec<&PreparedImage>> =
                images.iter().map(|i| i.iter().copied().collect()).collect();
            let inputs: Vec<JointInput<'_>> = texts
                .iter()
                .zip(&one)
                .map(|(t, imgs)| JointInput {
                    text: Some(t),
                    images: imgs,
                })
                .collect();
            Ok(match rule.fusion {
                ReferenceFusion::RawFeatures => {
                    embedder.embed_features_summed(&inputs, Role::Query)?
                }
                _ => embedder.embed_joint_queries(&inputs, Role::Query, instruction)?,
            })
        }
        ReferenceFusion::UnitVectors => {
            let text = embedder.embed_queries(&texts, instruction)?;
            let present: Vec<PreparedImage> =
                images.iter().flatten().map(|i| (*i).clone()).collect();
            let mut vectors = embedder.embed_images(&present)?.into_iter();
            Ok(text
                .into_iter()
                .zip(&images)
                .map(|(t, i)| match i {
                    Some(_) => normalized_sum(&t, &vectors.next().expect("one per image")),
                    None => t,
                })
                .collect())
        }
    }
}

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;
