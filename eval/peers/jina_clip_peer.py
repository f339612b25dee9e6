#!/usr/bin/env python3
"""Jina-CLIP v1 peer runner: CPU embedding throughput of a local Jina-CLIP v1 checkpoint through
the published jina-clip-implementation code, images or texts.

Usage (from the repository root):
    python3 -m eval.peers.jina_clip_peer --model target/bench-models/jina-clip-v1 \
        --modality image --images DIR [--items 128] [--batch-size 32] [--threads 2] [--warmup 32] [--json]
    python3 -m eval.peers.jina_clip_peer --model target/bench-models/jina-clip-v1 \
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
         eval/peers/hf_vision_peer.py's run times it (image_embedder here is the model's
         path); keys as its (benches/vision_vs_transformers.py runs it for a Jina-CLIP
         checkpoint).
  text:  the published JinaCLIPModel.encode_text(texts, batch_size=B, convert_to_tensor=True)
         (sorted by length, padded per batch, truncated at 512 tokens, mean pooling,
         projection, L2) -> seconds. Texts as eval/peers/st_embed_peer.py reads them (a BEIR
         corpus.jsonl record is title + " " + text); keys as its (benches/embed_vs_st.py
         --peer jina-clip). The shared measuring code is eval/peers/measure.py.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys

FIXTURE = "models.fixtures.jina_clip.make_tiny_jina_clip"  # models/fixtures/jina_clip/make_tiny_jina_clip.py


def is_jina_clip(cfg: dict) -> bool:
    return "JinaCLIPModel" in (cfg.get("architectures") or [])


def load(model: str):
    """(JinaCLIPModel with the checkpoint's weights and processors, the fixture module)."""
    import torch
    from transformers import BertTokenizerFast
    from eval.peers.hf_vision_peer import read_safetensors_into

    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    if not is_jina_clip(cfg):
        raise ValueError(f"{model}/config.json: not a JinaCLIPModel checkpoint")
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON line
        fx = importlib.import_module(FIXTURE)
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


def image_embedder(model: str, batch_size: int):
    """hf_vision_peer.ImageEmbedder of the published encode_image (hf_vision_peer.run times it)."""
    from PIL import Image
    from eval.peers.hf_vision_peer import ImageEmbedder

    m = load(model)

    def decode(xs):
        return [Image.open(io.BytesIO(b)).convert("RGB") for b in xs]

    return ImageEmbedder(
        model=os.path.basename(os.path.normpath(model)),
        processor=type(m.preprocess).__name__,
        attn_implementation="eager (vendored jina-clip-implementation encode_image)",
        prep=lambda chunk: m.preprocess(decode(chunk))["pixel_values"],
        embed_all=lambda xs: m.encode_image(decode(xs), batch_size=batch_size, convert_to_tensor=True),
        held=m,
    )


def run_texts(model: str, texts: str, batch_size: int = 32, threads: int = 1,
              items: int | None = None, warmup: int = 64) -> dict:
    import transformers
    from eval.peers.measure import result, set_threads, text_inputs, timed_run

    set_threads(threads)
    all_texts, n = text_inputs(texts, items)
    m = load(model)
    emb, seconds = timed_run(
        lambda xs: m.encode_text(xs, batch_size=batch_size, convert_to_tensor=True),
        all_texts[:n], all_texts[:max(warmup, 0)])
    out = result("transformers", transformers.__version__, model, n, batch_size, threads, warmup,
                 seconds)
    out.update({"max_seq_length": 512, "dim": int(emb.shape[1])})
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
        from eval.peers.hf_vision_peer import run
        res = run(args.model, args.images, args.items or 128, args.batch_size, args.threads,
                  32 if args.warmup is None else args.warmup)
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
