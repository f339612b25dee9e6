//! Knowledge bases given as one .jsonl or .parquet file.
use super::*;

/// A tiny PNG of one colour.
fn png_of(rgb: [u8; 3]) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::from_pixel(6, 5, image::Rgb(rgb))
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

/// The ids of a `sift search --json` answer's hits.
fn hit_ids(out: &Value) -> Vec<String> {
    out["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect()
}

/// "Bring your own knowledge base": a JSONL file of {id | qid, text, image_path} rows with
/// images beside it indexes (BM25, a dense text model, CLIP's text and image towers) and
/// searches as one domain named after the file; a row links its passage and its image in
/// Task 4 pairs; a missing image is skipped and counted; eval refuses a knowledge base; a
/// Parquet file with the same columns reads the same.
#[test]
fn knowledge_base_jsonl_and_parquet_index_and_search() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kb");
    fs::create_dir_all(dir.join("images")).unwrap();
    fs::write(dir.join("images/red.png"), png_of([220, 30, 20])).unwrap();
    fs::write(dir.join("images/green.png"), png_of([20, 200, 40])).unwrap();
    fs::write(dir.join("images/blue.png"), png_of([20, 40, 230])).unwrap();
    let file = dir.join("kb.jsonl");
    fs::write(
        &file,
        concat!(
            r#"{"id": "volcano", "text": "lava flows from an erupting volcano", "image_path": "images/red.png", "source": "x"}"#,
            "\n",
            r#"{"qid": 7, "text": "green leaves of a fern in the forest", "image_path": "./images/green.png"}"#,
            "\n",
            r#"{"id": "ocean", "text": "blue waves on the ocean shore", "image_path": null}"#,
            "\n",
            r#"{"id": "sky-photo", "image_path": "images/blue.png"}"#,
            "\n",
            r#"{"id": "lava-again", "text": "a second caption of the lava picture", "image_path": "images/red.png"}"#,
            "\n",
            r#"{"id": "lost", "text": "a caption whose picture is missing", "image_path": "images/gone.png"}"#,
            "\n",
        ),
    )
    .unwrap();
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let contriever = repo().join("models/fixtures/contriever/tiny-contriever");
    let index = tmp.path().join("index");
    let out = sift(&[
        "index",
        "--corpus",
        s(&file),
        "--index",
        s(&index),
        "--dense",
        s(&clip),
        "--dense",
        s(&contriever),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 x missing_image_file"), "{stderr}");
    let built = json(&String::from_utf8(out.stdout).unwrap());
    let m = &built["manifest"];
    assert_eq!(m["layout"], "kb");
    assert_eq!(m["domains"]["kb"]["passages"], 5, "{m}");
    assert_eq!(
        m["dense"]["tiny-clip-quickgelu"]["images"]["images"]["kb"], 3,
        "{m}"
    );

    let search = |args: &[&str]| -> Value {
        let mut all = vec!["search", "--index", s(&index), "--json"];
        all.extend_from_slice(args);
        json(&ok(&all))
    };
    // BM25
    let out = search(&["--query", "erupting volcano lava"]);
    assert_eq!(out["domain"], "kb");
    assert_eq!(hit_ids(&out)[0], "volcano", "{out}");
    let out = search(&["--query", "fern forest"]);
    assert_eq!(hit_ids(&out), ["7"], "an integer qid is its decimal string");
    // a dense text model and CLIP's text tower rank every passage
    for model in ["dense:tiny-contriever", "dense:tiny-clip-quickgelu"] {
        let out = search(&["--query", "lava", "--retriever", model, "--top-k", "50"]);
        let mut ids = hit_ids(&out);
        ids.sort();
        assert_eq!(
            ids,
            ["7", "lava-again", "lost", "ocean", "volcano"],
            "{model}"
        );
    }
    // CLIP's image tower: the three images, each once
    let out = search(&[
        "--query",
        "red",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "images",
    ]);
    let mut ids = hit_ids(&out);
    ids.sort();
    assert_eq!(
        ids,
        ["images/blue.png", "images/green.png", "images/red.png"]
    );
    // pairs: a row's passage with its image, which needs the rows
    let err = fails(&[
        "search",
        "--index",
        s(&index),
        "--query",
        "lava",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "pairs",
    ]);
    assert!(err.contains("give --corpus"), "{err}");
    let out = search(&[
        "--query",
        "lava",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "pairs",
        "--corpus",
        s(&file),
        "--top-k",
        "50",
    ]);
    let mut ids = hit_ids(&out);
    ids.sort();
    assert_eq!(
        ids,
        [
            "7|||__NO_IMAGE__",
            "7|||images/green.png",
            "lava-again|||__NO_IMAGE__",
            "lava-again|||images/red.png",
            "lost|||__NO_IMAGE__",
            "ocean|||__NO_IMAGE__",
            "volcano|||__NO_IMAGE__",
            "volcano|||images/red.png",
        ],
        "{out}"
    );

    // check counts what the rows hold; eval refuses a knowledge base
    let out = json(&ok(&["check", "--corpus", s(&file), "--json"]));
    assert_eq!(out["layout"], "kb");
    assert_eq!(out["domains"]["kb"]["passages"], 5);
    assert_eq!(out["domains"]["kb"]["images"], 3);
    assert_eq!(out["warnings"]["missing_image_file"], 1, "{out}");
    let err = fails(&[
        "eval",
        "--corpus",
        s(&file),
        "--index",
        s(&index),
        "--task",
        "1",
        "--retriever",
        "bm25",
    ]);
    assert!(err.contains("a knowledge base has no queries"), "{err}");
    // the directory holding kb.jsonl is the same corpus
    let out = json(&ok(&["check", "--corpus", s(&dir), "--json"]));
    assert_eq!(out["domains"]["kb"]["passages"], 5);

    // Parquet, the same columns (ids from "id", else the integer "qid")
    let parquet = dir.join("shop.parquet");
    let nullable = |v: &[Option<&str>]| -> arrow_array::ArrayRef {
        Arc::new(arrow_array::StringArray::from(v.to_vec()))
    };
    write_parquet(
        &parquet,
        vec![
            (
                "qid",
                Arc::new(arrow_array::Int64Array::from(vec![1, 7, 3, 4])),
            ),
            (
                "id",
                nullable(&[Some("volcano"), None, Some("ocean"), Some("sky-photo")]),
            ),
            (
                "text",
                nullable(&[
                    Some("lava flows from an erupting volcano"),
                    Some("green leaves of a fern in the forest"),
                    Some("blue waves on the ocean shore"),
                    None,
                ]),
            ),
            (
                "image_path",
                nullable(&[
                    Some("images/red.png"),
                    Some("images/green.png"),
                    None,
                    Some("images/blue.png"),
                ]),
            ),
            ("extra", strings(&["a", "b", "c", "d"])),
        ],
    );
    let pindex = tmp.path().join("pindex");
    let built = json(&index_ok(
        &parquet,
        &pindex,
        &["--dense", s(&clip), "--json"],
    ));
    let m = &built["manifest"];
    assert_eq!(m["layout"], "kb");
    assert_eq!(m["domains"]["shop"]["passages"], 3, "{m}");
    assert_eq!(
        m["dense"]["tiny-clip-quickgelu"]["images"]["images"]["shop"], 3,
        "{m}"
    );
    let out = json(&ok(&[
        "search",
        "--index",
        s(&pindex),
        "--query",
        "fern forest",
        "--json",
    ]));
    assert_eq!(out["domain"], "shop");
    assert_eq!(hit_ids(&out), ["7"]);
    let out = json(&ok(&[
        "search",
        "--index",
        s(&pindex),
        "--query",
        "lava",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--candidates",
        "pairs",
        "--corpus",
        s(&parquet),
        "--json",
    ]));
    let ids = hit_ids(&out);
    assert!(
        ids.contains(&"volcano|||images/red.png".to_string()),
        "{out}"
    );
    assert!(ids.contains(&"7|||images/green.png".to_string()), "{out}");
    assert_eq!(ids.len(), 5, "{out}");
}
