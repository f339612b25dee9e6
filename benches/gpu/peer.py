#!/usr/bin/env python3
"""transformers on a GPU (or, for the dry run, the CPU): embedding throughput of the inputs
`sift bench embed` measures, in the same precision, for benches/gpu/run.sh.

    python3 -m benches.gpu.peer --family clip --model DIR --input IMAGES_DIR \
        --device cuda:0 --dtype bf16 --items 1024 --batch-size 64 --warmup 64 --json

Families and what is timed (the whole path: inputs as bytes or strings in memory -> unit
vectors on the host):
  clip, siglip  AutoModel.from_pretrained(dir, dtype, attn_implementation="sdpa") on the device;
                per batch: PIL decode + .convert("RGB") + AutoImageProcessor (the PIL backend),
                eval/peers/hf_vision_peer.py's image_features (get_image_features, L2
                normalisation), copy to the host.
  gme           eval/peers/gme_peer.py's GmeImageEmbedder (GME's image-candidate path:
                fetch_image, Qwen2VLProcessor, the vision tower, last-token pooling), with the
                model in `dtype` on the device.
  decoder       AutoModel (sdpa) in `dtype`; texts tokenised as eval/peers/decoder_peer.py
                does (cut at --max-length - 1, the EOS appended: the E5-Mistral convention
                Sift's decoders use), right-padded per batch, the last real token pooled and
                L2-normalised.
Input preparation runs in a torch DataLoader with --workers processes, one batch ahead of the
GPU (pinned memory on CUDA): the usual way to keep a GPU fed from Python. The output JSON has
items_per_s, seconds, gpu_memory_mb (torch.cuda.max_memory_reserved, plus the CUDA context as
nvidia-smi sees it when available) and gpu_utilization_pct (mean of nvidia-smi samples every
250 ms), or null for those on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


class Sampler:
    """nvidia-smi memory.used / utilization.gpu every 250 ms (nothing on the CPU)."""

    def __init__(self, device: str):
        self.index = None if not device.startswith("cuda") else (device.split(":") + ["0"])[1]
        self.peak, self.util, self.stop = None, [], threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True) if self.index else None
        if self.thread:
            self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu",
                                      "--format=csv,noheader,nounits", f"--id={self.index}"],
                                     capture_output=True, text=True, timeout=5).stdout
                used, busy = (float(x) for x in out.strip().split(","))
            except Exception:
                return
            self.peak = used if self.peak is None else max(self.peak, used)
            self.util.append(busy)
            time.sleep(0.25)

    def finish(self):
        self.stop.set()
        if self.thread:
            self.thread.join()
        return self.peak, (sum(self.util) / len(self.util) if self.util else None)


def image_bytes(folder: str, n: int) -> list[bytes]:
    files = sorted(p for p in Path(folder).iterdir() if p.is_file())
    if not files:
        raise SystemExit(f"{folder}: no image files")
    data = [p.read_bytes() for p in files]
    return [data[i % len(data)] for i in range(n)]


def texts(path: str, n: int) -> list[str]:
    lines = [l.rstrip("\n") for l in open(path, encoding="utf-8") if l.strip()]
    if not lines:
        raise SystemExit(f"{path}: no texts")
    return [lines[i % len(lines)] for i in range(n)]


def build(family: str, model: str, device, dtype, max_length: int | None = None):
    """(prepare(list of items) -> batch, forward(batch on device) -> unit vectors, to_device)."""
    import torch
    import torch.nn.functional as F

    if family in ("clip", "siglip"):
        import io
        from PIL import Image
        from eval.peers.hf_vision_peer import image_features
        from transformers import AutoImageProcessor, AutoModel
        proc = AutoImageProcessor.from_pretrained(model)
        m = AutoModel.from_pretrained(model, dtype=dtype, attn_implementation="sdpa").to(device).eval()

        def prepare(chunk):
            imgs = [Image.open(io.BytesIO(b)).convert("RGB") for b in chunk]
            return {"pixel_values": proc(images=imgs, return_tensors="pt")["pixel_values"]}

        def forward(batch):
            return image_features(m, batch["pixel_values"].to(dtype))
        return prepare, forward
    if family == "gme":
        from eval.peers.gme_peer import GmeImageEmbedder, embed_gme
        gme = GmeImageEmbedder(model)
        gme.model = gme.model.to(device=device, dtype=dtype).eval()

        def prepare(chunk):
            return dict(gme.prep(chunk))

        def forward(batch):
            return embed_gme(gme.model, batch, gme.image_token_id, dtype)[0].float()
        return prepare, forward
    if family == "decoder":
        from eval.peers.decoder_peer import default_max_length, token_ids
        from transformers import AutoModel, AutoTokenizer
        max_length = max_length or default_max_length(model)
        tok = AutoTokenizer.from_pretrained(model)
        m = AutoModel.from_pretrained(model, dtype=dtype, attn_implementation="sdpa").to(device).eval()
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

        def prepare(chunk):
            ids = [token_ids(tok, t, max_length) for t in chunk]
            longest = max(len(i) for i in ids)
            x = torch.full((len(ids), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(ids), longest), dtype=torch.long)
            for r, i in enumerate(ids):
                x[r, :len(i)] = torch.tensor(i)
                mask[r, :len(i)] = 1
            return {"input_ids": x, "attention_mask": mask}

        def forward(batch):
            h = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
            last = batch["attention_mask"].sum(1) - 1
            return F.normalize(h[torch.arange(h.shape[0], device=h.device), last].float(), dim=-1)
        return prepare, forward
    raise SystemExit(f"unknown family {family}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True, choices=["clip", "siglip", "gme", "decoder"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True, help="image folder, or a text file (decoder)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=64)
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--max-length", type=int,
                    help="decoder: tokens per text, EOS included [default: as Sift, 4096 at most "
                         "the config's max_position_embeddings]")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import torch
    import transformers
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    t0 = time.perf_counter()
    prepare, forward = build(a.family, a.model, device, dtype, a.max_length)
    load = time.perf_counter() - t0
    n = a.warmup + a.items
    items = texts(a.input, n) if a.family == "decoder" else image_bytes(a.input, n)

    def run(xs):
        chunks = [xs[i:i + a.batch_size] for i in range(0, len(xs), a.batch_size)]
        loader = torch.utils.data.DataLoader(chunks, batch_size=None, collate_fn=prepare,
                                             num_workers=a.workers, pin_memory=cuda,
                                             prefetch_factor=2 if a.workers else None)
        out = 0
        with torch.inference_mode():
            for batch in loader:
                batch = {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v)
                         for k, v in batch.items()}
                out += forward(batch).cpu().shape[0]
        return out

    if a.warmup:
        run(items[:a.warmup])
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    sampler = Sampler(a.device)
    t0 = time.perf_counter()
    done = run(items[a.warmup:])
    seconds = time.perf_counter() - t0
    smi_mb, util = sampler.finish()
    assert done == a.items, (done, a.items)
    res = {
        "engine": "transformers", "version": transformers.__version__, "torch": torch.__version__,
        "family": a.family, "model": os.path.basename(os.path.normpath(a.model)),
        "device": a.device, "dtype": a.dtype, "attn_implementation": "sdpa",
        "items": a.items, "batch_size": a.batch_size, "workers": a.workers,
        "load_seconds": round(load, 3), "seconds": round(seconds, 6),
        "items_per_s": round(a.items / seconds, 3),
        "torch_max_reserved_mb": round(torch.cuda.max_memory_reserved() / 2**20, 1) if cuda else None,
        "gpu_memory_mb": smi_mb, "gpu_utilization_pct": util,
    }
    print(json.dumps(res) if a.json else res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
