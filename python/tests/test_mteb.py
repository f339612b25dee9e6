"""MTEB integration (sift_ir.mteb, sift_ir.mteb_local): mteb's scores of a stand-in embedder
against an independent trec_eval-style computation, and of all-MiniLM-L6-v2 through
sift_ir.Embedder against `sift eval` on the sample corpus's biology domain."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mteb", reason="mteb is not installed (pip install mteb)")

from mteb.types import PromptType  # noqa: E402

from sift_ir.mteb import SiftMTEBEncoder  # noqa: E402
from sift_ir.mteb_local import (  # noqa: E402
    evaluate_offline,
    local_retrieval_task,
    mm_bright_domain_task,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "corpora" / "sample"
DOMAIN = "biology"


class HashEmbedder:
    """A stand-in for sift_ir.Embedder: hashed bag of words, unit-norm float32 rows."""

    name = "hash-bow"
    dim = 64
    fingerprint = "hash-bow-1"
    sees_images = False

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, int]] = []

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim)
        for token in re.findall(r"[a-z0-9]+", text.lower()):
            h = hashlib.blake2b(token.encode(), digest_size=8).digest()
            v[int.from_bytes(h, "little") % self.dim] += 1.0
        if not v.any():
            v[0] = 1.0
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed_texts(self, texts, kind="passage", instruction=None):
        assert kind in {"query", "passage"}
        self.calls.append((kind, instruction, len(texts)))
        prefix = f"{instruction} " if instruction else ""
        return np.stack([self._vector(prefix + t) for t in texts])


class ConstantEmbedder(HashEmbedder):
    """Every text gets the same vector: every score ties."""

    def embed_texts(self, texts, kind="passage", instruction=None):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = 1.0
        return out


def trec_ndcg10(scores, qrels, excluded):
    """nDCG@10 as trec_eval's ndcg_cut.10: excluded documents removed, ranked by score
    (as float32) descending then document id descending; mean over the judged queries."""
    values = []
    for qid, judged in qrels.items():
        ranked = sorted(
            ((doc, s) for doc, s in scores[qid].items() if doc not in excluded.get(qid, ())),
            key=lambda x: (np.float32(x[1]), x[0]),
            reverse=True,
        )[:10]
        dcg = sum(
            judged.get(doc, 0) / math.log2(rank + 2)
            for rank, (doc, _) in enumerate(ranked)
            if judged.get(doc, 0) > 0
        )
        ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
        idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
        values.append(dcg / idcg if idcg > 0 else 0.0)
    return sum(values) / len(values)


def sample_domain(domain=DOMAIN):
    """The domain's passages, queries, qrels (gold ids, grade 1) and exclusions (negatives)."""
    import pyarrow.parquet as pq

    docs = pq.read_table(SAMPLE / "documents" / f"{domain}.parquet").to_pylist()
    examples = pq.read_table(SAMPLE / "examples" / f"{domain}.parquet").to_pylist()
    corpus = {d["id"]: d["content"] for d in docs}
    queries = {e["id"]: e["query"] for e in examples if e["gold_ids"]}
    qrels = {e["id"]: dict.fromkeys(e["gold_ids"], 1) for e in examples if e["gold_ids"]}
    excluded = {e["id"]: set(e["negative_ids"] or ()) for e in examples}
    return corpus, queries, qrels, excluded


def test_stand_in_ndcg10_is_trec_eval_ndcg10_on_the_sample():
    corpus, queries, qrels, excluded = sample_domain()
    emb = HashEmbedder()
    docs = emb.embed_texts(list(corpus.values()), kind="passage")
    qs = emb.embed_texts(list(queries.values()), kind="query")
    sims = qs @ docs.T
    scores = {
        qid: {doc: float(sims[i, j]) for j, doc in enumerate(corpus)}
        for i, qid in enumerate(queries)
    }
    expected = trec_ndcg10(scores, qrels, excluded)

    scores_mteb = evaluate_offline(SiftMTEBEncoder(HashEmbedder()), mm_bright_domain_task(SAMPLE, DOMAIN))
    # mteb rounds its means to 5 decimals
    assert scores_mteb["ndcg_at_10"] == pytest.approx(expected, abs=6e-6)
    assert scores_mteb["main_score"] == scores_mteb["ndcg_at_10"]


def test_exclusions_ties_and_identical_ids():
    corpus = {f"d{i:02d}": f"passage {i}" for i in range(20)}
    model = SiftMTEBEncoder(ConstantEmbedder())

    def ndcg10(relevant, **kwargs):
        task = local_retrieval_task("Ties", corpus, {"q": "query"}, {"q": {relevant: 1}}, **kwargs)
        return evaluate_offline(model, task)["ndcg_at_10"]

    # all scores tie: trec_eval's order, document id descending
    assert ndcg10("d19") == 1.0
    assert ndcg10("d10") == pytest.approx(1 / math.log2(11), abs=6e-6)
    assert ndcg10("d00") == 0.0
    # excluded documents leave the ranking: d10 moves up from rank 10 to rank 8
    assert ndcg10("d10", excluded={"q": ["d19", "d18"]}) == pytest.approx(
        1 / math.log2(9), abs=6e-6
    )
    # a document with the query's id is kept unless ignore_identical_ids ("q" ranks above
    # "a" on the tie)
    docs = {"q": "passage", "a": "passage"}
    keep = local_retrieval_task("Same", docs, {"q": "query"}, {"q": {"q": 1}})
    drop = local_retrieval_task(
        "Same", docs, {"q": "query"}, {"q": {"q": 1}}, ignore_identical_ids=True
    )
    assert evaluate_offline(model, keep)["ndcg_at_10"] == 1.0
    assert evaluate_offline(model, drop)["ndcg_at_10"] == 0.0


def test_prompt_types_and_instructions():
    emb = HashEmbedder()
    model = SiftMTEBEncoder(emb, instructions={"Instructed": "Find the biology passage:"})
    corpus, queries, qrels, _ = sample_domain()
    evaluate_offline(model, local_retrieval_task("Instructed", corpus, queries, qrels))
    assert ("query", "Find the biology passage:", len(queries)) in emb.calls
    assert ("passage", None, len(corpus)) in emb.calls
    assert model.kind(PromptType.query) == "query"
    assert model.kind(PromptType.document) == "passage"
    meta = model.mteb_model_meta
    assert meta.name == "sift/hash-bow"
    assert meta.embed_dim == 64
    assert meta.revision == "hash-bow-1"
    v = np.eye(3, dtype=np.float32)
    assert model.similarity(v, v).numpy().tolist() == np.eye(3).tolist()
    assert model.similarity_pairwise(v, v).numpy().tolist() == [1.0, 1.0, 1.0]


# --- parity with `sift eval` -----------------------------------------------------------------


def run_cli(args: list[str]) -> str:
    p = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=900, check=False
    )
    assert p.returncode == 0, f"{' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}"
    return p.stdout


def run_sift_eval(sift_bin, corpus: Path, model_dir: Path, domain: str, workdir: Path):
    """`sift index --dense MODEL` of `domain`, then `sift eval --task 1` of its dense
    retriever: the parsed `--json` report, and the run (query id -> {doc id: score})."""
    index = workdir / "index"
    run_file = workdir / "sift.trec"
    built = json.loads(
        run_cli(
            [
                sift_bin, "index", "--corpus", corpus, "--index", index,
                "--domains", domain, "--dense", model_dir, "--json",
            ]
        )
    )
    # the dense index's name (`dense:<name>`): the one model in the manifest
    (dense_name,) = built["manifest"]["dense"].keys()
    report = json.loads(
        run_cli(
            [
                sift_bin, "eval", "--corpus", corpus, "--index", index, "--task", "1",
                "--retriever", f"dense:{dense_name}", "--domains", domain,
                "--ann", "exact", "--run-out", run_file, "--json",
            ]
        )
    )
    run: dict[str, dict[str, float]] = {}
    for line in run_file.read_text().splitlines():
        qid, _, doc, _, score, *_ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    return report, run


def sift_eval_ndcg10(report: dict, domain: str) -> float:
    """nDCG@10 of `domain` in `sift eval --json`'s report (one task, one retriever):
    {"task", "retriever", "metrics": {"ndcg@10": ...}, "per_domain": {domain: {...}},
    "queries": {domain: n}, ...}; metrics are fractions."""
    return float(report["per_domain"][domain]["ndcg@10"])


def trec_ranking(scores: dict[str, float]) -> list[str]:
    return [
        doc
        for doc, _ in sorted(
            scores.items(), key=lambda x: (np.float32(x[1]), x[0]), reverse=True
        )
    ]


def test_minilm_mteb_ndcg10_matches_sift_eval(sift_bin, minilm_dir, tmp_path):
    from sift_ir import Embedder

    model_dir = Path(minilm_dir)
    predictions = tmp_path / "mteb"
    task = mm_bright_domain_task(SAMPLE, DOMAIN)
    scores = evaluate_offline(
        SiftMTEBEncoder(Embedder(str(model_dir))), task, prediction_folder=predictions
    )
    report, sift_run = run_sift_eval(sift_bin, SAMPLE, model_dir, DOMAIN, tmp_path)
    sift = sift_eval_ndcg10(report, DOMAIN)
    # mteb rounds to 5 decimals; the two float32 dot products may differ in their last bits
    assert scores["ndcg_at_10"] == pytest.approx(sift, abs=1e-5), (scores["ndcg_at_10"], sift)
    assert sift > 0.5

    # every passage's score, and so each ranking, agree (both without the query's negatives;
    # the sample's nDCG@10 is 1.0 on both sides, which alone would prove little)
    saved = json.loads((predictions / f"{task.metadata.name}_predictions.json").read_text())
    mteb_run = saved["default"]["test"]
    _, _, _, excluded = sample_domain()
    assert set(mteb_run) == set(sift_run)
    for qid, ranked in mteb_run.items():
        kept = {d: s for d, s in sift_run[qid].items() if d not in excluded[qid]}
        assert set(ranked) == set(kept), qid
        for doc, score in ranked.items():
            assert score == pytest.approx(kept[doc], abs=1e-5), (qid, doc)
        assert trec_ranking(ranked) == trec_ranking(kept), qid


def _cranfield() -> Path | None:
    import os

    path = Path(os.environ.get("SIFT_CRANFIELD", REPO.parent / "shared" / "data" / "cranfield"))
    return path if (path / "corpus.jsonl").is_file() else None


@pytest.mark.skipif(_cranfield() is None, reason="no Cranfield collection (set SIFT_CRANFIELD)")
def test_minilm_mteb_ndcg10_matches_sift_eval_on_cranfield(sift_bin, minilm_dir, tmp_path):
    """A collection where the scores are far from 1 and the qrels graded (1-4): MTEB's
    nDCG@10 of Sift's MiniLM vectors equals `sift eval`'s. A part of Cranfield, to keep the
    test short: its first 60 judged queries, their judged documents and 300 others, written
    as a BEIR collection for `sift eval` and handed to MTEB as the same data."""
    from sift_ir import Embedder

    root = _cranfield()
    docs = [json.loads(line) for line in (root / "corpus.jsonl").read_text().splitlines()]
    all_queries = [json.loads(line) for line in (root / "queries.jsonl").read_text().splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        qrels.setdefault(qid, {})[doc] = int(grade)
    queries = [q for q in all_queries if q["_id"] in qrels][:60]
    qrels = {q["_id"]: qrels[q["_id"]] for q in queries}
    judged = {d for judgements in qrels.values() for d in judgements}
    others = [d for d in docs if d["_id"] not in judged][:300]
    docs = [d for d in docs if d["_id"] in judged] + others

    part = tmp_path / "cranfield-part"
    (part / "qrels").mkdir(parents=True)
    (part / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (part / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (part / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{g}\n" for q, js in qrels.items() for d, g in js.items())
    )
    corpus = {d["_id"]: {"title": d.get("title", ""), "text": d["text"]} for d in docs}
    task = local_retrieval_task(
        "CranfieldPart", corpus, {q["_id"]: q["text"] for q in queries}, qrels
    )
    # dtype auto on both sides: bfloat16 where the processor has bfloat16 units (faster)
    scores = evaluate_offline(SiftMTEBEncoder(Embedder(minilm_dir, dtype="auto")), task)

    index = tmp_path / "index"
    built = json.loads(run_cli([sift_bin, "index", "--corpus", part, "--index", index,
                                "--dense", minilm_dir, "--dtype", "auto", "--json", "--quiet"]))
    (name,) = built["manifest"]["dense"].keys()
    report = json.loads(run_cli([sift_bin, "eval", "--corpus", part, "--index", index,
                                 "--retriever", f"dense:{name}", "--ann", "exact",
                                 "--dtype", "auto", "--json"]))
    sift = float(report["metrics"]["ndcg@10"])
    assert 0.2 < sift < 0.95, sift
    # mteb rounds to 5 decimals
    assert scores["ndcg_at_10"] == pytest.approx(sift, abs=1e-5), (scores["ndcg_at_10"], sift)
