#!/usr/bin/env python3
"""Local greedy decoding: Sift's Qwen2-VL generator against transformers' `generate` on the
CPU, the same full-size Qwen2-VL-2B checkpoint with random bf16 weights
(`benches/make_random_qwen2vl.py`), the same prompts (token ids), the same thread count.
Each engine runs in a fresh process per round, the order alternating; each reports
new tokens per second over its timed prompts (prefill included), after one warm-up prompt,
load time excluded. Medians over the rounds.

    python3 benches/make_random_qwen2vl.py --out target/random-qwen2-vl-2b
    cargo build --release -p sift-generate --example decode_bench
    python3 -m benches.decode_vs_transformers --model target/random-qwen2-vl-2b --rounds 3 \\
        --out eval/results/decode_qwen2vl_2b_cpu
"""
import argparse
import os
import statistics
import sys

from benches.benchlib import REPO, machine, run_cmd, write_report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="target/random-qwen2-vl-2b")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="eval/results/decode_qwen2vl_2b_cpu")
    a = ap.parse_args()
    model = os.path.abspath(a.model)
    sift = os.path.join(REPO, "target", "release", "examples", "decode_bench")
    engines = {
        "sift bf16": (f"RAYON_NUM_THREADS={a.threads} {sift} {model} bf16 {a.prompts} {a.prompt_tokens} "
                      f"{a.new_tokens}", True),
        "transformers bf16": ([sys.executable, os.path.join(REPO, "eval", "peers", "qwen2vl_decode_peer.py"),
                               "--model", model, "--dtype", "bf16", "--prompts", str(a.prompts),
                               "--prompt-tokens", str(a.prompt_tokens), "--new-tokens", str(a.new_tokens),
                               "--threads", str(a.threads)], False),
    }
    names = list(engines)
    raw = {n: [] for n in names}
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            cmd, shell = engines[n]
            res, _ = run_cmd(f"round {r + 1} {n}", cmd, shell)
            raw[n].append(res)
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{n} {raw[n][-1]['tokens_per_s']:.2f} tokens/s"
                                                      for n in names), file=sys.stderr)
    med = {n: statistics.median(x["tokens_per_s"] for x in raw[n]) for n in names}
    load = {n: statistics.median(x["load_seconds"] for x in raw[n]) for n in names}
    ratio = med["sift bf16"] / med["transformers bf16"]
    cmdline = (f"python3 -m benches.decode_vs_transformers --model {a.model} --prompts {a.prompts} "
               f"--prompt-tokens {a.prompt_tokens} --new-tokens {a.new_tokens} --threads {a.threads} "
               f"--rounds {a.rounds} --out {a.out}")
    m = machine()
    md = "\n".join([
        "# Local greedy decoding: Sift vs transformers, Qwen2-VL-2B (random bf16 weights), CPU",
        "",
        "Commands (from the repository root):",
        "",
        "```sh",
        f"python3 benches/make_random_qwen2vl.py --out {a.model}",
        "cargo build --release -p sift-generate --example decode_bench",
        cmdline,
        "```",
        "",
        f"| engine (median of {a.rounds} rounds) | new tokens/s | load (s) |",
        "|---|---:|---:|",
        *[f"| {n} | {med[n]:.2f} | {load[n]:.1f} |" for n in names],
        "",
        f"Sift bf16 / transformers bf16: **{ratio:.2f}x** new tokens per second.",
        "",
        f"- {a.prompts} prompts of {a.prompt_tokens} token ids a run (the same ids for both), each decoded "
        f"greedily for exactly {a.new_tokens} tokens (prefill included in the time), after one warm-up "
        f"prompt; {a.threads} threads (`RAYON_NUM_THREADS`, `torch.set_num_threads`); each engine in a "
        "fresh process per round, the order alternating.",
        "- Sift: bfloat16 weights packed for the CPU's bfloat16 kernels (AMX tiles for the prefill, the "
        "AVX512-BF16 dot kernel for one-token steps), norms, attention and residuals in f32, a KV cache; "
        "its load time includes packing. transformers: the model in bfloat16, `generate(do_sample=False, "
        "min_new_tokens=max_new_tokens)` with its KV cache; torch " + raw["transformers bf16"][0]["torch"] + ".",
        f"- Machine: {m.get('cpu', '')}, {m.get('nproc', '')} CPUs.",
        "",
    ])
    write_report(a.out, {"command": cmdline, "machine": m, "rounds": raw, "median_tokens_per_s": med,
                         "median_load_seconds": load, "ratio": ratio}, md)
    print(md)


if __name__ == "__main__":
    main()
