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
    /// texts into memory; images into memory from parquet, or listed from folders).
    pub fn load(config: &ServeConfig) -> Result<Service, Error> {
        let index = IndexDir::open(&config.index)?;
        let manifest = index.manifest();
        let bm25 = config.bm25.unwrap_or(manifest.bm25);
        bm25.validate()?;
        let specs: Vec<RetrieverSpec> = if config.retrievers.is_empty() {
            std::iter::once(Ok(RetrieverSpec::Bm25))
                .chain(
                    manifest
                        .dense
                        .keys()
                        .map(|slug| Ok(RetrieverSpec::Dense(slug.clone()))),
                )
                .collect::<Result<_, Error>>()?
        } else {
            config
                .retrievers
                .iter()
                .map(|s| s.parse().map_err(Error::from))
                .collect::<Result<_, Error>>()?
        };
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
            .map(|spec| {
                let ranks_images = models.ranks_images(&spec);
                let uniform = if config.reference_fusion && ranks_images {
                    sift_retrieve::reference_image_stand_ins(&models, &spec)?
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
            })
            .collect::<Result<_, Error>>()?;
        let names: Vec<String> = if config.domains.is_empty() {
            manifest.domains.keys().cloned().collect()
        } else {
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
            config.domains.clone()
        };
        let corpus = match &config.corpus {
            Some(dir) => Some(Corpus::open(dir)?.allow_partial_shards(config.allow_partial_shards)),
            None => None,
        };
        // pairs are ranked by any retriever (BM25 by the passage's text); their images come
        // from the corpus, else from a model that indexed them
        let pairs_possible = corpus.is_some() || retrievers.iter().any(|r| r.takes_images);
        let kb = manifest.layout == Some(sift_core::Layout::Kb);
        check_pair_link(config, corpus.as_ref())?;
        // a reference profile asked for, or the one the index's models were built with:
        // pairs then leave out the images the reference's loader drops
        let reference_profile = config.model_options.profile.is_reference()
            || model_ids
                .iter()
                .any(|n| models.get(n).is_some_and(|m| m.profile().is_reference()));
        let mut domains = Vec::new();
        for name in names {
            // the corpus must be the one indexed: its texts are what the hits return
            if let Some(c) = &corpus {
                index.check_domain(&name, Some(c))?;
            }
            let searchers = retrievers
                .iter()
                .map(|r| {
                    DomainSearcher::open(&index, &name, &r.spec, &models, r.takes_images)
                        .map_err(Error::from)
                })
                .collect::<Result<Vec<_>, Error>>()?;
            let passage_ids = searchers[0].passage_ids().to_vec();
            let texts = match &corpus {
                Some(c) => Some(read_domain(c, &name, &passage_ids)?),
                None => None,
            };
            // Task 4's pairs: the corpus's own links (MM-BRIGHT's base keys or the
            // annotations', a knowledge base's rows), else base keys over the images the
            // first retriever that ranks images indexed (a knowledge base without its file:
            // text-only pairs)
            let pairs = match pairs_possible {
                false => None,
                true => {
                    let linking = PairLinking {
                        link: config.pair_link,
                        loadable_only: reference_profile,
                        knowledge_base: kb,
                    };
                    Some(domain_pairs(
                        &retrievers,
                        &searchers,
                        &models,
                        corpus.as_ref(),
                        linking,
                        config.reference_fusion,
                    )?)
                }
            };
            let tables = retrievers
                .iter()
                .zip(&searchers)
                .map(|(r, s)| match (&pairs, r.takes_images) {
                    (Some(p), true) => p.table(s).map(Some).map_err(Error::from),
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>, Error>>()?;
            domains.push(Domain {
                name,
                scratch: searchers.iter().map(|_| Mutex::new(Vec::new())).collect(),
                searchers,
                pairs,
                tables,
                corpus: texts,
            });
        }
        let index_name = config
            .index
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| config.index.display().to_string());
        let generator = match &config.generator {
            None => None,
            Some(spec) => {
                let device = sift_embed::select_device(config.model_options.device)
                    .map_err(|e| Error::Config(format!("generator {spec}: {e}")))?;
                let g = sift_generate::LocalQwen2Vl::load(spec, &device)
                    .map_err(|e| Error::Config(format!("generator {spec}: {e}")))?;
                let g: Box<dyn sift_generate::Generator> = Box::new(g);
                Some((spec.clone(), g))
            }
        };
        if config.rerank.is_some() && config.corpus.is_none() {
            return Err(Error::Config(
                "a reranker reads the hits' texts and images: give the corpus too".into(),
            ));
        }
        Ok(Service {
            rerank: config.rerank.clone(),
            reference_ready: config.reference_fusion,
            generator,
            index_name,
            created: manifest.created_unix,
            domains,
            retrievers,
            models,
            model_ids,
            settings: SearchSettings {
                bm25,
                ..config.settings.clone()
            },
            limits: config.limits,
            has_corpus: corpus.is_some(),
            _index: index,
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
    for p in corpus.passages(domain)? {
        let p = p?;
        if let Some(&i) = ord.get(p.id.as_str()) {
            texts[i] = Some(p.text);
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
