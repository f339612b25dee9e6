//! The experiments around retrieval that need a generator, as MM-BRIGHT's paper and BRIGHT
//! run them: captions of each query image (appended to the Task 1 query), query
//! reformulation with explicit reasoning, and BRIGHT-style reasoning before retrieval. Each
//! is a list of [`Job`]s per domain ([`plan`]), run through the cache ([`crate::generate_all`]),
//! and assembled into one augmentation per query ([`assemble`], [`write_augmentations`]).
use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sift_core::{Corpus, Warnings};

use crate::request::{Message, Part, Request, Sampling};
use crate::run::{Job, Outcome};
use crate::{Error, Result};

/// Which text a generator writes for each query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Experiment {
    /// A description of each query image (one generation per image), joined per query.
    Captions,
    /// A search query written after explicit reasoning (the text after the last `Query:`).
    Reformulations,
    /// BRIGHT-style reasoning: the problem, what a relevant document holds, a draft answer.
    Reasoning,
}

impl Experiment {
    /// The name used in files and caches.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Captions => "captions",
            Experiment::Reformulations => "reformulations",
            Experiment::Reasoning => "reasoning",
        }
    }

    /// The committed prompt template (`crates/sift-generate/templates/`, written for Sift in
    /// the spirit of MM-BRIGHT's Figure 14 and BRIGHT's `reason.py`); its version is bumped
    /// whenever its wording changes, which also changes every cache key made from it.
    pub fn template(self) -> Template {
        let (name, text) = match self {
            Experiment::Captions => ("captions", include_str!("../templates/captions.txt")),
            Experiment::Reformulations => (
                "reformulation",
                include_str!("../templates/reformulation.txt"),
            ),
            Experiment::Reasoning => ("reasoning", include_str!("../templates/reasoning.txt")),
        };
        Template {
            name: name.to_string(),
            version: 1,
            text: text.to_string(),
        }
    }

    /// Whether each query image is a job of its own (captions) rather than part of the
    /// query's one job.
    fn per_image(self) -> bool {
        self == Experiment::Captions
    }
}

/// A prompt: text with a `{query}` placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// Its name in cache keys and outputs.
    pub name: String,
    /// Its version in cache keys.
    pub version: u32,
    /// The text.
    pub text: String,
}

impl Template {
    /// A user's template from `path` (named `file:<stem>`, version 0: the cache key holds a
    /// hash of the prompt's text, so an edited file makes new keys). It must hold `{query}`.
    pub fn from_file(path: &Path) -> Result<Template> {
        let text = sift_core::read_regular_text(path, sift_core::TEXT_FILE_LIMIT)?;
        if !text.contains("{query}") {
            return Err(Error::Invalid(format!(
                "{}: a prompt template needs a {{query}} placeholder",
                path.display()
            )));
        }
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("prompt");
        Ok(Template {
            name: format!("file:{stem}"),
            version: 0,
            text,
        })
    }

    /// The prompt for `query`.
    pub fn render(&self, query: &str) -> String {
        self.text.replace("{query}", query.trim())
    }
}

/// A query as the experiments read it.
#[derive(Debug, Clone)]
pub struct QueryInput {
    /// Query id.
    pub id: String,
    /// Query text.
    pub text: String,
    /// Its images: (path, encoded bytes), in the query's order.
    pub images: Vec<(String, Vec<u8>)>,
}

/// The queries of `domain`: with `images`, the multimodal examples (Tasks 2-4) and each
/// one's images from `examples_images` (an image path with no file is left out and returned
/// in the second list, `query id: path`); else the Task 1 examples' text alone.
pub fn load_queries(
    corpus: &Corpus,
    domain: &str,
    images: bool,
    warnings: &mut Warnings,
) -> Result<(Vec<QueryInput>, Vec<String>)> {
    let examples = corpus.examples(domain, images, warnings)?;
    let mut bytes: HashMap<String, Vec<u8>> = HashMap::new();
    if images {
        for r in corpus.query_images(domain)? {
            let r = r?;
            bytes.insert(r.path, r.bytes);
        }
    }
    let mut missing = Vec::new();
    let queries = examples
        .into_iter()
        .map(|e| {
            let mut imgs = Vec::new();
            if images {
                for p in &e.image_paths {
                    match bytes.get(p) {
                        Some(b) => imgs.push((p.clone(), b.clone())),
                        None => missing.push(format!("{}: {p}", e.id)),
                    }
                }
            }
            QueryInput {
                id: e.id,
                text: e.query,
                images: imgs,
            }
        })
        .collect();
    Ok((queries, missing))
}

/// Where each job's output goes: the query and, for captions, the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The query.
    pub query_id: String,
    /// The image a caption is of.
    pub image: Option<String>,
}

/// The jobs of `experiment` over `queries` with `template` and `sampling`, and the slot of
/// each. Captions: one job per query image (the image, then the prompt); queries without
/// images get none. The others: one job per query, its images (if loaded) before the prompt.
pub fn plan(
    experiment: Experiment,
    template: &Template,
    queries: &[QueryInput],
    sampling: &Sampling,
) -> (Vec<Job>, Vec<Slot>) {
    let mut jobs = Vec::new();
    let mut slots = Vec::new();
    let job = |q: &QueryInput, images: &[(String, Vec<u8>)]| {
        let mut content: Vec<Part> = images.iter().map(|(_, b)| Part::image(b.clone())).collect();
        content.push(Part::text(template.render(&q.text)));
        Job {
            query_id: q.id.clone(),
            template: (template.name.clone(), template.version),
            request: Request {
                messages: vec![Message::user(content)],
                sampling: sampling.clone(),
            },
        }
    };
    for q in queries {
        if experiment.per_image() {
            for img in &q.images {
                jobs.push(job(q, std::slice::from_ref(img)));
                slots.push(Slot {
                    query_id: q.id.clone(),
                    image: Some(img.0.clone()),
                });
            }
        } else {
            jobs.push(job(q, &q.images));
            slots.push(Slot {
                query_id: q.id.clone(),
                image: None,
            });
        }
    }
    (jobs, slots)
}

/// One query's generated augmentation: what `--query-augment` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Augmentation {
    /// Query id.
    pub id: String,
    /// The text to append to (or put in place of) the query.
    pub text: String,
    /// Captions: each image's caption, in the query's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captions: Vec<ImageCaption>,
    /// Reformulations and reasoning: the whole generation (`text` is the query it ends with
    /// for reformulations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
}

/// A caption of one query image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageCaption {
    /// The image's path.
    pub image: String,
    /// Its caption.
    pub text: String,
}

/// The augmentations of a run, in query order, and the failures (`query id: why`): a query
/// any of whose jobs failed gets no augmentation (a rerun fills it in from the cache).
pub fn assemble(
    experiment: Experiment,
    slots: &[Slot],
    outcomes: &[Outcome],
) -> (Vec<Augmentation>, Vec<String>) {
    let mut out: Vec<Augmentation> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut broken: Option<String> = None;
    for (slot, outcome) in slots.iter().zip(outcomes) {
        let same = out.last().is_some_and(|a| a.id == slot.query_id)
            || broken.as_deref() == Some(slot.query_id.as_str());
        if !same {
            broken = None;
        }
        let g = match outcome.generation() {
            Some(g) => g.text.trim().to_string(),
            None => {
                if let Outcome::Failed(m) = outcome {
                    failed.push(m.clone());
                }
                if out.last().is_some_and(|a| a.id == slot.query_id) {
                    out.pop();
                }
                broken = Some(slot.query_id.clone());
                continue;
            }
        };
        if broken.as_deref() == Some(slot.query_id.as_str()) {
            continue;
        }
        match experiment {
            Experiment::Captions => {
                let caption = ImageCaption {
                    image: slot.image.clone().unwrap_or_default(),
                    text: g,
                };
                match out.last_mut().filter(|a| a.id == slot.query_id) {
                    Some(a) => a.captions.push(caption),
                    None => out.push(Augmentation {
                        id: slot.query_id.clone(),
                        text: String::new(),
                        captions: vec![caption],
                        generation: None,
                    }),
                }
            }
            Experiment::Reformulations => out.push(Augmentation {
                id: slot.query_id.clone(),
                text: final_query(&g),
                captions: Vec::new(),
                generation: Some(g),
            }),
            Experiment::Reasoning => out.push(Augmentation {
                id: slot.query_id.clone(),
                text: g.clone(),
                captions: Vec::new(),
                generation: Some(g),
            }),
        }
    }
    for a in &mut out {
        if !a.captions.is_empty() {
            a.text = a
                .captions
                .iter()
                .enumerate()
                .map(|(i, c)| format!("Image {}: {}", i + 1, c.text))
                .collect::<Vec<_>>()
                .join("\n");
        }
    }
    (out, failed)
}

/// The text after the last line starting with `Query:` (the reformulation prompt's answer
/// line), or the whole generation when there is none.
fn final_query(g: &str) -> String {
    match g.rfind("Query:") {
        Some(i) => g[i + "Query:".len()..].trim().to_string(),
        None => g.trim().to_string(),
    }
}

/// Writes `rows` as JSONL to `path` atomically (a temporary file in the same directory,
/// renamed over it).
pub fn write_augmentations(path: &Path, rows: &[Augmentation]) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut text = String::new();
    for r in rows {
        text.push_str(&serde_json::to_string(r).expect("an augmentation serialises"));
        text.push('\n');
    }
    Ok(sift_core::write_output(path, text.as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Generation, Usage};

    fn ok(t: &str) -> Outcome {
        Outcome::Generated(Generation {
            text: t.into(),
            finish_reason: None,
            usage: Usage::default(),
        })
    }

    fn slot(q: &str, image: Option<&str>) -> Slot {
        Slot {
            query_id: q.into(),
            image: image.map(str::to_string),
        }
    }

    #[test]
    fn captions_join_per_query_and_a_failed_image_drops_its_query() {
        let slots = [
            slot("q1", Some("a.png")),
            slot("q1", Some("b.png")),
            slot("q2", Some("c.png")),
            slot("q2", Some("d.png")),
            slot("q3", Some("e.png")),
        ];
        let outcomes = [
            ok(" a plot "),
            ok("a map"),
            ok("x"),
            Outcome::Failed("query q2: HTTP 500".into()),
            ok("a table"),
        ];
        let (out, failed) = assemble(Experiment::Captions, &slots, &outcomes);
        assert_eq!(failed, ["query q2: HTTP 500"]);
        let ids: Vec<&str> = out.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["q1", "q3"]);
        assert_eq!(out[0].text, "Image 1: a plot\nImage 2: a map");
        assert_eq!(out[0].captions[1].image, "b.png");
    }

    #[test]
    fn reformulations_keep_the_final_query_line() {
        let slots = [slot("q1", None), slot("q2", None)];
        let outcomes = [
            ok("It asks about X.\nQuery: heat capacity of water"),
            ok("no line"),
        ];
        let (out, failed) = assemble(Experiment::Reformulations, &slots, &outcomes);
        assert!(failed.is_empty());
        assert_eq!(out[0].text, "heat capacity of water");
        assert_eq!(out[1].text, "no line");
        assert_eq!(
            out[0].generation.as_deref(),
            Some("It asks about X.\nQuery: heat capacity of water")
        );
    }

    #[test]
    fn templates_need_the_query_placeholder() {
        for e in [
            Experiment::Captions,
            Experiment::Reformulations,
            Experiment::Reasoning,
        ] {
            let t = e.template();
            assert!(t.text.contains("{query}"), "{}", t.name);
            assert!(t.render("  why?  ").contains("why?"));
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mine.txt");
        std::fs::write(&p, "no placeholder").unwrap();
        assert!(matches!(Template::from_file(&p), Err(Error::Invalid(_))));
        std::fs::write(&p, "Rewrite: {query}").unwrap();
        let t = Template::from_file(&p).unwrap();
        assert_eq!(
            (t.name.as_str(), t.render("x").as_str()),
            ("file:mine", "Rewrite: x")
        );
    }
}
