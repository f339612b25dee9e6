//! `sift index --faiss`: FAISS index files written by faiss itself
//! (tests/fixtures/faiss/make_faiss.py) rank in Sift as `index.search` ranks them, and bad
//! files are refused with the file and what differs.
use super::*;

/// tiny-contriever's vector length.
const DIM: usize = 32;
/// Passages of the test knowledge base.
const N: usize = 48;

fn contriever() -> PathBuf {
    repo().join("models/fixtures/contriever/tiny-contriever")
}

/// A knowledge base of `n` passages `p0`..`p{n-1}`, one domain.
fn kb(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("kb.jsonl");
    let rows: String = (0..n)
        .map(|i| {
            format!(
                "{{\"id\": \"p{i}\", \"text\": \"passage {i} on rivers, stones and lava {}\"}}\n",
                i * 7 % 13
            )
        })
        .collect();
    fs::write(&path, rows).unwrap();
    path
}

/// `n` deterministic pseudo-random unit vectors of `dim` values.
fn unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    (0..n)
        .map(|_| {
            let v: Vec<f64> = (0..dim).map(|_| next()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            v.iter().map(|x| (x / norm) as f32).collect()
        })
        .collect()
}

/// A flat index file laid out as faiss's `write_index` writes one (fourcc, header, the
/// vectors' float count and floats), with `ntotal` as given.
fn flat_file(path: &Path, fourcc: &[u8; 4], metric: i32, ntotal: i64, vectors: &[Vec<f32>]) {
    let d = vectors.first().map_or(DIM, Vec::len);
    let mut b = fourcc.to_vec();
    b.extend((d as i32).to_le_bytes());
    b.extend(ntotal.to_le_bytes());
    b.extend([(1i64 << 20).to_le_bytes(), (1i64 << 20).to_le_bytes()].concat());
    b.push(1);
    b.extend(metric.to_le_bytes());
    if metric > 1 {
        b.extend(1.0f32.to_le_bytes());
    }
    b.extend((ntotal as u64).wrapping_mul(d as u64).to_le_bytes());
    for v in vectors {
        b.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    }
    fs::write(path, b).unwrap();
}

/// Builds `index` from `corpus` with the vectors of `file`, expecting a clean failure.
fn adopt_fails(corpus: &Path, index: &Path, file: &Path) -> String {
    index_fails(
        corpus,
        index,
        &["--dense", s(&contriever()), "--faiss", s(file), "-q"],
    )
}

#[test]
fn bad_faiss_files_are_refused_naming_the_file_and_the_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = kb(tmp.path(), N);
    let index = tmp.path().join("index");
    let vectors = unit_vectors(N, DIM, 3);
    let file = |name: &str| tmp.path().join(name);

    // the well-formed file is adopted (so each failure below is the one difference's)
    flat_file(&file("good.index"), b"IxFI", 0, N as i64, &vectors);
    let out = json(&index_ok(
        &corpus,
        &index,
        &[
            "--dense",
            s(&contriever()),
            "--faiss",
            s(&file("good.index")),
            "--json",
            "-q",
        ],
    ));
    assert_eq!(
        out["manifest"]["dense"]["tiny-contriever"]["precomputed"],
        N as u64
    );
    let good = fs::read(file("good.index")).unwrap();

    let cases: Vec<(&str, Vec<&str>)> = {
        flat_file(
            &file("dim.index"),
            b"IxFI",
            0,
            N as i64,
            &unit_vectors(N, 16, 3),
        );
        flat_file(
            &file("count.index"),
            b"IxFI",
            0,
            N as i64 - 1,
            &vectors[1..],
        );
        fs::write(file("truncated.index"), &good[..good.len() - 4]).unwrap();
        // a count far beyond the file: refused from the file size, nothing allocated
        flat_file(&file("huge.index"), b"IxFI", 0, 1 << 40, &vectors[..2]);
        let mut unknown = good.clone();
        unknown[..4].copy_from_slice(b"IxPQ");
        fs::write(file("unknown.index"), unknown).unwrap();
        flat_file(&file("l1.index"), b"IxFl", 2, N as i64, &vectors);
        let doubled: Vec<Vec<f32>> = vectors
            .iter()
            .map(|v| v.iter().map(|x| 2.0 * x).collect())
            .collect();
        flat_file(&file("long.index"), b"IxF2", 1, N as i64, &doubled);
        let mut nan = vectors.clone();
        nan[3][5] = f32::NAN;
        flat_file(&file("nan.index"), b"IxFI", 0, N as i64, &nan);
        let mut inf = vectors.clone();
        inf[7][0] = f32::INFINITY;
        flat_file(&file("inf.index"), b"IxF2", 1, N as i64, &inf);
        fs::write(file("empty.index"), b"").unwrap();
        vec![
            (
                "dim.index",
                vec!["16-dimensional vectors", "makes 32-dimensional"],
            ),
            (
                "count.index",
                vec!["47 vectors (ntotal) for the 48 passages of domain kb"],
            ),
            (
                "truncated.index",
                vec!["truncated FAISS file", "the 48 vectors of dimension 32"],
            ),
            (
                "huge.index",
                vec!["truncated FAISS file", "the 1099511627776 vectors"],
            ),
            (
                "unknown.index",
                vec!["unknown FAISS index type \"IxPQ\"", "IxFI", "IxF2", "IHNf"],
            ),
            (
                "l1.index",
                vec!["metric_type 2 (L1)", "inner-product or L2"],
            ),
            (
                "long.index",
                vec!["row 0 has length 2.000000", "unit length"],
            ),
            ("nan.index", vec!["row 3 holds NaN (value 5 of 32)"]),
            ("inf.index", vec!["row 7 holds inf (value 0 of 32)"]),
            ("empty.index", vec!["truncated FAISS file", "fourcc"]),
        ]
    };
    for (name, wanted) in cases {
        let err = adopt_fails(&corpus, &index, &file(name));
        assert!(err.contains(s(&file(name))), "{name}: {err}");
        for w in wanted {
            assert!(err.contains(w), "{name}: {w:?} not in {err}");
        }
    }
    // the index built from the good file is still there, unharmed
    let hits = json(&ok(&[
        "search",
        "--index",
        s(&index),
        "--retriever",
        "dense:tiny-contriever",
        "--query",
        "lava",
        "--json",
    ]));
    assert_eq!(hits["hits"].as_array().unwrap().len(), 10);

    // a corpus of several domains: one must be picked
    let err = index_fails(
        &sample(),
        &tmp.path().join("sample-index"),
        &[
            "--dense",
            s(&contriever()),
            "--faiss",
            s(&file("good.index")),
            "-q",
        ],
    );
    assert!(err.contains(s(&file("good.index"))), "{err}");
    assert!(err.contains("pick one with --domains"), "{err}");
    // two dense models: the file does not say whose vectors it holds
    let err = index_fails(
        &corpus,
        &tmp.path().join("two"),
        &[
            "--dense",
            &format!("a={}", s(&contriever())),
            "--dense",
            &format!("b={}", s(&contriever())),
            "--faiss",
            s(&file("good.index")),
            "-q",
        ],
    );
    assert!(err.contains("give one dense model"), "{err}");
}

/// The query vectors `sift search` ranks with: `sift embed --kind query` of `texts`.
fn query_vectors(dir: &Path, texts: &[&str]) -> Vec<Vec<f32>> {
    let input = dir.join("queries.txt");
    fs::write(&input, texts.join("\n")).unwrap();
    let out = dir.join("queries.jsonl");
    ok(&[
        "embed",
        "--model",
        s(&contriever()),
        "--kind",
        "query",
        "--input",
        s(&input),
        "--out",
        s(&out),
        "-q",
    ]);
    fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            json(l)["vector"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

/// What Sift's score (the inner product) is for a faiss distance: the inner product itself,
/// or for L2 (unit passage vectors) |q|^2 + 1 - 2 q.x.
fn sift_score(kind: &str, distance: f64, query: &[f32]) -> f64 {
    if kind.ends_with("_ip") {
        distance
    } else {
        let q2: f64 = query.iter().map(|x| f64::from(*x).powi(2)).sum();
        (q2 + 1.0 - distance) / 2.0
    }
}

#[test]
#[ignore = "needs faiss-cpu (tests/requirements-faiss.txt; scripts/test installs it)"]
fn faiss_written_flat_and_hnsw_indexes_rank_in_sift_as_in_faiss() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = kb(tmp.path(), N);
    let texts = [
        "rivers and stones",
        "lava",
        "passage 7",
        "a question of flow",
    ];
    let queries = query_vectors(tmp.path(), &texts);
    let k = 8;
    let kinds = ["flat_ip", "flat_l2", "hnsw_ip", "hnsw_l2"];
    let vectors = unit_vectors(N, DIM, 11);
    let spec = serde_json::json!({
        "k": k,
        "queries": queries,
        "indexes": kinds.iter().map(|kind| serde_json::json!({
            "name": kind, "type": kind, "vectors": vectors,
        })).collect::<Vec<_>>(),
    });
    let spec_path = tmp.path().join("spec.json");
    fs::write(&spec_path, spec.to_string()).unwrap();
    let out_dir = tmp.path().join("faiss");
    let run = Command::new("python3")
        .arg(repo().join("tests/fixtures/faiss/make_faiss.py"))
        .arg(&spec_path)
        .arg(&out_dir)
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success(),
        "make_faiss.py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let results = json(&fs::read_to_string(out_dir.join("results.json")).unwrap());
    // faiss's HNSW, searched with efSearch >= ntotal, is exact here: its rankings are the
    // flat indexes', which makes them the reference for Sift's
    for (hnsw, flat) in [("hnsw_ip", "flat_ip"), ("hnsw_l2", "flat_l2")] {
        assert_eq!(results[hnsw]["labels"], results[flat]["labels"], "{hnsw}");
    }
    for kind in kinds {
        let file = out_dir.join(format!("{kind}.index"));
        let index = tmp.path().join(format!("index-{kind}"));
        let built = json(&index_ok(
            &corpus,
            &index,
            &[
                "--dense",
                s(&contriever()),
                "--faiss",
                s(&file),
                "--threads",
                "1",
                "--json",
                "-q",
            ],
        ));
        let dense = &built["manifest"]["dense"]["tiny-contriever"];
        assert_eq!(dense["precomputed"], N as u64, "{kind}: {dense}");
        assert_eq!(dense["embedded"], 0, "{kind}");
        for ann in ["exact", "hnsw"] {
            for (q, text) in texts.iter().enumerate() {
                let got = json(&ok(&[
                    "search",
                    "--index",
                    s(&index),
                    "--retriever",
                    "dense:tiny-contriever",
                    "--query",
                    text,
                    "--top-k",
                    &k.to_string(),
                    "--ann",
                    ann,
                    "--json",
                ]));
                let hits = got["hits"].as_array().unwrap();
                let labels = results[kind]["labels"][q].as_array().unwrap();
                let distances = results[kind]["distances"][q].as_array().unwrap();
                assert_eq!(hits.len(), k, "{kind} {ann} {text:?}");
                for (r, hit) in hits.iter().enumerate() {
                    let want_id = format!("p{}", labels[r].as_i64().unwrap());
                    let want = sift_score(kind, distances[r].as_f64().unwrap(), &queries[q]);
                    let score = hit["score"].as_f64().unwrap();
                    assert_eq!(
                        hit["id"],
                        want_id.as_str(),
                        "{kind} {ann} {text:?} rank {r}"
                    );
                    assert!(
                        (score - want).abs() < 1e-5,
                        "{kind} {ann} {text:?} rank {r}: Sift {score}, faiss {want}"
                    );
                }
            }
        }
    }
    // a faiss-written HNSW file cut inside its graph
    let hnsw = fs::read(out_dir.join("hnsw_ip.index")).unwrap();
    let cut = tmp.path().join("cut.index");
    fs::write(&cut, &hnsw[..200]).unwrap();
    let err = adopt_fails(&corpus, &tmp.path().join("cut-index"), &cut);
    assert!(err.contains(s(&cut)), "{err}");
    assert!(err.contains("truncated FAISS file"), "{err}");
    assert!(err.contains("HNSW"), "{err}");
}
