//! Index a BEIR corpus with BM25, search it, and score Task 1 on its qrels: the library
//! alone, no `sift` binary.
//!
//! ```sh
//! cargo run -p sift-retrieve --example beir_search                      # a tiny corpus it writes
//! cargo run -p sift-retrieve --example beir_search -- "$SIFT_CRANFIELD" "shock waves"
//! ```
use std::error::Error;
use std::path::PathBuf;

use sift_core::Corpus;
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_retrieve::{
    Candidates, DomainSearcher, EvalConfig, ModelSet, Query, QueryVectors, RetrieverSpec,
    SearchSettings, evaluate,
};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tmp = tempfile::tempdir()?;
    let corpus_dir = match args.first() {
        Some(dir) => PathBuf::from(dir),
        None => write_tiny_beir(tmp.path())?,
    };
    let query = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "laminar boundary layer on a flat plate".into());

    let corpus = Corpus::open(&corpus_dir)?;
    let domains = corpus.domains()?;
    let index = IndexDir::build(
        tmp.path().join("index"),
        &corpus,
        &domains,
        &BuildOptions::default(),
        &[],
        &NoProgress,
    )?;

    // one query
    let bm25 = RetrieverSpec::Bm25;
    let models = ModelSet::new();
    let searcher = DomainSearcher::open(&index, &domains[0], &bm25, &models, false)?;
    let hits = searcher.search(
        &bm25,
        &Candidates::Passages,
        &Query {
            index: 0,
            text: &query,
            vectors: &QueryVectors::default(),
            bm25: None,
        },
        &[],
        &SearchSettings {
            top_k: 5,
            ..Default::default()
        },
        &mut searcher.scratch(),
    )?;
    println!("{query:?}:");
    for (rank, hit) in hits.iter().enumerate() {
        println!("{:>3}  {:>8.4}  {}", rank + 1, hit.score, hit.doc);
    }

    // Task 1 over the corpus's own queries and qrels
    let report = evaluate(
        &corpus,
        &index,
        &models,
        &EvalConfig::default(),
        &NoProgress,
    )?;
    let mean = report.jobs[0].report.mean();
    println!(
        "\nTask 1, BM25: nDCG@10 {:.4}, Recall@100 {:.4} over {} queries",
        mean["ndcg@10"], mean["recall@100"], report.jobs[0].report.per_domain[0].queries
    );
    Ok(())
}

/// A three-passage BEIR corpus with two judged queries.
fn write_tiny_beir(dir: &std::path::Path) -> std::io::Result<PathBuf> {
    let root = dir.join("beir");
    std::fs::create_dir_all(root.join("qrels"))?;
    std::fs::write(
        root.join("corpus.jsonl"),
        concat!(
            r#"{"_id": "d1", "title": "Boundary layers", "text": "Laminar boundary layer flow over a flat plate."}"#,
            "\n",
            r#"{"_id": "d2", "text": "Heat transfer in supersonic flow and shock waves."}"#,
            "\n",
            r#"{"_id": "d3", "text": "Buckling of thin cylindrical shells under axial compression."}"#,
            "\n"
        ),
    )?;
    std::fs::write(
        root.join("queries.jsonl"),
        "{\"_id\": \"q1\", \"text\": \"laminar boundary layer\"}\n{\"_id\": \"q2\", \"text\": \"shell buckling\"}\n",
    )?;
    std::fs::write(
        root.join("qrels/test.tsv"),
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n",
    )?;
    Ok(root)
}
