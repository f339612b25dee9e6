"""sift_ir against the sift binary: the same index, hits, evaluation numbers, runs and
vectors (bit for bit), plus errors and progress from Rust threads."""

from __future__ import annotations

import io
import json
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run_sift, sift_json

import sift_ir

CLIP = str(ROOT / "models" / "fixtures" / "vision" / "tiny-clip-quickgelu")
IMAGES = ROOT / "models" / "fixtures" / "vision" / "images"
QUERIES = {
    "biology": "how do plants make sugar from light",
    "gis": "which map projection keeps areas equal",
    "physics": "why does a shock wave heat the gas",
}


@pytest.fixture(scope="module")
def cli_index(tmp_path_factory, sift_bin, sample, minilm_dir) -> Path:
    """The sample indexed by `sift index` with BM25, MiniLM and the tiny CLIP."""
    path = tmp_path_factory.mktemp("cli") / "index"
    run_sift(sift_bin, "index", "--corpus", str(sample), "--index", str(path),
             "--dense", minilm_dir, "--dense", CLIP, "--quiet")
    return path


@pytest.fixture(scope="module")
def py_index(tmp_path_factory, sample, minilm_dir) -> sift_ir.Index:
    """The sample indexed by Index.build with the same models, progress reported."""
    path = tmp_path_factory.mktemp("py") / "index"
    calls = []
    index = sift_ir.Index.build(sample, path, dense=[minilm_dir, CLIP],
                                progress=lambda *a: calls.append(a))
    # phases start and finish, and are reported from the engine's threads
    assert any(done == 0 for _, done, _ in calls), calls[:5]
    assert any(label.startswith("biology") for label, _, _ in calls), calls[:5]
    return index


def _dense(index_dir: Path, model: str) -> str:
    manifest = json.loads((index_dir / "manifest.json").read_text())
    (slug,) = [s for s, d in manifest["dense"].items() if d["model"] == model]
    return f"dense:{slug}"


def test_build_writes_the_index_sift_index_writes(cli_index, py_index):
    cli = json.loads((cli_index / "manifest.json").read_text())
    py = json.loads(py_index.manifest_json)
    assert py["domains"] == cli["domains"]
    for slug, d in cli["dense"].items():
        assert py["dense"][slug]["fingerprint"] == d["fingerprint"]
        assert py["dense"][slug]["model_hash"] == d["model_hash"]
    assert sorted(py_index.domains) == ["biology", "gis", "physics"]
    assert py_index.retrievers[0] == "bm25" and len(py_index.retrievers) == 3


@pytest.mark.parametrize("domain", sorted(QUERIES))
def test_search_equals_sift_search(sift_bin, sample, cli_index, py_index, domain):
    index = sift_ir.Index.open(cli_index, corpus=sample)
    minilm = _dense(cli_index, "all-MiniLM-L6-v2")
    for retriever in ["bm25", minilm, f"hybrid:bm25+{minilm}"]:
        want = sift_json(sift_bin, "search", "--index", str(cli_index), "--domain", domain,
                         "--query", QUERIES[domain], "--retriever", retriever, "--top-k", "10")
        for idx in (index, py_index):
            got = idx.search(QUERIES[domain], retriever=retriever, domain=domain, top_k=10)
            assert [h.id for h in got] == [h["id"] for h in want["hits"]], retriever
            assert [h.rank for h in got] == [h["rank"] for h in want["hits"]]
            np.testing.assert_allclose([h.score for h in got],
                                       [h["score"] for h in want["hits"]], rtol=0, atol=1e-6)
            assert all(h.domain == domain and h.passage == h.id for h in got)
    # texts come from the corpus: the passage as indexed
    hit = index.search(QUERIES[domain], domain=domain, top_k=1)[0]
    docs = {d["id"]: d["content"] for d in _documents(sample, domain)}
    assert hit.text == docs[hit.id]


def _documents(sample: Path, domain: str) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(sample / "documents" / f"{domain}.parquet").to_pylist()


def test_image_search_equals_sift_search(sift_bin, sample, cli_index):
    clip = _dense(cli_index, "tiny-clip-quickgelu")
    image = IMAGES / "shapes_rgb_50x37.png"
    index = sift_ir.Index.open(cli_index, corpus=sample)
    for candidates in ["images", "pairs", "passages"]:
        want = sift_json(sift_bin, "search", "--index", str(cli_index), "--domain", "gis",
                         "--query", "a map", "--image", str(image), "--retriever", clip,
                         "--candidates", candidates, "--corpus", str(sample), "--top-k", "5")
        from PIL import Image

        for img in (str(image), image.read_bytes(), Image.open(image)):
            got = index.search("a map", images=[img], retriever=clip, domain="gis",
                               top_k=5, candidates=candidates)
            assert [h.id for h in got] == [h["id"] for h in want["hits"]], candidates
            np.testing.assert_allclose([h.score for h in got],
                                       [h["score"] for h in want["hits"]], rtol=0, atol=1e-6)
        if candidates != "passages":
            assert all(h.image for h in got), got


def test_evaluate_equals_sift_eval(sift_bin, sample, cli_index, tmp_path):
    minilm = _dense(cli_index, "all-MiniLM-L6-v2")
    clip = _dense(cli_index, "tiny-clip-quickgelu")
    retrievers = ["bm25", minilm, clip]
    args = ["eval", "--corpus", str(sample), "--index", str(cli_index), "--task", "all",
            "--quiet", "--out", str(tmp_path / "cli")]
    for r in retrievers:
        args += ["--retriever", r]
    want = sift_json(sift_bin, *args)
    report = sift_ir.evaluate(sample, cli_index, tasks="all", retrievers=retrievers,
                              out=tmp_path / "py")
    assert report.json == want
    rows = report.to_dicts()
    assert len(rows) == sum(len(j["per_domain"]) for j in want["reports"])
    assert report.ndcg10("1", "bm25", "biology") == want["reports"][0]["per_domain"]["biology"]["ndcg@10"]
    # runs and qrels written as the CLI writes them
    for sub in ["runs", "qrels"]:
        cli_files = sorted(p.name for p in (tmp_path / "cli" / sub).iterdir())
        assert cli_files and cli_files == sorted(p.name for p in (tmp_path / "py" / sub).iterdir())
        for name in cli_files:
            assert (tmp_path / "py" / sub / name).read_bytes() == (tmp_path / "cli" / sub / name).read_bytes(), name
    pd = pytest.importorskip("pandas")
    frame = report.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(rows)
    assert {"task", "label", "domain", "queries", "ndcg@10"} <= set(frame.columns)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_text_vectors_equal_sift_embed_bit_for_bit(sift_bin, sample, minilm_dir, tmp_path):
    texts = [d["content"] for d in _documents(sample, "physics")] + list(QUERIES.values())
    inputs = tmp_path / "texts.jsonl"
    inputs.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    model = sift_ir.Embedder(minilm_dir)
    assert (model.dim, model.family, model.dtype) == (384, "text", "f32")
    for kind in ["passage", "query"]:
        out = tmp_path / f"{kind}.npy"
        run_sift(sift_bin, "embed", "--model", minilm_dir, "--input", str(inputs),
                 "--kind", kind, "--out", str(out), "--quiet")
        got = model.embed_texts(texts, kind=kind)
        assert got.dtype == np.float32 and got.shape == (len(texts), 384)
        assert got.flags["C_CONTIGUOUS"] and got.flags["WRITEABLE"]
        np.testing.assert_array_equal(_bits(got), _bits(np.load(out)))


def test_image_vectors_equal_sift_embed_bit_for_bit(sift_bin, tmp_path):
    from PIL import Image

    paths = sorted(IMAGES.glob("*.png"))
    listing = tmp_path / "images.txt"
    listing.write_text("".join(f"{p}\n" for p in paths))
    out = tmp_path / "images.npy"
    run_sift(sift_bin, "embed", "--model", CLIP, "--image", "--input", str(listing),
             "--out", str(out), "--quiet")
    want = _bits(np.load(out))
    model = sift_ir.Embedder(CLIP)
    assert model.sees_images
    for images in ([str(p) for p in paths], [p.read_bytes() for p in paths], paths):
        np.testing.assert_array_equal(_bits(model.embed_images(images)), want)
    # PIL images go in as their pixels (RGBA kept, as a file of them would be)
    pil = [Image.open(p) for p in paths]
    rgb_only = [i for i, im in enumerate(pil) if im.mode in ("RGB", "L")]
    got = _bits(model.embed_images([pil[i] for i in rgb_only]))
    np.testing.assert_array_equal(got, want[rgb_only])
    # a text with images: normalise(text + mean of the images), a unit vector
    joint = model.embed_joint("a map", [str(paths[0]), str(paths[1])])
    t = model.embed_texts(["a map"], kind="query")[0]
    m = model.embed_images([str(paths[0]), str(paths[1])]).mean(axis=0)
    expect = (t + m) / np.linalg.norm(t + m)
    np.testing.assert_allclose(joint, expect, atol=1e-6)


def test_errors_are_sift_errors_with_sift_messages(tmp_path, minilm_dir):
    with pytest.raises(sift_ir.SiftError, match="not a Sift index"):
        sift_ir.Index.open(tmp_path)
    with pytest.raises(sift_ir.SiftError, match="dtype \"f8\""):
        sift_ir.Embedder(minilm_dir, dtype="f8")
    with pytest.raises(sift_ir.SiftError, match=str(tmp_path / "missing")):
        sift_ir.Embedder(str(tmp_path / "missing"))
    model = sift_ir.Embedder(minilm_dir)
    with pytest.raises(sift_ir.SiftError, match="text model"):
        model.embed_images([b"not an image"])
    with pytest.raises(sift_ir.SiftError, match="kind"):
        model.embed_texts(["x"], kind="answer")
    clip = sift_ir.Embedder(CLIP)
    with pytest.raises(sift_ir.SiftError, match=r"images\[1\]: cannot decode"):
        clip.embed_images([str(IMAGES / "shapes_rgb_50x37.png"), b"not an image"])
    with pytest.raises(sift_ir.SiftError, match="no domain|not in the index"):
        sift_ir.Index.build(ROOT / "corpora" / "sample", tmp_path / "i", domains=["chemistry"])


def test_heavy_calls_release_the_gil(minilm_dir):
    """Another Python thread runs while the engine embeds (it would wait for the GIL
    otherwise)."""
    model = sift_ir.Embedder(minilm_dir)
    texts = [f"passage number {i} about shock waves and boundary layers" for i in range(256)]
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=tick)
    t.start()
    before = len(ticks)
    model.embed_texts(texts)
    during = len(ticks) - before
    stop.set()
    t.join()
    assert during > 10, during


def test_pil_image_roundtrip_keeps_pixels():
    from PIL import Image

    img = Image.open(IMAGES / "gradient_rgb_64x64.png")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    clip = sift_ir.Embedder(CLIP)
    np.testing.assert_array_equal(_bits(clip.embed_images([img])), _bits(clip.embed_images([buf.getvalue()])))


def _write_vectors(out: Path, model: sift_ir.Embedder, sample: Path, drop=None, extra=None):
    """Vectors of the sample's passages as pyarrow writes them (list<float>, not the
    fixed-size lists Ray writes), with the manifest `sift index --vectors` reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    domains = {}
    for domain in ["biology", "gis", "physics"]:
        docs = [d for d in _documents(sample, domain) if d["id"] != drop]
        ids = [d["id"] for d in docs] + ([extra] if extra else [])
        texts = [d["content"] for d in docs] + (["stray"] if extra else [])
        vectors = model.embed_texts(texts)
        (out / domain / "passages").mkdir(parents=True)
        half = len(ids) // 2  # two files per domain
        for i, (a, b) in enumerate([(0, half), (half, len(ids))]):
            table = pa.table({"id": ids[a:b], "vector": [list(v) for v in vectors[a:b]]},
                             schema=pa.schema([("id", pa.string()), ("vector", pa.list_(pa.float32()))]))
            pq.write_table(table, out / domain / "passages" / f"part-{i}.parquet")
        domains[domain] = {"passages": len(ids)}
    manifest = {"format": 1, "model": model.name, "fingerprint": model.fingerprint,
                "model_hash": model.model_hash, "profile": model.profile, "dim": model.dim,
                "domains": domains}
    (out / "sift-vectors.json").write_text(json.dumps(manifest))
    return out


def test_index_from_precomputed_vectors(sift_bin, sample, minilm_dir, cli_index, tmp_path):
    model = sift_ir.Embedder(minilm_dir)
    vectors = _write_vectors(tmp_path / "vectors", model, sample)
    built = sift_json(sift_bin, "index", "--corpus", str(sample), "--index", str(tmp_path / "i"),
                      "--dense", minilm_dir, "--vectors", str(vectors), "--quiet")
    (info,) = built["manifest"]["dense"].values()
    assert (info["precomputed"], info["embedded"]) == (46, 0)
    # the same rankings and scores as the index that embedded its passages
    minilm = _dense(cli_index, "all-MiniLM-L6-v2")
    mine = sift_ir.Index.open(tmp_path / "i")
    theirs = sift_ir.Index.open(cli_index)
    for domain, query in QUERIES.items():
        a = mine.search(query, retriever=minilm, domain=domain, top_k=16)
        b = theirs.search(query, retriever=minilm, domain=domain, top_k=16)
        assert [(h.id, h.score) for h in a] == [(h.id, h.score) for h in b], domain
    # a passage without a vector, and a vector of no passage, are errors naming the id
    for kwargs, message in [({"drop": "gis/1f3a9c2e_1.txt"}, "no vector for passage"),
                            ({"extra": "gis/not-a-passage"}, "not in the corpus")]:
        bad = _write_vectors(tmp_path / f"bad-{len(message)}", model, sample, **kwargs)
        done = subprocess.run(
            [sift_bin, "index", "--corpus", str(sample), "--index", str(tmp_path / "j"),
             "--dense", minilm_dir, "--vectors", str(bad), "--quiet"], capture_output=True, text=True)
        assert done.returncode != 0 and message in done.stderr, done.stderr
        assert next(iter(kwargs.values())) in done.stderr, done.stderr
