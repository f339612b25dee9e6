#!/usr/bin/env python3
"""transformers peer runner: CPU image embedding throughput of a local GME (gme-Qwen2-VL) model.

Usage (from the repository root):
    python3 -m eval.peers.gme_peer --model target/bench-models/gme-qwen2-vl-2b \
        --images target/bench-images-gme [--items 8] [--batch-size 2] [--threads 2] [--warmup 2] [--json]

Input: --images is a folder (its .png/.jpg/.jpeg/.webp/.gif/.bmp files, sorted by name) or a
file listing image paths one per line (relative to the list's folder), as `sift embed` and
`sift bench embed --input` read them. The files are read into memory (bytes) before anything
is timed, as `sift bench embed` and eval/peers/hf_vision_peer.py do. Like `sift bench embed`,
the warm-up embeds images 0..W-1 and the timed run images W..W+N-1 (index i is file
i mod files), so both engines embed the same images in the same batches.

Each image is embedded exactly as GME's gme_inference.py embeds an image candidate (ported to
transformers 5.24 as in models/fixtures/gme/make_gme_fixtures.py):
  * fetch_image: Image.open(bytes).convert("RGB") (alpha dropped), GME's smart_resize
    (factor 28, 4*28*28 .. 16384*28*28 pixels, Python rounding), Image.resize((w, h)) (bicubic);
  * the prompt `<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n<|im_start|>user\\n`
    `<|vision_start|><|image_pad|><|vision_end|><|im_end|>\\n<|im_start|>assistant\\n<|endoftext|>`;
  * processor(text=prompts, images=batch, padding=True, truncation=True, max_length=config
    max_length) with a Qwen2VLProcessor built without its video processor (that one needs
    torchvision), the PIL image processor (Qwen2VLImageProcessorPil) with min/max pixels =
    config.json's min_image_tokens/max_image_tokens x 28 x 28, right padding;
  * inputs_embeds = embed_tokens(input_ids) with the vision tower's merged output scattered into
    the <|image_pad|> rows, the language model called with position_ids=None (positions
    0..L-1), the final-norm hidden state of the last real token, L2-normalised.

With --json, stdout carries exactly one line: a JSON object with the keys
    engine, version, torch, model, items, batch_size, threads, warmup, image_files, dim,
    image_tokens (mean merged image tokens per timed image, from image_grid_thw),
    seq_len (mean prompt tokens per timed image), min_pixels, max_pixels, max_length,
    processor, attn_implementation, dtype, seconds, items_per_s, prep_seconds,
    prep_items_per_s, model_seconds, forward_items_per_s, peak_rss_mb, end_rss_mb

Timed region (time.perf_counter wall time, one run, after one untimed warm-up of the full
path on the first --warmup images): per batch of B images, decode + fetch_image + processor
(-> prep_seconds, summed over batches) then the forward pass, pooling and L2 normalisation
under torch.no_grad() (-> model_seconds); seconds covers the whole loop. This is the split
`sift bench embed` reports (prepare_seconds / model_seconds inside one timed run).
Model: Qwen2VLForConditionalGeneration.from_pretrained(dir, dtype=float32), its default
attention implementation (sdpa), eval mode; torch.set_num_threads(T); RAYON_NUM_THREADS (the
tokenizers pool) is set to T unless already set. Not timed: importing torch, loading the model
and processor, reading the files.

`run(...)` is importable so a driver can call it in a fresh subprocess; the pure-Python helpers
(image_files, expected_image_tokens) need neither torch nor transformers.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import time
from typing import List

from eval.peers.measure import result, set_threads

IMAGE_EXT = ("png", "jpg", "jpeg", "webp", "gif", "bmp")  # what `sift embed` takes from a folder
DEFAULT_INSTRUCTION = "You are a helpful assistant."

# GME's fetch_image bounds (gme_inference.py / qwen_vl_utils)
IMAGE_FACTOR = 28
FETCH_MIN_PIXELS = 4 * 28 * 28
FETCH_MAX_PIXELS = 16384 * 28 * 28
MAX_RATIO = 200


def image_files(path: str) -> List[str]:
    """The image paths `sift embed --input PATH` reads: a folder's image files sorted by name,
    or the lines of a list file (relative to its folder)."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if os.path.isfile(os.path.join(path, n))
                       and n.rsplit(".", 1)[-1].lower() in IMAGE_EXT and "." in n)
        out = [os.path.join(path, n) for n in names]
    else:
        base = os.path.dirname(path)
        with open(path, encoding="utf-8") as f:
            out = [os.path.join(base, line.strip()) for line in f if line.strip()]
    if not out:
        raise ValueError(f"no image files in {path}")
    return out


def gme_config(model: str) -> dict:
    """GME's settings from config.json (gme_inference.py's defaults where absent)."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    return {"min_image_tokens": int(cfg.get("min_image_tokens", 256)),
            "max_image_tokens": int(cfg.get("max_image_tokens", 1280)),
            "max_length": int(cfg.get("max_length", 1800)),
            "image_token_id": cfg.get("image_token_id")}


def fetch_smart_resize(height, width, factor=IMAGE_FACTOR, min_pixels=FETCH_MIN_PIXELS,
                       max_pixels=FETCH_MAX_PIXELS):
    """gme_inference.py's smart_resize (qwen_vl_utils); `round` is Python's (half to even)."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    if max(h_bar, w_bar) / min(h_bar, w_bar) > MAX_RATIO:
        if h_bar > w_bar:
            h_bar = w_bar * MAX_RATIO
        else:
            w_bar = h_bar * MAX_RATIO
    return h_bar, w_bar


def processor_smart_resize(height, width, min_pixels, max_pixels, factor=IMAGE_FACTOR):
    """transformers 5.24 Qwen2VLImageProcessor(Pil)'s smart_resize."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"aspect ratio of {width}x{height} is over 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def gme_prompt(text, n_images: int, instruction: str = DEFAULT_INSTRUCTION) -> str:
    """GME's prompt: the instruction as system prompt, then the images and the text."""
    input_str = "<|vision_start|><|image_pad|><|vision_end|>" * n_images
    if text is not None:
        input_str += text
    return (f"<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n{input_str}<|im_end|>\n"
            f"<|im_start|>assistant\n<|endoftext|>")


def fetch_image(image):
    """GME's fetch_image on an opened PIL image: convert("RGB") (alpha dropped), then PIL's
    default (bicubic) resize to fetch_smart_resize's size."""
    image = image.convert("RGB")
    width, height = image.size
    h, w = fetch_smart_resize(height, width)
    return image.resize((w, h))


def embed_gme(model, inputs, image_token_id, dtype=None):
    """GME's forward on transformers 5 (`model.model.visual` / `model.model.language_model`): the
    merged image embeddings replace the image tokens' embeddings, the language model runs without
    position ids (0, 1, 2, ... on every M-RoPE axis, as GME's code gets from transformers < 4.52),
    the last real token is pooled and L2-normalised. Returns (embeddings, visual embeddings or
    None). The pixels go to the vision tower in `dtype` (default float32). Call under
    torch.no_grad()."""
    import torch
    lm = model.model.language_model
    emb = lm.embed_tokens(inputs["input_ids"])
    vis = None
    if "pixel_values" in inputs:
        vis = model.model.visual(inputs["pixel_values"].to(dtype or torch.float32),
                                 grid_thw=inputs["image_grid_thw"]).pooler_output
        mask = inputs["input_ids"] == image_token_id
        if int(mask.sum()) != vis.shape[0]:
            raise RuntimeError(f"{int(mask.sum())} image tokens, {vis.shape[0]} visual embeddings")
        emb[mask] = vis.to(emb.dtype)
    am = inputs["attention_mask"]
    out = lm(input_ids=None, inputs_embeds=emb, attention_mask=am, position_ids=None,
             use_cache=False).last_hidden_state
    last = out[torch.arange(out.shape[0]), am.sum(1) - 1]
    return torch.nn.functional.normalize(last, p=2, dim=1), vis


def expected_image_tokens(width: int, height: int, min_image_tokens: int, max_image_tokens: int) -> int:
    """Merged image tokens GME gives a width x height image: fetch_image's resize, then the
    processor's, then (h/14)(w/14)/4. Depends on the image size only, not on its pixels."""
    h, w = fetch_smart_resize(height, width)
    h, w = processor_smart_resize(h, w, min_image_tokens * 784, max_image_tokens * 784)
    return (h // 14) * (w // 14) // 4


def load_processor(model: str, min_pixels: int, max_pixels: int):
    """GME's AutoProcessor.from_pretrained(dir, min_pixels=..., max_pixels=...), built without the
    video processor (transformers 5 loads Qwen2VLVideoProcessor, which needs torchvision); the
    image + text path of Qwen2VLProcessor.__call__ is unchanged. As in make_gme_fixtures.py."""
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class Qwen2VLProcessorNoVideo(Qwen2VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    ip = AutoImageProcessor.from_pretrained(model, backend="pil", min_pixels=min_pixels, max_pixels=max_pixels)
    proc = Qwen2VLProcessorNoVideo(image_processor=ip, tokenizer=AutoTokenizer.from_pretrained(model))
    proc.tokenizer.padding_side = "right"
    ip = proc.image_processor
    if type(ip).__name__ != "Qwen2VLImageProcessorPil":
        raise RuntimeError(f"image processor {type(ip).__name__}, expected the PIL backend")
    if ip.size["shortest_edge"] != min_pixels or ip.size["longest_edge"] != max_pixels:
        raise RuntimeError(f"image processor size {ip.size}, expected {min_pixels}..{max_pixels} pixels")
    return proc


class GmeImageEmbedder:
    """GME's image-candidate path with transformers: `prep(list of bytes)` (decode, fetch_image,
    processor) -> inputs, `forward(inputs)` -> L2-normalised embeddings (call under no_grad)."""

    def __init__(self, model: str):
        import torch
        from transformers import Qwen2VLForConditionalGeneration

        self.config = g = gme_config(model)
        self.min_pixels, self.max_pixels = g["min_image_tokens"] * 784, g["max_image_tokens"] * 784
        self.proc = load_processor(model, self.min_pixels, self.max_pixels)
        self.model = Qwen2VLForConditionalGeneration.from_pretrained(model, dtype=torch.float32).eval()
        self.image_token_id = self.model.config.image_token_id

    def prep(self, chunk):
        from PIL import Image
        imgs = [fetch_image(Image.open(io.BytesIO(b))) for b in chunk]
        return self.proc(text=[gme_prompt(None, 1)] * len(imgs), images=imgs, padding=True, truncation=True,
                         max_length=self.config["max_length"], return_tensors="pt")

    def forward(self, inputs):
        return embed_gme(self.model, inputs, self.image_token_id)[0]


def run(model: str, images, items: int = 8, batch_size: int = 2, threads: int = 1,
        warmup: int = 2) -> dict:
    """`images`: a folder or list file (see image_files) or a list of paths."""
    if items < 1 or batch_size < 1 or threads < 1 or warmup < 0:
        raise ValueError("items, batch_size and threads must be >= 1, warmup >= 0")
    set_threads(threads)
    import torch
    import transformers

    paths = list(images) if isinstance(images, (list, tuple)) else image_files(images)
    files = []
    for p in paths:
        with open(p, "rb") as f:
            files.append(f.read())
    warm = [files[i % len(files)] for i in range(warmup)]
    timed = [files[i % len(files)] for i in range(warmup, warmup + items)]

    gme = GmeImageEmbedder(model)

    stats = {"prep": 0.0, "model": 0.0, "image_tokens": 0, "seq_len": 0}

    def embed_all(xs, record=False):
        out = []
        with torch.no_grad():
            for i in range(0, len(xs), batch_size):
                t0 = time.perf_counter()
                inputs = gme.prep(xs[i:i + batch_size])
                t1 = time.perf_counter()
                out.append(gme.forward(inputs))
                t2 = time.perf_counter()
                if record:
                    stats["prep"] += t1 - t0
                    stats["model"] += t2 - t1
                    stats["image_tokens"] += int(inputs["image_grid_thw"].prod(-1).sum()) // 4
                    stats["seq_len"] += int(inputs["attention_mask"].sum())
        return torch.cat(out)

    if warm:
        embed_all(warm)
    t0 = time.perf_counter()
    emb = embed_all(timed, record=True)
    seconds = time.perf_counter() - t0
    assert emb.shape[0] == items, emb.shape
    out = result("transformers", transformers.__version__, model, items, batch_size, threads,
                 warmup, seconds, digits=4)
    out.update({
        "image_files": len(files),
        "dim": int(emb.shape[1]),
        "image_tokens": round(stats["image_tokens"] / items, 3),
        "seq_len": round(stats["seq_len"] / items, 3),
        "min_pixels": gme.min_pixels,
        "max_pixels": gme.max_pixels,
        "max_length": gme.config["max_length"],
        "processor": type(gme.proc.image_processor).__name__,
        "attn_implementation": gme.model.config._attn_implementation,
        "dtype": "f32",
        "prep_seconds": round(stats["prep"], 6),
        "prep_items_per_s": round(items / stats["prep"], 4),
        "model_seconds": round(stats["model"], 6),
        "forward_items_per_s": round(items / stats["model"], 4),
    })
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local GME (gme-Qwen2-VL) model directory")
    ap.add_argument("--images", required=True, help="folder of images, or a file listing image paths")
    ap.add_argument("--items", type=int, default=8, help="images in the timed run")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--warmup", type=int, default=2, help="images in the untimed warm-up")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    res = run(args.model, args.images, args.items, args.batch_size, args.threads, args.warmup)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        print(f"{res['engine']} {res['version']} (torch {res['torch']}), {res['model']}")
        print(f"  {res['items']} images ({res['image_tokens']:.1f} image tokens each), batch "
              f"{res['batch_size']}, {res['threads']} threads: {res['seconds']:.3f} s, "
              f"{res['items_per_s']:.3f} images/s (decode+preprocess {res['prep_seconds']:.3f} s, "
              f"forward+normalise {res['model_seconds']:.3f} s), peak RSS {res['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
