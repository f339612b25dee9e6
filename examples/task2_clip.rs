//! MM-BRIGHT Task 2 (query text + images -> passages) with a CLIP model, from the library:
//! index a corpus's passages and images with the model, then evaluate with both ways of
//! using the query images.
//!
//! ```sh
//! cargo run -p sift-retrieve --example task2_clip            # the sample corpus, tiny CLIP
//! cargo run --release -p sift-retrieve --example task2_clip -- /data/MM-BRIGHT openai/clip-vit-large-patch14
//! ```
use std::error::Error;

use sift_core::Corpus;
use sift_embed::{Embedder, EmbedderOptions};
use sift_eval::Task;
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_retrieve::{EvalConfig, ModelSet, QueryImages, RetrieverSpec, Sides, evaluate, slug};

fn main() -> Result<(), Box<dyn Error>> {
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let corpus_dir = args
        .first()
        .cloned()
        .unwrap_or_else(|| format!("{repo}/corpora/sample"));
    let model = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| format!("{repo}/models/fixtures/vision/tiny-clip-quickgelu"));

    let corpus = Corpus::open(&corpus_dir)?;
    let clip = Embedder::load(&model, &EmbedderOptions::default())?;
    let tmp = tempfile::tempdir()?;
    // passages with the text tower, the domains' corpus images with the image tower
    let sides = Sides::new(&clip, sift_retrieve::Indexed::PassagesAndImages);
    let index = IndexDir::build(
        tmp.path().join("index"),
        &corpus,
        &corpus.domains()?,
        &BuildOptions::default(),
        &[sides.dense_build(slug(&clip), model.clone())],
        &NoProgress,
    )?;

    let retriever = RetrieverSpec::Dense(slug(&clip));
    let mut models = ModelSet::new();
    models.insert_checked(&index, &slug(&clip), clip)?;
    let config = EvalConfig {
        tasks: vec![Task::MultimodalPassages],
        retrievers: vec![RetrieverSpec::Bm25, retriever],
        query_images: vec![QueryImages::All, QueryImages::First],
        ..Default::default()
    };
    let report = evaluate(&corpus, &index, &models, &config, &NoProgress)?;
    print!("{}", report.to_markdown());
    Ok(())
}
