//! What the library's integration tests share: the repository, and an index of the sample.
#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;

use sift_core::Corpus;
use sift_embed::{Embedder, EmbedderOptions};
use sift_index::{BuildOptions, IndexDir, NoProgress};
use sift_retrieve::{ModelSet, RetrieverSpec, Sides, slug};

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An index of the sample with `model` (a fixture directory) in `profile`.
pub fn index_with(
    model: &str,
    profile: sift_embed::Profile,
    dir: &std::path::Path,
) -> (IndexDir, ModelSet, RetrieverSpec) {
    let corpus = Corpus::open(repo().join("corpora/sample")).unwrap();
    let options = EmbedderOptions {
        profile,
        ..Default::default()
    };
    let path = repo().join("models/fixtures").join(model);
    let e = Embedder::load(path.to_str().unwrap(), &options).unwrap();
    let index = IndexDir::build(
        dir,
        &corpus,
        &corpus.domains().unwrap(),
        &BuildOptions {
            threads: 2,
            ..Default::default()
        },
        &[Sides::new(&e, sift_retrieve::Indexed::PassagesAndImages)
            .dense_build(slug(&e), path.display().to_string())],
        &NoProgress,
    )
    .unwrap();
    let dense: RetrieverSpec = format!("dense:{}", slug(&e)).parse().unwrap();
    let mut models = ModelSet::new();
    models.load_for(&index, &dense, &options, None).unwrap();
    (index, models, dense)
}
