#!/usr/bin/env python3
"""Full-size random-weight CLIP / SigLIP (and GME / Qwen2-VL, Nomic Embed Vision) checkpoints and
synthetic images for the image embedding benchmarks (benches/vision_vs_transformers.py). Nothing
is downloaded. From the repository root:

    python3 -m benches.make_random_vision [--models clip-vit-base-patch32,siglip-base-patch16-224]
        [--out target/bench-models] [--images target/bench-images] [--n-images 128] [--force]
    python3 -m benches.make_random_vision --models gme-qwen2-vl-2b --n-images 0
    python3 -m benches.make_random_vision --models nomic-embed-vision-v1.5 --n-images 0

Checkpoints (--models, comma-separated, or "all"; default the two base ones), each a complete
Hugging Face layout under <out>/<name>/: config.json, model.safetensors (float32, via
save_pretrained), preprocessor_config.json (the family's PIL image processor at the real
checkpoint's input size), processor_config.json, and tokenizer.json + tokenizer_config.json
copied from the tiny fixtures in models/fixtures/vision/ (only the image tower is benchmarked;
the tiny vocabularies fit inside the full-size text embeddings):

  clip-vit-base-patch32      CLIPConfig defaults (ViT-B/32, 224 px, text 512 wide, projection 512)
  siglip-base-patch16-224    SiglipConfig defaults (ViT-B/16, 224 px, text 768 wide, 64 positions)
  clip-vit-large-patch14     ViT-L/14: vision 1024 wide, 24 layers, 16 heads, MLP 4096, 224 px;
                             text 768 wide, 12 layers, 12 heads, MLP 3072; projection 768
  siglip-so400m-patch14-384  So400m/14 at 384 px: vision and text 1152 wide, MLP 4304,
                             27 layers, 16 heads; text 64 positions

  gme-qwen2-vl-2b            gme-Qwen2-VL-2B-Instruct / Qwen2-VL-2B: text 1536 wide, 28 layers,
                             12 heads, 2 KV heads, MLP 8960, rope_theta 1e6, mrope_section
                             [16, 24, 24], vocab 151936, tied embeddings; vision 32 blocks,
                             1280 wide, 16 heads, MLP x4, quick_gelu, patch 14, merge 2,
                             temporal 2, merger to 1536; GME's min_image_tokens 256,
                             max_image_tokens 1280, max_length 1800. Only built when named
                             ("all" is the four CLIP/SigLIP ones): about 4.4 GB.

  bge-vl-large               BGE-VL-large: clip-vit-large-patch14's files (weights hard-linked)
                             with BGE-VL's auto_map in config.json. Only built when named.
  jina-clip-v1               Jina-CLIP v1: JinaBERT 768 wide, 12 layers, 12 heads, MLP 3072, vocab
                             30528; EVA02-B/16 at 224 (768 wide, 12 layers, head 64, MLP 2048);
                             built by the vendored code of models/fixtures/jina_clip/. Only built
                             when named.
  jina-clip-v2               Jina-CLIP v2: XLM-RoBERTa large (1024 wide, 24 layers, 16 heads, MLP
                             4096, vocab 250002, rotary, its LoRA adapters) and EVA02-L/14 at 512
                             (1024 wide, 24 layers, head 64); built by the fixture code of
                             models/fixtures/jina_clip_v2/ (which needs the text tower's published
                             files fetched, see its README). Only built when named.
  nomic-embed-vision-v1.5    Nomic Embed Vision v1.5 (EVA02-B/16 style, 224 px, patch 16: n_embd
                             768, 12 layers, 12 heads, n_inner 2048, MAP pooling head) plus its
                             text partner nomic-embed-text-v1.5 (NomicBERT: n_embd 768, 12
                             layers, 12 heads, n_inner 3072, vocab 30528). Only built when named.

The GME checkpoint is written the way the published one is: the flat transformers-4.45
config.json (text keys at top level, nested vision_config), bfloat16 safetensors with the
legacy names (visual.*, model.*; no lm_head) sharded into files of at most 2 GB
(model-0000i-of-0000n.safetensors + model.safetensors.index.json), preprocessor_config.json
as in Qwen2-VL-2B-Instruct (Qwen2VLImageProcessor, min_pixels 3136, max_pixels 12845056; GME
itself overrides these with config.json's min/max_image_tokens x 28 x 28), and tokenizer.json +
tokenizer_config.json copied from models/fixtures/gme/tiny-gme/ (config.json's image_token_id,
vision_start/end ids, bos/eos are that tokenizer's). Its tensors are drawn one by one straight in
bfloat16 (norm weights 1 + N(0, 0.02), biases N(0, 0.02), embeddings N(0, 0.02), matrices
N(0, 1/sqrt(fan_in))) from a seeded generator and written shard by shard, so building it needs
only about 3 GB of memory; names and shapes are checked against transformers'
Qwen2VLForConditionalGeneration built on the meta device.

The Nomic checkpoints are built with the published modelling code vendored under
models/fixtures/nomic/vendor/ (NomicVisionModel / NomicBertModel of hub_nomic_bert_2048/, the
file both real configs' auto_map names; imported with eval.peers.hf_vision_peer's loader,
the one the benchmark peer uses, which applies make_tiny_nomic.py's transformers-5 shim and
float-n_inner cast). <out>/nomic-embed-vision-v1.5/ gets the published config.json and
preprocessor_config.json (224 x 224) copied byte for byte from
models/fixtures/nomic/vendor/hub_nomic_embed_vision_v1_5/ (n_inner stays the float 2048.0) and
model.safetensors (float32, the state dict's names: the tiny fixture's 51 names with 12 layers);
<out>/nomic-embed-text-v1.5/ (the sibling Sift pairs it with: `text` for `vision`) gets the tiny
fixture's text config.json with the full sizes above, model.safetensors (float32) and the tiny
fixture's tokenizer and sentence-transformers files (tokenizer.json, tokenizer_config.json,
vocab.txt, special_tokens_map.json, modules.json, sentence_bert_config.json,
1_Pooling/config.json; its 220 ids fit the 30528-row table). Only the image tower is
benchmarked. Weights: each model's own initialiser (Linear N(0, 0.02), zero biases, LayerNorm
1 / 0, cls_token and latent 0, pos_embed N(0, 0.02)) after torch.manual_seed(--seed); the
written files are checked against the tiny fixtures' tensor names, reloaded with strict=True
and run once (one random 224 x 224 image; a short token sequence).

Weights of the CLIP / SigLIP checkpoints come from each model's own initialiser after
torch.manual_seed(--seed), so the output is deterministic for a given torch/transformers version. Special-token ids in the text configs
are set to the copied tokenizer's (CLIP: eos_token_id 2, i.e. the openai checkpoints'
legacy argmax pooling; SigLIP: pad = eos = "</s>" = 1).

Images (--images, --n-images): a deterministic mix meant to look like StackExchange figures:
about 55 % PNG screenshots/diagrams near 800x600 (text-like bars, boxes, lines, gradient
header; half with an embedded noisy photo panel; some RGBA or palette PNGs), 30 % JPEG photos near 1024x768 (smooth gradients, blobs, noise),
15 % small or odd-aspect images (icons, wide banners, tall strips, grayscale). Every image has
gradients, shapes and noise, so decoders and encoders do real work.

An existing checkpoint directory / image set is kept unless --force.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "models" / "fixtures" / "vision"
GME_FIXTURES = REPO / "models" / "fixtures" / "gme"
NOMIC_FIXTURES = REPO / "models" / "fixtures" / "nomic"
NOMIC_TEXT_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                    "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"]

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# name -> (family, tokenizer fixture, image size, config overrides {"text": {...}, "vision": {...}, "top": {...}})
MODELS = {
    "clip-vit-base-patch32": ("clip", "tiny-clip-quickgelu", 224, {"text": {}, "vision": {}, "top": {}}),
    "siglip-base-patch16-224": ("siglip", "tiny-siglip", 224, {"text": {}, "vision": {}, "top": {}}),
    "clip-vit-large-patch14": ("clip", "tiny-clip-quickgelu", 224, {
        "vision": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                       num_attention_heads=16, patch_size=14, image_size=224, projection_dim=768),
        "text": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                     num_attention_heads=12, projection_dim=768),
        "top": dict(projection_dim=768),
    }),
    "siglip-so400m-patch14-384": ("siglip", "tiny-siglip", 384, {
        "vision": dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                       num_attention_heads=16, patch_size=14, image_size=384),
        "text": dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                     num_attention_heads=16, max_position_embeddings=64),
        "top": {},
    }),
    "gme-qwen2-vl-2b": ("gme", "tiny-gme", None, {
        "text": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                     num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
                     mrope_section=[16, 24, 24], max_position_embeddings=32768),
        "vision": dict(depth=32, embed_dim=1280, hidden_size=1536, hidden_act="quick_gelu", mlp_ratio=4,
                       num_heads=16, in_chans=3, patch_size=14, spatial_merge_size=2, spatial_patch_size=14,
                       temporal_patch_size=2),
        "top": dict(vocab_size=151936, min_image_tokens=256, max_image_tokens=1280, max_length=1800),
    }),
    # vision: the published config as is (vendor/hub_nomic_embed_vision_v1_5/config.json);
    # text: the tiny fixture's config with these sizes
    "nomic-embed-vision-v1.5": ("nomic", "tiny-nomic-embed-text-v1.5", 224, {
        "text": dict(n_embd=768, n_head=12, n_layer=12, n_inner=3072, vocab_size=30528),
        "vision": {}, "top": {},
    }),
    # CLIP ViT-L/14's config (clip-vit-large-patch14 above) with BGE-VL's auto_map
    "bge-vl-large": ("bge-vl", "tiny-clip-quickgelu", 224, {}),
    # jina-clip-v1's settings (models/fixtures/jina_clip/README.md), full sizes
    "jina-clip-v1": ("jina", None, 224, {
        "text": dict(hidden_size=768, num_attention_heads=12, num_hidden_layers=12,
                     intermediate_size=3072, vocab_size=30528),
        "vision": dict(embed_dim=768, width=768, head_width=64, layers=12, image_size=224,
                       patch_size=16),
        "top": dict(projection_dim=768),
    }),
    # jina-clip-v2: XLMRobertaFlashConfig's (XLM-R large) sizes; EVA02-L/14 at 512 px
    "jina-clip-v2": ("jina", None, 512, {
        "text": dict(hidden_size=1024, num_attention_heads=16, num_hidden_layers=24,
                     intermediate_size=4096, vocab_size=250002),
        "vision": dict(embed_dim=1024, width=1024, head_width=64, layers=24, image_size=512,
                       patch_size=14),
        "top": dict(projection_dim=1024, matryoshka_dimensions=[32, 64, 128, 256, 512, 768, 1024]),
    }),
}
DEFAULT_MODELS = ["clip-vit-base-patch32", "siglip-base-patch16-224"]
ALL_MODELS = [m for m, spec in MODELS.items() if spec[0] in ("clip", "siglip")]  # what --models all means
GME_MAX_SHARD_BYTES = 2 * 10**9   # "2GB" as transformers' max_shard_size counts it


def _gme_helpers():
    """models/fixtures/gme/make_gme_fixtures.py, for its config / name-mapping / init helpers."""
    from models.fixtures.gme import make_gme_fixtures
    return make_gme_fixtures


def make_gme_model(name: str, out: Path, seed: int, force: bool, spec=None,
                   max_shard_bytes: int = GME_MAX_SHARD_BYTES) -> None:
    """A random bfloat16 GME / Qwen2-VL checkpoint in the published (legacy, sharded) layout."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoConfig, Qwen2VLForConditionalGeneration

    family, tok_fixture, _, ov = spec or MODELS[name]
    d = out / name
    index = d / "model.safetensors.index.json"
    if index.is_file() and (d / "config.json").is_file() and not force:
        print(f"{d}: exists, kept (--force to rebuild)", file=sys.stderr)
        return
    t0 = time.time()
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    gme = _gme_helpers()
    tok_dir = GME_FIXTURES / tok_fixture
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tok_dir / f, d / f)
    tok = json.loads((tok_dir / "tokenizer.json").read_text())
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    top = dict(ov["top"])
    assert max(ids.values()) < top["vocab_size"]
    cfg = gme.legacy_config(ov["text"], ov["vision"], top["vocab_size"], ids, top["min_image_tokens"],
                            top["max_image_tokens"], top["max_length"], "bfloat16")
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (d / "preprocessor_config.json").write_text(
        json.dumps(gme.preprocessor_config(56 * 56, 28 * 28 * 16384), indent=2) + "\n")

    # names and shapes from transformers' own model, built without memory on the meta device
    config = AutoConfig.from_pretrained(d)
    with torch.device("meta"):
        meta = Qwen2VLForConditionalGeneration(config)
    tensors = [(gme.legacy_name(n), tuple(p.shape)) for n, p in meta.named_parameters()
               if gme.legacy_name(n) is not None]
    del meta
    tensors.sort(key=lambda t: (not t[0].startswith("visual."), t[0]))
    nbytes = [2 * math.prod(shape) for _, shape in tensors]

    # plan the shards (in order, each <= max_shard_bytes unless one tensor alone is bigger)
    shards, cur, cur_bytes = [], [], 0
    for (tname, shape), nb in zip(tensors, nbytes):
        if cur and cur_bytes + nb > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append((tname, shape))
        cur_bytes += nb
    shards.append(cur)
    n = len(shards)
    g = torch.Generator().manual_seed(seed)
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        sd = {}
        for tname, shape in shard:
            kind, centre, std = gme.init_kind(tname, shape)
            if kind != "matrix":
                std = 0.02
            t = torch.randn(shape, generator=g, dtype=torch.float32)
            t.mul_(std).add_(centre)
            sd[tname] = t.to(torch.bfloat16)
            del t
            weight_map[tname] = fname
        save_file(sd, str(d / fname), metadata={"format": "pt"})
        del sd
    total = sum(nbytes)
    index.write_text(json.dumps({"metadata": {"total_size": total},
                                 "weight_map": dict(sorted(weight_map.items()))}, indent=2) + "\n")

    # the files hold exactly the expected names / shapes / dtype
    seen = {}
    for fname in sorted(set(weight_map.values())):
        assert (d / fname).stat().st_size <= max(max_shard_bytes, max(nbytes)) + 10**6, fname
        with safe_open(str(d / fname), "pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                seen[k] = (tuple(sl.get_shape()), sl.get_dtype())
    assert seen == {k: (s, "BF16") for k, s in tensors}, "shard contents differ from the model's parameters"
    nv = sum(math.prod(s) for k, s in tensors if k.startswith("visual."))
    size = sum(p.stat().st_size for p in d.iterdir())
    print(f"{d}: {sum(math.prod(s) for _, s in tensors) / 1e9:.2f} B parameters ({nv / 1e6:.0f} M vision), "
          f"{n} shards, {size / 2**30:.2f} GiB, {time.time() - t0:.0f} s", file=sys.stderr)


def _peer():
    """eval/peers/hf_vision_peer.py: its loader of the vendored Nomic code (the benchmark's)."""
    from eval.peers import hf_vision_peer
    return hf_vision_peer


def _layer_pattern(names):
    """Tensor names with layer indices generalised: layers.3.x -> layers.{i}.x."""
    import re
    return {re.sub(r"(layers)\.\d+\.", r"\1.{i}.", n) for n in names}


def make_nomic_model(name: str, out: Path, seed: int, force: bool, spec=None) -> None:
    """A full-size random Nomic Embed Vision v1.5 checkpoint and its text partner (float32)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    family, tok_fixture, size, ov = spec or MODELS[name]
    peer = _peer()
    vendor = NOMIC_FIXTURES / "vendor" / "hub_nomic_embed_vision_v1_5"
    tiny_vision = NOMIC_FIXTURES / "tiny-nomic-embed-vision-v1.5"
    tiny_text = NOMIC_FIXTURES / tok_fixture
    dv = out / name
    dt = out / name.replace("vision", "text")
    assert dt != dv and dt.name == "nomic-embed-text-v1.5", dt

    def build(d, write_files, make, tiny, what):
        if (d / "model.safetensors").is_file() and (d / "config.json").is_file() and not force:
            print(f"{d}: exists, kept (--force to rebuild)", file=sys.stderr)
            return
        t0 = time.time()
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        write_files(d)
        cfg = json.loads((d / "config.json").read_text())
        modeling, configuration = peer.nomic_vendored(peer.nomic_vendor_for(cfg))
        torch.manual_seed(seed)
        model = make(modeling, peer.nomic_config(configuration, cfg)).to(torch.float32).eval()
        sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
        # the tiny fixture's tensor names (its 2 layers generalised), all float32
        with safe_open(str(tiny / "model.safetensors"), "pt") as f:
            tiny_names = list(f.keys())
        with safe_open(str(d / "model.safetensors"), "pt") as f:
            names = list(f.keys())
            assert all(f.get_slice(k).get_dtype() == "F32" for k in names)
        assert _layer_pattern(names) == _layer_pattern(tiny_names), \
            sorted(_layer_pattern(names) ^ _layer_pattern(tiny_names))
        tiny_layers = json.loads((tiny / "config.json").read_text())["n_layer"]
        per_layer = sum("layers.{i}." in n for n in _layer_pattern(tiny_names))
        assert len(names) == len(tiny_names) + (cfg["n_layer"] - tiny_layers) * per_layer, len(names)
        del model, sd
        n = sum(math.prod(s) for s in _shapes(d).values())
        print(f"{d}: {n / 1e6:.1f} M parameters ({what}), {len(names)} tensors, "
              f"{(d / 'model.safetensors').stat().st_size / 2**20:.0f} MiB, {time.time() - t0:.0f} s",
              file=sys.stderr)

    def vision_files(d):
        for f in ("config.json", "preprocessor_config.json"):  # published, byte for byte
            shutil.copyfile(vendor / f, d / f)

    def text_files(d):
        cfg = json.loads((tiny_text / "config.json").read_text())
        assert set(ov["text"]) <= set(cfg)
        cfg.update(ov["text"])
        (d / "config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2) + "\n")
        for f in NOMIC_TEXT_FILES:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tiny_text / f, d / f)
        # the copied tokenizer's ids index the full-size embedding table
        tok = json.loads((d / "tokenizer.json").read_text())
        ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok.get("added_tokens", [])]
        assert max(ids) < cfg["vocab_size"], (max(ids), cfg["vocab_size"])

    build(dv, vision_files, lambda mod, c: mod.NomicVisionModel(c), tiny_vision, "vision tower")
    build(dt, text_files, lambda mod, c: mod.NomicBertModel(c, add_pooling_layer=False), tiny_text,
          "text tower, Sift's text partner; not benchmarked")

    # the files load (strict) through the peer's loader and run
    cfg = json.loads((dv / "config.json").read_text())
    assert cfg["img_size"] == size and cfg["n_inner"] == 2048.0 and isinstance(cfg["n_inner"], float)
    shapes = _shapes(dv)
    assert shapes["embeddings.pos_embed"] == (1, 1 + (size // cfg["patch_size"]) ** 2, cfg["n_embd"])
    assert shapes["layers.0.mlp.fc11.weight"] == (2048, cfg["n_embd"])
    with torch.no_grad():
        m, _, _ = peer.load_nomic(str(dv))
        g = torch.Generator().manual_seed(seed)
        e = peer.nomic_image_embed(m, torch.randn(1, 3, size, size, generator=g))
        assert e.shape == (1, cfg["n_embd"]) and torch.isfinite(e).all(), e.shape
        del m
        t, _, _ = peer.load_nomic(str(dt))
        h = t(input_ids=torch.tensor([[101, 1000, 2000, 102]]),
              attention_mask=torch.ones(1, 4, dtype=torch.long))[0]
        assert h.shape == (1, 4, ov["text"]["n_embd"]) and torch.isfinite(h).all(), h.shape
        del t


def make_bge_vl_model(name: str, out: Path, seed: int, force: bool) -> None:
    """BGE-VL-large: the clip-vit-large-patch14 checkpoint (built if absent; its weights
    hard-linked, not copied) with config.json's auto_map naming BGE-VL's remote code, as the
    published config does; Sift then treats it as BGE-VL (joint input, transparency dropped)."""
    make_model("clip-vit-large-patch14", out, seed, False)
    src, d = out / "clip-vit-large-patch14", out / name
    if (d / "config.json").is_file() and not force:
        print(f"{d}: exists, kept (--force to rebuild)", file=sys.stderr)
        return
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for f in src.iterdir():
        if f.name == "model.safetensors":
            os.link(f, d / f.name)
        elif f.name != "config.json":
            shutil.copyfile(f, d / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_MMRet_CLIP.CLIPModel"}
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"{d}: clip-vit-large-patch14's weights with BGE-VL's auto_map", file=sys.stderr)


def make_jina_model(name: str, out: Path, seed: int, force: bool) -> None:
    """A full-size random Jina-CLIP v1 checkpoint (float32), built by the fixture's vendored
    jina-clip-implementation code (models/fixtures/jina_clip/make_tiny_jina_clip.py's
    config_dict / build_model, the real flags with these sizes) with the model's own
    initialisers after torch.manual_seed(seed); tokenizer files from the tiny fixture (its ids
    fit the 30528-row table)."""
    import importlib
    import torch
    from safetensors.torch import save_file

    d = out / name
    if (d / "model.safetensors").is_file() and (d / "config.json").is_file() and not force:
        print(f"{d}: exists, kept (--force to rebuild)", file=sys.stderr)
        return
    t0 = time.time()
    fx = importlib.import_module("models.fixtures.jina_clip.make_tiny_jina_clip"
                                 if name == "jina-clip-v1" else
                                 "models.fixtures.jina_clip_v2.make_tiny_jina_clip_v2")
    _, _, size, ov = MODELS[name]
    tiny = fx.CKPT
    tok = json.loads((tiny / "tokenizer.json").read_text())
    cfg = fx.config_dict(len(tok["model"]["vocab"]))
    cfg.update(ov["top"])
    cfg["text_config"]["embed_dim"] = ov["text"]["hidden_size"]
    cfg["text_config"]["hf_model_config_kwargs"].update(ov["text"])
    cfg["vision_config"].update(ov["vision"])
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    pre = fx.preprocessor_config()
    pre["size"] = size
    (d / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny / f).is_file():
            shutil.copyfile(tiny / f, d / f)
    torch.manual_seed(seed)
    model = fx.build_model(cfg)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    n = sum(v.numel() for v in sd.values())
    with torch.no_grad():
        e = model.get_image_features(torch.randn(1, 3, size, size))
        assert e.shape == (1, ov["top"]["projection_dim"]) and torch.isfinite(e).all(), e.shape
    print(f"{d}: {n / 1e6:.1f} M parameters, {len(sd)} tensors, "
          f"{(d / 'model.safetensors').stat().st_size / 2**20:.0f} MiB, {time.time() - t0:.0f} s",
          file=sys.stderr)


def _shapes(d: Path) -> dict:
    from safetensors import safe_open
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def make_model(name: str, out: Path, seed: int, force: bool) -> None:
    family, tok_fixture, size, ov = MODELS[name]
    if family == "jina":  # before transformers 5's imports: jina-clip-v2's code needs 4.44
        make_jina_model(name, out, seed, force)
        return
    import torch
    from transformers import (CLIPConfig, CLIPImageProcessorPil, CLIPModel, SiglipConfig,
                              SiglipImageProcessorPil, SiglipModel)

    if family == "gme":
        make_gme_model(name, out, seed, force)
        return
    if family == "nomic":
        make_nomic_model(name, out, seed, force)
        return
    if family == "bge-vl":
        make_bge_vl_model(name, out, seed, force)
        return
    d = out / name
    if (d / "model.safetensors").is_file() and (d / "config.json").is_file() and not force:
        print(f"{d}: exists, kept (--force to rebuild)", file=sys.stderr)
        return
    t0 = time.time()
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if family == "clip":
        text = dict(bos_token_id=0, eos_token_id=2, pad_token_id=1, **ov["text"])
        cfg = CLIPConfig(text_config=text, vision_config=dict(ov["vision"]), **ov["top"])
        model = CLIPModel(cfg)
        proc = CLIPImageProcessorPil(size={"shortest_edge": size},
                                     crop_size={"height": size, "width": size},
                                     image_mean=CLIP_MEAN, image_std=CLIP_STD)
        proc_class = "CLIPProcessor"
    else:
        text = dict(bos_token_id=None, eos_token_id=1, pad_token_id=1, **ov["text"])
        cfg = SiglipConfig(text_config=text, vision_config=dict(ov["vision"]), **ov["top"])
        model = SiglipModel(cfg)
        proc = SiglipImageProcessorPil(size={"height": size, "width": size},
                                       image_mean=[0.5] * 3, image_std=[0.5] * 3)
        proc_class = "SiglipProcessor"
    model = model.to(torch.float32).eval()
    model.save_pretrained(d, safe_serialization=True)
    proc.save_pretrained(d)
    (d / "processor_config.json").write_text(json.dumps({"processor_class": proc_class}, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(FIXTURES / tok_fixture / f, d / f)

    # The copied tokenizer's ids must index the text embedding table.
    tok = json.loads((d / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
    ids += [a["id"] for a in tok.get("added_tokens", [])]
    assert max(ids) < cfg.text_config.vocab_size, (max(ids), cfg.text_config.vocab_size)
    n = sum(p.numel() for p in model.parameters())
    nv = sum(p.numel() for p in model.vision_model.parameters())
    print(f"{d}: {n / 1e6:.1f} M parameters ({nv / 1e6:.1f} M vision), {time.time() - t0:.0f} s",
          file=sys.stderr)


# ------------------------------------------------------------------------------------------------
# Images
# ------------------------------------------------------------------------------------------------

def _gradient(rng, w, h, c=3):
    """Linear gradient between two random colours at a random angle, float32 (h, w, c)."""
    a = rng.uniform(0, 2 * math.pi)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    t = (x * math.cos(a) + y * math.sin(a))
    t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
    c0, c1 = rng.uniform(0, 255, c), rng.uniform(0, 255, c)
    return c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]


def _screenshot(rng, w, h):
    from PIL import Image, ImageDraw
    base = np.full((h, w, 3), rng.uniform(225, 255), np.float32)
    # a header bar with a gradient, like a window title or a chart banner
    hb = max(8, h // 12)
    base[:hb] = _gradient(rng, w, hb)
    img = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    d = ImageDraw.Draw(img)
    kind = rng.integers(3)
    if kind == 0:  # text-like lines
        y = hb + 10
        while y < h - 12:
            x = int(rng.integers(8, 40))
            while x < w - 20:
                wl = int(rng.integers(10, 70))
                col = tuple(int(v) for v in rng.integers(0, 90, 3))
                d.rectangle([x, y, min(x + wl, w - 5), y + 7], fill=col)
                x += wl + int(rng.integers(4, 10))
            y += int(rng.integers(14, 22))
    elif kind == 1:  # box-and-arrow diagram
        boxes = []
        for _ in range(int(rng.integers(4, 10))):
            bw, bh = int(rng.integers(60, 180)), int(rng.integers(30, 90))
            x0, y0 = int(rng.integers(0, max(1, w - bw))), int(rng.integers(hb, max(hb + 1, h - bh)))
            col = tuple(int(v) for v in rng.integers(120, 255, 3))
            d.rounded_rectangle([x0, y0, x0 + bw, y0 + bh], radius=8, fill=col, outline=(0, 0, 0), width=2)
            boxes.append((x0 + bw // 2, y0 + bh // 2))
        for (a, b) in zip(boxes, boxes[1:]):
            d.line([a, b], fill=(30, 30, 30), width=2)
    else:  # plot: axes, grid, curves
        d.line([(40, h - 30), (w - 10, h - 30)], fill=(0, 0, 0), width=2)
        d.line([(40, hb + 5), (40, h - 30)], fill=(0, 0, 0), width=2)
        for gx in range(40, w, 60):
            d.line([(gx, hb + 5), (gx, h - 30)], fill=(220, 220, 220))
        for _ in range(int(rng.integers(1, 4))):
            f, p, amp = rng.uniform(0.005, 0.03), rng.uniform(0, 6), rng.uniform(0.1, 0.4) * h
            pts = [(x, (h / 2) + amp * math.sin(f * x + p)) for x in range(41, w - 10, 3)]
            d.line(pts, fill=tuple(int(v) for v in rng.integers(0, 200, 3)), width=2)
    arr = np.asarray(img).copy()
    if rng.uniform() < 0.5:  # an embedded photo/figure panel (noisy, hard to compress)
        pw, ph = int(w * rng.uniform(0.25, 0.5)), int(h * rng.uniform(0.25, 0.5))
        x0, y0 = int(rng.integers(0, w - pw)), int(rng.integers(hb, max(hb + 1, h - ph)))
        arr[y0:y0 + ph, x0:x0 + pw] = _photo(rng, pw, ph)[: h - y0]
    return arr


def _photo(rng, w, h):
    from PIL import Image, ImageFilter
    arr = _gradient(rng, w, h)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    for _ in range(int(rng.integers(4, 10))):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.05, 0.35) * min(w, h)
        m = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None]
        arr = arr * (1 - m) + rng.uniform(0, 255, 3)[None, None, :] * m
    arr += rng.normal(0, 8.0, arr.shape).astype(np.float32)  # sensor noise / texture
    img = Image.fromarray(arr.clip(0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.8))
    return np.asarray(img)


def make_images(out: Path, n: int, seed: int, force: bool) -> None:
    from PIL import Image
    if out.is_dir() and any(out.iterdir()) and not force:
        print(f"{out}: exists, kept (--force to rebuild)", file=sys.stderr)
        return
    if out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    counts = {"png": 0, "jpg": 0}
    total = 0
    for i in range(n):
        u = (i * 0.6180339887) % 1.0  # low-discrepancy spread of the three kinds over the set
        if u < 0.55:  # screenshot / diagram PNG near 800x600
            w, h = int(rng.integers(700, 960)), int(rng.integers(500, 720))
            arr = _screenshot(rng, w, h)
            img = Image.fromarray(arr)
            mode = rng.uniform()
            if mode < 0.15:
                img = img.convert("RGBA")
                a = np.asarray(img).copy()
                a[..., 3] = np.where(a[..., 0] > 240, 0, 255)  # transparent background
                img = Image.fromarray(a, "RGBA")
            elif mode < 0.30:
                img = img.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
            name, fmt = f"img{i:03d}_screen_{w}x{h}.png", "PNG"
        elif u < 0.85:  # photo JPEG near 1024x768
            w, h = int(rng.integers(900, 1280)), int(rng.integers(640, 960))
            img = Image.fromarray(_photo(rng, w, h))
            name, fmt = f"img{i:03d}_photo_{w}x{h}.jpg", "JPEG"
        else:  # small / odd aspect
            kind = int(rng.integers(4))
            w, h = [(int(rng.integers(48, 160)), int(rng.integers(48, 160))),  # icon
                    (int(rng.integers(900, 1400)), int(rng.integers(90, 200))),  # wide banner
                    (int(rng.integers(150, 300)), int(rng.integers(900, 1400))),  # tall strip
                    (int(rng.integers(300, 500)), int(rng.integers(250, 400)))][kind]
            arr = _photo(rng, w, h) if kind == 3 else _screenshot(rng, w, h)
            img = Image.fromarray(arr)
            if kind == 3:
                img = img.convert("L")  # grayscale scan
            jpg = kind == 3 or rng.uniform() < 0.3
            name = f"img{i:03d}_odd_{w}x{h}." + ("jpg" if jpg else "png")
            fmt = "JPEG" if jpg else "PNG"
        p = out / name
        if fmt == "JPEG":
            img.save(p, "JPEG", quality=90)
        else:
            img.save(p, "PNG")
        counts["jpg" if fmt == "JPEG" else "png"] += 1
        total += p.stat().st_size
    print(f"{out}: {n} images ({counts['png']} PNG, {counts['jpg']} JPEG), "
          f"{total / 2**20:.1f} MiB", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help=f"comma-separated subset of {', '.join(MODELS)}, 'all' (the CLIP/SigLIP "
                         f"ones: {', '.join(ALL_MODELS)}), or 'none'")
    ap.add_argument("--out", default=str(REPO / "target" / "bench-models"))
    ap.add_argument("--images", default=str(REPO / "target" / "bench-images"))
    ap.add_argument("--n-images", type=int, default=128, help="0: no images")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rebuild existing outputs")
    args = ap.parse_args(argv)
    names = (list(ALL_MODELS) if args.models == "all" else
             [] if args.models == "none" else [m for m in args.models.split(",") if m])
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    if args.n_images > 0:
        make_images(Path(args.images), args.n_images, args.seed, args.force)
    for m in names:
        make_model(m, Path(args.out), args.seed, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
