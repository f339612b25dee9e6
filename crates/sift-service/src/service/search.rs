//! Searching: one rule for the task a query is encoded as ([`query_task`]), the query's
//! vectors, the first stage over one or several domains, the reranker, and the hits.
use sift_eval::{RunEntry, Task};
use sift_retrieve::{
    Candidates, DomainPart, QueryImages, QueryVectors, SearchSettings, search_domains,
};

use crate::api::{CandidateKind, Fusion, Hit, SearchRequest, SearchResponse};
use crate::error::{ApiError, ErrorKind};

use super::*;

/// The task a search's query is encoded as, written once for every door (the CLI's
/// `sift search`, HTTP, MCP, Python): what decides is what the candidates are and whether
/// the query carries images.
///
/// - passages, a query without images: Task 1 (text to text), unless `fusion` is
///   [`Fusion::Reference`], whose rule is the reference code's Task 2 (it gives a CLIP-style
///   model a white image for a query without one);
/// - passages, a query with images: Task 2;
/// - corpus images: Task 3; passage+image pairs: Task 4.
///
/// The task picks the instruction of models that take one and, under
/// [`Fusion::Reference`], how the reference code fuses the query's text and images.
pub fn query_task(candidates: CandidateKind, with_images: bool, fusion: Fusion) -> Task {
    match candidates {
        CandidateKind::Passages if with_images || fusion == Fusion::Reference => {
            Task::MultimodalPassages
        }
        CandidateKind::Passages => Task::Passages,
        CandidateKind::Images => Task::Images,
        CandidateKind::Pairs => Task::Pairs,
    }
}

impl Service {
    /// Searches the domain the request names, or every domain served, merged into one
    /// ranking ([`sift_retrieve::search_domains`]: BM25 scored with the statistics of all
    /// the searched domains summed, dense scores as the cosines they are), so that scores
    /// compare across domains as within one.
    pub fn search(&self, req: &SearchRequest) -> Result<SearchResponse, ApiError> {
        self.search_with(req, None)
    }

    /// [`Service::search`] with the query's vectors already made (`vectors`), or made here.
    pub(super) fn search_with(
        &self,
        req: &SearchRequest,
        vectors: Option<QueryVectors>,
    ) -> Result<SearchResponse, ApiError> {
        let targets = self.targets("domain", req.domain.as_deref())?;
        self.check_top_k(req.top_k)?;
        let mut budget = self.image_budget("images", req.images.len())?;
        if req.query.trim().is_empty() && req.images.is_empty() {
            return Err(ApiError::invalid(
                "query",
                "give a query text, images, or both",
            ));
        }
        let ri = self.retriever(
            req.retriever.as_deref(),
            req.candidates,
            !req.images.is_empty(),
        )?;
        let served = &self.retrievers[ri];
        let images: Vec<Vec<u8>> = req
            .images
            .iter()
            .enumerate()
            .map(|(i, input)| {
                self.image_bytes(&targets, &format!("images[{i}]"), input, &mut budget)
            })
            .collect::<Result<_, _>>()?;
        let task = query_task(req.candidates, !images.is_empty(), req.fusion);
        if req.candidates == CandidateKind::Pairs && targets.iter().any(|d| d.pairs.is_none()) {
            return Err(ApiError::invalid(
                "candidates",
                "pairs need the corpus images: start with the corpus, or serve a retriever with \
                 a model that indexed images",
            ));
        }
        let reference = req.fusion == Fusion::Reference;
        if reference && req.candidates != CandidateKind::Passages && !self.reference_ready {
            return Err(ApiError::invalid(
                "fusion",
                "the reference code's rule for images and pairs needs its stand-in images, \
                 prepared at start (start the service with --query-fusion reference)",
            ));
        }
        // the service's queries carry no per-domain instruction: one set of vectors serves
        // every domain
        let vectors = match vectors {
            Some(v) => v,
            None => self.query_vectors(
                served,
                &targets[0].name,
                task,
                &req.query,
                &images,
                req.fusion,
            )?,
        };
        let parts: Vec<DomainPart> = targets
            .iter()
            .map(|d| DomainPart {
                searcher: &d.searchers[ri],
                candidates: match req.candidates {
                    CandidateKind::Passages => Candidates::Passages,
                    // the reference's white image for every corpus image (Nomic, Jina-CLIP)
                    CandidateKind::Images if reference && !served.uniform.is_empty() => {
                        Candidates::UniformImages {
                            vectors: &served.uniform,
                        }
                    }
                    CandidateKind::Images => Candidates::Images,
                    CandidateKind::Pairs => {
                        d.pairs.as_ref().unwrap_or(&NO_PAIRS).candidates(reference)
                    }
                },
                // the table holds Sift's pair scoring, not the reference's stand-ins
                table: match req.candidates {
                    CandidateKind::Pairs if !reference => d.tables[ri].as_ref(),
                    _ => None,
                },
                exclude: &[],
            })
            .collect();
        let mut settings = SearchSettings {
            // a reranker reads its depth of first-stage hits
            top_k: self
                .rerank
                .as_ref()
                .map_or(req.top_k, |r| r.depth.max(req.top_k)),
            ..self.settings.clone()
        };
        if let Some(k1) = req.k1 {
            settings.bm25.k1 = k1;
        }
        if let Some(b) = req.b {
            settings.bm25.b = b;
        }
        if let Err(e) = settings.bm25.validate() {
            let field = if req.b.is_some() && !(0.0..=1.0).contains(&settings.bm25.b) {
                "b"
            } else {
                "k1"
            };
            return Err(ApiError::invalid(field, e.to_string()));
        }
        if let Some(ef) = req.ef_search {
            if !(1..=100_000).contains(&ef) {
                return Err(ApiError::invalid(
                    "ef_search",
                    format!("{ef}: give 1 to 100000"),
                ));
            }
            settings.ef_search = ef;
        }
        let mut scratches: Vec<Option<Scratch>> =
            targets.iter().map(|d| d.take_scratch(ri)).collect();
        let ranked = search_domains(
            &parts,
            &served.spec,
            &req.query,
            &vectors,
            &settings,
            &mut scratches,
        );
        for (d, s) in targets.iter().zip(scratches) {
            d.keep_scratch(ri, s);
        }
        let mut ranked = ranked?;
        if let Some(stage) = &self.rerank {
            ranked = self.rerank(stage, &targets, task, &req.query, &images, ranked)?;
            ranked.truncate(req.top_k);
        }
        let chars = req.max_text_chars.unwrap_or(self.limits.text_chars);
        let hits = ranked
            .iter()
            .enumerate()
            .map(|(i, (d, h))| self.hit(targets[*d], req.candidates, i + 1, h, chars))
            .collect();
        Ok(SearchResponse {
            domain: (targets.len() == 1).then(|| targets[0].name.clone()),
            domains: targets.iter().map(|d| d.name.clone()).collect(),
            retriever: served.name.clone(),
            reranker: self.rerank.as_ref().map(|r| r.reranker.name().to_string()),
            candidates: req.candidates,
            hits,
        })
    }

    /// The merged hits `ranked` (domain, entry) reranked by `stage`: the top `depth`
    /// rescored with their texts and images from the corpus, the rest below in order.
    fn rerank(
        &self,
        stage: &sift_retrieve::RerankStage,
        targets: &[&Domain],
        task: Task,
        query: &str,
        images: &[Vec<u8>],
        ranked: Vec<(usize, RunEntry)>,
    ) -> Result<Vec<(usize, RunEntry)>, ApiError> {
        use sift_retrieve::rerank::{RerankDoc, RerankQuery};
        if !stage.reranker.ranks(task) {
            return Err(ApiError::invalid(
                "candidates",
                format!("the reranker {} cannot rank images", stage.reranker.name()),
            ));
        }
        let sees = stage.reranker.sees_images();
        let depth = stage.depth.min(ranked.len());
        // texts and image bytes of the top hits (an image read from a file lives here)
        let mut texts: Vec<Option<&str>> = Vec::with_capacity(depth);
        let mut bytes: Vec<Option<Arc<[u8]>>> = Vec::with_capacity(depth);
        for (d, h) in &ranked[..depth] {
            let domain = targets[*d];
            let corpus = domain.corpus.as_ref().ok_or_else(|| {
                ApiError::new(
                    ErrorKind::Internal,
                    "the reranker needs the corpus (start the service with --corpus)",
                )
            })?;
            let (passage, image) = task.doc_parts(&h.doc);
            texts.push(match passage {
                Some(p) => {
                    let ord = domain.searchers[0].passage_ord(p).ok_or_else(|| {
                        ApiError::new(ErrorKind::Internal, format!("passage {p:?} not indexed"))
                    })?;
                    Some(corpus.texts[ord as usize].as_str())
                }
                None => None,
            });
            bytes.push(match image {
                Some(i) if sees => Some(self.corpus_image(domain, "hits", i)?),
                _ => None,
            });
        }
        let docs: Vec<RerankDoc> = ranked[..depth]
            .iter()
            .zip(texts.iter().zip(&bytes))
            .map(|((_, h), (t, b))| RerankDoc {
                id: &h.doc,
                text: *t,
                image: b.as_deref(),
            })
            .collect();
        let refs: Vec<&[u8]> = if sees {
            images.iter().map(Vec::as_slice).collect()
        } else {
            Vec::new()
        };
        let q = RerankQuery {
            id: "query",
            text: query,
            images: &refs,
        };
        let mut out: Vec<(usize, RunEntry)> =
            sift_retrieve::rerank::rescore(stage, &q, &docs, ranked.len())
                .map_err(|e| ApiError::new(ErrorKind::Internal, format!("rerank: {e}")))?
                .into_iter()
                .map(|(i, score)| {
                    let (d, h) = &ranked[i];
                    (
                        *d,
                        RunEntry {
                            doc: h.doc.clone(),
                            score,
                        },
                    )
                })
                .collect();
        out.sort_by(|a, b| sift_eval::trec_order(&a.1, &b.1));
        Ok(out)
    }

    fn hit(
        &self,
        domain: &Domain,
        candidates: CandidateKind,
        rank: usize,
        h: &RunEntry,
        chars: usize,
    ) -> Hit {
        let (passage, image) = match candidates {
            CandidateKind::Passages => (Some(h.doc.clone()), None),
            CandidateKind::Images => (None, Some(h.doc.clone())),
            CandidateKind::Pairs => {
                let (p, i) = sift_eval::split_pair_id(&h.doc);
                (Some(p.to_string()), i.map(str::to_string))
            }
        };
        let corpus = domain.corpus.as_ref();
        // an image's text: its page's first passage
        let text_of = passage
            .clone()
            .or_else(|| page_of(domain, image.as_deref()?));
        let ord = text_of
            .as_deref()
            .and_then(|pid| domain.searchers[0].passage_ord(pid));
        let (text, title) = match (corpus, ord) {
            (Some(c), Some(o)) => (
                c.texts.get(o as usize).map(|t| cut(t, chars)),
                c.titles.get(o as usize).cloned().flatten(),
            ),
            _ => (None, None),
        };
        // the page a hit opens as: its passage's, else its image's page (or the image's own)
        let page = text_of
            .as_deref()
            .or(image.as_deref())
            .map(|id| page_path(&domain.name, id));
        Hit {
            rank,
            id: h.doc.clone(),
            domain: domain.name.clone(),
            score: h.score,
            has_image: image.is_some(),
            text,
            title,
            page_url: page,
            passage_url: passage.as_ref().map(|p| document_path(&domain.name, p)),
            image_url: image.as_ref().map(|i| image_path(&domain.name, i)),
            passage_id: passage,
            image_id: image,
        }
    }

    /// Query vectors of every dense index `served` uses.
    fn query_vectors(
        &self,
        served: &Served,
        domain: &str,
        task: Task,
        text: &str,
        images: &[Vec<u8>],
        fusion: Fusion,
    ) -> Result<QueryVectors, ApiError> {
        let mode = match fusion {
            Fusion::All => QueryImages::All,
            Fusion::First => QueryImages::First,
            Fusion::Reference => QueryImages::Reference,
        };
        if images.is_empty() && fusion != Fusion::Reference {
            // a text query: encoded with the queries of the other requests in flight
            return Ok(self.text_vectors(served, &[text])?.remove(0));
        }
        let refs: Vec<&[u8]> = images.iter().map(Vec::as_slice).collect();
        let mut warnings = Warnings::new();
        // text and images as the evaluator encodes a query; images alone: their mean
        let vectors = sift_retrieve::encode_query(
            &self.models,
            &served.spec,
            task,
            text,
            &refs,
            // the reference's rule applies to queries without images too (a white image
            // for CLIP)
            (!images.is_empty() || fusion == Fusion::Reference).then_some(mode),
            &Instructions::Reference,
            domain,
            &mut warnings,
        )
        .map_err(|e| match e {
            sift_retrieve::Error::QueryImage { index, message } => {
                ApiError::invalid(format!("images[{index}]"), message)
            }
            e => ApiError::from(e),
        })?;
        if let Some(w) = warnings.examples().first() {
            return Err(ApiError::invalid("images", w.message.clone()));
        }
        Ok(vectors)
    }

    /// The vectors of text queries (no images; the service's queries carry no instruction)
    /// for every dense index `served` uses, one [`QueryVectors`] per text, encoded through
    /// the service's [`QueryBatcher`] together with other requests' queries.
    pub(super) fn text_vectors(
        &self,
        served: &Served,
        texts: &[&str],
    ) -> Result<Vec<QueryVectors>, ApiError> {
        let mut out = vec![QueryVectors::default(); texts.len()];
        let mut names = served.spec.dense_names();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let vectors = match &self.batcher {
                Some(b) => b.encode(name, texts)?,
                None => {
                    return Err(ApiError::new(
                        ErrorKind::Internal,
                        "this service has no query encoder",
                    ));
                }
            };
            for (o, v) in out.iter_mut().zip(vectors) {
                o.insert(name, vec![v]);
            }
        }
        Ok(out)
    }
}
