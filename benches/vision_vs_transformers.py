#!/usr/bin/env python3
"""Side-by-side image embedding throughput benchmark: Sift vs transformers (CPU).

Usage, from the repository root (checkpoints and images from benches/make_random_vision.py):
    python3 -m benches.make_random_vision
    python3 -m benches.vision_vs_transformers --model target/bench-models/clip-vit-base-patch32 \
        --images target/bench-images --items 128 --batch-size 32 --threads 2 --warmup 32 \
        --rounds 3 --out eval/results/embed_clip_b32_cpu

Each round runs, in a fresh process each, the Sift command and the transformers peer
(`python3 -m eval.peers.hf_vision_peer --json`), alternating which goes first. The Sift command is
--sift-bench if given (a shell string run as given from the repository root), else
    RAYON_NUM_THREADS=T target/release/sift bench embed --model ABS --modality image
        --input ABS --items N --batch-size B --warmup W --json
(build it first: cargo build --release -p sift-cli). Results are compared in the keys
    engine, version, model, items, batch_size, threads, seconds, items_per_s,
    prep_seconds, prep_items_per_s, peak_rss_mb
where seconds/items_per_s time the whole path (decode + preprocess + forward + L2 normalise)
and prep_* decode + preprocess (Sift: its pipeline's `prepare_seconds`; the peer: a separate
timed region). The driver adds est_forward_items_per_s = items / (seconds - prep_seconds),
the forward + normalise rate implied by the two.

Medians over rounds, ratios (> 1 means Sift is better), rounds loop, machine and package
records are those of benches/embed_vs_st.py. Writes <out>.json and <out>.md (the commands
first, then the table) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import subprocess
import sys

from benches.benchlib import REPO, machine, script_argv, write_report
from benches.embed_vs_st import (SIFT, bench_embed_cmd, bench_embed_result, check_keys, markdown,
                                 peer_env, repo_path, run_rounds, summarise)

PEER_MODULE = "eval.peers.hf_vision_peer"  # run from the repository root: python3 -m
PEER = "transformers"

KEYS = ["engine", "version", "model", "items", "batch_size", "threads", "seconds",
        "items_per_s", "prep_seconds", "prep_items_per_s", "peak_rss_mb"]
OPTIONAL = {"warmup", "torch", "image_files", "input_size", "dim", "processor",
            "attn_implementation", "device", "dtype", "est_forward_items_per_s", "end_rss_mb",
            "model_seconds", "load_seconds"}
POSITIVE = ("seconds", "items_per_s", "prep_seconds", "prep_items_per_s", "peak_rss_mb")
METRICS = [
    ("throughput (images/s, decode+preprocess+forward+normalise)", "items_per_s", "sift/peer"),
    ("decode+preprocess alone (images/s)", "prep_items_per_s", "sift/peer"),
    ("forward+normalise, estimated (images/s)", "est_forward_items_per_s", "sift/peer"),
    ("embed time (s)", "seconds", "peer/sift"),
    ("peak RSS (MB, whole process)", "peak_rss_mb", "peer/sift"),
]
SAME = ["items", "batch_size", "threads"]
PEER_PKGS = ["transformers", "torch", "pillow", "numpy", "safetensors"]


def check(label: str, res: dict, engine: str) -> None:
    check_keys(label, res, engine, keys=KEYS, optional=OPTIONAL, positive=POSITIVE)
    # forward + normalise rate implied by the two timed regions (same images, same process)
    fwd = res["seconds"] - res["prep_seconds"]
    res["est_forward_items_per_s"] = res["items"] / fwd if fwd > 0 else float("nan")


def sift_cmd(args) -> str:
    return bench_embed_cmd(args.sift, args.model, args.images, args.items, args.batch_size,
                           args.threads, args.warmup, modality="image")


def sift_image_result(label: str, obj: dict, warmup: int) -> dict:
    """`sift bench embed --modality image --json` in this driver's keys: decode + preprocess
    time (`prepare_seconds`) is the prep region, the rest of the pipeline the forward pass."""
    res = bench_embed_result(label, obj, warmup)
    res["prep_items_per_s"] = res["items"] / res["prep_seconds"] if res["prep_seconds"] > 0 else float("nan")
    return res


def peer_cmd(args) -> list:
    return [sys.executable, "-m", PEER_MODULE, "--model", repo_path(args.model),
            "--images", repo_path(args.images), "--items", str(args.items),
            "--batch-size", str(args.batch_size), "--threads", str(args.threads),
            "--warmup", str(args.warmup), "--json"]


def sift_source() -> dict:
    def git(*a):
        p = subprocess.run(["git", *a], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return p.stdout.strip() if p.returncode == 0 else None
    pre = os.path.join(REPO, "crates", "sift-embed", "src", "preprocess.rs")
    try:
        with open(pre) as f:
            first = f.readline().strip()
    except OSError:
        first = None
    image_crate = None
    try:
        with open(os.path.join(REPO, "Cargo.lock")) as f:
            lock = f.read().split("[[package]]")
        for block in lock:
            if '\nname = "image"\n' in block:
                image_crate = block.split('version = "', 1)[1].split('"', 1)[0]
    except (OSError, IndexError):
        pass
    return {"git_head": git("rev-parse", "HEAD"),
            "git_dirty": (git("status", "--porcelain", "--untracked-files=no") or "").splitlines(),
            "preprocess_rs_first_line": first,
            "placeholder_preprocess": bool(first and first.startswith("//! TEMPORARY placeholder")),
            "image_crate": image_crate,
            "CARGO_TARGET_DIR": os.environ.get("CARGO_TARGET_DIR")}


def main() -> int:
    ap = argparse.ArgumentParser(description="Sift vs transformers image embedding throughput driver")
    ap.add_argument("--model", required=True, help="local CLIP / SigLIP / Nomic Embed Vision model directory")
    ap.add_argument("--images", required=True, help="directory of image files")
    ap.add_argument("--items", type=int, default=128, help="images per timed region")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=32, help="images in the untimed warm-up")
    ap.add_argument("--sift", default=SIFT, help="the sift binary (default: target/release/sift; build it first)")
    ap.add_argument("--sift-bench", default=None,
                    help="shell command printing one Sift result JSON object "
                         "(default: `sift bench embed --modality image` with this driver's settings)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = ap.parse_args()
    if min(args.rounds, args.threads, args.batch_size, args.items) < 1 or args.warmup < 0:
        ap.error("--rounds, --threads, --batch-size and --items must be >= 1, --warmup >= 0")
    for what, path in (("--model", args.model), ("--images", args.images)):
        if not os.path.isdir(path):
            ap.error(f"{what} {path}: no such directory")

    command_line = shlex.join(["python3"] + script_argv())
    started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    mach = machine()
    env = peer_env(PEER_PKGS)
    src = sift_source()
    if src["placeholder_preprocess"]:
        print("warning: crates/sift-embed/src/preprocess.rs is still the TEMPORARY placeholder",
              file=sys.stderr)
    scmd = args.sift_bench or sift_cmd(args)
    pcmd = peer_cmd(args)

    adapt = None if args.sift_bench else (lambda label, res: sift_image_result(label, res, args.warmup))
    raw = run_rounds(args.rounds, scmd, pcmd, PEER, check, "images/s", adapt_sift=adapt)
    medians, ratios, warnings = summarise(
        raw, PEER, METRICS, SAME,
        ("warmup", "torch", "image_files", "input_size", "dim", "processor", "attn_implementation"))
    s, p = medians["sift"], medians[PEER]
    extra = [f"{k} differs: sift {s[k]}, {PEER} {p[k]}" for k in ("input_size", "dim", "image_files")
             if k in s and k in p and s[k] != p[k]]
    if src["placeholder_preprocess"]:
        extra.append("Sift's image preprocessing was the TEMPORARY placeholder "
                     "(crates/sift-embed/src/preprocess.rs), not the Pillow-exact one")
    for w in extra:
        print("warning: " + w, file=sys.stderr)
    warnings += extra

    report = {
        "benchmark": "vision_vs_transformers",
        "date": started,
        "command": command_line,
        "argv": script_argv(),
        "cwd": os.getcwd(),
        "machine": mach,
        "peer_env": env,
        "sift_source": src,
        "settings": {"model": args.model, "images": os.path.abspath(args.images), "items": args.items,
                     "batch_size": args.batch_size, "threads": args.threads, "warmup": args.warmup,
                     "sift_bench": scmd, "peer_command": pcmd},
        "rounds": args.rounds,
        "raw": raw,
        "medians": medians,
        "ratios": ratios,
        "warnings": warnings,
    }

    table = markdown(report, PEER, METRICS)
    mach_line = f"{mach['cpu']}, {mach['nproc']} CPUs; `{mach['uname']}`"
    pk = env["packages"]
    model_name = os.path.basename(os.path.normpath(args.model))
    peer_shell = shlex.join(["python3", *[repo_path(c) if os.path.isabs(c) and c.startswith(REPO) else c
                                          for c in pcmd[1:]]])
    cargo_env = f"CARGO_TARGET_DIR={src['CARGO_TARGET_DIR']} " if src["CARGO_TARGET_DIR"] else ""
    md = "\n".join([
        f"# Image embedding: Sift vs transformers, {model_name} (CPU)",
        "",
        "Commands (from the repository root):",
        "",
        "```sh",
        "python3 -m benches.make_random_vision   # random-weight checkpoints + images, once",
        f"{cargo_env}{command_line}",
        "# each round runs, in fresh processes, alternating order:",
        f"#   {scmd}",
        f"#   {peer_shell}",
        "```",
        "",
        table,
        "",
        f"- Sift {s['version']} (git {(src['git_head'] or '?')[:12]}"
        + (", uncommitted changes" if src["git_dirty"] else "") + f", image crate {src['image_crate']}); "
        f"transformers {p['version']} (torch {p.get('torch') or pk.get('torch')}, Pillow {pk.get('pillow')}, "
        f"{p.get('processor', '?')}, attention {p.get('attn_implementation', '?')}, float32).",
        f"- Model: `{model_name}`, random weights (full-size config), input "
        f"{s.get('input_size') or p.get('input_size')}"
        + ("" if s.get("input_size") else " (the peer's: Sift's result does not report it)")
        + f", output dim {s.get('dim') or p.get('dim')}.",
        f"- {p['items']} images from `{repo_path(args.images)}` ({p.get('image_files', '?')} files, sorted by "
        f"name, cycled), batch {p['batch_size']}, threads {p['threads']}, warm-up {p.get('warmup')} images; "
        "files are read into memory before timing. One run per process after one untimed warm-up; "
        "median over rounds.",
        "- Timed: throughput = decode + preprocess + forward + L2-normalise "
        "(Sift `sift bench embed --modality image`: its pipeline decodes and preprocesses each batch on "
        f"{p['threads']} rayon threads, then runs the tower; transformers: per batch "
        "`Image.open(...).convert(\"RGB\")`, the image processor, `get_image_features` under "
        "`torch.no_grad()` (Nomic: the model card's `last_hidden_state[:, 0]` through the published "
        "code; Jina-CLIP v1: the published `encode_image`, eval/peers/jina_clip_peer.py), normalise). "
        "Decode+preprocess = Sift's `prepare_seconds` inside that "
        "pipeline vs PIL + the image processor timed alone (single-threaded, in batches). "
        "Forward+normalise is estimated per round as items / (embed time - decode+preprocess time).",
        "- Peak RSS is the whole process's peak (Sift `VmHWM`, Python `ru_maxrss`); both load both towers "
        "(text and image) and hold the images' bytes; for transformers it also includes the interpreter "
        "and torch. Sift memory-maps model.safetensors and copies the tensors out of it, so its peak "
        "counts the mapped file's pages too (about twice the weights); \"RSS after\" is `VmRSS` at the end.",
        f"- Machine: {mach_line}; load average at start "
        + (" ".join(f"{x:.2f}" for x in mach["loadavg_at_start"]) if mach.get("loadavg_at_start") else "?"),
        f"- Date (UTC): {started}",
        *(["- Warnings: " + "; ".join(warnings)] if warnings else []),
        "",
    ])

    write_report(args.out, report, md)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
