//! Which corpus images belong to which passages (Task 4's pairs, grades and exclusions).
//!
//! Two rules, as the two public implementations of MM-BRIGHT link them
//! (`docs/src/mm-bright-protocol.md`, "Linking passages and images"):
//! - [`PairLink::Regex`], the reference code's: a passage and an image are linked when their
//!   8-hex base keys are equal (`/([0-9a-f]+)_\d+\.txt$` on the passage id,
//!   `{domain}_([0-9a-f]+)_\d+` on the image path). Chunked passage ids such as
//!   `biology/fec40b40_1635_4.txt` match no key, so their pages get no image pairs.
//! - [`PairLink::SourceId`], MTEB's port's: the `source_passage_id` of the image annotations
//!   (`positive_images` / `negative_images` of `examples_multimodal`) names the passage an
//!   image comes from; images no annotation names are linked to nothing.
//!
//! A knowledge base ([`sift_core::Layout::Kb`]) links by neither: each row links its passage
//! to its image ([`PairLink::Row`], [`Links::from_pairs`]; [`Links::for_corpus`] picks the
//! rows for a knowledge base and the rule otherwise).
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use sift_core::{Corpus, Example, image_base_key, passage_base_key};

/// How passages and corpus images are linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PairLink {
    /// Equal 8-hex base keys of passage id and image path (the reference code).
    #[default]
    Regex,
    /// The annotations' `source_passage_id` (MTEB's port).
    SourceId,
    /// A knowledge base's rows: a row's passage and its image ([`Links::from_pairs`],
    /// [`Links::for_corpus`]). Not a choice on the command line: a knowledge base always
    /// links so, and other corpora have no rows ([`Links::new`] links nothing by it).
    #[cfg_attr(feature = "clap", value(skip))]
    Row,
}

impl PairLink {
    /// Lower-case name (`regex`, `source-id`, `row`).
    pub fn name(self) -> &'static str {
        match self {
            PairLink::Regex => "regex",
            PairLink::SourceId => "source-id",
            PairLink::Row => "row",
        }
    }
}

impl std::fmt::Display for PairLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PairLink {
    type Err = String;
    fn from_str(s: &str) -> Result<PairLink, String> {
        match s {
            "regex" => Ok(PairLink::Regex),
            "source-id" | "source_id" => Ok(PairLink::SourceId),
            o => Err(format!(
                "unknown pair link {o:?}: expected regex or source-id"
            )),
        }
    }
}

/// What a linking rule left unlinked in one domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    /// The rule.
    pub link: String,
    /// Passages of the domain.
    pub passages: usize,
    /// Passages linked to at least one corpus image.
    pub passages_linked: usize,
    /// Passages the rule cannot link at all: under `regex`, ids that match no base key (e.g.
    /// chunked ids); under `source-id`, 0 (any passage can be named).
    pub passages_unkeyed: usize,
    /// Corpus images of the domain.
    pub images: usize,
    /// Corpus images linked to no passage of the corpus.
    pub images_unlinked: usize,
    /// Image pairs (passage, image) among the candidates.
    pub image_pairs: usize,
    /// `source-id`: annotations naming a passage the corpus does not have; `row`: linked
    /// passages (rows) that are not among the passages (an index built from another file).
    pub unknown_source_passages: usize,
}

/// The links of one domain's passages and corpus images under a [`PairLink`] rule.
#[derive(Debug, Clone)]
pub struct Links {
    link: PairLink,
    domain: String,
    /// `source-id`, `row`: the annotated (image, passage) links.
    sources: HashSet<(String, String)>,
    /// Corpus image index -> linked corpus passage indexes (ascending).
    by_image: Vec<Vec<u32>>,
    /// Passage index -> linked corpus image indexes (ascending).
    by_passage: Vec<Vec<u32>>,
    stats: LinkStats,
}

impl Links {
    /// Links `passages` (ids) and `images` (normalised paths) of `domain` by `link`;
    /// `examples` are the domain's multimodal examples (their annotations are what
    /// [`PairLink::SourceId`] reads). [`PairLink::Row`] links nothing here: its links come
    /// from the rows ([`Links::from_pairs`]).
    pub fn new(
        link: PairLink,
        domain: &str,
        passages: &[impl AsRef<str>],
        images: &[impl AsRef<str>],
        examples: &[Example],
    ) -> Links {
        let mut by_passage: Vec<Vec<u32>> = vec![Vec::new(); passages.len()];
        let mut by_image: Vec<Vec<u32>> = vec![Vec::new(); images.len()];
        let mut sources = HashSet::new();
        let mut stats = LinkStats {
            link: link.name().to_string(),
            passages: passages.len(),
            images: images.len(),
            ..LinkStats::default()
        };
        match link {
            PairLink::Regex => {
                let mut images_by_key: HashMap<&str, Vec<u32>> = HashMap::new();
                for (i, img) in images.iter().enumerate() {
                    if let Some(key) = image_base_key(domain, img.as_ref()) {
                        images_by_key.entry(key).or_default().push(i as u32);
                    }
                }
                for (p, pid) in passages.iter().enumerate() {
                    let Some(key) = passage_base_key(pid.as_ref()) else {
                        stats.passages_unkeyed += 1;
                        continue;
                    };
                    if let Some(imgs) = images_by_key.get(key) {
                        by_passage[p] = imgs.clone();
                        for &i in imgs {
                            by_image[i as usize].push(p as u32);
                        }
                    }
                }
            }
            PairLink::SourceId => {
                for ex in examples {
                    if let Some(labels) = &ex.images {
                        sources.extend(labels.sources.iter().cloned());
                    }
                }
                stats.unknown_source_passages =
                    link_explicit(passages, images, &sources, &mut by_passage, &mut by_image);
            }
            PairLink::Row => {}
        }
        Links::finish(link, domain, sources, by_image, by_passage, stats)
    }

    fn finish(
        link: PairLink,
        domain: &str,
        sources: HashSet<(String, String)>,
        by_image: Vec<Vec<u32>>,
        by_passage: Vec<Vec<u32>>,
        mut stats: LinkStats,
    ) -> Links {
        stats.passages_linked = by_passage.iter().filter(|v| !v.is_empty()).count();
        stats.images_unlinked = by_image.iter().filter(|v| v.is_empty()).count();
        stats.image_pairs = by_passage.iter().map(Vec::len).sum();
        Links {
            link,
            domain: domain.to_string(),
            sources,
            by_image,
            by_passage,
            stats,
        }
    }

    /// Links `passages` (ids) and `images` (ids) by explicit `(passage id, image id)` pairs
    /// ([`PairLink::Row`]): a knowledge base's rows ([`Corpus::row_links`]). Pairs naming an
    /// image not among `images` (one the corpus skipped) link nothing; pairs naming a passage
    /// not among `passages` are counted in [`LinkStats::unknown_source_passages`].
    pub fn from_pairs(
        passages: &[impl AsRef<str>],
        images: &[impl AsRef<str>],
        pairs: &[(String, String)],
    ) -> Links {
        let mut by_passage: Vec<Vec<u32>> = vec![Vec::new(); passages.len()];
        let mut by_image: Vec<Vec<u32>> = vec![Vec::new(); images.len()];
        let mut stats = LinkStats {
            link: PairLink::Row.name().to_string(),
            passages: passages.len(),
            images: images.len(),
            ..LinkStats::default()
        };
        let sources: HashSet<(String, String)> = pairs
            .iter()
            .map(|(pid, img)| (img.clone(), pid.clone()))
            .collect();
        stats.unknown_source_passages =
            link_explicit(passages, images, &sources, &mut by_passage, &mut by_image);
        Links::finish(PairLink::Row, "", sources, by_image, by_passage, stats)
    }

    /// The links of `corpus`'s `domain`: a knowledge base's rows ([`Corpus::row_links`],
    /// whatever `link` says), else [`Links::new`] by `link`. What a caller holding a corpus
    /// calls: `passages` are the index's passage ids, `images` the corpus image ids.
    pub fn for_corpus(
        corpus: &Corpus,
        link: PairLink,
        domain: &str,
        passages: &[impl AsRef<str>],
        images: &[impl AsRef<str>],
        examples: &[Example],
    ) -> sift_core::Result<Links> {
        Ok(match corpus.row_links(domain)? {
            Some(pairs) => Links::from_pairs(passages, images, &pairs),
            None => Links::new(link, domain, passages, images, examples),
        })
    }

    /// The rule.
    pub fn link(&self) -> PairLink {
        self.link
    }

    /// What it left unlinked.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// The corpus images (indexes) linked to passage `p` (an index), ascending.
    pub fn images_of(&self, p: u32) -> &[u32] {
        self.by_passage.get(p as usize).map_or(&[], Vec::as_slice)
    }

    /// The passages (indexes) linked to corpus image `i` (an index), ascending.
    pub fn passages_of(&self, i: u32) -> &[u32] {
        self.by_image.get(i as usize).map_or(&[], Vec::as_slice)
    }

    /// Whether passage id `pid` and image path `image` are linked, whether or not the corpus
    /// holds them (a judged pair need not be a candidate).
    pub fn linked(&self, pid: &str, image: &str) -> bool {
        match self.link {
            PairLink::Regex => match passage_base_key(pid) {
                Some(k) => image_base_key(&self.domain, image) == Some(k),
                None => false,
            },
            PairLink::SourceId | PairLink::Row => {
                self.sources.contains(&(image.to_string(), pid.to_string()))
            }
        }
    }
}

/// Links explicit `(image id, passage id)` pairs into `by_passage` and `by_image` (each list
/// sorted, without repeats). A pair naming an image not among `images` links nothing;
/// returns how many distinct passage ids the pairs name that are not among `passages`.
fn link_explicit(
    passages: &[impl AsRef<str>],
    images: &[impl AsRef<str>],
    pairs: &HashSet<(String, String)>,
    by_passage: &mut [Vec<u32>],
    by_image: &mut [Vec<u32>],
) -> usize {
    let passage_index = index_of(passages);
    let image_index = index_of(images);
    let mut unknown: HashSet<&str> = HashSet::new();
    for (img, pid) in pairs {
        let Some(&p) = passage_index.get(pid.as_str()) else {
            unknown.insert(pid);
            continue;
        };
        if let Some(&i) = image_index.get(img.as_str()) {
            by_passage[p as usize].push(i);
            by_image[i as usize].push(p);
        }
    }
    for v in by_passage.iter_mut().chain(by_image.iter_mut()) {
        v.sort_unstable();
        v.dedup();
    }
    unknown.len()
}

/// Each id's position in `ids`.
pub(crate) fn index_of(ids: &[impl AsRef<str>]) -> HashMap<&str, u32> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| (id.as_ref(), i as u32))
        .collect()
}

/// Per-domain link statistics, by domain.
pub type LinkReport = BTreeMap<String, LinkStats>;

#[cfg(test)]
mod tests {
    use super::*;
    use sift_core::ImageLabels;

    fn example(sources: &[(&str, &str)]) -> Example {
        Example {
            id: "q".into(),
            query: "x".into(),
            images: Some(ImageLabels {
                positive: sources.iter().map(|s| s.0.to_string()).collect(),
                negative: Vec::new(),
                sources: sources
                    .iter()
                    .map(|(i, p)| (i.to_string(), p.to_string()))
                    .collect(),
            }),
            ..Example::default()
        }
    }

    #[test]
    fn regex_links_by_key_and_cannot_link_chunked_ids() {
        let passages = [
            "biology/fec40b40_1635_4.txt",
            "biology/aa11_1.txt",
            "biology/bb_2.txt",
        ];
        let images = [
            "biology/biology_fec40b40_0001/image_1.png",
            "biology/biology_aa11_1/x.png",
        ];
        let l = Links::new(PairLink::Regex, "biology", &passages, &images, &[]);
        assert_eq!(l.images_of(0), &[] as &[u32]);
        assert_eq!(l.images_of(1), &[1]);
        assert_eq!(l.passages_of(0), &[] as &[u32]);
        let s = l.stats();
        assert_eq!(
            (
                s.passages_unkeyed,
                s.passages_linked,
                s.images_unlinked,
                s.image_pairs
            ),
            (1, 1, 1, 1)
        );
        assert!(l.linked("biology/aa11_7.txt", "biology/biology_aa11_3/y.png"));
        assert!(!l.linked(passages[0], images[0]));
    }

    #[test]
    fn source_ids_link_chunked_ids_the_annotations_name() {
        let passages = ["biology/fec40b40_1635_4.txt", "biology/fec40b40_1635_5.txt"];
        let images = [
            "biology/biology_fec40b40_0001/image_1.png",
            "biology/unnamed.png",
        ];
        let ex = [example(&[
            (images[0], passages[0]),
            (images[0], "biology/missing_1.txt"),
        ])];
        let l = Links::new(PairLink::SourceId, "biology", &passages, &images, &ex);
        assert_eq!(l.images_of(0), &[0]);
        assert_eq!(l.images_of(1), &[] as &[u32]);
        assert_eq!(l.passages_of(0), &[0]);
        let s = l.stats();
        assert_eq!(
            (
                s.passages_unkeyed,
                s.passages_linked,
                s.images_unlinked,
                s.image_pairs
            ),
            (0, 1, 1, 1)
        );
        assert_eq!(s.unknown_source_passages, 1);
        assert!(l.linked(passages[0], images[0]));
        assert!(!l.linked(passages[1], images[0]));
    }

    #[test]
    fn explicit_pairs_link_rows_and_share_an_image() {
        let passages = ["r1", "r2", "r3", "r4"];
        let images = ["img/a.png", "img/b.png", "img/unused.png"];
        let pairs: Vec<(String, String)> = [
            ("r1", "img/a.png"),
            ("r2", "img/a.png"),
            ("r3", "img/b.png"),
            ("r4", "img/skipped.png"),
            ("gone", "img/b.png"),
        ]
        .iter()
        .map(|(p, i)| (p.to_string(), i.to_string()))
        .collect();
        let l = Links::from_pairs(&passages, &images, &pairs);
        assert_eq!(l.link(), PairLink::Row);
        assert_eq!(l.images_of(0), &[0]);
        assert_eq!(l.images_of(1), &[0]);
        assert_eq!(l.images_of(2), &[1]);
        assert_eq!(l.images_of(3), &[] as &[u32]);
        assert_eq!(l.passages_of(0), &[0, 1]);
        assert_eq!(l.passages_of(2), &[] as &[u32]);
        let s = l.stats();
        assert_eq!(s.link, "row");
        assert_eq!(
            (
                s.passages_unkeyed,
                s.passages_linked,
                s.images_unlinked,
                s.image_pairs,
                s.unknown_source_passages
            ),
            (0, 3, 1, 3, 1)
        );
        assert!(l.linked("r2", "img/a.png"));
        assert!(!l.linked("r2", "img/b.png"));
        // the rule itself links nothing without its rows
        let none = Links::new(PairLink::Row, "kb", &passages, &images, &[]);
        assert_eq!(none.stats().image_pairs, 0);
        assert!(!none.linked("r1", "img/a.png"));
    }
}
