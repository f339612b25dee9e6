#!/usr/bin/env python3
"""transformers peer runner: CPU image embedding throughput of a local CLIP / SigLIP model
(or Nomic Embed Vision v1.5, through its vendored published code; or Jina-CLIP v1, through
eval/peers/jina_clip_peer.py).

Usage (from the repository root):
    python3 -m eval.peers.hf_vision_peer --model target/bench-models/clip-vit-base-patch32 \
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
torch, loading the model, reading the files. The shared measuring code is eval/peers/measure.py;
each model's path is an ImageEmbedder (prep, embed_all), which Jina-CLIP v1's peer supplies too.

Nomic Embed Vision v1.5 (config.json "architectures" has "NomicVisionModel"): transformers
has no class for it, so it runs the published remote code, vendored under
models/fixtures/nomic/vendor/ and imported as models/fixtures/nomic/make_tiny_nomic.py does
(models.fixtures.nomic.vendor.<copy>, namespace packages; the same transformers-5 shim, get_extended_attention_mask re-added only
where missing; a float n_inner cast to int for GPT2Config). The vendored copy is the one the
checkpoint's auto_map names: "nomic-ai/nomic-bert-2048--..." (the published config's) ->
vendor/hub_nomic_bert_2048 (attention through F.scaled_dot_product_attention); an auto_map
without a hub repo -> vendor/hub_nomic_embed_vision_v1_5 (the vision repo's first-commit copy,
matmul + softmax attention). NOMIC_VENDOR=<vendor subdirectory> overrides the choice. The
weights are model.safetensors, read straight into the parameters with load_state_dict(strict=True)'s
checks (same names, shapes and dtypes; no second copy of the weights), in eval mode, float32.
The text partner (the sibling directory with `text` for `vision` in its name, as Sift finds
it) is loaded as well when present (vendored NomicBertModel, not run), so that both processes
hold both towers as with CLIP / SigLIP. Processor: AutoImageProcessor.from_pretrained(dir)
from its preprocessor_config.json (CLIPImageProcessor; the PIL backend without torchvision).
Embedding (the model card's): F.normalize(model(pixel_values).last_hidden_state[:, 0]),
in place of get_image_features in the timed region; the other timed steps are the same.
"model" is the directory name, "attn_implementation" e.g. "sdpa (vendor/hub_nomic_bert_2048)".

`run(...)` is importable so a driver can call it in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, List

from eval.peers.measure import autocast_bf16, result, set_threads, timed_run

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOMIC_VENDOR = os.path.join(REPO, "models", "fixtures", "nomic", "vendor")
NOMIC_VENDOR_PACKAGE = "models.fixtures.nomic.vendor"  # NOMIC_VENDOR, imported from the repository root
# hub repo of an auto_map entry ("<repo>--<module>.<class>") -> its vendored copy
NOMIC_AUTO_MAP_VENDOR = {"nomic-ai/nomic-bert-2048": "hub_nomic_bert_2048"}
NOMIC_LOCAL_VENDOR = "hub_nomic_embed_vision_v1_5"  # auto_map naming files in the repo itself


def load_images(path: str, items: int) -> tuple[List[bytes], int]:
    names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
    if not names:
        raise ValueError(f"no files in {path}")
    files = []
    for n in names:
        with open(os.path.join(path, n), "rb") as f:
            files.append(f.read())
    return [files[i % len(files)] for i in range(items)], len(files)


def read_config(model: str) -> dict:
    try:
        with open(os.path.join(model, "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def is_nomic_vision(cfg: dict) -> bool:
    return "NomicVisionModel" in (cfg.get("architectures") or [])


def _extended_attention_mask_v4(self, attention_mask, input_shape, device=None, dtype=None):
    # transformers 4.x ModuleUtilsMixin.get_extended_attention_mask, non-decoder, 2-D/3-D mask
    # (the same shim as models/fixtures/nomic/make_tiny_nomic.py)
    import torch
    dtype = self.dtype if dtype is None else dtype
    if attention_mask.dim() == 3:
        ext = attention_mask[:, None, :, :]
    elif attention_mask.dim() == 2:
        ext = attention_mask[:, None, None, :]
    else:
        raise ValueError(f"Wrong shape for attention_mask (shape {attention_mask.shape})")
    ext = ext.to(dtype=dtype)
    return (1.0 - ext) * torch.finfo(dtype).min


def nomic_vendored(pkg: str):
    """(modeling, configuration) modules of the vendored copy vendor/<pkg>/ (namespace package)."""
    modeling = importlib.import_module(f"{NOMIC_VENDOR_PACKAGE}.{pkg}.modeling_hf_nomic_bert")
    configuration = importlib.import_module(f"{NOMIC_VENDOR_PACKAGE}.{pkg}.configuration_hf_nomic_bert")
    if not hasattr(modeling.NomicBertModel, "get_extended_attention_mask"):
        modeling.NomicBertModel.get_extended_attention_mask = _extended_attention_mask_v4
    return modeling, configuration


def nomic_config(configuration, cfg: dict):
    d = {k: v for k, v in cfg.items() if k not in ("architectures", "auto_map", "torch_dtype")}
    if isinstance(d.get("n_inner"), float):  # transformers 5's strict GPT2Config wants an int
        d["n_inner"] = int(d["n_inner"])
    return configuration.NomicBertConfig(**d)


def nomic_vendor_for(cfg: dict) -> str:
    """The vendored copy of the code that the config's auto_map names (NOMIC_VENDOR overrides)."""
    env = os.environ.get("NOMIC_VENDOR")
    if env:
        if not os.path.isdir(os.path.join(NOMIC_VENDOR, env)):
            raise ValueError(f"NOMIC_VENDOR={env}: no such directory under {NOMIC_VENDOR}")
        return env
    ref = (cfg.get("auto_map") or {}).get("AutoModel") or ""
    if "--" not in ref:
        return NOMIC_LOCAL_VENDOR
    repo = ref.split("--", 1)[0]
    if repo not in NOMIC_AUTO_MAP_VENDOR:
        raise ValueError(f"auto_map names {repo!r}; no vendored copy of it "
                         f"(known: {sorted(NOMIC_AUTO_MAP_VENDOR)})")
    return NOMIC_AUTO_MAP_VENDOR[repo]


def read_safetensors_into(path: str, target: dict) -> None:
    """Fill the tensors of `target` (name -> contiguous CPU tensor) from a .safetensors file."""
    import torch
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        if set(header) != set(target):
            raise ValueError(f"{path}: missing {sorted(set(target) - set(header))}, "
                             f"unexpected {sorted(set(header) - set(target))}")
        for k, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            t = target[k]
            start, end = info["data_offsets"]
            if tuple(info["shape"]) != tuple(t.shape) or dtypes.get(info["dtype"]) != t.dtype:
                raise ValueError(f"{path}: {k} is {info['dtype']} {info['shape']}, "
                                 f"the model's {t.dtype} {list(t.shape)}")
            assert t.is_contiguous() and end - start == t.numel() * t.element_size(), k
            f.seek(8 + n + start)
            buf = t.detach().reshape(-1).view(torch.uint8).numpy()
            if f.readinto(memoryview(buf)) != end - start:
                raise ValueError(f"{path}: {k}: short read")


def load_nomic(model: str, cfg: dict = None):
    """A vendored NomicVisionModel / NomicBertModel with model.safetensors, eval, float32.
    Returns (model, vendor subdirectory, attention kind)."""
    import torch
    cfg = read_config(model) if cfg is None else cfg
    pkg = nomic_vendor_for(cfg)
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON line
        modeling, configuration = nomic_vendored(pkg)
        config = nomic_config(configuration, cfg)
        if is_nomic_vision(cfg):
            m = modeling.NomicVisionModel(config)
        else:
            m = modeling.NomicBertModel(config, add_pooling_layer=False)
    m = m.to(torch.float32).eval()
    # load_state_dict(strict=True)'s checks (same names, shapes, dtypes), with each tensor's
    # bytes read from the file straight into the parameter: no second copy of the weights and
    # no memory-mapped file pages in the RSS
    read_safetensors_into(os.path.join(model, "model.safetensors"), m.state_dict())
    attn = "sdpa" if getattr(modeling, "scaled_dot_product_attention", None) is not None else "eager"
    return m, pkg, attn


def nomic_text_partner(model: str):
    """The text checkpoint beside a Nomic vision one (`text` for `vision` in the directory
    name, the rule Sift follows), or None."""
    d = os.path.normpath(os.path.abspath(model))
    name = os.path.basename(d)
    if "vision" not in name:
        return None
    sib = os.path.join(os.path.dirname(d), name.replace("vision", "text"))
    return sib if os.path.isfile(os.path.join(sib, "config.json")) else None


def nomic_image_embed(m, pixel_values):
    """The model card's image embedding (call under torch.no_grad())."""
    import torch
    return torch.nn.functional.normalize(m(pixel_values=pixel_values).last_hidden_state[:, 0], p=2, dim=1)


def image_features(m, pixel_values):
    """CLIP's / SigLIP's image vectors: get_image_features (in transformers 5 an output whose
    pooler_output they are), L2-normalised in float32."""
    import torch
    f = m.get_image_features(pixel_values=pixel_values)
    if not isinstance(f, torch.Tensor):  # transformers 5: BaseModelOutputWithPooling
        f = f.pooler_output
    return torch.nn.functional.normalize(f.float(), dim=-1)


@dataclass
class ImageEmbedder:
    """One model's image path, as the timed regions run it."""
    model: str                     # the "model" key
    processor: str                 # the "processor" key
    attn_implementation: str
    prep: Callable                 # image bytes of one batch -> pixel_values (decode + processor)
    embed_all: Callable            # image bytes -> [N, dim] L2-normalised embeddings
    held: object = None            # kept alive while timing (Nomic's text tower)


def transformers_embedder(model: str, cfg: dict, batch_size: int) -> ImageEmbedder:
    """CLIP / SigLIP through AutoModel.get_image_features, or Nomic vision (vendored code)."""
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel

    nomic = is_nomic_vision(cfg)
    proc = AutoImageProcessor.from_pretrained(model)
    held = None
    if nomic:
        if not type(proc).__name__.startswith("CLIPImageProcessor"):
            raise ValueError(f"{model}: expected a CLIPImageProcessor, got {type(proc).__name__}")
        m, pkg, attn = load_nomic(model, cfg)
        attn_implementation = f"{attn} (vendor/{pkg})"
        text_dir = nomic_text_partner(model)
        held = load_nomic(text_dir)[0] if text_dir else None  # held, not run (see above)
        model_name = os.path.basename(os.path.normpath(model))
    else:
        m = AutoModel.from_pretrained(model, dtype=torch.float32).eval()
        attn_implementation = m.config._attn_implementation
        model_name = model

    def prep(chunk):
        imgs = [Image.open(io.BytesIO(b)).convert("RGB") for b in chunk]
        return proc(images=imgs, return_tensors="pt")["pixel_values"]

    def embed_all(xs):
        out = []
        with torch.no_grad():
            for i in range(0, len(xs), batch_size):
                px = prep(xs[i:i + batch_size])
                if nomic:
                    out.append(nomic_image_embed(m, px))
                    continue
                out.append(image_features(m, px))
        return torch.cat(out)

    return ImageEmbedder(model_name, type(proc).__name__, attn_implementation, prep, embed_all, held)


def run(model: str, images: str, items: int = 128, batch_size: int = 32, threads: int = 1,
        warmup: int = 32, autocast: bool = False) -> dict:
    import transformers

    set_threads(threads)
    if items < 1:
        raise ValueError("--items must be >= 1")
    data, n_files = load_images(images, max(items, warmup))
    timed, warm = data[:items], data[:max(warmup, 0)]

    cfg = read_config(model)
    if "JinaCLIPModel" in (cfg.get("architectures") or []):
        # Jina-CLIP v1: the published encode_image (eval/peers/jina_clip_peer.py)
        from eval.peers.jina_clip_peer import image_embedder
        e = image_embedder(model, batch_size)
    else:
        e = transformers_embedder(model, cfg, batch_size)

    embed_all = autocast_bf16(e.embed_all, autocast)
    if warm:
        embed_all(warm)
    t0 = time.perf_counter()
    pixels = [e.prep(timed[i:i + batch_size]) for i in range(0, items, batch_size)]
    prep_seconds = time.perf_counter() - t0
    input_size = list(pixels[0].shape[-2:])
    del pixels

    emb, seconds = timed_run(embed_all, timed, [])
    out = result("transformers", transformers.__version__, e.model, items, batch_size, threads,
                 warmup, seconds)
    out.update({
        "image_files": n_files,
        "input_size": input_size,
        "dim": int(emb.shape[1]),
        "processor": e.processor,
        "attn_implementation": e.attn_implementation,
        "prep_seconds": round(prep_seconds, 6),
        "prep_items_per_s": round(items / prep_seconds, 3),
        "dtype": "bf16-autocast" if autocast else "float32",
    })
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local CLIP / SigLIP / Nomic Embed Vision model directory")
    ap.add_argument("--images", required=True, help="directory of image files")
    ap.add_argument("--items", type=int, default=128, help="images per timed region")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--warmup", type=int, default=32, help="images in the untimed warm-up")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--autocast-bf16", action="store_true",
                    help="run the timed and warm-up passes under torch.autocast(\"cpu\", bfloat16)")
    args = ap.parse_args(argv)
    res = run(args.model, args.images, args.items, args.batch_size, args.threads, args.warmup,
              args.autocast_bf16)
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
