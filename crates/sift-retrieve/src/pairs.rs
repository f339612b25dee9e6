//! Task 4 candidate pairs embedded as MM-BRIGHT's reference code embeds them, for the models
//! whose pair vectors do not follow from the index's unit vectors (docs/src/reference-profile.md):
//! CLIP and SigLIP sum the towers' raw features, a white image standing in for a text-only
//! pair (task4_pair.py:268-285, 405-433); BGE-VL (`encode(images, text)`, task4_pair.py:708-741)
//! and GME (one joint input, task4_pair.py:930-957) embed each pair with an image as one input
//! (with `--profile reference` the blank image the code falls back to in place of every
//! pair's image: task4_pair.py:663-670 with 716, 895-907 with 953) and a text-only pair as its
//! text (the passage vector the index holds). Task 4 turns CLIP's, SigLIP's, Jina-CLIP's and
//! Nomic's pair images upright (`ImageOps.exif_transpose`, task4_pair.py:75, 103), unlike
//! Tasks 2-3 and the index: Nomic's and Jina-CLIP's pairs whose image carries an orientation
//! are embedded here, upright, the others scored from the index's unit vectors.
use std::collections::{HashMap, HashSet};

use sift_core::{Corpus, WarningKind, Warnings};
use sift_embed::image::Decode;
use sift_embed::{Embedder, JointInput, PreparedImage, Profile, ReferenceModel, Role};
use sift_eval::Pairs;

use crate::Result;

/// Pair vectors by dense index name: one per candidate pair (in [`Pairs`] order), `None`
/// where the pair scores as the searcher scores it by default.
pub type PairVectors = HashMap<String, Vec<Option<Vec<f32>>>>;

/// Pairs embedded per forward pass.
const CHUNK: usize = 64;

/// Whether the reference code embeds `model`'s pairs in a way Sift computes at evaluation time
/// ([`reference_pair_vectors`]): all of them (CLIP, SigLIP) or those with an image (BGE-VL,
/// GME). Nomic's and Jina-CLIP's pairs follow from the index's vectors but for images with
/// an EXIF orientation, which [`reference_pair_vectors`] embeds too.
pub fn embeds_pairs(model: ReferenceModel) -> bool {
    matches!(
        model,
        ReferenceModel::Clip | ReferenceModel::Siglip | ReferenceModel::BgeVl | ReferenceModel::Gme
    )
}

/// Which pairs [`reference_pair_vectors`] embeds for a model, and with what image.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PairPlan {
    /// Nothing: the index's vectors give every pair's score.
    None,
    /// Every pair, text-only ones with the white image; raw features summed (CLIP,
    /// SigLIP); images upright.
    RawAll,
    /// Pairs with an image, as one joint input (BGE-VL: raw features summed; GME: its
    /// prompt), the image replaced by the blank one when `blank`.
    Joint { blank: bool },
    /// Pairs whose image carries an EXIF orientation, as normalise(unit text + unit image),
    /// the image upright (Nomic, Jina-CLIP).
    UprightUnit,
}

fn plan(model: ReferenceModel, profile: Profile) -> PairPlan {
    if !profile.is_reference() {
        return PairPlan::None;
    }
    match model {
        ReferenceModel::Clip | ReferenceModel::Siglip => PairPlan::RawAll,
        ReferenceModel::BgeVl | ReferenceModel::Gme => PairPlan::Joint {
            blank: profile == Profile::Reference,
        },
        ReferenceModel::Nomic | ReferenceModel::JinaClip => PairPlan::UprightUnit,
        ReferenceModel::Other => PairPlan::None,
    }
}

/// The reference code's vector of every candidate pair of `domain` for `embedder` (`None`
/// where the searcher's own scoring from the index's vectors gives it, or the model has no
/// such rule): `passages` are the texts by passage ordinal, `images` the corpus image paths
/// the pairs index into. Corpus images that do not decode (which the reference profiles
/// give no pair in the first place) are embedded as the white image the reference's
/// `_safe_open_image` substitutes (counted in `warnings`).
pub fn reference_pair_vectors(
    embedder: &Embedder,
    corpus: &Corpus,
    domain: &str,
    pairs: &Pairs,
    passages: &[&str],
    images: &[String],
    warnings: &mut Warnings,
) -> Result<Vec<Option<Vec<f32>>>> {
    let model = embedder.reference_model();
    let plan = plan(model, embedder.profile());
    let mut out: Vec<Option<Vec<f32>>> = vec![None; pairs.pairs.len()];
    if plan == PairPlan::None {
        return Ok(out);
    }
    // the image bytes the plan reads
    let wanted: HashSet<&str> = match plan {
        PairPlan::Joint { blank: true } | PairPlan::None => HashSet::new(),
        _ => pairs
            .pairs
            .iter()
            .filter_map(|&(_, img)| img.map(|im| images[im as usize].as_str()))
            .collect(),
    };
    let mut bytes: HashMap<String, Vec<u8>> = HashMap::new();
    if !wanted.is_empty() {
        for r in corpus.images(domain)? {
            let r = r?;
            if wanted.contains(r.path.as_str())
                && (plan != PairPlan::UprightUnit || sift_embed::image::orientation(&r.bytes) > 1)
            {
                bytes.insert(r.path, r.bytes);
            }
        }
    }
    // the pairs to embed
    let todo: Vec<usize> = (0..pairs.pairs.len())
        .filter(|&i| {
            let img = pairs.pairs[i].1;
            match plan {
                PairPlan::RawAll => true,
                PairPlan::Joint { .. } => img.is_some(),
                PairPlan::UprightUnit => {
                    img.is_some_and(|im| bytes.contains_key(images[im as usize].as_str()))
                }
                PairPlan::None => false,
            }
        })
        .collect();
    if todo.is_empty() {
        return Ok(out);
    }
    // Task 4's images: upright for CLIP, SigLIP, Jina-CLIP and Nomic; BGE-VL's and GME's
    // reach their models as the loader's image in a temporary PNG (no EXIF)
    let decode = Decode {
        orient: matches!(plan, PairPlan::RawAll | PairPlan::UprightUnit),
        ..embedder.image_decode()
    };
    let blank = embedder.blank_image()?;
    let source = corpus.root().join("document_images").join(domain);
    for chunk in todo.chunks(CHUNK) {
        // each pair's image, prepared (the white one where it has none or it does not decode)
        let mut prepared: Vec<PreparedImage> = Vec::with_capacity(chunk.len());
        for &i in chunk {
            let (_, img) = pairs.pairs[i];
            let img = match img.map(|im| images[im as usize].as_str()) {
                None => blank.clone(),
                Some(_) if plan == (PairPlan::Joint { blank: true }) => blank.clone(),
                Some(path) => match bytes.get(path) {
                    None => {
                        warnings.push(
                            WarningKind::MissingImageBytes,
                            &source,
                            path.to_string(),
                            "corpus image not found for its Task 4 pair: a white image stands in"
                                .to_string(),
                        );
                        blank.clone()
                    }
                    Some(b) => match embedder.prepare_images_with(&[b], decode, None).pop() {
                        Some(Ok(p)) => p,
                        _ => {
                            warnings.push(
                                WarningKind::UndecodableImage,
                                &source,
                                path.to_string(),
                                "corpus image does not decode: its Task 4 pair gets a white image"
                                    .to_string(),
                            );
                            blank.clone()
                        }
                    },
                },
            };
            prepared.push(img);
        }
        // BGE-VL cuts Task 4 pair texts by a rule of their own (down to 20 characters)
        let texts: Vec<String> = chunk
            .iter()
            .map(|&i| {
                let text = passages[pairs.pairs[i].0 as usize];
                match model {
                    ReferenceModel::BgeVl => {
                        embedder.reference_text(text, sift_embed::profile::BgeVlCut::Task4Document)
                    }
                    _ => Ok(text.to_string()),
                }
            })
            .collect::<std::result::Result<_, _>>()?;
        let vectors = if plan == PairPlan::UprightUnit {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let text = embedder.embed_texts(&refs, Role::Passage)?;
            let image = embedder.embed_images(&prepared)?;
            text.iter()
                .zip(&image)
                .map(|(t, i)| crate::normalized_sum(t, i))
                .collect()
        } else {
            let one: Vec<[&PreparedImage; 1]> = prepared.iter().map(|p| [p]).collect();
            let inputs: Vec<JointInput<'_>> = texts
                .iter()
                .zip(&one)
                .map(|(t, img)| JointInput {
                    text: Some(t.as_str()),
                    images: img,
                })
                .collect();
            if matches!(model, ReferenceModel::Gme) {
                embedder.embed_joint(&inputs, Role::Passage)?
            } else {
                embedder.embed_features_summed(&inputs, Role::Passage)?
            }
        };
        for (&i, v) in chunk.iter().zip(vectors) {
            out[i] = Some(v);
        }
    }
    Ok(out)
}

/// The corpus images of `domain` that the reference's data loader keeps: those Pillow opens
/// and converts to RGB (`src/data.py` 164-168, with `LOAD_TRUNCATED_IMAGES`), decoded here
/// as [`Decode::REFERENCE_LOADER`] decodes them. The others are counted in `warnings`.
pub fn loadable_images(
    corpus: &Corpus,
    domain: &str,
    warnings: &mut Warnings,
) -> Result<HashSet<String>> {
    use rayon::prelude::*;
    let source = corpus.root().join("document_images").join(domain);
    let mut ok = HashSet::new();
    let mut batch: Vec<(String, Vec<u8>)> = Vec::new();
    let mut flush = |batch: &mut Vec<(String, Vec<u8>)>, warnings: &mut Warnings| {
        let results: Vec<(String, std::result::Result<(), String>)> = batch
            .par_drain(..)
            .map(|(path, bytes)| {
                let r = sift_embed::image::decode_image(&bytes, Decode::REFERENCE_LOADER)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                (path, r)
            })
            .collect();
        for (path, r) in results {
            match r {
                Ok(()) => {
                    ok.insert(path);
                }
                Err(e) => warnings.push(
                    WarningKind::UndecodableImage,
                    &source,
                    path,
                    format!(
                        "corpus image does not decode ({e}): no Task 4 pair, as the reference's \
                         data loader drops it (src/data.py:164-168)"
                    ),
                ),
            }
        }
    };
    for r in corpus.images(domain)? {
        let r = r?;
        batch.push((r.path, r.bytes));
        if batch.len() >= 64 {
            flush(&mut batch, warnings);
        }
    }
    flush(&mut batch, warnings);
    Ok(ok)
}

/// The texts of `domain`'s passages in the order of `ids` (an index's ordinals).
pub fn passage_texts(corpus: &Corpus, domain: &str, ids: &[String]) -> Result<Vec<String>> {
    let mut by_id: HashMap<String, String> = HashMap::with_capacity(ids.len());
    for p in corpus.passages(domain)? {
        let p = p?;
        by_id.insert(p.id, p.text);
    }
    ids.iter()
        .map(|id| {
            by_id.remove(id).ok_or_else(|| {
                crate::Error::Unsupported(format!(
                    "passage {id:?} of the index is not in domain {domain} of corpus {}",
                    corpus.root().display()
                ))
            })
        })
        .collect()
}
