//! Models for an index: the dense indexes' embedders loaded once, checked against what each
//! index was built with, and the adapters that let the index builder use an [`Embedder`].
use std::collections::HashMap;

use sift_embed::{Embedder, EmbedderOptions, Input, PreparedImage, PreprocessError, Profile, Role};
use sift_eval::safe_name;
use sift_index::{DenseBuild, EmbedderInfo, ImageEmbedder, IndexDir, PassageEmbedder};

use crate::spec::RetrieverSpec;
use crate::{Error, Result};

/// The name a dense index of `embedder` goes by (`dense:<slug>`): its registry alias, else
/// its name made safe for a directory.
pub fn slug(embedder: &Embedder) -> String {
    match sift_embed::registry::find(embedder.name()) {
        Some(info) => info.alias.clone(),
        None => safe_name(embedder.name().rsplit('/').next().unwrap_or("model")).to_lowercase(),
    }
}

/// A dense model as `sift index --dense` and Python's `Index.build(dense=...)` take it:
/// `MODEL` (a directory, hub id or registry alias; the index is named by its [`slug`]) or
/// `NAME=MODEL` (the index is `dense:NAME`). A value whose part before `=` is not a name
/// (letters, digits, `-`, `_`, `.`; a path has `/`) is a model as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenseModel<'a> {
    /// The name the value gives.
    pub name: Option<&'a str>,
    /// Where the model loads from.
    pub spec: &'a str,
}

impl<'a> DenseModel<'a> {
    /// Reads `value` (`MODEL` or `NAME=MODEL`).
    pub fn parse(value: &'a str) -> DenseModel<'a> {
        match value.split_once('=') {
            Some((name, spec))
                if !name.is_empty()
                    && !spec.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                    && !name.starts_with('.') =>
            {
                DenseModel {
                    name: Some(name),
                    spec,
                }
            }
            _ => DenseModel {
                name: None,
                spec: value,
            },
        }
    }
}

/// One side of an embedder for [`DenseBuild`]: its passages (embedded with the passage
/// role: prefix, prompt) or its images.
pub struct Side<'a> {
    embedder: &'a Embedder,
    input: Input,
}

impl<'a> Side<'a> {
    /// The passage side of `embedder`.
    pub fn passages(embedder: &'a Embedder) -> Side<'a> {
        Side {
            embedder,
            input: Input::Text(Role::Passage),
        }
    }

    /// The image side of `embedder`, if it embeds images.
    pub fn images(embedder: &'a Embedder) -> Option<Side<'a>> {
        embedder.capabilities().images.then_some(Side {
            embedder,
            input: Input::Image,
        })
    }
}

impl EmbedderInfo for Side<'_> {
    fn name(&self) -> &str {
        self.embedder.name()
    }
    fn dim(&self) -> usize {
        self.embedder.dim()
    }
    fn fingerprint(&self) -> String {
        self.embedder.fingerprint(self.input)
    }
}

impl PassageEmbedder for Side<'_> {
    type Error = sift_embed::Error;
    fn model_hash(&self) -> String {
        self.embedder.content_hash().to_string()
    }
    fn profile(&self) -> Option<String> {
        // both reference profiles make the same vectors: the index records "reference"
        let p = self.embedder.profile().vectors();
        (p != Profile::Default).then(|| p.name().to_string())
    }
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, sift_embed::Error> {
        self.embedder.embed_texts(texts, Role::Passage)
    }
}

impl ImageEmbedder for Side<'_> {
    type Prepared = PreparedImage;
    type PrepareError = PreprocessError;
    type Error = sift_embed::Error;
    fn prepare(
        &self,
        images: &[&[u8]],
    ) -> Vec<std::result::Result<PreparedImage, PreprocessError>> {
        self.embedder.prepare_images(images)
    }
    fn embed_prepared(
        &self,
        images: &[PreparedImage],
    ) -> std::result::Result<Vec<Vec<f32>>, sift_embed::Error> {
        self.embedder.embed_images(images)
    }
}

/// The sides of one embedder an index build needs; [`Sides::dense_build`] describes its
/// dense index.
pub struct Sides<'a> {
    passages: Side<'a>,
    images: Option<Side<'a>>,
}

/// What a dense index holds of a model that embeds images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexed {
    /// Passage vectors only.
    Passages,
    /// Passage vectors, and corpus image vectors when the model embeds images.
    PassagesAndImages,
}

impl<'a> Sides<'a> {
    /// The passage side of `embedder` and, when `indexed` asks for it and the model has one,
    /// its image side.
    pub fn new(embedder: &'a Embedder, indexed: Indexed) -> Sides<'a> {
        Sides {
            passages: Side::passages(embedder),
            images: Side::images(embedder).filter(|_| indexed == Indexed::PassagesAndImages),
        }
    }

    /// The dense index `slug` of these sides, loadable again from `spec`.
    pub fn dense_build(&self, slug: impl Into<String>, spec: impl Into<String>) -> DenseBuild<'_> {
        let build = DenseBuild::new(slug, spec, &self.passages);
        match &self.images {
            Some(images) => build.with_images(images),
            None => build,
        }
    }

    /// The dense index a build makes of the model `dense` names (loaded from its spec: a
    /// directory or hub id), as `sift index --dense` makes it: named as `dense` says, else
    /// by the model's [`slug`], recorded so the index can load it again
    /// ([`recorded_spec`]), and indexing `vectors` instead of embedding the passages when
    /// given ([`match_precomputed`]).
    pub fn build_for<'s>(
        &'s self,
        dense: &DenseModel<'_>,
        vectors: Option<&'s sift_index::Precomputed>,
    ) -> DenseBuild<'s> {
        let name = match dense.name {
            Some(n) => n.to_string(),
            None => slug(self.passages.embedder),
        };
        let build = self.dense_build(name, recorded_spec(dense.spec));
        match vectors {
            Some(v) => build.precomputed(v),
            None => build,
        }
    }
}

/// The embedders of the dense indexes a search uses, each loaded once.
#[derive(Default)]
pub struct ModelSet {
    by_name: HashMap<String, (String, Embedder)>,
}

impl ModelSet {
    /// An empty set.
    pub fn new() -> ModelSet {
        ModelSet::default()
    }

    /// Loads the model of every dense index `retriever` names, from where the index says it
    /// was built (or from `model_override`), with the profile its vectors were made with
    /// (or `options.profile` when that one makes the same vectors: either reference profile
    /// on an index built with one), and checks that it is that model: same dimension and,
    /// where the index records it, the same files (weights, tokenizer, configs). Asking for
    /// a reference profile (`options.profile`) of an index built with the default one is an
    /// error: its vectors were not made so.
    pub fn load_for(
        &mut self,
        index: &IndexDir,
        retriever: &RetrieverSpec,
        options: &EmbedderOptions,
        model_override: Option<&str>,
    ) -> Result<()> {
        for name in retriever.dense_names() {
            if self.by_name.contains_key(name) {
                continue;
            }
            let (slug, info) = index.dense_info(name)?;
            let built = match info.profile.as_deref() {
                None => Profile::Default,
                Some(p) => Profile::from_name(p).ok_or_else(|| Error::Model {
                    slug: slug.to_string(),
                    message: format!("the index records an unknown embedding profile {p:?}"),
                })?,
            };
            if options.profile != Profile::Default && options.profile.vectors() != built {
                return Err(Error::Model {
                    slug: slug.to_string(),
                    message: format!(
                        "its vectors were made with the {} profile, not {}",
                        built.name(),
                        options.profile.name()
                    ),
                });
            }
            // the profile asked for (one that makes these vectors), else the index's
            let profile = if options.profile == Profile::Default {
                built
            } else {
                options.profile
            };
            let options = EmbedderOptions {
                profile,
                ..options.clone()
            };
            let spec = model_override.unwrap_or(&info.spec);
            let embedder = Embedder::load(spec, &options)?;
            self.insert_checked(index, name, embedder)?;
        }
        Ok(())
    }

    /// Adds an embedder already loaded for the dense index `name`, with the same checks as
    /// [`ModelSet::load_for`].
    pub fn insert_checked(
        &mut self,
        index: &IndexDir,
        name: &str,
        embedder: Embedder,
    ) -> Result<()> {
        let (slug, info) = index.dense_info(name)?;
        let problem = |message: String| Error::Model {
            slug: slug.to_string(),
            message,
        };
        if embedder.dim() != info.dim {
            return Err(problem(format!(
                "model {} has {} dimensions, the index {}",
                embedder.name(),
                embedder.dim(),
                info.dim
            )));
        }
        let built = info.profile.as_deref().unwrap_or(Profile::Default.name());
        if embedder.profile().vectors().name() != built {
            return Err(problem(format!(
                "its vectors were made with the {built} profile; model {} was loaded with the {} \
                 profile",
                embedder.name(),
                embedder.profile().name()
            )));
        }
        if !info.model_hash.is_empty() && embedder.content_hash() != info.model_hash {
            return Err(problem(format!(
                "model {} is not the model dense:{slug} was built with ({}): its files differ \
                 (hash {} vs {})",
                embedder.name(),
                info.spec,
                embedder.content_hash(),
                info.model_hash
            )));
        }
        self.by_name
            .insert(name.to_string(), (slug.to_string(), embedder));
        Ok(())
    }

    /// The embedder of the dense index a retriever called `name`.
    pub fn get(&self, name: &str) -> Option<&Embedder> {
        self.by_name.get(name).map(|(_, e)| e)
    }

    /// The slug of the dense index a retriever called `name`, and its embedder.
    pub fn entry(&self, name: &str) -> Option<(&str, &Embedder)> {
        self.by_name.get(name).map(|(s, e)| (s.as_str(), e))
    }

    /// Whether every part of `retriever` can rank images (Task 3): only dense models that
    /// embed images can.
    pub fn ranks_images(&self, retriever: &RetrieverSpec) -> bool {
        match retriever {
            RetrieverSpec::Bm25 => false,
            RetrieverSpec::Dense(n) => self.get(n).is_some_and(|m| m.capabilities().images),
            RetrieverSpec::Hybrid { parts, .. } => parts.iter().all(|p| self.ranks_images(p)),
        }
    }

    /// Whether any part of `retriever` embeds query images.
    pub fn sees_images(&self, retriever: &RetrieverSpec) -> bool {
        match retriever {
            RetrieverSpec::Bm25 => false,
            RetrieverSpec::Dense(n) => self.get(n).is_some_and(|m| m.capabilities().images),
            RetrieverSpec::Hybrid { parts, .. } => parts.iter().any(|p| self.sees_images(p)),
        }
    }
}

/// For each model of a build, the directory of precomputed vectors made by it (the same
/// model files: [`sift_index::Precomputed`]), if any. A directory that no model made, or two
/// for one model, is an error; with one model and one directory they are paired, and the
/// build's check says what differs.
pub fn match_precomputed<'a>(
    vectors: &'a [sift_index::Precomputed],
    models: &[Embedder],
) -> Result<Vec<Option<&'a sift_index::Precomputed>>> {
    let mut given: Vec<Option<&sift_index::Precomputed>> = vec![None; models.len()];
    for v in vectors {
        let m = v.manifest();
        if m.model_hash.is_empty() && models.len() != 1 {
            return Err(Error::Unsupported(format!(
                "{}: {} does not say which model made its vectors: give one dense model with it",
                v.dir().display(),
                m.model
            )));
        }
        let found = models
            .iter()
            .position(|e| e.content_hash() == m.model_hash)
            .or_else(|| (models.len() == 1 && vectors.len() == 1).then_some(0));
        let Some(i) = found else {
            return Err(Error::Unsupported(format!(
                "{}: the vectors were made by {} (model files {}), which no dense model of the build is",
                v.dir().display(),
                m.model,
                m.model_hash
            )));
        };
        if let Some(other) = given[i] {
            return Err(Error::Unsupported(format!(
                "{} and {} both hold vectors of {}: give one",
                other.dir().display(),
                v.dir().display(),
                models[i].name()
            )));
        }
        given[i] = Some(v);
    }
    Ok(given)
}

/// How an index records where to load a model again: a directory as its absolute path
/// (the index may be searched from elsewhere), a hub id as given.
pub fn recorded_spec(spec: &str) -> String {
    std::path::Path::new(spec)
        .canonicalize()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| spec.to_string())
}

#[cfg(test)]
mod tests {
    use super::DenseModel;

    #[test]
    fn dense_values_name_their_index_only_before_an_equals_sign() {
        let named = DenseModel::parse("minilm-v2=/models/unpacked/model");
        assert_eq!(named.name, Some("minilm-v2"));
        assert_eq!(named.spec, "/models/unpacked/model");
        // a path or hub id is a model as it is, '=' or not
        for v in [
            "models/a=b",
            "/x/y",
            "BAAI/bge-small-en-v1.5",
            "=dir",
            "name=",
            ".x=dir",
        ] {
            let d = DenseModel::parse(v);
            assert_eq!((d.name, d.spec), (None, v), "{v}");
        }
    }
}
