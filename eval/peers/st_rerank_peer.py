#!/usr/bin/env python3
"""sentence-transformers peer runner: CPU cross-encoder reranking throughput of a local model.

Usage (from the repository root):
    python3 -m eval.peers.st_rerank_peer --model target/bench-models/ms-marco-minilm-l6-random \
        --queries FILE --passages FILE [--items 2000] [--depth 100] [--concat 1] \
        [--batch-size 32] [--max-length 512] [--threads 2] [--warmup 32] \
        [--dtype float32|bf16-autocast|bfloat16] [--json]

--queries and --passages are read as `sift bench rerank` reads them: one text per line, or
JSONL whose "text" field is the text, a non-blank "title" put in front of it with a space
(BEIR queries.jsonl / corpus.jsonl). The pairs are the ones `sift bench rerank` builds: pair
k is (queries[(k // depth) % Q], passages[k % P]), passage i being --concat consecutive
passages from i joined by spaces; the pairs of one query (--depth of them) go to one
predict call, as a reranker at that depth calls it.

With --json, stdout carries exactly one line: a JSON object with the keys
    engine, version, torch, model, items, batch_size, threads, warmup, seconds, items_per_s,
    peak_rss_mb (the whole process's peak), end_rss_mb, depth, concat, max_length, dtype,
    prep_seconds, model_seconds, tokens, mean_tokens, truncated_share, first_scores

Timed region (time.perf_counter wall time, one run): for each query's pairs,
    CrossEncoder(model, max_length=L, device="cpu").predict(pairs, batch_size=B,
                                                             convert_to_numpy=True)
i.e. CrossEncoder's own length sort, tokenisation (truncation longest-first at L, padding
to each batch's longest pair), the forward pass, the head and its activation, with
torch.set_num_threads(T). Before it, one untimed predict on the first --warmup pairs.
Afterwards (not in `seconds`) tokenising alone is timed the way predict tokenises
(CrossEncoder.preprocess on each batch of the length-sorted pairs of each call): prep_seconds;
model_seconds = seconds - prep_seconds.

--dtype: float32 (the default); bf16-autocast (predict under
torch.autocast("cpu", dtype=torch.bfloat16): oneDNN bfloat16 matrix products, AMX /
AVX512-BF16 where the processor has them); bfloat16 (the model cast with
.to(torch.bfloat16): every op in bfloat16, scores upcast to float32 by predict).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from eval.peers.measure import result, set_threads


def read_texts(path: str) -> list[str]:
    """Texts as `sift bench rerank` (Sift's read_inputs) reads them."""
    out = []
    with open(path, encoding="utf-8-sig") as f:
        for n, line in enumerate(f, 1):
            text = line.rstrip("\n").rstrip("\r")
            if not text.strip():
                continue
            if text.lstrip().startswith("{"):
                d = json.loads(text)
                body = d.get("text")
                if not isinstance(body, str):
                    raise ValueError(f"{path}:{n}: JSON line without a \"text\" string")
                title = d.get("title")
                if isinstance(title, str) and title.strip():
                    body = f"{title} {body}"
                out.append(body)
            else:
                out.append(text)
    if not out:
        raise ValueError(f"{path}: no texts")
    return out


def make_pairs(queries: list[str], passages: list[str], n: int, depth: int,
               concat: int) -> list[tuple[str, str]]:
    """`sift bench rerank`'s pairs: pair k is (queries[(k // depth) % Q], passages[k % P]),
    passage i being `concat` consecutive passages from i joined by spaces."""
    p = len(passages)
    return [(queries[(k // depth) % len(queries)],
             " ".join(passages[(k + j) % p] for j in range(concat))) for k in range(n)]


def run(model: str, queries: str, passages: str, items: int = 1000, depth: int = 100,
        concat: int = 1, batch_size: int = 32, max_length: int | None = None, threads: int = 1,
        warmup: int = 32, dtype: str = "float32") -> dict:
    set_threads(threads)
    import numpy as np
    import sentence_transformers
    import torch
    from sentence_transformers import CrossEncoder

    pairs = make_pairs(read_texts(queries), read_texts(passages), max(items, warmup), depth,
                       concat)
    timed, warm = pairs[:items], pairs[:warmup]
    ce = CrossEncoder(model, max_length=max_length, device="cpu")
    if dtype == "bfloat16":
        ce = ce.to(torch.bfloat16)

    def predict(xs):
        return ce.predict(xs, batch_size=batch_size, convert_to_numpy=True,
                          show_progress_bar=False)

    if dtype == "bf16-autocast":
        inner = predict

        def predict(xs):  # noqa: F811
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return inner(xs)

    if warm:
        predict(warm)
    scores = []
    t0 = time.perf_counter()
    for i in range(0, len(timed), depth):
        scores.append(predict(timed[i:i + depth]))
    seconds = time.perf_counter() - t0
    scores = np.concatenate(scores)
    assert scores.shape == (len(timed),), scores.shape

    # tokenising alone, as predict does it: each call's pairs length-sorted, then batches
    L = ce.max_seq_length
    tokens = full = 0
    t0 = time.perf_counter()
    for i in range(0, len(timed), depth):
        call = timed[i:i + depth]
        order = np.argsort([-ce._input_length(x) for x in call])
        call = [call[j] for j in order]
        for b in range(0, len(call), batch_size):
            feats = ce.preprocess(call[b:b + batch_size])
            lens = feats["attention_mask"].sum(dim=1)
            tokens += int(lens.sum())
            full += int((lens >= L).sum())
    prep_seconds = time.perf_counter() - t0

    out = result("sentence-transformers", sentence_transformers.__version__, model, len(timed),
                 batch_size, threads, warmup, seconds)
    n = len(timed)
    out.update({
        "depth": depth,
        "concat": concat,
        "max_length": int(L),
        "dtype": dtype,
        "prep_seconds": round(prep_seconds, 6),
        "model_seconds": round(max(seconds - prep_seconds, 0.0), 6),
        "tokens": tokens,
        "mean_tokens": tokens / n,
        "truncated_share": full / n,
        "first_scores": [float(x) for x in scores[:8]],
    })
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local cross-encoder model directory")
    ap.add_argument("--queries", required=True, help="queries: lines, or JSONL with \"text\"")
    ap.add_argument("--passages", required=True, help="passages: lines, or JSONL with \"text\"")
    ap.add_argument("--items", type=int, default=1000, help="(query, passage) pairs timed")
    ap.add_argument("--depth", type=int, default=100, help="passages per query (one predict call)")
    ap.add_argument("--concat", type=int, default=1, help="consecutive passages joined into one")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=None,
                    help="CrossEncoder max_length (default: the tokenizer's model_max_length)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--warmup", type=int, default=32, help="pairs in the untimed warm-up predict")
    ap.add_argument("--dtype", choices=["float32", "bf16-autocast", "bfloat16"], default="float32")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    if min(args.items, args.depth, args.concat, args.batch_size, args.threads) < 1 or args.warmup < 0:
        ap.error("--items, --depth, --concat, --batch-size and --threads must be >= 1, --warmup >= 0")
    res = run(args.model, args.queries, args.passages, args.items, args.depth, args.concat,
              args.batch_size, args.max_length, args.threads, args.warmup, args.dtype)
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        print(f"{res['engine']} {res['version']} (torch {res['torch']}, {res['dtype']}), {res['model']}")
        print(f"  {res['items']} pairs at depth {res['depth']}, batch {res['batch_size']}, "
              f"{res['threads']} threads, max length {res['max_length']}: {res['seconds']:.3f} s, "
              f"{res['items_per_s']:.1f} pairs/s; {res['mean_tokens']:.1f} tokens per pair "
              f"({100 * res['truncated_share']:.0f}% at the max length); tokenising alone "
              f"{res['prep_seconds']:.2f} s; peak RSS {res['peak_rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
