#!/usr/bin/env python3
"""A full-size Mistral-7B embedding checkpoint (E5-Mistral / SFR-Embedding-Mistral's shape)
with random bf16 weights, for measuring memory and speed without the real weights.

    python3 benches/make_random_decoder.py --out target/random-mistral-7b

Writes config.json (Mistral-7B: hidden 4096, 32 layers, 32 heads over 8 key/value heads,
MLP 14336, vocab 32000, 4096 positions), model.safetensors shards (the bare MistralModel,
as the embedding checkpoints store it; bf16, about 14.5 GB) and the tiny fixture's
tokenizer (models/fixtures/decoder/tiny-mistral: its ids are a valid subset of the
vocabulary; tokenisation cost is not what this measures). Weights: torch seed 0, normal
with std 0.02 (so activations stay finite through 32 layers). Needs ~15 GB of RAM and disk.
"""
import argparse
import shutil
from pathlib import Path

import torch
from transformers import MistralConfig, MistralModel

ROOT = Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "target" / "random-mistral-7b"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = ROOT / "models" / "fixtures" / "decoder" / "tiny-mistral"
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(tok / f, out / f)
    config = MistralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                           num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                           max_position_embeddings=4096, rope_theta=10000.0, sliding_window=4096,
                           rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                           tie_word_embeddings=False, dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("meta"):
        model = MistralModel(config)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    model.save_pretrained(out, max_shard_size="4GB")
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}: {n / 1e9:.2f}B parameters, bf16")


if __name__ == "__main__":
    main()
