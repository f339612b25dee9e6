#!/usr/bin/env python3
"""transformers peer for decoder embedders: E5-Mistral's model-card embedding (tokenizer ids
cut at max_length - 1, EOS appended, last_token_pool, F.normalize) of the lines of --input,
one text per forward pass, timed; prints one JSON object (texts/s, load time, peak RSS).

    python3 eval/peers/decoder_peer.py --model DIR --input texts.txt --threads 2 --dtype bf16
"""
import argparse
import json
import os
import resource
import time

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer


def token_ids(tok, text: str, max_length: int) -> list:
    """The model card's input ids: the tokenizer's, cut at max_length - 1, EOS appended."""
    return tok(text, max_length=max_length - 1, truncation=True)["input_ids"] + [tok.eos_token_id]


def default_max_length(model: str) -> int:
    """Sift's input length for a decoder its registry does not know: 4096 tokens, at most the
    config's max_position_embeddings."""
    with open(os.path.join(model, "config.json")) as f:
        return min(4096, json.load(f).get("max_position_embeddings") or 4096)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--max-length", type=int, default=4096)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    texts = [l.rstrip("\n") for l in open(a.input, encoding="utf-8") if l.strip()]
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(a.model)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = AutoModel.from_pretrained(a.model, dtype=dtype, attn_implementation="sdpa").eval()
    load = time.perf_counter() - t0
    lengths, secs = [], []
    with torch.inference_mode():
        for t in texts:
            s = time.perf_counter()
            ids = token_ids(tok, t, a.max_length)
            x = torch.tensor([ids])
            h = model(input_ids=x).last_hidden_state[:, -1]
            F.normalize(h.float(), dim=-1)
            secs.append(time.perf_counter() - s)
            lengths.append(len(ids))
    print(json.dumps({
        "engine": "transformers", "version": __import__("transformers").__version__,
        "torch": torch.__version__, "dtype": a.dtype, "threads": a.threads,
        "load_seconds": load, "texts": len(texts), "tokens": lengths,
        "seconds": sum(secs), "items_per_s": len(texts) / sum(secs),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


if __name__ == "__main__":
    main()
