#!/usr/bin/env python3
"""Jina-CLIP v1 peer runner: CPU embedding throughput of a local Jina-CLIP v1 checkpoint through
the published jina-clip-implementation code, images or texts.

Usage:
    python3 eval/peers/jina_clip_peer.py --model target/bench-models/jina-clip-v1 \
        --modality image --images DIR [--items 128] [--batch-size 32] [--threads 2] [--warmup 32] [--json]
    python3 eval/peers/jina_clip_peer.py --model target/bench-models/jina-clip-v1 \
        --modality text --texts FILE [--items N] [--batch-size 32] [--threads 2] [--warmup 64] [--json]

The model is built as models/fixtures/jina_clip/make_tiny_jina_clip.py builds its fixture (that
file is imported): JinaCLIPModel of the vendored, published modeling_clip.py, with the text
tower's transformer from that folder's JinaBERT reconstruction (its README says why), float32,
eval mode; the weights are model.safetensors read straight into the parameters with
load_state_dict(strict=True)'s checks (eval/peers/hf_vision_peer.py's reader). Tokenizer:
BertTokenizerFast of the checkpoint folder; image processor: the published
JinaCLIPImageProcessor with the folder's preprocessor_config.json. torchvision (its PIL
transforms) and einops must be importable (models/fixtures/jina_clip/requirements.txt).

Timed regions (time.perf_counter wall time, one run each, after an untimed warm-up of the
same path on the first --warmup inputs), with torch.set_num_threads(T):
  image: the published JinaCLIPModel.encode_image(pil_images, batch_size=B,
         convert_to_tensor=True) on images decoded from bytes read before timing
         (Image.open(BytesIO(b)).convert("RGB"), inside the timed region) -> seconds; and,
         separately, decode + model.preprocess of each batch alone -> prep_seconds.
         Keys as eval/peers/hf_vision_peer.py's (benches/vision_vs_transformers.py runs this
         through it for a Jina-CLIP checkpoint).
  text:  the published JinaCLIPModel.encode_text(texts, batch_size=B, convert_to_tensor=True)
         (sorted by length, padded per batch, truncated at 512 tokens, mean pooling,
         projection, L2) -> seconds. Texts as eval/peers/st_embed_peer.py reads them (a BEIR
         corpus.jsonl record is title + " " + text); keys as its (benches/embed_vs_st.py
         --peer jina-clip).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(REPO, "models", "fixtures", "jina_clip", "make_tiny_jina_clip.py")
sys.path.insert(0, HERE)


def is_jina_clip(cfg: dict) -> bool:
    return "JinaCLIPModel" in (cfg.get("architectures") or [])


def load(model: str):
    """(JinaCLIPModel with the checkpoint's weights and processors, the fixture module)."""
    import torch
    from transformers import BertTokenizerFast
    from hf_vision_peer import read_safetensors_into

    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    if not is_jina_clip(cfg):
        raise ValueError(f"{model}/config.json: not a JinaCLIPModel checkpoint")
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON line
        spec = importlib.util.spec_from_file_location("make_tiny_jina_clip", FIXTURE)
        fx = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fx)
        m = fx.build_model(cfg).to(torch.float32).eval()
    read_safetensors_into(os.path.join(model, "model.safetensors"), m.state_dict())
    m.tokenizer = BertTokenizerFast.from_pretrained(model)
    with open(os.path.join(model, "preprocessor_config.json")) as f:
        pre = json.load(f)
    m.preprocess = fx.PROCESSING.JinaCLIPImageProcessor(
        **{k: v for k, v in pre.items()
           if k not in ("auto_map", "image_processor_type", "processor_class")})
    # encode_image / encode_text fetch these again; keep the ones set here
    m.get_preprocess = lambda: m.preprocess
    m.get_tokenizer = lambda: m.tokenizer
    return m


def _rss() -> tuple:
    """(peak RSS of this whole process, VmRSS now), MB, rounded."""
    from gme_peer import rss_mb
    return tuple(round(x, 1) for x in rss_mb())


def _common(model, items, batch_size, threads, warmup, seconds) -> dict:
    import torch
    import transformers
    return {
        "engine": "transformers",
        "version": transformers.__version__,
        "torch": torch.__version__,
        "model": model,
        "items": items,
        "batch_size": batch_size,
        "threads": threads,
        "warmup": warmup,
        "seconds": round(seconds, 6),
        "items_per_s": round(items / seconds, 3),
    }


def run_images(model: str, images: str, items: int = 128, batch_size: int = 32, threads: int = 1,
               warmup: int = 32) -> dict:
    import torch
    from PIL import Image
    from hf_vision_peer import load_images

    torch.set_num_threads(threads)
    if items < 1:
        raise ValueError("--items must be >= 1")
    data, n_files = load_images(images, max(items, warmup))
    timed, warm = data[:items], data[:warmup]
    m = load(model)

    def decode(xs):
        return [Image.open(io.BytesIO(b)).convert("RGB") for b in xs]

    def embed(xs):
        return m.encode_image(decode(xs), batch_size=batch_size, convert_to_tensor=True)

    if warm:
        embed(warm)
    t0 = time.perf_counter()
    pixels = [m.preprocess(decode(timed[i:i + batch_size])) for i in range(0, items, batch_size)]
    prep_seconds = time.perf_counter() - t0
    input_size = list(pixels[0]["pixel_values"].shape[-2:])
    del pixels
    t0 = time.perf_counter()
    emb = embed(timed)
    seconds = time.perf_counter() - t0
    assert emb.shape[0] == items, emb.shape
    peak, end = _rss()
    out = _common(os.path.basename(os.path.normpath(model)), items, batch_size, threads, warmup,
                  seconds)
    out.update({
        "image_files": n_files,
        "input_size": input_size,
        "dim": int(emb.shape[1]),
        "processor": type(m.preprocess).__name__,
        "attn_implementation": "eager (vendored jina-clip-implementation encode_image)",
        "prep_seconds": round(prep_seconds, 6),
        "prep_items_per_s": round(items / prep_seconds, 3),
        "peak_rss_mb": peak,
        "end_rss_mb": end,
    })
    return out


def run_texts(model: str, texts: str, batch_size: int = 32, threads: int = 1,
              items: int | None = None, warmup: int = 64) -> dict:
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    import torch
    from st_embed_peer import load_texts

    torch.set_num_threads(threads)
    all_texts = load_texts(texts)
    n = len(all_texts) if items is None else items
    if n < 1 or n > len(all_texts):
        raise ValueError(f"--items {n}: {texts} has {len(all_texts)} texts")
    m = load(model)

    def embed(xs):
        return m.encode_text(xs, batch_size=batch_size, convert_to_tensor=True)

    if warmup > 0:
        embed(all_texts[:warmup])
    t0 = time.perf_counter()
    emb = embed(all_texts[:n])
    seconds = time.perf_counter() - t0
    assert emb.shape[0] == n, emb.shape
    peak, end = _rss()
    out = _common(model, n, batch_size, threads, warmup, seconds)
    out.update({"max_seq_length": 512, "dim": int(emb.shape[1]), "peak_rss_mb": peak})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local Jina-CLIP v1 checkpoint directory")
    ap.add_argument("--modality", choices=["image", "text"], required=True)
    ap.add_argument("--images", help="directory of image files (--modality image)")
    ap.add_argument("--texts", help="JSONL texts or a BEIR corpus.jsonl (--modality text)")
    ap.add_argument("--items", type=int, default=None,
                    help="inputs timed (images: default 128; texts: default all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="inputs in the untimed warm-up (images: default 32; texts: default 64)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    if args.modality == "image":
        if not args.images:
            ap.error("--modality image needs --images")
        res = run_images(args.model, args.images, args.items or 128, args.batch_size,
                         args.threads, 32 if args.warmup is None else args.warmup)
    else:
        if not args.texts:
            ap.error("--modality text needs --texts")
        res = run_texts(args.model, args.texts, args.batch_size, args.threads, args.items,
                        64 if args.warmup is None else args.warmup)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        print(f"{res['engine']} {res['version']} (torch {res['torch']}), {res['model']}: "
              f"{res['items']} {args.modality}s, batch {res['batch_size']}, {res['threads']} threads: "
              f"{res['seconds']:.3f} s, {res['items_per_s']:.1f}/s, peak RSS {res['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
