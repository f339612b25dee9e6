#!/usr/bin/env python3
"""transformers peer runner: CPU image embedding throughput of a local CLIP / SigLIP model.

Usage:
    python3 eval/peers/hf_vision_peer.py --model target/bench-models/clip-vit-base-patch32 \
        --images target/bench-images [--items 128] [--batch-size 32] [--threads 2] [--warmup 32] [--json]

Input: the files of --images (sorted by name, cycled if fewer than --items), read into memory
(bytes) before anything is timed, as benches/embed_image.rs does.

With --json, stdout carries exactly one line: a JSON object with the keys
    engine, version, torch, model, items, batch_size, threads, warmup, image_files, input_size,
    dim, processor, attn_implementation, seconds, items_per_s, prep_seconds, prep_items_per_s,
    peak_rss_mb, end_rss_mb (VmRSS after the timed runs)

Timed regions (time.perf_counter wall time, one run each, after one untimed warm-up of the
full path on the first --warmup images):
  prep:  per batch of B, Image.open(BytesIO(bytes)).convert("RGB") for each image, then
         processor(images=batch, return_tensors="pt") -> prep_seconds, prep_items_per_s
  full:  the same, then model.get_image_features(pixel_values=...) under torch.no_grad() and
         L2 normalisation -> seconds, items_per_s
The model is AutoModel.from_pretrained(dir, dtype=float32) with its default attention
implementation (sdpa), in eval mode; the processor is AutoImageProcessor.from_pretrained(dir)
(the PIL backend when torchvision is absent). torch.set_num_threads(T). Not timed: importing
torch, loading the model, reading the files.

`run(...)` is importable so a driver can call it in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import time
from typing import List


def load_images(path: str, items: int) -> tuple[List[bytes], int]:
    names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
    if not names:
        raise ValueError(f"no files in {path}")
    files = []
    for n in names:
        with open(os.path.join(path, n), "rb") as f:
            files.append(f.read())
    return [files[i % len(files)] for i in range(items)], len(files)


def run(model: str, images: str, items: int = 128, batch_size: int = 32, threads: int = 1,
        warmup: int = 32) -> dict:
    import torch
    import transformers
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel

    torch.set_num_threads(threads)
    if items < 1:
        raise ValueError("--items must be >= 1")
    data, n_files = load_images(images, max(items, warmup))
    timed, warm = data[:items], data[:warmup]

    proc = AutoImageProcessor.from_pretrained(model)
    m = AutoModel.from_pretrained(model, dtype=torch.float32).eval()

    def prep(chunk):
        imgs = [Image.open(io.BytesIO(b)).convert("RGB") for b in chunk]
        return proc(images=imgs, return_tensors="pt")["pixel_values"]

    def prepare_all(xs):
        return [prep(xs[i:i + batch_size]) for i in range(0, len(xs), batch_size)]

    def embed_all(xs):
        out = []
        with torch.no_grad():
            for i in range(0, len(xs), batch_size):
                px = prep(xs[i:i + batch_size])
                f = m.get_image_features(pixel_values=px)
                if not isinstance(f, torch.Tensor):  # transformers 5: BaseModelOutputWithPooling
                    f = f.pooler_output
                out.append(torch.nn.functional.normalize(f, dim=-1))
        return torch.cat(out)

    if warm:
        embed_all(warm)
    t0 = time.perf_counter()
    pixels = prepare_all(timed)
    prep_seconds = time.perf_counter() - t0
    input_size = list(pixels[0].shape[-2:])
    del pixels

    t0 = time.perf_counter()
    emb = embed_all(timed)
    seconds = time.perf_counter() - t0
    assert emb.shape[0] == items, emb.shape

    # Peak resident set size of this whole process (Linux reports KiB): it includes the
    # Python interpreter, torch and its libraries, the model weights and the images.
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    end_rss_mb = float("nan")
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    end_rss_mb = int(line.split()[1]) / 1024
    except OSError:
        pass

    return {
        "engine": "transformers",
        "version": transformers.__version__,
        "torch": torch.__version__,
        "model": model,
        "items": items,
        "batch_size": batch_size,
        "threads": threads,
        "warmup": warmup,
        "image_files": n_files,
        "input_size": input_size,
        "dim": int(emb.shape[1]),
        "processor": type(proc).__name__,
        "attn_implementation": m.config._attn_implementation,
        "seconds": round(seconds, 6),
        "items_per_s": round(items / seconds, 3),
        "prep_seconds": round(prep_seconds, 6),
        "prep_items_per_s": round(items / prep_seconds, 3),
        "peak_rss_mb": round(peak_rss_mb, 1),
        "end_rss_mb": round(end_rss_mb, 1),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local CLIP / SigLIP model directory")
    ap.add_argument("--images", required=True, help="directory of image files")
    ap.add_argument("--items", type=int, default=128, help="images per timed region")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--warmup", type=int, default=32, help="images in the untimed warm-up")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    res = run(args.model, args.images, args.items, args.batch_size, args.threads, args.warmup)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        print(f"{res['engine']} {res['version']} (torch {res['torch']}), {res['model']}")
        print(f"  {res['items']} images, batch {res['batch_size']}, {res['threads']} threads: "
              f"{res['seconds']:.3f} s, {res['items_per_s']:.1f} images/s "
              f"(decode+preprocess alone {res['prep_items_per_s']:.1f} images/s), "
              f"peak RSS {res['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
