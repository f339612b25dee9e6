//! Embeddings: the cache follows the weights and survives damage, non-finite vectors, GME's
//! length limits, nothing left unscored, duplicate ids.
use super::*;

/// Overwrites every value of tensor `name` (f32) in `dir/model.safetensors` with `value`.
fn set_tensor(dir: &std::path::Path, name: &str, value: f32) {
    let path = dir.join("model.safetensors");
    let mut bytes = fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let t = &header[name];
    assert_eq!(t["dtype"], "F32", "{name}");
    let (a, b) = (
        t["data_offsets"][0].as_u64().unwrap() as usize,
        t["data_offsets"][1].as_u64().unwrap() as usize,
    );
    for c in bytes[8 + n + a..8 + n + b].chunks_exact_mut(4) {
        c.copy_from_slice(&value.to_le_bytes());
    }
    fs::write(&path, bytes).unwrap();
}

/// The embedding cache is keyed by the model's files too: new weights in the same place, or
/// another checkpoint in a directory of the same name, are embedded afresh; and searching an
/// index with a model other than the one it was built with is refused.
#[test]
fn the_embedding_cache_follows_the_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let m1 = tmp.path().join("m1/ckpt");
    let m2 = tmp.path().join("m2/ckpt");
    copy_dir(&tiny_clip(), &m1);
    copy_dir(&tiny_clip(), &m2);
    set_tensor(&m2, "text_model.final_layer_norm.bias", 0.25);
    set_tensor(&m2, "vision_model.post_layernorm.bias", 0.25);
    let index = tmp.path().join("idx");
    let build = |model: &std::path::Path| {
        json(&index_ok(
            &sample(),
            &index,
            &["--dense", s(model), "--json"],
        ))["manifest"]["dense"]["ckpt"]
            .clone()
    };
    let first = build(&m1);
    assert_eq!(first["embedded"], 46);
    let again = build(&m1);
    assert_eq!(
        (again["embedded"].clone(), again["cached"].clone()),
        (0.into(), 46.into())
    );
    assert_eq!(again["images"]["cached"], first["images"]["embedded"]);
    // the same folder name, other weights: nothing comes from the cache
    let other = build(&m2);
    assert_eq!(
        (other["embedded"].clone(), other["cached"].clone()),
        (46.into(), 0.into())
    );
    assert_eq!(other["images"]["cached"], 0);
    assert_ne!(other["model_hash"], first["model_hash"]);
    // weights replaced in place
    set_tensor(&m2, "text_model.final_layer_norm.bias", -0.5);
    let replaced = build(&m2);
    assert_eq!(replaced["embedded"], 46);
    // a tokenizer or preprocessing change counts too
    let pre = m2.join("preprocessor_config.json");
    let text = fs::read_to_string(&pre).unwrap();
    fs::write(&pre, text.replace("0.26862954", "0.3")).unwrap();
    let reprocessed = build(&m2);
    assert!(reprocessed["images"]["embedded"].as_u64().unwrap() > 0);
    // searching with another model of the same dimension is refused
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--retriever",
        "dense:ckpt",
        "--model",
        s(&m1),
    ]);
    assert!(
        err.contains("is not the model dense:ckpt was built with"),
        "{err}"
    );
}

/// Non-finite vectors are never indexed, written or ranked: NaN weights or `image_std` 0 stop
/// `sift index` / `sift embed` with an error naming the model (and the passage or image); a
/// corrupt vectors file is a corrupt index.
#[test]
fn non_finite_vectors_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let nan = tmp.path().join("nan-model");
    copy_dir(&tiny_clip(), &nan);
    set_tensor(&nan, "text_model.final_layer_norm.weight", f32::NAN);
    let index = tmp.path().join("idx");
    let err = index_fails(&sample(), &index, &["--dense", s(&nan), "-q"]);
    assert!(
        err.contains("nan-model") && err.contains("not finite") || err.contains("non-finite"),
        "{err}"
    );
    assert!(!index.join("manifest.json").exists());
    let texts = tmp.path().join("texts.txt");
    fs::write(&texts, "one text\nanother\n").unwrap();
    let out = tmp.path().join("v.jsonl");
    let err = fails(&[
        "embed",
        "--model",
        s(&nan),
        "--input",
        s(&texts),
        "--out",
        s(&out),
    ]);
    assert!(err.contains("non-finite"), "{err}");

    let zero_std = tmp.path().join("zero-std");
    copy_dir(&tiny_clip(), &zero_std);
    let pre = zero_std.join("preprocessor_config.json");
    let text = fs::read_to_string(&pre).unwrap();
    fs::write(&pre, text.replace("0.26862954", "0.0")).unwrap();
    let err = index_fails(&sample(), &index, &["--dense", s(&zero_std), "-q"]);
    assert!(
        err.contains("image") && (err.contains("not finite") || err.contains("non-finite")),
        "{err}"
    );

    // a NaN written into stored vectors
    index_ok(&sample(), &index, &["--dense", s(&tiny_clip()), "-q"]);
    let generation = manifest(&index)["generation"].as_str().unwrap().to_string();
    let vectors = index
        .join(generation)
        .join("dense/tiny-clip-quickgelu/gis/vectors.f32");
    let mut bytes = fs::read(&vectors).unwrap();
    bytes[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
    fs::write(&vectors, bytes).unwrap();
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--task",
        "all",
        "--retriever",
        "dense:tiny-clip-quickgelu",
    ]);
    assert!(
        err.contains("vectors.f32") && err.contains("corrupt"),
        "{err}"
    );
}

fn tiny_gme() -> std::path::PathBuf {
    repo().join("models/fixtures/gme/tiny-gme")
}

/// GME: a `max_length` that leaves no room for text is refused when the model loads (it
/// used to panic in the rotary embedding), and a corpus image needing more tokens than its
/// prompt has room for is skipped and counted instead of aborting the build.
#[test]
fn gme_length_limits_are_errors_or_skips() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("gme");
    copy_dir(&tiny_gme(), &model);
    set_config(&model, "max_length", 0.into());
    let texts = tmp.path().join("t.txt");
    fs::write(&texts, "a text\n").unwrap();
    let out = tmp.path().join("v.jsonl");
    let err = fails(&[
        "embed",
        "--model",
        s(&model),
        "--input",
        s(&texts),
        "--out",
        s(&out),
    ]);
    assert!(
        err.contains("config.json") && err.contains("max_length 0"),
        "{err}"
    );

    // room for the template and a few image tokens only: big images are skipped
    set_config(&model, "max_length", 40.into());
    set_config(&model, "min_image_tokens", 32.into());
    let index = tmp.path().join("idx");
    let built = json(&index_ok(
        &sample(),
        &index,
        &["--domains", "gis", "--dense", s(&model), "--json"],
    ));
    let images = &built["manifest"]["dense"]["gme"]["images"];
    let skipped = images["undecodable"]["gis"].as_u64().unwrap_or(0);
    assert!(skipped > 0, "{images}");
    let examples = images["undecodable_examples"].to_string();
    assert!(examples.contains("max_length"), "{examples}");
}

/// Inputs that used to be accepted while scoring nothing: each is now read correctly, or an
/// error, or a counted warning.
#[test]
fn nothing_is_silently_left_unscored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let run = dir.join("run.txt");
    let qrels = dir.join("qrels.txt");
    let score = |run: &std::path::Path, qrels: &std::path::Path| {
        sift(&["eval", "--run", s(run), "--qrels", s(qrels), "--json"])
    };
    fs::write(&run, "q1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 1.0 x\n").unwrap();
    fs::write(&qrels, "q1 0 d2 1\n").unwrap();
    let plain = json(&String::from_utf8_lossy(&score(&run, &qrels).stdout));
    assert_eq!(plain["metrics"]["mrr"], 0.5);
    // a UTF-8 byte-order mark is not part of the first line
    let bom_run = dir.join("bom-run.txt");
    fs::write(
        &bom_run,
        b"\xef\xbb\xbfq1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 1.0 x\n",
    )
    .unwrap();
    let bom_qrels = dir.join("bom-qrels.txt");
    fs::write(&bom_qrels, b"\xef\xbb\xbfq1 0 d2 1\n").unwrap();
    let out = score(&bom_run, &bom_qrels);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        json(&String::from_utf8_lossy(&out.stdout))["metrics"],
        plain["metrics"]
    );
    // an empty run, empty qrels, TREC qrels with three fields, a non-numeric first grade, and
    // a run none of whose queries is judged
    let cases: [(&str, &str, &str); 5] = [
        ("", "q1 0 d2 1\n", "no run entries"),
        ("q1 Q0 d1 1 2.0 x\n", "", "no judgements"),
        ("q1 Q0 d1 1 2.0 x\n", "q1 0 d2\n", "expected 4 fields"),
        (
            "q1 Q0 d1 1 2.0 x\n",
            "q1 0 d2 yes\nq1 0 d1 1\n",
            "bad grade",
        ),
        ("q9 Q0 d1 1 2.0 x\n", "q1 0 d2 1\n", "nothing to score"),
    ];
    for (r, q, want) in cases {
        fs::write(&run, r).unwrap();
        fs::write(&qrels, q).unwrap();
        let out = score(&run, &qrels);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{want}: {err}");
        assert!(err.contains(want), "{want}: {err}");
    }
    // a BEIR header row is still a header
    fs::write(&run, "q1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 1.0 x\n").unwrap();
    fs::write(&qrels, "query-id\tcorpus-id\tscore\nq1\td2\t1\n").unwrap();
    assert!(score(&run, &qrels).status.success());

    // a BOM at the start of corpus.jsonl
    let corpus = beir(dir, &format!("\u{feff}{CORPUS}"), QUERIES, QRELS);
    let index = dir.join("idx");
    let out = json(&index_ok(&corpus, &index, &["--json"]));
    assert_eq!(out["passages"], 3);

    // null gold_ids elements are counted; all-null gold_ids are a warning in check
    let mm = dir.join("mm");
    copy_dir(&sample(), &mm);
    let mut gold =
        arrow_array::builder::ListBuilder::new(arrow_array::builder::StringBuilder::new());
    gold.values().append_null();
    gold.append(true);
    gold.values().append_value("gis/1f3a9c2e_0.txt");
    gold.values().append_null();
    gold.append(true);
    write_parquet(
        &mm.join("examples/gis.parquet"),
        vec![
            ("id", strings(&["gis_a", "gis_b"])),
            ("query", strings(&["map projection", "raster data"])),
            ("gold_ids", std::sync::Arc::new(gold.finish())),
        ],
    );
    let checked = json(&ok(&[
        "check",
        "--corpus",
        s(&mm),
        "--domains",
        "gis",
        "--json",
    ]));
    assert_eq!(checked["warnings"]["null_list_element"], 2, "{checked}");
    assert_eq!(
        checked["warnings"]["query_without_judgements"], 1,
        "{checked}"
    );
    // a domain without passages fails check as it fails index
    write_parquet(
        &mm.join("documents/gis.parquet"),
        vec![("id", strings(&[])), ("content", strings(&[]))],
    );
    let err = fails(&["check", "--corpus", s(&mm), "--domains", "gis"]);
    assert!(
        err.contains("documents/gis.parquet") && err.contains("no passages"),
        "{err}"
    );
}

/// A damaged embedding cache never becomes a live index: records whose bits were flipped
/// (a vector value turned huge) or whose values are NaN fail their checksum, are counted,
/// embedded again and dropped from the cache file; the rebuilt index scores as the first.
#[test]
fn a_damaged_embedding_cache_is_re_embedded() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    let build = || {
        let out = sift(&[
            "index",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--dense",
            s(&tiny_clip()),
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let m = json(&String::from_utf8(out.stdout).unwrap())["manifest"]["dense"]
            ["tiny-clip-quickgelu"]
            .clone();
        (m, stderr)
    };
    let evaluate = || {
        json(&ok(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--task",
            "all",
            "--retriever",
            "dense:tiny-clip-quickgelu",
            "--json",
        ]))["metrics"]
            .clone()
    };
    let (first, _) = build();
    let want = evaluate();
    let cache = index.join("embed-cache");
    let mut damaged = 0;
    for name in ["tiny-clip-quickgelu.bin", "tiny-clip-quickgelu.images.bin"] {
        let path = cache.join(name);
        let mut bytes = fs::read(&path).unwrap();
        let dim = first["dim"].as_u64().unwrap() as usize;
        let record = 16 + 4 * dim + 8;
        let n = (bytes.len() - 12) / record;
        assert!(n >= 10, "{name}: {n} records");
        for r in (0..n).step_by(3) {
            let at = 12 + r * record + 16 + 4 * (r % dim);
            if r % 2 == 0 {
                bytes[at + 3] ^= 0x40; // exponent bit: 0.05 becomes about 1e37
            } else {
                bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
            }
            damaged += 1;
        }
        fs::write(&path, bytes).unwrap();
    }
    let (again, stderr) = build();
    let rejected = again["cache_rejected"].as_u64().unwrap_or(0)
        + again["images"]["cache_rejected"].as_u64().unwrap_or(0);
    assert_eq!(rejected, damaged, "{again}");
    assert!(
        stderr.contains("damaged embedding-cache records"),
        "{stderr}"
    );
    assert_eq!(
        again["embedded"].as_u64().unwrap() + again["images"]["embedded"].as_u64().unwrap(),
        damaged
    );
    assert_eq!(evaluate(), want);
    // the cache file was mended: a third build takes everything from it
    let (third, _) = build();
    assert_eq!(
        (third["embedded"].clone(), third.get("cache_rejected")),
        (0.into(), None)
    );
}

/// `sift embed` names what it would otherwise drop or repeat: an id given twice in the
/// input is an error naming both lines, a path listed twice too, and a folder's subfolders
/// and other files are counted in a warning.
#[test]
fn embed_refuses_duplicate_ids_and_names_skipped_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let out_file = tmp.path().join("v.jsonl");
    let input = tmp.path().join("in.jsonl");
    fs::write(&input, "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\", \"text\": \"y\"}\n{\"id\": \"a\", \"text\": \"z\"}\n").unwrap();
    let err = fails(&[
        "embed",
        "--model",
        s(&tiny_clip()),
        "--input",
        s(&input),
        "--out",
        s(&out_file),
    ]);
    assert!(
        err.contains("in.jsonl:3") && err.contains("repeats line 1"),
        "{err}"
    );
    let images = repo().join("models/fixtures/vision/images");
    let list = tmp.path().join("list.txt");
    let one = images.join("gradient_rgb_64x64.png");
    fs::write(&list, format!("{}\n{}\n", s(&one), s(&one))).unwrap();
    let err = fails(&[
        "embed",
        "--model",
        s(&tiny_clip()),
        "--image",
        "--input",
        s(&list),
        "--out",
        s(&out_file),
    ]);
    assert!(
        err.contains("list.txt:2") && err.contains("repeats line 1"),
        "{err}"
    );
    let folder = tmp.path().join("folder");
    copy_dir(&images, &folder);
    fs::create_dir_all(folder.join("sub")).unwrap();
    fs::write(folder.join("notes.txt"), "x").unwrap();
    let out = sift(&[
        "embed",
        "--model",
        s(&tiny_clip()),
        "--image",
        "--input",
        s(&folder),
        "--out",
        s(&out_file),
        "-q",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 subfolder(s) not read") && stderr.contains("sub"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 other entries not read") && stderr.contains("notes.txt"),
        "{stderr}"
    );
}
