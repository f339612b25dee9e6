//! The bodies of Sift's fuzz targets: each feeds arbitrary bytes to one reader as the file it
//! reads, and must return (an error is fine) without panicking, hanging or reading outside
//! the directory it was given.
//!
//! Used twice: by the cargo-fuzz targets in `fuzz/fuzz_targets/` (libFuzzer, coverage-guided,
//! run for minutes or hours: see `fuzz/README.md`) and by `tests/fuzz_smoke.rs`, which runs
//! every target over its seed inputs and a few hundred deterministic mutations of them in
//! the ordinary test suite.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

/// A fuzz target: bytes in, nothing out, never a panic.
pub type Target = fn(&[u8]);

/// Every target by name.
pub const TARGETS: &[(&str, Target)] = &[
    ("beir_corpus", beir_corpus),
    ("beir_qrels", beir_qrels),
    ("trec_run", trec_run),
    ("trec_qrels", trec_qrels),
    ("exclusions", exclusions),
    ("parquet", parquet),
    ("image", image),
    ("safetensors", safetensors),
    ("manifest", manifest),
    ("index_files", index_files),
    ("serve_search", serve_search),
    ("serve_eval", serve_eval),
    ("serve_fuse", serve_fuse),
    ("mcp_messages", mcp_messages),
    ("generator_replies", generator_replies),
];

/// The repository, from the manifest directory of the crate that includes this file
/// (`fuzz/`, or `crates/sift-cli/` for the test suite).
fn repo() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if manifest.ends_with("fuzz") {
        manifest.join("..")
    } else {
        manifest.join("../..")
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// A BEIR `corpus.jsonl`, streamed to the end.
pub fn beir_corpus(data: &[u8]) {
    let dir = scratch();
    fs::write(dir.path().join("corpus.jsonl"), data).unwrap();
    fs::write(dir.path().join("queries.jsonl"), "").unwrap();
    let Ok(corpus) = sift_core::Corpus::open(dir.path()) else {
        return;
    };
    if let Ok(passages) = corpus.passages("x") {
        for p in passages {
            if p.is_err() {
                break;
            }
        }
    }
    let mut w = sift_core::Warnings::new();
    let _ = corpus.examples("x", false, &mut w);
}

/// A BEIR `qrels/test.tsv` (and the same bytes as `queries.jsonl`).
pub fn beir_qrels(data: &[u8]) {
    let dir = scratch();
    fs::create_dir_all(dir.path().join("qrels")).unwrap();
    fs::write(
        dir.path().join("corpus.jsonl"),
        "{\"_id\": \"d\", \"text\": \"t\"}\n",
    )
    .unwrap();
    fs::write(dir.path().join("queries.jsonl"), data).unwrap();
    fs::write(dir.path().join("qrels/test.tsv"), data).unwrap();
    let Ok(corpus) = sift_core::Corpus::open(dir.path()) else {
        return;
    };
    let mut w = sift_core::Warnings::new();
    let _ = corpus.beir_qrels("test", None, &mut w);
    let _ = sift_eval::task1(&corpus, "x", "test");
}

fn with_file(data: &[u8], f: impl FnOnce(&Path)) {
    let dir = scratch();
    let path = dir.path().join("f.txt");
    fs::write(&path, data).unwrap();
    f(&path);
}

/// A TREC run, scored against qrels made of the same bytes.
pub fn trec_run(data: &[u8]) {
    with_file(data, |p| {
        if let Ok(run) = sift_eval::read_run(p) {
            let mut w = sift_core::Warnings::new();
            let qrels = sift_eval::read_qrels(p, &mut w).unwrap_or_default();
            let ev = sift_eval::score_run(&run, &qrels, &Default::default(), true);
            let dir = scratch();
            let _ = sift_eval::write_run(&dir.path().join("out.trec"), &run, "fuzz");
            let _ = ev;
        }
    });
}

/// TREC or BEIR qrels.
pub fn trec_qrels(data: &[u8]) {
    with_file(data, |p| {
        let mut w = sift_core::Warnings::new();
        if let Ok(q) = sift_eval::read_qrels(p, &mut w) {
            let dir = scratch();
            let _ = sift_eval::write_qrels(&dir.path().join("out.qrels"), &q);
        }
    });
}

/// A generator's reply as the rerankers and the answer judge read it: the listwise ranking
/// over lists of several lengths, an endpoint's first-token log probabilities and the yes/no
/// score made of them, the judge's score. What they return must hold as well: each listed
/// candidate once and in range, a yes/no score a log probability (at most 0, never NaN), a
/// judge's score from 0 to 100.
pub fn generator_replies(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for n in [0, 1, 3, 20, 100] {
        if let Some(p) = sift_retrieve::rerank::parse_permutation(&text, n) {
            let mut seen = vec![false; n];
            for &i in &p.order {
                assert!(i < n && !seen[i], "over {n}: {:?}", p.order);
                seen[i] = true;
            }
        }
    }
    if let Ok(top) = sift_generate::parse_first_token_logprobs(&text) {
        assert!(!top.is_empty());
        for (yes, no) in [("yes", "no"), ("True", "False")] {
            let s = sift_retrieve::rerank::yes_no_from_logprobs(&top, yes, no);
            assert!(s <= 0.0, "{s} from {top:?}");
        }
    }
    if let Some(v) = sift_generate::rag::parse_score(&text) {
        assert!((0.0..=100.0).contains(&v), "{v}");
    }
}

/// An exclusion list.
pub fn exclusions(data: &[u8]) {
    with_file(data, |p| {
        let _ = sift_eval::read_exclusions(p);
    });
}

/// One parquet file, read as every MM-BRIGHT config of a domain: passages, examples of both
/// kinds, corpus and query images (with and without their bytes).
pub fn parquet(data: &[u8]) {
    let dir = scratch();
    for config in [
        "documents",
        "examples",
        "examples_multimodal",
        "document_images",
        "examples_images",
    ] {
        fs::create_dir_all(dir.path().join(config)).unwrap();
        fs::write(dir.path().join(config).join("d.parquet"), data).unwrap();
    }
    let Ok(corpus) = sift_core::Corpus::open(dir.path()) else {
        return;
    };
    if let Ok(passages) = corpus.passages("d") {
        for p in passages {
            if p.is_err() {
                break;
            }
        }
    }
    let mut w = sift_core::Warnings::new();
    let _ = corpus.examples("d", false, &mut w);
    let _ = corpus.examples("d", true, &mut w);
    for images in [
        corpus.images("d"),
        corpus.image_paths("d"),
        corpus.query_images("d"),
    ]
    .into_iter()
    .flatten()
    {
        for i in images {
            if i.is_err() {
                break;
            }
        }
    }
    let _ = corpus.fingerprint("d");
}

/// An encoded image: decoded as transformers' processors and GME's loader would, then
/// preprocessed for CLIP, SigLIP and GME.
pub fn image(data: &[u8]) {
    use sift_embed::image::{Alpha, ImageProcessor, decode_rgb, decode_rgb_with};
    if let Ok(img) = decode_rgb(data) {
        let _ = ImageProcessor::clip(32).preprocess(&img);
        let _ = ImageProcessor::siglip(24).preprocess(&img);
    }
    let _ = decode_rgb_with(data, Alpha::Drop);
    let gme = sift_embed::families::gme::GmeProcessor::new(14, 2, 2, 4, 64);
    let _ = gme.prepare(data, None);
    let _ = gme.prepare(data, Some(8));
}

/// A `model.safetensors` beside a real tiny CLIP config and tokenizer: loading must fail
/// cleanly (wrong names, shapes, dtypes, offsets, header) or succeed.
pub fn safetensors(data: &[u8]) {
    let dir = scratch();
    let fixture = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
    for f in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
    ] {
        fs::copy(fixture.join(f), dir.path().join(f)).unwrap();
    }
    fs::write(dir.path().join("model.safetensors"), data).unwrap();
    let Ok(files) = sift_embed::ModelFiles::from_dir(dir.path()) else {
        return;
    };
    let _ = sift_embed::VisionEmbedder::load(
        &files,
        &candle_core::Device::Cpu,
        sift_embed::VisionOptions::default(),
    );
}

/// A `manifest.json` of an otherwise real index.
pub fn manifest(data: &[u8]) {
    let dir = scratch();
    let index = dir.path().join("idx");
    build_sample_index(&index);
    fs::write(index.join("manifest.json"), data).unwrap();
    if let Ok(ix) = sift_index::IndexDir::open(&index) {
        for domain in ix.manifest().domains.keys() {
            if let Ok(b) = ix.bm25(domain) {
                let mut sc = b.scratch();
                let _ = b.search(&mut sc, "light energy", 10, &Default::default(), &[]);
            }
        }
    }
}

static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// A small real BM25 index of one sample domain, built once per process and copied.
fn build_sample_index(to: &Path) {
    let src = BUILT.get_or_init(|| {
        let src = scratch().keep().join("index");
        let corpus = sift_core::Corpus::open(repo().join("corpora/sample")).unwrap();
        let options = sift_index::BuildOptions {
            threads: 1,
            ..Default::default()
        };
        sift_index::IndexDir::build(
            &src,
            &corpus,
            &["gis".to_string()],
            &options,
            &[],
            &sift_index::NoProgress,
        )
        .unwrap();
        src
    });
    copy_dir(src, to);
}

/// Removes the indexes [`build_sample_index`] and [`shared`] made (processes that exit
/// normally call it).
pub fn cleanup() {
    for built in [BUILT.get(), SERVED.get().map(|(dir, _)| dir)] {
        if let Some(src) = built
            && let Some(dir) = src.parent()
        {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

static SERVED: std::sync::OnceLock<(PathBuf, std::sync::Arc<sift_serve::Shared>)> =
    std::sync::OnceLock::new();

/// `sift serve`'s service over the sample corpus (two domains, BM25 and the tiny CLIP,
/// passage texts and images from the corpus), loaded once per process.
fn shared() -> &'static std::sync::Arc<sift_serve::Shared> {
    &SERVED
        .get_or_init(|| {
            let index = scratch().keep().join("index");
            let sample = repo().join("corpora/sample");
            let corpus = sift_core::Corpus::open(&sample).unwrap();
            let clip = repo().join("models/fixtures/vision/tiny-clip-quickgelu");
            let spec = clip.display().to_string();
            let model = sift_embed::Embedder::load(&spec, &Default::default()).unwrap();
            let sides =
                sift_retrieve::Sides::new(&model, sift_retrieve::Indexed::PassagesAndImages);
            let dense = [sides.dense_build(sift_retrieve::slug(&model), spec)];
            let options = sift_index::BuildOptions {
                threads: 1,
                ..Default::default()
            };
            sift_index::IndexDir::build(
                &index,
                &corpus,
                &["biology".to_string(), "gis".to_string()],
                &options,
                &dense,
                &sift_index::NoProgress,
            )
            .unwrap();
            let mut config = sift_service::ServeConfig::new(&index);
            config.corpus = Some(sample);
            let service = sift_service::Service::load(&config).unwrap();
            let options = sift_serve::HttpOptions {
                access_log: sift_serve::AccessLog::Off,
                max_concurrency: 2,
                ..Default::default()
            };
            (index, sift_serve::Shared::new(service, &options))
        })
        .1
}

/// A request's answer: an error must be the request's fault (4xx), never the service's.
fn answered<T>(what: &str, r: Result<T, sift_service::ApiError>) {
    if let Err(e) = r {
        assert!(
            e.kind.status() < 500,
            "{what}: a {} answer to a request: {e}",
            e.kind.status()
        );
    }
}

/// The body of `POST /v1/search` (and the Serper and local-tool shapes, which take the same
/// texts), parsed as the service parses it and searched.
pub fn serve_search(data: &[u8]) {
    let svc = shared().service();
    if let Ok(req) = sift_service::api::parse_json::<sift_service::api::SearchRequest>(data) {
        answered("search", svc.search(&req));
    }
    if let Ok(req) = sift_service::api::parse_json::<sift_service::api::SerperQuery>(data) {
        answered(
            "serper",
            sift_serve::shapes::serper_search(svc, &req, "http://x"),
        );
        answered(
            "serper images",
            sift_serve::shapes::serper_images(svc, &req, "http://x"),
        );
    }
    if let Ok(req) = sift_service::api::parse_json::<sift_service::api::SerperLens>(data) {
        answered(
            "serper lens",
            sift_serve::shapes::serper_lens(svc, &req, "http://x"),
        );
    }
    // the bytes as a SerpAPI query string, and as a URL given to the reader
    if let Ok(text) = std::str::from_utf8(data) {
        let params: std::collections::BTreeMap<String, String> = text
            .split('&')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Err(e) = sift_serve::shapes::serpapi(svc, &params, "http://x", text) {
            assert!(
                e.status < 500,
                "serpapi: a {} answer: {}",
                e.status,
                e.message
            );
        }
        if let Some(
            sift_service::pages::Link::Page { domain, id }
            | sift_service::pages::Link::Image { domain, id },
        ) = sift_service::pages::own_link(text)
        {
            answered("page", svc.page(&domain, &id));
        }
    }
    if let Ok(req) = sift_service::api::parse_json::<sift_service::api::LocalSearchRequest>(data) {
        for tool in [
            sift_serve::shapes::LocalTool::Text,
            sift_serve::shapes::LocalTool::TextToImage,
            sift_serve::shapes::LocalTool::Image,
        ] {
            answered("local", sift_serve::shapes::local(svc, &req, tool));
        }
    }
}

/// The body of `POST /v1/eval`, parsed and scored.
pub fn serve_eval(data: &[u8]) {
    if let Ok(req) = sift_service::api::parse_json::<sift_service::api::EvalRequest>(data) {
        answered("eval", shared().service().eval(&req));
    }
}

/// The body of `POST /v1/fuse`, parsed and fused.
pub fn serve_fuse(data: &[u8]) {
    if let Ok(req) = sift_service::api::parse_json::<sift_service::api::FuseRequest>(data) {
        answered("fuse", shared().service().fuse(&req));
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// MCP messages, one per line, after an `initialize` handshake, served as `sift serve
/// --mcp-stdio` serves them (tool calls run searches); every line that comes back must be
/// one JSON-RPC message, and the server must end when its input does.
pub fn mcp_messages(data: &[u8]) {
    let _ = mcp_exchange(data);
}

/// [`mcp_messages`]' work: the messages that came back.
pub fn mcp_exchange(data: &[u8]) -> Vec<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut input = MCP_HANDSHAKE.to_vec();
    input.extend_from_slice(data);
    input.push(b'\n');
    runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (server_read, server_write) = tokio::io::split(server);
        let serving = tokio::spawn(sift_serve::mcp::serve_lines(
            shared().clone(),
            server_read,
            server_write,
        ));
        let (mut from_server, mut to_server) = tokio::io::split(&mut client);
        let talk = async {
            let write = async {
                let _ = to_server.write_all(&input).await;
                let _ = to_server.shutdown().await;
            };
            let mut out = Vec::new();
            let read = from_server.read_to_end(&mut out);
            let (_, read) = tokio::join!(write, read);
            read.map(|_| out)
        };
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), talk)
            .await
            .expect("the MCP server ended within 60 s of its input")
            .unwrap_or_default();
        let served = serving.await;
        assert!(served.is_ok(), "the MCP server panicked: {served:?}");
        String::from_utf8_lossy(&out)
            .lines()
            .map(|line| {
                let v: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                assert_eq!(v["jsonrpc"], "2.0", "{line}");
                v
            })
            .collect()
    })
}

const MCP_HANDSHAKE: &[u8] = b"{\"jsonrpc\": \"2.0\", \"id\": 0, \"method\": \"initialize\", \"params\": {\"protocolVersion\": \"2025-06-18\", \"capabilities\": {}, \"clientInfo\": {\"name\": \"fuzz\", \"version\": \"1\"}}}\n{\"jsonrpc\": \"2.0\", \"method\": \"notifications/initialized\"}\n";

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// The files of a built index, one replaced by the input: the first byte chooses which (a
/// tantivy file, `ids.json`, a dense `meta.json`, vectors or HNSW graph), the rest is its
/// new content. Opening and searching must fail cleanly or work.
pub fn index_files(data: &[u8]) {
    let Some((&which, content)) = data.split_first() else {
        return;
    };
    let dir = scratch();
    // dense vectors of a domain: written directly (no model needed)
    let dense = dir.path().join("dense");
    let dim = 8;
    let vectors: Vec<f32> = (0..40 * dim)
        .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
        .collect();
    let ids: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
    let _ = sift_index::write_dense(
        &dense,
        "m",
        dim,
        &vectors,
        &ids,
        sift_index::VectorDtype::F32,
        sift_index::HnswParams::default(),
    );
    let index = dir.path().join("idx");
    build_sample_index(&index);
    let manifest = sift_index::Manifest::read(&index).unwrap();
    let bm25 = index.join(&manifest.generation).join("bm25/gis");
    let mut files: Vec<PathBuf> = fs::read_dir(&bm25)
        .unwrap()
        .map(|e| e.unwrap().path())
        .chain(["meta.json", "vectors.f32", "graph.bin", "ids.json"].map(|f| dense.join(f)))
        .collect();
    files.sort();
    let target = &files[which as usize % files.len()];
    fs::write(target, content).unwrap();
    if let Ok(d) = sift_index::DenseDomain::open(&dense) {
        let q = vec![0.25f32; d.meta().dim];
        let _ = d.search(&q, 5, sift_index::AnnMode::Hnsw(16), &[]);
        let _ = d.search(&q, 5, sift_index::AnnMode::Exact, &[1, 2]);
    }
    if let Ok(ix) = sift_index::IndexDir::open(&index)
        && let Ok(b) = ix.bm25("gis")
    {
        let mut sc = b.scratch();
        let _ = b.search(
            &mut sc,
            "map projection raster gis",
            10,
            &Default::default(),
            &[],
        );
    }
}

/// Seed inputs of a target: the real files it reads, from the repository.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let r = repo();
    let read = |p: &str| fs::read(r.join(p)).unwrap_or_default();
    let run = b"q1 Q0 d1 1 2.5 x\nq1 Q0 d2 2 1.25 x\nq2 Q0 d1 1 -0.5 x\n".to_vec();
    let qrels = b"q1 0 d1 2\nq1 0 d3 1\nq2 0 d2 0\n".to_vec();
    match target {
        "beir_corpus" => vec![
            b"{\"_id\": \"d1\", \"title\": \"T\", \"text\": \"x y\"}\n{\"_id\": 2, \"text\": \"z\"}\n".to_vec(),
            b"\xef\xbb\xbf{\"_id\": \"a b\", \"text\": null}\n\n{}\n".to_vec(),
        ],
        "beir_qrels" => vec![
            b"query-id\tcorpus-id\tscore\nq1\td\t1\nq2\td\t2.0\n".to_vec(),
            b"{\"_id\": \"q1\", \"text\": \"t\"}\n".to_vec(),
        ],
        "trec_run" => vec![run],
        "trec_qrels" => vec![qrels, b"query-id\tcorpus-id\tscore\nq\td\t1\n".to_vec()],
        "exclusions" => vec![b"q1 d1\nq2 d2\n".to_vec()],
        "parquet" => vec![
            read("corpora/sample/documents/gis.parquet"),
            read("corpora/sample/examples_multimodal/physics.parquet"),
            read("corpora/sample/document_images/gis.parquet"),
        ],
        "image" => [
            "models/fixtures/vision/images/checker_gray_20x26.png",
            "models/fixtures/vision/images/stripes_rgba_40x40.png",
            "models/fixtures/gme/images/gray_70x126.png",
        ]
        .iter()
        .map(|p| read(p))
        .chain(jpegs_webp_gif_bmp())
        .chain(pillow_cases())
        .collect(),
        "safetensors" => vec![read("models/fixtures/vision/tiny-clip-quickgelu/model.safetensors")],
        "manifest" => {
            let dir = scratch();
            let index = dir.path().join("idx");
            build_sample_index(&index);
            vec![fs::read(index.join("manifest.json")).unwrap()]
        }
        "index_files" => (0u8..12).map(|i| vec![i, b'{', b'}']).collect(),
        "serve_search" => serve_search_seeds(),
        "serve_eval" => [
            r#"{"run": {"q1": [{"id": "d1", "score": 2.5}, {"id": "d2", "score": 1.0}], "q2": [{"id": "d3", "score": 0.5}]}, "qrels": {"q1": {"d1": 2, "d3": 1}, "q2": {"d3": 0, "d4": 1}}}"#,
            r#"{"run": {"q": [{"id": "a", "score": 1e308}, {"id": "a", "score": -1e308}]}, "qrels": {"q": {"a": -1}, "r": {}}}"#,
            r#"{"run": {}, "qrels": {}}"#,
        ]
        .map(|s| s.as_bytes().to_vec())
        .to_vec(),
        "serve_fuse" => [
            r#"{"lists": [[{"id": "d1", "score": 2.5}, {"id": "d2", "score": 1.0}], [{"id": "d2", "score": 9}, {"id": "d3", "score": 3}]], "method": "rrf", "top_k": 3}"#,
            r#"{"lists": [[{"id": "a", "score": 1}], [{"id": "a", "score": 1}]], "method": "weighted:0.7,0.3"}"#,
            r#"{"lists": [[], [{"id": "x", "score": -0.0}]], "method": "rrf:1", "top_k": 1000}"#,
        ]
        .map(|s| s.as_bytes().to_vec())
        .to_vec(),
        "mcp_messages" => mcp_seeds(),
        "generator_replies" => [
            // a listwise reply as BRIGHT's prompt asks for it, and a bare trailing list
            "The most helpful first.\n```json\n[3, 1, 2]\n```",
            "[2] > [1]. Final ranking: [2, 1, 2, 7, \"x\"]",
            // first-token log probabilities: OpenAI's shape and llama.cpp's server's
            r#"{"choices":[{"message":{"role":"assistant","content":"Yes"},"logprobs":{"content":[{"token":"Yes","logprob":-0.3,"bytes":[89,101,115],"top_logprobs":[{"token":"Yes","logprob":-0.3},{"token":"No","logprob":-1.6},{"token":" yes","logprob":-2.5}]}]}}]}"#,
            r#"{"choices":[{"message":{"role":"assistant","content":"no"},"logprobs":{"content":[{"id":2152,"token":"no","bytes":[110,111],"logprob":-0.0004,"top_logprobs":[{"id":9693,"token":"True","bytes":[84],"logprob":-7.9},{"id":13,"token":".","bytes":[46],"logprob":-3.4028234663852886e38}]}]}}]}"#,
            // a misbehaving endpoint: a "log probability" above 0
            r#"{"choices":[{"logprobs":{"content":[{"token":"yes","logprob":800.0,"top_logprobs":[{"token":"no","logprob":-0.5}]}]}}]}"#,
            // the answer judge
            "The answer covers the key points.\n**Score:** 85/100",
        ]
        .map(|s| s.as_bytes().to_vec())
        .to_vec(),
        other => panic!("no target {other}"),
    }
}

/// `POST /v1/search` bodies of the shapes README and openapi.json show: text, corpus images
/// by id, images as base64 and data URLs, crops, every candidate kind and retriever.
fn serve_search_seeds() -> Vec<Vec<u8>> {
    use base64::Engine;
    let corpus = sift_core::Corpus::open(repo().join("corpora/sample")).unwrap();
    let image_id = corpus
        .image_paths("biology")
        .unwrap()
        .flatten()
        .next()
        .map(|r| r.path)
        .unwrap_or_default();
    let png = fs::read(repo().join("models/fixtures/vision/images/checker_gray_20x26.png"))
        .unwrap_or_default();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    [
        serde_json::json!({"query": "how do plants make sugar", "domain": "biology", "top_k": 5}),
        serde_json::json!({"query": "map projection", "index_name": "gis", "k": 3,
                           "retriever": "dense:tiny-clip-quickgelu", "candidates": "images"}),
        serde_json::json!({"query": "leaf", "domain": "biology", "candidates": "pairs",
                           "images": [{"image_id": image_id}], "fusion": "first",
                           "max_text_chars": 40}),
        serde_json::json!({"domain": "biology", "candidates": "images",
                           "images": [{"data": b64, "bbox": [0, 0, 500, 1000]}]}),
        serde_json::json!({"query": "cells", "domain": "biology", "retriever": "bm25",
                           "images": [{"data": format!("data:image/png;base64,{b64}")}]}),
        serde_json::json!({"q": "photosynthesis", "num": 3, "domain": "biology"}),
        serde_json::json!({"query": "chlorophyll", "top_k": 2, "domain": "biology"}),
    ]
    .iter()
    .map(|v| v.to_string().into_bytes())
    .collect()
}

/// MCP lines: tool calls of every tool, listings, a ping, and lines that are not messages.
fn mcp_seeds() -> Vec<Vec<u8>> {
    let call = |id: u32, name: &str, args: serde_json::Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                           "params": {"name": name, "arguments": args}})
        .to_string()
    };
    let lines = [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
        call(
            2,
            "search",
            serde_json::json!({"query": "how do plants make sugar", "domain": "biology", "top_k": 2}),
        ),
        call(
            3,
            "get_document",
            serde_json::json!({"docid": "nope", "index_name": "biology"}),
        ),
        call(
            4,
            "image_search",
            serde_json::json!({"query": "leaf", "k": 2, "domain": "biology"}),
        ),
        call(5, "list_indexes", serde_json::json!({})),
        call(
            6,
            "fuse_search_results",
            serde_json::json!({"lists": [[{"id": "a", "score": 1}]], "method": "rrf"}),
        ),
        call(
            7,
            "eval_hits",
            serde_json::json!({"run": {"q": [{"id": "a", "score": 1}]}, "qrels": {"q": {"a": 1}}}),
        ),
        call(
            8,
            "local_text_search",
            serde_json::json!({"query": "cells", "top_k": 2, "domain": "biology"}),
        ),
        call(
            9,
            "crop_search",
            serde_json::json!({"image": "nope", "bbox": [0, 0, 10, 10], "domain": "biology"}),
        ),
        call(10, "search", serde_json::json!("not an object")),
        serde_json::json!({"jsonrpc": "2.0", "id": 11, "method": "ping"}).to_string(),
        "not json".to_string(),
    ];
    vec![
        lines[..6].join("\n").into_bytes(),
        lines[6..].join("\n").into_bytes(),
        lines[1].clone().into_bytes(),
    ]
}

/// Images of the other formats, taken from the sample corpus.
fn jpegs_webp_gif_bmp() -> Vec<Vec<u8>> {
    let corpus = sift_core::Corpus::open(repo().join("corpora/sample")).unwrap();
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for domain in ["biology", "gis", "physics"] {
        for r in corpus.images(domain).unwrap().flatten() {
            let kind = image_kind(&r.bytes);
            if seen.insert(kind) {
                out.push(r.bytes);
            }
        }
    }
    out
}

/// Small images of the cases decoded as Pillow decodes them: RLE8 / RLE4 BMPs (bottom-up
/// and top-down, deltas, absolute runs), an OS/2 v2 palette BMP, a GIF without a colour
/// table, and a sample JPEG given an EXIF orientation and a short Adobe APP14 segment.
fn pillow_cases() -> Vec<Vec<u8>> {
    let bmp = |header: u32, h: i32, bits: u16, compression: u32, px: &[u8]| {
        let palette: Vec<u8> = (0..16u8)
            .flat_map(|i| [i * 16, 255 - i * 16, i, 0])
            .collect();
        let off = 14 + header + palette.len() as u32;
        let mut b = b"BM".to_vec();
        b.extend((off + px.len() as u32).to_le_bytes());
        b.extend([0; 4]);
        b.extend(off.to_le_bytes());
        b.extend(header.to_le_bytes());
        b.extend(6i32.to_le_bytes());
        b.extend(h.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(bits.to_le_bytes());
        b.extend(compression.to_le_bytes());
        b.extend((px.len() as u32).to_le_bytes());
        b.extend([0; 8]);
        b.extend(16u32.to_le_bytes());
        b.extend(vec![0; header as usize - 36]);
        b.extend(palette);
        b.extend(px);
        b
    };
    let rle = [3, 1, 0, 0, 0, 2, 1, 1, 0, 3, 2, 1, 2, 0, 2, 5, 0, 0, 0, 1];
    let mut out = vec![
        bmp(40, 3, 8, 1, &rle),
        bmp(40, -3, 4, 2, &rle),
        bmp(64, 2, 8, 0, &[1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0]),
        // GIF87a, 2 x 1 screen without a colour table, one frame of indices [0, 1]
        b"GIF87a\x02\x00\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x02\x00\x01\x00\x00\x02\x02\x44\x0a\x00;"
            .to_vec(),
    ];
    if let Some(jpeg) = jpegs_webp_gif_bmp()
        .into_iter()
        .find(|b| image_kind(b) == "jpeg")
    {
        // APP1 Exif: big-endian IFD0 with Orientation (SHORT) 6; APP14 "Adobe" 9 bytes long
        let tiff = b"MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0";
        let mut j = vec![0xFF, 0xD8, 0xFF, 0xE1];
        j.extend(((tiff.len() + 8) as u16).to_be_bytes());
        j.extend(b"Exif\0\0");
        j.extend(tiff);
        j.extend([0xFF, 0xEE, 0, 11]);
        j.extend(b"Adobe\0d\0\0");
        j.extend(&jpeg[2..]);
        out.push(j);
    }
    out
}

fn image_kind(b: &[u8]) -> &'static str {
    match b {
        [0xFF, 0xD8, ..] => "jpeg",
        [0x89, b'P', ..] => "png",
        [b'R', b'I', b'F', b'F', ..] => "webp",
        [b'G', b'I', b'F', ..] => "gif",
        [b'B', b'M', ..] => "bmp",
        _ => "other",
    }
}
