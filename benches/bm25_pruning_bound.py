#!/usr/bin/env python3
"""How much exact top-k pruning (MaxScore / WAND) could save for long queries on one domain.

Usage, from the repository root (after benches/bm25_search_338k.py, which saves the bm25s index
it reads):
    python3 -m benches.bm25_pruning_bound --corpus target/physics-sized \
        --index target/bm25-search-338k/bm25s-index --queries 30 \
        --out eval/results/bm25_pruning_338k

An optimistic bound, not a search: every query is first scored exhaustively (Lucene's BM25,
bm25s's score matrix: every posting's exact contribution), so the true k-th score theta is
known in advance, and each term's upper bound is its exact largest contribution (what a
precomputed-impact index would store; block-max bounds are tighter per block but the same
per term). MaxScore sorts terms by upper bound; the lowest ones whose bounds sum below theta
are "non-essential": a passage matching only them cannot enter the top k, so only the
essential terms' posting lists are walked, and each passage found there is scored on the
non-essential terms too unless its essential partial score plus the non-essential bounds
stays below theta. Reported per operating point (how much of theta the non-essential bounds
may cover): the share of all postings in essential lists (walked in full) and the passages
that remain candidates (scored on every term). Pruning pays only where both are small.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
from collections import Counter

from benches.benchlib import machine, script_argv, write_report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--domain", default="synthetic")
    ap.add_argument("--index", required=True, help="a bm25s index (eval/peers/bm25s_mmbright_peer.py)")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import bm25s
    import numpy as np
    import pyarrow.parquet as pq
    import Stemmer

    r = bm25s.BM25.load(args.index, show_progress=False)
    data, ind, ptr = r.scores["data"], r.scores["indices"], r.scores["indptr"]
    n_docs = r.scores["num_docs"]
    vocab = r.vocab_dict
    texts = pq.read_table(os.path.join(args.corpus, "examples", f"{args.domain}.parquet")).column("query").to_pylist()
    tokens = bm25s.tokenize(texts[: args.queries], stopwords="en", stemmer=Stemmer.Stemmer("english"),
                            show_progress=False, return_ids=False)
    fractions = (0.5, 0.75, 0.9, 1.0)
    rows = {k: {f: {"essential_postings": [], "candidates": []} for f in fractions} for k in (1000, 100)}
    terms_per_query, postings_per_query = [], []
    for q in tokens:
        tf = Counter(w for w in q if w in vocab)
        cols = [(vocab[w], n) for w, n in tf.items()]
        ub = np.array([float(data[ptr[t]:ptr[t + 1]].max()) * n for t, n in cols])
        df = np.array([ptr[t + 1] - ptr[t] for t, _ in cols])
        full = np.zeros(n_docs, np.float32)
        for t, n in cols:
            full[ind[ptr[t]:ptr[t + 1]]] += data[ptr[t]:ptr[t + 1]] * n
        terms_per_query.append(len(cols))
        postings_per_query.append(int(df.sum()))
        order = np.argsort(ub)  # ascending bounds
        cum = np.cumsum(ub[order])
        for k in rows:
            theta = float(np.partition(full, -k)[-k])
            for f in fractions:
                # the most low-bound terms whose bounds sum below f * theta
                j = int(np.searchsorted(cum, f * theta, side="left"))
                rest = float(cum[j - 1]) if j > 0 else 0.0
                essential = order[j:]
                partial = np.zeros(n_docs, np.float32)
                for i in essential:
                    t, n = cols[i]
                    partial[ind[ptr[t]:ptr[t + 1]]] += data[ptr[t]:ptr[t + 1]] * n
                seen = partial > 0
                cand = int((seen & (partial + rest >= theta)).sum())
                rows[k][f]["essential_postings"].append(float(df[essential].sum() / df.sum()))
                rows[k][f]["candidates"].append(cand / n_docs)
    med = {k: {f: {m: statistics.median(v) for m, v in d.items()} for f, d in kk.items()} for k, kk in rows.items()}
    report = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "machine": machine(),
        "command": " ".join(["python3", *script_argv()]),
        "bm25s": bm25s.__version__,
        "passages": int(n_docs),
        "queries": len(tokens),
        "median_terms_per_query": statistics.median(terms_per_query),
        "median_postings_per_query": statistics.median(postings_per_query),
        "median": {str(k): {str(f): v for f, v in d.items()} for k, d in med.items()},
    }
    lines = [
        "# Exact top-k pruning on long queries: an optimistic bound (MaxScore with the true theta)",
        "",
        f"`{report['command']}`, {report['date'][:10]}: {n_docs:,} passages, {len(tokens)} queries of 245 words "
        f"(median {report['median_terms_per_query']:.0f} distinct analysed terms, "
        f"{report['median_postings_per_query']:,.0f} postings per query). Lucene BM25 (k1 0.9, b 0.4). "
        "Medians over queries.",
        "",
        "| top k | non-essential bounds cover | postings in essential lists (walked in full) | passages left as candidates |",
        "|---:|---:|---:|---:|",
    ]
    for k in (1000, 100):
        for f in fractions:
            m = med[k][f]
            lines.append(f"| {k} | {f:.0%} of theta | {m['essential_postings']:.0%} | {m['candidates']:.0%} |")
    lines += [
        "",
        "Reading: the smaller the share of theta the non-essential bounds may cover, the more postings "
        "are walked in full and the fewer passages are left to score on the other terms. Those other "
        "lists are the long ones (their terms occur in most passages), so probing them for the "
        "candidates still decodes nearly all of their blocks. The bound leaves out finding theta (unknown "
        "when a search starts) and summing each candidate's terms in term order (for the same scores).",
        "",
    ]
    write_report(args.out, report, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
