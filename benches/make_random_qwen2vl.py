#!/usr/bin/env python3
"""A full-size Qwen2-VL-2B-Instruct checkpoint with random bf16 weights, for measuring
decoding speed without the real weights.

    python3 benches/make_random_qwen2vl.py --out target/random-qwen2-vl-2b

Writes config.json (Qwen2-VL-2B: hidden 1536, 28 layers, 12 heads over 2 key/value heads,
MLP 8960, vocab 151936, tied embeddings; the vision tower: depth 32, width 1280), one
model.safetensors (bf16, about 4.4 GB), and the tiny fixture's tokenizer, chat template and
processor settings (models/fixtures/gme/tiny-gme, models/fixtures/qwen2_vl_instruct: its ids
are a valid subset of the vocabulary; tokenisation is not what this measures). The end
token is set to the last id of the vocabulary, which the decoding benchmark never feeds, so
both engines generate the full number of tokens. Weights: torch seed 0, normal with std
0.02. Needs ~10 GB of RAM and 5 GB of disk.
"""
import argparse
import json
import shutil
from pathlib import Path

import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

ROOT = Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "target" / "random-qwen2-vl-2b"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tiny = ROOT / "models" / "fixtures" / "gme" / "tiny-gme"
    for f in ["tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"]:
        shutil.copy(tiny / f, out / f)
    shutil.copy(ROOT / "models" / "fixtures" / "qwen2_vl_instruct" / "chat_template.jinja", out / "chat_template.jinja")
    ids = json.loads((tiny / "config.json").read_text())
    vocab = 151936
    config = Qwen2VLConfig(
        text_config={"vocab_size": vocab, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
                     "rope_theta": 1000000.0, "max_position_embeddings": 32768, "tie_word_embeddings": True,
                     "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
                     "bos_token_id": ids["bos_token_id"], "eos_token_id": vocab - 1},
        vision_config={"depth": 32, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16, "mlp_ratio": 4,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3},
        image_token_id=ids["image_token_id"], video_token_id=ids["video_token_id"],
        vision_start_token_id=ids["vision_start_token_id"], vision_end_token_id=ids["vision_end_token_id"],
        tie_word_embeddings=True, dtype="bfloat16")
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
    model.generation_config.eos_token_id = vocab - 1
    model.save_pretrained(out, max_shard_size="10GB")
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters")


if __name__ == "__main__":
    main()
