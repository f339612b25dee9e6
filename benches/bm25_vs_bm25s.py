#!/usr/bin/env python3
"""Side-by-side BM25 benchmark: Sift vs bm25s.

Usage (from the repository root):
    python3 -m benches.bm25_vs_bm25s --corpus /work/shared/data/cranfield \
        --sift-bench 'cargo bench -q --bench bm25 -- --corpus /work/shared/data/cranfield --threads 2 --json' \
        --rounds 5 --threads 2 --out eval/results/bm25_cranfield

Each round runs, in a fresh process each, the Sift command (a shell string, run as given;
its corpus/threads are the caller's job) and the bm25s peer (eval/peers/bm25s_peer.py:run,
imported as eval.peers.bm25s_peer in a `python3 -c` subprocess run from the repository root),
alternating which goes first. Each prints one JSON object (the last stdout line that parses
as a JSON object is taken). The per-metric median over rounds is computed for each engine, and
ratios are oriented so that > 1 means Sift is better: Sift/bm25s for docs_per_s and qps,
bm25s/Sift for p50/p99 latency.

Writes <out>.json (machine, date, command line, raw rounds, medians, ratios) and <out>.md
(Markdown table), and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys

from benches.benchlib import fmt, machine, run_cmd, script_argv, write_report

KEYS = ["engine", "version", "docs", "index_seconds", "docs_per_s", "queries",
        "search_threads", "batch_seconds", "qps", "latency_ms", "ndcg@10"]
# (label, path into the result, ratio orientation): "sift/peer" or "peer/sift" or None
METRICS = [
    ("index throughput (docs/s)", ("docs_per_s",), "sift/peer"),
    ("search throughput (qps, batch)", ("qps",), "sift/peer"),
    ("latency p50 (ms, 1 query)", ("latency_ms", "p50"), "peer/sift"),
    ("latency p99 (ms, 1 query)", ("latency_ms", "p99"), "peer/sift"),
]
EXTRA = [("index_seconds",), ("batch_seconds",), ("ndcg@10",)]
PEER_PKGS = ["bm25s", "PyStemmer", "numpy", "scipy", "pytrec-eval-terrier", "numba", "jax"]


def check_keys(label: str, res: dict, engine: str) -> None:
    missing = [k for k in KEYS if k not in res]
    missing += [f"latency_ms.{k}" for k in ("p50", "p99") if k not in res.get("latency_ms", {})]
    if missing:
        raise SystemExit(f"{label}: result lacks keys {missing}: {json.dumps(res)}")
    extra = sorted(set(res) - set(KEYS))
    if extra:
        print(f"warning: {label}: extra keys {extra} (kept in raw results)", file=sys.stderr)
    if res["engine"] != engine:
        print(f"warning: {label}: engine is {res['engine']!r}, expected {engine!r}", file=sys.stderr)


def get(res: dict, path: tuple):
    for k in path:
        res = res[k]
    return res


def peer_cmd(args) -> list:
    code = (
        "import json; from eval.peers import bm25s_peer; "
        "print(json.dumps(bm25s_peer.run({c!r}, split={s!r}, threads={t}, top_k={k}, k1={k1!r}, b={b!r})), flush=True)"
    ).format(c=args.corpus, s=args.split, t=args.threads, k=args.top_k, k1=args.k1, b=args.b)
    return [sys.executable, "-c", code]


def peer_env() -> dict:
    code = (
        "import json, importlib.metadata as m\n"
        "out = {}\n"
        f"for p in {PEER_PKGS!r}:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = None\n"
        "print(json.dumps(out))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    pkgs = json.loads(p.stdout)
    return {
        "python": sys.executable + " " + platform.python_version(),
        "packages": pkgs,
        # what bm25s 0.3.x picks with backend="auto" / backend_selection="auto"
        "bm25s_backend": "numba" if pkgs.get("numba") else "numpy",
        "bm25s_topk": "jax" if pkgs.get("jax") else "numpy",
    }


def markdown(report: dict) -> str:
    med, ratios = report["medians"], report["ratios"]
    s, p = med["sift"], med["bm25s"]
    rounds = report["rounds"]
    lines = [
        f"| metric (median of {rounds} rounds) | Sift | bm25s | ratio (higher = Sift better) |",
        "|---|---:|---:|---:|",
    ]
    for label, path, _ in METRICS:
        key = ".".join(path)
        lines.append(f"| {label} | {fmt(get(s, path))} | {fmt(get(p, path))} | {ratios[key]:.2f}x |")
    lines.append(f"| nDCG@10 | {s['ndcg@10']:.4f} | {p['ndcg@10']:.4f} | n/a |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description="Sift vs bm25s BM25 benchmark driver")
    ap.add_argument("--corpus", required=True, help="BEIR-layout collection directory (for the bm25s peer)")
    ap.add_argument("--sift-bench", required=True,
                    help="shell command printing one Sift result JSON object (run as given, nothing appended)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="bm25s batch search threads")
    ap.add_argument("--split", default="test")
    ap.add_argument("--top-k", type=int, default=100)
    ap.add_argument("--k1", type=float, default=0.9)
    ap.add_argument("--b", type=float, default=0.4)
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = ap.parse_args()
    if args.rounds < 1 or args.threads < 1:
        ap.error("--rounds and --threads must be >= 1")

    command_line = shlex.join(["python3"] + script_argv())
    started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    mach = machine()
    env = peer_env()

    raw = []
    pcmd = peer_cmd(args)
    for r in range(args.rounds):
        order = ["sift", "bm25s"] if r % 2 == 0 else ["bm25s", "sift"]
        entry = {"round": r + 1, "order": order}
        for eng in order:
            if eng == "sift":
                res, wall = run_cmd(f"round {r + 1} sift", args.sift_bench, shell=True)
                check_keys(f"round {r + 1} sift", res, "sift")
            else:
                res, wall = run_cmd(f"round {r + 1} bm25s", pcmd, shell=False)
                check_keys(f"round {r + 1} bm25s", res, "bm25s")
            entry[eng] = res
            entry[f"{eng}_process_seconds"] = wall
        raw.append(entry)
        print(f"round {r + 1}/{args.rounds} ({' then '.join(order)}): "
              f"sift {entry['sift']['qps']:.0f} qps, bm25s {entry['bm25s']['qps']:.0f} qps",
              file=sys.stderr)

    medians = {}
    for eng in ("sift", "bm25s"):
        first = raw[0][eng]
        m = {k: first[k] for k in ("engine", "version", "docs", "queries", "search_threads")}
        for _, path, _ in METRICS:
            vals = [get(e[eng], path) for e in raw]
            if len(path) == 2:
                m.setdefault(path[0], {})[path[1]] = statistics.median(vals)
            else:
                m[path[0]] = statistics.median(vals)
        for path in EXTRA:
            m[path[0]] = statistics.median(get(e[eng], path) for e in raw)
        medians[eng] = m

    ratios = {}
    for _, path, orient in METRICS:
        sv, pv = get(medians["sift"], path), get(medians["bm25s"], path)
        ratios[".".join(path)] = (sv / pv) if orient == "sift/peer" else (pv / sv)

    warnings = []
    s, p = medians["sift"], medians["bm25s"]
    if s["docs"] != p["docs"] or s["queries"] != p["queries"]:
        warnings.append(f"collections differ: sift {s['docs']} docs/{s['queries']} queries, "
                        f"bm25s {p['docs']} docs/{p['queries']} queries")
    if s["search_threads"] != p["search_threads"]:
        warnings.append(f"search threads differ: sift {s['search_threads']}, bm25s {p['search_threads']}")
    if abs(s["ndcg@10"] - p["ndcg@10"]) > 0.02:
        warnings.append(f"nDCG@10 differs by more than 0.02: sift {s['ndcg@10']:.4f}, bm25s {p['ndcg@10']:.4f}")
    for w in warnings:
        print("warning: " + w, file=sys.stderr)

    report = {
        "benchmark": "bm25_vs_bm25s",
        "date": started,
        "command": command_line,
        "argv": script_argv(),
        "cwd": os.getcwd(),
        "machine": mach,
        "peer_env": env,
        "settings": {"corpus": os.path.abspath(args.corpus), "split": args.split, "threads": args.threads,
                     "top_k": args.top_k, "k1": args.k1, "b": args.b, "sift_bench": args.sift_bench,
                     "peer_command": pcmd},
        "rounds": args.rounds,
        "raw": raw,
        "medians": medians,
        "ratios": ratios,
        "warnings": warnings,
    }

    table = markdown(report)
    mach_line = f"{mach['cpu']}, {mach['nproc']} CPUs; `{mach['uname']}`"
    md = "\n".join([
        f"# BM25: Sift vs bm25s on {os.path.basename(os.path.normpath(args.corpus))}",
        "",
        table,
        "",
        f"nDCG@10: Sift {s['ndcg@10']:.4f}, bm25s {p['ndcg@10']:.4f}.",
        "",
        f"- Sift {s['version']}; bm25s {p['version']} (backend {env['bm25s_backend']}, "
        f"Lucene BM25, k1={args.k1}, b={args.b}, top-k {args.top_k}, {p['search_threads']} batch threads); "
        f"{p['docs']} docs, {p['queries']} queries ({args.split}).",
        f"- Machine: {mach_line}",
        f"- Date (UTC): {started}",
        f"- Reproduce: `{command_line}`",
        *(["- Warnings: " + "; ".join(warnings)] if warnings else []),
        "",
    ])

    write_report(args.out, report, md)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
