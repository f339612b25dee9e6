"""What every embedding peer runner in this folder measures the same way: thread settings, the
text inputs, the warm-up + timed call, the process's memory and the keys every result carries.

Importing this module imports neither torch nor transformers; the functions that need them
import them when called (a driver sets the thread environment before anything reads it).
"""

from __future__ import annotations

import os
import resource
import time
from typing import Callable, List, Sequence, Tuple


def set_threads(threads: int) -> None:
    """torch.set_num_threads(threads); RAYON_NUM_THREADS (the `tokenizers` pool) is set to
    `threads` unless already set. Call it before the first tokenizer runs."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    import torch
    torch.set_num_threads(threads)


def load_texts(path: str) -> List[str]:
    """JSONL texts. A line with "_id" or "title" is a BEIR corpus.jsonl record and its text is
    `title + " " + text` (what Sift indexes); any other line must have a "text" field."""
    import json
    texts: List[str] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            d = json.loads(line)
            if "_id" in d or "title" in d:
                texts.append((d.get("title") or "") + " " + (d.get("text") or ""))
            elif isinstance(d.get("text"), str):
                texts.append(d["text"])
            else:
                raise ValueError(f"{path}:{n}: no \"text\" field")
    return texts


def text_inputs(path: str, items: int | None) -> Tuple[List[str], int]:
    """(every text of `path`, how many are timed: `items`, or all when None), checked."""
    all_texts = load_texts(path)
    n = len(all_texts) if items is None else items
    if n < 1 or n > len(all_texts):
        raise ValueError(f"--items {n}: {path} has {len(all_texts)} texts")
    return all_texts, n


def autocast_bf16(embed: Callable, on: bool) -> Callable:
    """`embed` run under `torch.autocast("cpu", dtype=torch.bfloat16)` when `on` (PyTorch's
    mixed precision on the CPU: matrix products in bfloat16, the oneDNN kernels that use
    AVX512-BF16 / AMX where the processor has them), else `embed` itself."""
    if not on:
        return embed
    import torch

    def run(xs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return embed(xs)
    return run


def timed_run(embed: Callable[[Sequence], object], inputs: Sequence, warm: Sequence):
    """One untimed `embed(warm)` (when `warm` is not empty), then `embed(inputs)` timed with
    time.perf_counter: (its result, seconds). The result must have one row per input."""
    if len(warm) > 0:
        embed(warm)
    t0 = time.perf_counter()
    emb = embed(inputs)
    seconds = time.perf_counter() - t0
    assert emb.shape[0] == len(inputs), (emb.shape, len(inputs))
    return emb, seconds


def rss_mb() -> Tuple[float, float]:
    """(peak RSS of this whole process, VmRSS now), MB. The peak (`ru_maxrss`, KiB on Linux)
    includes the interpreter, torch and its libraries, the weights and the inputs."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    now = float("nan")
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    now = int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak, now


def result(engine: str, version: str, model: str, items: int, batch_size: int, threads: int,
           warmup: int, seconds: float, digits: int = 3) -> dict:
    """The keys every peer result starts with: engine, version, torch, model, items,
    batch_size, threads, warmup, seconds, items_per_s (rounded to `digits`), and
    peak_rss_mb / end_rss_mb measured now."""
    import torch
    peak, end = rss_mb()
    return {
        "engine": engine,
        "version": version,
        "torch": torch.__version__,
        "model": model,
        "items": items,
        "batch_size": batch_size,
        "threads": threads,
        "warmup": warmup,
        "seconds": round(seconds, 6),
        "items_per_s": round(items / seconds, digits),
        "peak_rss_mb": round(peak, 1),
        "end_rss_mb": round(end, 1),
    }
