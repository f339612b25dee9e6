#!/usr/bin/env python3
"""BM25 search time per query on a physics-sized domain: Sift vs bm25s (numpy and numba).

Usage (from the repository root):
    python3 benches/make_synthetic_corpus.py --out target/physics-sized --passages 338000 \
        --queries 100 --images 11 --query-words 245
    cargo bench --bench bm25 --no-run
    python3 -m benches.bm25_search_338k --corpus target/physics-sized --rounds 3 \
        --out eval/results/bm25_search_338k

Sift's index is built once with `sift index` (--sift, default target/release/sift) under
--work, bm25s's once by the peer (eval/peers/bm25s_mmbright_peer.py); neither build is timed
here. Then, for --rounds rounds, for each top-k (1000 and 100), three fresh processes in a
rotated order: the Sift bench (benches/bm25.rs: open the index, one untimed warm-up batch,
then --repeat timed batches of analyse + score + top-k of every query on a pool of --threads
threads) with --bm25 lucene (Lucene's BM25Similarity, what bm25s's "lucene" method computes)
and with --bm25 reference (MM-BRIGHT's), and bm25s with backend="numpy" and backend="numba"
(its two backends; n_threads = --threads; tokenize + retrieve timed). Each reports the median
batch time over the query count: the search time per query. Reported: the median over rounds,
and bm25s's faster backend / Sift (> 1: Sift ahead).

Writes <out>.json (machine, versions, commands, raw rounds, medians, ratios) and <out>.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import os
import statistics
import subprocess
import sys

from benches.benchlib import PEER_DIR, REPO, fmt, machine, run_cmd, script_argv, write_report


def sift_bench_binary() -> str:
    found = [p for p in glob.glob(os.path.join(REPO, "target", "release", "deps", "bm25-*"))
             if os.access(p, os.X_OK) and not p.endswith(".d")]
    if not found:
        raise SystemExit("no bench binary: run `cargo bench --bench bm25 --no-run` first")
    return max(found, key=os.path.getmtime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="MM-BRIGHT-layout corpus (make_synthetic_corpus.py)")
    ap.add_argument("--domain", default="synthetic")
    ap.add_argument("--work", default="target/bm25-search-338k", help="where both indexes are kept")
    ap.add_argument("--sift", default="target/release/sift")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    corpus = os.path.abspath(args.corpus)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    sift_index = os.path.join(work, "sift-index")
    if not os.path.exists(os.path.join(sift_index, "manifest.json")):
        subprocess.run([os.path.abspath(args.sift), "index", "--corpus", corpus, "--index", sift_index,
                        "--domains", args.domain, "--threads", str(args.threads), "--quiet"],
                       cwd=REPO, check=True)
    bench = sift_bench_binary()
    peer = os.path.join(PEER_DIR, "bm25s_mmbright_peer.py")
    env_threads = str(args.threads)
    os.environ.update(RAYON_NUM_THREADS=env_threads, NUMBA_NUM_THREADS=env_threads,
                      OMP_NUM_THREADS=env_threads)

    def sift_cmd(k: int, scoring: str) -> list:
        return [bench, "--corpus", corpus, "--index", sift_index, "--threads", env_threads,
                "--top-k", str(k), "--repeat", str(args.repeat), "--bm25", scoring]

    def peer_cmd(k: int, backend: str) -> list:
        return [sys.executable, peer, "--corpus", corpus, "--domain", args.domain,
                "--index", os.path.join(work, "bm25s-index"), "--backend", backend,
                "--top-k", str(k), "--threads", env_threads, "--repeat", str(args.repeat)]

    engines = ["sift-lucene", "sift-reference", "bm25s-numpy", "bm25s-numba"]
    cmds = {}
    for k in (1000, 100):
        cmds[k] = {
            "sift-lucene": sift_cmd(k, "lucene"),
            "sift-reference": sift_cmd(k, "reference"),
            "bm25s-numpy": peer_cmd(k, "numpy"),
            "bm25s-numba": peer_cmd(k, "numba"),
        }
    # the bm25s index is built by its first run, outside the timed rounds
    run_cmd("bm25s index", peer_cmd(10, "numpy")[:-2] + ["--repeat", "1"], shell=False)

    raw: dict = {k: {e: [] for e in engines} for k in cmds}
    for r in range(args.rounds):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for k in cmds:
            for e in order:
                res, _ = run_cmd(f"{e} top {k}", cmds[k][e], shell=False)
                if e.startswith("sift"):
                    ms = res["batch_seconds"] / res["queries"] * 1000.0
                else:
                    ms = res["ms_per_query"]
                raw[k][e].append(ms)
                print(f"round {r + 1} top {k} {e}: {ms:.2f} ms/query", file=sys.stderr)

    medians = {k: {e: statistics.median(v) for e, v in raw[k].items()} for k in raw}
    ratios = {}
    for k, m in medians.items():
        best_peer = min(m["bm25s-numpy"], m["bm25s-numba"])
        ratios[k] = {s: best_peer / m[s] for s in ("sift-lucene", "sift-reference")}

    import bm25s
    report = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "machine": machine(),
        "command": " ".join(["python3", *script_argv()]),
        "bm25s": bm25s.__version__,
        "corpus": corpus,
        "commands": {str(k): v for k, v in cmds.items()},
        "raw_ms_per_query": {str(k): v for k, v in raw.items()},
        "median_ms_per_query": {str(k): v for k, v in medians.items()},
        "best_bm25s_over_sift": {str(k): v for k, v in ratios.items()},
    }
    lines = [
        "# BM25 search per query on a physics-sized domain (338,000 passages, 245-word queries)",
        "",
        f"`{report['command']}` on {report['machine'].get('cpu')} ({report['machine'].get('nproc')} CPUs), "
        f"{report['date'][:10]}; bm25s {bm25s.__version__}. {args.rounds} rounds, engines in a rotated "
        f"order in fresh processes; each reports the median of {args.repeat} timed batches of the "
        f"100 queries on {args.threads} threads (analyse/tokenize + score + top-k), after a warm-up "
        "batch; the table is the median over rounds, in ms per query.",
        "",
        "| top k | sift --bm25 lucene | sift --bm25 reference | bm25s numpy | bm25s numba | faster bm25s / sift lucene | faster bm25s / sift reference |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k in (1000, 100):
        m, q = medians[k], ratios[k]
        lines.append(f"| {k} | {fmt(m['sift-lucene'])} | {fmt(m['sift-reference'])} | {fmt(m['bm25s-numpy'])} | "
                     f"{fmt(m['bm25s-numba'])} | {q['sift-lucene']:.2f} | {q['sift-reference']:.2f} |")
    lines += ["", "Raw ms per query by round:", ""]
    for k in (1000, 100):
        for e in engines:
            lines.append(f"- top {k} {e}: " + ", ".join(fmt(x) for x in raw[k][e]))
    lines.append("")
    write_report(args.out, report, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
