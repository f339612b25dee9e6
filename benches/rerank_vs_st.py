#!/usr/bin/env python3
"""Side-by-side cross-encoder reranking throughput benchmark: Sift vs sentence-transformers (CPU).

Usage, from the repository root (after cargo build --release -p sift-cli and
python3 benches/make_random_cross_encoder.py):
    python3 -m benches.rerank_vs_st --model target/bench-models/ms-marco-minilm-l6-random \
        --queries /work/shared/data/cranfield/queries.jsonl \
        --passages /work/shared/data/cranfield/corpus.jsonl \
        --items 600 --depth 100 --batch-size 32 --max-length 512 --threads 2 --warmup 32 \
        --rounds 3 --out eval/results/rerank_minilm_l6_cpu
    ... --sift-dtype bf16 --peer-dtype bfloat16 --out ...    # both engines' bfloat16 paths

Each round runs, in a fresh process each, `sift bench rerank --json` with this driver's
settings (threads through RAYON_NUM_THREADS; --sift-dtype) and the sentence-transformers peer
(`python3 -m eval.peers.st_rerank_peer --json` with the same --model/--queries/--passages/--items/
--depth/--concat/--batch-size/--max-length/--threads/--warmup, and --peer-dtype),
alternating which goes first. Both build the same (query, passage) pairs (pair k is
(queries[(k // depth) % Q], passages[k % P]), a passage being --concat consecutive passages
joined) and score each query's --depth pairs in one call, as a reranker does. Each prints one
JSON object with the keys
    engine, version, model, items, batch_size, threads, seconds, items_per_s, peak_rss_mb
plus the tokens per pair, the tokenising time (a separate pass) and the first scores. The
per-metric median over rounds is computed for each engine, and ratios are oriented so that
> 1 means Sift is better: Sift/peer for items_per_s, peer/Sift for seconds and peak_rss_mb.
The driver warns when the engines' token counts differ (they read the same tokenizer.json)
or, in float32 on both sides, when their first scores differ by more than 1e-3.

The report also gives the MM-BRIGHT-scale cost the measured rates imply: 1,585 queries x
depth 100 = 158,500 pairs, in hours, for each engine.

Writes <out>.json (machine, date, command line, raw rounds, medians, ratios, estimate,
warnings) and <out>.md (Markdown), and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import sys

from benches.benchlib import REPO, fmt, machine, script_argv, write_report
from benches.embed_vs_st import check_keys, peer_env, repo_path, run_rounds, summarise

PEER_MODULE = "eval.peers.st_rerank_peer"  # run from the repository root: python3 -m
PEER = "sentence-transformers"
SIFT = os.path.join(REPO, "target", "release", "sift")
KEYS = ["engine", "version", "model", "items", "batch_size", "threads", "seconds",
        "items_per_s", "peak_rss_mb"]
OPTIONAL = {"warmup", "torch", "device", "dtype", "linear_kernel", "load_seconds", "end_rss_mb",
            "depth", "concat", "max_length", "prep_seconds", "model_seconds", "tokens",
            "mean_tokens", "truncated_share", "first_scores"}
METRICS = [
    ("throughput (pairs/s)", "items_per_s", "sift/peer"),
    ("rerank time (s)", "seconds", "peer/sift"),
    ("peak RSS (MB, whole process)", "peak_rss_mb", "peer/sift"),
]
SAME = ["items", "batch_size", "threads", "depth", "concat", "max_length", "tokens"]
CARRY = ("warmup", "torch", "device", "dtype", "linear_kernel", "mean_tokens",
         "truncated_share", "prep_seconds", "model_seconds")
# MM-BRIGHT: 1,585 queries, each reranked at depth 100
MM_BRIGHT_QUERIES = 1585
MM_BRIGHT_DEPTH = 100


def sift_cmd(args) -> str:
    cmd = [args.sift, "bench", "rerank", "--model", repo_path(args.model),
           "--queries", repo_path(args.queries), "--passages", repo_path(args.passages),
           "--items", str(args.items), "--depth", str(args.depth), "--concat", str(args.concat),
           "--batch-size", str(args.batch_size), "--warmup", str(args.warmup),
           "--dtype", args.sift_dtype, "--json"]
    if args.max_length is not None:
        cmd[-1:-1] = ["--max-length", str(args.max_length)]
    return f"RAYON_NUM_THREADS={args.threads} " + shlex.join(cmd)


def peer_cmd(args) -> list:
    cmd = [sys.executable, "-m", PEER_MODULE, "--model", repo_path(args.model),
           "--queries", repo_path(args.queries), "--passages", repo_path(args.passages),
           "--items", str(args.items), "--depth", str(args.depth), "--concat", str(args.concat),
           "--batch-size", str(args.batch_size), "--threads", str(args.threads),
           "--warmup", str(args.warmup), "--dtype", args.peer_dtype, "--json"]
    if args.max_length is not None:
        cmd[-1:-1] = ["--max-length", str(args.max_length)]
    return cmd


def check(label: str, res: dict, engine: str) -> None:
    check_keys(label, res, engine, keys=KEYS, optional=OPTIONAL)


def score_warnings(raw: list, float32: bool) -> list:
    """The engines' first scores, compared (float32 on both sides: within 1e-3)."""
    out = []
    for e in raw:
        s, p = e["sift"].get("first_scores"), e[PEER].get("first_scores")
        if not s or not p or len(s) != len(p):
            continue
        diff = max(abs(a - b) for a, b in zip(s, p))
        e["first_scores_max_abs_diff"] = diff
        if float32 and diff > 1e-3:
            out.append(f"round {e['round']}: first scores differ by up to {diff:.3g}")
    return out


def hours(pairs_per_s: float, pairs: int = MM_BRIGHT_QUERIES * MM_BRIGHT_DEPTH) -> float:
    return pairs / pairs_per_s / 3600


def main() -> int:
    ap = argparse.ArgumentParser(description="Sift vs sentence-transformers cross-encoder reranking throughput driver")
    ap.add_argument("--model", required=True, help="local cross-encoder directory (both engines)")
    ap.add_argument("--queries", required=True, help="queries: lines, or JSONL (BEIR queries.jsonl)")
    ap.add_argument("--passages", required=True, help="passages: lines, or JSONL (BEIR corpus.jsonl)")
    ap.add_argument("--items", type=int, default=600, help="(query, passage) pairs timed")
    ap.add_argument("--depth", type=int, default=100, help="passages per query: the pairs of one call")
    ap.add_argument("--concat", type=int, default=1,
                    help="consecutive passages joined into one (long passages)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=None,
                    help="tokens per pair (default: the tokenizer's model_max_length)")
    ap.add_argument("--threads", type=int, default=1, help="both engines' threads")
    ap.add_argument("--warmup", type=int, default=32, help="pairs in each engine's untimed warm-up")
    ap.add_argument("--sift-dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--peer-dtype", choices=["float32", "bf16-autocast", "bfloat16"],
                    default="float32")
    ap.add_argument("--sift", default=SIFT, help="the sift binary (default: target/release/sift)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--note", action="append", default=[],
                    help="a line added to the Markdown report (repeatable)")
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = ap.parse_args()
    if min(args.rounds, args.threads, args.batch_size, args.items, args.depth, args.concat) < 1 \
            or args.warmup < 0:
        ap.error("--rounds, --threads, --batch-size, --items, --depth and --concat must be >= 1, "
                 "--warmup >= 0")
    for what, path in (("--model", args.model), ("--queries", args.queries),
                       ("--passages", args.passages), ("--sift", args.sift)):
        if not os.path.exists(path):
            ap.error(f"{what} {path}: no such file or directory")

    command_line = shlex.join(["python3"] + script_argv())
    started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    mach = machine()
    env = peer_env()
    scmd, pcmd = sift_cmd(args), peer_cmd(args)
    raw = run_rounds(args.rounds, scmd, pcmd, PEER, check, "pairs/s")
    medians, ratios, warnings = summarise(raw, PEER, METRICS, SAME, CARRY)
    warnings += score_warnings(raw, args.sift_dtype == "f32" and args.peer_dtype == "float32")
    s, p = medians["sift"], medians[PEER]
    pairs = MM_BRIGHT_QUERIES * MM_BRIGHT_DEPTH
    estimate = {"queries": MM_BRIGHT_QUERIES, "depth": MM_BRIGHT_DEPTH, "pairs": pairs,
                "hours": {"sift": hours(s["items_per_s"]), PEER: hours(p["items_per_s"])},
                "note": "at the measured median pairs/s, these threads and these pair lengths "
                        f"(mean {s.get('mean_tokens', float('nan')):.0f} tokens per pair)"}

    report = {
        "benchmark": "rerank_vs_st",
        "date": started,
        "command": command_line,
        "argv": script_argv(),
        "cwd": os.getcwd(),
        "machine": mach,
        "peer_env": env,
        "settings": {"model": args.model, "queries": os.path.abspath(args.queries),
                     "passages": os.path.abspath(args.passages), "items": args.items,
                     "depth": args.depth, "concat": args.concat, "batch_size": args.batch_size,
                     "max_length": args.max_length, "threads": args.threads,
                     "warmup": args.warmup, "sift_dtype": args.sift_dtype,
                     "peer_dtype": args.peer_dtype, "sift_bench": scmd, "peer_command": pcmd},
        "rounds": args.rounds,
        "raw": raw,
        "medians": medians,
        "ratios": ratios,
        "mm_bright_estimate": estimate,
        "warnings": warnings,
    }

    lines = [
        f"| metric (median of {args.rounds} rounds) | Sift ({s.get('dtype')}) | "
        f"{PEER} ({p.get('dtype')}) | ratio (higher = Sift better) |",
        "|---|---:|---:|---:|",
    ]
    for label, key, _ in METRICS:
        lines.append(f"| {label} | {fmt(s[key])} | {fmt(p[key])} | {ratios[key]:.2f}x |")
    lines.append(f"| MM-BRIGHT scale: {pairs:,} pairs (h) | {estimate['hours']['sift']:.2f} | "
                 f"{estimate['hours'][PEER]:.2f} | {ratios['items_per_s']:.2f}x |")
    table = "\n".join(lines)
    mach_line = f"{mach['cpu']}, {mach['nproc']} CPUs; `{mach['uname']}`"
    pk = env["packages"]
    model_name = os.path.basename(os.path.normpath(args.model))

    def share(m):
        return 100 * m["prep_seconds"] / m["seconds"] if m.get("prep_seconds") else float("nan")

    md = "\n".join([
        f"# Cross-encoder reranking: Sift vs sentence-transformers, {model_name}",
        "",
        table,
        "",
        f"- Sift {s['version']} (`--dtype {s.get('dtype')}`, linear layers "
        f"{s.get('linear_kernel')}); sentence-transformers {p['version']} CrossEncoder.predict "
        f"(torch {p.get('torch') or pk.get('torch')}, transformers {pk.get('transformers')}, "
        f"tokenizers {pk.get('tokenizers')}, {p.get('dtype')}, CPU).",
        f"- {p['items']} (query, passage) pairs from `{os.path.basename(args.queries)}` x "
        f"`{os.path.basename(args.passages)}`: each query with {p['depth']} passages "
        + (f"(each passage {p['concat']} consecutive passages joined) " if p["concat"] > 1 else "")
        + f"scored in one call, batch {p['batch_size']}, threads {p['threads']}, max length "
        f"{p['max_length']}, warm-up {p.get('warmup', args.warmup)} pairs; "
        "timed: tokenise + forward + head + activation, one run per process after one untimed "
        "warm-up.",
        f"- Tokens per pair (both engines, same tokenizer.json): mean "
        f"{s.get('mean_tokens', float('nan')):.1f} (sentence-transformers counts "
        f"{p.get('mean_tokens', float('nan')):.1f}), {100 * s.get('truncated_share', 0):.0f}% "
        f"of pairs at the max length. Sift packs each batch's pairs without padding; "
        "sentence-transformers sorts each call's pairs by length and pads each batch to its "
        "longest pair.",
        f"- Tokenising alone (a separate pass over the same calls): Sift {fmt(s['prep_seconds'])} s "
        f"({share(s):.1f}% of its time), sentence-transformers {fmt(p['prep_seconds'])} s "
        f"({share(p):.1f}%).",
        f"- MM-BRIGHT scale: {MM_BRIGHT_QUERIES:,} queries x depth {MM_BRIGHT_DEPTH} = "
        f"{pairs:,} pairs: Sift {estimate['hours']['sift']:.2f} h, sentence-transformers "
        f"{estimate['hours'][PEER]:.2f} h at these rates ({p['threads']} threads, pairs of "
        f"this length).",
        "- Peak RSS is the whole process's peak (`VmHWM` / `ru_maxrss`). For "
        "sentence-transformers it includes the Python interpreter, torch and its libraries.",
        *[f"- {n}" for n in args.note],
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
