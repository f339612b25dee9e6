#!/usr/bin/env python3
"""Embed a corpus's passages across a Ray cluster, then index them with `sift index --vectors`.

    # on this machine (a local Ray instance):
    python3 python/examples/ray_embed.py --corpus corpora/sample --out target/sample-vectors \\
        --model models/local/all-MiniLM-L6-v2

    # on a cluster (run on a node of it; corpus, model and --out on a filesystem every node
    # sees), one actor per GPU:
    python3 python/examples/ray_embed.py --address auto --corpus /shared/mm-bright \\
        --out /shared/vectors --model /shared/models/gte-qwen2-7b \\
        --device cuda --num-gpus 1 --concurrency 8 --dtype bf16

It prints the `sift index` command that builds the index from the vectors (the passages are
not embedded again; queries are, by the same model). Needs `pip install sift-ir "ray[data]"`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", required=True, help="MM-BRIGHT layout: <corpus>/documents/*.parquet")
    p.add_argument("--out", required=True, help="vectors directory to write")
    p.add_argument("--model", required=True, help="model directory or hub id / registry alias")
    p.add_argument("--domains", help="comma-separated domains [default: all]")
    p.add_argument(
        "--address", help="Ray cluster address (auto, ray://host:10001); default: a local Ray"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=2,
        help="actors (one model each); with GPUs, the GPUs to use",
    )
    p.add_argument(
        "--num-gpus", type=float, default=0, help="GPUs per actor (1 with --device cuda)"
    )
    p.add_argument(
        "--num-cpus",
        type=float,
        help="CPUs per actor [default: Ray Data's 1; on a local Ray, what leaves 1 CPU free "
        "for reading and writing]",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, help="passages per Ray batch (one embed_texts call)"
    )
    p.add_argument(
        "--embed-batch-size",
        type=int,
        help="the embedder's texts per forward pass [default: the model's]",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, metal or auto")
    p.add_argument("--dtype", default="f32", help="f32 (as sift index), f16, bf16 or auto")
    p.add_argument("--profile", help="embedding profile [default: the model's]")
    p.add_argument(
        "--max-task-retries",
        type=int,
        help="retries of a batch whose actor died [default: unlimited]",
    )
    p.add_argument(
        "--index", help="index directory for the printed sift index command [default: <out>-index]"
    )
    a = p.parse_args(argv)

    import ray

    from sift_ir.ray import embed_corpus

    num_cpus = a.num_cpus
    if a.address:
        ray.init(address=a.address)
    else:
        cores = os.cpu_count() or 1
        ray.init(include_dashboard=False)
        if num_cpus is None and not a.num_gpus:
            # Ray Data reads and writes in tasks of 1 CPU: leave one free
            num_cpus = max(0.25, min(1.0, (cores - 1) / a.concurrency))
    start = time.monotonic()
    manifest = embed_corpus(
        a.corpus,
        a.out,
        a.model,
        domains=a.domains,
        concurrency=a.concurrency,
        num_gpus=a.num_gpus,
        batch_size=a.batch_size,
        device=a.device,
        dtype=a.dtype,
        embed_batch_size=a.embed_batch_size,
        profile=a.profile,
        num_cpus=num_cpus,
        max_task_retries=a.max_task_retries,
    )
    took = time.monotonic() - start
    total = sum(d["passages"] for d in manifest["domains"].values())
    print(json.dumps(manifest, indent=2))
    print(
        f"{total} passage vectors in {took:.1f} s ({total / took:.0f}/s) -> {a.out}",
        file=sys.stderr,
    )
    index = a.index or os.path.normpath(a.out) + "-index"
    cmd = [
        "sift",
        "index",
        "--corpus",
        a.corpus,
        "--index",
        index,
        "--dense",
        a.model,
        "--vectors",
        a.out,
    ]
    if a.profile:
        cmd += ["--profile", a.profile]
    print("\nbuild the index from these vectors with:\n  " + shlex.join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
