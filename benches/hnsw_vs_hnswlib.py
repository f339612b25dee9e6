#!/usr/bin/env python3
"""Side-by-side HNSW benchmark: Sift's vector index vs hnswlib (CPU), same vectors and settings.

Usage (from the repository root):
    python3 -m benches.hnsw_vs_hnswlib [--vectors 20000] [--dim 384] [--queries 1000] \
        [--m 24] [--ef-construction 200] [--ef 16,32,64,128,256] [--k 10] [--threads 2] \
        [--rounds 3] [--out eval/results/hnsw_vs_hnswlib]

Data (written once under target/hnsw-bench/, deterministic, seed 7): unit vectors drawn
around 200 random centres (clustered, as text embeddings are), and queries drawn the same
way. Each round runs, in fresh processes and alternating order, Sift
(`cargo bench -q --bench hnsw -- ...`, from the repository root) and the peer
(`eval/peers/hnswlib_peer.py`). Reported per engine, median over rounds: build vectors/s,
and for each ef its recall@k and queries/s; the headline is queries/s at the smallest ef
whose recall@k >= 0.95 (each engine at its own ef).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys

import numpy as np

from benches.benchlib import fmt, machine, run_cmd, write_report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_data(n: int, d: int, q: int, path: str) -> tuple[str, str]:
    os.makedirs(path, exist_ok=True)
    base_p = os.path.join(path, f"base_{n}x{d}.npy")
    query_p = os.path.join(path, f"queries_{q}x{d}.npy")
    if os.path.exists(base_p) and os.path.exists(query_p):
        return base_p, query_p
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((200, d)).astype(np.float32)

    def draw(m: int) -> np.ndarray:
        x = centres[rng.integers(0, 200, m)] + 0.6 * rng.standard_normal((m, d)).astype(np.float32)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    np.save(base_p, draw(n))
    np.save(query_p, draw(q))
    return base_p, query_p


def headline(res: dict, target: float) -> tuple[int | None, float | None]:
    for s in res["sweep"]:
        if s["recall"] >= target:
            return s["ef"], s["queries_per_s"]
    return None, None


def median_result(rounds: list[dict]) -> dict:
    out = dict(rounds[0])
    out["build_vectors_per_s"] = statistics.median(r["build_vectors_per_s"] for r in rounds)
    sweep = []
    for i, s in enumerate(rounds[0]["sweep"]):
        sweep.append({
            "ef": s["ef"],
            "recall": statistics.median(r["sweep"][i]["recall"] for r in rounds),
            "queries_per_s": statistics.median(r["sweep"][i]["queries_per_s"] for r in rounds),
        })
    out["sweep"] = sweep
    out["peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in rounds)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--m", type=int, default=24)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef", default="16,32,64,128,256")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--out", default="eval/results/hnsw_vs_hnswlib")
    a = ap.parse_args()
    base, queries = make_data(a.vectors, a.dim, a.queries, os.path.join(REPO, "target", "hnsw-bench"))
    common = ["--base", base, "--queries", queries, "--m", str(a.m), "--ef-construction",
              str(a.ef_construction), "--ef", a.ef, "--k", str(a.k), "--threads", str(a.threads), "--json"]
    sift_cmd = "cargo bench -q --bench hnsw -- " + " ".join(common)
    peer_cmd = [sys.executable, os.path.join(REPO, "eval", "peers", "hnswlib_peer.py")] + common
    raw = {"sift": [], "hnswlib": []}
    for r in range(a.rounds):
        order = ["sift", "hnswlib"] if r % 2 == 0 else ["hnswlib", "sift"]
        for engine in order:
            res, _ = (run_cmd("sift", sift_cmd, True) if engine == "sift" else run_cmd("hnswlib", peer_cmd, False))
            raw[engine].append(res)
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(
            f"{e} build {raw[e][-1]['build_vectors_per_s']:.0f} vectors/s" for e in ("sift", "hnswlib")), file=sys.stderr)
    med = {e: median_result(v) for e, v in raw.items()}
    (sef, sqps), (pef, pqps) = headline(med["sift"], a.target_recall), headline(med["hnswlib"], a.target_recall)
    lines = [
        f"# HNSW: Sift vs hnswlib ({a.vectors} x {a.dim} clustered unit vectors, {a.queries} queries)",
        "",
        "| metric (median of %d rounds) | Sift | hnswlib | ratio (higher = Sift better) |" % a.rounds,
        "|---|---:|---:|---:|",
        f"| build (vectors/s) | {fmt(med['sift']['build_vectors_per_s'])} | {fmt(med['hnswlib']['build_vectors_per_s'])} | "
        f"{med['sift']['build_vectors_per_s'] / med['hnswlib']['build_vectors_per_s']:.2f}x |",
    ]
    if sqps and pqps:
        lines.append(f"| queries/s at recall@{a.k} >= {a.target_recall} (ef {sef} / {pef}) | {fmt(sqps)} | {fmt(pqps)} | {sqps / pqps:.2f}x |")
    lines += ["", f"| ef | Sift recall@{a.k} | Sift queries/s | hnswlib recall@{a.k} | hnswlib queries/s |", "|---:|---:|---:|---:|---:|"]
    for s, p in zip(med["sift"]["sweep"], med["hnswlib"]["sweep"]):
        lines.append(f"| {s['ef']} | {s['recall']:.4f} | {fmt(s['queries_per_s'])} | {p['recall']:.4f} | {fmt(p['queries_per_s'])} |")
    m = machine()
    lines += [
        "",
        f"- M {a.m}, ef_construction {a.ef_construction}, k {a.k}, threads {a.threads}; inner-product space; "
        "Sift's build time includes its level-0 reachability check and writing vectors and graph to disk; "
        "hnswlib's is in-memory insertion.",
        f"- Machine: {json.dumps(m)}",
        f"- Date (UTC): {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- Reproduce: `cargo bench --bench hnsw --no-run && pip install hnswlib && python3 -m benches.hnsw_vs_hnswlib "
        f"--vectors {a.vectors} --dim {a.dim} --queries {a.queries} --rounds {a.rounds} --out {a.out}`",
    ]
    md = "\n".join(lines) + "\n"
    write_report(os.path.join(REPO, a.out), {"args": vars(a), "raw": raw, "median": med, "machine": m}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
