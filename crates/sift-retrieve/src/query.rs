//! Query encoding: each query's text (and, for Tasks 2-4 with models that embed images, its
//! images) as one vector per dense model.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sift_core::{Example, WarningKind, Warnings};
use sift_embed::image::Decode;
use sift_embed::profile::BgeVlCut;
use sift_embed::{Embedder, JointInput, PreparedImage, Profile, ReferenceModel, Role};
use sift_eval::Task;

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
    /// normalise((text + first image) / 2) of the unit vectors, a blank white image
    /// standing in when the query has none. GME embeds the text and the first image.
    First,
    /// MM-BRIGHT's reference code's rule for each model and task ([`reference_rule`]): the
    /// first image only, fused as the reference fuses that model's vectors.
    Reference,
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

/// How MM-BRIGHT's reference code makes a query vector from a model's text and first image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceFusion {
    /// normalise(text features + image features) of the towers' raw, unnormalised outputs
    /// (`(t + i) / 2` before normalising).
    RawFeatures,
    /// normalise(text vector + image vector) of unit vectors.
    UnitVectors,
    /// The model's own input of text and image together (GME's prompt; BGE-VL's
    /// `encode(images, text)`).
    Joint,
}

/// What the reference code does for a query without an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingImage {
    /// A blank white image stands in.
    WhiteImage,
    /// The text alone (a zero image vector; a text-only input).
    TextAlone,
}

/// The reference code's query rule for one model and task, with where it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceRule {
    /// How text and image are fused.
    pub fusion: ReferenceFusion,
    /// A query without an image.
    pub missing: MissingImage,
    /// The query's first image is embedded as the blank white image instead (Task 3, Nomic
    /// and Jina-CLIP: the retriever calls `Image.open` on the PIL image the runner hands it,
    /// which raises, and its bare `except` substitutes a white image), where `Some`: the
    /// source of that rule.
    pub white: Option<&'static str>,
    /// Whether the query image's EXIF orientation is applied (`ImageOps.exif_transpose`:
    /// Task 4's CLIP, SigLIP, Jina-CLIP and Nomic, task4_pair.py:75, 103, 357); elsewhere
    /// the image is as the data loader decoded it, in stored orientation.
    pub orient: bool,
    /// The query image is first resized to this (width, height) with Pillow's default
    /// (bicubic) `Image.resize` (SigLIP's Task 3, task3_image.py:421-422).
    pub resize: Option<(u32, u32)>,
    /// File and lines of `mm-bright/MM-BRIGHT` (commit 2d37a4d, `src/retrievers/`).
    pub source: &'static str,
}

/// The reference code's query rule for `model` in `task` under `profile` (one of the
/// reference profiles; docs/reference-profile.md); `None` for Task 1 and for models it has
/// no multimodal rule for (their text alone).
pub fn reference_rule(
    model: ReferenceModel,
    task: Task,
    profile: Profile,
) -> Option<ReferenceRule> {
    use MissingImage::*;
    use ReferenceFusion::*;
    // Task 4 turns CLIP's, SigLIP's, Jina-CLIP's and Nomic's query images upright; BGE-VL's
    // and GME's queries reach their models as temporary PNGs, which carry no EXIF
    let orient = task == Task::Pairs
        && matches!(
            model,
            ReferenceModel::Clip
                | ReferenceModel::Siglip
                | ReferenceModel::JinaClip
                | ReferenceModel::Nomic
        );
    let white = match (model, task, profile) {
        (ReferenceModel::Nomic, Task::Images, Profile::Reference) => {
            Some("task3_image.py:621-629 (Image.open(<PIL image>) raises; a white image instead)")
        }
        (ReferenceModel::JinaClip, Task::Images, Profile::Reference) => {
            Some("task3_image.py:526-536 (Image.open(<PIL image>) raises; a white image instead)")
        }
        _ => None,
    };
    let resize = (model == ReferenceModel::Siglip && task == Task::Images).then_some((384, 384));
    let rule = |fusion, missing, source| {
        Some(ReferenceRule {
            fusion,
            missing,
            white,
            orient,
            resize,
            source,
        })
    };
    match (model, task) {
        (_, Task::Passages) | (ReferenceModel::Other, _) => None,
        (ReferenceModel::Clip, Task::MultimodalPassages) => {
            rule(RawFeatures, WhiteImage, "task2_multimodal.py:82-115")
        }
        (ReferenceModel::Clip, Task::Images) => {
            rule(RawFeatures, WhiteImage, "task3_image.py:252-282")
        }
        (ReferenceModel::Clip, Task::Pairs) => {
            rule(RawFeatures, WhiteImage, "task4_pair.py:307-327")
        }
        (ReferenceModel::Siglip, Task::MultimodalPassages) => {
            rule(RawFeatures, WhiteImage, "task2_multimodal.py:187-216")
        }
        (ReferenceModel::Siglip, Task::Images) => {
            rule(RawFeatures, WhiteImage, "task3_image.py:408-453")
        }
        (ReferenceModel::Siglip, Task::Pairs) => {
            rule(RawFeatures, WhiteImage, "task4_pair.py:455-477")
        }
        (ReferenceModel::Nomic, Task::MultimodalPassages) => {
            rule(UnitVectors, TextAlone, "task2_multimodal.py:507-533")
        }
        (ReferenceModel::Nomic, Task::Images) => {
            rule(UnitVectors, WhiteImage, "task3_image.py:612-637")
        }
        (ReferenceModel::Nomic, Task::Pairs) => {
            rule(UnitVectors, TextAlone, "task4_pair.py:1147-1176")
        }
        (ReferenceModel::BgeVl, Task::MultimodalPassages) => {
            rule(Joint, TextAlone, "task2_multimodal.py:785-812")
        }
        (ReferenceModel::BgeVl, Task::Images) => {
            rule(UnitVectors, TextAlone, "task3_image.py:801-835")
        }
        (ReferenceModel::BgeVl, Task::Pairs) => rule(Joint, TextAlone, "task4_pair.py:796-830"),
        (ReferenceModel::Gme, Task::MultimodalPassages) => {
            rule(Joint, TextAlone, "task2_multimodal.py:983-1002")
        }
        (ReferenceModel::Gme, Task::Images) => rule(Joint, TextAlone, "task3_image.py:917-944"),
        (ReferenceModel::Gme, Task::Pairs) => rule(Joint, TextAlone, "task4_pair.py:993-1036"),
        (ReferenceModel::JinaClip, Task::MultimodalPassages) => {
            rule(UnitVectors, TextAlone, "task2_multimodal.py:281-333")
        }
        (ReferenceModel::JinaClip, Task::Images) => {
            rule(UnitVectors, TextAlone, "task3_image.py:514-540")
        }
        (ReferenceModel::JinaClip, Task::Pairs) => {
            rule(UnitVectors, WhiteImage, "task4_pair.py:563-588")
        }
    }
}

/// Where the reference code, under `profile`, embeds every corpus image of Task 3 as the
/// same white image (Nomic and Jina-CLIP: the runner hands the retriever PIL images, the
/// retriever calls `Image.open` on each, which raises, and its bare `except` substitutes
/// `Image.new("RGB", (224, 224), "white")`): the source of that rule; `None` where the
/// corpus images are the index's.
pub fn reference_white_corpus(model: ReferenceModel, profile: Profile) -> Option<&'static str> {
    match (model, profile) {
        (ReferenceModel::Nomic, Profile::Reference) => Some("task3_image.py:586-590"),
        (ReferenceModel::JinaClip, Profile::Reference) => Some("task3_image.py:496-500"),
        _ => None,
    }
}

/// The white image's vector standing in for every corpus image of Task 3, for the dense
/// indexes `retriever` uses whose model the reference code treats so
/// ([`reference_white_corpus`]).
pub fn reference_image_stand_ins(
    models: &ModelSet,
    retriever: &RetrieverSpec,
) -> Result<crate::PairStandIns> {
    let mut out = crate::PairStandIns::new();
    for name in retriever.dense_names() {
        let Some(e) = models.get(name) else { continue };
        if reference_white_corpus(e.reference_model(), e.profile()).is_some() {
            out.insert(name.to_string(), e.blank_image_vector()?);
        }
    }
    Ok(out)
}

/// How the reference code embeds a model's Task 4 candidate pairs, and whether Sift's pair
/// scoring reproduces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferencePairs {
    /// normalise(unit passage + unit image), a text-only pair as its passage: Sift's own
    /// pair scoring (pairs whose image carries an EXIF orientation are embedded at
    /// evaluation time, upright, as [`ReferencePairs::Embedded`]).
    UnitVectors(&'static str),
    /// The same, with a white image for text-only pairs ([`crate::PairStandIns`]).
    UnitVectorsWhiteImage(&'static str),
    /// Raw features or a joint input, which do not follow from the index's unit vectors:
    /// the pairs are embedded at evaluation time ([`crate::reference_pair_vectors`]).
    Embedded(&'static str),
}

/// The reference code's Task 4 pair embedding for `model` under `profile`
/// (docs/reference-profile.md); `None` for models it has no multimodal rule for.
pub fn reference_pairs(model: ReferenceModel, profile: Profile) -> Option<ReferencePairs> {
    use ReferencePairs::*;
    let blank = profile == Profile::Reference;
    Some(match model {
        ReferenceModel::Nomic => UnitVectors("task4_pair.py:1090-1121"),
        ReferenceModel::JinaClip => UnitVectorsWhiteImage("task4_pair.py:524-541"),
        ReferenceModel::Clip => Embedded(
            "raw text + image features, a white image for text-only pairs (task4_pair.py:268-285)",
        ),
        ReferenceModel::Siglip => Embedded(
            "raw text + image features, a white image for text-only pairs (task4_pair.py:405-433)",
        ),
        ReferenceModel::BgeVl if blank => Embedded(
            "encode(images, text) per pair with the blank 224 x 224 image for every pair's \
             image (safe_rgb_path gets a PIL image, whose str() names no file: \
             task4_pair.py:663-670, 716), the text alone for text-only pairs (task4_pair.py:708-741)",
        ),
        ReferenceModel::BgeVl => Embedded(
            "encode(images, text) per pair, the text alone for text-only pairs (task4_pair.py:708-741)",
        ),
        ReferenceModel::Gme if blank => Embedded(
            "one joint input per pair with the blank 224 x 224 image for every pair's image \
             (safe_img_path gets a PIL image: Image.open(str(img)) raises, task4_pair.py:895-907, \
             953), the text alone for text-only pairs (task4_pair.py:930-957)",
        ),
        ReferenceModel::Gme => Embedded(
            "one joint input per pair, the text alone for text-only pairs (task4_pair.py:930-957)",
        ),
        ReferenceModel::Other => return None,
    })
}

/// The stand-in image vectors of text-only pairs for the dense indexes `retriever` uses, as
/// the reference code embeds each model's pairs ([`reference_pairs`]).
pub fn reference_pair_stand_ins(
    models: &ModelSet,
    retriever: &RetrieverSpec,
) -> Result<crate::PairStandIns> {
    let mut out = crate::PairStandIns::new();
    for name in retriever.dense_names() {
        let Some(e) = models.get(name) else { continue };
        if let Some(ReferencePairs::UnitVectorsWhiteImage(_)) =
            reference_pairs(e.reference_model(), e.profile())
        {
            out.insert(name.to_string(), e.blank_image_vector()?);
        }
    }
    Ok(out)
}

/// The reference code's rules in force for `embedder` in `task` under its profile, each
/// with its source (docs/reference-profile.md): what a report says the run reproduced.
/// Empty in the default profile.
pub fn reference_rules_in_force(embedder: &Embedder, task: Task) -> Vec<String> {
    let profile = embedder.profile();
    if !profile.is_reference() {
        return Vec::new();
    }
    let model = embedder.reference_model();
    let images = embedder.capabilities().images;
    let mut rules = Vec::new();
    // texts
    match model {
        ReferenceModel::Nomic => {
            rules.push(
                "documents: the first 8,000 characters, without `search_document: ` \
                 (task2_multimodal.py:471-482, task4_pair.py:1097)"
                    .to_string(),
            );
            if task == Task::Pairs {
                rules.push(
                    "queries: the first 8,000 characters, then `search_query: ` (task4_pair.py:1147)"
                        .to_string(),
                );
            }
        }
        ReferenceModel::Gme => rules.push(format!(
            "texts: the first 4,000 characters (task2_multimodal.py:936, 984); prompts cut at \
             sentence-transformers' max_seq_length, {} tokens, not GME's 1,800 (custom_st.py:118)",
            embedder.max_text_tokens()
        )),
        ReferenceModel::BgeVl => rules.push(
            match task {
                Task::Passages | Task::MultimodalPassages => {
                    "texts: ultra_safe_truncate at 150 characters, shorter until 77 tokens hold them \
                     (task2_multimodal.py:717-755, 785-827)"
                }
                Task::Images => {
                    "queries: the 150-character cut, else the 60-character one (task3_image.py:707-720)"
                }
                Task::Pairs => {
                    "pair texts and queries: cuts down to 20 characters, `document` / `query` as the \
                     last resort (task4_pair.py:758-772, 814-828)"
                }
            }
            .to_string(),
        ),
        _ => {}
    }
    if !images || task == Task::Passages {
        return rules;
    }
    rules.push(
        "images as the data loader hands them over: Pillow's convert('RGB') (transparency \
         dropped), truncated files decoded as far as they go (LOAD_TRUNCATED_IMAGES, \
         task4_pair.py:35), stored orientation (src/data.py:165, 191)"
            .to_string(),
    );
    rules.push("a query's first image is the first that loads (src/data.py:186-222)".to_string());
    if let Some(rule) = reference_rule(model, task, profile) {
        let fusion = match rule.fusion {
            ReferenceFusion::RawFeatures => "raw text + image features",
            ReferenceFusion::UnitVectors => "unit text + image vectors",
            ReferenceFusion::Joint => "one joint input",
        };
        let missing = match rule.missing {
            MissingImage::WhiteImage => "a white image",
            MissingImage::TextAlone => "the text alone",
        };
        rules.push(format!(
            "queries: {fusion}; without an image, {missing} ({})",
            rule.source
        ));
        if let Some(w) = rule.white {
            rules.push(format!(
                "queries with an image: the white image in its place ({w})"
            ));
        }
        if rule.orient {
            rules.push(
                "query images upright (ImageOps.exif_transpose, task4_pair.py:75, 103)".to_string(),
            );
        }
        if let Some((w, h)) = rule.resize {
            rules.push(format!(
                "query images resized to {w} x {h} (bicubic) before the processor \
                 (task3_image.py:421-422)"
            ));
        }
    }
    match task {
        Task::Images => {
            if let Some(src) = reference_white_corpus(model, profile) {
                rules.push(format!(
                    "every corpus image is the white image ({src}: Image.open(<PIL image>) \
                     raises): all candidates tie, ordered as trec_eval orders ties (id descending)"
                ));
            }
        }
        Task::Pairs => {
            rules.push(
                "corpus images that do not load have no pair (src/data.py:164-168)".to_string(),
            );
            match reference_pairs(model, profile) {
                Some(ReferencePairs::Embedded(how)) => rules.push(format!("pairs: {how}")),
                Some(ReferencePairs::UnitVectors(src)) => rules.push(format!(
                    "pairs: normalise(unit text + unit image), text-only pairs their text; \
                     pair images upright ({src}, task4_pair.py:75, 103)"
                )),
                Some(ReferencePairs::UnitVectorsWhiteImage(src)) => rules.push(format!(
                    "pairs: normalise(unit text + unit image), text-only pairs with a white \
                     image; pair images upright ({src}, task4_pair.py:75)"
                )),
                None => {}
            }
        }
        _ => {}
    }
    rules
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
        let vectors = match images {
            Some(QueryImages::Reference) if embedder.capabilities().images => reference_vectors(
                embedder,
                task,
                queries,
                query_images,
                instruction,
                warnings,
                source,
            )?,
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
#[allow(clippy::too_many_arguments)]
fn prepare_query_images(
    embedder: &Embedder,
    queries: &[Example],
    take: Take,
    load: (Decode, Option<(u32, u32)>),
    query_images: &HashMap<String, Vec<u8>>,
    warnings: &mut Warnings,
    source: &Path,
) -> Vec<Vec<PreparedImage>> {
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
    queries: &[Example],
    mode: QueryImages,
    query_images: &HashMap<String, Vec<u8>>,
    instruction: Option<&str>,
    warnings: &mut Warnings,
    source: &Path,
) -> Result<Vec<Vec<f32>>> {
    let take = if mode == QueryImages::All {
        Take::All
    } else {
        Take::First
    };
    let load = (embedder.image_decode(), None);
    let prepared = prepare_query_images(
        embedder,
        queries,
        take,
        load,
        query_images,
        warnings,
        source,
    );
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

/// [`QueryImages::Reference`]: each query's text and first image fused by the reference
/// code's rule for the model and task ([`reference_rule`]). The first image is the first
/// that loads ([`Take::FirstThatLoads`]); a query none of whose images loads has none (the
/// images passed over are counted in `warnings`).
fn reference_vectors(
    embedder: &Embedder,
    task: Task,
    queries: &[Example],
    query_images: &HashMap<String, Vec<u8>>,
    instruction: Option<&str>,
    warnings: &mut Warnings,
    source: &Path,
) -> Result<Vec<Vec<f32>>> {
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
    let firsts: Vec<Option<PreparedImage>> = prepare_query_images(
        embedder,
        queries,
        Take::FirstThatLoads,
        (decode, rule.resize),
        query_images,
        warnings,
        source,
    )
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
mod tests {
    use super::*;
    use sift_embed::{EmbedderOptions, Profile};

    fn fixture(rel: &str) -> String {
        format!("{}/../../models/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
    }

    fn load(rel: &str) -> Embedder {
        load_with(rel, Profile::Reference)
    }

    fn load_with(rel: &str, profile: Profile) -> Embedder {
        let options = EmbedderOptions {
            profile,
            ..Default::default()
        };
        Embedder::load(&fixture(rel), &options).unwrap()
    }

    fn reference_of(
        model: &Embedder,
        task: Task,
        examples: &[Example],
        bytes: &HashMap<String, Vec<u8>>,
    ) -> Vec<Vec<f32>> {
        let mut warnings = Warnings::new();
        let v = reference_vectors(
            model,
            task,
            examples,
            bytes,
            None,
            &mut warnings,
            Path::new("t"),
        )
        .unwrap();
        assert!(warnings.is_empty());
        v
    }

    fn image(name: &str) -> Vec<u8> {
        std::fs::read(fixture(&format!("vision/images/{name}"))).unwrap()
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (n(a) * n(b))
    }

    /// Two queries: one with an image, one without.
    fn queries() -> (Vec<Example>, HashMap<String, Vec<u8>>) {
        let q = |id: &str, text: &str, images: &[&str]| Example {
            id: id.into(),
            query: text.into(),
            image_paths: images.iter().map(|s| s.to_string()).collect(),
            ..Example::default()
        };
        let examples = vec![
            q(
                "a",
                "why does the circuit oscillate",
                &["shapes", "gradient"],
            ),
            q("b", "a map projection", &[]),
        ];
        let bytes = HashMap::from([
            ("shapes".to_string(), image("shapes_rgb_50x37.png")),
            ("gradient".to_string(), image("gradient_rgb_64x64.png")),
        ]);
        (examples, bytes)
    }

    fn reference(model: &Embedder, task: Task) -> Vec<Vec<f32>> {
        let (examples, bytes) = queries();
        let mut warnings = Warnings::new();
        let v = reference_vectors(
            model,
            task,
            &examples,
            &bytes,
            None,
            &mut warnings,
            Path::new("t"),
        )
        .unwrap();
        assert!(warnings.is_empty());
        v
    }

    /// normalise(raw text features + raw image features) computed from the towers directly.
    fn raw_sum(model: &Embedder, text: &str, pixels: Vec<f32>) -> Vec<f32> {
        let v = model.as_vision().unwrap();
        let t = v.text_feature_rows(&v.tokenize(&[text]).unwrap()).unwrap();
        let i = v.image_feature_rows(&[pixels]).unwrap();
        normalized_sum(&t[0], &i[0])
    }

    #[test]
    fn clip_queries_sum_raw_features_with_a_white_image_for_none() {
        let clip = load("vision/tiny-clip-quickgelu");
        let v = clip.as_vision().unwrap();
        for task in [Task::MultimodalPassages, Task::Images, Task::Pairs] {
            let got = reference(&clip, task);
            // the FIRST image only (the second is ignored)
            let shapes = v.prepare(&[&image("shapes_rgb_50x37.png")]).pop().unwrap();
            let want_a = raw_sum(&clip, "why does the circuit oscillate", shapes.unwrap());
            let white = image::RgbImage::from_pixel(224, 224, image::Rgb([255, 255, 255]));
            let want_b = raw_sum(&clip, "a map projection", v.processor().preprocess(&white));
            assert!(cosine(&got[0], &want_a) > 0.99999, "{task:?}");
            assert!(cosine(&got[1], &want_b) > 0.99999, "{task:?}");
            // not the unit vectors' mean (the `first` mode): the raw norms differ
            let text = clip
                .embed_texts(&["a map projection"], Role::Query)
                .unwrap();
            let unit_mean = normalized_sum(&text[0], &clip.blank_image_vector().unwrap());
            assert!(cosine(&got[1], &unit_mean) < 0.9999, "{task:?}");
        }
        // Task 1 has no image rule: the text alone
        let t1 = reference(&clip, Task::Passages);
        let text = clip
            .embed_texts(&["a map projection"], Role::Query)
            .unwrap();
        assert!(cosine(&t1[1], &text[0]) > 0.99999);
    }

    /// The released data loader filters a query's images to those that load, then takes the
    /// first (a transcription of MM-BRIGHT `src/data.py`'s `get_query_pil_images`): a missing
    /// or undecodable first image is passed over for the next, and counted.
    #[test]
    fn the_first_image_is_the_first_that_loads() {
        let clip = load("vision/tiny-clip-quickgelu");
        let (mut examples, mut bytes) = queries();
        examples[0].image_paths = vec!["absent".into(), "broken".into(), "gradient".into()];
        bytes.insert("broken".into(), b"\x89PNG not really".to_vec());
        let mut warnings = Warnings::new();
        let got = reference_vectors(
            &clip,
            Task::MultimodalPassages,
            &examples,
            &bytes,
            None,
            &mut warnings,
            Path::new("t"),
        )
        .unwrap();
        assert_eq!(warnings.count(WarningKind::MissingImageBytes), 1);
        assert_eq!(warnings.count(WarningKind::UndecodableImage), 1);
        let v = clip.as_vision().unwrap();
        let gradient = v
            .prepare(&[&image("gradient_rgb_64x64.png")])
            .pop()
            .unwrap();
        let want = raw_sum(&clip, "why does the circuit oscillate", gradient.unwrap());
        assert!(cosine(&got[0], &want) > 0.99999);
        // none loads: the rule's stand-in (CLIP: the white image), as for a query without one
        examples[0].image_paths = vec!["absent".into(), "broken".into()];
        let mut warnings = Warnings::new();
        let none = reference_vectors(
            &clip,
            Task::MultimodalPassages,
            &examples,
            &bytes,
            None,
            &mut warnings,
            Path::new("t"),
        )
        .unwrap();
        let white = image::RgbImage::from_pixel(224, 224, image::Rgb([255, 255, 255]));
        let want = raw_sum(
            &clip,
            "why does the circuit oscillate",
            v.processor().preprocess(&white),
        );
        assert!(cosine(&none[0], &want) > 0.99999);
    }

    #[test]
    fn nomic_queries_without_an_image_are_their_text_except_in_task_3() {
        let nomic = load("nomic/tiny-nomic-embed-vision-v1.5");
        let text = nomic
            .embed_texts(
                &["why does the circuit oscillate", "a map projection"],
                Role::Query,
            )
            .unwrap();
        let shapes = nomic
            .prepare_images(&[&image("shapes_rgb_50x37.png")])
            .pop()
            .unwrap()
            .unwrap();
        let img = nomic.embed_images(&[shapes]).unwrap().pop().unwrap();
        for task in [Task::MultimodalPassages, Task::Pairs] {
            let got = reference(&nomic, task);
            assert!(cosine(&got[0], &normalized_sum(&text[0], &img)) > 0.99999);
            assert!(
                cosine(&got[1], &text[1]) > 0.99999,
                "{task:?}: a zero image"
            );
        }
        // Task 4 queries are cut to 8,000 characters before the prefix
        let long = Example {
            id: "long".into(),
            query: "clustering ".repeat(800) + &" 9".repeat(300),
            ..Example::default()
        };
        let mut w = Warnings::new();
        let got = reference_vectors(
            &nomic,
            Task::Pairs,
            std::slice::from_ref(&long),
            &HashMap::new(),
            None,
            &mut w,
            Path::new("t"),
        )
        .unwrap();
        let cut: String = long.query.chars().take(8000).collect();
        let want = nomic.embed_texts(&[&cut], Role::Query).unwrap();
        assert!(cosine(&got[0], &want[0]) > 0.99999);
        let whole = nomic.embed_texts(&[&long.query], Role::Query).unwrap();
        assert!(cosine(&got[0], &whole[0]) < 0.9999);
        let got = reference(&nomic, Task::Images);
        let white = normalized_sum(&text[1], &nomic.blank_image_vector().unwrap());
        assert!(cosine(&got[1], &white) > 0.99999, "Task 3: a white image");
        assert!(cosine(&got[1], &text[1]) < 0.9999);
    }

    #[test]
    fn gme_queries_are_one_input_with_the_first_image_or_the_text_alone() {
        let gme = load("gme/tiny-gme");
        let got = reference(&gme, Task::MultimodalPassages);
        let shapes = gme
            .prepare_query_image(&image("shapes_rgb_50x37.png"), 1)
            .unwrap();
        let want = gme
            .embed_joint(
                &[JointInput {
                    text: Some("why does the circuit oscillate"),
                    images: &[&shapes],
                }],
                Role::Query,
            )
            .unwrap();
        assert!(cosine(&got[0], &want[0]) > 0.99999);
        let text = gme.embed_texts(&["a map projection"], Role::Query).unwrap();
        assert!(cosine(&got[1], &text[0]) > 0.99999);
    }

    #[test]
    fn bge_vl_is_joint_in_tasks_2_and_4_and_unit_vectors_in_task_3() {
        let bge = load("bge_vl/tiny-bge-vl");
        let shapes = bge
            .prepare_images(&[&image("shapes_rgb_50x37.png")])
            .pop()
            .unwrap()
            .unwrap();
        let joint = raw_sum(
            &bge,
            "why does the circuit oscillate",
            match &shapes {
                PreparedImage::Pixels(p) => p.clone(),
                PreparedImage::Patches(_) => unreachable!(),
            },
        );
        let text = bge
            .embed_texts(
                &["why does the circuit oscillate", "a map projection"],
                Role::Query,
            )
            .unwrap();
        let unit = normalized_sum(&text[0], &bge.embed_images(&[shapes]).unwrap()[0]);
        for task in [Task::MultimodalPassages, Task::Pairs] {
            let got = reference(&bge, task);
            assert!(cosine(&got[0], &joint) > 0.99999, "{task:?}");
            assert!(cosine(&got[1], &text[1]) > 0.99999, "{task:?}");
        }
        let got = reference(&bge, Task::Images);
        assert!(cosine(&got[0], &unit) > 0.99999);
        assert!(cosine(&got[1], &text[1]) > 0.99999);
    }

    /// BGE-VL's query texts are cut per task: a blank query is `query` in Tasks 3 and 4
    /// (task3_image.py:707-720, task4_pair.py:814-828) and stays blank in Task 2.
    #[test]
    fn bge_vl_query_texts_are_cut_by_each_tasks_rule() {
        let bge = load("bge_vl/tiny-bge-vl");
        let blank = Example {
            id: "blank".into(),
            query: "   ".into(),
            ..Example::default()
        };
        let run = |task| {
            let mut w = Warnings::new();
            reference_vectors(
                &bge,
                task,
                std::slice::from_ref(&blank),
                &HashMap::new(),
                None,
                &mut w,
                Path::new("t"),
            )
            .unwrap()
            .pop()
            .unwrap()
        };
        let word = bge
            .embed_texts(&["query"], Role::Query)
            .unwrap()
            .pop()
            .unwrap();
        let empty = bge.embed_texts(&[""], Role::Query).unwrap().pop().unwrap();
        assert!(
            cosine(&empty, &word) < 0.9999,
            "the fixture tells them apart"
        );
        for task in [Task::Images, Task::Pairs] {
            assert!(cosine(&run(task), &word) > 0.99999, "{task:?}");
        }
        assert!(cosine(&run(Task::MultimodalPassages), &empty) > 0.99999);
    }

    #[test]
    fn jina_clip_queries_without_an_image_are_their_text_except_in_task_4() {
        let jina = load_with("jina_clip/tiny-jina-clip-v1", Profile::ReferenceIntended);
        assert_eq!(jina.reference_model(), ReferenceModel::JinaClip);
        let text = jina
            .embed_texts(
                &["why does the circuit oscillate", "a map projection"],
                Role::Query,
            )
            .unwrap();
        let shapes = jina
            .prepare_images(&[&image("shapes_rgb_50x37.png")])
            .pop()
            .unwrap()
            .unwrap();
        let img = jina.embed_images(&[shapes]).unwrap().pop().unwrap();
        for task in [Task::MultimodalPassages, Task::Images] {
            let got = reference(&jina, task);
            assert!(cosine(&got[0], &normalized_sum(&text[0], &img)) > 0.99999);
            assert!(
                cosine(&got[1], &text[1]) > 0.99999,
                "{task:?}: a zero image"
            );
        }
        let got = reference(&jina, Task::Pairs);
        let white = normalized_sum(&text[1], &jina.blank_image_vector().unwrap());
        assert!(cosine(&got[1], &white) > 0.99999, "Task 4: a white image");
    }

    /// Task 3 as the released code runs it for Nomic and Jina-CLIP: `Image.open` on the
    /// query's PIL image raises and the bare `except` embeds a white image instead
    /// (task3_image.py:526-536, 621-629): a query with an image is normalise(text + white);
    /// without one, Jina's is its text (a zero image vector) and Nomic's text + white. A
    /// transcription of those lines; `reference-intended` embeds the query's own image.
    #[test]
    fn task_3_queries_of_nomic_and_jina_see_the_white_image_as_the_released_code_runs() {
        for (rel, zero_without) in [
            ("jina_clip/tiny-jina-clip-v1", true),
            ("nomic/tiny-nomic-embed-vision-v1.5", false),
        ] {
            let released = load_with(rel, Profile::Reference);
            let intended = load_with(rel, Profile::ReferenceIntended);
            let text = released
                .embed_texts(
                    &["why does the circuit oscillate", "a map projection"],
                    Role::Query,
                )
                .unwrap();
            let white = released.blank_image_vector().unwrap();
            let own = released
                .embed_images(&[released
                    .prepare_images(&[&image("shapes_rgb_50x37.png")])
                    .pop()
                    .unwrap()
                    .unwrap()])
                .unwrap()
                .pop()
                .unwrap();
            let got = reference(&released, Task::Images);
            assert!(
                cosine(&got[0], &normalized_sum(&text[0], &white)) > 0.99999,
                "{rel}"
            );
            assert!(
                cosine(&got[0], &normalized_sum(&text[0], &own)) < 0.9999,
                "{rel}"
            );
            let without = if zero_without {
                text[1].clone()
            } else {
                normalized_sum(&text[1], &white)
            };
            assert!(cosine(&got[1], &without) > 0.99999, "{rel}");
            let meant = reference(&intended, Task::Images);
            assert!(
                cosine(&meant[0], &normalized_sum(&text[0], &own)) > 0.99999,
                "{rel}"
            );
            assert!(cosine(&meant[1], &without) > 0.99999, "{rel}");
            // Tasks 2 and 4 are not touched by it
            for task in [Task::MultimodalPassages, Task::Pairs] {
                let a = reference(&released, task);
                let b = reference(&intended, task);
                assert!(cosine(&a[0], &b[0]) > 0.999999, "{rel} {task:?}");
            }
        }
    }

    /// The query image's orientation: Task 4 turns CLIP's, SigLIP's, Jina-CLIP's and
    /// Nomic's query images upright (`_safe_open_image`'s `ImageOps.exif_transpose`,
    /// task4_pair.py:75, 314); Tasks 2-3 embed the loader's image as stored, and BGE-VL's and
    /// GME's Task 4 queries go through a temporary PNG, which keeps no EXIF
    /// (pillow_facts.json).
    #[test]
    fn query_images_are_turned_upright_in_task_4_only() {
        let rotated =
            std::fs::read(fixture("reference_code/images/jpeg_orientation_6.bin")).unwrap();
        let examples = vec![Example {
            id: "r".into(),
            query: "a rotated photo".into(),
            image_paths: vec!["rot".into()],
            ..Example::default()
        }];
        let bytes = HashMap::from([("rot".to_string(), rotated.clone())]);
        let clip = load("vision/tiny-clip-quickgelu");
        let v = clip.as_vision().unwrap();
        let decode = |orient: bool| {
            sift_embed::image::decode_image(
                &rotated,
                Decode {
                    orient,
                    ..Decode::REFERENCE_LOADER
                },
            )
            .unwrap()
        };
        let stored = raw_sum(
            &clip,
            "a rotated photo",
            v.processor().preprocess(&decode(false)),
        );
        let upright = raw_sum(
            &clip,
            "a rotated photo",
            v.processor().preprocess(&decode(true)),
        );
        assert!(
            cosine(&stored, &upright) < 0.99999,
            "the fixture tells them apart"
        );
        for task in [Task::MultimodalPassages, Task::Images] {
            let got = reference_of(&clip, task, &examples, &bytes);
            assert!(cosine(&got[0], &stored) > 0.99999, "{task:?}");
        }
        let got = reference_of(&clip, Task::Pairs, &examples, &bytes);
        assert!(cosine(&got[0], &upright) > 0.99999);
        // BGE-VL's Task 4 query: a temporary PNG, stored orientation
        let bge = load("bge_vl/tiny-bge-vl");
        let vb = bge.as_vision().unwrap();
        let got = reference_of(&bge, Task::Pairs, &examples, &bytes);
        let stored = raw_sum(
            &bge,
            "a rotated photo",
            vb.processor().preprocess(&decode(false)),
        );
        assert!(cosine(&got[0], &stored) > 0.99999);
    }

    /// SigLIP's Task 3 query images are resized to 384 x 384 by Pillow (bicubic) before the
    /// processor (task3_image.py:421-422); Tasks 2 and 4 hand the processor the image.
    #[test]
    fn siglip_task_3_query_images_are_first_resized_to_384() {
        let siglip = load("vision/tiny-siglip");
        let v = siglip.as_vision().unwrap();
        let (examples, bytes) = queries();
        let img = sift_embed::image::decode_image(
            &image("shapes_rgb_50x37.png"),
            Decode::REFERENCE_LOADER,
        )
        .unwrap();
        let square =
            sift_embed::image::resize_rgb8(&img, 384, 384, sift_embed::image::Resample::Bicubic);
        let text = "why does the circuit oscillate";
        let want = raw_sum(&siglip, text, v.processor().preprocess(&square));
        let plain = raw_sum(&siglip, text, v.processor().preprocess(&img));
        assert!(
            cosine(&want, &plain) < 0.99999,
            "the fixture tells them apart"
        );
        let got = reference_of(&siglip, Task::Images, &examples, &bytes);
        assert!(cosine(&got[0], &want) > 0.99999);
        let got = reference_of(&siglip, Task::MultimodalPassages, &examples, &bytes);
        assert!(cosine(&got[0], &plain) > 0.99999);
    }

    #[test]
    fn every_rule_names_its_source() {
        use ReferenceModel::*;
        for model in [Clip, Siglip, Nomic, BgeVl, Gme, JinaClip] {
            assert!(reference_rule(model, Task::Passages, Profile::Reference).is_none());
            for task in [Task::MultimodalPassages, Task::Images, Task::Pairs] {
                let r = reference_rule(model, task, Profile::Reference).unwrap();
                assert!(r.source.contains(".py:"), "{model:?} {task:?}");
            }
        }
        assert!(reference_rule(Other, Task::Images, Profile::Reference).is_none());
    }
}
