//! Hostile-user tests of the `sift` binary: one test per class of failure an adversarial
//! campaign found (many threads, stale caches, missing shards, bad ids, non-finite vectors,
//! read-only indexes, concurrent rebuilds, symlinks, panics, silent successes, misleading
//! messages). Each asserts the clear error, counted warning or correct result.

use std::fs;

mod common;
use common::*;

/// More indexing threads than cores (and than tantivy's own maximum of 8): tantivy's
/// background merges used to race Sift's explicit merge and fail most builds.
#[test]
fn index_builds_with_16_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    for _ in 0..3 {
        let out = json(&ok(&[
            "index",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--threads",
            "16",
            "--json",
        ]));
        assert_eq!(out["passages"], 46);
    }
    let big = generated_beir(tmp.path(), 20_000);
    let index = tmp.path().join("big");
    let out = json(&ok(&[
        "index",
        "--corpus",
        s(&big),
        "--index",
        s(&index),
        "--threads",
        "16",
        "--json",
    ]));
    assert_eq!(out["passages"], 20_000);
    let ev = json(&ok(&[
        "eval",
        "--corpus",
        s(&big),
        "--index",
        s(&index),
        "--json",
    ]));
    assert!(ev["metrics"]["ndcg@10"].as_f64().unwrap() > 0.5, "{ev}");
}

/// Makes every file and directory below `dir` read-only (as `chmod -R a-w`).
fn chmod_read_only(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            chmod_read_only(&p);
        } else {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o444)).unwrap();
        }
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).unwrap();
}

/// A read-only copy of an index (chmod -R a-w; and, when the tests run as root, which
/// ignores permissions, searched as the unprivileged user `nobody`) answers `search` and
/// `eval`: readers take no lock files and write nothing.
#[test]
fn read_only_indexes_can_be_searched() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let index = tmp.path().join("idx");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    let want = ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--json",
    ]);
    chmod_read_only(&index);
    let before = listing(&index);
    let corpus = sample();
    let args = [
        vec![
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--query",
            "map projection",
            "--json",
        ],
        vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--json",
        ],
    ];
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    for a in &args {
        let out = ok(a);
        if a[0] == "eval" {
            assert_eq!(json(&out)["metrics"], json(&want)["metrics"]);
        }
        if root {
            let out = std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_sift"))
                .args(a)
                .output()
                .expect("setpriv runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "as nobody: sift {a:?}: {stderr}");
        }
    }
    // nothing in the index changed
    assert_eq!(listing(&index), before);
}

/// Every path below `dir` with its size and modification time.
fn listing(dir: &std::path::Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::metadata(&p).unwrap();
            out.push((p.display().to_string(), m.len(), m.modified().unwrap()));
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `sift eval` keeps working while `sift index` rebuilds the same directory: readers lease
/// the generation they opened, and a build removes only generations nobody holds.
#[test]
fn eval_during_rebuilds_never_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let builds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let builder = {
        let (index, stop, builds) = (index.clone(), stop.clone(), builds.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ok(&[
                    "index",
                    "--corpus",
                    s(&sample()),
                    "--index",
                    s(&index),
                    "-q",
                ]);
                builds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    // at least 50 evaluations, and on until 25 rebuilds have happened underneath them
    let mut failures = Vec::new();
    let mut evals = 0;
    while evals < 50 || (builds.load(std::sync::atomic::Ordering::Relaxed) < 25 && evals < 1000) {
        let out = sift(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--json",
        ]);
        if !out.status.success() {
            failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        evals += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    builder.join().unwrap();
    let builds = builds.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} of {evals} evaluations failed during {builds} rebuilds: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        builds >= 25,
        "only {builds} rebuilds overlapped the evaluations"
    );
    // leased generations are removed by a later build once nobody holds them
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    assert_eq!(generations(&index).len(), 1);
}

fn tiny_clip() -> std::path::PathBuf {
    repo().join("models/fixtures/vision/tiny-clip-quickgelu")
}

fn manifest(index: &std::path::Path) -> serde_json::Value {
    json(&fs::read_to_string(index.join("manifest.json")).unwrap())
}

/// Rebuilding some domains keeps the others (hard-linked from the previous generation) when
/// the dense indexes are the same; a build that would drop a dense index or a domain is
/// refused until `--replace` says so.
#[test]
fn partial_rebuilds_keep_the_rest_or_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    let clip = tiny_clip();
    let corpus = sample();
    let build = |extra: &[&str]| {
        let mut a = vec!["index", "--corpus", s(&corpus), "--index", s(&index), "-q"];
        a.extend_from_slice(extra);
        a.iter().map(|x| x.to_string()).collect::<Vec<String>>()
    };
    let run = |a: Vec<String>| sift(&a.iter().map(String::as_str).collect::<Vec<_>>());
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
            "bm25",
            "--retriever",
            "dense:tiny-clip-quickgelu",
            "--json",
        ]))
    };
    assert!(run(build(&["--dense", s(&clip)])).status.success());
    let before = evaluate();
    let images_before =
        manifest(&index)["dense"]["tiny-clip-quickgelu"]["images"]["images"].clone();

    // one domain rebuilt with the same dense index: the other two are kept as they were
    assert!(
        run(build(&["--domains", "gis", "--dense", s(&clip)]))
            .status
            .success()
    );
    let m = manifest(&index);
    let domains: Vec<&String> = m["domains"].as_object().unwrap().keys().collect();
    assert_eq!(domains, ["biology", "gis", "physics"]);
    assert_eq!(
        m["dense"]["tiny-clip-quickgelu"]["images"]["images"],
        images_before
    );
    assert_eq!(evaluate()["reports"], before["reports"]);

    // dropping the dense index, or changing it while keeping other domains: refused, and the
    // index is unchanged
    let gen_before = m["generation"].clone();
    for extra in [
        vec!["--domains", "gis"],
        vec![],
        vec![
            "--domains",
            "gis",
            "--dense",
            s(&clip),
            "--vector-dtype",
            "f16",
        ],
    ] {
        let out = run(build(&extra));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains("would drop") && err.contains("--replace"),
            "{err}"
        );
        assert_eq!(manifest(&index)["generation"], gen_before);
    }
    let out = run(build(&["--domains", "gis"]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("dense:tiny-clip-quickgelu"));
    // --replace: exactly what was asked for
    assert!(
        run(build(&["--domains", "gis", "--replace"]))
            .status
            .success()
    );
    let m = manifest(&index);
    assert_eq!(m["domains"].as_object().unwrap().len(), 1);
    assert!(m["dense"].as_object().unwrap().is_empty());
    assert_eq!(generations(&index).len(), 1);
}

/// An unreadable manifest is called corrupt by readers; a build leaves that index (and its
/// generations) alone unless `--replace` is given.
#[test]
fn a_corrupt_manifest_is_reported_and_not_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    let gens = generations(&index);
    fs::write(
        index.join("manifest.json"),
        "{\"format_version\": 3, \"garbage",
    )
    .unwrap();
    let err = fails(&["eval", "--corpus", s(&sample()), "--index", s(&index)]);
    assert!(
        err.contains("manifest.json") && err.contains("corrupt manifest"),
        "{err}"
    );
    let err = fails(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    assert!(
        err.contains("unreadable") && err.contains("--replace"),
        "{err}"
    );
    assert_eq!(generations(&index), gens, "the stored generation is kept");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
        "--replace",
    ]);
    ok(&["eval", "--corpus", s(&sample()), "--index", s(&index)]);
    assert_eq!(generations(&index).len(), 1);
}

/// Index files that disagree or were tampered with are a "corrupt index" error naming the
/// file, never a panic: a generation path outside the index, duplicate ids, bit flips in
/// tantivy's files (caught by their checksums, and tantivy's own panics caught as a last
/// resort).
#[test]
fn tampered_index_files_are_reported_as_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    let eval = |index: &std::path::Path| {
        fails(&[
            "eval",
            "--corpus",
            s(&sample()),
            "--index",
            s(index),
            "--domains",
            "gis",
        ])
    };
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    let original = fs::read_to_string(index.join("manifest.json")).unwrap();
    let generation = manifest(&index)["generation"].as_str().unwrap().to_string();
    for bad in ["/tmp", "../elsewhere", "gen-x/../../y", "other"] {
        fs::write(
            index.join("manifest.json"),
            original.replace(&format!("\"{generation}\""), &format!("{bad:?}")),
        )
        .unwrap();
        let err = eval(&index);
        assert!(
            err.contains("not a generation directory name"),
            "{bad}: {err}"
        );
    }
    fs::write(index.join("manifest.json"), &original).unwrap();

    let bm25 = index.join(&generation).join("bm25/gis");
    let ids_path = bm25.join("ids.json");
    let ids_text = fs::read_to_string(&ids_path).unwrap();
    let ids: Vec<String> = serde_json::from_str(&ids_text).unwrap();
    let mut dup = ids.clone();
    dup[1] = dup[0].clone();
    fs::write(&ids_path, serde_json::to_string(&dup).unwrap()).unwrap();
    let err = eval(&index);
    assert!(
        err.contains("ids.json") && err.contains("listed twice"),
        "{err}"
    );
    fs::write(&ids_path, &ids_text).unwrap();

    // a flipped bit anywhere in each of tantivy's files
    let files: Vec<std::path::PathBuf> = fs::read_dir(&bm25)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            ["idx", "term", "fieldnorm", "fast", "store"]
                .contains(&p.extension().and_then(|e| e.to_str()).unwrap_or(""))
        })
        .collect();
    assert!(files.len() >= 4, "{files:?}");
    for file in files {
        let bytes = fs::read(&file).unwrap();
        for at in [0, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            fs::write(&file, &flipped).unwrap();
            let err = eval(&index);
            assert!(
                err.contains("corrupt"),
                "{} byte {at}: {err}",
                file.display()
            );
        }
        fs::write(&file, &bytes).unwrap();
    }
    ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--domains",
        "gis",
    ]);
}

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
        ok(&[
            "index",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--dense",
            s(&clip),
            "-q",
        ]);
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
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
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
    let err = fails(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
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
    ok(&[
        "index",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "-q",
        "--replace",
    ]);
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
        let err = fails(&["index", "--corpus", s(&root), "--index", s(&index), "-q"]);
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
        let err = fails(&["index", "--corpus", s(&root), "--index", s(&index), "-q"]);
        assert!(
            err.contains("corpus.jsonl: line 2: passage _id"),
            "{bad:?}: {err}"
        );
    }
    // gold ids, query image paths and corpus image paths of the MM-BRIGHT layout
    let corpus = tmp.path().join("sample");
    copy_dir(&sample(), &corpus);
    ok(&[
        "index",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "-q",
        "--replace",
    ]);
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

/// Runs sift with a deadline (a hang is a failure, not a stuck test run).
fn sift_within(args: &[&str], secs: u64) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sift"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("sift {args:?} did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
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
        json(&ok(&[
            "index",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--dense",
            s(model),
            "--json",
        ]))["manifest"]["dense"]["ckpt"]
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
    let err = fails(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&nan),
        "-q",
    ]);
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
    let err = fails(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&zero_std),
        "-q",
    ]);
    assert!(
        err.contains("image") && (err.contains("not finite") || err.contains("non-finite")),
        "{err}"
    );

    // a NaN written into stored vectors
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&tiny_clip()),
        "-q",
    ]);
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

/// Output piped into a reader that stops (`| head`) ends sift quietly: no panic message, and
/// either success or death by SIGPIPE, as for other Unix tools.
#[test]
fn broken_pipes_end_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    let corpus = sample();
    let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    let lines = tmp.path().join("lines.txt");
    let text: String = (0..2000).map(|i| format!("line {i} of text\n")).collect();
    fs::write(&lines, text).unwrap();
    for args in [
        vec!["models", "list"],
        vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--json",
            "--per-query",
        ],
        vec!["check", "--corpus", s(&corpus)],
        // the streaming writers: a run and embeddings to standard output
        vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--task",
            "4",
            "--run-out",
            "-",
            "-q",
        ],
        vec![
            "embed",
            "--model",
            s(&clip),
            "--input",
            s(&lines),
            "--out",
            "-",
        ],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sift"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before sift writes
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// Output paths that are not regular files are written straight, never replaced: `-` is
/// standard output, and a named pipe stays a pipe (an atomic rename over it, as for files,
/// would put a regular file in its place; over `/dev/stdout`, run as root, the device link).
#[test]
fn runs_go_to_stdout_and_pipes_as_they_are() {
    use std::os::unix::fs::FileTypeExt;
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    let corpus = sample();
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let file = tmp.path().join("run.trec");
    let eval = |out: &str| {
        sift(&[
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            s(&index),
            "--task",
            "1",
            "--run-out",
            out,
            "--json",
            "-q",
        ])
    };
    let o = eval(s(&file));
    assert!(o.status.success());
    let want = fs::read_to_string(&file).unwrap();
    assert!(want.lines().count() > 10);
    // `-`: the run on stdout; the report then goes to stderr
    let o = eval("-");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"ndcg@10\""));
    assert!(!tmp.path().join("-").exists() && !repo().join("-").exists());
    // a named pipe: read by another thread while sift writes; it is still a pipe afterwards
    let fifo = tmp.path().join("run.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read_to_string(fifo).unwrap())
    };
    let o = eval(s(&fifo));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(reader.join().unwrap(), want);
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let leftovers: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn tiny_gme() -> std::path::PathBuf {
    repo().join("models/fixtures/gme/tiny-gme")
}

/// Rewrites keys of a model's config.json.
fn set_config(dir: &std::path::Path, key: &str, value: serde_json::Value) {
    let path = dir.join("config.json");
    let mut config = json(&fs::read_to_string(&path).unwrap());
    config[key] = value;
    fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
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
    let built = json(&ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--dense",
        s(&model),
        "--json",
    ]));
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
    let out = json(&ok(&[
        "index",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--json",
    ]));
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
    let built = json(&ok(&[
        "index",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--dense",
        s(&tiny_clip()),
        "--json",
    ]));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    assert_eq!(images["images"]["gis"], 1);
    assert!(
        images["undecodable_examples"]
            .to_string()
            .contains("truncated"),
        "{images}"
    );
}

/// Messages say what is wrong, where.
#[test]
fn error_messages_name_the_real_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    // a model path that does not exist is not looked up on the hub
    let err = fails(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        "/nonexistent/dir",
        "-q",
    ]);
    assert!(
        err.contains("no such directory") && !err.contains("lookup"),
        "{err}"
    );
    // a non-integer numeric _id
    let root = beir(
        tmp.path(),
        "{\"_id\": 1e30, \"text\": \"x\"}\n{\"_id\": 1.0e30, \"text\": \"y\"}\n",
        QUERIES,
        QRELS,
    );
    let err = fails(&["index", "--corpus", s(&root), "--index", s(&index), "-q"]);
    assert!(
        err.contains("corpus.jsonl:1") && err.contains("not an integer"),
        "{err}"
    );
    // hybrid weights that are not numbers
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    let err = fails(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--retriever",
        "hybrid:bm25+dense:x:a,b",
    ]);
    assert!(
        err.contains("hybrid weights \"a,b\" are not numbers"),
        "{err}"
    );
    // model configs: an unknown model_type, none at all, garbage
    let model = tmp.path().join("m");
    copy_dir(&tiny_clip(), &model);
    let texts = tmp.path().join("t.txt");
    fs::write(&texts, "x\n").unwrap();
    let out = tmp.path().join("v.jsonl");
    set_config(&model, "model_type", "mamba".into());
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
        err.contains("\"mamba\"") && err.contains("clip") && err.contains("qwen2_vl"),
        "{err}"
    );
    let mut config = json(&fs::read_to_string(model.join("config.json")).unwrap());
    config.as_object_mut().unwrap().remove("model_type");
    fs::write(model.join("config.json"), config.to_string()).unwrap();
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
        err.contains("no model_type") && err.contains("config.json"),
        "{err}"
    );
    fs::write(model.join("config.json"), "{ not json").unwrap();
    let err = fails(&["models", "info", s(&model)]);
    assert!(
        err.contains("config.json") && err.contains("invalid JSON"),
        "{err}"
    );
    // an I/O error is said once
    let err = fails(&[
        "eval",
        "--run",
        "/nonexistent/run.txt",
        "--qrels",
        "/nonexistent/q",
    ]);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

/// Values that cannot mean anything are usage errors (exit 2), as is `eval` without either
/// mode.
#[test]
fn meaningless_values_are_usage_errors() {
    let corpus = sample();
    for args in [
        vec!["eval"],
        vec!["eval", "--run", "r", "--qrels", "q", "--top-k", "0"],
        vec![
            "eval",
            "--corpus",
            s(&corpus),
            "--index",
            "i",
            "--ef-search",
            "0",
        ],
        vec!["search", "--index", "i", "--query", "q", "--top-k", "0"],
    ] {
        let out = sift(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let err = fails(&[
        "eval",
        "--corpus",
        s(&corpus),
        "--index",
        s(&index),
        "--retriever",
        "hybrid:bm25+bm25:0,0",
    ]);
    assert!(err.contains("not all zero"), "{err}");
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
    let out = json(&ok(&[
        "index",
        "--corpus",
        s(&root),
        "--index",
        s(&index),
        "--json",
    ]));
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

/// `--threads 1` builds reproduce the HNSW graph bit for bit.
#[test]
fn single_threaded_builds_are_reproducible() {
    let tmp = tempfile::tempdir().unwrap();
    let graph = |name: &str| {
        let index = tmp.path().join(name);
        ok(&[
            "index",
            "--corpus",
            s(&sample()),
            "--index",
            s(&index),
            "--dense",
            s(&tiny_clip()),
            "--threads",
            "1",
            "-q",
        ]);
        let generation = manifest(&index)["generation"].as_str().unwrap().to_string();
        let dir = index.join(generation);
        (
            fs::read(dir.join("dense/tiny-clip-quickgelu/gis/graph.bin")).unwrap(),
            fs::read(dir.join("images/tiny-clip-quickgelu/gis/graph.bin")).unwrap(),
        )
    };
    assert_eq!(graph("a"), graph("b"));
}

/// Runs sift as the unprivileged user `nobody` (through `setpriv`), when the tests run as
/// root; `None` otherwise (a non-root user cannot switch users).
fn sift_as_nobody(args: &[&str]) -> Option<std::process::Output> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    Some(
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_sift"))
            .args(args)
            .output()
            .expect("setpriv runs"),
    )
}

/// An index built by one user (under umask 022) is readable by every other: no file of it is
/// left with tantivy's temporary-file mode 0600, and another user searches it as built
/// (no chmod), with BM25 and a dense index.
#[test]
fn an_index_is_readable_by_other_users() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let index = tmp.path().join("idx");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sift"));
    cmd.args([
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ])
    .args(["--dense", s(&tiny_clip())]);
    // SAFETY: umask is async-signal-safe and touches only the child's own state
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut stack = vec![index.clone()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            if p.is_dir() {
                assert_eq!(mode, 0o755, "{}", p.display());
                stack.push(p);
            } else {
                assert_eq!(mode, 0o644, "{}", p.display());
            }
        }
    }
    let searches = [
        vec![
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--query",
            "map projection",
        ],
        vec![
            "search",
            "--index",
            s(&index),
            "--domain",
            "gis",
            "--query",
            "map projection",
            "--retriever",
            "dense:tiny-clip-quickgelu",
        ],
    ];
    for a in &searches {
        let mut a = a.clone();
        a.push("--json");
        match sift_as_nobody(&a) {
            Some(out) => assert!(
                out.status.success(),
                "as nobody: sift {a:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            None => eprintln!("SKIPPED (not root): searching as another user"),
        }
    }
}

/// A domain named `..` (or `.`, or holding a separator) is refused where it is read: a
/// parquet file `...parquet` (domain `..`) stops `sift check` and `sift index` naming the
/// file, and a manifest naming such a domain or dense index is a corrupt manifest; nothing is
/// written outside the index's own folders.
#[test]
fn domain_names_cannot_escape_their_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    copy_dir(&sample(), &corpus);
    for bad in ["...parquet", "..parquet", "-00000-of-00001.parquet"] {
        let file = corpus.join("documents").join(bad);
        fs::copy(corpus.join("documents/gis.parquet"), &file).unwrap();
        let index = tmp.path().join("idx");
        for args in [
            vec!["check", "--corpus", s(&corpus)],
            vec!["index", "--corpus", s(&corpus), "--index", s(&index)],
        ] {
            let err = fails(&args);
            assert!(
                err.contains(bad) && err.contains("a domain must be one plain directory name"),
                "{bad}: {err}"
            );
        }
        assert!(!index.join("manifest.json").exists());
        fs::remove_file(&file).unwrap();
    }
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&corpus), "--index", s(&index), "-q"]);
    let good = fs::read_to_string(index.join("manifest.json")).unwrap();
    for (from, to) in [("\"gis\": {", "\"..\": {"), ("\"gis\": {", "\"a/b\": {")] {
        assert!(good.contains(from));
        fs::write(index.join("manifest.json"), good.replacen(from, to, 1)).unwrap();
        let err = fails(&[
            "search",
            "--index",
            s(&index),
            "--query",
            "map",
            "--domain",
            "biology",
        ]);
        assert!(
            err.contains("corrupt manifest") && err.contains("domain"),
            "{err}"
        );
    }
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

/// `--threads` past any machine's size is a usage error, not a hang (99999999999 threads) or
/// an abort.
#[test]
fn absurd_thread_counts_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    for n in ["99999999999", "18446744073709551615", "1025", "0"] {
        let out = sift_within(
            &[
                "index",
                "--corpus",
                s(&sample()),
                "--index",
                s(&index),
                "--threads",
                n,
            ],
            60,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--threads {n}: {stderr}");
        assert!(stderr.contains("--threads"), "{stderr}");
    }
    assert!(!index.exists());
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--threads",
        "1024",
        "-q",
    ]);
}

/// Image files named on the command line or in a list are read within limits: a device
/// (`/dev/zero`, which never ends), a FIFO or a file over `--max-image-bytes` / an image over
/// `--max-image-pixels` is refused before it is read or decoded (search: an error; embed: a
/// counted warning); a FIFO as `sift embed --input` is an error instead of a wait.
#[test]
fn cli_image_reads_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--dense",
        s(&tiny_clip()),
        "-q",
    ]);
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

/// The smaller silent answers of the reliability round, each now said: a gold id that is also
/// a negative id and negative ids naming no passage are counted (check and eval), an edited
/// analyzer in the manifest is detected, `--domains ''` is a usage error.
#[test]
fn odd_judgements_edited_analyzers_and_empty_domain_lists_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let mm = tmp.path().join("mm");
    copy_dir(&sample(), &mm);
    let list = |items: &[&[&str]]| {
        let mut b =
            arrow_array::builder::ListBuilder::new(arrow_array::builder::StringBuilder::new());
        for row in items {
            for v in *row {
                b.values().append_value(v);
            }
            b.append(true);
        }
        std::sync::Arc::new(b.finish()) as arrow_array::ArrayRef
    };
    write_parquet(
        &mm.join("examples/gis.parquet"),
        vec![
            ("id", strings(&["gis_a", "gis_b"])),
            ("query", strings(&["map projection", "raster data"])),
            (
                "gold_ids",
                list(&[&["gis/1f3a9c2e_0.txt"], &["gis/1f3a9c2e_0.txt"]]),
            ),
            (
                "negative_ids",
                list(&[&["gis/1f3a9c2e_0.txt", "gis/not-a-passage.txt"], &[]]),
            ),
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
    assert_eq!(checked["warnings"]["gold_also_negative"], 1, "{checked}");
    assert_eq!(checked["warnings"]["unknown_negative_id"], 1, "{checked}");
    let index = tmp.path().join("idx");
    ok(&["index", "--corpus", s(&mm), "--index", s(&index), "-q"]);
    let ev = json(&ok(&[
        "eval",
        "--corpus",
        s(&mm),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--json",
    ]));
    assert_eq!(ev["warnings"]["gold_also_negative"], 1, "{ev}");
    assert_eq!(ev["warnings"]["unknown_negative_id"], 1, "{ev}");

    // the manifest's analyzer edited by hand: the BM25 domains record their own
    let manifest = index.join("manifest.json");
    let text = fs::read_to_string(&manifest).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let stemmer = m["analyzer"]["stemmer"].clone();
    assert!(stemmer.is_string(), "{}", m["analyzer"]);
    m["analyzer"]["stemmer"] = if stemmer == "none" { "porter" } else { "none" }.into();
    fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let err = fails(&[
        "search",
        "--index",
        s(&index),
        "--domain",
        "gis",
        "--query",
        "map projection",
    ]);
    assert!(
        err.contains("analyzer.json") && err.contains("the manifest was edited"),
        "{err}"
    );

    for cmd in [
        vec![
            "index",
            "--corpus",
            s(&mm),
            "--index",
            s(&index),
            "--domains",
            "",
        ],
        vec![
            "eval",
            "--corpus",
            s(&mm),
            "--index",
            s(&index),
            "--domains",
            " , ",
        ],
        vec!["check", "--corpus", s(&mm), "--domains", ""],
    ] {
        let out = sift(&cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {stderr}");
        assert!(stderr.contains("give one or more domain names"), "{stderr}");
    }
}

fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Every file argument is read through one guarded reader (sift_core::files): a device
/// (`/dev/zero`, which grew a process to 23.6 GB) is refused before a byte is read, and a
/// FIFO without a writer (which blocked forever) is refused without waiting; each error names
/// the file. The run, qrels and exclusion files, query augmentations, instruction files,
/// prompt templates, the generation and rerank caches, the report's results.json and the
/// index's embedding cache.
#[test]
fn file_arguments_refuse_devices_and_fifos_without_waiting() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let fifo = t("fifo");
    mkfifo(std::path::Path::new(&fifo));
    fs::write(t("run"), "q1 Q0 d1 1 1.0 x\n").unwrap();
    fs::write(t("qrels"), "q1 0 d1 1\n").unwrap();
    let index = t("idx");
    let sample = s(&sample()).to_string();
    ok(&["index", "--corpus", &sample, "--index", &index, "-q"]);
    // an endpoint nobody listens on: every case fails at its file before any request
    let url = "http://127.0.0.1:9/v1";
    let eval = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "eval",
            "--corpus",
            &sample,
            "--index",
            &index,
            "--domains",
            "gis",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let aug = format!("captions:{fifo}");
    let results = t("results");
    fs::create_dir_all(&results).unwrap();
    mkfifo(&tmp.path().join("results/results.json"));
    let gen_args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "generate",
            "captions",
            "--corpus",
            &sample,
            "--domains",
            "gis",
            "--generator",
            url,
            "--model",
            "m",
            "--out",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        v.push(t("gen"));
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "eval".into(),
                "--run".into(),
                "/dev/zero".into(),
                "--qrels".into(),
                t("qrels"),
            ],
            "/dev/zero: is a character device",
        ),
        (
            vec![
                "eval".into(),
                "--run".into(),
                t("run"),
                "--qrels".into(),
                fifo.clone(),
            ],
            "is a FIFO",
        ),
        (
            vec![
                "eval".into(),
                "--run".into(),
                t("run"),
                "--qrels".into(),
                t("qrels"),
                "--exclude".into(),
                fifo.clone(),
            ],
            "is a FIFO",
        ),
        (eval(&["--query-augment", &aug]), "is a FIFO"),
        (
            eval(&["--instructions-file", "/dev/zero"]),
            "/dev/zero: is a character device",
        ),
        (
            eval(&[
                "--rerank",
                &format!("pointwise:{url}"),
                "--rerank-model",
                "m",
                "--rerank-prompt",
                "/dev/zero",
            ]),
            "/dev/zero: is a character device",
        ),
        (
            eval(&[
                "--rerank",
                &format!("pointwise:{url}"),
                "--rerank-model",
                "m",
                "--rerank-cache",
                &fifo,
            ]),
            "is a FIFO",
        ),
        (
            gen_args(&["--prompt", "/dev/zero"]),
            "/dev/zero: is a character device",
        ),
        (gen_args(&["--cache", &fifo]), "is a FIFO"),
        (
            vec![
                "report".into(),
                results.clone(),
                "--out".into(),
                t("r.html"),
            ],
            "results.json: is a FIFO",
        ),
    ];
    for (args, want) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sift_within(&args, 120);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(1 | 2)) && err.contains(want),
            "{args:?}: {:?} {err}",
            out.status
        );
    }
    // the embedding cache: a FIFO in its place
    let cached = t("cached");
    ok(&[
        "index",
        "--corpus",
        &sample,
        "--index",
        &cached,
        "--domains",
        "gis",
        "--dense",
        s(&tiny_clip()),
        "-q",
    ]);
    let cache_dir = tmp.path().join("cached/embed-cache");
    let cache_file = fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "bin"))
        .expect("an embedding cache file");
    fs::remove_file(&cache_file).unwrap();
    mkfifo(&cache_file);
    let out = sift_within(
        &[
            "index",
            "--corpus",
            &sample,
            "--index",
            &cached,
            "--domains",
            "gis",
            "--dense",
            s(&tiny_clip()),
            "--replace",
            "-q",
        ],
        120,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("is a FIFO"),
        "{err}"
    );
}

/// `--out` never replaces what is not a regular file: `sift report --out` renamed a
/// temporary file over a FIFO or a device (as root it replaced `/dev/full`). A FIFO is
/// written straight (a reader gets the page), a symbolic link is written through to its
/// target (the link stays), a directory is refused; a killed run's temporary file is cleaned
/// up by the next one.
#[test]
fn outputs_never_replace_fifos_devices_or_links() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    let results = tmp.path().join("results");
    ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "-q",
    ]);
    ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--out",
        s(&results),
        "-q",
    ]);
    // a FIFO: read by a thread, still a FIFO afterwards
    let fifo = tmp.path().join("page.fifo");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read(fifo).unwrap())
    };
    let out = sift_within(&["report", s(&results), "--out", s(&fifo)], 120);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = reader.join().unwrap();
    assert!(
        page.starts_with(b"<!DOCTYPE html") || page.starts_with(b"<!doctype html"),
        "{}",
        page.len()
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    // /dev/null stays a device
    ok(&["report", s(&results), "--out", "/dev/null"]);
    assert!(
        fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    // a symbolic link: the target gets the page, the link stays a link
    let target = tmp.path().join("target.html");
    fs::write(&target, "old").unwrap();
    let link = tmp.path().join("link.html");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    ok(&["report", s(&results), "--out", s(&link)]);
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(fs::read_to_string(&target).unwrap().len() > 1000);
    // a directory is refused, naming it
    let err = fails(&["report", s(&results), "--out", s(tmp.path())]);
    assert!(err.contains("is a directory"), "{err}");
    // a temporary file a killed run left beside a run file is removed by the next write
    let stale = results.join("runs/.task1.bm25.trec.tmp-4294967");
    fs::write(&stale, "half").unwrap();
    ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--out",
        s(&results),
        "-q",
    ]);
    assert!(!stale.exists());
}

/// Every numeric flag has a range: values past it are usage errors naming the flag (exit 2),
/// never a panic (`--resamples 18446744073709551615` was a capacity overflow, `sift generate
/// --timeout 18446744073709551615` an instant overflow) or work that never ends.
#[test]
fn every_numeric_flag_has_a_range() {
    let max = "18446744073709551615";
    let cases: &[(&[&str], &str)] = &[
        (&["report", "d", "--out", "o"], "--resamples"),
        (&["report", "d", "--out", "o"], "--top"),
        (&["report", "d", "--out", "o"], "--max-mb"),
        (&["report", "d", "--out", "o"], "--thumbnail-mb"),
        (&["eval", "--run", "r", "--qrels", "q"], "--resamples"),
        (
            &[
                "generate",
                "captions",
                "--corpus",
                "c",
                "--generator",
                "g",
                "--out",
                "o",
            ],
            "--timeout",
        ),
        (
            &[
                "generate",
                "captions",
                "--corpus",
                "c",
                "--generator",
                "g",
                "--out",
                "o",
            ],
            "--concurrency",
        ),
        (
            &[
                "generate",
                "captions",
                "--corpus",
                "c",
                "--generator",
                "g",
                "--out",
                "o",
            ],
            "--max-new-tokens",
        ),
        (&["index", "--corpus", "c", "--index", "i"], "--hnsw-m"),
        (
            &["index", "--corpus", "c", "--index", "i"],
            "--ef-construction",
        ),
        (
            &["index", "--corpus", "c", "--index", "i"],
            "--max-image-pixels",
        ),
        (&["index", "--corpus", "c", "--index", "i"], "--batch-size"),
        (&["eval", "--corpus", "c", "--index", "i"], "--rerank-depth"),
        (
            &["eval", "--corpus", "c", "--index", "i"],
            "--rerank-window",
        ),
    ];
    for (args, flag) in cases {
        let mut a: Vec<&str> = args.to_vec();
        a.extend([*flag, max]);
        let out = sift(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(2) && err.contains(flag) && err.contains("out of range"),
            "{a:?}: {:?} {err}",
            out.status
        );
    }
    // (--k1 and --b are checked where BM25's parameters are applied, for every door:
    // tests/cli.rs mismatched_settings_and_versions_are_refused_clearly)
    for (flag, bad) in [
        ("--top-p", "NaN"),
        ("--top-p", "1.5"),
        ("--temperature", "inf"),
    ] {
        let mut a = vec![
            "generate",
            "captions",
            "--corpus",
            "c",
            "--generator",
            "g",
            "--out",
            "o",
        ];
        a.extend([flag, bad]);
        let out = sift(&a);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{a:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
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
    let built = json(&ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--dense",
        s(&tiny_clip()),
        "--max-image-pixels",
        "100",
        "--json",
    ]));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    assert_eq!(images["images"]["gis"].as_u64().unwrap_or(0), 0, "{images}");
    let examples = images["undecodable_examples"].to_string();
    assert!(
        examples.contains("gis") && examples.contains("over the limit of 100 pixels"),
        "{images}"
    );
    // the default limit (Pillow's) indexes them
    let index = tmp.path().join("idx2");
    let built = json(&ok(&[
        "index",
        "--corpus",
        s(&sample()),
        "--index",
        s(&index),
        "--domains",
        "gis",
        "--dense",
        s(&tiny_clip()),
        "--json",
    ]));
    let images = &built["manifest"]["dense"]["tiny-clip-quickgelu"]["images"];
    assert!(images["images"]["gis"].as_u64().unwrap() > 0, "{images}");
}
