//! Dense models through the command line: MiniLM retrieval, `sift embed`'s outputs and
//! the hub cache, image embeddings against transformers, GME, corpus images from folders.
use super::*;

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 weights: scripts/test installs them and runs it"]
fn dense_and_hybrid_retrieval_on_the_sample() {
    let model = minilm();
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let out = json(&index_ok(
        &sample(),
        &index,
        &["--dense", s(&model), "--vector-dtype", "f16", "--json"],
    ));
    let dense = &out["manifest"]["dense"]["minilm"];
    assert_eq!(dense["dim"], 384);
    assert_eq!(
        dense["embedded"].as_u64().unwrap() + dense["cached"].as_u64().unwrap(),
        46
    );
    // a rebuild takes every vector from the embedding cache
    let again = json(&index_ok(
        &sample(),
        &index,
        &["--dense", s(&model), "--vector-dtype", "f16", "--json"],
    ));
    assert_eq!(again["manifest"]["dense"]["minilm"]["embedded"], 0);
    assert_eq!(again["manifest"]["dense"]["minilm"]["cached"], 46);
    let mut ndcg = std::collections::BTreeMap::new();
    for r in [
        "bm25",
        "dense:minilm",
        "hybrid:bm25+dense:minilm",
        "hybrid:bm25+dense:minilm:0.4,0.6",
    ] {
        let e = json(&ok(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--retriever",
            r,
            "--json",
        ]));
        assert_eq!(e["per_domain"].as_object().unwrap().len(), 3, "{r}");
        ndcg.insert(r, e["metrics"]["ndcg@10"].as_f64().unwrap());
    }
    assert!(ndcg["dense:minilm"] > 0.5, "{ndcg:?}");
    // exact and HNSW search agree on this small corpus
    let exact = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--retriever",
        "dense:minilm",
        "--ann",
        "exact",
        "--json",
    ]));
    let hnsw = json(&ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--retriever",
        "dense:minilm",
        "--ann",
        "hnsw",
        "--json",
    ]));
    assert_eq!(exact["metrics"], hnsw["metrics"]);
    // clear errors
    assert!(
        fails(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--retriever",
            "dense:nope"
        ])
        .contains("no dense index \"nope\"")
    );
    assert!(
        fails(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--retriever",
            "hybrid:bm25"
        ])
        .contains("two or more")
    );
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 weights: scripts/test installs them and runs it"]
fn embed_writes_jsonl_and_npy_and_loads_from_the_hub_cache() {
    let model = minilm();
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    fs::write(
        &input,
        "first line\n\n{\"_id\": 42, \"title\": \"T\", \"text\": \"second\"}\n",
    )
    .unwrap();
    let jsonl = tmp.path().join("v.jsonl");
    ok(&[
        "embed",
        "--model",
        s(&model),
        "--input",
        s(&input),
        "--out",
        s(&jsonl),
        "-q",
    ]);
    let rows: Vec<Value> = fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], "1");
    assert_eq!(rows[1]["id"], "42");
    let v: Vec<f64> = rows[0]["vector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(v.len(), 384);
    assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-4);
    let npy = tmp.path().join("v.npy");
    ok(&[
        "embed",
        "--model",
        s(&model),
        "--input",
        s(&input),
        "--kind",
        "query",
        "--out",
        s(&npy),
        "-q",
    ]);
    let bytes = fs::read(&npy).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 64, 0);
    assert!(String::from_utf8_lossy(&bytes[10..10 + header_len]).contains("'shape': (2, 384)"));
    assert_eq!(bytes.len(), 10 + header_len + 2 * 384 * 4);
    // MiniLM has no query prefix: query and passage vectors agree
    let first: Vec<f32> = bytes[10 + header_len..10 + header_len + 384 * 4]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(
        first
            .iter()
            .zip(&v)
            .all(|(a, b)| (*a as f64 - b).abs() < 1e-6)
    );
    assert_eq!(
        fs::read_to_string(tmp.path().join("v.npy.ids.txt")).unwrap(),
        "1\n42\n"
    );

    // by hub id, from a populated hf-hub cache, with no network
    let hf = tmp.path().join("hf");
    let snap = hf.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/0123abcd");
    copy_dir(&model, &snap);
    fs::create_dir_all(hf.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/refs"))
        .unwrap();
    fs::write(
        hf.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/refs/main"),
        "0123abcd",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sift"))
        .args(["models", "info", "minilm", "--json"])
        .env("HF_HOME", &hf)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(info["name"], "sentence-transformers/all-MiniLM-L6-v2");
    assert!(
        info["config"]
            .as_str()
            .unwrap()
            .contains("snapshots/0123abcd")
    );
    // bad input names the line
    fs::write(&input, "ok\n{\"text\": 5}\n").unwrap();
    assert!(
        fails(&[
            "embed",
            "--model",
            s(&model),
            "--input",
            s(&input),
            "--out",
            s(&jsonl)
        ])
        .contains("in.txt:2")
    );
}

/// `sift embed --image` runs decoding, preprocessing and the image tower end to end: its
/// vectors are the normalised transformers features of the same image files
/// (`models/fixtures/vision/*/reference.json`), and text and image vectors share a space.
#[test]
fn embed_images_matches_transformers_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = repo().join("models/fixtures/vision");
    for model in [
        "tiny-clip-quickgelu",
        "tiny-clip-gelu",
        "tiny-siglip",
        "tiny-siglip2-style",
    ] {
        let dir = fixtures.join(model);
        let reference: Value = json(&fs::read_to_string(dir.join("reference.json")).unwrap());
        // the reference images, listed in its order
        let list = tmp.path().join(format!("{model}.txt"));
        let files: Vec<String> = reference["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let f = i["file"].as_str().unwrap();
                dir.join(f).canonicalize().unwrap().display().to_string()
            })
            .collect();
        fs::write(&list, files.join("\n")).unwrap();
        let out = tmp.path().join(format!("{model}.jsonl"));
        ok(&[
            "embed",
            "--model",
            s(&dir),
            "--image",
            "--input",
            s(&list),
            "--out",
            s(&out),
            "-q",
        ]);
        let got: Vec<Value> = fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(json)
            .collect();
        let want = reference["image_embeds"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{model}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let cos = cosine(&g["vector"], w);
            assert!(cos >= 0.9999, "{model} image {i}: cosine {cos}");
        }
    }
    // a text model cannot embed images
    let err = fails(&[
        "embed",
        "--model",
        s(&fixtures.join("tiny-clip-quickgelu")),
        "--image",
        "--input",
        s(&tmp.path().join("missing")),
        "--out",
        s(&tmp.path().join("x.jsonl")),
    ]);
    assert!(err.contains("missing"), "{err}");
}

/// `sift embed --image` with GME: decoding, GME's two resizes, patches, the vision tower,
/// the prompt and the language model end to end give transformers' vectors for the image
/// files (models/fixtures/gme/expected.json, image-only candidate cases; PNG files, since
/// JPEG decoders differ slightly).
#[test]
fn embed_images_with_gme_matches_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let root = repo().join("models/fixtures/gme");
    let expected: Value = json(&fs::read_to_string(root.join("expected.json")).unwrap());
    let cases: Vec<&Value> = expected["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["kind"] == "image" && c["images"][0].as_str().is_some_and(|p| p.ends_with(".png"))
        })
        .collect();
    assert!(cases.len() >= 4);
    let list = tmp.path().join("images.txt");
    let files: Vec<String> = cases
        .iter()
        .map(|c| s(&root.join(c["images"][0].as_str().unwrap())).to_string())
        .collect();
    fs::write(&list, files.join("\n")).unwrap();
    let out = tmp.path().join("gme.jsonl");
    ok(&[
        "embed",
        "--model",
        s(&root.join("tiny-gme")),
        "--image",
        "--input",
        s(&list),
        "--out",
        s(&out),
        "-q",
    ]);
    let got: Vec<Value> = fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    assert_eq!(got.len(), cases.len());
    for (g, c) in got.iter().zip(&cases) {
        let cos = cosine(&g["vector"], &c["embedding_gme"]);
        assert!(cos >= 0.9999, "{}: cosine {cos}", c["name"]);
    }
}

/// `sift embed --kind query --query-instruction` gives GME's query vectors with that
/// instruction (transformers' vectors from models/fixtures/gme/expected.json); without it,
/// GME's default instruction.
#[test]
fn gme_query_instruction_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let root = repo().join("models/fixtures/gme");
    let expected: Value = json(&fs::read_to_string(root.join("expected.json")).unwrap());
    let case = |name: &str| -> Value {
        expected["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let model = root.join("tiny-gme");
    for (name, instruction) in [
        (
            "q_text_instruction",
            Some("Find the passage that answers the question."),
        ),
        ("q_text_short", None),
    ] {
        let c = case(name);
        let input = tmp.path().join(format!("{name}.txt"));
        fs::write(&input, c["text"].as_str().unwrap()).unwrap();
        let out = tmp.path().join(format!("{name}.jsonl"));
        let mut args = vec![
            "embed",
            "--model",
            s(&model),
            "--input",
            s(&input),
            "--kind",
            "query",
            "--out",
            s(&out),
            "-q",
        ];
        if let Some(i) = instruction {
            args.extend(["--query-instruction", i]);
        }
        ok(&args);
        let got = json(fs::read_to_string(&out).unwrap().lines().next().unwrap());
        let cos = cosine(&got["vector"], &c["embedding_gme"]);
        assert!(cos >= 0.9999, "{name}: cosine {cos}");
    }
}

/// Corpus images may come as a folder (`document_images/<domain>/...`) instead of parquet:
/// the same ids, the same vectors.
#[test]
fn corpus_images_from_a_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    copy_dir(&sample(), &corpus);
    // write physics' images out as files and drop its parquet
    let sample_corpus = sift_core::Corpus::open(sample()).unwrap();
    for r in sample_corpus.images("physics").unwrap() {
        let r = r.unwrap();
        let p = corpus.join("document_images").join(&r.path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, &r.bytes).unwrap();
    }
    fs::remove_file(corpus.join("document_images/physics.parquet")).unwrap();
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let vectors = |corpus: &Path, name: &str| -> Value {
        let index = tmp.path().join(name);
        let out = json(&index_ok(
            corpus,
            &index,
            &["--domains", "physics", "--dense", s(&clip), "--json"],
        ));
        out["manifest"]["dense"]["tiny-clip-quickgelu"]["images"].clone()
    };
    let from_parquet = vectors(&sample(), "a");
    let from_folder = vectors(&corpus, "b");
    assert_eq!(from_folder["images"], from_parquet["images"]);
    assert_eq!(from_folder["undecodable"], from_parquet["undecodable"]);
    let e = json(&ok(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&tmp.path().join("b")),
        "--task",
        "3",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--json",
    ]));
    assert_eq!(e["per_domain"].as_object().unwrap().len(), 1);
}
