#!/usr/bin/env python3
"""transformers' greedy decoding on the CPU, the peer of
crates/sift-generate/examples/decode_bench.rs: the same prompts (token ids
`(i * 7 + p) % 700 + 10`), `generate(do_sample=False, max_new_tokens=N, min_new_tokens=N)`,
one warm-up prompt, `torch.set_num_threads(threads)`, the model in bfloat16 (or f32).
Prints one JSON line like the Rust side."""
import argparse
import json
import time

import torch
from transformers import Qwen2VLForConditionalGeneration


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t = time.perf_counter()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = Qwen2VLForConditionalGeneration.from_pretrained(a.model, dtype=dtype).eval()
    load = time.perf_counter() - t

    def prompt(p):
        return torch.tensor([[(i * 7 + p) % 700 + 10 for i in range(a.prompt_tokens)]])

    def run(ids):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens)
        return out.shape[1] - ids.shape[1]

    run(prompt(999))
    secs, tokens = [], 0
    for p in range(a.prompts):
        t = time.perf_counter()
        tokens += run(prompt(p))
        secs.append(time.perf_counter() - t)
    print(json.dumps({"engine": "transformers", "torch": torch.__version__, "dtype": a.dtype,
                      "load_seconds": load, "prompt_tokens": a.prompt_tokens, "new_tokens": tokens,
                      "seconds": secs, "tokens_per_s": tokens / sum(secs)}))


if __name__ == "__main__":
    main()
