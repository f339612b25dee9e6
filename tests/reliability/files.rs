//! Outputs and file arguments: broken pipes, runs on stdout and pipes, devices, FIFOs and
//! links.
use super::*;

/// Output piped into a reader that stops (`| head`) ends sift quietly: no panic message, and
/// either success or death by SIGPIPE, as for other Unix tools.
#[test]
fn broken_pipes_end_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let index = sample_index();
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
            s(index),
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
            s(index),
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
    index_ok(&corpus, &index, &["-q"]);
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
    let index = sample_index();
    let results = tmp.path().join("results");
    ok(&[
        "eval",
        "--corpus",
        s(&sample()),
        "--index",
        s(index),
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
        s(index),
        "--out",
        s(&results),
        "-q",
    ]);
    assert!(!stale.exists());
}
