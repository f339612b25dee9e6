"""One core, every door: the same search through `sift search --json`, `sift serve`'s
`POST /v1/search` and Python's `Index.search` gives the same ids and scores, for BM25, dense,
hybrid and reranked retrievers, over passages (with and without query images), corpus images
and Task 4 pairs, on an index in the default profile and one in the reference profile (whose
"reference" fusion prepares the reference code's stand-ins)."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, run_sift, sift_json

import sift_ir

FIXTURES = ROOT / "models" / "fixtures"
CLIP = FIXTURES / "vision" / "tiny-clip-quickgelu"
JINA = FIXTURES / "jina_clip" / "tiny-jina-clip-v1"
CROSS_ENCODER = FIXTURES / "cross_encoder" / "tiny-bert-ce"
IMAGE = FIXTURES / "vision" / "images" / "shapes_rgb_50x37.png"
QUERY = "which map projection keeps areas equal"
TOP_K = 8


class Served:
    """`sift serve` on a free port, stopped at the end."""

    def __init__(self, sift_bin: str, *args: str) -> None:
        self.proc = subprocess.Popen([sift_bin, "serve", "--addr", "127.0.0.1:0", *args],
                                     stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.url: str | None = None
        ready = threading.Event()

        def read() -> None:
            for line in self.proc.stderr:
                self.log.append(line)
                if line.startswith("sift serve: listening on "):
                    self.url = line.split("listening on ", 1)[1].strip()
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(300) or self.url is None:
            self.stop()
            raise AssertionError("sift serve did not start:\n" + "".join(self.log))

    def search(self, body: dict) -> dict:
        req = urllib.request.Request(self.url + "/v1/search", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{body}: {e.code} {e.read().decode()}") from None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _slug(index: Path, model: Path) -> str:
    manifest = json.loads((index / "manifest.json").read_text())
    (slug,) = [s for s, d in manifest["dense"].items() if d["model"] == model.name]
    return f"dense:{slug}"


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, sift_bin, sample) -> dict[str, Path]:
    """The sample indexed with BM25 and CLIP (default profile) and with Jina-CLIP in the
    reference profile."""
    root = tmp_path_factory.mktemp("doors")
    out = {"default": root / "default", "reference": root / "reference"}
    run_sift(sift_bin, "index", "--corpus", str(sample), "--index", str(out["default"]),
             "--dense", str(CLIP), "--quiet")
    run_sift(sift_bin, "index", "--corpus", str(sample), "--index", str(out["reference"]),
             "--dense", str(JINA), "--profile", "reference", "--quiet")
    return out


def _cases(index: Path, profile: str) -> list[tuple[str, str, bool, str]]:
    """(retriever, candidates, with an image, fusion) searched on `index`."""
    if profile == "default":
        dense = _slug(index, CLIP)
        cases = [(r, "passages", False, "all") for r in ["bm25", dense, f"hybrid:bm25+{dense}"]]
        cases += [(dense, "passages", True, "all"), (dense, "passages", True, "first"),
                  (dense, "images", True, "all"), (dense, "images", False, "all"),
                  (dense, "pairs", False, "all"), (f"hybrid:bm25+{dense}", "pairs", False, "all"),
                  ("bm25", "pairs", False, "all")]
        return cases
    dense = _slug(index, JINA)
    return [(dense, c, img, f) for c in ["passages", "images", "pairs"]
            for img in (False, True) for f in ("all", "reference")]


def _compare(cli: dict, http: dict, py: list, what: str) -> None:
    ids = [h["id"] for h in cli["hits"]]
    scores = [h["score"] for h in cli["hits"]]
    assert ids, f"{what}: no hit"
    assert [h["id"] for h in http["hits"]] == ids, what
    assert [h.id for h in py] == ids, what
    # the same core computed each: equal scores, not merely close ones
    assert [h["score"] for h in http["hits"]] == scores, what
    assert [h.score for h in py] == scores, what


@pytest.mark.parametrize("profile", ["default", "reference"])
def test_cli_http_and_python_answer_a_search_alike(sift_bin, sample, indexes, profile):
    index = indexes[profile]
    retrievers = sorted({r for r, *_ in _cases(index, profile)})
    args = ["--index", str(index), "--corpus", str(sample)]
    serve = Served(sift_bin, *args, "--reference-fusion",
                   *[a for r in retrievers for a in ("--retriever", r)])
    py = sift_ir.Index.open(index, corpus=sample, retrievers=retrievers,
                            reference_fusion=True)
    try:
        for retriever, candidates, with_image, fusion in _cases(index, profile):
            what = f"{profile}: {retriever} {candidates} image={with_image} fusion={fusion}"
            cli_args = ["search", *args, "--domain", "gis", "--retriever", retriever,
                        "--query", QUERY, "--candidates", candidates, "--top-k", str(TOP_K),
                        "--query-fusion", fusion]
            body = {"query": QUERY, "retriever": retriever, "domain": "gis",
                    "candidates": candidates, "top_k": TOP_K, "fusion": fusion}
            images = []
            if with_image:
                cli_args += ["--image", str(IMAGE)]
                body["images"] = [{"data": base64.b64encode(IMAGE.read_bytes()).decode()}]
                images = [str(IMAGE)]
            cli = sift_json(sift_bin, *cli_args)
            http = serve.search(body)
            got = py.search(QUERY, images=images, retriever=retriever, domain="gis",
                            top_k=TOP_K, candidates=candidates, fusion=fusion)
            _compare(cli, http, got, what)
    finally:
        serve.stop()


def test_a_reranked_search_is_the_same_through_the_cli_and_http(sift_bin, sample, indexes):
    index = indexes["default"]
    dense = _slug(index, CLIP)
    rerank = ["--rerank", str(CROSS_ENCODER), "--rerank-depth", "5"]
    args = ["--index", str(index), "--corpus", str(sample)]
    serve = Served(sift_bin, *args, "--retriever", "bm25", "--retriever", dense, *rerank)
    try:
        for retriever in ["bm25", dense]:
            cli = sift_json(sift_bin, "search", *args, *rerank, "--domain", "gis",
                            "--retriever", retriever, "--query", QUERY, "--top-k", str(TOP_K))
            http = serve.search({"query": QUERY, "retriever": retriever, "domain": "gis",
                                 "top_k": TOP_K})
            assert cli["reranker"] == http["reranker"] == "tiny-bert-ce", (cli, http)
            assert [h["id"] for h in http["hits"]] == [h["id"] for h in cli["hits"]], retriever
            assert [h["score"] for h in http["hits"]] == [h["score"] for h in cli["hits"]]
            # reranked: the first stage's top 5 rescored, the rest below in order
            first = sift_json(sift_bin, "search", *args, "--domain", "gis", "--retriever",
                              retriever, "--query", QUERY, "--top-k", str(TOP_K))
            assert {h["id"] for h in cli["hits"][:5]} == {h["id"] for h in first["hits"][:5]}
            assert [h["id"] for h in cli["hits"][5:]] == [h["id"] for h in first["hits"][5:]]
    finally:
        serve.stop()
