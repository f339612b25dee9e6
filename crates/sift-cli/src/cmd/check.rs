use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use anyhow::Result;
use sift_core::{Layout, WarningKind, Warnings};
use sift_eval::{check_exclusions, check_qrels_ids, task1};

use crate::cmd::report_warnings;
use crate::options::{CorpusFlags, DomainFlags, split_list};
use crate::progress::Bars;

/// Read a whole corpus and report what is in it and what is wrong with it. Fatal problems
/// (malformed rows, duplicate ids, truncated files) stop with an error naming file and row;
/// recoverable ones are counted.
#[derive(clap::Args)]
#[command(after_help = "Example:\n  sift check --corpus corpora/sample")]
pub struct Args {
    /// Corpus directory, or a knowledge-base .jsonl / .parquet file.
    #[arg(long)]
    corpus: PathBuf,
    #[command(flatten)]
    corpus_flags: CorpusFlags,
    #[command(flatten)]
    domain_flags: DomainFlags,
    /// How Task 4 links passages and corpus images when counting orphan positive images:
    /// regex (equal 8-hex base keys, the reference code) or source-id (the annotations'
    /// source_passage_id, MTEB's port).
    #[arg(long, value_enum, default_value = "regex")]
    pair_link: sift_eval::PairLink,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(serde::Serialize, Default)]
struct DomainCounts {
    passages: u64,
    queries: usize,
    multimodal_queries: usize,
    images: u64,
    undecodable_images: u64,
    query_images: u64,
    orphan_positive_images: u64,
}

pub fn run(a: Args) -> Result<()> {
    let corpus = a.corpus_flags.open(&a.corpus)?;
    let domains = corpus.select_domains(&split_list(&a.domain_flags.domains))?;
    let bars = Bars::new(a.quiet || a.json);
    let mut warnings = Warnings::new();
    let mut out = BTreeMap::new();
    for domain in &domains {
        let mut counts = DomainCounts::default();
        let mut ids = HashSet::new();
        let mut passages = corpus.passages(domain)?;
        let bar = bars.bar(&format!("{domain} text"), passages.len_hint().unwrap_or(0));
        for p in passages.by_ref() {
            ids.insert(p?.id);
            bar.inc(1);
        }
        bar.finish_and_clear();
        counts.passages = ids.len() as u64;
        if ids.is_empty() {
            // `sift index` refuses such a domain, so check does too
            return Err(sift_core::Error::EmptyCorpus {
                path: corpus.passage_files(domain)?.remove(0),
            }
            .into());
        }
        warnings.extend(passages.warnings().clone());
        // a knowledge base has no queries
        if corpus.layout() != Layout::Kb {
            let task = task1(&corpus, domain, &a.domain_flags.split)?;
            counts.queries = task.queries.len();
            let mut tw = task.warnings;
            check_qrels_ids(&task.qrels, |id| ids.contains(id), corpus.root(), &mut tw);
            check_exclusions(
                &task.exclusions,
                &task.qrels,
                |id| ids.contains(id),
                corpus.root(),
                &mut tw,
            );
            warnings.extend(tw);
        }
        let mut image_paths = HashSet::new();
        if corpus.layout() != Layout::Beir {
            let mut images = corpus.images(domain)?;
            for img in images.by_ref() {
                let img = img?;
                if let Err(e) = sift_embed::image::decode_rgb(&img.bytes) {
                    counts.undecodable_images += 1;
                    // a knowledge base's image is its own file
                    let location = match corpus.layout() {
                        Layout::Kb => String::new(),
                        _ => format!("row {}", img.row),
                    };
                    warnings.push(
                        WarningKind::UndecodableImage,
                        &img.file,
                        location,
                        format!("image {:?} does not decode: {e}", img.path),
                    );
                }
                image_paths.insert(img.path);
                counts.images += 1;
            }
            warnings.extend(images.warnings().clone());
        }
        if corpus.layout() == Layout::MmBright {
            let mut qimages = corpus.query_images(domain)?;
            for img in qimages.by_ref() {
                let img = img?;
                if let Err(e) = sift_embed::image::decode_rgb(&img.bytes) {
                    warnings.push(
                        WarningKind::UndecodableImage,
                        &img.file,
                        format!("row {}", img.row),
                        format!("query image {:?} does not decode: {e}", img.path),
                    );
                }
                counts.query_images += 1;
            }
            warnings.extend(qimages.warnings().clone());
            let mut mw = Warnings::new();
            let examples = corpus.examples(domain, true, &mut mw)?;
            counts.multimodal_queries = examples.len();
            let no_ids: &[&str] = &[];
            let links = sift_eval::Links::new(a.pair_link, domain, no_ids, no_ids, &examples);
            for ex in &examples {
                let orphans = sift_eval::orphan_positive_images(&links, ex);
                counts.orphan_positive_images += orphans.len() as u64;
                for p in orphans {
                    mw.push(
                        WarningKind::OrphanPositiveImage,
                        corpus.root(),
                        String::new(),
                        format!(
                            "query {:?}: positive image {p:?} is linked to no gold passage",
                            ex.id
                        ),
                    );
                }
                for p in ex.images.iter().flat_map(|l| &l.positive) {
                    if !image_paths.contains(p) {
                        mw.push(
                            WarningKind::UnknownDocId,
                            corpus.root(),
                            String::new(),
                            format!(
                                "query {:?}: positive image {p:?} is not a corpus image",
                                ex.id
                            ),
                        );
                    }
                }
            }
            warnings.extend(mw);
        }
        out.insert(domain.clone(), counts);
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "corpus": a.corpus,
                "layout": corpus.layout().name(),
                "domains": out,
                "warnings": warnings.to_map(),
                "warning_examples": warnings.examples(),
            }))?
        );
    } else {
        println!("{} ({} layout)", a.corpus.display(), corpus.layout().name());
        println!(
            "| domain | passages | queries | mm queries | images | undecodable | query images | orphan positives |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for (d, c) in &out {
            println!(
                "| {d} | {} | {} | {} | {} | {} | {} | {} |",
                c.passages,
                c.queries,
                c.multimodal_queries,
                c.images,
                c.undecodable_images,
                c.query_images,
                c.orphan_positive_images
            );
        }
        report_warnings("corpus", &warnings);
    }
    Ok(())
}
