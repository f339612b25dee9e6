//! The images the page shows, each once, and their thumbnails within the budget.
use std::collections::{BTreeMap, HashMap, HashSet};

use rayon::prelude::*;
use serde_json::{Value, json};
use sift_core::{Corpus, WarningKind, Warnings};

/// Every image the page shows, once (query images and candidates' images), and the
/// thumbnail each is given.
#[derive(Default)]
pub(super) struct ImageTable {
    /// (domain, query image?, id) -> slot
    index: HashMap<(String, bool, String), usize>,
    /// (domain, query image?, id, thumbnail)
    pub(super) entries: Vec<(String, bool, String, Option<String>)>,
    /// domain -> query images' slots as shown, and (rank, slot) of candidates' images as
    /// shown: the order the domain's share of the thumbnails' budget is given out in
    priority: BTreeMap<String, Shown>,
}

/// A domain's query images' slots, and (rank, slot) of its candidates' images, as shown.
type Shown = (Vec<usize>, Vec<(usize, usize)>);

impl ImageTable {
    fn slot(&mut self, domain: &str, query: bool, id: &str) -> usize {
        let key = (domain.to_string(), query, id.to_string());
        if let Some(&s) = self.index.get(&key) {
            return s;
        }
        self.entries
            .push((domain.to_string(), query, id.to_string(), None));
        self.index.insert(key, self.entries.len() - 1);
        self.entries.len() - 1
    }

    /// A query image shown.
    pub(super) fn query(&mut self, domain: &str, id: &str) -> usize {
        let s = self.slot(domain, true, id);
        self.priority
            .entry(domain.to_string())
            .or_default()
            .0
            .push(s);
        s
    }

    /// A candidate's image shown at `rank` (0-based).
    pub(super) fn candidate(&mut self, domain: &str, id: &str, rank: usize) -> usize {
        let s = self.slot(domain, false, id);
        let p = self.priority.entry(domain.to_string()).or_default();
        p.1.push((rank, s));
        s
    }

    /// The domain's slots in the order thumbnails go to them: its query images, then its
    /// candidates' images by rank (every retriever's first, then their second, ...), each
    /// once.
    fn order(&self, domain: &str) -> Vec<usize> {
        let Some((queries, candidates)) = self.priority.get(domain) else {
            return Vec::new();
        };
        let mut candidates = candidates.clone();
        candidates.sort_by_key(|&(rank, _)| rank);
        let mut seen = HashSet::new();
        queries
            .iter()
            .copied()
            .chain(candidates.into_iter().map(|(_, s)| s))
            .filter(|&s| seen.insert(s))
            .collect()
    }

    /// Makes thumbnails within `budget` bytes: every domain in turn is given an even share
    /// of what is left, spent in [`ImageTable::order`]; images are read from the corpus
    /// one domain at a time and thumbnailed in parallel. Returns the thumbnails made.
    pub(super) fn thumbnails(
        &mut self,
        corpus: &Corpus,
        budget: usize,
        px: u32,
        warnings: &mut Warnings,
    ) -> usize {
        let domains: Vec<String> = self.priority.keys().cloned().collect();
        let (mut used, mut made) = (0, 0);
        let chunk = 4 * rayon::current_num_threads().max(1);
        for (n, domain) in domains.iter().enumerate() {
            let share = (budget - used) / (domains.len() - n);
            // a thumbnail is rarely under 500 bytes: more than share / 500 are never needed
            let order: Vec<usize> = self
                .order(domain)
                .into_iter()
                .take(share / 500 + chunk)
                .collect();
            if share == 0 || order.is_empty() {
                continue;
            }
            let mut bytes: HashMap<usize, Vec<u8>> = HashMap::new();
            for query in [true, false] {
                let wanted: HashMap<&str, usize> = order
                    .iter()
                    .filter(|&&s| self.entries[s].1 == query)
                    .map(|&s| (self.entries[s].2.as_str(), s))
                    .collect();
                if wanted.is_empty() {
                    continue;
                }
                let (stream, what) = if query {
                    (corpus.query_images(domain), "query images")
                } else {
                    (corpus.images(domain), "images")
                };
                let place = format!("{what} of {domain}");
                drain(stream, corpus, place, warnings, |r| {
                    if let Some(&s) = wanted.get(r.path.as_str()) {
                        bytes.insert(s, r.bytes);
                    }
                });
            }
            // the first that does not fit ends the domain's share: the thumbnails shown
            // are always the first in its order
            let (mut spent, mut full) = (0, false);
            for part in order.chunks(chunk) {
                if full {
                    break;
                }
                let urls: Vec<Option<String>> = part
                    .par_iter()
                    .map(|s| bytes.get(s).and_then(|b| thumbnail(b, px)))
                    .collect();
                for (&s, url) in part.iter().zip(urls) {
                    let Some(u) = url else { continue };
                    if full || spent + u.len() > share {
                        full = true;
                        continue;
                    }
                    spent += u.len();
                    made += 1;
                    self.entries[s].3 = Some(u);
                }
            }
            used += spent;
        }
        made
    }

    /// `[id, thumbnail]` of every slot.
    pub(super) fn to_json(&self) -> Value {
        Value::Array(
            self.entries
                .iter()
                .map(|(_, _, id, src)| json!([id, src]))
                .collect(),
        )
    }
}

/// Counts a part of the corpus the report could not read.
pub(super) fn unreadable(
    warnings: &mut Warnings,
    corpus: &Corpus,
    place: String,
    e: &sift_core::Error,
) {
    warnings.push(
        WarningKind::UnreadableCorpus,
        corpus.root(),
        place,
        format!("{e} (not shown in the report)"),
    );
}

/// Gives `keep` every item of a corpus stream; an error is counted and ends the stream.
pub(super) fn drain<T>(
    items: sift_core::Result<impl Iterator<Item = sift_core::Result<T>>>,
    corpus: &Corpus,
    place: String,
    warnings: &mut Warnings,
    mut keep: impl FnMut(T),
) {
    let items = match items {
        Ok(items) => items,
        Err(e) => return unreadable(warnings, corpus, place, &e),
    };
    for item in items {
        match item {
            Ok(t) => keep(t),
            Err(e) => {
                let place = format!("{place}, from this error on");
                return unreadable(warnings, corpus, place, &e);
            }
        }
    }
}

fn thumbnail(bytes: &[u8], px: u32) -> Option<String> {
    use base64::Engine as _;
    let img = image::load_from_memory(bytes).ok()?;
    let small = img.thumbnail(px, px).to_rgb8();
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 70)
        .encode_image(&small)
        .ok()?;
    Some(format!(
        "data:image/jpeg;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(out)
    ))
}
