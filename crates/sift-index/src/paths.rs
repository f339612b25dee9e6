//! Every path of an index directory, in one place.
//!
//! ```text
//! INDEX/
//!   manifest.json                      names the live generation (replaced atomically)
//!   .lock                              held by a build
//!   embed-cache/<slug>.bin             passage vectors kept across builds
//!   embed-cache/<slug>.images.bin      image vectors kept across builds
//!   gen-<id>/.lease                    shared-locked by each reader of the generation
//!   gen-<id>/bm25/<domain>/            tantivy segments + ids.json + analyzer.json
//!   gen-<id>/dense/<slug>/<domain>/    passage vectors, ids.json, HNSW graph, meta.json
//!   gen-<id>/images/<slug>/<domain>/   image vectors, ids.json, HNSW graph, meta.json
//! ```
use std::path::{Path, PathBuf};

/// Generation directories are named `gen-<hex time>-<pid>`.
pub(crate) const GEN_PREFIX: &str = "gen-";
/// The manifest.
pub(crate) const MANIFEST: &str = "manifest.json";
/// Prefix of the temporary file the manifest is written to before the rename.
pub(crate) const MANIFEST_TMP_PREFIX: &str = ".manifest.json.tmp-";
/// Held (exclusively) by a build.
pub(crate) const LOCK_FILE: &str = ".lock";
/// The embedding caches, kept across builds.
pub(crate) const CACHE_DIR: &str = "embed-cache";
/// A file in each generation that readers hold a shared lock on while they use it; a build
/// removes an old generation only when it can lock this file exclusively.
pub(crate) const LEASE_FILE: &str = ".lease";
/// The analyzer a BM25 domain was built with, beside its segments: an edited manifest
/// cannot make queries be analysed differently from the passages.
pub(crate) const ANALYZER_FILE: &str = "analyzer.json";
/// Ids of the vectors of a dense or image index, and of the documents of a BM25 index: a
/// JSON list (JSON, so that no character of an id can break the list).
pub(crate) const IDS_FILE: &str = "ids.json";

pub(crate) fn manifest(root: &Path) -> PathBuf {
    root.join(MANIFEST)
}

pub(crate) fn manifest_tmp(root: &Path) -> PathBuf {
    root.join(format!("{MANIFEST_TMP_PREFIX}{}", std::process::id()))
}

pub(crate) fn lock(root: &Path) -> PathBuf {
    root.join(LOCK_FILE)
}

/// The passage-vector cache of dense index `slug`.
pub(crate) fn text_cache(root: &Path, slug: &str) -> PathBuf {
    root.join(CACHE_DIR).join(format!("{slug}.bin"))
}

/// The image-vector cache of dense index `slug`.
pub(crate) fn image_cache(root: &Path, slug: &str) -> PathBuf {
    root.join(CACHE_DIR).join(format!("{slug}.images.bin"))
}

pub(crate) fn lease(gen_dir: &Path) -> PathBuf {
    gen_dir.join(LEASE_FILE)
}

pub(crate) fn bm25(gen_dir: &Path, domain: &str) -> PathBuf {
    gen_dir.join("bm25").join(domain)
}

pub(crate) fn dense(gen_dir: &Path, slug: &str, domain: &str) -> PathBuf {
    gen_dir.join("dense").join(slug).join(domain)
}

pub(crate) fn images(gen_dir: &Path, slug: &str, domain: &str) -> PathBuf {
    gen_dir.join("images").join(slug).join(domain)
}

/// Whether `name` (a manifest's `generation`) is a generation directory of the index
/// itself: one plain path component named `gen-...`, never a path elsewhere.
pub(crate) fn is_generation_name(name: &str) -> bool {
    let mut parts = Path::new(name).components();
    matches!(parts.next(), Some(std::path::Component::Normal(_)))
        && parts.next().is_none()
        && name.starts_with(GEN_PREFIX)
        && !name.contains(['/', '\\'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_names_stay_inside_the_index() {
        assert!(is_generation_name("gen-18ed14-123"));
        for bad in ["/tmp", "../gen-x", "gen-x/../../y", "other", "gen-a\\b", ""] {
            assert!(!is_generation_name(bad), "{bad:?}");
        }
    }
}
