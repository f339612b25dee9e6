//! Loading a service: the index, its models, each domain's searchers and pairs, and the
//! corpus's texts and images.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sift_core::Corpus;
use sift_eval::{Links, PairLink};
use sift_index::IndexDir;
use sift_retrieve::{
    DomainSearcher, ModelSet, PairCandidates, PairLinking, RetrieverSpec, SearchSettings,
};

use crate::error::Error;

use super::*;

impl Service {
    /// Opens the index, loads the models of every retriever, and reads the corpus (passage
    /// texts into memory; images into memory from parquet, or listed from folders); loads
    /// the generator and reranker. Without an index ([`ServeConfig::without_index`]) the
    /// service only generates and reranks given pairs.
    pub fn load(config: &ServeConfig) -> Result<Service, Error> {
        let indexed = match &config.index {
            Some(path) => Indexed::load(config, path)?,
            None => Indexed::none(config)?,
        };
        if config.rerank.is_some() && config.index.is_some() && config.corpus.is_none() {
            return Err(Error::Config(
                "a reranker reads the hits' texts and images: give the corpus too".into(),
            ));
        }
        let models = Arc::new(indexed.models);
        let batcher = indexed
            .index
            .is_some()
            .then(|| QueryBatcher::start(models.clone(), config.batch));
        Ok(Service {
            rerank: config.rerank.clone(),
            reference_ready: config.reference_fusion,
            generator: load_generator(config)?,
            index_name: indexed.name,
            created: indexed.created,
            domains: indexed.domains,
            retrievers: indexed.retrievers,
            models,
            batcher,
            model_ids: indexed.model_ids,
            settings: SearchSettings {
                bm25: indexed.bm25,
                ..config.settings.clone()
            },
            limits: config.limits,
            has_corpus: indexed.has_corpus,
            index: indexed.index,
        })
    }
}

/// What a service loads from its index.
struct Indexed {
    index: Option<IndexDir>,
    name: String,
    created: u64,
    bm25: sift_index::Bm25Params,
    models: ModelSet,
    model_ids: Vec<String>,
    retrievers: Vec<Served>,
    domains: Vec<Domain>,
    has_corpus: bool,
}

impl Indexed {
    /// No index: nothing to search (a service that only generates or reranks).
    fn none(config: &ServeConfig) -> Result<Indexed, Error> {
        if config.corpus.is_some() || !config.retrievers.is_empty() || !config.domains.is_empty() {
            return Err(Error::Config(
                "a corpus, retrievers and domains are served with an index: give the index".into(),
            ));
        }
        Ok(Indexed {
            index: None,
            name: String::new(),
            created: 0,
            bm25: config.bm25.unwrap_or_default(),
            models: ModelSet::new(),
            model_ids: Vec::new(),
            retrievers: Vec::new(),
            domains: Vec::new(),
            has_corpus: false,
        })
    }

    fn load(config: &ServeConfig, path: &std::path::Path) -> Result<Indexed, Error> {
        let index = IndexDir::open(path)?;
        let manifest = index.manifest();
        let bm25 = config.bm25.unwrap_or(manifest.bm25);
        bm25.validate()?;
        let specs = retriever_specs(config, manifest)?;
        let mut models = ModelSet::new();
        for spec in &specs {
            models.load_for(
                &index,
                spec,
                &config.model_options,
                config.model_dir.as_deref(),
            )?;
        }
        let mut model_ids: Vec<String> = specs
            .iter()
            .flat_map(|s| s.dense_names())
            .map(str::to_string)
            .collect();
        model_ids.sort();
        model_ids.dedup();
        let retrievers: Vec<Served> = specs
            .into_iter()
            .map(|spec| served(config, &models, spec))
            .collect::<Result<_, Error>>()?;
        let names = domain_names(config, manifest)?;
        let corpus = match &config.corpus {
            Some(dir) => Some(Corpus::open(dir)?.allow_partial_shards(config.allow_partial_shards)),
            None => None,
        };
        check_pair_link(config, corpus.as_ref())?;
        let open = DomainLoader {
            index: &index,
            config,
            corpus: corpus.as_ref(),
            retrievers: &retrievers,
            models: &models,
            // pairs are ranked by any retriever (BM25 by the passage's text); their images
            // come from the corpus, else from a model that indexed them
            pairs_possible: corpus.is_some() || retrievers.iter().any(|r| r.takes_images),
            linking: PairLinking {
                link: config.pair_link,
                // a reference profile asked for, or the one the index's models were built
                // with: pairs then leave out the images the reference's loader drops
                loadable_only: config.model_options.profile.is_reference()
                    || model_ids
                        .iter()
                        .any(|n| models.get(n).is_some_and(|m| m.profile().is_reference())),
                knowledge_base: manifest.layout == Some(sift_core::Layout::Kb),
            },
        };
        let domains = names
            .into_iter()
            .map(|name| open.domain(name))
            .collect::<Result<Vec<_>, Error>>()?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        Ok(Indexed {
            created: manifest.created_unix,
            has_corpus: corpus.is_some(),
            index: Some(index),
            name,
            bm25,
            models,
            model_ids,
            retrievers,
            domains,
        })
    }
}

/// The retrievers a service serves: those configured, else BM25 and every dense index.
fn retriever_specs(
    config: &ServeConfig,
    manifest: &sift_index::Manifest,
) -> Result<Vec<RetrieverSpec>, Error> {
    if config.retrievers.is_empty() {
        return Ok(std::iter::once(RetrieverSpec::Bm25)
            .chain(
                manifest
                    .dense
                    .keys()
                    .map(|slug| RetrieverSpec::Dense(slug.clone())),
            )
            .collect());
    }
    config
        .retrievers
        .iter()
        .map(|s| s.parse().map_err(Error::from))
        .collect()
}

/// A served retriever: what it ranks and takes, and the reference's stand-ins when asked.
fn served(config: &ServeConfig, models: &ModelSet, spec: RetrieverSpec) -> Result<Served, Error> {
    let ranks_images = models.ranks_images(&spec);
    let uniform = if config.reference_fusion && ranks_images {
        sift_retrieve::reference_image_stand_ins(models, &spec)?
    } else {
        sift_retrieve::PairStandIns::new()
    };
    Ok(Served {
        name: spec.to_string(),
        ranks_images,
        takes_images: models.sees_images(&spec),
        uniform,
        spec,
    })
}

/// The domains to serve: those configured (each must be in the index), else every one.
fn domain_names(
    config: &ServeConfig,
    manifest: &sift_index::Manifest,
) -> Result<Vec<String>, Error> {
    if config.domains.is_empty() {
        return Ok(manifest.domains.keys().cloned().collect());
    }
    for d in &config.domains {
        if !manifest.domains.contains_key(d) {
            return Err(Error::Config(format!(
                "no domain {d:?} in the index (it has {})",
                manifest
                    .domains
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(config.domains.clone())
}

/// The local generator of `POST /v1/chat/completions`, loaded on the models' device.
fn load_generator(config: &ServeConfig) -> Result<Option<NamedGenerator>, Error> {
    let Some(spec) = &config.generator else {
        return Ok(None);
    };
    let device = sift_embed::select_device(config.model_options.device)
        .map_err(|e| Error::Config(format!("generator {spec}: {e}")))?;
    let g = sift_generate::LocalQwen2Vl::load(spec, &device)
        .map_err(|e| Error::Config(format!("generator {spec}: {e}")))?;
    Ok(Some((spec.clone(), Box::new(g))))
}

/// What opening each domain shares.
struct DomainLoader<'a> {
    index: &'a IndexDir,
    config: &'a ServeConfig,
    corpus: Option<&'a Corpus>,
    retrievers: &'a [Served],
    models: &'a ModelSet,
    pairs_possible: bool,
    linking: PairLinking,
}

impl DomainLoader<'_> {
    /// One domain: a searcher per retriever, the corpus's texts and images, Task 4's pairs
    /// and the tables that rank them.
    fn domain(&self, name: String) -> Result<Domain, Error> {
        // the corpus must be the one indexed: its texts are what the hits return
        if let Some(c) = self.corpus {
            self.index.check_domain(&name, Some(c))?;
        }
        let searchers = self
            .retrievers
            .iter()
            .map(|r| {
                DomainSearcher::open(self.index, &name, &r.spec, self.models, r.takes_images)
                    .map_err(Error::from)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let passage_ids = searchers[0].passage_ids().to_vec();
        let texts = match self.corpus {
            Some(c) => Some(read_domain(c, &name, &passage_ids)?),
            None => None,
        };
        // Task 4's pairs: the corpus's own links (MM-BRIGHT's base keys or the
        // annotations', a knowledge base's rows), else base keys over the images the first
        // retriever that ranks images indexed (a knowledge base without its file:
        // text-only pairs)
        let pairs = match self.pairs_possible {
            false => None,
            true => Some(domain_pairs(
                self.retrievers,
                &searchers,
                self.models,
                self.corpus,
                self.linking,
                self.config.reference_fusion,
            )?),
        };
        let tables = self
            .retrievers
            .iter()
            .zip(&searchers)
            .map(|(r, s)| match (&pairs, r.takes_images) {
                (Some(p), true) => p.table(s).map(Some).map_err(Error::from),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Domain {
            name,
            scratch: searchers.iter().map(|_| Mutex::new(Vec::new())).collect(),
            searchers,
            pairs,
            tables,
            corpus: texts,
        })
    }
}

/// `--pair-link source-id` reads image annotations: the corpus must be given, and be no
/// knowledge base (whose rows link each passage to its image).
fn check_pair_link(config: &ServeConfig, corpus: Option<&Corpus>) -> Result<(), Error> {
    if config.pair_link != PairLink::SourceId {
        return Ok(());
    }
    match corpus {
        None => Err(Error::Config(
            "pairs linked by source id read the image annotations: give the corpus".into(),
        )),
        Some(c) if c.layout() == sift_core::Layout::Kb => Err(Error::Config(
            "pairs linked by source id read image annotations, which a knowledge base has \
             none of: its rows link each passage to its image"
                .into(),
        )),
        Some(_) => Ok(()),
    }
}

/// One domain's Task 4 pairs, linked as `linking` says over the corpus's images (else over
/// the images the first retriever with a model that embeds images indexed), with the
/// reference code's stand-ins and pair vectors for every such retriever when `reference`.
fn domain_pairs(
    retrievers: &[Served],
    searchers: &[DomainSearcher],
    models: &ModelSet,
    corpus: Option<&Corpus>,
    linking: PairLinking,
    reference: bool,
) -> Result<PairCandidates, Error> {
    let seeing: Vec<(&Served, &DomainSearcher)> = retrievers
        .iter()
        .zip(searchers)
        .filter(|(r, _)| r.takes_images)
        .collect();
    let (r, s) = seeing
        .first()
        .copied()
        .unwrap_or((&retrievers[0], &searchers[0]));
    let mut w = sift_core::Warnings::new();
    let mut pairs = PairCandidates::link(s, &r.spec, corpus, linking, &mut w)?;
    if reference {
        for (r, s) in seeing {
            pairs.add_reference(s, models, &r.spec, corpus, &mut w, &sift_index::NoProgress)?;
        }
    }
    Ok(pairs)
}

/// Reads one domain of the corpus: the texts of the index's passages (a passage the
/// corpus lacks is an error: the index was built from another corpus) and its images.
pub(super) fn read_domain(
    corpus: &Corpus,
    domain: &str,
    passage_ids: &[String],
) -> Result<DomainCorpus, Error> {
    let ord: HashMap<&str, usize> = passage_ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let mut texts: Vec<Option<String>> = vec![None; passage_ids.len()];
    let mut titles: Vec<Option<String>> = vec![None; passage_ids.len()];
    for p in corpus.passages(domain)? {
        let p = p?;
        if let Some(&i) = ord.get(p.id.as_str()) {
            texts[i] = Some(p.text);
            titles[i] = p.title;
        }
    }
    let missing = texts.iter().filter(|t| t.is_none()).count();
    if missing > 0 {
        let first = texts
            .iter()
            .position(Option::is_none)
            .expect("one is missing");
        return Err(Error::CorpusMismatch {
            path: corpus.root().to_path_buf(),
            message: format!(
                "domain {domain}: {missing} indexed passages are not in the corpus (the first: \
                 {:?}); give the corpus the index was built from",
                passage_ids[first]
            ),
        });
    }
    let mut image_ids = Vec::new();
    let mut images = Vec::new();
    for r in corpus.images(domain)? {
        let r = r?;
        let from_parquet = r.file.extension().is_some_and(|e| e == "parquet");
        images.push(if from_parquet {
            ImageSource::Bytes(Arc::from(r.bytes))
        } else {
            ImageSource::File(
                VettedFile::vet(&r.file).map_err(|e| {
                    Error::Config(format!("domain {domain}: image {:?}: {e}", r.path))
                })?,
            )
        });
        image_ids.push(r.path);
    }
    let links = Links::for_corpus(
        corpus,
        PairLink::Regex,
        domain,
        passage_ids,
        &image_ids,
        &[],
    )?;
    Ok(DomainCorpus {
        texts: texts.into_iter().map(Option::unwrap_or_default).collect(),
        titles,
        image_ord: image_ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i as u32))
            .collect(),
        image_ids,
        images,
        links,
    })
}
