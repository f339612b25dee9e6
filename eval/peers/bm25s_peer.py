#!/usr/bin/env python3
"""bm25s peer runner: index + search timings and nDCG@10 on a BEIR-layout collection.

Usage:
    python3 eval/peers/bm25s_peer.py --corpus DIR [--split test] [--threads T]
        [--top-k 100] [--k1 0.9] [--b 0.4] [--json]

With --json, stdout carries exactly one line: a JSON object with the keys
    engine, version, docs, index_seconds, docs_per_s, queries, search_threads,
    batch_seconds, qps, latency_ms {p50, p99}, ndcg@10
(the same keys the Sift bench prints). Without --json a readable summary is printed.

Timed regions (time.perf_counter wall time; each is preceded by one untimed warm-up
run of the same work):
  index   : bm25s.tokenize(corpus texts, stopwords="en", Snowball English stemmer)
            + bm25s.BM25(method="lucene", k1, b).index(tokens)      (in memory, no save)
  batch   : bm25s.tokenize(all queries) + retriever.retrieve(tokens, k=top_k, n_threads=T)
  latency : per query, bm25s.tokenize([q]) + retriever.retrieve(k=top_k), single-threaded
Not timed: reading the JSONL/TSV files, building the Stemmer object, nDCG evaluation.

`run(...)` is importable; benches/bm25_vs_bm25s.py calls it in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from typing import Dict, List, Tuple


def load_beir(corpus_dir: str, split: str = "test") -> Tuple[List[str], List[str], List[str], List[str], Dict[str, Dict[str, int]]]:
    """Return (doc_ids, doc_texts, query_ids, query_texts, qrels).

    Document text is `title + " " + text` (what Sift indexes). Queries are restricted to
    those that appear in qrels/<split>.tsv, in queries.jsonl order.
    """
    doc_ids: List[str] = []
    doc_texts: List[str] = []
    with open(os.path.join(corpus_dir, "corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            doc_ids.append(str(d["_id"]))
            doc_texts.append((d.get("title") or "") + " " + (d.get("text") or ""))

    qrels: Dict[str, Dict[str, int]] = {}
    with open(os.path.join(corpus_dir, "qrels", f"{split}.tsv"), encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader)
        if header[:2] != ["query-id", "corpus-id"]:
            raise ValueError(f"unexpected qrels header: {header}")
        for row in reader:
            if not row:
                continue
            qid, did, score = row[0], row[1], int(row[2])
            qrels.setdefault(qid, {})[did] = score

    query_ids: List[str] = []
    query_texts: List[str] = []
    with open(os.path.join(corpus_dir, "queries.jsonl"), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            q = json.loads(line)
            qid = str(q["_id"])
            if qid in qrels:
                query_ids.append(qid)
                query_texts.append(q["text"])
    missing = set(qrels) - set(query_ids)
    if missing:
        raise ValueError(f"{len(missing)} qrels query ids have no query text, e.g. {sorted(missing)[:5]}")
    return doc_ids, doc_texts, query_ids, query_texts, qrels


def run(corpus: str, split: str = "test", threads: int = 1, top_k: int = 100,
        k1: float = 0.9, b: float = 0.4) -> dict:
    import bm25s
    import numpy as np
    import pytrec_eval
    import Stemmer

    doc_ids, doc_texts, query_ids, query_texts, qrels = load_beir(corpus, split)
    stemmer = Stemmer.Stemmer("english")
    # bm25s: n_threads=0 runs the queries in the calling thread; n_threads>=1 goes
    # through a ThreadPoolExecutor. One thread -> the plain sequential path.
    batch_n_threads = threads if threads > 1 else 0

    def build_index():
        tokens = bm25s.tokenize(doc_texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25(method="lucene", k1=k1, b=b)
        retriever.index(tokens, show_progress=False)
        return retriever

    def batch_search(retriever):
        q_tokens = bm25s.tokenize(query_texts, stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(q_tokens, k=top_k, n_threads=batch_n_threads, show_progress=False)

    def one_query(retriever, text):
        q_tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(q_tokens, k=top_k, n_threads=0, show_progress=False)

    # ---- index -------------------------------------------------------------------
    build_index()  # warm-up (untimed)
    t0 = time.perf_counter()
    retriever = build_index()
    index_seconds = time.perf_counter() - t0

    # ---- batch search ------------------------------------------------------------
    batch_search(retriever)  # warm-up (untimed)
    t0 = time.perf_counter()
    results = batch_search(retriever)
    batch_seconds = time.perf_counter() - t0

    # ---- per-query latency -------------------------------------------------------
    for text in query_texts:  # warm-up pass (untimed)
        one_query(retriever, text)
    lat = np.empty(len(query_texts), dtype=np.float64)
    for i, text in enumerate(query_texts):
        t0 = time.perf_counter()
        one_query(retriever, text)
        lat[i] = time.perf_counter() - t0
    lat_ms = lat * 1000.0

    # ---- quality -----------------------------------------------------------------
    docs_idx, scores = results.documents, results.scores
    run_dict: Dict[str, Dict[str, float]] = {}
    for qi, qid in enumerate(query_ids):
        run_dict[qid] = {doc_ids[int(d)]: float(s) for d, s in zip(docs_idx[qi], scores[qi])}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"})
    per_q = evaluator.evaluate(run_dict)
    ndcg10 = float(np.mean([per_q[q]["ndcg_cut_10"] for q in query_ids]))

    n_docs, n_q = len(doc_texts), len(query_texts)
    return {
        "engine": "bm25s",
        "version": bm25s.__version__,
        "docs": n_docs,
        "index_seconds": index_seconds,
        "docs_per_s": n_docs / index_seconds,
        "queries": n_q,
        "search_threads": threads,
        "batch_seconds": batch_seconds,
        "qps": n_q / batch_seconds,
        "latency_ms": {
            "p50": float(np.percentile(lat_ms, 50, method="linear")),
            "p99": float(np.percentile(lat_ms, 99, method="linear")),
        },
        "ndcg@10": ndcg10,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="BEIR-layout directory (corpus.jsonl, queries.jsonl, qrels/)")
    ap.add_argument("--split", default="test", help="qrels split (qrels/<split>.tsv), default test")
    ap.add_argument("--threads", type=int, default=1, help="n_threads for the batch search (default 1)")
    ap.add_argument("--top-k", type=int, default=100, help="results per query (default 100)")
    ap.add_argument("--k1", type=float, default=0.9)
    ap.add_argument("--b", type=float, default=0.4)
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error("--threads must be >= 1")

    res = run(args.corpus, split=args.split, threads=args.threads, top_k=args.top_k, k1=args.k1, b=args.b)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        lat = res["latency_ms"]
        print(f"bm25s {res['version']}: {res['docs']} docs indexed in {res['index_seconds']:.3f}s "
              f"({res['docs_per_s']:.0f} docs/s)")
        print(f"{res['queries']} queries, batch ({res['search_threads']} threads) {res['batch_seconds']:.3f}s "
              f"= {res['qps']:.0f} qps; latency p50 {lat['p50']:.3f} ms, p99 {lat['p99']:.3f} ms")
        print(f"nDCG@10 = {res['ndcg@10']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
