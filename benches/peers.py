#!/usr/bin/env python3
"""Every peer comparison in one run, and one side-by-side table of ratios.

Usage (from the repository root; the peers from eval/peers/requirements.txt, MiniLM from
models/install_minilm.py, the random-weight vision checkpoints from
benches/make_random_vision.py):

    python3 -m benches.peers --out eval/results/peers

Runs, one after the other in this one invocation, the five drivers with the settings the
README's "Performance" section gives (each alternates Sift and its peer over rounds in
fresh processes and takes medians):

    bm25         benches.bm25_vs_bm25s           Cranfield, bm25s
    minilm       benches.embed_vs_st             all-MiniLM-L6-v2, sentence-transformers
    clip-b32     benches.vision_vs_transformers  CLIP ViT-B/32, transformers
    siglip-b16   benches.vision_vs_transformers  SigLIP base-patch16-224, transformers
    hnsw         benches.hnsw_vs_hnswlib         20k x 384 vectors, hnswlib

Each driver writes its own report, eval/results/<name>.{json,md} (`--results` DIR); this script then reads them and
writes <out>.json and <out>.md: the headline metric of each comparison, Sift's and the
peer's medians, and their ratio (> 1: Sift ahead), with the machine and the date. `--only`
runs a subset; `--rounds` overrides every driver's round count (fewer rounds: quicker,
noisier).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import subprocess
import sys

from benches.benchlib import REPO, fmt, machine, script_argv, write_report


def comparisons(cranfield: str, rounds: int | None) -> list[dict]:
    minilm = os.path.join(REPO, "models/local/all-MiniLM-L6-v2")
    corpus = os.path.join(cranfield, "corpus.jsonl")

    def r(default: int) -> str:
        return str(rounds or default)

    return [
        {
            "name": "bm25", "result": "eval/results/bm25_cranfield",
            "cmd": ["-m", "benches.bm25_vs_bm25s", "--corpus", cranfield, "--sift-bench",
                    f"cargo bench -q --bench bm25 -- --corpus {cranfield} --threads 2 --json",
                    "--rounds", r(5), "--threads", "2"],
            "what": "BM25 index build, Cranfield (docs/s)", "peer": "bm25s",
            "metric": ("medians", "docs_per_s"),
        },
        {
            "name": "minilm", "result": "eval/results/embed_minilm_cpu",
            "cmd": ["-m", "benches.embed_vs_st", "--model", minilm, "--texts", corpus, "--items", "256",
                    "--batch-size", "32", "--threads", "2", "--warmup", "32", "--rounds", r(3)],
            "what": "all-MiniLM-L6-v2 text embedding, CPU (texts/s)", "peer": "sentence-transformers",
            "metric": ("medians", "items_per_s"),
        },
        {
            "name": "clip-b32", "result": "eval/results/embed_clip_b32_cpu",
            "cmd": ["-m", "benches.vision_vs_transformers", "--model", "target/bench-models/clip-vit-base-patch32",
                    "--images", "target/bench-images", "--items", "128", "--batch-size", "32",
                    "--threads", "2", "--warmup", "32", "--rounds", r(3)],
            "what": "CLIP ViT-B/32 image embedding, CPU (images/s)", "peer": "transformers",
            "metric": ("medians", "items_per_s"),
        },
        {
            "name": "siglip-b16", "result": "eval/results/embed_siglip_b16_cpu",
            "cmd": ["-m", "benches.vision_vs_transformers", "--model", "target/bench-models/siglip-base-patch16-224",
                    "--images", "target/bench-images", "--items", "128", "--batch-size", "32",
                    "--threads", "2", "--warmup", "32", "--rounds", r(3)],
            "what": "SigLIP B/16 image embedding, CPU (images/s)", "peer": "transformers",
            "metric": ("medians", "items_per_s"),
        },
        {
            "name": "hnsw", "result": "eval/results/hnsw_vs_hnswlib",
            "cmd": ["-m", "benches.hnsw_vs_hnswlib", "--vectors", "20000", "--dim", "384", "--queries", "1000",
                    "--rounds", r(3)],
            "what": "HNSW queries/s at recall@10 >= 0.95 (20k x 384)", "peer": "hnswlib",
            "metric": ("hnsw", "qps"),
        },
        {
            "name": "hnsw", "result": "eval/results/hnsw_vs_hnswlib", "run": False,
            "what": "HNSW build (vectors/s, 20k x 384)", "peer": "hnswlib",
            "metric": ("hnsw", "build"),
        },
    ]


def result_path(folder: str, c: dict) -> str:
    return os.path.join(folder, os.path.basename(c["result"]))


def headline(c: dict, report: dict) -> tuple[float, float]:
    kind, key = c["metric"]
    if kind == "medians":
        med = report["medians"]
        return med["sift"][key], med[c["peer"]][key]
    med = report["median"]
    if key == "build":
        return med["sift"]["build_vectors_per_s"], med["hnswlib"]["build_vectors_per_s"]
    target = report["args"].get("target_recall", 0.95)

    def qps(res: dict) -> float:
        for s in res["sweep"]:
            if s["recall"] >= target:
                return s["queries_per_s"]
        return float("nan")

    return qps(med["sift"]), qps(med["hnswlib"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cranfield", default=os.path.join(os.path.dirname(REPO), "shared/data/cranfield"),
                    help="Cranfield in BEIR layout (default ../shared/data/cranfield)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds for every driver (default: theirs)")
    ap.add_argument("--only", default=None, help="comma-separated subset: bm25,minilm,clip-b32,siglip-b16,hnsw")
    ap.add_argument("--results", default="eval/results",
                    help="folder for each driver's own report (default eval/results)")
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = ap.parse_args()
    cranfield = os.path.abspath(args.cranfield)
    todo = comparisons(cranfield, args.rounds)
    names = {c["name"] for c in todo}
    only = set(args.only.split(",")) if args.only else names
    if only - names:
        raise SystemExit(f"--only: unknown {sorted(only - names)}; known: {sorted(names)}")

    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    subprocess.run(["cargo", "bench", "--bench", "bm25", "--bench", "hnsw", "--no-run"], cwd=REPO, check=True)
    subprocess.run(["cargo", "build", "--release", "-p", "sift-cli"], cwd=REPO, check=True)
    for c in todo:
        if c["name"] not in only or not c.get("run", True):
            continue
        cmd = [sys.executable] + c["cmd"] + ["--out", result_path(args.results, c)]
        print(f"== {c['name']}: {shlex.join(cmd)}", flush=True)
        subprocess.run(cmd, cwd=REPO, check=True)

    rows = []
    for c in todo:
        if c["name"] not in only:
            continue
        with open(os.path.join(REPO, result_path(args.results, c) + ".json")) as f:
            report = json.load(f)
        sift, peer = headline(c, report)
        rows.append({"comparison": c["what"], "peer": c["peer"], "sift": sift, "peer_value": peer,
                     "ratio": sift / peer, "details": result_path(args.results, c) + ".md"})
    finished = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    m = machine()
    lines = [
        "Sift against its peers, measured in one run of `python3 -m benches.peers`"
        f" ({started} to {finished}; {m['cpu']}, {m['nproc']} cores). Ratio > 1: Sift ahead.",
        "",
        "| comparison | peer | Sift | peer | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['comparison']} | {r['peer']} | {fmt(r['sift'])} | {fmt(r['peer_value'])} "
                     f"| {r['ratio']:.2f}x |")
    lines += ["", "Details (settings, raw rounds, other metrics): " +
              ", ".join(sorted({"`" + r["details"] + "`" for r in rows})), ""]
    md = "\n".join(lines)
    write_report(args.out, {"benchmark": "peers", "started": started, "finished": finished,
                            "command": shlex.join([sys.executable] + script_argv()), "machine": m,
                            "rows": rows}, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
