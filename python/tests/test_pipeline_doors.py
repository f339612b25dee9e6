"""Rerankers, generators and dense-index names at every door: Python's `Reranker` and
`Generator` give what `sift rerank`, `sift generate chats`, `POST /v1/rerank` and
`POST /v1/chat/completions` give (one code path under all of them), and `--dense NAME=DIR` /
`Index.build(dense=["NAME=DIR"])` name a dense index alike."""

from __future__ import annotations

import base64
import json
import shutil
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, run_sift, sift_json
from test_doors import CLIP, CROSS_ENCODER, Served

import sift_ir

FIXTURES = ROOT / "models" / "fixtures"
EXPECTED = json.loads((FIXTURES / "cross_encoder" / "expected.json").read_text())
IMAGES = FIXTURES / "gme" / "images"


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def _data_url(path: Path) -> str:
    kind = "png" if path.suffix == ".png" else "jpeg"
    return f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode()


def test_reranker_scores_pairs_as_sift_rerank_and_cross_encoder_predict(sift_bin, tmp_path):
    pairs = EXPECTED["models"]["tiny-bert-ce"]["pairs"]
    reranker = sift_ir.Reranker(str(CROSS_ENCODER))
    got = reranker.score([(p["query"], p["passage"]) for p in pairs])
    for g, p in zip(got, pairs):
        assert g == pytest.approx(p["default_max_length"]["score"], abs=1e-5)
    lines = tmp_path / "pairs.jsonl"
    lines.write_text("".join(json.dumps({"query": p["query"], "passage": p["passage"]}) + "\n"
                             for p in pairs))
    cli = sift_json(sift_bin, "rerank", "--model", str(CROSS_ENCODER), "--pairs", str(lines))
    assert cli["model"] == reranker.name
    assert cli["scores"] == got
    with pytest.raises(sift_ir.SiftError, match=r"pairs\[1\]"):
        reranker.score([("q", "p"), ("q", None)])


def test_reranker_ranks_documents_as_the_rerank_route(sift_bin):
    pairs = EXPECTED["models"]["tiny-bert-ce"]["pairs"]
    query = pairs[0]["query"]
    documents = [p["passage"] for p in pairs]
    reranker = sift_ir.Reranker(str(CROSS_ENCODER))
    mine = reranker.rank(query, documents, top_n=5, return_documents=True)
    server = Served(sift_bin, "--rerank", str(CROSS_ENCODER), "--quiet")
    try:
        theirs = _post(server.url + "/v1/rerank", {"query": query, "documents": documents,
                                                    "top_n": 5, "return_documents": True})
    finally:
        server.stop()
    assert theirs["results"] == mine
    assert len(mine) == 5
    scores = reranker.score([(query, d) for d in documents])
    assert [r["relevance_score"] for r in mine] == sorted(scores, reverse=True)[:5]


@pytest.fixture(scope="module")
def tiny_generator(tmp_path_factory) -> Path:
    """The tiny Qwen2-VL-Instruct: the GME fixture's random weights with a chat template."""
    d = tmp_path_factory.mktemp("generator") / "tiny-qwen2-vl-instruct"
    shutil.copytree(FIXTURES / "gme" / "tiny-gme", d)
    shutil.copy(FIXTURES / "qwen2_vl_instruct" / "chat_template.jinja", d)
    return d


def test_generator_answers_a_chat_as_the_endpoint_and_sift_generate(sift_bin, tiny_generator,
                                                                    tmp_path):
    messages = [
        {"role": "system", "content": "You compare pictures."},
        {"role": "user", "content": [
            {"type": "text", "text": "Here is one"},
            {"type": "image_url", "image_url": {"url": _data_url(IMAGES / "photo_120x90.jpg")}},
            {"type": "text", "text": "and another"},
            {"type": "image_url", "image_url": {"url": _data_url(IMAGES / "gray_70x126.png")}},
            {"type": "text", "text": "what differs?"},
        ]},
        {"role": "assistant", "content": "The colours."},
        {"role": "user", "content": "And the sizes?"},
    ]
    generator = sift_ir.Generator(str(tiny_generator))
    mine = generator.chat(messages, max_tokens=5)
    assert mine["usage"]["completion_tokens"] == 5
    server = Served(sift_bin, "--generator", str(tiny_generator), "--quiet")
    try:
        theirs = _post(server.url + "/v1/chat/completions",
                       {"model": str(tiny_generator), "messages": messages, "max_tokens": 5})
    finally:
        server.stop()
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": messages, "max_tokens": 5}) + "\n")
    out = tmp_path / "answers.jsonl"
    run_sift(sift_bin, "generate", "chats", "--chats", str(chats), "--generator",
             str(tiny_generator), "--out", str(out), "--quiet")
    (cli,) = [json.loads(line) for line in out.read_text().splitlines()]
    for answer in (theirs, cli):
        assert answer["choices"][0]["message"] == mine["choices"][0]["message"]
        assert answer["usage"] == mine["usage"]
    with pytest.raises(sift_ir.SiftError, match=r"messages\[0\]\.role"):
        generator.chat([{"role": "robot", "content": "x"}])


def test_a_dense_index_takes_the_name_it_is_given(sift_bin, sample, tmp_path):
    # a model unpacked into a folder called "model": named by the folder, unless named
    model = tmp_path / "unpacked" / "model"
    shutil.copytree(CLIP, model)
    cli = tmp_path / "cli"
    run_sift(sift_bin, "index", "--corpus", str(sample), "--index", str(cli), "--domains", "gis",
             "--dense", f"clip-small={model}", "--quiet")
    py = sift_ir.Index.build(str(sample), str(tmp_path / "py"), dense=[f"clip-small={model}"],
                             domains=["gis"])
    plain = sift_ir.Index.build(str(sample), str(tmp_path / "plain"), dense=[str(model)],
                                domains=["gis"])
    assert "dense:clip-small" in py.retrievers
    assert "dense:model" in plain.retrievers
    manifest = json.loads((cli / "manifest.json").read_text())
    assert list(manifest["dense"]) == ["clip-small"]
    hits = sift_json(sift_bin, "search", "--index", str(cli), "--corpus", str(sample),
                     "--retriever", "dense:clip-small", "--domain", "gis",
                     "--query", "which map projection keeps areas equal")
    ids = [h.id for h in py.search("which map projection keeps areas equal",
                                   retriever="dense:clip-small", domain="gis")]
    assert [h["id"] for h in hits["hits"]] == ids
