//! Assembly of evaluation tasks from a corpus (`docs/src/mm-bright-protocol.md`,
//! "Qrels per task").
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use sift_core::{Corpus, Example, Layout, Qrels, WarningKind, Warnings};

use crate::Result;
use crate::links::{Links, index_of};
use crate::metrics::Exclusions;

/// The four MM-BRIGHT tasks (protocol, "Tasks").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Task {
    /// Task 1: query text -> passages (`examples`).
    #[cfg_attr(feature = "clap", value(name = "1"))]
    Passages,
    /// Task 2: query text + images -> passages (`examples_multimodal`).
    #[cfg_attr(feature = "clap", value(name = "2"))]
    MultimodalPassages,
    /// Task 3: query text + images -> corpus images.
    #[cfg_attr(feature = "clap", value(name = "3"))]
    Images,
    /// Task 4: query text + images -> passage+image pairs, graded.
    #[cfg_attr(feature = "clap", value(name = "4"))]
    Pairs,
}

/// What a task (or a search) ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum CandidateKind {
    /// The domain's passages
    #[default]
    Passages,
    /// The domain's corpus images (retrievers whose models embed images)
    Images,
    /// Passage+image pairs of the same page (MM-BRIGHT Task 4), text-only pairs included
    Pairs,
}

impl Task {
    /// What a document id of this task's runs names: (passage id, corpus image path): a
    /// passage (Tasks 1-2), an image (Task 3), or a pair's halves (Task 4,
    /// [`split_pair_id`]).
    pub fn doc_parts(self, doc: &str) -> (Option<&str>, Option<&str>) {
        match self {
            Task::Passages | Task::MultimodalPassages => (Some(doc), None),
            Task::Images => (None, Some(doc)),
            Task::Pairs => {
                let (p, i) = split_pair_id(doc);
                (Some(p), i)
            }
        }
    }

    /// Every task, in order.
    pub const ALL: [Task; 4] = [
        Task::Passages,
        Task::MultimodalPassages,
        Task::Images,
        Task::Pairs,
    ];

    /// The task's number (1-4).
    pub fn number(self) -> u8 {
        match self {
            Task::Passages => 1,
            Task::MultimodalPassages => 2,
            Task::Images => 3,
            Task::Pairs => 4,
        }
    }

    /// What it ranks.
    pub fn candidates(self) -> CandidateKind {
        match self {
            Task::Passages | Task::MultimodalPassages => CandidateKind::Passages,
            Task::Images => CandidateKind::Images,
            Task::Pairs => CandidateKind::Pairs,
        }
    }

    /// Whether its queries come with images (Tasks 2-4).
    pub fn has_query_images(self) -> bool {
        self != Task::Passages
    }

    /// Whether its candidates involve the corpus images (Tasks 3 and 4).
    pub fn uses_corpus_images(self) -> bool {
        matches!(self, Task::Images | Task::Pairs)
    }

    /// Its queries, judgements and exclusions on `domain` of `corpus` (the qrels `split`
    /// for BEIR corpora; Task 4 needs the domain's passage ids, corpus image paths, their
    /// [`Links`] and its `protocol`).
    #[allow(clippy::too_many_arguments)]
    pub fn data(
        self,
        corpus: &Corpus,
        domain: &str,
        split: &str,
        passages: &[impl AsRef<str>],
        images: &[impl AsRef<str>],
        links: &Links,
        protocol: Protocol,
    ) -> Result<TaskData> {
        match self {
            Task::Passages => task1(corpus, domain, split),
            Task::MultimodalPassages => task2(corpus, domain),
            Task::Images => task3(corpus, domain),
            Task::Pairs => task4(corpus, domain, passages, images, links, protocol),
        }
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

impl std::str::FromStr for Task {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Task, String> {
        match s.trim() {
            "1" => Ok(Task::Passages),
            "2" => Ok(Task::MultimodalPassages),
            "3" => Ok(Task::Images),
            "4" => Ok(Task::Pairs),
            other => Err(format!("unknown task {other:?}: expected 1, 2, 3 or 4")),
        }
    }
}

/// The positive images of `example` linked to none of its gold passages (the protocol's
/// Task 4 orphans: they make no pair). Under [`PairLink::Regex`](crate::PairLink) that is an
/// image whose base key matches no gold passage's.
pub fn orphan_positive_images<'a>(links: &Links, example: &'a Example) -> Vec<&'a str> {
    example
        .images
        .iter()
        .flat_map(|l| &l.positive)
        .filter(|p| !example.gold_ids.iter().any(|g| links.linked(g, p)))
        .map(String::as_str)
        .collect()
}

/// Queries, judgements and exclusions of one task on one domain.
#[derive(Debug, Clone, Default)]
pub struct TaskData {
    /// Domain name.
    pub domain: String,
    /// Queries to run (only those with judgements).
    pub queries: Vec<Example>,
    /// Judgements.
    pub qrels: Qrels,
    /// Per-query passages removed from the ranking before scoring.
    pub exclusions: Exclusions,
    /// Queries dropped because they have no judgements.
    pub dropped_no_qrels: usize,
    /// Problems counted while reading.
    pub warnings: Warnings,
}

impl TaskData {
    fn new(domain: &str) -> TaskData {
        TaskData {
            domain: domain.to_string(),
            ..TaskData::default()
        }
    }

    /// Adds `ex` judged by its gold ids (grade 1), its negative ids excluded from its
    /// ranking (Tasks 1 and 2 on MM-BRIGHT).
    fn push_gold(&mut self, ex: Example) {
        let judged = self.qrels.entry(ex.id.clone()).or_default();
        for gold in &ex.gold_ids {
            judged.insert(gold.clone(), 1);
        }
        let excluded: BTreeSet<String> = ex.negative_ids.iter().cloned().collect();
        if !excluded.is_empty() {
            self.exclusions.insert(ex.id.clone(), excluded);
        }
        self.queries.push(ex);
    }
}

/// Task 1 (query text -> passages) on `domain`.
///
/// MM-BRIGHT: `examples` rows; `qrels[qid][gold_id] = 1`; each query's `negative_ids` are
/// excluded from its ranking (as the reference code does). BEIR: `queries.jsonl` with the
/// graded qrels of `split`; no exclusions. Queries with no judgements are dropped before
/// scoring, and counted.
pub fn task1(corpus: &Corpus, domain: &str, split: &str) -> Result<TaskData> {
    let mut data = TaskData::new(domain);
    let examples = corpus.examples(domain, false, &mut data.warnings)?;
    match corpus.layout() {
        Layout::MmBright => {
            for ex in examples {
                if ex.gold_ids.is_empty() {
                    data.dropped_no_qrels += 1;
                    data.warnings.push(
                        WarningKind::QueryWithoutJudgements,
                        corpus.root().join("examples"),
                        String::new(),
                        format!("query {:?} of {domain} has no gold_ids: not scored", ex.id),
                    );
                    continue;
                }
                data.push_gold(ex);
            }
        }
        // a knowledge base has no queries: `examples` above already refused it
        Layout::Beir | Layout::Kb => {
            let known: HashSet<&str> = examples.iter().map(|e| e.id.as_str()).collect();
            data.qrels = corpus.beir_qrels(split, Some(&known), &mut data.warnings)?;
            data.qrels.retain(|_, judged| !judged.is_empty());
            let total = examples.len();
            data.queries = examples
                .into_iter()
                .filter(|e| data.qrels.contains_key(&e.id))
                .collect();
            data.dropped_no_qrels = total - data.queries.len();
        }
    }
    Ok(data)
}

/// Counts qrels entries naming documents that `known` does not contain. They are kept: as in
/// trec_eval, a relevant document that cannot be retrieved still counts in the ideal ranking.
pub fn check_qrels_ids(
    qrels: &Qrels,
    known: impl Fn(&str) -> bool,
    source: &Path,
    warnings: &mut Warnings,
) {
    for (qid, docs) in qrels {
        for doc in docs.keys() {
            if !known(doc) {
                warnings.push(
                    WarningKind::UnknownDocId,
                    source,
                    String::new(),
                    format!(
                        "query {qid:?} judges unknown document {doc:?} (kept; never retrievable)"
                    ),
                );
            }
        }
    }
}

/// Counts the exclusions (`negative_ids`) that mean something other than what they say: a
/// passage that is also one of the query's gold passages (removed from the ranking, as the
/// reference code removes it, yet counted in the ideal ranking, so it lowers the score), and
/// ids `known` does not contain (nothing to remove).
pub fn check_exclusions(
    exclusions: &Exclusions,
    qrels: &Qrels,
    known: impl Fn(&str) -> bool,
    source: &Path,
    warnings: &mut Warnings,
) {
    for (qid, excluded) in exclusions {
        let judged = qrels.get(qid);
        for doc in excluded {
            if judged.and_then(|j| j.get(doc)).is_some_and(|&g| g > 0) {
                warnings.push(
                    WarningKind::GoldAlsoNegative,
                    source,
                    String::new(),
                    format!(
                        "query {qid:?}: {doc:?} is both a gold and a negative id (removed from the ranking, as the reference does; it still counts as relevant)"
                    ),
                );
            } else if !known(doc) {
                warnings.push(
                    WarningKind::UnknownNegativeId,
                    source,
                    String::new(),
                    format!("query {qid:?}: negative id {doc:?} names no passage"),
                );
            }
        }
    }
}

/// Task 2 (query text + images -> passages) on `domain`: the `examples_multimodal` rows,
/// `qrels[qid][gold_id] = 1`, each query's `negative_ids` excluded (protocol, "Qrels per
/// task" and "Exclusions"). Queries without judgements are dropped and counted.
pub fn task2(corpus: &Corpus, domain: &str) -> Result<TaskData> {
    let mut data = TaskData::new(domain);
    for ex in corpus.examples(domain, true, &mut data.warnings)? {
        if ex.gold_ids.is_empty() {
            data.dropped_no_qrels += 1;
            continue;
        }
        data.push_gold(ex);
    }
    Ok(data)
}

/// Task 3 (query text + images -> images) on `domain`: `qrels[qid][positive_image] = 1`
/// over the domain's `document_images`; no exclusions (the reference's `negative_ids` are
/// passage ids and do not apply). Queries without positive images are dropped and counted.
pub fn task3(corpus: &Corpus, domain: &str) -> Result<TaskData> {
    let mut data = TaskData::new(domain);
    for ex in corpus.examples(domain, true, &mut data.warnings)? {
        let positive = ex.images.as_ref().map_or(&[][..], |l| &l.positive[..]);
        if positive.is_empty() {
            data.dropped_no_qrels += 1;
            continue;
        }
        let judged = data.qrels.entry(ex.id.clone()).or_default();
        for img in positive {
            judged.insert(img.clone(), 1);
        }
        data.queries.push(ex);
    }
    Ok(data)
}

/// The image half of a Task 4 pair id for a passage shown without an image.
pub const NO_IMAGE: &str = "__NO_IMAGE__";

/// Separator of the passage and image halves of a Task 4 pair id.
pub const PAIR_SEP: &str = "|||";

/// The id of the Task 4 candidate pairing passage `pid` with `image` (None: no image).
pub fn pair_id(pid: &str, image: Option<&str>) -> String {
    format!("{pid}{PAIR_SEP}{}", image.unwrap_or(NO_IMAGE))
}

/// The halves of a Task 4 pair id, [`pair_id`]'s inverse: the passage id and the image
/// (`None` for [`NO_IMAGE`]); an id without [`PAIR_SEP`] is a passage id alone.
pub fn split_pair_id(id: &str) -> (&str, Option<&str>) {
    match id.split_once(PAIR_SEP) {
        Some((p, i)) if i == NO_IMAGE => (p, None),
        Some((p, i)) => (p, Some(i)),
        None => (id, None),
    }
}

/// How Task 4 is judged (protocol, "Qrels per task").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Protocol {
    /// The paper: graded 2/1/0, pairs with a negative image excluded.
    #[default]
    Paper,
    /// The older reference code: every gold-passage pair rel 1, nothing excluded.
    Legacy,
}

impl Protocol {
    /// Lower-case name (`paper`, `legacy`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Paper => "paper",
            Protocol::Legacy => "legacy",
        }
    }
}

/// Task 4 candidates of a domain: for every passage `pid|||__NO_IMAGE__`, plus `pid|||img`
/// for every corpus image linked to it ([`Links`]; protocol, "Linking passages and images").
/// Each pair is (passage index, image index).
#[derive(Debug, Clone, Default)]
pub struct Pairs {
    /// `(index into passages, index into images or None)`, passages in order, each passage's
    /// no-image pair first, then its images in corpus order.
    pub pairs: Vec<(u32, Option<u32>)>,
}

impl Pairs {
    /// The candidate pairs of `passages` and `images` (normalised paths) of `domain`, linked
    /// by base key (the reference code's rule, [`PairLink::Regex`](crate::PairLink)).
    pub fn build(domain: &str, passages: &[impl AsRef<str>], images: &[impl AsRef<str>]) -> Pairs {
        Pairs::from_links(&Links::new(
            crate::PairLink::Regex,
            domain,
            passages,
            images,
            &[],
        ))
    }

    /// The candidate pairs of the passages and images `links` links.
    pub fn from_links(links: &Links) -> Pairs {
        let stats = links.stats();
        let mut pairs = Vec::with_capacity(stats.passages + stats.image_pairs);
        for p in 0..stats.passages as u32 {
            pairs.push((p, None));
            pairs.extend(links.images_of(p).iter().map(|&i| (p, Some(i))));
        }
        Pairs { pairs }
    }

    /// The index of the pair (passage `p`, `image`), if it is a candidate.
    pub fn find(&self, p: u32, image: Option<u32>) -> Option<u32> {
        let start = self.pairs.partition_point(|&(q, _)| q < p);
        self.pairs[start..]
            .iter()
            .take_while(|&&(q, _)| q == p)
            .position(|&(_, img)| img == image)
            .map(|i| (start + i) as u32)
    }
}

/// Task 4 (query text + images -> passage+image pairs) on `domain`, given the domain's
/// passage ids, (normalised) image paths and their [`Links`].
///
/// Paper protocol: rel 2 = a gold passage with an image annotated positive (every gold
/// passage linked to the image); rel 1 = a gold passage with `__NO_IMAGE__`; a
/// pair whose image is annotated negative (and not also positive: positive wins) is excluded
/// from the ranking; a positive pair missing from the candidates is still judged; a positive
/// image with no gold passage of its page is an orphan: no pair, counted as a warning.
/// Legacy protocol: every candidate pair of a gold passage is rel 1; nothing is excluded.
/// Queries without judgements are dropped and counted.
pub fn task4(
    corpus: &Corpus,
    domain: &str,
    passages: &[impl AsRef<str>],
    images: &[impl AsRef<str>],
    links: &Links,
    protocol: Protocol,
) -> Result<TaskData> {
    let mut data = TaskData::new(domain);
    let examples = corpus.examples(domain, true, &mut data.warnings)?;
    let passage_index = index_of(passages);
    let image_index = index_of(images);
    let source = corpus.root().join("examples_multimodal");
    for ex in examples {
        let mut judged: BTreeMap<String, i32> = BTreeMap::new();
        let mut excluded = BTreeSet::new();
        let labels = ex.images.clone().unwrap_or_default();
        let positive: BTreeSet<&str> = labels.positive.iter().map(String::as_str).collect();
        match protocol {
            Protocol::Paper => {
                for gold in &ex.gold_ids {
                    judged.insert(pair_id(gold, None), 1);
                }
                let orphans = orphan_positive_images(links, &ex);
                for img in &positive {
                    if orphans.contains(img) {
                        data.warnings.push(
                            WarningKind::OrphanPositiveImage,
                            &source,
                            String::new(),
                            format!(
                                "query {:?}: positive image {img:?} is linked to no gold passage (no pair)",
                                ex.id
                            ),
                        );
                    }
                    for g in ex.gold_ids.iter().filter(|g| links.linked(g, img)) {
                        judged.insert(pair_id(g, Some(img)), 2);
                    }
                }
                for img in &labels.negative {
                    if positive.contains(img.as_str()) {
                        continue;
                    }
                    let Some(&i) = image_index.get(img.as_str()) else {
                        continue;
                    };
                    for &p in links.passages_of(i) {
                        excluded.insert(pair_id(passages[p as usize].as_ref(), Some(img)));
                    }
                }
            }
            Protocol::Legacy => {
                for gold in &ex.gold_ids {
                    let Some(&p) = passage_index.get(gold.as_str()) else {
                        continue;
                    };
                    judged.insert(pair_id(gold, None), 1);
                    for &i in links.images_of(p) {
                        judged.insert(pair_id(gold, Some(images[i as usize].as_ref())), 1);
                    }
                }
            }
        }
        if judged.is_empty() {
            data.dropped_no_qrels += 1;
            continue;
        }
        data.qrels.insert(ex.id.clone(), judged);
        if !excluded.is_empty() {
            data.exclusions.insert(ex.id.clone(), excluded);
        }
        data.queries.push(ex);
    }
    Ok(data)
}

#[cfg(test)]
mod pair_id_tests {
    use super::*;

    #[test]
    fn pair_ids_split_back_into_their_halves_and_each_task_names_its_parts() {
        for (p, i) in [
            ("bio/a_1.txt", Some("bio/img/x.png")),
            ("bio/a_1.txt", None),
        ] {
            assert_eq!(split_pair_id(&pair_id(p, i)), (p, i));
        }
        assert_eq!(split_pair_id("bio/a_1.txt"), ("bio/a_1.txt", None));
        let pair = pair_id("p", Some("i"));
        assert_eq!(Task::Pairs.doc_parts(&pair), (Some("p"), Some("i")));
        assert_eq!(Task::Images.doc_parts("i"), (None, Some("i")));
        assert_eq!(Task::Passages.doc_parts("p"), (Some("p"), None));
        assert_eq!(Task::MultimodalPassages.doc_parts("p"), (Some("p"), None));
    }
}
