"""Embedding a corpus across Ray with Ray Data (`sift_ir.ray`), on a local Ray instance.

The model is the real all-MiniLM-L6-v2 through `sift_ir.Embedder` (conftest's `minilm_dir`:
SIFT_MINILM_DIR, else models/local/all-MiniLM-L6-v2, which `scripts/test` installs); the
kill tests use a stand-in embedder (a hashed bag of words), since what it checks is Ray's
recovery, not the model. Skipped only when Ray is not installed.

Ray runs locally with 2 logical CPUs and a 300 MB object store (the project's machines have
2 cores): each actor asks for 0.5 CPU, since Ray Data reads and writes in tasks of 1 CPU, and
a pool holding every CPU leaves them none (the run would wait for ever).

SIFT_RAY_PASSAGES sets the size of the generated domain (default 20,000: about 1 minute with
a release build of the extension on 2 cores, about 4 with a debug one).
"""

import json
import os
import random
import re
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_sift

pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install 'ray[data]'")
import ray  # noqa: E402

from sift_ir import Embedder  # noqa: E402
from sift_ir.ray import (  # noqa: E402
    MANIFEST,
    EmbedActor,
    corpus_domains,
    embed_corpus,
    read_vectors,
)

ACTOR_CPUS = 0.5
WORDS = (
    "energy entropy heat work system engine reservoir cell protein membrane enzyme gene map "
    "projection raster vector layer coordinate datum field force mass charge wave light orbit "
    "plant leaf root water carbon oxygen sugar river soil rock glacier"
).split()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance for this module's tests."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=300 * 1024**2,
        log_to_driver=False,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    # the stand-in embedders below travel to the workers by value: this file is not on
    # their import path
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield
    finally:
        ray.shutdown()


def passages(corpus: Path, domain: str) -> pa.Table:
    """`id`, `content` of a domain, sorted by id."""
    return pq.read_table(corpus / "documents" / f"{domain}.parquet").sort_by("id")


def generate_domain(corpus: Path, domain: str, n: int, words: int = 20, seed: int = 0) -> Path:
    """Writes `<corpus>/documents/<domain>.parquet`: n passages of `words` words, unique ids."""
    rng = random.Random(seed)
    ids = [f"{domain}/{i:08x}_{rng.randrange(1 << 30):08x}.txt" for i in range(n)]
    rng.shuffle(ids)
    content = [" ".join(rng.choice(WORDS) for _ in range(words)) + "." for _ in range(n)]
    (corpus / "documents").mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"id": ids, "content": content}),
        corpus / "documents" / f"{domain}.parquet",
        row_group_size=4096,
    )
    return corpus


def check_files(out: Path, domain: str, dim: int) -> None:
    """Each written file holds `id: string`, `vector: fixed_size_list<float>[dim]`."""
    files = sorted((out / domain / "passages").glob("*.parquet"))
    assert files, domain
    for f in files:
        schema = pq.read_schema(f)
        assert schema.names == ["id", "vector"], f
        assert schema.field("id").type == pa.string(), f
        assert schema.field("vector").type == pa.list_(pa.float32(), dim), f


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == np.float32 and want.dtype == np.float32, what
    assert got.shape == want.shape, what
    if not np.array_equal(got, want):
        rows = int((got != want).any(axis=1).sum())
        diff = float(np.abs(got - want).max())
        raise AssertionError(f"{what}: {rows} row(s) differ, max abs diff {diff}")


@pytest.fixture(scope="module")
def sample_vectors(ray_cluster, minilm_dir, tmp_path_factory):
    """The sample corpus embedded by 2 actors: (output directory, manifest)."""
    out = tmp_path_factory.mktemp("sample") / "vectors"
    manifest = embed_corpus(
        SAMPLE, out, minilm_dir, concurrency=2, batch_size=4, num_cpus=ACTOR_CPUS
    )
    return out, manifest


def test_sample_vectors_equal_embed_texts(sample_vectors, minilm_dir):
    out, manifest = sample_vectors
    emb = Embedder(minilm_dir)
    domains = {"biology": 16, "gis": 15, "physics": 15}
    assert manifest == {
        "format": 1,
        "model": emb.name,
        "fingerprint": emb.fingerprint,
        "model_hash": emb.model_hash,
        "profile": emb.profile,
        "dim": emb.dim,
        "domains": {d: {"passages": n} for d, n in domains.items()},
    }
    assert json.loads((out / MANIFEST).read_text()) == manifest
    for domain in domains:
        check_files(out, domain, emb.dim)
        table = passages(SAMPLE, domain)
        ids, vectors = read_vectors(out, domain)
        assert ids == table.column("id").to_pylist()
        want = emb.embed_texts(table.column("content").to_pylist(), kind="passage")
        assert_same_bits(vectors, want, domain)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_generated_domain_every_passage_once(ray_cluster, minilm_dir, tmp_path):
    n = int(os.environ.get("SIFT_RAY_PASSAGES", "20000"))
    corpus = generate_domain(tmp_path / "corpus", "synthetic", n)
    out = tmp_path / "vectors"
    start = time.monotonic()
    # dtype "auto": bfloat16 where the processor has bfloat16 units (twice as fast here),
    # else f32; the spot check below embeds with the same
    manifest = embed_corpus(
        corpus, out, minilm_dir, concurrency=2, batch_size=64, num_cpus=ACTOR_CPUS, dtype="auto"
    )
    print(f"{n} passages of 20 words, 2 actors: {time.monotonic() - start:.1f} s")
    assert manifest["domains"] == {"synthetic": {"passages": n}}
    check_files(out, "synthetic", manifest["dim"])
    table = passages(corpus, "synthetic")
    ids, vectors = read_vectors(out, "synthetic")
    assert len(ids) == len(set(ids)) == n
    assert ids == table.column("id").to_pylist()
    # a spot check of the vectors against the same passages embedded here
    rows = sorted(random.Random(1).sample(range(n), min(n, 200)))
    texts = table.column("content").take(rows).to_pylist()
    want = Embedder(minilm_dir, dtype="auto").embed_texts(texts, kind="passage")
    assert_same_bits(vectors[rows], want, "synthetic")


class HashedBow:
    """Stand-in embedder: a signed hashed bag of words, unit rows (float32)."""

    def __init__(self, model="hashbow", device="cpu", dtype="auto", batch_size=None):
        self.name = "hashbow"
        self.dim = 64
        self.fingerprint = "hashbow-64"
        self.model_hash = "hashbow"
        self.profile = None
        self.sees_images = False

    def embed_texts(self, texts, kind="passage", instruction=None):
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = zlib.crc32(word.encode())
                out[row, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
            norm = np.linalg.norm(out[row])
            if norm:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out


class DiesOnce(HashedBow):
    """Kills its own process (SIGKILL) on its `die_on`-th batch, in the first actor to get
    there (a marker file, created exclusively, makes it once per run). Each process that
    builds one records its batches in `<marker_dir>/life-<pid>`."""

    def __init__(self, marker_dir, die_on, **kwargs):
        super().__init__(**kwargs)
        self.marker_dir = Path(marker_dir)
        self.die_on = die_on
        self.calls = 0
        self.life = self.marker_dir / f"life-{os.getpid()}"
        with open(self.life, "a") as f:
            f.write("start\n")

    def embed_texts(self, texts, kind="passage", instruction=None):
        self.calls += 1
        if self.calls == self.die_on:
            try:
                fd = os.open(self.marker_dir / "killed", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, f"{os.getpid()}\n".encode())
                os.close(fd)
                os.kill(os.getpid(), 9)
        vectors = super().embed_texts(texts, kind, instruction)
        with open(self.life, "a") as f:
            f.write(f"{len(texts)}\n")
        return vectors


class DiesOnceFactory:
    def __init__(self, marker_dir, die_on):
        self.marker_dir = str(marker_dir)
        self.die_on = die_on

    def __call__(self, model, device="cpu", dtype="auto", batch_size=None):
        return DiesOnce(self.marker_dir, self.die_on, model=model, device=device, dtype=dtype)


def test_embed_actor_takes_arrow_numpy_and_pandas_batches():
    actor = EmbedActor("hashbow", embedder_factory=HashedBow)
    ids, texts = ["b", "a"], ["heat engine", "plant cell"]
    batch = pa.table({"id": ids, "content": texts})
    got = actor(batch)
    assert got.schema == pa.schema([("id", pa.string()), ("vector", pa.list_(pa.float32(), 64))])
    want = HashedBow().embed_texts(texts)
    vectors = np.stack([np.asarray(v, np.float32) for v in got.column("vector").to_pylist()])
    assert got.column("id").to_pylist() == ids
    assert_same_bits(vectors, want, "pyarrow")
    for other in (
        {"id": np.array(ids, object), "content": np.array(texts, object)},
        batch.to_pandas(),
    ):
        assert actor(other).equals(got)
    with pytest.raises(ValueError, match="null"):
        actor(pa.table({"id": ["a"], "content": pa.array([None], pa.string())}))
    with pytest.raises(RuntimeError, match="fingerprint"):
        EmbedActor("hashbow", embedder_factory=HashedBow, fingerprint="another")


def test_corpus_domains_reads_whole_files_and_complete_shards(tmp_path):
    docs = tmp_path / "documents"
    docs.mkdir()
    table = pa.table({"id": ["x"], "content": ["y"]})
    for name in ["biology", "gis-00000-of-00002", "gis-00001-of-00002"]:
        pq.write_table(table, docs / f"{name}.parquet")
    found = corpus_domains(tmp_path)
    assert list(found) == ["biology", "gis"]
    assert [p.name for p in found["gis"]] == [
        "gis-00000-of-00002.parquet",
        "gis-00001-of-00002.parquet",
    ]
    (docs / "gis-00001-of-00002.parquet").unlink()
    with pytest.raises(ValueError, match="incomplete"):
        corpus_domains(tmp_path)


def lives(marker_dir: Path) -> dict[int, int]:
    """pid -> rows embedded, for each process that built the stand-in and embedded rows."""
    out = {}
    for f in marker_dir.glob("life-*"):
        rows = [int(x) for x in f.read_text().split() if x.isdigit()]
        if rows:
            out[int(f.name.split("-")[1])] = sum(rows)
    return out


def test_killed_actor_is_restarted_and_its_batch_retried(ray_cluster, tmp_path):
    n = 20_000
    corpus = generate_domain(tmp_path / "corpus", "synthetic", n)
    out = tmp_path / "vectors"
    markers = tmp_path / "markers"
    markers.mkdir()
    manifest = embed_corpus(
        corpus,
        out,
        "hashbow",
        concurrency=2,
        batch_size=256,
        num_cpus=ACTOR_CPUS,
        embedder_factory=DiesOnceFactory(markers, die_on=10),
    )
    killed = int((markers / "killed").read_text())
    done = lives(markers)
    # the killed actor had embedded batches before it died (9); a new process took its
    # place, and every row was embedded once by a live actor (a batch is recorded after it
    # is embedded, so the one in flight at the kill is counted once, by its retry)
    assert done[killed] > 0, done
    assert len(done) >= 3, done
    assert sum(done.values()) == n, done
    assert manifest["domains"] == {"synthetic": {"passages": n}}
    table = passages(corpus, "synthetic")
    ids, vectors = read_vectors(out, "synthetic")
    assert len(ids) == len(set(ids)) == n
    assert ids == table.column("id").to_pylist()
    want = HashedBow().embed_texts(table.column("content").to_pylist())
    assert_same_bits(vectors, want, "synthetic")


def test_without_task_retries_a_killed_actor_fails_the_run(ray_cluster, tmp_path):
    corpus = generate_domain(tmp_path / "corpus", "synthetic", 5_000)
    out = tmp_path / "vectors"
    markers = tmp_path / "markers"
    markers.mkdir()
    with pytest.raises(Exception, match="(?i)actor"):
        embed_corpus(
            corpus,
            out,
            "hashbow",
            concurrency=2,
            batch_size=256,
            num_cpus=ACTOR_CPUS,
            embedder_factory=DiesOnceFactory(markers, die_on=3),
            max_task_retries=0,
        )
    assert (markers / "killed").is_file()
    assert not (out / MANIFEST).exists()


def sift(sift_bin, *args) -> str:
    """`run_sift` with any path-like arguments."""
    return run_sift(sift_bin, *map(str, args))


def build_index_from_vectors(sift_bin, corpus, vectors_dir, index_dir, model, *extra):
    """`sift index --dense MODEL --vectors DIR`: an index whose dense vectors are the ones
    `embed_corpus` wrote, not embedded again; its standard output."""
    return sift(
        sift_bin,
        "index",
        "--corpus",
        corpus,
        "--index",
        index_dir,
        "--dense",
        model,
        "--vectors",
        vectors_dir,
        *extra,
    )


def test_index_from_ray_vectors_ranks_as_sift_index(sample_vectors, minilm_dir, sift_bin, tmp_path):
    vectors, _ = sample_vectors
    ray_index, own_index = tmp_path / "from-ray", tmp_path / "own"
    # one thread: reproducible HNSW graphs (the rankings below search exactly anyway)
    built = json.loads(
        build_index_from_vectors(
            sift_bin, SAMPLE, vectors, ray_index, minilm_dir, "--threads", "1", "--json", "--quiet"
        )
    )
    own = json.loads(
        sift(
            sift_bin,
            "index",
            "--corpus",
            SAMPLE,
            "--index",
            own_index,
            "--dense",
            minilm_dir,
            "--threads",
            "1",
            "--json",
            "--quiet",
        )
    )
    assert list(built["manifest"]["dense"]) == list(own["manifest"]["dense"])
    (name,) = own["manifest"]["dense"]
    assert built["manifest"]["dense"][name]["precomputed"] == 46
    assert built["manifest"]["dense"][name]["embedded"] == 0
    assert own["manifest"]["dense"][name]["embedded"] == 46
    retriever = f"dense:{name}"

    def evaluate(index):
        run = index.with_suffix(".run")
        report = json.loads(
            sift(
                sift_bin,
                "eval",
                "--corpus",
                SAMPLE,
                "--index",
                index,
                "--retriever",
                retriever,
                "--ann",
                "exact",
                "--json",
                "--quiet",
                "--run-out",
                run,
            )
        )
        return report["metrics"], report["per_domain"], run.read_text()

    assert evaluate(ray_index) == evaluate(own_index)

    def search(index, domain, query):
        return json.loads(
            sift(
                sift_bin,
                "search",
                "--index",
                index,
                "--domain",
                domain,
                "--retriever",
                retriever,
                "--ann",
                "exact",
                "--query",
                query,
                "--top-k",
                "10",
                "--json",
            )
        )["hits"]

    for domain, query in [
        ("biology", "how do plants make sugar"),
        ("gis", "which map projection keeps areas"),
        ("physics", "why can no engine reach 100 percent efficiency"),
    ]:
        assert search(ray_index, domain, query) == search(own_index, domain, query), domain


def test_every_domain_in_one_pool_each_actor_loads_the_model_once(ray_cluster, tmp_path):
    """The sample's 3 domains go through one actor pool: 2 actors load the model once each
    (and the model-info task once), not once per domain."""
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "vectors"
    manifest = embed_corpus(
        SAMPLE,
        out,
        "hashbow",
        concurrency=2,
        batch_size=4,
        num_cpus=ACTOR_CPUS,
        embedder_factory=DiesOnceFactory(markers, die_on=-1),
    )
    loads = sum(f.read_text().count("start") for f in markers.glob("life-*"))
    assert loads <= 3, loads
    assert sorted(manifest["domains"]) == ["biology", "gis", "physics"]
    for domain in manifest["domains"]:
        table = passages(SAMPLE, domain)
        ids, vectors = read_vectors(out, domain)
        assert ids == table.column("id").to_pylist(), domain
        assert_same_bits(vectors, HashedBow().embed_texts(table.column("content").to_pylist()), domain)
    assert not (out / "_staging").exists()
