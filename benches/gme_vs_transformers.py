#!/usr/bin/env python3
"""Side-by-side GME (gme-Qwen2-VL) image embedding throughput benchmark: Sift vs transformers (CPU).

Usage, from the repository root (a full-size run takes minutes per image on 2 cores; dry-run on
the tiny fixture first):
    python3 -m benches.gme_vs_transformers --model models/fixtures/gme/tiny-gme \
        --images models/fixtures/gme/images --items 6 --batch-size 2 --threads 2 --warmup 2 \
        --rounds 1 --out /tmp/gme-dry

Each round runs, in a fresh process each, alternating which goes first (Sift first in odd rounds):
  (a) Sift, as a shell command from the repository root:
        RAYON_NUM_THREADS=T <sift> bench embed --model ABS --modality image --input ABS --items N
            --warmup W --batch-size B --json
      (<sift> is --sift, default $CARGO_TARGET_DIR/release/sift or target/release/sift; build it
      first. candle and rayon size their CPU pools from RAYON_NUM_THREADS, as every driver's
      `sift bench embed` command sets it.)
      Its pretty-printed JSON is mapped to the common keys: "best" (the one batch size) gives
      items, batch_size, seconds, items_per_s, prepare_seconds -> prep_seconds, model_seconds;
      the top level engine, version, model, threads, peak_rss_mb (VmHWM), load_seconds.
  (b) the transformers peer, `python3 -m eval.peers.gme_peer --json` (GME's own embedding path).
Both embed images W..W+N-1 of the sorted input (index i = file i mod files) after an untimed
warm-up on images 0..W-1, in batches of B; the files are read into memory before timing.
Timed, per batch: decode + GME preprocessing (prep_seconds, summed), then forward + last-token
pooling + L2 normalisation (model_seconds, summed); seconds covers the whole loop. Derived:
prep_items_per_s = N / prep_seconds, forward_items_per_s = N / model_seconds.

`sift bench embed` does not report image token counts, so the driver computes the merged image
tokens per image GME gives each timed image from its size (GME's fetch_image smart_resize, then
the processor's, with config.json's min/max_image_tokens: the rules crates/sift-embed/src/gme.rs
implements) and records that as Sift's `image_tokens`; the peer reports what its processor
actually produced (image_grid_thw). A mismatch is a warning.

Medians over rounds, ratios oriented so that > 1 means Sift is better; machine, package and
source records as in benches/vision_vs_transformers.py. Writes <out>.json and <out>.md (the
commands first, then the table) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys

from benches.benchlib import REPO, machine, script_argv, write_report
from benches.embed_vs_st import check_keys, markdown, peer_env, repo_path, run_rounds, summarise
from benches.vision_vs_transformers import sift_source
from eval.peers import gme_peer  # its helpers need neither torch nor transformers

PEER_MODULE = "eval.peers.gme_peer"  # run from the repository root: python3 -m
PEER = "transformers"

KEYS = ["engine", "version", "model", "items", "batch_size", "threads", "seconds", "items_per_s",
        "prep_seconds", "prep_items_per_s", "model_seconds", "forward_items_per_s", "peak_rss_mb",
        "image_tokens"]
OPTIONAL = {"warmup", "torch", "image_files", "dim", "seq_len", "min_pixels", "max_pixels",
            "max_length", "processor", "attn_implementation", "device", "dtype", "end_rss_mb",
            "load_seconds", "batch_latency_ms_p50", "batch_latency_ms_p99", "image_tokens_source"}
POSITIVE = ("seconds", "items_per_s", "prep_seconds", "prep_items_per_s", "model_seconds",
            "forward_items_per_s", "peak_rss_mb", "image_tokens")
METRICS = [
    ("throughput (images/s, decode+preprocess+forward+normalise)", "items_per_s", "sift/peer"),
    ("decode+preprocess (images/s, its share of the timed run)", "prep_items_per_s", "sift/peer"),
    ("forward+pool+normalise (images/s, its share of the timed run)", "forward_items_per_s", "sift/peer"),
    ("embed time (s)", "seconds", "peer/sift"),
    ("peak RSS (MB, whole process)", "peak_rss_mb", "peer/sift"),
]
SAME = ["items", "batch_size", "threads"]
CARRY = ("warmup", "torch", "image_files", "dim", "image_tokens", "image_tokens_source", "seq_len",
         "min_pixels", "max_pixels", "max_length", "processor", "attn_implementation", "dtype",
         "device", "load_seconds", "end_rss_mb")
PEER_PKGS = ["transformers", "torch", "tokenizers", "pillow", "numpy", "safetensors"]


def default_sift() -> str:
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    return os.path.join(os.path.abspath(target), "release", "sift")


def sift_cmd(args) -> str:
    return f"RAYON_NUM_THREADS={args.threads} " + shlex.join([
        os.path.abspath(args.sift), "bench", "embed", "--model", os.path.abspath(args.model),
        "--modality", "image", "--input", os.path.abspath(args.images), "--items", str(args.items),
        "--warmup", str(args.warmup), "--batch-size", str(args.batch_size), "--json"])


def peer_cmd(args) -> list:
    return [sys.executable, "-m", PEER_MODULE, "--model", repo_path(args.model),
            "--images", repo_path(args.images), "--items", str(args.items),
            "--batch-size", str(args.batch_size), "--threads", str(args.threads),
            "--warmup", str(args.warmup), "--json"]


def expected_tokens(args) -> tuple[float, list]:
    """Mean merged image tokens per timed image (images W..W+N-1, cycled), and per file."""
    from PIL import Image
    cfg = gme_peer.gme_config(args.model)
    paths = gme_peer.image_files(args.images)
    per_file = []
    for p in paths:
        with Image.open(p) as im:  # the header only: the size does not depend on the decoder
            w, h = im.size
        per_file.append({"file": os.path.basename(p), "size": [w, h],
                         "image_tokens": gme_peer.expected_image_tokens(
                             w, h, cfg["min_image_tokens"], cfg["max_image_tokens"])})
    idx = range(args.warmup, args.warmup + args.items)
    mean = sum(per_file[i % len(per_file)]["image_tokens"] for i in idx) / args.items
    return round(mean, 3), per_file


def sift_result(label: str, obj: dict, args, tokens: float, n_files: int) -> dict:
    """Maps `sift bench embed --json` (one batch size) to the common keys."""
    if len(obj.get("results", [])) != 1:
        raise SystemExit(f"{label}: expected one batch size in \"results\": {json.dumps(obj)}")
    b = obj["best"]
    n = b["items"]
    res = {
        "engine": obj["engine"], "version": obj["version"], "model": obj["model"],
        "items": n, "batch_size": b["batch_size"], "threads": obj["threads"],
        "warmup": args.warmup,  # not in the output: what the command was given
        "image_files": n_files,
        "device": obj.get("device"), "dtype": obj.get("dtype"), "load_seconds": obj.get("load_seconds"),
        "seconds": b["seconds"], "items_per_s": b["items_per_s"],
        "prep_seconds": b["prepare_seconds"],
        "prep_items_per_s": n / b["prepare_seconds"] if b["prepare_seconds"] > 0 else float("nan"),
        "model_seconds": b["model_seconds"],
        "forward_items_per_s": n / b["model_seconds"] if b["model_seconds"] > 0 else float("nan"),
        "batch_latency_ms_p50": b.get("batch_latency_ms_p50"),
        "batch_latency_ms_p99": b.get("batch_latency_ms_p99"),
        "peak_rss_mb": obj["peak_rss_mb"],
        "image_tokens": tokens,
        "image_tokens_source": "driver: GME's two smart_resize steps on the image sizes (not reported by sift)",
    }
    if res["peak_rss_mb"] is None:
        raise SystemExit(f"{label}: sift reported no peak_rss_mb (not Linux?)")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description="Sift vs transformers GME image embedding throughput driver")
    ap.add_argument("--model", required=True, help="local GME (gme-Qwen2-VL) model directory")
    ap.add_argument("--images", required=True, help="folder of images (or a file listing image paths)")
    ap.add_argument("--items", type=int, default=4, help="images in the timed run")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2, help="images in the untimed warm-up")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sift", default=default_sift(),
                    help="the sift binary (default: $CARGO_TARGET_DIR/release/sift or target/release/sift)")
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = ap.parse_args()
    if min(args.rounds, args.threads, args.batch_size, args.items) < 1 or args.warmup < 0:
        ap.error("--rounds, --threads, --batch-size and --items must be >= 1, --warmup >= 0")
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        ap.error(f"--model {args.model}: no config.json")
    if not os.path.exists(args.images):
        ap.error(f"--images {args.images}: no such file or directory")
    if not os.access(args.sift, os.X_OK):
        ap.error(f"--sift {args.sift}: not an executable (cargo build --release -p sift-cli first)")

    command_line = shlex.join(["python3"] + script_argv())
    started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    mach = machine()
    env = peer_env(PEER_PKGS)
    src = sift_source()
    try:
        st = os.stat(args.sift)
        src["sift_binary"] = {"path": os.path.abspath(args.sift), "size": st.st_size,
                              "mtime": _dt.datetime.fromtimestamp(st.st_mtime, _dt.timezone.utc)
                              .replace(microsecond=0).isoformat()}
    except OSError:
        pass
    tokens, per_file = expected_tokens(args)
    scmd = sift_cmd(args)
    pcmd = peer_cmd(args)

    n_files = len(per_file)

    def check(label, res, eng):
        check_keys(label, res, eng, keys=KEYS, optional=OPTIONAL, positive=POSITIVE)

    raw = run_rounds(args.rounds, scmd, pcmd, PEER, check, "images/s",
                     adapt_sift=lambda label, obj: sift_result(label, obj, args, tokens, n_files))
    medians, ratios, warnings = summarise(raw, PEER, METRICS, SAME, CARRY)
    s, p = medians["sift"], medians[PEER]
    extra = []
    ptoks = sorted({e[PEER]["image_tokens"] for e in raw})
    if ptoks != [tokens]:
        extra.append(f"image_tokens differ: expected (Sift's rules) {tokens}, {PEER} {ptoks}")
    if p.get("image_files") != len(per_file):
        extra.append(f"image_files differ: driver {len(per_file)}, {PEER} {p.get('image_files')}")
    for w in extra:
        print("warning: " + w, file=sys.stderr)
    warnings += extra

    report = {
        "benchmark": "gme_vs_transformers",
        "date": started,
        "command": command_line,
        "argv": script_argv(),
        "cwd": os.getcwd(),
        "machine": mach,
        "peer_env": env,
        "sift_source": src,
        "settings": {"model": args.model, "images": os.path.abspath(args.images), "items": args.items,
                     "batch_size": args.batch_size, "threads": args.threads, "warmup": args.warmup,
                     "sift_command": scmd, "peer_command": pcmd},
        "images": per_file,
        "expected_image_tokens": tokens,
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
    peer_shell = shlex.join(["python3", *pcmd[1:]])
    files_line = ", ".join(f"`{f['file']}` {f['size'][0]}x{f['size'][1]} ({f['image_tokens']} tokens)"
                           for f in per_file[:8]) + (", ..." if len(per_file) > 8 else "")
    md = "\n".join([
        f"# GME image embedding: Sift vs transformers, {model_name} (CPU)",
        "",
        "Commands (from the repository root):",
        "",
        "```sh",
        command_line,
        "# each round runs, in fresh processes, alternating order:",
        f"#   {scmd}",
        f"#   {peer_shell}",
        "```",
        "",
        table,
        "",
        f"- Image tokens per timed image (merged): Sift {s['image_tokens']} (computed by the driver from "
        f"the image sizes with GME's resize rules; `sift bench embed` does not report it), "
        f"transformers {p['image_tokens']} (from `image_grid_thw`); prompt length {p.get('seq_len')} tokens.",
        f"- Sift {s['version']} (git {(src['git_head'] or '?')[:12]}"
        + (", uncommitted changes" if src["git_dirty"] else "") + f", image crate {src['image_crate']}, "
        f"`{repo_path(args.sift)}`); transformers {p['version']} (torch {p.get('torch') or pk.get('torch')}, "
        f"Pillow {pk.get('pillow')}, {p.get('processor', '?')}, attention {p.get('attn_implementation', '?')}). "
        "Both float32.",
        f"- Model: `{model_name}`; GME settings from its config.json: {p.get('min_pixels')}..{p.get('max_pixels')} "
        f"pixels per image (min/max_image_tokens x 28 x 28), max_length {p.get('max_length')}. Image-candidate "
        "prompt with the default instruction, sequential positions (position_ids=None), last-token pooling.",
        f"- {p['items']} images from `{repo_path(args.images)}` ({len(per_file)} files, sorted by name, "
        f"cycled; timed = images {args.warmup}..{args.warmup + args.items - 1} mod {len(per_file)}): {files_line}. "
        f"Batch {p['batch_size']}, threads {p['threads']} (Sift: `RAYON_NUM_THREADS`; transformers: "
        f"`torch.set_num_threads`), warm-up {args.warmup} images. Files are read into memory before timing; "
        "one timed run per process after one untimed warm-up; median over rounds.",
        "- Timed, per batch: decode + preprocess (Sift `prepare`, in parallel over the batch's images on the "
        "rayon pool; transformers: `Image.open(...).convert(\"RGB\")`, GME's `fetch_image` resize, the "
        "Qwen2-VL processor (tokenise + PIL image processor), single-threaded), then the forward pass "
        "(vision tower, merge into the prompt embeddings, language model), last-token pooling and L2 "
        "normalisation. The two rows below throughput are items / (summed time of that part).",
        "- Peak RSS is the whole process's peak (Sift `VmHWM`, Python `ru_maxrss`); for transformers it "
        "includes the interpreter and torch. Sift memory-maps the safetensors shards and copies the "
        "tensors out of them, so its peak can count the mapped pages too.",
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
