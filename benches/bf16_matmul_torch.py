#!/usr/bin/env python3
"""PyTorch's bfloat16 linear layer on the CPU, the peer of sift-simd's bf16 kernel
(`cargo run --release -p sift-simd --example bf16_matmul -- M K N`): the same shapes, the
same thread count, median of 5 after 2 warm-ups, printed as milliseconds and GFLOP/s.

    python3 benches/bf16_matmul_torch.py --threads 2 262x4096x14336 262x14336x4096 16x4096x14336
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("shapes", nargs="*", default=["262x4096x14336"], help="MxKxN (x: M x K, weight N x K)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for shape in a.shapes:
        m, k, n = (int(v) for v in shape.split("x"))
        x = torch.randn(m, k, dtype=torch.bfloat16)
        w = torch.randn(n, k, dtype=torch.bfloat16)
        for _ in range(2):
            torch.nn.functional.linear(x, w)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            torch.nn.functional.linear(x, w)
            times.append(time.perf_counter() - t)
        t = statistics.median(times)
        print(f"{m} {k} {n} torch {torch.__version__} bf16: {t * 1e3:.1f} ms  {2 * m * k * n / t / 1e9:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
