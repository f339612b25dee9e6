//! MM-BRIGHT's released code's rules, model by model and task by task
//! (docs/src/reference-profile.md): how it fuses a query's text and first image
//! ([`reference_rule`]), where it embeds white or blank images in place of real ones
//! ([`reference_white_corpus`], [`reference_pairs`]), and every rule a report lists as in
//! force ([`reference_rules_in_force`]). The encoding that applies them is in `query.rs`.
use sift_embed::{Embedder, Profile, ReferenceModel};
use sift_eval::Task;

use crate::Result;
use crate::models::ModelSet;
use crate::spec::RetrieverSpec;

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
/// reference profiles; docs/src/reference-profile.md); `None` for Task 1 and for models it has
/// no multimodal rule for (their text alone).
pub fn reference_rule(
    model: ReferenceModel,
    task: Task,
    profile: Profile,
) -> Option<ReferenceRule> {
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
    let (_, _, fusion, missing, source) =
        *RULES.iter().find(|(m, t, ..)| *m == model && *t == task)?;
    Some(ReferenceRule {
        fusion,
        missing,
        white,
        orient,
        resize,
        source,
    })
}

/// The reference code's query rule per model and Tasks 2-4: how it fuses the text and the
/// first image, what a query without one gets, and where it is written.
const RULES: [(ReferenceModel, Task, ReferenceFusion, MissingImage, &str); 18] = {
    use MissingImage::*;
    use ReferenceFusion::*;
    use ReferenceModel::*;
    use Task::{Images, MultimodalPassages as Task2, Pairs};
    [
        (
            Clip,
            Task2,
            RawFeatures,
            WhiteImage,
            "task2_multimodal.py:82-115",
        ),
        (
            Clip,
            Images,
            RawFeatures,
            WhiteImage,
            "task3_image.py:252-282",
        ),
        (
            Clip,
            Pairs,
            RawFeatures,
            WhiteImage,
            "task4_pair.py:307-327",
        ),
        (
            Siglip,
            Task2,
            RawFeatures,
            WhiteImage,
            "task2_multimodal.py:187-216",
        ),
        (
            Siglip,
            Images,
            RawFeatures,
            WhiteImage,
            "task3_image.py:408-453",
        ),
        (
            Siglip,
            Pairs,
            RawFeatures,
            WhiteImage,
            "task4_pair.py:455-477",
        ),
        (
            Nomic,
            Task2,
            UnitVectors,
            TextAlone,
            "task2_multimodal.py:507-533",
        ),
        (
            Nomic,
            Images,
            UnitVectors,
            WhiteImage,
            "task3_image.py:612-637",
        ),
        (
            Nomic,
            Pairs,
            UnitVectors,
            TextAlone,
            "task4_pair.py:1147-1176",
        ),
        (
            BgeVl,
            Task2,
            Joint,
            TextAlone,
            "task2_multimodal.py:785-812",
        ),
        (
            BgeVl,
            Images,
            UnitVectors,
            TextAlone,
            "task3_image.py:801-835",
        ),
        (BgeVl, Pairs, Joint, TextAlone, "task4_pair.py:796-830"),
        (Gme, Task2, Joint, TextAlone, "task2_multimodal.py:983-1002"),
        (Gme, Images, Joint, TextAlone, "task3_image.py:917-944"),
        (Gme, Pairs, Joint, TextAlone, "task4_pair.py:993-1036"),
        (
            JinaClip,
            Task2,
            UnitVectors,
            TextAlone,
            "task2_multimodal.py:281-333",
        ),
        (
            JinaClip,
            Images,
            UnitVectors,
            TextAlone,
            "task3_image.py:514-540",
        ),
        (
            JinaClip,
            Pairs,
            UnitVectors,
            WhiteImage,
            "task4_pair.py:563-588",
        ),
    ]
};

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
    white_image_vectors(models, retriever, |e| {
        reference_white_corpus(e.reference_model(), e.profile()).is_some()
    })
}

/// The white image's vector for each dense index `retriever` uses whose model `wanted` says.
fn white_image_vectors(
    models: &ModelSet,
    retriever: &RetrieverSpec,
    wanted: impl Fn(&Embedder) -> bool,
) -> Result<crate::PairStandIns> {
    let mut out = crate::PairStandIns::new();
    for name in retriever.dense_names() {
        match models.get(name) {
            Some(e) if wanted(e) => {
                out.insert(name.to_string(), e.blank_image_vector()?);
            }
            _ => {}
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
/// (docs/src/reference-profile.md); `None` for models it has no multimodal rule for.
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
    white_image_vectors(models, retriever, |e| {
        matches!(
            reference_pairs(e.reference_model(), e.profile()),
            Some(ReferencePairs::UnitVectorsWhiteImage(_))
        )
    })
}

/// The reference code's rules in force for `embedder` in `task` under its profile, each
/// with its source (docs/src/reference-profile.md): what a report says the run reproduced.
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
