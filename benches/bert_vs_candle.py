#!/usr/bin/env python3
"""BERT sentence embeddings on the CPU: Sift's network vs candle-transformers' `BertModel` vs
sentence-transformers, on the same checkpoint and texts: parity of the vectors and speed.

Usage (from the repository root, after building benches/decisions/; see its README.md):
    CARGO_TARGET_DIR=target/decisions cargo build --release \\
        --manifest-path benches/decisions/Cargo.toml
    python3 -m benches.bert_vs_candle --bin target/decisions/release/bert_embed \\
        --model models/local/all-MiniLM-L6-v2 --texts /work/shared/data/cranfield/corpus.jsonl \\
        [--parity-items 200] [--items 1400] [--batch-size 32] [--threads 2] [--warmup 64] \\
        [--rounds 3] [--out eval/results/bert_candle_transformers]

Parity: the first --parity-items texts embedded by `bert_embed --engine sift` and
`bert_embed --engine candle-transformers` (f32, vectors saved as .npy) and by
sentence-transformers in this process (`SentenceTransformer(model, device="cpu").encode(...,
normalize_embeddings=True)`, f32, torch.set_num_threads(threads)); reported: the largest
absolute difference of any component and the smallest cosine, for each pair.

Speed: each round runs, in a fresh process each and in an order that rotates between rounds,
`bert_embed --engine sift`, `bert_embed --engine candle-transformers` and the
sentence-transformers peer (`python3 -m eval.peers.st_embed_peer --json`), each embedding the
first --items texts at --batch-size with --threads threads after an untimed warm-up of
--warmup texts. Reported per engine: texts/s, median and min-max over the rounds, and the
ratio of the medians.

Writes <out>.json (machine, settings, raw results, parity) and <out>.md, and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from benches.benchlib import REPO, fmt, machine, run_cmd, write_report

ENGINES = ["sift", "candle-transformers", "sentence-transformers"]
NAMES = {"sift": "Sift", "candle-transformers": "candle-transformers",
         "sentence-transformers": "sentence-transformers"}


def rel(path: str) -> str:
    """`path` relative to the repository root when it lies inside it, else absolute."""
    p = os.path.abspath(path)
    return os.path.relpath(p, REPO) if p.startswith(REPO + os.sep) else p


def st_vectors(model: str, texts: list[str], batch_size: int, threads: int) -> np.ndarray:
    """sentence-transformers' unit vectors, f32 on the CPU, in a fresh process."""
    code = (
        "import sys, json, numpy as np, torch\n"
        "torch.set_num_threads(int(sys.argv[3]))\n"
        "from sentence_transformers import SentenceTransformer\n"
        "texts = json.load(open(sys.argv[2]))\n"
        "st = SentenceTransformer(sys.argv[1], device='cpu')\n"
        "v = st.encode(texts, batch_size=int(sys.argv[4]), normalize_embeddings=True,\n"
        "              convert_to_numpy=True, show_progress_bar=False)\n"
        "np.save(sys.argv[5], v.astype(np.float32))\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tpath, out = os.path.join(tmp, "texts.json"), os.path.join(tmp, "st.npy")
        with open(tpath, "w") as f:
            json.dump(texts, f)
        subprocess.run([sys.executable, "-c", code, model, tpath, str(threads), str(batch_size), out],
                       cwd=REPO, check=True)
        return np.load(out)


def compare(a: np.ndarray, b: np.ndarray) -> dict:
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"max_abs_diff": float(np.max(np.abs(a - b))), "min_cosine": float(np.min(cos)),
            "mean_abs_diff": float(np.mean(np.abs(a - b)))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="benches/decisions' built bert_embed")
    ap.add_argument("--model", required=True, help="local sentence-transformers BERT model directory")
    ap.add_argument("--texts", required=True, help="JSONL texts or a BEIR corpus.jsonl")
    ap.add_argument("--parity-items", type=int, default=200)
    ap.add_argument("--items", type=int, default=None, help="texts per timed run (default: all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="eval/results/bert_candle_transformers")
    a = ap.parse_args()
    binary, model, texts = os.path.abspath(a.bin), os.path.abspath(a.model), os.path.abspath(a.texts)
    env_threads = {"RAYON_NUM_THREADS": str(a.threads), "OMP_NUM_THREADS": str(a.threads)}
    os.environ.update(env_threads)
    common = ["--model", model, "--texts", texts, "--batch-size", str(a.batch_size),
              "--threads", str(a.threads), "--json"]

    # parity
    from eval.peers.measure import load_texts

    all_texts = load_texts(texts)
    n_items = a.items or len(all_texts)
    parity_texts = all_texts[:a.parity_items]
    vecs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ("sift", "candle-transformers"):
            path = os.path.join(tmp, f"{engine}.npy")
            run_cmd(engine, [binary, "--engine", engine, "--items", str(a.parity_items), "--warmup", "0",
                             "--save-npy", path] + common, False)
            vecs[engine] = np.load(path)
    vecs["sentence-transformers"] = st_vectors(model, parity_texts, a.batch_size, a.threads)
    parity = {
        "Sift vs sentence-transformers": compare(vecs["sift"], vecs["sentence-transformers"]),
        "candle-transformers vs sentence-transformers":
            compare(vecs["candle-transformers"], vecs["sentence-transformers"]),
        "Sift vs candle-transformers": compare(vecs["sift"], vecs["candle-transformers"]),
    }
    print(json.dumps(parity, indent=1), file=sys.stderr)

    # speed
    cmds = {
        "sift": [binary, "--engine", "sift", "--items", str(n_items), "--warmup", str(a.warmup)] + common,
        "candle-transformers": [binary, "--engine", "candle-transformers", "--items", str(n_items),
                                "--warmup", str(a.warmup)] + common,
        "sentence-transformers": [sys.executable, "-m", "eval.peers.st_embed_peer", "--items", str(n_items),
                                  "--warmup", str(a.warmup)] + common,
    }
    raw: dict = {e: [] for e in ENGINES}
    for r in range(a.rounds):
        order = ENGINES[r % 3:] + ENGINES[:r % 3]
        for engine in order:
            res, _ = run_cmd(engine, cmds[engine], False)
            raw[engine].append(res)
        print(f"round {r + 1}/{a.rounds} ({', '.join(order)}): " + ", ".join(
            f"{e} {raw[e][-1]['items_per_s']:.1f} texts/s" for e in ENGINES), file=sys.stderr)
    med = {e: statistics.median(x["items_per_s"] for x in raw[e]) for e in ENGINES}
    kernel = raw["sift"][0].get("linear_kernel")
    lines = [
        f"# BERT embeddings on the CPU: Sift vs candle-transformers vs sentence-transformers "
        f"({os.path.basename(model)})",
        "",
        f"## Parity (first {a.parity_items} texts, f32, unit vectors)",
        "",
        "| pair | max abs difference | mean abs difference | min cosine |",
        "|---|---:|---:|---:|",
    ]
    for pair, p in parity.items():
        lines.append(f"| {pair} | {p['max_abs_diff']:.2e} | {p['mean_abs_diff']:.2e} | {p['min_cosine']:.7f} |")
    lines += [
        "",
        f"## Speed ({n_items} texts, batch {a.batch_size}, {a.threads} threads, f32; {a.rounds} rounds)",
        "",
        "| engine | texts/s (median) | min-max over rounds | Sift / engine (ratio of medians) "
        "| Sift / engine per round (median, min-max) |",
        "|---|---:|---:|---:|---:|",
    ]
    for e in ENGINES:
        vals = [x["items_per_s"] for x in raw[e]]
        per_round = [s["items_per_s"] / x["items_per_s"] for s, x in zip(raw["sift"], raw[e])]
        lines.append(f"| {NAMES[e]} {raw[e][0].get('version')} | {fmt(med[e])} | "
                     f"{fmt(min(vals))}-{fmt(max(vals))} | {med['sift'] / med[e]:.2f}x | "
                     f"{statistics.median(per_round):.2f}x ({min(per_round):.2f}-{max(per_round):.2f}) |")
    m = machine()
    lines += [
        "",
        f"- Texts: the first {n_items} of `{os.path.basename(texts)}` (BEIR records: title + \" \" + text), "
        f"truncated at {raw['sift'][0].get('max_seq_length')} tokens (Sift), "
        f"{raw['candle-transformers'][0].get('max_seq_length')} (candle-transformers), "
        f"{raw['sentence-transformers'][0].get('max_seq_length')} (sentence-transformers); "
        f"warm-up {a.warmup} texts untimed; timed: tokenisation, forward passes, pooling, normalisation.",
        f"- Sift's linear layers ran `{kernel}` (f32 requested; the bf16 paths are not measured here).",
        "- candle-transformers: `BertModel` with mean pooling over the attention mask and L2 normalisation, "
        "texts sorted by length and each batch padded to its longest (benches/decisions/src/bin/bert_embed.rs).",
        f"- sentence-transformers {raw['sentence-transformers'][0].get('version')}, "
        f"torch {raw['sentence-transformers'][0].get('torch')}, torch.set_num_threads({a.threads}).",
        f"- Each round runs every engine in a fresh process, the order rotating between rounds; "
        f"RAYON_NUM_THREADS={a.threads}.",
        f"- Machine: {json.dumps(m)}",
        f"- Date (UTC): {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- Reproduce: `CARGO_TARGET_DIR={rel(os.path.dirname(os.path.dirname(binary)))} cargo build --release "
        f"--manifest-path benches/decisions/Cargo.toml && python3 -m benches.bert_vs_candle --bin {rel(binary)} "
        f"--model {rel(model)} --texts {rel(texts)} --parity-items {a.parity_items} --items {n_items} "
        f"--batch-size {a.batch_size} --threads {a.threads} --warmup {a.warmup} --rounds {a.rounds} --out {a.out}`",
    ]
    md = "\n".join(lines) + "\n"
    write_report(os.path.join(REPO, a.out), {"args": vars(a), "parity": parity, "raw": raw, "median": med,
                                             "machine": m}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
