//! Writing a domain's BM25 index: passages analysed by Sift in parallel batches, handed to
//! tantivy as their terms, with the exact lengths, ordinals and the analyzer beside them.
use std::fs;
use std::path::Path;

use rayon::prelude::*;
use sift_core::Passage;
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{TextAnalyzer, WhitespaceTokenizer};
use tantivy::{Index, IndexWriter, TantivyDocument};

use super::{BATCH, BODY, LEN, MAX_UNMERGED_SEGMENTS, ORD};
use crate::analyzer::{Analyzer, AnalyzerConfig};
use crate::paths::{ANALYZER_FILE, IDS_FILE};
use crate::progress::Progress;
use crate::{Error, Result};

struct Fields {
    body: Field,
    ord: Field,
    len: Field,
}

fn schema() -> (Schema, Fields) {
    let mut sb = Schema::builder();
    let body = sb.add_text_field(
        BODY,
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                // passages arrive analysed, terms joined by spaces
                .set_tokenizer(TERMS_TOKENIZER)
                .set_index_option(IndexRecordOption::WithFreqs)
                .set_fieldnorms(false),
        ),
    );
    let ord = sb.add_u64_field(ORD, NumericOptions::default().set_fast());
    let len = sb.add_u64_field(LEN, NumericOptions::default().set_fast());
    (sb.build(), Fields { body, ord, len })
}

/// Counts from building one domain.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BuildStats {
    pub passages: u64,
    pub tokens: u64,
}

/// The tokenizer the `body` field is indexed with: passages arrive analysed by Sift, their
/// terms joined by single spaces, and tantivy only splits them again (terms never hold ASCII
/// whitespace; [`analyze`] checks). This is several times cheaper than tantivy's
/// pre-tokenized values, which it serialises to JSON and parses back for every document.
const TERMS_TOKENIZER: &str = "sift_terms";

/// The terms of one passage joined by spaces, and their number; a term holding ASCII
/// whitespace (which no analyzer produces) is an error rather than two terms.
fn analyze(analyzer: &mut Analyzer, text: &str) -> std::result::Result<(String, u64), String> {
    let mut joined = String::with_capacity(text.len());
    let mut n = 0u64;
    let mut bad: Option<String> = None;
    analyzer.for_each_term(text, |t| {
        if t.bytes().any(|b| b.is_ascii_whitespace()) {
            bad.get_or_insert_with(|| t.to_string());
        }
        if n > 0 {
            joined.push(' ');
        }
        joined.push_str(t);
        n += 1;
    });
    match bad {
        Some(t) => Err(t),
        None => Ok((joined, n)),
    }
}

/// Builds the BM25 index of one domain into the empty directory `dir`. Passages are analyzed
/// in parallel on the current rayon pool, in batches; tantivy indexes on `threads` threads
/// (at most 8).
pub(crate) fn build(
    dir: &Path,
    passages: &mut dyn Iterator<Item = sift_core::Result<Passage>>,
    analyzer: &AnalyzerConfig,
    threads: usize,
    progress: &dyn Progress,
) -> Result<BuildStats> {
    let (schema, fields) = schema();
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let index = Index::create_in_dir(dir, schema).map_err(|e| Error::tantivy(dir, e))?;
    index.tokenizers().register(
        TERMS_TOKENIZER,
        TextAnalyzer::builder(WhitespaceTokenizer::default()).build(),
    );
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
    let mut tokens = 0u64;
    let mut batch: Vec<Passage> = Vec::with_capacity(BATCH);
    loop {
        batch.clear();
        for passage in (&mut *passages).take(BATCH) {
            batch.push(passage?);
        }
        if batch.is_empty() {
            break;
        }
        let analyzed: Vec<std::result::Result<(String, u64), String>> = batch
            .par_iter()
            .map_init(|| analyzer.analyzer(), |a, p| analyze(a, &p.text))
            .collect();
        let n = batch.len() as u64;
        for (passage, analyzed) in batch.drain(..).zip(analyzed) {
            let (terms, len) = analyzed.map_err(|term| Error::Corrupt {
                path: dir.to_path_buf(),
                message: format!(
                    "passage {:?}: the analyzer made a term with whitespace in it ({term:?})",
                    passage.id
                ),
            })?;
            let mut doc = TantivyDocument::default();
            doc.add_text(fields.body, terms);
            doc.add_u64(fields.ord, ids.len() as u64);
            doc.add_u64(fields.len, len);
            writer
                .add_document(doc)
                .map_err(|e| Error::tantivy(dir, e))?;
            ids.push(passage.id);
            tokens += len;
        }
        progress.inc(n);
    }
    if ids.is_empty() {
        return Err(Error::Corpus(sift_core::Error::EmptyCorpus {
            path: dir.to_path_buf(),
        }));
    }
    writer.commit().map_err(|e| Error::tantivy(dir, e))?;
    // A few segments (one per indexing thread, more when one fills its memory budget) are
    // searched as they are: merging them runs on one thread and took a tenth of the build
    // at 338k passages, for no measurable gain in search. Many are merged into one.
    let segments = index
        .searchable_segment_ids()
        .map_err(|e| Error::tantivy(dir, e))?;
    if segments.len() > MAX_UNMERGED_SEGMENTS {
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
    let analyzer_path = dir.join(ANALYZER_FILE);
    fs::write(
        &analyzer_path,
        serde_json::to_vec(analyzer).expect("analyzer serialises"),
    )
    .map_err(|e| Error::io(&analyzer_path, e))?;
    Ok(BuildStats {
        passages: ids.len() as u64,
        tokens,
    })
}
