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
            let ev = sift_eval::evaluate(&run, &qrels, &Default::default(), true);
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
    let gme = sift_embed::models::gme::GmeProcessor::new(14, 2, 2, 4, 64);
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

/// Removes the index [`build_sample_index`] made (processes that exit normally call it).
pub fn cleanup() {
    if let Some(src) = BUILT.get()
        && let Some(dir) = src.parent()
    {
        let _ = fs::remove_dir_all(dir);
    }
}

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
        other => panic!("no target {other}"),
    }
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
