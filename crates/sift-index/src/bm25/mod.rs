//! BM25 over tantivy postings, scored by Sift: `k1`, `b` and the scoring formula are chosen
//! at search time.
//!
//! Passages are analyzed by Sift (see [`crate::analyzer`]) and handed to tantivy already
//! tokenized, so every passage's exact length (in terms) is stored next to its postings, not
//! only tantivy's one-byte length code. Two scorings ([`Bm25Scoring`]):
//! - `reference`: the BRIGHT / MM-BRIGHT reference code's (gensim `LuceneBM25Model` on both the
//!   passage and the query, exact lengths);
//! - `lucene`: Lucene's `BM25Similarity` as Anserini runs it (lengths through Lucene's
//!   one-byte code).
//!
//! Scoring is term-at-a-time: for each query term, every posting block of every segment is
//! decoded and its contribution added to a dense per-passage accumulator; the best `k` are
//! then selected. Queries in MM-BRIGHT are long StackExchange posts, for which exhaustive
//! term-at-a-time scoring over bit-packed blocks is both exact and fast.
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{Index, IndexReader, ReloadPolicy, Term};

use crate::analyzer::{Analyzer, AnalyzerConfig};
use crate::lucene::{byte4_to_length, length_to_byte4};
use crate::{Error, Result};

mod write;
pub(crate) use write::build;

const BODY: &str = "body";
const ORD: &str = "ord";
const LEN: &str = "len";
use crate::paths::{ANALYZER_FILE, IDS_FILE};

/// Passages analyzed per parallel batch while building.
const BATCH: usize = 2048;

/// Segments left unmerged after a build, at most.
const MAX_UNMERGED_SEGMENTS: usize = 8;

/// The BM25 formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Bm25Scoring {
    /// The BRIGHT / MM-BRIGHT reference (gensim `LuceneBM25Model`, applied to the passages and
    /// to the query): a term weighs idf * tf / (tf + k1 (1 - b + b len / avgdl)) on each side,
    /// with exact lengths, idf = ln(N + 1) - ln(df + 0.5), N every passage, the query's length
    /// counting only terms the corpus has; score = the dot product.
    #[default]
    Reference,
    /// Lucene's `BM25Similarity` (Anserini, pyserini's `LuceneSearcher`): idf * qtf * tf /
    /// (tf + k1 (1 - b + b len / avgdl)) with idf = ln(1 + (N - df + 0.5) / (df + 0.5)), N the
    /// passages with at least one term, and lengths rounded through Lucene's one-byte code
    /// (exact below 24 terms, then 4 significant bits), computed as Lucene computes it.
    Lucene,
}

impl Bm25Scoring {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Bm25Scoring::Reference => "reference",
            Bm25Scoring::Lucene => "lucene",
        }
    }
}

/// BM25 parameters; applied at search time, so they can differ from the manifest defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation.
    pub b: f32,
    /// The formula.
    pub scoring: Bm25Scoring,
}

impl Default for Bm25Params {
    /// k1 = 0.9, b = 0.4 and the reference scoring, as in BRIGHT and MM-BRIGHT.
    fn default() -> Self {
        Bm25Params {
            k1: 0.9,
            b: 0.4,
            scoring: Bm25Scoring::Reference,
        }
    }
}

impl Bm25Params {
    /// Checks the ranges (k1 >= 0, 0 <= b <= 1, both finite).
    pub fn validate(&self) -> Result<()> {
        if !self.k1.is_finite() || self.k1 < 0.0 {
            return Err(Error::InvalidParameter(format!(
                "k1 must be >= 0, got {}",
                self.k1
            )));
        }
        if !self.b.is_finite() || !(0.0..=1.0).contains(&self.b) {
            return Err(Error::InvalidParameter(format!(
                "b must be within [0, 1], got {}",
                self.b
            )));
        }
        Ok(())
    }
}

struct Segment {
    reader: tantivy::SegmentReader,
    /// Global document number of the segment's document 0.
    base: usize,
}

/// A tantivy error while opening a built index: its files are not what the build wrote.
fn corrupt(dir: &Path, e: tantivy::TantivyError) -> Error {
    Error::Corrupt {
        path: dir.to_path_buf(),
        message: e.to_string(),
    }
}

/// A searchable BM25 index of one domain.
pub struct Bm25Domain {
    path: PathBuf,
    _reader: IndexReader,
    searcher: tantivy::Searcher,
    body: Field,
    segments: Vec<Segment>,
    /// Global document number -> passage ordinal.
    ords: Vec<u32>,
    /// Passage ordinal -> global document number.
    docs: Vec<u32>,
    /// Global document number -> exact length in terms.
    lens: Vec<u32>,
    ids: Vec<String>,
    /// Global document number -> rank of its passage id in byte order (ties in trec_eval's
    /// order are broken by id, so a (score, rank) key orders hits exactly).
    rank_of_doc: Vec<u32>,
    /// Rank -> global document number.
    doc_of_rank: Vec<u32>,
    total_terms: u64,
    /// Passages with at least one term.
    nonempty: u64,
    analyzer: AnalyzerConfig,
}

/// One search result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Passage ordinal (index into [`Bm25Domain::id`]).
    pub ord: u32,
    /// BM25 score.
    pub score: f32,
}

/// Per-thread working memory for [`Bm25Domain::search`]; reuse it across queries.
pub struct Scratch {
    /// Global document number -> score so far.
    acc: Vec<f32>,
    touched: Vec<u32>,
    analyzer: Analyzer,
    /// Global document number -> its length term for `norms_for`: k1 (1 - b + b len / avgdl)
    /// for the reference scoring, Lucene's cached inverse of it for Lucene's.
    norms: Vec<f32>,
    norms_for: Option<(u32, u32, Bm25Scoring, u64)>,
}

/// The collection statistics BM25 scores with: those of one domain, or of several domains
/// summed ([`Bm25Stats::add`]), so that passages of different domains are scored as if they
/// were in one index and their scores compare. Made for one query: it holds the document
/// frequencies of that query's terms only ([`Bm25Domain::query_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bm25Stats {
    /// Passages.
    pub passages: u64,
    /// Passages with at least one term (Lucene's `docCount`).
    pub nonempty: u64,
    /// Terms of every passage together.
    pub total_terms: u64,
    /// Document frequency of each of the query's (analysed) terms.
    pub doc_freqs: BTreeMap<String, u64>,
}

impl Bm25Stats {
    /// Adds another collection's statistics (of the same query, analysed the same way).
    pub fn add(&mut self, other: &Bm25Stats) {
        self.passages += other.passages;
        self.nonempty += other.nonempty;
        self.total_terms += other.total_terms;
        for (t, df) in &other.doc_freqs {
            *self.doc_freqs.entry(t.clone()).or_insert(0) += df;
        }
    }

    /// Average passage length over every passage (the reference scoring's avgdl), as bits
    /// of the f64 (a cache key).
    fn avgdl(&self, scoring: Bm25Scoring) -> f64 {
        let n = match scoring {
            Bm25Scoring::Reference => self.passages,
            Bm25Scoring::Lucene => self.nonempty,
        };
        self.total_terms as f64 / n.max(1) as f64
    }
}

impl Bm25Domain {
    /// Opens the BM25 index of one domain, read-only (no locks, nothing written). Every
    /// index file's checksum is verified first, so a damaged file is reported as a corrupt
    /// index rather than read.
    pub fn open(dir: &Path, analyzer: &AnalyzerConfig) -> Result<Bm25Domain> {
        crate::readonly::guard(dir, || Self::open_unguarded(dir, analyzer))
    }

    fn open_unguarded(dir: &Path, analyzer: &AnalyzerConfig) -> Result<Bm25Domain> {
        // the analyzer the terms were made with, recorded beside them: queries must be
        // analysed the same way, whatever the manifest says
        let analyzer_path = dir.join(ANALYZER_FILE);
        let built: AnalyzerConfig = serde_json::from_slice(
            &fs::read(&analyzer_path).map_err(|e| Error::io(&analyzer_path, e))?,
        )
        .map_err(|e| Error::Corrupt {
            path: analyzer_path.clone(),
            message: e.to_string(),
        })?;
        if built != *analyzer {
            return Err(Error::Corrupt {
                path: analyzer_path,
                message: format!(
                    "the domain was analysed with {} but manifest.json names {}: the manifest was edited; rebuild the index",
                    serde_json::to_string(&built).expect("serialises"),
                    serde_json::to_string(analyzer).expect("serialises"),
                ),
            });
        }
        let index = Index::open(crate::readonly::ReadOnlyDirectory::open(dir)?)
            .map_err(|e| corrupt(dir, e))?;
        let damaged = index.validate_checksum().map_err(|e| corrupt(dir, e))?;
        if !damaged.is_empty() {
            let mut names: Vec<String> = damaged.iter().map(|p| p.display().to_string()).collect();
            names.sort();
            return Err(Error::Corrupt {
                path: dir.to_path_buf(),
                message: format!("checksum mismatch in {}", names.join(", ")),
            });
        }
        let body = index
            .schema()
            .get_field(BODY)
            .map_err(|e| corrupt(dir, e))?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| corrupt(dir, e))?;
        let searcher = reader.searcher();
        let ids_path = dir.join(IDS_FILE);
        let ids: Vec<String> =
            serde_json::from_slice(&fs::read(&ids_path).map_err(|e| Error::io(&ids_path, e))?)
                .map_err(|e| Error::Corrupt {
                    path: ids_path.clone(),
                    message: e.to_string(),
                })?;
        let bad = |message: String| Error::Corrupt {
            path: dir.to_path_buf(),
            message,
        };
        let mut segments = Vec::new();
        let mut ords = Vec::with_capacity(ids.len());
        let mut lens = Vec::with_capacity(ids.len());
        for seg in searcher.segment_readers() {
            let ord_col = seg.fast_fields().u64(ORD).map_err(|e| corrupt(dir, e))?;
            let len_col = seg.fast_fields().u64(LEN).map_err(|e| corrupt(dir, e))?;
            if seg.num_deleted_docs() > 0 {
                return Err(bad("the index has deleted documents".into()));
            }
            segments.push(Segment {
                reader: seg.clone(),
                base: ords.len(),
            });
            for doc in 0..seg.max_doc() {
                let o = ord_col
                    .first(doc)
                    .filter(|&o| (o as usize) < ids.len())
                    .ok_or_else(|| bad(format!("document {doc} has no valid ordinal")))?;
                let len = len_col
                    .first(doc)
                    .and_then(|l| u32::try_from(l).ok())
                    .ok_or_else(|| bad(format!("document {doc} has no valid length")))?;
                ords.push(o as u32);
                lens.push(len);
            }
        }
        if ords.len() != ids.len() {
            return Err(bad(format!(
                "{} documents but {} ids",
                ords.len(),
                ids.len()
            )));
        }
        let mut docs = vec![u32::MAX; ids.len()];
        for (d, &o) in ords.iter().enumerate() {
            if docs[o as usize] != u32::MAX {
                return Err(bad(format!("passage ordinal {o} is indexed twice")));
            }
            docs[o as usize] = d as u32;
        }
        // passage ids in byte order (ranks): trec_eval's tie order for search, and the id
        // lookup (a binary search: no hash map of every id to build at each open)
        let mut doc_of_rank: Vec<u32> = (0..ords.len() as u32).collect();
        doc_of_rank.par_sort_unstable_by(|&a, &b| {
            ids[ords[a as usize] as usize].cmp(&ids[ords[b as usize] as usize])
        });
        if let Some(w) = doc_of_rank
            .windows(2)
            .find(|w| ids[ords[w[0] as usize] as usize] == ids[ords[w[1] as usize] as usize])
        {
            return Err(Error::Corrupt {
                path: ids_path,
                message: format!(
                    "passage id {:?} is listed twice",
                    ids[ords[w[0] as usize] as usize]
                ),
            });
        }
        let mut rank_of_doc = vec![0u32; ords.len()];
        for (r, &d) in doc_of_rank.iter().enumerate() {
            rank_of_doc[d as usize] = r as u32;
        }
        Ok(Bm25Domain {
            rank_of_doc,
            doc_of_rank,
            path: dir.to_path_buf(),
            _reader: reader,
            searcher,
            body,
            segments,
            total_terms: lens.iter().map(|&l| l as u64).sum(),
            nonempty: lens.iter().filter(|&&l| l > 0).count() as u64,
            ords,
            docs,
            lens,
            ids,
            analyzer: *analyzer,
        })
    }

    /// Number of passages.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when the domain has no passages (never the case for a built index).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Passage id of an ordinal.
    pub fn id(&self, ord: u32) -> &str {
        &self.ids[ord as usize]
    }

    /// Ordinal of a passage id.
    pub fn ord(&self, id: &str) -> Option<u32> {
        let ranks = &self.doc_of_rank;
        let r = ranks
            .binary_search_by(|&d| self.ids[self.ords[d as usize] as usize].as_str().cmp(id))
            .ok()?;
        Some(self.ords[ranks[r] as usize])
    }

    /// All passage ids, by ordinal.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The exact length in terms of a passage, by ordinal.
    pub fn length(&self, ord: u32) -> u32 {
        self.lens[self.docs[ord as usize] as usize]
    }

    /// Average passage length in terms, over every passage.
    pub fn avgdl(&self) -> f32 {
        (self.total_terms as f64 / self.ids.len().max(1) as f64) as f32
    }

    /// Working memory for searches on this domain.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            acc: vec![0.0; self.ids.len()],
            touched: Vec::new(),
            analyzer: self.analyzer.analyzer(),
            norms: Vec::new(),
            norms_for: None,
        }
    }

    /// Fills `scratch.norms` for `params` unless it holds them already.
    fn prepare_norms(&self, scratch: &mut Scratch, params: &Bm25Params, stats: &Bm25Stats) {
        let avgdl = stats.avgdl(params.scoring);
        let key = (
            params.k1.to_bits(),
            params.b.to_bits(),
            params.scoring,
            avgdl.to_bits(),
        );
        if scratch.norms_for == Some(key) {
            return;
        }
        let (k1, b) = (params.k1, params.b);
        scratch.norms = match params.scoring {
            Bm25Scoring::Reference => {
                let (k1, b) = (k1 as f64, b as f64);
                self.lens
                    .iter()
                    .map(|&l| (k1 * (1.0 - b + b * l as f64 / avgdl)) as f32)
                    .collect()
            }
            Bm25Scoring::Lucene => {
                // BM25Similarity: avgdl = (float) (sumTotalTermFreq / (double) docCount);
                // cache[i] = 1f / (k1 * ((1 - b) + b * LENGTH_TABLE[i] / avgdl)), in float
                let avgdl = avgdl as f32;
                let mut cache = [0f32; 256];
                for (i, c) in cache.iter_mut().enumerate() {
                    let len = byte4_to_length(i as u8) as f32;
                    *c = 1.0 / (k1 * ((1.0 - b) + b * len / avgdl));
                }
                self.lens
                    .iter()
                    .map(|&l| cache[length_to_byte4(l) as usize])
                    .collect()
            }
        };
        scratch.norms_for = Some(key);
    }

    /// The `k` best passages for `query`, best first; equal scores are ordered by passage id
    /// descending, as trec_eval orders them. Passages in `exclude` are left out before the
    /// cut-off. Passages sharing no term with the query are not returned.
    pub fn search(
        &self,
        scratch: &mut Scratch,
        query: &str,
        k: usize,
        params: &Bm25Params,
        exclude: &[u32],
    ) -> Result<Vec<Hit>> {
        self.search_with(scratch, query, k, params, exclude, None)
    }

    /// [`Bm25Domain::search`] scored with the statistics `stats` (`None`: this domain's):
    /// with several domains' statistics summed, every domain's scores are those one index
    /// over all of them would give.
    pub fn search_with(
        &self,
        scratch: &mut Scratch,
        query: &str,
        k: usize,
        params: &Bm25Params,
        exclude: &[u32],
        stats: Option<&Bm25Stats>,
    ) -> Result<Vec<Hit>> {
        let mut keys = crate::readonly::guard(&self.path, || {
            self.score_unguarded(scratch, query, params, exclude, stats)
        })?;
        // the k largest (score, id rank) keys: trec_eval's order, integers only
        if k < keys.len() {
            if k == 0 {
                return Ok(Vec::new());
            }
            keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
            keys.truncate(k);
        }
        keys.sort_unstable_by(|a, b| b.cmp(a));
        Ok(keys.into_iter().map(|key| self.hit(key)).collect())
    }

    /// The hit of a (score, id rank) key.
    fn hit(&self, key: u64) -> Hit {
        let d = self.doc_of_rank[(key & 0xFFFF_FFFF) as usize];
        Hit {
            ord: self.ords[d as usize],
            score: f32::from_bits((key >> 32) as u32),
        }
    }

    /// Every passage sharing a term with `query`, with its score, in no particular order
    /// (what [`Bm25Domain::search`] selects from).
    pub fn matching(
        &self,
        scratch: &mut Scratch,
        query: &str,
        params: &Bm25Params,
    ) -> Result<Vec<Hit>> {
        self.matching_with(scratch, query, params, None)
    }

    /// [`Bm25Domain::matching`] scored with the statistics `stats` (`None`: this domain's).
    pub fn matching_with(
        &self,
        scratch: &mut Scratch,
        query: &str,
        params: &Bm25Params,
        stats: Option<&Bm25Stats>,
    ) -> Result<Vec<Hit>> {
        let keys = crate::readonly::guard(&self.path, || {
            self.score_unguarded(scratch, query, params, &[], stats)
        })?;
        Ok(keys.into_iter().map(|key| self.hit(key)).collect())
    }

    /// This domain's statistics for `query`: its passage and term counts and the document
    /// frequency here of each of the query's terms (0 for terms it lacks). Sum those of
    /// several domains ([`Bm25Stats::add`]) to score them as one collection
    /// ([`Bm25Domain::search_with`]).
    pub fn query_stats(&self, scratch: &mut Scratch, query: &str) -> Result<Bm25Stats> {
        let mut doc_freqs = BTreeMap::new();
        for text in Self::analysed(scratch, query).into_keys() {
            let df = self.doc_freq(&text)?;
            doc_freqs.insert(text, df);
        }
        Ok(Bm25Stats {
            doc_freqs,
            ..self.stats()
        })
    }

    /// This domain's collection statistics, without term frequencies.
    fn stats(&self) -> Bm25Stats {
        Bm25Stats {
            passages: self.ids.len() as u64,
            nonempty: self.nonempty,
            total_terms: self.total_terms,
            doc_freqs: BTreeMap::new(),
        }
    }

    fn doc_freq(&self, text: &str) -> Result<u64> {
        self.searcher
            .doc_freq(&Term::from_field_text(self.body, text))
            .map_err(|e| Error::tantivy(&self.path, e))
    }

    /// The query's analysed terms with their frequencies, in term order.
    fn analysed(scratch: &mut Scratch, query: &str) -> BTreeMap<String, u32> {
        let mut qtf: BTreeMap<String, u32> = BTreeMap::new();
        scratch
            .analyzer
            .for_each_term(query, |t| *qtf.entry(t.to_string()).or_insert(0) += 1);
        qtf
    }

    /// The query's terms the collection has, with their frequencies in the query, their
    /// document frequencies in the collection (`stats`; this domain's when they do not
    /// name the term) and in this domain, in term order.
    fn query_terms(
        &self,
        scratch: &mut Scratch,
        query: &str,
        stats: &Bm25Stats,
    ) -> Result<Vec<(Term, u32, u64, u64)>> {
        let qtf = Self::analysed(scratch, query);
        let mut out = Vec::with_capacity(qtf.len());
        for (text, tf) in qtf {
            let local = self.doc_freq(&text)?;
            let df = stats.doc_freqs.get(&text).copied().unwrap_or(0).max(local);
            if df > 0 {
                out.push((Term::from_field_text(self.body, &text), tf, df, local));
            }
        }
        Ok(out)
    }

    fn score_unguarded(
        &self,
        scratch: &mut Scratch,
        query: &str,
        params: &Bm25Params,
        exclude: &[u32],
        stats: Option<&Bm25Stats>,
    ) -> Result<Vec<u64>> {
        let own;
        let stats = match stats {
            Some(s) => s,
            None => {
                own = self.stats();
                &own
            }
        };
        let terms = self.query_terms(scratch, query, stats)?;
        // Postings of the query's terms that cover a good part of the domain are summed
        // without tracking which documents they touch (a branch per posting); the whole
        // accumulator is scanned afterwards instead.
        let postings: u64 = terms.iter().map(|t| t.3).sum();
        let dense = postings.saturating_mul(4) > self.ids.len() as u64;
        self.prepare_norms(scratch, params, stats);
        let (k1, b) = (params.k1 as f64, params.b as f64);
        // the reference weights the query like a passage: its length counts the known terms
        let qlen: u32 = terms.iter().map(|t| t.1).sum();
        let avgdl = stats.avgdl(Bm25Scoring::Reference);
        let Scratch {
            acc,
            touched,
            norms,
            ..
        } = scratch;
        for (term, tf_q, df, here) in &terms {
            if *here == 0 {
                continue;
            }
            let (tf_q, df) = (*tf_q as f64, *df as f64);
            let weight = match params.scoring {
                Bm25Scoring::Reference => {
                    let n = stats.passages as f64;
                    let idf = (n + 1.0).ln() - (df + 0.5).ln();
                    let query_side = idf * tf_q / (tf_q + k1 * (1.0 - b + b * qlen as f64 / avgdl));
                    // the passage side's idf folded in
                    (query_side * idf) as f32
                }
                Bm25Scoring::Lucene => {
                    let n = stats.nonempty as f64;
                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32;
                    tf_q as f32 * idf
                }
            };
            if weight <= 0.0 || !weight.is_finite() {
                continue;
            }
            for seg in &self.segments {
                let inv = seg
                    .reader
                    .inverted_index(self.body)
                    .map_err(|e| Error::tantivy(&self.path, e))?;
                let Some(mut block) = inv
                    .read_block_postings(term, IndexRecordOption::WithFreqs)
                    .map_err(|e| Error::io(&self.path, e))?
                else {
                    continue;
                };
                let norms = &norms[seg.base..];
                let acc = &mut acc[seg.base..];
                loop {
                    let docs = block.docs();
                    if docs.is_empty() {
                        break;
                    }
                    let freqs = block.freqs();
                    match (params.scoring, dense) {
                        (Bm25Scoring::Reference, true) => {
                            for (&doc, &tf) in docs.iter().zip(freqs) {
                                let d = doc as usize;
                                let tf = tf as f32;
                                acc[d] += weight * (tf / (tf + norms[d]));
                            }
                        }
                        (Bm25Scoring::Lucene, true) => {
                            for (&doc, &tf) in docs.iter().zip(freqs) {
                                let d = doc as usize;
                                acc[d] += weight - weight / (1.0 + tf as f32 * norms[d]);
                            }
                        }
                        (Bm25Scoring::Reference, false) => {
                            for (&doc, &tf) in docs.iter().zip(freqs) {
                                let d = doc as usize;
                                let tf = tf as f32;
                                let slot = &mut acc[d];
                                if *slot == 0.0 {
                                    touched.push((seg.base + d) as u32);
                                }
                                *slot += weight * (tf / (tf + norms[d]));
                            }
                        }
                        (Bm25Scoring::Lucene, false) => {
                            for (&doc, &tf) in docs.iter().zip(freqs) {
                                let d = doc as usize;
                                let slot = &mut acc[d];
                                if *slot == 0.0 {
                                    touched.push((seg.base + d) as u32);
                                }
                                *slot += weight - weight / (1.0 + tf as f32 * norms[d]);
                            }
                        }
                    }
                    block.advance();
                }
            }
        }
        Ok(self.take_keys(acc, touched, exclude, dense))
    }

    /// The (score, id rank) keys of the passages the accumulator `acc` scores above 0, with
    /// the passages of `exclude` left out, and `acc` zeroed again: all of it when `dense`,
    /// else the `touched` documents (and `touched` emptied).
    fn take_keys(
        &self,
        acc: &mut [f32],
        touched: &mut Vec<u32>,
        exclude: &[u32],
        dense: bool,
    ) -> Vec<u64> {
        for &x in exclude {
            if let Some(&d) = self.docs.get(x as usize) {
                acc[d as usize] = f32::NEG_INFINITY;
            }
        }
        // (score, id rank) keys of the passages scoring above 0 (excluded ones are -inf);
        // positive finite f32 bits order as their values
        let ranks = &self.rank_of_doc;
        let key = |d: usize, score: f32| ((score.to_bits() as u64) << 32) | ranks[d] as u64;
        let keys: Vec<u64> = if dense {
            let keys = acc
                .iter()
                .enumerate()
                .filter(|&(_, &score)| score > 0.0)
                .map(|(d, &score)| key(d, score))
                .collect();
            acc.fill(0.0);
            keys
        } else {
            let keys = touched
                .iter()
                .filter_map(|&d| {
                    let score = acc[d as usize];
                    (score > 0.0).then(|| key(d as usize, score))
                })
                .collect();
            for &d in touched.iter() {
                acc[d as usize] = 0.0;
            }
            for &x in exclude {
                if let Some(&d) = self.docs.get(x as usize) {
                    acc[d as usize] = 0.0;
                }
            }
            keys
        };
        touched.clear();
        keys
    }
}
