#!/usr/bin/env python3
"""Embedding throughput in f32 and bf16 on the CPU: Sift and its peer, each at both precisions.

    python3 -m benches.bf16_vs_f32 --modality image --model target/bench-models/clip-vit-base-patch32 \
        --inputs target/bench-images --items 128 --batch-size 32 --threads 2 --warmup 32 \
        --rounds 3 --out eval/results/bf16_clip_b32_cpu
    python3 -m benches.bf16_vs_f32 --modality text --model models/local/all-MiniLM-L6-v2 \
        --inputs ../shared/data/cranfield/corpus.jsonl --items 256 --batch-size 32 --threads 2 \
        --warmup 32 --rounds 3 --out eval/results/bf16_minilm_cpu

Four engines, each round in fresh processes, the order rotated every round:
  sift f32          `sift bench embed --dtype f32` (the fused f32 gemm)
  sift bf16         `sift bench embed --dtype bf16` (linear layers on the packed bfloat16 kernel)
  <peer> f32        transformers (images: eval.peers.hf_vision_peer) or sentence-transformers
                    (texts: eval.peers.st_embed_peer), torch.set_num_threads(threads)
  <peer> bf16       the same under torch.autocast("cpu", dtype=torch.bfloat16) (--autocast-bf16):
                    PyTorch's fastest CPU setting for these models (oneDNN's bf16 kernels)
Timed: the whole path (images: decode + preprocess + forward + normalise; texts: tokenise +
forward + pool + normalise), medians over rounds; ratios against each peer row.

Accuracy: `sift embed --dtype f32` and `--dtype bf16` on the benchmark inputs (and, for
images, the parity suites' images: models/fixtures/vision/images, models/fixtures/gme/images)
give the worst cosine of the bf16 vectors to the f32 ones.

Writes <out>.json and <out>.md (the commands first, then the table) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from benches.benchlib import REPO, fmt, machine, run_cmd, script_argv, write_report
from benches.embed_vs_st import SIFT, bench_embed_cmd, bench_embed_result, peer_env, repo_path

# the peers' modules, run from the repository root (python3 -m)
PEERS = {"image": ("transformers", "eval.peers.hf_vision_peer"),
         "text": ("sentence-transformers", "eval.peers.st_embed_peer")}
COSINE_IMAGES = [os.path.join(REPO, "models", "fixtures", "vision", "images"),
                 os.path.join(REPO, "models", "fixtures", "gme", "images")]


def engines(args) -> list:
    """(label, command, shell) of each engine."""
    peer, module = PEERS[args.modality]
    out = []
    for dtype in ("f32", "bf16"):
        cmd = bench_embed_cmd(args.sift, args.model, args.inputs, args.items, args.batch_size,
                              args.threads, args.warmup, modality=args.modality)
        out.append((f"sift {dtype}", f"{cmd} --dtype {dtype}", True))
    for autocast in (False, True):
        cmd = [sys.executable, "-m", module, "--model", repo_path(args.model),
               "--images" if args.modality == "image" else "--texts", repo_path(args.inputs),
               "--items", str(args.items), "--batch-size", str(args.batch_size),
               "--threads", str(args.threads), "--warmup", str(args.warmup), "--json"]
        if autocast:
            cmd.append("--autocast-bf16")
        out.append((f"{peer} {'bf16' if autocast else 'f32'}", cmd, False))
    return out


def measure(engine: str, label: str, cmd, shell: bool, warmup: int) -> dict:
    res, wall = run_cmd(label, cmd, shell)
    if engine.startswith("sift"):
        kernel = res.get("linear_kernel")
        res = bench_embed_result(label, res, warmup)
        res["linear_kernel"] = kernel
    for k in ("items_per_s", "seconds", "peak_rss_mb"):
        if not isinstance(res.get(k), (int, float)) or res[k] <= 0:
            raise SystemExit(f"{label}: bad {k}: {res}")
    res["process_seconds"] = wall
    return res


def sift_vectors(args, dtype: str, inputs: str, tmp: str) -> np.ndarray:
    out = os.path.join(tmp, f"{dtype}-{abs(hash(inputs))}.npy")
    cmd = [args.sift, "embed", "--model", os.path.abspath(args.model), "--input",
           os.path.abspath(inputs), "--out", out, "--dtype", dtype, "--quiet"]
    if args.modality == "image":
        cmd.append("--image")
    else:
        cmd += ["--kind", "passage"]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return np.load(out)


def worst_cosine(args, inputs: str, tmp: str) -> tuple[float, int]:
    a, b = sift_vectors(args, "f32", inputs, tmp), sift_vectors(args, "bf16", inputs, tmp)
    if args.modality == "text" and args.items:
        a, b = a[:args.items], b[:args.items]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min()), int(len(cos))


def text_subset(path: str, n: int, tmp: str) -> str:
    """The first n lines of a JSONL file (the texts the throughput rounds embed)."""
    out = os.path.join(tmp, "texts.jsonl")
    with open(path) as f, open(out, "w") as g:
        for i, line in enumerate(f):
            if i >= n:
                break
            g.write(line)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modality", choices=["image", "text"], required=True)
    ap.add_argument("--model", required=True, help="local model directory")
    ap.add_argument("--inputs", required=True, help="images folder, or texts JSONL")
    ap.add_argument("--items", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sift", default=SIFT, help="the sift binary (default: target/release/sift)")
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = ap.parse_args()
    if min(args.rounds, args.threads, args.batch_size, args.items) < 1 or args.warmup < 0:
        ap.error("--rounds, --threads, --batch-size and --items must be >= 1, --warmup >= 0")

    command_line = shlex.join(["python3"] + script_argv())
    started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    mach = machine()
    peer, _ = PEERS[args.modality]
    env = peer_env(["torch", "transformers", "sentence-transformers", "pillow", "numpy"])
    es = engines(args)
    raw = []
    for r in range(args.rounds):
        order = es[r % len(es):] + es[:r % len(es)]
        entry = {"round": r + 1, "order": [e[0] for e in order]}
        for label, cmd, shell in order:
            entry[label] = measure(label, f"round {r + 1} {label}", cmd, shell, args.warmup)
        raw.append(entry)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{e[0]} {fmt(entry[e[0]]['items_per_s'])}" for e in es), file=sys.stderr)
    med = {e[0]: {k: statistics.median(x[e[0]][k] for x in raw)
                  for k in ("items_per_s", "seconds", "peak_rss_mb")} for e in es}
    kernels = {e[0]: raw[0][e[0]].get("linear_kernel") for e in es if e[0].startswith("sift")}

    with tempfile.TemporaryDirectory() as tmp:
        sets = ([args.inputs] + [d for d in COSINE_IMAGES if os.path.isdir(d)]
                if args.modality == "image" else [text_subset(args.inputs, args.items, tmp)])
        cosines = {}
        for d in sets:
            worst, n = worst_cosine(args, d, tmp)
            name = repo_path(d) if args.modality == "image" else f"first {args.items} texts"
            cosines[name] = {"worst_cosine": worst, "n": n}

    sift_bf16, sift_f32 = med["sift bf16"]["items_per_s"], med["sift f32"]["items_per_s"]
    ratios = {"sift bf16 / sift f32": sift_bf16 / sift_f32,
              f"sift bf16 / {peer} f32": sift_bf16 / med[f"{peer} f32"]["items_per_s"],
              f"sift bf16 / {peer} bf16": sift_bf16 / med[f"{peer} bf16"]["items_per_s"],
              f"sift f32 / {peer} f32": sift_f32 / med[f"{peer} f32"]["items_per_s"]}
    report = {"benchmark": "bf16_vs_f32", "date": started, "command": command_line,
              "machine": mach, "peer_env": env,
              "settings": {k: getattr(args, k) for k in ("modality", "model", "inputs", "items",
                                                          "batch_size", "threads", "warmup")},
              "engines": {e[0]: e[1] if e[2] else shlex.join(e[1]) for e in es},
              "rounds": args.rounds, "raw": raw, "medians": med, "sift_linear_kernels": kernels,
              "ratios": ratios, "bf16_vs_f32_cosine": cosines}
    unit = "images/s" if args.modality == "image" else "texts/s"
    rows = [f"| {e[0]} | {fmt(med[e[0]]['items_per_s'])} | {fmt(med[e[0]]['seconds'])} | "
            f"{fmt(med[e[0]]['peak_rss_mb'])} | {kernels.get(e[0]) or ''} |" for e in es]
    model_name = os.path.basename(os.path.normpath(args.model))
    md = "\n".join([
        f"# {model_name}: f32 and bf16 on the CPU, Sift and {peer} ({args.modality}s)",
        "",
        "Command (from the repository root; build first: `cargo build --release -p sift-cli`):",
        "",
        "```sh",
        command_line,
        "```",
        "",
        f"| engine (median of {args.rounds} rounds) | {unit} | seconds | peak RSS (MB) | Sift's linear kernel |",
        "|---|---:|---:|---:|---|",
        *rows,
        "",
        "| ratio | value |",
        "|---|---:|",
        *[f"| {k} | {v:.2f}x |" for k, v in ratios.items()],
        "",
        "| Sift bf16 vs f32 vectors | inputs | worst cosine |",
        "|---|---:|---:|",
        *[f"| {k} | {v['n']} | {v['worst_cosine']:.6f} |" for k, v in cosines.items()],
        "",
        f"- {args.items} {args.modality}s a run, batch {args.batch_size}, threads {args.threads}, "
        f"warm-up {args.warmup}; each engine in a fresh process per round, the order rotated "
        "every round. Timed: the whole path (images: decode + preprocess + forward + normalise; "
        "texts: tokenise + forward + pool + normalise).",
        f"- {peer} bf16 = the f32 model under `torch.autocast(\"cpu\", dtype=torch.bfloat16)`; "
        f"torch {env['packages'].get('torch')}, transformers {env['packages'].get('transformers')}.",
        f"- Machine: {mach['cpu']}, {mach['nproc']} CPUs; date (UTC) {started}.",
    ])
    write_report(args.out, report, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
