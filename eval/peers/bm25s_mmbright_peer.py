#!/usr/bin/env python3
"""bm25s on one domain of an MM-BRIGHT-layout corpus: search time per query, in process.

Usage (one measurement, one JSON line on stdout):
    python3 eval/peers/bm25s_mmbright_peer.py --corpus DIR --domain D --index DIR \
        --backend numpy|numba --top-k 1000 --threads 2 [--repeat 5]

The bm25s index (method="lucene", k1 0.9, b 0.4, English stop words, PyStemmer's English
stemmer: what Sift's --bm25 lucene computes) is built from documents/{D}.parquet and saved
under --index when absent (not timed). Then: load it (backend chosen here), one untimed
warm-up of the whole batch (numba compiles in it), and --repeat timed batches of
tokenize(every query of examples/{D}.parquet) + retrieve(k=--top-k, n_threads=--threads);
the median batch time over the query count is the search time per query.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--domain", required=True)
    ap.add_argument("--index", required=True, help="where the bm25s index is saved / loaded")
    ap.add_argument("--backend", choices=["numpy", "numba"], required=True)
    ap.add_argument("--top-k", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    import bm25s
    import pyarrow.parquet as pq
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    if not os.path.exists(os.path.join(args.index, "params.index.json")):
        docs = pq.read_table(os.path.join(args.corpus, "documents", f"{args.domain}.parquet"))
        texts = docs.column("content").to_pylist()
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
        retriever.index(tokens, show_progress=False)
        retriever.save(args.index)
    queries = pq.read_table(os.path.join(args.corpus, "examples", f"{args.domain}.parquet"))
    texts = queries.column("query").to_pylist()
    retriever = bm25s.BM25.load(args.index, override_params={"backend": args.backend}, show_progress=False)
    n_threads = args.threads if args.threads > 1 else 0

    def batch():
        q = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(q, k=args.top_k, n_threads=n_threads, show_progress=False)

    batch()  # warm-up (numba compiles here)
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        batch()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    print(json.dumps({
        "engine": f"bm25s-{args.backend}",
        "version": bm25s.__version__,
        "backend": retriever.backend,
        "queries": len(texts),
        "top_k": args.top_k,
        "threads": args.threads,
        "batch_seconds": times,
        "ms_per_query": median / len(texts) * 1000.0,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
