#!/usr/bin/env python3
"""hnswlib peer runner: HNSW build and search speed on .npy vectors.

Usage:
    python3 eval/peers/hnswlib_peer.py --base base.npy --queries queries.npy \
        [--m 24] [--ef-construction 200] [--ef 16,32,64,128,256] [--k 10] [--threads 2] [--json]

Same protocol as Sift's `benches/hnsw.rs`: inner-product space (1 - dot, the vectors are unit
length), M and ef_construction as given, `set_num_threads(T)`. Timed: `add_items` of all base
vectors (the build), then for each ef `knn_query` of all queries at once (hnswlib spreads them
over its threads). Recall@k is against exact search (numpy, untimed). Prints one JSON object:
    engine, version, vectors, dim, queries, k, m, ef_construction, threads, build_seconds,
    build_vectors_per_s, sweep [{ef, recall, queries_per_s}], peak_rss_mb
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--m", type=int, default=24)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef", default="16,32,64,128,256")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import hnswlib

    base = np.load(a.base).astype(np.float32, copy=False)
    queries = np.load(a.queries).astype(np.float32, copy=False)
    n, d = base.shape
    k = min(a.k, n)
    scores = queries @ base.T
    exact = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    index = hnswlib.Index(space="ip", dim=d)
    index.init_index(max_elements=n, ef_construction=a.ef_construction, M=a.m, random_seed=100)
    index.set_num_threads(a.threads)
    t0 = time.perf_counter()
    index.add_items(base, np.arange(n))
    build = time.perf_counter() - t0
    sweep = []
    for ef in [int(x) for x in a.ef.split(",")]:
        index.set_ef(max(ef, k))
        t0 = time.perf_counter()
        labels, _ = index.knn_query(queries, k=k)
        secs = time.perf_counter() - t0
        hit = sum(len(set(l.tolist()) & set(e.tolist())) for l, e in zip(labels, exact))
        sweep.append({"ef": ef, "recall": hit / (len(queries) * k), "queries_per_s": len(queries) / secs})
    out = {
        "engine": "hnswlib", "version": getattr(hnswlib, "__version__", "0.8.0"),
        "vectors": n, "dim": d, "queries": len(queries), "k": k, "m": a.m,
        "ef_construction": a.ef_construction, "threads": a.threads,
        "build_seconds": build, "build_vectors_per_s": n / build, "sweep": sweep,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
