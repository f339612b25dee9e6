//! Indexes under stress: many threads, read-only and other users' indexes, rebuilds while
//! searching, partial rebuilds, corrupt manifests, tampered files, reproducible builds,
//! domain names.
use super::*;

/// More indexing threads than cores (and than tantivy's own maximum of 8): tantivy's
/// background merges used to race Sift's explicit merge and fail most builds.
#[test]
fn index_builds_with_16_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    for _ in 0..3 {
        let out = json(&index_ok(&sample(), &index, &["--threads", "16", "--json"]));
        assert_eq!(out["passages"], 46);
    }
    let big = generated_beir(tmp.path(), 20_000);
    let index = tmp.path().join("big");
    let out = json(&index_ok(&big, &index, &["--threads", "16", "--json"]));
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
    index_ok(&sample(), &index, &["-q"]);
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
    index_ok(&sample(), &index, &["-q"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let builds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let builder = {
        let (index, stop, builds) = (index.clone(), stop.clone(), builds.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                index_ok(&sample(), &index, &["-q"]);
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
    index_ok(&sample(), &index, &["-q"]);
    assert_eq!(generations(&index).len(), 1);
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
    index_ok(&sample(), &index, &["-q"]);
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
    let err = index_fails(&sample(), &index, &["-q"]);
    assert!(
        err.contains("unreadable") && err.contains("--replace"),
        "{err}"
    );
    assert_eq!(generations(&index), gens, "the stored generation is kept");
    index_ok(&sample(), &index, &["-q", "--replace"]);
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
    index_ok(&sample(), &index, &["-q"]);
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

/// `--threads 1` builds reproduce the HNSW graph bit for bit.
#[test]
fn single_threaded_builds_are_reproducible() {
    let tmp = tempfile::tempdir().unwrap();
    let graph = |name: &str| {
        let index = tmp.path().join(name);
        index_ok(
            &sample(),
            &index,
            &["--dense", s(&tiny_clip()), "--threads", "1", "-q"],
        );
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
    index_ok(&corpus, &index, &["-q"]);
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
