//! The four tasks end to end: searches of passages, images and pairs, Task 4's pair links.
use super::*;

/// `sift eval --task all` on the sample: BM25, MiniLM (when installed) and the tiny CLIP and
/// SigLIP checkpoints, all four tasks, both query-fusion modes; the Task 4 qrels it writes
/// equal the independent script's (`eval/reference/mmbright_qrels.py`).
#[test]
fn all_four_tasks_on_the_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let sample = sample();
    let index = tmp.path().join("index");
    let out_dir = tmp.path().join("eval");
    let fixtures = repo().join("models/fixtures/vision");
    let clip = fixtures.join("tiny-clip-quickgelu");
    let siglip = fixtures.join("tiny-siglip");
    let gme = repo().join("models/fixtures/gme/tiny-gme");
    let args = vec![
        "index",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "--dense",
        s(&siglip),
        "--dense",
        s(&gme),
        "--json",
    ];
    let built = json(&ok(&args));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    // 33 corpus images, one deliberately undecodable: counted and skipped
    assert_eq!(
        images["images"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        32
    );
    assert_eq!(images["undecodable"]["physics"], 1);
    let gme_images = &built["manifest"]["dense"]["tiny-gme"]["images"];
    assert_eq!(gme_images["undecodable"]["physics"], 1);
    let args = vec![
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "bm25",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--retriever",
        "dense:tiny-siglip",
        "--retriever",
        "dense:tiny-gme",
        "--query-fusion",
        "both",
        "--out",
        s(&out_dir),
        "--json",
    ];
    let e = json(&ok(&args));
    let reports = e["reports"].as_array().unwrap();
    let count = |task: &str| {
        reports
            .iter()
            .filter(|r| r["task"].as_str().unwrap().starts_with(task))
            .count()
    };
    let text_models = 1; // bm25 (dense text models: dense_and_hybrid_retrieval_on_the_sample)
    // task 1: every retriever once; tasks 2 and 4: text retrievers once, vision ones per
    // fusion mode; task 3: vision retrievers only
    // (three vision-language models: CLIP, SigLIP, GME)
    assert_eq!(count("1"), text_models + 3);
    assert_eq!(count("2"), text_models + 6);
    assert_eq!(count("3"), 6);
    assert_eq!(count("4"), text_models + 6);
    for r in reports {
        assert_eq!(
            r["per_domain"].as_object().unwrap().len(),
            3,
            "{}",
            r["label"]
        );
        let v = r["metrics"]["ndcg@10"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&v), "{}", r["label"]);
    }
    assert_eq!(e["orphan_positive_images"], 1);
    assert!(out_dir.join("results.md").is_file());
    assert!(
        out_dir
            .join("runs/task3.dense_tiny-siglip__query_images__first_.trec")
            .is_file()
    );
    let reference = repo().join("eval/reference/sample_qrels");
    let lines = |p: &Path| {
        let mut v: Vec<String> = fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        v.sort();
        v
    };
    for (ours, theirs) in [
        ("task4.qrels", "task4.paper.qrels"),
        ("task4.exclusions", "task4.paper.exclusions"),
        ("task3.qrels", "task3.qrels"),
        ("task2.qrels", "task2.qrels"),
    ] {
        assert_eq!(
            lines(&out_dir.join("qrels").join(ours)),
            lines(&reference.join(theirs)),
            "{ours}"
        );
    }
    // Task 4 with BM25: every pair scores as its passage does in Task 2 (same query text);
    // the run is in trec_eval order (ties: pair id descending), and a smaller top-k is its
    // prefix, so the selection on (score, pair index) cuts where the full sort would
    let read_run = |p: &Path| -> BTreeMap<String, Vec<(String, f64)>> {
        let mut run: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
        for l in fs::read_to_string(p).unwrap().lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            run.entry(f[0].to_string())
                .or_default()
                .push((f[2].to_string(), f[4].parse().unwrap()));
        }
        run
    };
    let t2 = read_run(&out_dir.join("runs/task2.bm25.trec"));
    let t4 = read_run(&out_dir.join("runs/task4.bm25.trec"));
    let excluded2: std::collections::HashSet<String> =
        fs::read_to_string(out_dir.join("qrels/task2.exclusions"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
    assert!(!t4.is_empty());
    let mut pairs_with_images = 0;
    for (q, ranking) in &t4 {
        let passage_scores: HashMap<&str, f64> =
            t2[q].iter().map(|(d, sc)| (d.as_str(), *sc)).collect();
        for w in ranking.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!(
                a.1 as f32 > b.1 as f32 || (a.1 as f32 == b.1 as f32 && a.0 > b.0),
                "{q}: {a:?} before {b:?}"
            );
        }
        for (pair, score) in ranking {
            let (pid, img) = pair.split_once("|||").unwrap();
            pairs_with_images += usize::from(img != "__NO_IMAGE__");
            match passage_scores.get(pid) {
                Some(p) => assert_eq!(p, score, "{q} {pair}"),
                // Task 2 removes the query's negative passages; Task 4 keeps them
                None => assert!(excluded2.contains(&format!("{q} {pid}")), "{q} {pair}"),
            }
        }
    }
    assert!(pairs_with_images > 0);
    let short = tmp.path().join("task4.top7.trec");
    ok(&[
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "4",
        "--retriever",
        "bm25",
        "--top-k",
        "7",
        "--run-out",
        s(&short),
        "--json",
    ]);
    let t4_short = read_run(&short);
    for (q, ranking) in &t4 {
        let n = ranking.len().min(7);
        assert_eq!(t4_short[q], ranking[..n].to_vec(), "{q}");
    }
    // the legacy protocol judges every gold-passage pair 1 and excludes nothing
    let legacy = tmp.path().join("legacy.qrels");
    ok(&[
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "4",
        "--protocol",
        "legacy",
        "--qrels-out",
        s(&legacy),
        "--json",
    ]);
    assert_eq!(lines(&legacy), lines(&reference.join("task4.legacy.qrels")));
    // BM25 cannot rank images
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample),
        "--index",
        s(&index),
        "--task",
        "3",
    ]);
    assert!(err.contains("cannot rank images"), "{err}");
}

/// `sift search` with any retriever, query images, and images or passage+image pairs as
/// results.
#[test]
fn search_with_dense_hybrid_images_and_pairs() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    index_ok(&sample(), &index, &["--dense", s(&clip), "-q"]);
    let image = repo().join("models/fixtures/vision/images/shapes_rgb_50x37.png");
    let search = |extra: &[&str]| -> Value {
        let mut a = vec![
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--json",
            "--top-k",
            "5",
        ];
        a.extend_from_slice(extra);
        json(&ok(&a))
    };
    let dense = search(&[
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--query",
        "map projection",
    ]);
    let hits = dense["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 5);
    assert!(
        hits.iter()
            .all(|h| h["id"].as_str().unwrap().starts_with("gis/"))
    );
    assert!(
        hits.windows(2)
            .all(|w| w[0]["score"].as_f64() >= w[1]["score"].as_f64())
    );
    // an image changes a vision model's query vector
    let with_image = search(&[
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--query",
        "map projection",
        "--image",
        s(&image),
    ]);
    assert_ne!(with_image["hits"], dense["hits"]);
    let images = search(&[
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--image",
        s(&image),
        "--candidates",
        "images",
    ]);
    assert!(images["hits"].as_array().unwrap().iter().all(|h| {
        let id = h["id"].as_str().unwrap();
        id.starts_with("gis/gis_") && !id.contains(".txt")
    }));
    let pairs = search(&[
        "--retriever",
        "hybrid:bm25+dense:tiny-clip-quickgelu",
        "--query",
        "map projection",
        "--candidates",
        "pairs",
    ]);
    for h in pairs["hits"].as_array().unwrap() {
        assert!(h["passage"].as_str().unwrap().ends_with(".txt"), "{h}");
        assert!(h["id"].as_str().unwrap().contains("|||"), "{h}");
    }
    // BM25 alone cannot take images or rank them
    assert!(
        fails(&[
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--image",
            s(&image)
        ])
        .contains("--image: bm25 takes no query images")
    );
    assert!(
        fails(&[
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--query",
            "x",
            "--candidates",
            "images",
        ])
        .contains("cannot rank images")
    );
}

/// A list column of `{image_path, source_passage_id}` structs, one list per row.
fn image_annotations(rows: &[&[(&str, &str)]]) -> arrow_array::ArrayRef {
    use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
    use arrow_schema::{DataType, Field};
    let fields = vec![
        Field::new("image_path", DataType::Utf8, true),
        Field::new("source_passage_id", DataType::Utf8, true),
    ];
    let mut b = ListBuilder::new(StructBuilder::from_fields(fields, rows.len()));
    for row in rows {
        for (img, pid) in *row {
            let s = b.values();
            s.field_builder::<StringBuilder>(0)
                .unwrap()
                .append_value(img);
            s.field_builder::<StringBuilder>(1)
                .unwrap()
                .append_value(pid);
            s.append(true);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

/// Task 4 linking on chunked passage ids (`biology/fec40b40_1635_4.txt`, which the reference
/// code's regex cannot key): `--pair-link regex` pairs only the keyed passage and reports the
/// rest unlinked; `--pair-link source-id` links what the annotations' source_passage_id
/// names, so the positive image is judged (rel 2) and the negative one excluded.
#[test]
fn task4_pair_links_by_regex_and_by_source_id_on_chunked_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let c = tmp.path().join("corpus");
    let p4 = "biology/fec40b40_1635_4.txt";
    let p5 = "biology/fec40b40_1635_5.txt";
    let keyed = "biology/aa11bb22_1.txt";
    let other = "biology/cc33dd44_2.txt";
    let img_chunked = "biology/biology_fec40b40_0001/image_1.png";
    let img_keyed = "biology/biology_aa11bb22_0001/image_1.png";
    write_parquet(
        &c.join("documents/biology.parquet"),
        vec![
            ("id", strings(&[p4, p5, keyed, other])),
            (
                "content",
                strings(&[
                    "cell membrane lipid bilayer",
                    "membrane proteins pump ions",
                    "lipid rafts in the membrane",
                    "photosynthesis in leaves",
                ]),
            ),
        ],
    );
    let png = {
        let mut bytes = Vec::new();
        image::RgbImage::from_pixel(4, 4, image::Rgb([200, 10, 10]))
            .write_to(
                &mut std::io::Cursor::new(&mut bytes),
                image::ImageFormat::Png,
            )
            .unwrap();
        bytes
    };
    write_parquet(
        &c.join("document_images/biology.parquet"),
        vec![
            ("path", strings(&[img_chunked, img_keyed])),
            (
                "bytes",
                Arc::new(arrow_array::BinaryArray::from(vec![&png[..], &png[..]])),
            ),
        ],
    );
    let list = |v: &[&str]| -> arrow_array::ArrayRef {
        let mut b =
            arrow_array::builder::ListBuilder::new(arrow_array::builder::StringBuilder::new());
        for x in v {
            b.values().append_value(x);
        }
        b.append(true);
        Arc::new(b.finish())
    };
    let example_columns = |multimodal: bool| {
        let mut cols = vec![
            ("id", strings(&["q1"])),
            ("query", strings(&["membrane lipid question"])),
            ("gold_ids", list(&[p4])),
            ("negative_ids", list(&[])),
            ("image_paths", list(&[])),
        ];
        if multimodal {
            cols.push((
                "positive_images",
                image_annotations(&[&[(img_chunked, p4)]]),
            ));
            cols.push((
                "negative_images",
                image_annotations(&[&[(img_keyed, keyed)]]),
            ));
        }
        cols
    };
    write_parquet(&c.join("examples/biology.parquet"), example_columns(false));
    write_parquet(
        &c.join("examples_multimodal/biology.parquet"),
        example_columns(true),
    );
    write_parquet(
        &c.join("examples_images/biology.parquet"),
        vec![
            ("path", strings(&[])),
            (
                "bytes",
                Arc::new(arrow_array::BinaryArray::from(Vec::<&[u8]>::new())),
            ),
        ],
    );
    let index = tmp.path().join("index");
    index_ok(&c, &index, &["-q"]);
    let eval = |link: &str| {
        let qrels = tmp.path().join(format!("{link}.qrels"));
        let run = tmp.path().join(format!("{link}.run"));
        let out = json(&ok(&[
            "eval",
            "--corpus",
            s(&c),
            "--index",
            s(&index),
            "--task",
            "4",
            "--pair-link",
            link,
            "--qrels-out",
            s(&qrels),
            "--run-out",
            s(&run),
            "--json",
        ]));
        let read = |p: &Path| fs::read_to_string(p).unwrap();
        let mut x = qrels.as_os_str().to_owned();
        x.push(".exclusions");
        (out, read(&qrels), read(Path::new(&x)), read(&run))
    };

    let (out, qrels, exclusions, run) = eval("regex");
    let l = &out["pair_links"]["biology"];
    assert_eq!(l["link"], "regex");
    assert_eq!(l["passages_unkeyed"], 2, "{l}");
    assert_eq!(l["image_pairs"], 1, "{l}");
    assert_eq!(l["images_unlinked"], 1, "{l}");
    // the positive image of the chunked gold passage is an orphan: no rel-2 pair
    assert!(!qrels.contains(" 2"), "{qrels}");
    assert!(
        qrels.contains(&format!("q1 0 {p4}|||__NO_IMAGE__ 1")),
        "{qrels}"
    );
    assert!(
        exclusions.contains(&format!("q1 {keyed}|||{img_keyed}")),
        "{exclusions}"
    );
    assert!(!run.contains(&format!("{p4}|||{img_chunked}")), "{run}");

    let (out, qrels, exclusions, run) = eval("source-id");
    let l = &out["pair_links"]["biology"];
    assert_eq!(l["link"], "source-id");
    assert_eq!(l["passages_unkeyed"], 0, "{l}");
    assert_eq!(l["image_pairs"], 2, "{l}");
    assert_eq!(l["images_unlinked"], 0, "{l}");
    assert!(
        qrels.contains(&format!("q1 0 {p4}|||{img_chunked} 2")),
        "{qrels}"
    );
    assert!(
        exclusions.contains(&format!("q1 {keyed}|||{img_keyed}")),
        "{exclusions}"
    );
    assert!(run.contains(&format!("{p4}|||{img_chunked}")), "{run}");
    assert!(
        !run.contains(&format!("{keyed}|||{img_keyed}")),
        "excluded: {run}"
    );
    // only what the annotations name: the other chunk of the page gets no image
    assert!(!run.contains(&format!("{p5}|||{img_chunked}")), "{run}");
    // sift check counts the orphan under the rule it is given
    for (link, orphans) in [("regex", 1), ("source-id", 0)] {
        let chk = json(&ok(&[
            "check",
            "--corpus",
            s(&c),
            "--pair-link",
            link,
            "--json",
        ]));
        assert_eq!(
            chk["domains"]["biology"]["orphan_positive_images"], orphans,
            "{link}: {chk}"
        );
    }
}
