#!/usr/bin/env python3
"""Side-by-side text embedding throughput benchmark: Sift vs sentence-transformers (CPU).

Usage (from the repository root):
    python3 -m benches.embed_vs_st --model models/local/all-MiniLM-L6-v2 \
        --texts /work/shared/data/cranfield/corpus.jsonl \
        --items 512 --batch-size 32 --threads 2 --warmup 64 --rounds 3 \
        --out eval/results/embed_minilm_cpu        # after cargo build --release -p sift-cli
    python3 -m benches.embed_vs_st --peer jina-clip --model target/bench-models/jina-clip-v1 \
        --texts /work/shared/data/cranfield/corpus.jsonl --items 64 ... \
        --out eval/results/embed_jina_clip_v1_text_cpu   # benches/make_random_vision.py's checkpoint

--peer jina-clip runs eval/peers/jina_clip_peer.py --modality text in place of the
sentence-transformers peer: the published jina-clip-implementation encode_text of a Jina-CLIP v1
checkpoint (torchvision and einops importable: models/fixtures/jina_clip/requirements.txt).

Each round runs, in a fresh process each, `sift bench embed` with this driver's settings
(threads through RAYON_NUM_THREADS; `--sift-bench CMD` runs another command as given instead)
and the sentence-transformers peer (eval/peers/st_embed_peer.py --json, with this driver's
--model/--texts/--items/--batch-size/--threads/--warmup), alternating which goes first. The
peers run from the repository root as modules (`python3 -m eval.peers.st_embed_peer ...`).
Each prints one JSON object with the keys
    engine, version, model, items, batch_size, threads, seconds, items_per_s, peak_rss_mb
(the last stdout line that parses as a JSON object is taken). The per-metric median over
rounds is computed for each engine, and ratios are oriented so that > 1 means Sift is
better: Sift/peer for items_per_s, peer/Sift for seconds and peak_rss_mb.

Writes <out>.json (machine, date, command line, raw rounds, medians, ratios, warnings) and
<out>.md (Markdown table), and prints the table.
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

from benches.benchlib import REPO, fmt, machine, run_cmd, script_argv, write_report

PEER_MODULE = "eval.peers.st_embed_peer"  # run from the repository root: python3 -m
PEER = "sentence-transformers"
# --peer jina-clip: a Jina-CLIP v1 checkpoint's text tower through the published
# jina-clip-implementation encode_text (eval/peers/jina_clip_peer.py), which runs on transformers
JINA_PEER_MODULE = "eval.peers.jina_clip_peer"
JINA_PEER = "transformers"

KEYS = ["engine", "version", "model", "items", "batch_size", "threads", "seconds",
        "items_per_s", "peak_rss_mb"]
# Keys either side may add without a warning (kept in the raw results).
OPTIONAL = {"warmup", "max_seq_length", "torch", "dim", "device", "dtype", "pooling",
            "prep_seconds", "model_seconds", "load_seconds"}
SIFT = os.path.join(REPO, "target", "release", "sift")


def bench_embed_result(label: str, obj: dict, warmup: int) -> dict:
    """Maps `sift bench embed --json` (one batch size) to the drivers' common keys."""
    if len(obj.get("results", [])) != 1:
        raise SystemExit(f"{label}: expected one batch size in \"results\": {json.dumps(obj)}")
    b = obj["best"]
    return {"engine": obj["engine"], "version": obj["version"], "model": obj["model"],
            "items": b["items"], "batch_size": b["batch_size"], "threads": obj["threads"],
            "warmup": warmup,  # not in the output: what the command was given
            "device": obj.get("device"), "dtype": obj.get("dtype"), "dim": obj.get("dim"),
            "load_seconds": obj.get("load_seconds"),
            "seconds": b["seconds"], "items_per_s": b["items_per_s"],
            "prep_seconds": b["prepare_seconds"], "model_seconds": b["model_seconds"],
            "peak_rss_mb": obj["peak_rss_mb"]}


def bench_embed_cmd(sift: str, model: str, inputs: str, items: int, batch_size: int, threads: int,
                    warmup: int, modality: str = "text") -> str:
    """The `sift bench embed` command line of one measurement (threads through rayon's pool)."""
    return f"RAYON_NUM_THREADS={threads} " + shlex.join([
        sift, "bench", "embed", "--model", os.path.abspath(model), "--modality", modality,
        "--input", os.path.abspath(inputs), "--items", str(items), "--batch-size", str(batch_size),
        "--warmup", str(warmup), "--json"])
# (label, key, ratio orientation): "sift/peer" or "peer/sift"
METRICS = [
    ("throughput (texts/s)", "items_per_s", "sift/peer"),
    ("encode time (s)", "seconds", "peer/sift"),
    ("peak RSS (MB, whole process)", "peak_rss_mb", "peer/sift"),
]
SAME = ["items", "batch_size", "threads"]  # warn if these differ between the engines
PEER_PKGS = ["sentence-transformers", "torch", "transformers", "tokenizers", "numpy"]


def check_keys(label: str, res: dict, engine: str, keys=KEYS, optional=OPTIONAL,
               positive=("seconds", "items_per_s", "peak_rss_mb")) -> None:
    missing = [k for k in keys if k not in res]
    if missing:
        raise SystemExit(f"{label}: result lacks keys {missing}: {json.dumps(res)}")
    bad = [k for k in positive
           if not isinstance(res[k], (int, float)) or res[k] <= 0]
    if bad:
        raise SystemExit(f"{label}: non-positive or non-numeric {bad}: {json.dumps(res)}")
    extra = sorted(set(res) - set(keys) - set(optional))
    if extra:
        print(f"warning: {label}: extra keys {extra} (kept in raw results)", file=sys.stderr)
    if res["engine"] != engine:
        print(f"warning: {label}: engine is {res['engine']!r}, expected {engine!r}", file=sys.stderr)


def repo_path(path: str) -> str:
    """The caller's path as seen from the repository root (where both engines run):
    relative if it lies inside the repository (so the peer reports the same model string as
    a Sift command given the same relative path), else absolute."""
    a = os.path.abspath(path)
    return os.path.relpath(a, REPO) if a == REPO or a.startswith(REPO + os.sep) else a


def peer_cmd(args) -> list:
    module = JINA_PEER_MODULE if getattr(args, "peer", None) == "jina-clip" else PEER_MODULE
    cmd = [sys.executable, "-m", module, "--model", repo_path(args.model),
           *(["--modality", "text"] if module == JINA_PEER_MODULE else []),
           "--texts", repo_path(args.texts), "--batch-size", str(args.batch_size),
           "--threads", str(args.threads), "--warmup", str(args.warmup), "--json"]
    if args.items is not None:
        cmd[-1:-1] = ["--items", str(args.items)]
    return cmd


def peer_env(pkgs=PEER_PKGS) -> dict:
    code = (
        "import json, importlib.metadata as m\n"
        "out = {}\n"
        f"for p in {list(pkgs)!r}:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = None\n"
        "print(json.dumps(out))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    return {
        "python": sys.executable + " " + platform.python_version(),
        "packages": json.loads(p.stdout),
        "RAYON_NUM_THREADS": os.environ.get("RAYON_NUM_THREADS"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def run_rounds(rounds: int, sift_cmd: str, pcmd: list, peer: str, check, unit: str,
               adapt_sift=None) -> list:
    """`rounds` alternating rounds, each engine in a fresh process: Sift's shell command and
    the peer's argv, Sift first in odd rounds. `adapt_sift(label, result)`, when given, maps
    Sift's output to the common keys; `check(label, result, engine)` validates each result.
    Returns the raw per-round entries."""
    raw = []
    for r in range(rounds):
        order = ["sift", peer] if r % 2 == 0 else [peer, "sift"]
        entry = {"round": r + 1, "order": order}
        for eng in order:
            label = f"round {r + 1} {eng}"
            if eng == "sift":
                res, wall = run_cmd(label, sift_cmd, shell=True)
                if adapt_sift is not None:
                    res = adapt_sift(label, res)
            else:
                res, wall = run_cmd(label, pcmd, shell=False)
            check(label, res, eng)
            entry[eng] = res
            entry[f"{eng}_process_seconds"] = wall
        raw.append(entry)
        print(f"round {r + 1}/{rounds} ({' then '.join(order)}): "
              f"sift {fmt(entry['sift']['items_per_s'])} {unit}, "
              f"{peer} {fmt(entry[peer]['items_per_s'])} {unit}",
              file=sys.stderr)
    return raw


def summarise(raw: list, peer: str, metrics: list, same: list, carry: tuple) -> tuple:
    """Per-engine medians of each metric key (plus the identity keys, `same`, and the `carry`
    keys of round 1), ratios oriented so that > 1 means Sift is better, and warnings where
    the engines' settings (`same`, warmup, model directory name) differ."""
    medians = {}
    for eng in ("sift", peer):
        first = raw[0][eng]
        m = {k: first[k] for k in ("engine", "version", "model", *same)}
        for k in carry:
            if k in first:
                m[k] = first[k]
        for _, key, _ in metrics:
            m[key] = statistics.median(e[eng][key] for e in raw)
        medians[eng] = m

    ratios = {}
    for _, key, orient in metrics:
        sv, pv = medians["sift"][key], medians[peer][key]
        ratios[key] = (sv / pv) if orient == "sift/peer" else (pv / sv)

    warnings = []
    s, p = medians["sift"], medians[peer]
    for k in same:
        sv = sorted({e["sift"][k] for e in raw})
        pv = sorted({e[peer][k] for e in raw})
        if sv != pv or len(sv) != 1:
            warnings.append(f"{k} differs: sift {sv if len(sv) > 1 else sv[0]}, "
                            f"{peer} {pv if len(pv) > 1 else pv[0]}")
    if "warmup" in s and s["warmup"] != p.get("warmup"):
        warnings.append(f"warmup differs: sift {s['warmup']}, {peer} {p.get('warmup')}")
    sm = os.path.basename(os.path.normpath(str(s["model"])))
    pm = os.path.basename(os.path.normpath(str(p["model"])))
    if sm != pm:
        warnings.append(f"model names differ: sift {s['model']!r}, {peer} {p['model']!r}")
    for w in warnings:
        print("warning: " + w, file=sys.stderr)
    return medians, ratios, warnings


def markdown(report: dict, peer: str = PEER, metrics: list = METRICS) -> str:
    med, ratios = report["medians"], report["ratios"]
    s, p = med["sift"], med[peer]
    rounds = report["rounds"]
    lines = [
        f"| metric (median of {rounds} rounds) | Sift | {peer} | ratio (higher = Sift better) |",
        "|---|---:|---:|---:|",
    ]
    for label, key, _ in metrics:
        lines.append(f"| {label} | {fmt(s[key])} | {fmt(p[key])} | {ratios[key]:.2f}x |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description="Sift vs sentence-transformers embedding throughput driver")
    ap.add_argument("--model", required=True, help="local sentence-transformers model directory (for the peer)")
    ap.add_argument("--texts", required=True, help="JSONL texts or a BEIR corpus.jsonl (for the peer)")
    ap.add_argument("--items", type=int, default=None, help="encode the first N texts (default: all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="peer torch/tokenizers threads")
    ap.add_argument("--warmup", type=int, default=64, help="texts in the peer's untimed warm-up encode")
    ap.add_argument("--sift", default=SIFT, help="the sift binary (default: target/release/sift; build it first)")
    ap.add_argument("--sift-bench", default=None,
                    help="shell command printing one Sift result JSON object, run as given "
                         "(default: `sift bench embed` with this driver's settings)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer", choices=["sentence-transformers", "jina-clip"],
                    default="sentence-transformers",
                    help="the peer: sentence-transformers (eval/peers/st_embed_peer.py), or "
                         "jina-clip for a Jina-CLIP v1 checkpoint's text tower through the published "
                         "encode_text (eval/peers/jina_clip_peer.py)")
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = ap.parse_args()
    peer = JINA_PEER if args.peer == "jina-clip" else PEER
    peer_label = ("jina-clip-implementation encode_text (transformers)" if args.peer == "jina-clip"
                  else "sentence-transformers")
    if args.rounds < 1 or args.threads < 1 or args.batch_size < 1 or args.warmup < 0:
        ap.error("--rounds, --threads and --batch-size must be >= 1, --warmup >= 0")
    if args.items is not None and args.items < 1:
        ap.error("--items must be >= 1")
    for what, path in (("--model", args.model), ("--texts", args.texts)):
        if not os.path.exists(path):
            ap.error(f"{what} {path}: no such file or directory")

    command_line = shlex.join(["python3"] + script_argv())
    started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    mach = machine()
    env = peer_env()

    pcmd = peer_cmd(args)
    if args.sift_bench is None:
        items = args.items
        if items is None:
            with open(args.texts, encoding="utf-8") as f:
                items = sum(1 for line in f if line.strip())
        args.sift_bench = bench_embed_cmd(args.sift, args.model, args.texts, items, args.batch_size,
                                          args.threads, args.warmup)
        adapt = lambda label, res: bench_embed_result(label, res, args.warmup)  # noqa: E731
    else:
        adapt = None
    raw = run_rounds(args.rounds, args.sift_bench, pcmd, peer, check_keys, "texts/s",
                     adapt_sift=adapt)
    medians, ratios, warnings = summarise(raw, peer, METRICS, SAME,
                                          ("warmup", "max_seq_length", "torch", "device"))
    s, p = medians["sift"], medians[peer]

    report = {
        "benchmark": "embed_vs_st",
        "date": started,
        "command": command_line,
        "argv": script_argv(),
        "cwd": os.getcwd(),
        "machine": mach,
        "peer_env": env,
        "settings": {"model": args.model, "texts": os.path.abspath(args.texts), "items": args.items,
                     "batch_size": args.batch_size, "threads": args.threads, "warmup": args.warmup,
                     "sift_bench": args.sift_bench, "peer_command": pcmd},
        "rounds": args.rounds,
        "raw": raw,
        "medians": medians,
        "ratios": ratios,
        "warnings": warnings,
    }

    table = markdown(report, peer)
    mach_line = f"{mach['cpu']}, {mach['nproc']} CPUs; `{mach['uname']}`"
    pk = env["packages"]
    model_name = os.path.basename(os.path.normpath(args.model))
    md = "\n".join([
        f"# Text embedding: Sift vs {peer_label}, {model_name}",
        "",
        table,
        "",
        f"- Sift {s['version']}; {peer_label} {p['version']} (torch {p.get('torch') or pk.get('torch')}, "
        f"transformers {pk.get('transformers')}, tokenizers {pk.get('tokenizers')}, CPU).",
        f"- {p['items']} texts from `{os.path.basename(args.texts)}` (first N in file order), "
        f"batch {p['batch_size']}, threads {p['threads']}, warm-up {p.get('warmup', args.warmup)} texts"
        + (f", max_seq_length {p['max_seq_length']}" if "max_seq_length" in p else "") + "; "
        "timed: tokenise + forward + pool + L2-normalise, one run per process after one untimed warm-up.",
        f"- Peak RSS is the whole process's peak (`ru_maxrss`). For {peer_label} it includes "
        "the Python interpreter, torch and its libraries, the model weights and the texts, not just "
        "the encode call.",
        *(["- The peer's text tower is the JinaBERT reconstruction of models/fixtures/jina_clip/ "
            "(its README: jina-bert-flash-implementation is not published code here), inside the "
            "published JinaCLIPModel.encode_text; random weights, full-size config."]
          if args.peer == "jina-clip" else []),
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
