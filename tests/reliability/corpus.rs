//! Hostile corpora: domains without indexable images, incomplete parquet shards, bad ids,
//! image folders with links, FIFOs and loops, truncated JPEGs, parquet encodings and cell
//! types, image pixel bounds.
use super::*;

/// A domain without indexable corpus images (no `document_images` file for it, an empty
/// one, or only undecodable images) builds and evaluates: Task 3 has no candidates there
/// (its queries score 0), Task 4 ranks passage-only pairs, and the report says so.
#[test]
fn a_domain_without_indexable_images_evaluates() {
    use arrow_array::{ArrayRef, BinaryArray};
    let tmp = tempfile::tempdir().unwrap();
    let clip = tiny_clip();
    type Columns = Vec<(&'static str, ArrayRef)>;
    let images = |paths: &[&str], bytes: Vec<&[u8]>| -> Columns {
        vec![
            ("path", strings(paths)),
            (
                "bytes",
                std::sync::Arc::new(BinaryArray::from(bytes)) as ArrayRef,
            ),
        ]
    };
    let cases: Vec<(&str, Option<Columns>)> = vec![
        ("no file", None),
        ("no rows", Some(images(&[], vec![]))),
        (
            "nothing decodes",
            Some(images(
                &[
                    "gis/gis_1a2b3c4d_0001/image_1.png",
                    "gis/gis_1a2b3c4d_0002/image_1.png",
                ],
                vec![b"not an image", b"\x89PNG\r\n\x1a\ntruncated"],
            )),
        ),
    ];
    for (name, table) in cases {
        let corpus = tmp.path().join(name.replace(' ', "-"));
        copy_dir(&sample(), &corpus);
        let file = corpus.join("document_images/gis.parquet");
        fs::remove_file(&file).unwrap();
        if let Some(cols) = table {
            write_parquet(&file, cols);
        }
        let index = tmp.path().join(format!("{}-idx", name.replace(' ', "-")));
        index_ok(&corpus, &index, &["--dense", s(&clip), "-q"]);
        let out = json(&ok(&[
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--task",
            "all",
            "--retriever",
            "dense:tiny-clip-quickgelu",
            "--json",
        ]));
        let reports = out["reports"].as_array().unwrap();
        let task3 = reports.iter().find(|r| r["task"] == "3").unwrap();
        assert_eq!(task3["per_domain"]["gis"]["ndcg@10"], 0.0, "{name}");
        assert!(
            task3["per_domain"]["biology"]["ndcg@10"].as_f64().unwrap() > 0.0,
            "{name}"
        );
        let task4 = reports
            .iter()
            .find(|r| r["task"].as_str().unwrap().starts_with('4'))
            .unwrap();
        assert!(task4["per_domain"]["gis"]["ndcg@10"].is_number(), "{name}");
        let notes = out["notes"].to_string();
        assert!(
            notes.contains("domain gis") && notes.contains("no corpus images"),
            "{name}: {notes}"
        );
    }
}

/// An incomplete set of parquet shards (a missing `-0000N-`, totals that disagree) is an
/// error naming the config and domain, not half a domain indexed; `--allow-partial` reads it
/// anyway, with a warning.
#[test]
fn incomplete_parquet_shards_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    copy_dir(&sample(), &corpus);
    let docs = corpus.join("documents");
    fs::rename(
        docs.join("gis.parquet"),
        docs.join("gis-00000-of-00002.parquet"),
    )
    .unwrap();
    let index = tmp.path().join("idx");
    let err = index_fails(&corpus, &index, &["-q"]);
    assert!(
        err.contains("documents") && err.contains("\"gis\"") && err.contains("missing 00001"),
        "{err}"
    );
    assert!(!index.join("manifest.json").exists());
    let err = fails(&["check", "--corpus", s(&corpus)]);
    assert!(err.contains("incomplete shards"), "{err}");
    let out = sift(&[
        "index",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "-q",
        "--allow-partial",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 2 shards present"));
    // shards that disagree on their total
    fs::copy(
        docs.join("biology.parquet"),
        docs.join("gis-00001-of-00003.parquet"),
    )
    .unwrap();
    let err = index_fails(&corpus, &index, &["-q"]);
    assert!(err.contains("disagree"), "{err}");
    // examples are checked too
    fs::remove_file(docs.join("gis-00001-of-00003.parquet")).unwrap();
    fs::rename(
        docs.join("gis-00000-of-00002.parquet"),
        docs.join("gis.parquet"),
    )
    .unwrap();
    let ex = corpus.join("examples");
    fs::rename(
        ex.join("physics.parquet"),
        ex.join("physics-00001-of-00002.parquet"),
    )
    .unwrap();
    index_ok(&corpus, &index, &["-q", "--replace"]);
    let err = fails(&["eval", "--corpus", s(&corpus), "--index", s(&index)]);
    assert!(
        err.contains("examples") && err.contains("missing 00000"),
        "{err}"
    );
}

/// Ids and image paths that a TREC run cannot hold (newline, tab, space, NUL) are refused
/// when the corpus is read, naming the file and line or row, before anything is indexed or
/// retrieved.
#[test]
fn ids_with_whitespace_or_control_characters_are_refused_at_read_time() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    for (i, bad) in ["a\nb", "a\tb", "a b", "a\0b"].iter().enumerate() {
        // passages (parquet)
        let root = tmp.path().join(format!("mm{i}"));
        write_parquet(
            &root.join("documents/chem.parquet"),
            vec![
                ("id", strings(&["chem/ok_0.txt", bad])),
                ("content", strings(&["x y", "z"])),
            ],
        );
        let err = index_fails(&root, &index, &["-q"]);
        assert!(
            err.contains("documents/chem.parquet: row 1: passage id"),
            "{bad:?}: {err}"
        );
        // BEIR passages and qrels
        let beir_dir = tmp.path().join(format!("b{i}"));
        let escaped = serde_json::to_string(bad).unwrap();
        let root = beir(
            &beir_dir,
            &format!(
                "{{\"_id\": \"d1\", \"text\": \"x\"}}\n{{\"_id\": {escaped}, \"text\": \"y\"}}\n"
            ),
            QUERIES,
            QRELS,
        );
        let err = index_fails(&root, &index, &["-q"]);
        assert!(
            err.contains("corpus.jsonl: line 2: passage _id"),
            "{bad:?}: {err}"
        );
    }
    // gold ids, query image paths and corpus image paths of the MM-BRIGHT layout
    let corpus = tmp.path().join("sample");
    copy_dir(&sample(), &corpus);
    index_ok(&corpus, &index, &["-q", "--replace"]);
    let ex = corpus.join("examples/gis.parquet");
    let original = fs::read(&ex).unwrap();
    let mut builder =
        arrow_array::builder::ListBuilder::new(arrow_array::builder::StringBuilder::new());
    builder.values().append_value("gis/ok_1.txt");
    builder.values().append_value("gis/bad id_2.txt");
    builder.append(true);
    write_parquet(
        &ex,
        vec![
            ("id", strings(&["gis_q"])),
            ("query", strings(&["a query"])),
            ("gold_ids", std::sync::Arc::new(builder.finish())),
        ],
    );
    let err = fails(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--domains",
        "gis",
    ]);
    assert!(
        err.contains("examples/gis.parquet: row 0: gold_ids element"),
        "{err}"
    );
    fs::write(&ex, original).unwrap();
}

/// Image folders with symbolic links: links inside the corpus are followed, each directory
/// once (a loop ends), links out of the corpus and dangling ones are not, FIFOs and devices
/// are never opened; every skipped entry is counted.
#[test]
fn image_folders_with_links_fifos_and_loops() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    copy_dir(&sample(), &corpus);
    let sample_corpus = sift_core::Corpus::open(sample()).unwrap();
    let mut plain = 0;
    let mut one_png = Vec::new();
    for r in sample_corpus.images("physics").unwrap() {
        let r = r.unwrap();
        let p = corpus.join("document_images").join(&r.path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, &r.bytes).unwrap();
        if one_png.is_empty()
            && r.path.ends_with(".png")
            && sift_embed::image::decode_rgb(&r.bytes).is_ok()
        {
            one_png = r.bytes.clone();
        }
        plain += 1;
    }
    fs::remove_file(corpus.join("document_images/physics.parquet")).unwrap();
    let dir = corpus.join("document_images/physics");
    // inside the corpus: a linked directory with one image (followed)
    let extra = corpus.join("document_images/extra/physics_0badf00d_0001");
    fs::create_dir_all(&extra).unwrap();
    fs::write(extra.join("image_1.png"), &one_png).unwrap();
    symlink(
        "../extra/physics_0badf00d_0001",
        dir.join("physics_0badf00d_0001"),
    )
    .unwrap();
    // skipped: a loop, a link out of the corpus, a dangling link, /dev/zero, a FIFO
    symlink(".", dir.join("loop")).unwrap();
    let outside = tmp.path().join("outside.png");
    fs::write(&outside, &one_png).unwrap();
    symlink(&outside, dir.join("outside.png")).unwrap();
    symlink("nowhere.png", dir.join("dangling.png")).unwrap();
    symlink("/dev/zero", dir.join("zero.png")).unwrap();
    let fifo = dir.join("fifo.png");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());

    let out = sift_within(
        &[
            "check",
            "--corpus",
            s(&corpus),
            "--domains",
            "physics",
            "--json",
        ],
        60,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checked = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(checked["domains"]["physics"]["images"], plain + 1);
    assert_eq!(checked["warnings"]["skipped_image_file"], 5, "{checked}");
    let index = tmp.path().join("idx");
    let out = sift_within(
        &[
            "index",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--domains",
            "physics",
            "--dense",
            s(&tiny_clip()),
            "--json",
        ],
        120,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = json(&String::from_utf8_lossy(&out.stdout));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    assert_eq!(images["warnings"]["skipped_image_file"], 5, "{images}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("skipped_image_file"),
        "reader warnings reach the terminal: {stderr}"
    );
}

/// A JPEG cut short is undecodable, as Pillow says ("image file is truncated"), instead of
/// being decoded with grey fill.
#[test]
fn truncated_jpegs_are_undecodable() {
    use arrow_array::{ArrayRef, BinaryArray};
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    copy_dir(&sample(), &corpus);
    let jpeg = sift_core::Corpus::open(sample())
        .unwrap()
        .images("biology")
        .unwrap()
        .map(|r| r.unwrap())
        .find(|r| r.bytes.starts_with(&[0xFF, 0xD8]))
        .expect("the sample has a JPEG")
        .bytes;
    let paths = [
        "gis/gis_1a2b3c4d_0001/image_1.jpg",
        "gis/gis_1a2b3c4d_0002/image_1.jpg",
        "gis/gis_1a2b3c4d_0003/image_1.jpg",
    ];
    let bytes: Vec<&[u8]> = vec![&jpeg, &jpeg[..jpeg.len() / 2], &jpeg[..jpeg.len() - 2]];
    write_parquet(
        &corpus.join("document_images/gis.parquet"),
        vec![
            ("path", strings(&paths)),
            (
                "bytes",
                std::sync::Arc::new(BinaryArray::from(bytes)) as ArrayRef,
            ),
        ],
    );
    let checked = json(&ok(&[
        "check",
        "--corpus",
        s(&corpus),
        "--domains",
        "gis",
        "--json",
    ]));
    assert_eq!(
        checked["domains"]["gis"]["undecodable_images"], 2,
        "{checked}"
    );
    let index = tmp.path().join("idx");
    let built = json(&index_ok(
        &corpus,
        &index,
        &["--domains", "gis", "--dense", s(&tiny_clip()), "--json"],
    ));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    assert_eq!(images["images"]["gis"], 1);
    assert!(
        images["undecodable_examples"]
            .to_string()
            .contains("truncated"),
        "{images}"
    );
}

/// Dictionary-encoded string columns (what pandas and polars write for categoricals) are
/// read as strings.
#[test]
fn dictionary_encoded_columns_are_read() {
    use arrow_array::{ArrayRef, DictionaryArray, types::Int32Type};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mm");
    let dict = |v: Vec<&str>| -> ArrayRef {
        std::sync::Arc::new(v.into_iter().collect::<DictionaryArray<Int32Type>>())
    };
    write_parquet(
        &root.join("documents/chem.parquet"),
        vec![
            (
                "id",
                dict(vec!["chem/ab_0.txt", "chem/ab_1.txt", "chem/cd_0.txt"]),
            ),
            (
                "content",
                dict(vec!["acid base titration", "acid rain", "noble gas"]),
            ),
        ],
    );
    write_parquet(
        &root.join("examples/chem.parquet"),
        vec![
            ("id", dict(vec!["q1"])),
            ("query", dict(vec!["noble gas"])),
            ("gold_ids", dict(vec!["chem/cd_0.txt"])),
        ],
    );
    let index = tmp.path().join("idx");
    let out = json(&index_ok(&root, &index, &["--json"]));
    assert_eq!(out["passages"], 3);
    let ev = json(&ok(&[
        "eval",
        "--corpus",
        s(&root),
        "--index",
        s(&index),
        "--json",
    ]));
    assert_eq!(ev["metrics"]["ndcg@10"], 1.0, "{ev}");
}

/// Cells of the wrong type are errors naming the file, the row and the column; lists of
/// structs are read through their `image_path` field, their null elements counted.
#[test]
fn parquet_cells_of_the_wrong_type_name_their_row() {
    use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
    use arrow_array::{ArrayRef, Int64Array};
    use arrow_schema::{DataType, Field};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mm");
    let docs = |ids: ArrayRef| {
        write_parquet(
            &root.join("documents/chem.parquet"),
            vec![
                ("id", ids),
                ("content", strings(&["acid base", "acid rain", "noble gas"])),
            ],
        )
    };
    docs(std::sync::Arc::new(Int64Array::from(vec![1, 2, 3])));
    write_parquet(
        &root.join("examples/chem.parquet"),
        vec![
            ("id", strings(&["q1"])),
            ("query", strings(&["noble gas"])),
            ("gold_ids", strings(&["chem/cd_0.txt"])),
        ],
    );
    let err = fails(&["check", "--corpus", s(&root)]);
    assert!(
        err.contains("chem.parquet")
            && err.contains("row 0")
            && err.contains("\"id\"")
            && err.contains("expected a string, found an integer"),
        "{err}"
    );
    docs(strings(&[
        "chem/ab_0.txt",
        "chem/ab_1.txt",
        "chem/cd_0.txt",
    ]));
    // gold ids as a list of {image_path} structs, one element null
    let fields = vec![Field::new("image_path", DataType::Utf8, true)];
    let mut gold = ListBuilder::new(StructBuilder::from_fields(fields, 2));
    let strukt = gold.values();
    strukt
        .field_builder::<StringBuilder>(0)
        .unwrap()
        .append_value("chem/cd_0.txt");
    strukt.append(true);
    strukt
        .field_builder::<StringBuilder>(0)
        .unwrap()
        .append_null();
    strukt.append(false);
    gold.append(true);
    write_parquet(
        &root.join("examples/chem.parquet"),
        vec![
            ("id", strings(&["q1"])),
            ("query", strings(&["noble gas"])),
            ("gold_ids", std::sync::Arc::new(gold.finish())),
        ],
    );
    let index = tmp.path().join("idx");
    let out = sift(&["index", "--corpus", s(&root), "--index", s(&index), "-q"]);
    assert!(out.status.success(), "{out:?}");
    let ev = sift(&["eval", "--corpus", s(&root), "--index", s(&index), "--json"]);
    assert!(ev.status.success(), "{ev:?}");
    let stderr = String::from_utf8_lossy(&ev.stderr);
    assert!(
        stderr.contains("1 null element(s) in \"gold_ids\""),
        "{stderr}"
    );
    let ev = json(&String::from_utf8_lossy(&ev.stdout));
    assert_eq!(ev["metrics"]["ndcg@10"], 1.0, "{ev}");
}

/// Image files named on the command line or in a list are read within limits: a device
/// (`/dev/zero`, which never ends), a FIFO or a file over `--max-image-bytes` / an image over
/// `--max-image-pixels` is refused before it is read or decoded (search: an error; embed: a
/// counted warning); a FIFO as `sift embed --input` is an error instead of a wait.
#[test]
fn cli_image_reads_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    index_ok(&sample(), &index, &["--dense", s(&tiny_clip()), "-q"]);
    let fifo = tmp.path().join("fifo.png");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a NUL-terminated path
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let image = repo().join("models/fixtures/vision/images/gradient_rgb_64x64.png");
    let search = |img: &str, extra: &[&str]| {
        let mut args = vec![
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--query",
            "map",
            "--retriever",
            "dense:tiny-clip-quickgelu",
            "--image",
            img,
        ];
        args.extend_from_slice(extra);
        sift_within(&args, 60)
    };
    for (img, extra, want) in [
        ("/dev/zero", &[][..], "a character device"),
        (s(&fifo), &[][..], "a FIFO"),
        (
            s(&image),
            &["--max-image-bytes", "100"][..],
            "over the limit of 100 bytes",
        ),
        (
            s(&image),
            &["--max-image-pixels", "4000"][..],
            "64x64 image (4096 pixels)",
        ),
    ] {
        let out = search(img, extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{img} {extra:?}: {stderr}");
        assert!(stderr.contains(want), "{img}: {stderr}");
    }
    assert!(search(s(&image), &[]).status.success());

    // embed: the list's refused entries are skipped and counted, the rest embedded
    let list = tmp.path().join("list.txt");
    fs::write(&list, format!("{}\n/dev/zero\n{}\n", s(&image), s(&fifo))).unwrap();
    let out_file = tmp.path().join("v.jsonl");
    let out = sift_within(
        &[
            "embed",
            "--model",
            s(&tiny_clip()),
            "--image",
            "--input",
            s(&list),
            "--out",
            s(&out_file),
            "-q",
        ],
        60,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("2 undecodable or refused image(s) skipped"),
        "{stderr}"
    );
    assert_eq!(fs::read_to_string(&out_file).unwrap().lines().count(), 1);
    // a FIFO as the input itself
    let clip = tiny_clip();
    for extra in [&["--image"][..], &[][..]] {
        let mut args = vec![
            "embed",
            "--model",
            s(&clip),
            "--input",
            s(&fifo),
            "--out",
            s(&out_file),
        ];
        args.extend_from_slice(extra);
        let out = sift_within(&args, 60);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("a FIFO, not a regular file"), "{stderr}");
    }
}

/// Corpus images are bounded in pixels at index time, as the service bounds request images:
/// two 23,000 x 23,000 1-bit PNGs of 125 KB took 3.7-4.0 GB to index. An image over
/// `--max-image-pixels` (header width x height, nothing decoded) is skipped and counted,
/// named with its file and row.
#[test]
fn index_bounds_corpus_image_pixels() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    let built = json(&index_ok(
        &sample(),
        &index,
        &[
            "--domains",
            "gis",
            "--dense",
            s(&tiny_clip()),
            "--max-image-pixels",
            "100",
            "--json",
        ],
    ));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    assert_eq!(images["images"]["gis"].as_u64().unwrap_or(0), 0, "{images}");
    let examples = images["undecodable_examples"].to_string();
    assert!(
        examples.contains("gis") && examples.contains("over the limit of 100 pixels"),
        "{images}"
    );
    // the default limit (Pillow's) indexes them
    let index = tmp.path().join("idx2");
    let built = json(&index_ok(
        &sample(),
        &index,
        &["--domains", "gis", "--dense", s(&tiny_clip()), "--json"],
    ));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    assert!(images["images"]["gis"].as_u64().unwrap() > 0, "{images}");
}
