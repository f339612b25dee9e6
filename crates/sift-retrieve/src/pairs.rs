//! Task 4 candidate pairs embedded as MM-BRIGHT's reference code embeds them, for the models
//! whose pair vectors do not follow from the index's unit vectors (docs/reference-profile.md):
//! CLIP and SigLIP sum the towers' raw features, a white image standing in for a text-only
//! pair (task4_pair.py:268-285, 405-433); BGE-VL (`encode(images, text)`, task4_pair.py:708-741)
//! and GME (one joint input, task4_pair.py:930-957) embed each pair with an image as one input
//! and a text-only pair as its text (the passage vector the index holds).
use std::collections::{HashMap, HashSet};

use sift_core::{Corpus, WarningKind, Warnings};
use sift_embed::{Embedder, JointInput, PreparedImage, ReferenceModel, Role};
use sift_eval::Pairs;

use crate::Result;

/// Pair vectors by dense index name: one per candidate pair (in [`Pairs`] order), `None`
/// where the pair scores as the searcher scores it by default.
pub type PairVectors = HashMap<String, Vec<Option<Vec<f32>>>>;

/// Pairs embedded per forward pass.
const CHUNK: usize = 64;

/// Whether the reference code embeds `model`'s pairs in a way Sift computes at evaluation time
/// ([`reference_pair_vectors`]).
pub fn embeds_pairs(model: ReferenceModel) -> bool {
    matches!(
        model,
        ReferenceModel::Clip | ReferenceModel::Siglip | ReferenceModel::BgeVl | ReferenceModel::Gme
    )
}

/// The reference code's vector of every candidate pair of `domain` for `embedder` (`None`
/// where it is the passage's own vector, or the model has no such rule): `passages` are the
/// texts by passage ordinal, `images` the corpus image paths the pairs index into. Corpus
/// images that do not decode are embedded as the white image the reference substitutes
/// (counted in `warnings`).
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
    let mut out: Vec<Option<Vec<f32>>> = vec![None; pairs.pairs.len()];
    if !embeds_pairs(model) {
        return Ok(out);
    }
    let raw = matches!(model, ReferenceModel::Clip | ReferenceModel::Siglip);
    // the pairs to embed: all (CLIP, SigLIP: text-only ones with a white image), or those
    // with an image
    let todo: Vec<usize> = (0..pairs.pairs.len())
        .filter(|&i| raw || pairs.pairs[i].1.is_some())
        .collect();
    let wanted: HashSet<&str> = todo
        .iter()
        .filter_map(|&i| pairs.pairs[i].1.map(|im| images[im as usize].as_str()))
        .collect();
    let mut bytes: HashMap<String, Vec<u8>> = HashMap::new();
    if !wanted.is_empty() {
        for r in corpus.images(domain)? {
            let r = r?;
            if wanted.contains(r.path.as_str()) {
                bytes.insert(r.path, r.bytes);
            }
        }
    }
    let blank = embedder.blank_image()?;
    let source = corpus.root().join("document_images").join(domain);
    for chunk in todo.chunks(CHUNK) {
        // each pair's image, prepared (the white one where it has none or it does not decode)
        let mut prepared: Vec<PreparedImage> = Vec::with_capacity(chunk.len());
        for &i in chunk {
            let (_, img) = pairs.pairs[i];
            let img = match img.map(|im| images[im as usize].as_str()) {
                None => blank.clone(),
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
                    Some(b) => match embedder.prepare_images(&[b]).pop() {
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
        let one: Vec<[&PreparedImage; 1]> = prepared.iter().map(|p| [p]).collect();
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
        let inputs: Vec<JointInput<'_>> = texts
            .iter()
            .zip(&one)
            .map(|(t, img)| JointInput {
                text: Some(t.as_str()),
                images: img,
            })
            .collect();
        let vectors = if raw || model == ReferenceModel::BgeVl {
            embedder.embed_features_summed(&inputs, Role::Passage)?
        } else {
            embedder.embed_joint(&inputs, Role::Passage)?
        };
        for (&i, v) in chunk.iter().zip(vectors) {
            out[i] = Some(v);
        }
    }
    Ok(out)
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
