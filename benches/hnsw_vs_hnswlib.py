#!/usr/bin/env python3
"""Side-by-side HNSW benchmark: Sift's vector index vs hnswlib (CPU), same vectors and settings.

Usage (from the repository root):
    python3 -m benches.hnsw_vs_hnswlib [--vectors 20000] [--dim 384] [--queries 1000] \
        [--m 24] [--ef-construction 200] [--ef 16,32,64,128,256] [--k 10] [--threads 2] \
        [--rounds 3] [--out eval/results/hnsw_vs_hnswlib] \
        [--hnsw-rs-bin PATH] [--sift-bin PATH] [--target-recall 0.95,0.99]

Three-way, with hnsw_rs (benches/decisions/, a workspace of its own; see its README.md):
    CARGO_TARGET_DIR=target/decisions cargo build --release \
        --manifest-path benches/decisions/Cargo.toml
    python3 -m benches.hnsw_vs_hnswlib --hnsw-rs-bin target/decisions/release/hnsw_rs_peer \
        --sift-bin target/decisions/release/sift_hnsw --ef 10,16,32,64,128,256 \
        --out eval/results/hnsw_three_way

Data (written once under target/hnsw-bench/, deterministic, seed 7): unit vectors drawn
around 200 random centres (clustered, as text embeddings are), and queries drawn the same
way. Each round runs, in fresh processes and alternating order, Sift
(`cargo bench -q --bench hnsw -- ...`, from the repository root) and the peer
(`eval/peers/hnswlib_peer.py`). `--sift-bin PATH` runs Sift's runner as a built program
(benches/decisions/ builds `benches/hnsw.rs` as `sift_hnsw`) in place of `cargo bench`;
`--hnsw-rs-bin PATH` adds hnsw_rs (`benches/decisions/src/bin/hnsw_rs_peer.rs`) as a third
contender, each round then rotating the order of the three. Reported per engine, median
over rounds: build vectors/s, and for each ef its recall@k and queries/s; the headline is
queries/s at the smallest ef whose recall@k reaches each `--target-recall` (each engine at
its own ef).
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


def spread(values: list[float]) -> str:
    """min-max of a metric over rounds, for the report."""
    return f"{fmt(min(values))}-{fmt(max(values))}"


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


def rel(path: str) -> str:
    """`path` relative to the repository root when it lies inside it, else absolute."""
    p = os.path.abspath(path)
    return os.path.relpath(p, REPO) if p.startswith(REPO + os.sep) else p


NAMES = {"sift": "Sift", "hnswlib": "hnswlib", "hnsw_rs": "hnsw_rs"}


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
    ap.add_argument("--target-recall", default="0.95", help="comma-separated recall@k targets")
    ap.add_argument("--out", default="eval/results/hnsw_vs_hnswlib")
    ap.add_argument("--sift-bin", default=None, help="Sift's built runner, in place of cargo bench")
    ap.add_argument("--hnsw-rs-bin", default=None, help="the built hnsw_rs runner: adds hnsw_rs")
    a = ap.parse_args()
    targets = [float(t) for t in a.target_recall.split(",")]
    base, queries = make_data(a.vectors, a.dim, a.queries, os.path.join(REPO, "target", "hnsw-bench"))
    common = ["--base", base, "--queries", queries, "--m", str(a.m), "--ef-construction",
              str(a.ef_construction), "--ef", a.ef, "--k", str(a.k), "--threads", str(a.threads), "--json"]
    cmds = {
        "sift": ([os.path.abspath(a.sift_bin)] + common, False) if a.sift_bin
        else ("cargo bench -q --bench hnsw -- " + " ".join(common), True),
        "hnswlib": ([sys.executable, os.path.join(REPO, "eval", "peers", "hnswlib_peer.py")] + common, False),
    }
    if a.hnsw_rs_bin:
        cmds["hnsw_rs"] = ([os.path.abspath(a.hnsw_rs_bin)] + common, False)
    engines = list(cmds)
    peers = engines[1:]
    raw: dict = {e: [] for e in engines}
    for r in range(a.rounds):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        if len(engines) == 2 and r % 2 == 1:
            order = ["hnswlib", "sift"]
        for engine in order:
            cmd, shell = cmds[engine]
            res, _ = run_cmd(engine, cmd, shell)
            raw[engine].append(res)
        print(f"round {r + 1}/{a.rounds} ({' '.join(order)}): " + ", ".join(
            f"{e} build {raw[e][-1]['build_vectors_per_s']:.0f} vectors/s" for e in engines), file=sys.stderr)
    med = {e: median_result(v) for e, v in raw.items()}
    names = [NAMES[e] for e in engines]
    title = " vs ".join(names)
    lines = [
        f"# HNSW: {title} ({a.vectors} x {a.dim} clustered unit vectors, {a.queries} queries)",
        "",
        f"| metric (median of {a.rounds} rounds) | " + " | ".join(names) + " | "
        + " | ".join(f"Sift / {NAMES[p]}" for p in peers) + " |",
        "|---|" + "---:|" * (len(engines) + len(peers)),
    ]
    bv = {e: med[e]["build_vectors_per_s"] for e in engines}
    lines.append("| build (vectors/s) | " + " | ".join(fmt(bv[e]) for e in engines) + " | "
                 + " | ".join(f"{bv['sift'] / bv[p]:.2f}x" for p in peers) + " |")
    for t in targets:
        heads = {e: headline(med[e], t) for e in engines}
        efs = " / ".join(str(heads[e][0]) for e in engines)
        cells = [fmt(heads[e][1]) if heads[e][1] else "not reached" for e in engines]
        ratios = [f"{heads['sift'][1] / heads[p][1]:.2f}x" if heads["sift"][1] and heads[p][1] else "-"
                  for p in peers]
        lines.append(f"| queries/s at recall@{a.k} >= {t} (ef {efs}) | " + " | ".join(cells) + " | "
                     + " | ".join(ratios) + " |")
    lines += ["", "| ef | " + " | ".join(f"{n} recall@{a.k} | {n} queries/s" for n in names) + " |",
              "|---:|" + "---:|---:|" * len(engines)]
    for i, s in enumerate(med["sift"]["sweep"]):
        lines.append(f"| {s['ef']} | " + " | ".join(
            f"{med[e]['sweep'][i]['recall']:.4f} | {fmt(med[e]['sweep'][i]['queries_per_s'])}" for e in engines) + " |")
    if a.rounds > 1:
        lines += ["", "Sift / peer within each round (the rounds' median, min-max), as a check on the "
                  "ratios of medians above (a shared machine's load changes between rounds):", "",
                  "| metric | " + " | ".join(f"Sift / {NAMES[p]}" for p in peers) + " |",
                  "|---|" + "---:|" * len(peers)]

        def per_round(get) -> str:
            cells = []
            for p in peers:
                r = [get(x) / get(y) for x, y in zip(raw["sift"], raw[p]) if get(x) and get(y)]
                cells.append(f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})" if r else "-")
            return " | ".join(cells)

        lines.append("| build (vectors/s) | " + per_round(lambda x: x["build_vectors_per_s"]) + " |")
        for i, s in enumerate(med["sift"]["sweep"]):
            lines.append(f"| queries/s at ef {s['ef']} | "
                         + per_round(lambda x, i=i: x["sweep"][i]["queries_per_s"]) + " |")
        lines += ["", f"Spread over the {a.rounds} rounds (min-max):", "",
                  "| engine | build (vectors/s) | " + " | ".join(
                      f"ef {s['ef']} queries/s" for s in med["sift"]["sweep"]) + " |",
                  "|---|---:|" + "---:|" * len(med["sift"]["sweep"])]
        for e in engines:
            lines.append(f"| {NAMES[e]} | {spread([r['build_vectors_per_s'] for r in raw[e]])} | " + " | ".join(
                spread([r["sweep"][i]["queries_per_s"] for r in raw[e]])
                for i in range(len(med["sift"]["sweep"]))) + " |")
    m = machine()
    with open("/proc/cpuinfo") as f:
        bf16 = " avx512_bf16 " in f.read().replace("\n", " ")
    walk = ("bfloat16 copies of the vectors (the processor has AVX512-BF16), hits scored again in f32"
            if bf16 else "the f32 vectors")
    build_note = ("Sift's build time includes its level-0 reachability check and writing vectors and graph "
                  "to disk; hnswlib's is in-memory insertion")
    if "hnsw_rs" in engines:
        build_note += ", hnsw_rs's in-memory `parallel_insert_slice` (distance `DistDot`, AVX2 through " \
                      "anndists' `simdeez_f` feature; `max_nb_connection` = M)"
    peer_setup = "pip install hnswlib && "
    built = a.hnsw_rs_bin or a.sift_bin
    if built:
        target = rel(os.path.dirname(os.path.dirname(os.path.abspath(built))))
        peer_setup += (f"CARGO_TARGET_DIR={target} cargo build --release --manifest-path "
                       "benches/decisions/Cargo.toml && ")
    if not a.sift_bin:
        peer_setup = "cargo bench --bench hnsw --no-run && " + peer_setup
    flags = "".join(f" --{k.replace('_', '-')} {v}" for k, v in (
        ("vectors", a.vectors), ("dim", a.dim), ("queries", a.queries), ("m", a.m),
        ("ef_construction", a.ef_construction), ("ef", a.ef), ("k", a.k), ("threads", a.threads),
        ("rounds", a.rounds), ("target_recall", a.target_recall)))
    if a.sift_bin:
        flags += f" --sift-bin {rel(a.sift_bin)}"
    if a.hnsw_rs_bin:
        flags += f" --hnsw-rs-bin {rel(a.hnsw_rs_bin)}"
    lines += [
        "",
        f"- M {a.m}, ef_construction {a.ef_construction}, k {a.k}, threads {a.threads}; inner-product space; "
        f"{build_note}. Each round runs every engine in a fresh process, the order rotating between rounds.",
        f"- Sift's graph walk on this processor: {walk}.",
        "- Versions: " + ", ".join(f"{NAMES[e]} {raw[e][0].get('version')}" for e in engines) + ".",
        f"- Machine: {json.dumps(m)}",
        f"- Date (UTC): {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- Reproduce: `{peer_setup}python3 -m benches.hnsw_vs_hnswlib{flags} --out {a.out}`",
    ]
    md = "\n".join(lines) + "\n"
    write_report(os.path.join(REPO, a.out), {"args": vars(a), "raw": raw, "median": med, "machine": m}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
