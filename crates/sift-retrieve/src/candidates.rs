//! [`PairCandidates`]: Task 4's passage+image pairs of one domain, made once and searched by
//! many queries: how the evaluator, `sift search` and the service all make them.
use sift_core::{Corpus, Warnings};
use sift_eval::{Links, PairLink, Pairs};
use sift_index::Progress;

use crate::Result;
use crate::models::ModelSet;
use crate::pairs::{PairVectors, loadable_images, passage_texts, reference_pair_vectors};
use crate::reference::reference_pair_stand_ins;
use crate::searcher::{Candidates, DomainSearcher, PairStandIns, PairTable};
use crate::spec::RetrieverSpec;

/// How a domain's pairs are linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairLinking {
    /// The rule linking passages and images (a knowledge base links by its rows whatever
    /// this says).
    pub link: PairLink,
    /// The reference code's pairs: only the corpus images its data loader keeps, those that
    /// decode (`src/data.py` 164-168); the evaluation of a reference profile.
    pub loadable_only: bool,
    /// The index is a knowledge base: without its file, no image can be linked (its rows are
    /// its links), so every pair is text-only.
    pub knowledge_base: bool,
}

/// Task 4's candidates of one domain: every passage alone and with each linked corpus
/// image ([`Pairs`]), and what the reference code's rules add for the models that have them
/// ([`PairCandidates::add_reference`]): a stand-in image vector for text-only pairs,
/// vectors of pairs embedded at evaluation time.
#[derive(Debug, Clone, Default)]
pub struct PairCandidates {
    /// The domain.
    pub domain: String,
    /// The pairs, indexing into the searcher's passages and [`PairCandidates::images`].
    pub pairs: Pairs,
    /// The corpus image ids the pairs index into.
    pub images: Vec<String>,
    /// How passages and images were linked, and what was left unlinked.
    pub links: Option<Links>,
    /// The reference code's stand-in image of text-only pairs, by dense index name.
    pub stand_ins: PairStandIns,
    /// The reference code's pair vectors, by dense index name.
    pub vectors: PairVectors,
}

impl PairCandidates {
    /// The pairs of `searcher`'s domain. With `corpus`, its images (those that load, with
    /// [`PairLinking::loadable_only`], the others counted in `warnings`) linked to the
    /// indexed passages by `linking` (`source-id` reads the corpus's annotations); without,
    /// the images the first of `retriever`'s models with an image index holds, linked by
    /// base key, or none for a knowledge base.
    pub fn link(
        searcher: &DomainSearcher,
        retriever: &RetrieverSpec,
        corpus: Option<&Corpus>,
        linking: PairLinking,
        warnings: &mut Warnings,
    ) -> Result<PairCandidates> {
        let domain = searcher.domain();
        let passages = searcher.passage_ids();
        let (images, links) = match corpus {
            Some(corpus) => {
                let mut images: Vec<String> = corpus
                    .image_paths(domain)?
                    .map(|r| r.map(|r| r.path))
                    .collect::<sift_core::Result<_>>()?;
                if linking.loadable_only {
                    let ok = loadable_images(corpus, domain, warnings)?;
                    images.retain(|p| ok.contains(p));
                }
                let examples = match linking.link {
                    PairLink::SourceId => corpus.examples(domain, true, warnings)?,
                    PairLink::Regex | PairLink::Row => Vec::new(),
                };
                let links =
                    Links::for_corpus(corpus, linking.link, domain, passages, &images, &examples)?;
                (images, links)
            }
            None if linking.knowledge_base => {
                let images = Vec::new();
                let links = Links::from_pairs(passages, &images, &[]);
                (images, links)
            }
            None => {
                let images: Vec<String> = retriever
                    .dense_names()
                    .iter()
                    .find_map(|n| searcher.image_ids(n))
                    .map(<[String]>::to_vec)
                    .unwrap_or_default();
                let links = Links::new(linking.link, domain, passages, &images, &[]);
                (images, links)
            }
        };
        Ok(PairCandidates {
            domain: domain.to_string(),
            pairs: Pairs::from_links(&links),
            images,
            links: Some(links),
            stand_ins: PairStandIns::new(),
            vectors: PairVectors::new(),
        })
    }

    /// The pairs of `domain` that `links` makes over the corpus image ids `images`, for a
    /// caller that linked them already (the links are not kept).
    pub fn from_links(domain: &str, images: Vec<String>, links: &Links) -> PairCandidates {
        PairCandidates {
            domain: domain.to_string(),
            pairs: Pairs::from_links(links),
            images,
            ..PairCandidates::default()
        }
    }

    /// Adds, for each of `retriever`'s dense models in a reference profile that does not
    /// have them yet, the reference code's stand-in image of text-only pairs and the pairs
    /// it embeds at evaluation time ([`reference_pair_vectors`]; they need `corpus`, whose
    /// passage texts are read once), reporting each model's pass over the pairs to
    /// `progress`.
    pub fn add_reference(
        &mut self,
        searcher: &DomainSearcher,
        models: &ModelSet,
        retriever: &RetrieverSpec,
        corpus: Option<&Corpus>,
        warnings: &mut Warnings,
        progress: &dyn Progress,
    ) -> Result<()> {
        let mut texts: Option<Vec<String>> = None;
        for (name, v) in reference_pair_stand_ins(models, retriever)? {
            self.stand_ins.entry(name).or_insert(v);
        }
        for name in retriever.dense_names() {
            let Some(e) = models.get(name) else { continue };
            if !e.profile().is_reference() || self.vectors.contains_key(name) {
                continue;
            }
            let Some(corpus) = corpus else {
                if crate::pairs::embeds_pairs(e.reference_model()) {
                    return Err(crate::Error::Unsupported(format!(
                        "the reference code embeds dense:{name}'s pairs from their passage texts \
                         and images: the corpus is needed"
                    )));
                }
                // Nomic's and Jina-CLIP's pairs follow from the index (rotated images aside,
                // which only the corpus shows)
                continue;
            };
            if texts.is_none() {
                texts = Some(passage_texts(corpus, &self.domain, searcher.passage_ids())?);
            }
            let refs: Vec<&str> = texts
                .as_ref()
                .expect("read above")
                .iter()
                .map(String::as_str)
                .collect();
            progress.start(
                &format!("{} t4 pairs dense:{name}", self.domain),
                Some(self.pairs.pairs.len() as u64),
            );
            let v = reference_pair_vectors(
                e,
                corpus,
                &self.domain,
                &self.pairs,
                &refs,
                &self.images,
                warnings,
            );
            progress.finish();
            self.vectors.insert(name.to_string(), v?);
        }
        Ok(())
    }

    /// The pairs as search candidates: with the reference code's stand-ins and pair vectors
    /// (`reference`), or as Sift scores pairs.
    pub fn candidates(&self, reference: bool) -> Candidates<'_> {
        let (stand_ins, vectors) = if reference {
            (&self.stand_ins, &self.vectors)
        } else {
            (none_stand_ins(), none_vectors())
        };
        Candidates::Pairs {
            pairs: &self.pairs,
            images: &self.images,
            stand_ins,
            vectors,
        }
    }

    /// What ranking these pairs as Sift scores them needs that no query changes, for
    /// `searcher` (the domain's), made once ([`DomainSearcher::pair_table`]).
    pub fn table(&self, searcher: &DomainSearcher) -> Result<PairTable<'static>> {
        searcher.pair_table(&self.pairs, &self.images, none_stand_ins(), none_vectors())
    }

    /// [`PairCandidates::table`] with the reference code's stand-ins and pair vectors.
    pub fn reference_table<'v>(&'v self, searcher: &DomainSearcher) -> Result<PairTable<'v>> {
        searcher.pair_table(&self.pairs, &self.images, &self.stand_ins, &self.vectors)
    }
}

fn none_stand_ins() -> &'static PairStandIns {
    static NONE: std::sync::OnceLock<PairStandIns> = std::sync::OnceLock::new();
    NONE.get_or_init(PairStandIns::new)
}

fn none_vectors() -> &'static PairVectors {
    static NONE: std::sync::OnceLock<PairVectors> = std::sync::OnceLock::new();
    NONE.get_or_init(PairVectors::new)
}
