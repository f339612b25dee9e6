#!/usr/bin/env python3
"""sentence-transformers peer runner: CPU embedding throughput of a local model.

Usage (from the repository root):
    python3 -m eval.peers.st_embed_peer --model models/local/all-MiniLM-L6-v2 \
        --texts FILE [--batch-size 32] [--threads 2] [--items N] [--warmup 64] [--json]

--texts is JSONL. A line with "_id" or "title" is a BEIR corpus.jsonl record and its text
is `title + " " + text` (what Sift indexes, as in bm25s_peer.py); any other line must have
a "text" field. Texts are used in file order; --items N takes the first N (default: all).

With --json, stdout carries exactly one line: a JSON object with the keys
    engine, version, torch, model, items, batch_size, threads, warmup, max_seq_length,
    seconds, items_per_s, peak_rss_mb (the whole process's peak), end_rss_mb

Timed region (time.perf_counter wall time, one run):
    model.encode(texts[:N], batch_size=B, normalize_embeddings=True, convert_to_numpy=True)
i.e. tokenisation (truncated at the model's max_seq_length, padded per batch), the
transformer forward pass, pooling and L2 normalisation, on the CPU with
torch.set_num_threads(T). Before it, one untimed warm-up encode of texts[:warmup] with the
same settings. Not timed: importing torch, loading the model, reading the file.
RAYON_NUM_THREADS (the `tokenizers` thread pool) is set to T unless already set. The shared
measuring code is eval/peers/measure.py.

`run(...)` is importable so a driver can call it in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import json
import sys

from eval.peers.measure import autocast_bf16, result, set_threads, text_inputs, timed_run


def run(model: str, texts: str, batch_size: int = 32, threads: int = 1,
        items: int | None = None, warmup: int = 64, autocast: bool = False) -> dict:
    set_threads(threads)
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    all_texts, n = text_inputs(texts, items)
    st = SentenceTransformer(model, device="cpu")

    def encode(xs):
        return st.encode(xs, batch_size=batch_size, normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=False)

    encode = autocast_bf16(encode, autocast)
    _, seconds = timed_run(encode, all_texts[:n], all_texts[:max(warmup, 0)])
    out = result("sentence-transformers", sentence_transformers.__version__, model, n,
                 batch_size, threads, warmup, seconds)
    out["max_seq_length"] = int(st.max_seq_length)
    out["dtype"] = "bf16-autocast" if autocast else "float32"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local sentence-transformers model directory")
    ap.add_argument("--texts", required=True, help="JSONL with \"text\" fields, or a BEIR corpus.jsonl")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--items", type=int, default=None, help="encode the first N texts (default all)")
    ap.add_argument("--warmup", type=int, default=64, help="texts in the untimed warm-up encode")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--autocast-bf16", action="store_true",
                    help="run the timed and warm-up passes under torch.autocast(\"cpu\", bfloat16)")
    args = ap.parse_args(argv)
    res = run(args.model, args.texts, args.batch_size, args.threads, args.items, args.warmup,
              args.autocast_bf16)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        print(f"{res['engine']} {res['version']} (torch {res['torch']}), {res['model']}")
        print(f"  {res['items']} texts, batch {res['batch_size']}, {res['threads']} threads: "
              f"{res['seconds']:.3f} s, {res['items_per_s']:.1f} texts/s, "
              f"peak RSS {res['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
