//! The report's budgets and corpus reading, on the bundled sample corpus with generated
//! evaluation results (Tasks 1, 3 and 4; two retrievers ranking the domains' real passages,
//! images and pairs).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use super::*;
use crate::run_file_name;
use sift_core::WarningKind;

fn sample() -> Corpus {
    Corpus::open(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpora/sample"))
        .expect("the bundled sample corpus")
}

/// Writes an evaluation directory (`sift eval --out`'s layout) of the sample; `extra` names
/// a domain the corpus does not have, given one query in every task.
fn eval_dir(corpus: &Corpus, dir: &Path, extra: Option<&str>) {
    std::fs::create_dir_all(dir.join("runs")).unwrap();
    let mut reports = Vec::new();
    for task in ["1", "3", "4"] {
        for (r, label) in ["bm25", "dense:m"].into_iter().enumerate() {
            let mut run = String::new();
            let mut per_query: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
            let mut per_domain = BTreeMap::new();
            for domain in corpus.domains().unwrap() {
                let mut w = Warnings::new();
                let examples = corpus.examples(&domain, task != "1", &mut w).unwrap();
                let passages: Vec<String> = corpus
                    .passages(&domain)
                    .unwrap()
                    .map(|p| p.unwrap().id)
                    .collect();
                let images: Vec<String> = corpus
                    .images(&domain)
                    .unwrap()
                    .map(|i| i.unwrap().path)
                    .collect();
                let docs: Vec<String> = match task {
                    "1" => passages,
                    "3" => images,
                    _ => (0..passages.len())
                        .map(|i| crate::pair_id(&passages[i], Some(&images[i % images.len()])))
                        .collect(),
                };
                for (qi, e) in examples.iter().enumerate() {
                    for k in 0..10 {
                        let doc = &docs[(qi * 3 + k * (r + 1)) % docs.len()];
                        writeln!(run, "{} Q0 {doc} {} {} sift", e.id, k + 1, 10 - k).unwrap();
                    }
                    per_query
                        .entry(domain.clone())
                        .or_default()
                        .insert(e.id.clone(), json!({"ndcg@10": (qi % 5) as f64 / 4.0}));
                }
                per_domain.insert(domain, json!({"ndcg@10": 0.5}));
            }
            if let Some(x) = extra {
                per_query
                    .entry(x.to_string())
                    .or_default()
                    .insert(format!("{x}-1"), json!({"ndcg@10": 0.0}));
                per_domain.insert(x.to_string(), json!({"ndcg@10": 0.0}));
                writeln!(run, "{x}-1 Q0 {x}/p.txt 1 1 sift").unwrap();
            }
            let t: crate::Task = task.parse().unwrap();
            std::fs::write(dir.join("runs").join(run_file_name(t, label)), run).unwrap();
            reports.push(json!({
                "task": task, "label": label, "per_domain": per_domain, "per_query": per_query,
            }));
        }
    }
    let results = json!({ "reports": reports });
    std::fs::write(dir.join("results.json"), results.to_string()).unwrap();
}

/// The page's data with its image table, decoded as its script decodes them.
fn data(html: &str) -> Value {
    use base64::Engine as _;
    let unpack = |id: &str| -> Value {
        let tag = format!("<script id=\"{id}\" type=\"application/gzip-base64\">");
        let start = html.find(&tag).unwrap() + tag.len();
        let end = start + html[start..].find("</script>").unwrap();
        let gz = base64::engine::general_purpose::STANDARD
            .decode(&html[start..end])
            .unwrap();
        let mut json = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut json)
            .unwrap();
        serde_json::from_str(&json).unwrap()
    };
    let mut d = unpack("data");
    d["images"] = unpack("images");
    d
}

fn report(options: &HtmlOptions) -> (HtmlReport, Value, Corpus) {
    let corpus = sample();
    let dir = tempfile::tempdir().unwrap();
    eval_dir(&corpus, dir.path(), None);
    let r = build_html_report(&[dir.path().to_path_buf()], Some(&corpus), options).unwrap();
    let d = data(&r.html);
    (r, d, corpus)
}

/// Every domain's images (slots of the page's image table) in the order its share of the
/// thumbnails' budget goes to them: the query images as the page shows them (task, query),
/// then the candidates' images by rank (stable: task, query, retriever), each once.
fn priority(d: &Value) -> BTreeMap<String, Vec<usize>> {
    let mut queries: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut candidates: BTreeMap<String, Vec<(usize, usize)>> = BTreeMap::new();
    for t in d["tasks"].as_array().unwrap() {
        let docs = t["docs"].as_array().unwrap();
        for q in t["queries"].as_array().unwrap() {
            let domain = q["domain"].as_str().unwrap().to_string();
            for img in q["images"].as_array().unwrap() {
                queries
                    .entry(domain.clone())
                    .or_default()
                    .push(img.as_u64().unwrap() as usize);
            }
            for r in q["results"].as_array().unwrap() {
                for (rank, h) in r["hits"].as_array().unwrap().iter().enumerate() {
                    let doc = &docs[h[0].as_u64().unwrap() as usize];
                    if let Some(slot) = doc[2].as_u64() {
                        candidates
                            .entry(domain.clone())
                            .or_default()
                            .push((rank, slot as usize));
                    }
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for domain in queries.keys().chain(candidates.keys()) {
        let mut c = candidates.get(domain).cloned().unwrap_or_default();
        c.sort_by_key(|&(rank, _)| rank);
        let mut seen = HashSet::new();
        let order: Vec<usize> = queries
            .get(domain)
            .into_iter()
            .flatten()
            .copied()
            .chain(c.into_iter().map(|(_, s)| s))
            .filter(|&s| seen.insert(s))
            .collect();
        out.insert(domain.clone(), order);
    }
    out
}

/// The page's image table: (id, thumbnail's length if it has one).
fn images(d: &Value) -> Vec<(String, Option<usize>)> {
    d["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e[0].as_str().unwrap().to_string(),
                e[1].as_str().map(str::len),
            )
        })
        .collect()
}

#[test]
fn snippets_are_the_passages_text_within_the_task_budget() {
    let full = HtmlOptions::default();
    let (r, d, corpus) = report(&full);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings.examples());
    let mut texts = HashMap::new();
    for domain in corpus.domains().unwrap() {
        for p in corpus.passages(&domain).unwrap() {
            let p = p.unwrap();
            texts.insert(p.id, p.text);
        }
    }
    let mut cut = 0;
    for t in d["tasks"].as_array().unwrap() {
        for doc in t["docs"].as_array().unwrap() {
            let id = crate::split_pair_id(doc[0].as_str().unwrap()).0;
            match (doc[1].as_str(), t["task"].as_str().unwrap()) {
                (None, "3") => {}
                (None, task) => panic!("task {task}: {id} has no snippet"),
                (Some(s), _) => {
                    let head = s.trim_end_matches('…');
                    assert!(texts[id].starts_with(head), "{id}: {s:?}");
                    assert!(head.chars().count() <= full.snippet_chars, "{id}");
                    cut += (head.len() < texts[id].len()) as usize;
                }
            }
        }
    }
    assert!(cut > 0, "the sample has passages longer than a snippet");

    // a budget of 600 characters per task: every task's snippets share it
    let tight = HtmlOptions {
        snippet_budget: 600,
        ..HtmlOptions::default()
    };
    let (_, d, _) = report(&tight);
    for t in d["tasks"].as_array().unwrap() {
        let docs = t["docs"].as_array().unwrap();
        let per_doc = tight.snippet_budget / docs.len();
        let chars: Vec<usize> = docs
            .iter()
            .filter_map(|doc| doc[1].as_str())
            .map(|s| s.trim_end_matches('…').chars().count())
            .collect();
        assert!(chars.iter().all(|&n| n <= per_doc), "task {}", t["task"]);
        assert!(chars.iter().sum::<usize>() <= tight.snippet_budget);
        if t["task"] != "3" {
            assert!(
                chars.contains(&per_doc),
                "task {}: cut to {per_doc}",
                t["task"]
            );
        }
    }
}

#[test]
fn thumbnails_go_to_each_domains_first_images_within_the_budgets() {
    let (full, d, _) = report(&HtmlOptions::default());
    let all = images(&d);
    let missing: Vec<&str> = all
        .iter()
        .filter(|i| i.1.is_none())
        .map(|i| i.0.as_str())
        .collect();
    // the one image the sample makes undecodable
    let broken = "physics/physics_95c2e7d1_0002/image_1.png";
    assert_eq!(missing, [broken]);
    assert_eq!(full.thumbnails, (all.len() - 1, 1));
    let order = priority(&d);
    assert_eq!(order.len(), 3, "every domain shows images");
    let queries = d["tasks"][0]["queries"].as_array().unwrap();
    assert!(
        queries
            .iter()
            .any(|q| !q["images"].as_array().unwrap().is_empty())
    );
    let docs = d["tasks"][2]["docs"].as_array().unwrap();
    assert!(
        docs.iter().all(|doc| doc[2].is_u64()),
        "Task 3's candidates are images"
    );
    // each image once in the table, with one thumbnail
    let mut ids: Vec<&str> = all.iter().map(|i| i.0.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), all.len());

    // a budget of a few thumbnails: every domain's share goes to its first images
    let size = |s: usize| all[s].1.unwrap_or(usize::MAX);
    let budget = 3 * order.values().map(|o| size(o[0])).max().unwrap();
    let tight = HtmlOptions {
        thumbnail_budget: budget,
        ..HtmlOptions::default()
    };
    let (r, d, _) = report(&tight);
    let shown = images(&d);
    assert_eq!(priority(&d), order, "the same images, in the same order");
    let used: usize = shown.iter().filter_map(|i| i.1).sum();
    assert!(used <= budget, "{used} > {budget}");
    assert_eq!(
        r.thumbnails.0,
        shown.iter().filter(|i| i.1.is_some()).count()
    );
    assert!(
        r.thumbnails.0 < all.len() - 1,
        "the budget leaves images without one"
    );
    for (domain, o) in &order {
        let with: Vec<bool> = o
            .iter()
            .filter(|&&s| shown[s].0 != broken)
            .map(|&s| shown[s].1.is_some())
            .collect();
        assert!(with[0], "{domain}: its first image has a thumbnail");
        let k = with.iter().take_while(|w| **w).count();
        assert!(
            with[k..].iter().all(|w| !w),
            "{domain}: thumbnails are a prefix of its order: {with:?}"
        );
    }

    // the page's bound: the thumbnails get only what the rest of the page leaves
    let bare = report(&HtmlOptions {
        thumbnail_budget: 0,
        ..HtmlOptions::default()
    })
    .0;
    assert_eq!(bare.thumbnails.0, 0);
    let bound = HtmlOptions {
        max_page_bytes: bare.html.len() + 2 * budget,
        ..HtmlOptions::default()
    };
    let (r, _, _) = report(&bound);
    assert!(
        r.thumbnails.0 > 0 && r.thumbnails.0 < full.thumbnails.0,
        "{:?}",
        r.thumbnails
    );
    assert!(
        r.html.len() <= bound.max_page_bytes,
        "{} > {}",
        r.html.len(),
        bound.max_page_bytes
    );
}

#[test]
fn a_domain_the_corpus_lacks_is_counted_not_fatal() {
    let corpus = sample();
    let dir = tempfile::tempdir().unwrap();
    eval_dir(&corpus, dir.path(), Some("nowhere"));
    let options = HtmlOptions::default();
    let r = build_html_report(&[dir.path().to_path_buf()], Some(&corpus), &options).unwrap();
    // counted once each: its Task 1 queries, its multimodal queries (Tasks 3 and 4 share
    // them) and its passages (image configs are optional: a domain without one has none)
    assert_eq!(
        r.warnings.count(WarningKind::UnreadableCorpus),
        3,
        "{:?}",
        r.warnings.examples()
    );
    let w = r.warnings.examples();
    assert!(w.iter().any(|w| w.location.contains("nowhere")), "{w:?}");
    let d = data(&r.html);
    let q = d["tasks"][0]["queries"].as_array().unwrap();
    assert!(
        q.iter()
            .any(|q| q["id"] == "nowhere-1" && q["text"].is_null())
    );
}
