//! [`search_domains`]: several domains searched as one collection, each domain's part
//! ranked by its [`DomainSearcher`] and merged as one index over their union would rank.
use rayon::prelude::*;
use sift_eval::RunEntry;
use sift_index::{Bm25Stats, Scratch};

use crate::query::QueryVectors;
use crate::searcher::{
    Candidates, DomainSearcher, PairTable, Query, SearchSettings, fuse, uses_bm25,
};
use crate::spec::RetrieverSpec;
use crate::{Error, Result};

/// One domain's share of a search over several ([`search_domains`]).
pub struct DomainPart<'a> {
    /// The domain, opened for the retriever.
    pub searcher: &'a DomainSearcher,
    /// Its candidates.
    pub candidates: Candidates<'a>,
    /// Its pair table, when the candidates are pairs ([`DomainSearcher::pair_table`]).
    pub table: Option<&'a PairTable<'a>>,
    /// Candidates of this domain to leave out.
    pub exclude: &'a [String],
}

/// Searches several domains as one collection: the best `settings.top_k` candidates of all
/// of them, best first (trec_eval's order: score descending, then id descending; equal ids
/// of different domains by domain position), each with the position in `parts` of its
/// domain. `scratches` holds one per part.
///
/// The scores compare across domains as they do within one: a dense index's are cosines
/// of one model; BM25 scores every domain with the statistics of all of them summed
/// (passages, lengths, document frequencies: [`Bm25Stats`]), which are exactly the scores one
/// index over every domain would give; a hybrid retriever fuses its parts' merged rankings,
/// as it fuses one domain's. So the result is what searching the union of the domains
/// gives, up to HNSW's approximation where a domain is searched with it.
pub fn search_domains(
    parts: &[DomainPart<'_>],
    retriever: &RetrieverSpec,
    text: &str,
    vectors: &QueryVectors,
    settings: &SearchSettings,
    scratches: &mut [Option<Scratch>],
) -> Result<Vec<(usize, RunEntry)>> {
    if scratches.len() != parts.len() {
        return Err(Error::Unsupported(format!(
            "{} scratches for {} domains",
            scratches.len(),
            parts.len()
        )));
    }
    // one domain's own statistics are what its BM25 uses anyway: summing is for several
    let stats = if uses_bm25(retriever) && parts.len() > 1 {
        let each = parts
            .par_iter()
            .zip(scratches.par_iter_mut())
            .map(|(part, scratch)| {
                let bm25 = part.searcher.bm25()?;
                let scratch = scratch.get_or_insert_with(|| bm25.scratch());
                bm25.query_stats(scratch, text).map_err(Error::from)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut sum = Bm25Stats::default();
        for s in &each {
            sum.add(s);
        }
        Some(sum)
    } else {
        None
    };
    let query = Query {
        index: 0,
        text,
        vectors,
        bm25: stats.as_ref(),
    };
    merged(parts, retriever, &query, settings, scratches)
}

fn merged(
    parts: &[DomainPart<'_>],
    retriever: &RetrieverSpec,
    query: &Query<'_>,
    settings: &SearchSettings,
    scratches: &mut [Option<Scratch>],
) -> Result<Vec<(usize, RunEntry)>> {
    let order = |a: &(usize, RunEntry), b: &(usize, RunEntry)| {
        sift_eval::trec_order(&a.1, &b.1).then(a.0.cmp(&b.0))
    };
    let mut all: Vec<(usize, RunEntry)> = match retriever {
        RetrieverSpec::Hybrid {
            parts: specs,
            fusion,
        } => {
            // each part ranked over every domain, then fused as one domain's are; documents
            // are told apart by domain while fusing
            let tag = |d: usize, doc: &str| format!("{d}\u{0}{doc}");
            let lists = specs
                .iter()
                .map(|spec| {
                    Ok(merged(parts, spec, query, settings, scratches)?
                        .into_iter()
                        .map(|(d, e)| RunEntry {
                            doc: tag(d, &e.doc),
                            score: e.score,
                        })
                        .collect())
                })
                .collect::<Result<Vec<Vec<RunEntry>>>>()?;
            fuse(&lists, fusion, usize::MAX)
                .into_iter()
                .filter_map(|e| {
                    let (d, doc) = e.doc.split_once('\u{0}')?;
                    Some((
                        d.parse().ok()?,
                        RunEntry {
                            doc: doc.to_string(),
                            score: e.score,
                        },
                    ))
                })
                .collect()
        }
        _ => {
            // the domains in parallel (rayon's pool), each with its own scratch
            let lists = parts
                .par_iter()
                .zip(scratches.par_iter_mut())
                .map(|(part, scratch)| {
                    part.searcher.search_with_table(
                        retriever,
                        &part.candidates,
                        part.table,
                        query,
                        part.exclude,
                        settings,
                        scratch,
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            lists
                .into_iter()
                .enumerate()
                .flat_map(|(d, hits)| hits.into_iter().map(move |e| (d, e)))
                .collect()
        }
    };
    crate::searcher::top_k(&mut all, settings.top_k, order);
    Ok(all)
}
