//! BM25 over tantivy postings, scored by Sift so that `k1` and `b` are free parameters.
//!
//! Scoring is term-at-a-time: for each query term, every posting block of every segment is
//! decoded and its contribution added to a dense per-passage accumulator; the best `k` are
//! then selected. Queries in MM-BRIGHT are long StackExchange posts, for which exhaustive
//! term-at-a-time scoring over bit-packed blocks is both exact and fast.
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sift_core::Passage;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::analyzer::AnalyzerConfig;
use crate::progress::Progress;
use crate::{Error, Result};

const BODY: &str = "body";
const ORD: &str = "ord";
const TOKENIZER: &str = "sift";
use crate::paths::IDS_FILE;

/// How query terms are weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum QueryWeighting {
    /// Lucene BM25: a term repeated `n` times in the query counts `n` times;
    /// idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
    #[default]
    Lucene,
    /// BRIGHT / MM-BRIGHT reference (gensim `LuceneBM25Model` applied to both sides): the
    /// query vector is BM25-weighted like a document (query length against the corpus average
    /// length) and both sides use idf = ln(N + 1) - ln(df + 0.5); score = dot product.
    Bright,
}

/// BM25 parameters; applied at search time, so they can differ from the manifest defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation.
    pub b: f32,
    /// Query-side weighting.
    pub weighting: QueryWeighting,
}

impl Default for Bm25Params {
    /// k1 = 0.9, b = 0.4 as in BRIGHT and MM-BRIGHT.
    fn default() -> Self {
        Bm25Params {
            k1: 0.9,
            b: 0.4,
            weighting: QueryWeighting::Lucene,
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

fn schema() -> (Schema, Field, Field) {
    let mut sb = Schema::builder();
    let body = sb.add_text_field(
        BODY,
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(TOKENIZER)
                .set_index_option(IndexRecordOption::WithFreqs)
                .set_fieldnorms(true),
        ),
    );
    let ord = sb.add_u64_field(ORD, NumericOptions::default().set_fast());
    (sb.build(), body, ord)
}

/// Counts from building one domain.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BuildStats {
    pub passages: u64,
    pub tokens: u64,
}

/// Builds the BM25 index of one domain into the empty directory `dir`.
pub(crate) fn build(
    dir: &Path,
    passages: &mut dyn Iterator<Item = sift_core::Result<Passage>>,
    analyzer: &AnalyzerConfig,
    threads: usize,
    progress: &dyn Progress,
) -> Result<BuildStats> {
    let (schema, body, ord) = schema();
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let index = Index::create_in_dir(dir, schema).map_err(|e| Error::tantivy(dir, e))?;
    index.tokenizers().register(TOKENIZER, analyzer.build());
    // tantivy indexes with at most 8 threads (`MAX_NUM_THREAD`); more are not an error.
    let threads = threads.clamp(1, 8);
    let mut writer: IndexWriter<TantivyDocument> = index
        .writer_with_num_threads(threads, threads * 64_000_000)
        .map_err(|e| Error::tantivy(dir, e))?;
    // Segments are merged once, explicitly, after the commit below. tantivy's default merge
    // policy would start merges of its own in the background at that commit, racing the
    // explicit merge for the same segments ("The segments that were merged could not be found
    // in the SegmentManager"), which happens as soon as there are enough segments to merge,
    // i.e. with several indexing threads.
    writer.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
    let mut ids = Vec::new();
    for passage in passages {
        let passage = passage?;
        let mut doc = TantivyDocument::default();
        doc.add_text(body, &passage.text);
        doc.add_u64(ord, ids.len() as u64);
        writer
            .add_document(doc)
            .map_err(|e| Error::tantivy(dir, e))?;
        ids.push(passage.id);
        if ids.len() % 256 == 0 {
            progress.inc(256);
        }
    }
    progress.inc(ids.len() as u64 % 256);
    if ids.is_empty() {
        return Err(Error::Corpus(sift_core::Error::EmptyCorpus {
            path: dir.to_path_buf(),
        }));
    }
    writer.commit().map_err(|e| Error::tantivy(dir, e))?;
    // One segment: search then walks one postings list per term.
    let segments = index
        .searchable_segment_ids()
        .map_err(|e| Error::tantivy(dir, e))?;
    if segments.len() > 1 {
        writer
            .merge(&segments)
            .wait()
            .map_err(|e| Error::tantivy(dir, e))?;
    }
    writer
        .wait_merging_threads()
        .map_err(|e| Error::tantivy(dir, e))?;
    let ids_path = dir.join(IDS_FILE);
    fs::write(&ids_path, serde_json::to_vec(&ids).expect("ids serialise"))
        .map_err(|e| Error::io(&ids_path, e))?;
    let reader = index.reader().map_err(|e| Error::tantivy(dir, e))?;
    let mut tokens = 0;
    for seg in reader.searcher().segment_readers() {
        tokens += seg
            .inverted_index(body)
            .map_err(|e| Error::tantivy(dir, e))?
            .total_num_tokens();
    }
    Ok(BuildStats {
        passages: ids.len() as u64,
        tokens,
    })
}

struct Segment {
    reader: tantivy::SegmentReader,
    /// Segment doc id -> passage ordinal.
    ords: Vec<u32>,
    /// Segment doc id -> fieldnorm id (lossy length code).
    norms: Vec<u8>,
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
    ids: Vec<String>,
    ord_of: HashMap<String, u32>,
    avgdl: f32,
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

/// The best `k` of `hits` under `order` (best first), sorted: a partial selection, then a
/// sort of the `k` kept.
pub(crate) fn top_k(
    mut hits: Vec<Hit>,
    k: usize,
    order: impl Fn(&Hit, &Hit) -> std::cmp::Ordering + Copy,
) -> Vec<Hit> {
    if k < hits.len() {
        if k == 0 {
            return Vec::new();
        }
        hits.select_nth_unstable_by(k - 1, order);
        hits.truncate(k);
    }
    hits.sort_unstable_by(order);
    hits
}

/// Per-thread working memory for [`Bm25Domain::search`]; reuse it across queries.
pub struct Scratch {
    acc: Vec<f32>,
    touched: Vec<u32>,
    analyzer: TextAnalyzer,
}

impl Bm25Domain {
    /// Opens the BM25 index of one domain, read-only (no locks, nothing written). Every
    /// index file's checksum is verified first, so a damaged file is reported as a corrupt
    /// index rather than read.
    pub fn open(dir: &Path, analyzer: &AnalyzerConfig) -> Result<Bm25Domain> {
        crate::readonly::guard(dir, || Self::open_unguarded(dir, analyzer))
    }

    fn open_unguarded(dir: &Path, analyzer: &AnalyzerConfig) -> Result<Bm25Domain> {
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
        index.tokenizers().register(TOKENIZER, analyzer.build());
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
        let mut segments = Vec::new();
        let mut total_tokens = 0u64;
        let mut num_docs = 0u64;
        for seg in searcher.segment_readers() {
            let bad_ord = |message: String| Error::Corrupt {
                path: dir.to_path_buf(),
                message,
            };
            let col = seg.fast_fields().u64(ORD).map_err(|e| corrupt(dir, e))?;
            let norms_reader: FieldNormReader = seg
                .get_fieldnorms_reader(body)
                .map_err(|e| corrupt(dir, e))?;
            let max_doc = seg.max_doc();
            let mut ords = Vec::with_capacity(max_doc as usize);
            let mut norms = Vec::with_capacity(max_doc as usize);
            for doc in 0..max_doc {
                let o = col
                    .first(doc)
                    .filter(|&o| (o as usize) < ids.len())
                    .ok_or_else(|| bad_ord(format!("document {doc} has no valid ordinal")))?;
                ords.push(o as u32);
                norms.push(norms_reader.fieldnorm_id(doc));
            }
            total_tokens += seg
                .inverted_index(body)
                .map_err(|e| corrupt(dir, e))?
                .total_num_tokens();
            num_docs += seg.num_docs() as u64;
            segments.push(Segment {
                reader: seg.clone(),
                ords,
                norms,
            });
        }
        if num_docs as usize != ids.len() {
            return Err(Error::Corrupt {
                path: dir.to_path_buf(),
                message: format!("{} documents but {} ids", num_docs, ids.len()),
            });
        }
        let mut ord_of = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            if ord_of.insert(id.clone(), i as u32).is_some() {
                return Err(Error::Corrupt {
                    path: ids_path,
                    message: format!("passage id {id:?} is listed twice"),
                });
            }
        }
        Ok(Bm25Domain {
            path: dir.to_path_buf(),
            _reader: reader,
            searcher,
            body,
            segments,
            avgdl: total_tokens as f32 / num_docs.max(1) as f32,
            ids,
            ord_of,
            analyzer: analyzer.clone(),
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
        self.ord_of.get(id).copied()
    }

    /// All passage ids, by ordinal.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Average document length in tokens.
    pub fn avgdl(&self) -> f32 {
        self.avgdl
    }

    /// Working memory for searches on this domain.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            acc: vec![0.0; self.ids.len()],
            touched: Vec::new(),
            analyzer: self.analyzer.build(),
        }
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
        crate::readonly::guard(&self.path, || {
            self.search_unguarded(scratch, query, k, params, exclude)
        })
    }

    fn search_unguarded(
        &self,
        scratch: &mut Scratch,
        query: &str,
        k: usize,
        params: &Bm25Params,
        exclude: &[u32],
    ) -> Result<Vec<Hit>> {
        let mut qtf: HashMap<String, u32> = HashMap::new();
        let mut qlen = 0u32;
        {
            let mut stream = scratch.analyzer.token_stream(query);
            while stream.advance() {
                *qtf.entry(stream.token().text.clone()).or_insert(0) += 1;
                qlen += 1;
            }
        }
        let mut terms: Vec<(String, u32)> = qtf.into_iter().collect();
        terms.sort_unstable();
        let n = self.ids.len() as f32;
        let (k1, b) = (params.k1, params.b);
        let norm = |len: f32| k1 * (1.0 - b + b * len / self.avgdl);
        let mut cache = [0f32; 256];
        for (id, slot) in cache.iter_mut().enumerate() {
            *slot = norm(FieldNormReader::id_to_fieldnorm(id as u8) as f32);
        }
        let Scratch { acc, touched, .. } = scratch;
        for (text, tf_q) in &terms {
            let term = Term::from_field_text(self.body, text);
            let df = self
                .searcher
                .doc_freq(&term)
                .map_err(|e| Error::tantivy(&self.path, e))? as f32;
            if df == 0.0 {
                continue;
            }
            let tf_q = *tf_q as f32;
            let weight = match params.weighting {
                QueryWeighting::Lucene => tf_q * (1.0 + (n - df + 0.5) / (df + 0.5)).ln(),
                QueryWeighting::Bright => {
                    let idf = (n + 1.0).ln() - (df + 0.5).ln();
                    // both sides carry idf: fold the document side's into the query weight
                    idf * idf * tf_q / (tf_q + norm(qlen as f32))
                }
            };
            if weight <= 0.0 {
                continue;
            }
            for seg in &self.segments {
                let inv = seg
                    .reader
                    .inverted_index(self.body)
                    .map_err(|e| Error::tantivy(&self.path, e))?;
                let Some(mut block) = inv
                    .read_block_postings(&term, IndexRecordOption::WithFreqs)
                    .map_err(|e| Error::io(&self.path, e))?
                else {
                    continue;
                };
                loop {
                    let docs = block.docs();
                    if docs.is_empty() {
                        break;
                    }
                    for (&doc, &tf) in docs.iter().zip(block.freqs()) {
                        let d = doc as usize;
                        let ord = seg.ords[d];
                        let tf = tf as f32;
                        let s = weight * tf / (tf + cache[seg.norms[d] as usize]);
                        let slot = &mut acc[ord as usize];
                        if *slot == 0.0 {
                            touched.push(ord);
                        }
                        *slot += s;
                    }
                    block.advance();
                }
            }
        }
        for &x in exclude {
            if let Some(slot) = acc.get_mut(x as usize) {
                *slot = f32::NEG_INFINITY;
            }
        }
        let hits: Vec<Hit> = touched
            .iter()
            .filter_map(|&ord| {
                let score = acc[ord as usize];
                (score > 0.0).then_some(Hit { ord, score })
            })
            .collect();
        for &ord in touched.iter() {
            acc[ord as usize] = 0.0;
        }
        for &x in exclude {
            if let Some(slot) = acc.get_mut(x as usize) {
                *slot = 0.0;
            }
        }
        touched.clear();
        let ids = &self.ids;
        let order = |a: &Hit, b: &Hit| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| ids[b.ord as usize].cmp(&ids[a.ord as usize]))
        };
        Ok(top_k(hits, k, order))
    }
}
