#!/usr/bin/env python3
"""Generated evaluation results at MM-BRIGHT's scale for `sift report`: 29 domains, the four
tasks (Task 1 1,585 queries, Tasks 2-4 1,218), 10 retrievers, per-query metrics, runs of
each query's top 100 and qrels, written as `sift eval --out` writes them. Then times
`sift report` on them and reports the page's size.

    python3 benches/report_scale.py --out target/report-scale --sift target/release/sift
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import time
from pathlib import Path

DOMAINS = (
    "academia apple askubuntu aviation bioacoustics bioinformatics biology bitcoin chemistry "
    "christianity crypto earthscience economics gaming gis islam law math medicalsciences "
    "philosophy physics pm psychology quant quantumcomputing robotics salesforce "
    "sustainability travel"
).split()
QUERIES = {"1": 1585, "2": 1218, "3": 1218, "4": 1218}
METRICS = ["ndcg@10", "ndcg@100", "map@10", "recall@10", "recall@100", "p@10", "mrr"]


def split(total: int, parts: int) -> list[int]:
    base = [total // parts] * parts
    for i in range(total % parts):
        base[i] += 1
    return base


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sift", default="target/release/sift")
    p.add_argument("--retrievers", type=int, default=10)
    p.add_argument("--depth", type=int, default=100, help="run entries per query")
    a = p.parse_args()
    rng = random.Random(0)
    out = a.out
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    labels = ["bm25"] + [f"dense:model{i}" for i in range(1, a.retrievers)]
    reports = []
    for task, total in QUERIES.items():
        counts = dict(zip(DOMAINS, split(total, len(DOMAINS))))
        qrels_lines = []
        gold = {}
        for d, n in counts.items():
            for i in range(n):
                q = f"{d}-{i}"
                gold[q] = [f"{d}/{rng.randrange(1 << 30):08x}_0.txt" for _ in range(2)]
                qrels_lines += [f"{q} 0 {doc} 1\n" for doc in gold[q]]
        (out / "qrels" / f"task{task}.qrels").write_text("".join(qrels_lines))
        (out / "qrels" / f"task{task}.exclusions").write_text("")
        for r, label in enumerate(labels):
            skill = 0.2 + 0.05 * r
            per_query, per_domain, run = {}, {}, []
            for d, n in counts.items():
                per_query[d] = {}
                for i in range(n):
                    q = f"{d}-{i}"
                    v = min(1.0, max(0.0, rng.gauss(skill, 0.2)))
                    per_query[d][q] = {m: v for m in METRICS}
                    docs = list(gold[q]) if rng.random() < v else []
                    docs += [f"{d}/{rng.randrange(1 << 30):08x}_1.txt" for _ in range(a.depth - len(docs))]
                    run += [f"{q} Q0 {doc} {k + 1} {1 - k / a.depth:.6f} sift\n" for k, doc in enumerate(docs)]
                vals = [m["ndcg@10"] for m in per_query[d].values()]
                per_domain[d] = {m: sum(vals) / len(vals) for m in METRICS}
            safe = "".join(c if c.isalnum() or c in "-." else "_" for c in label)
            (out / "runs" / f"task{task}.{safe}.trec").write_text("".join(run))
            reports.append({
                "task": task, "label": label, "retriever": label,
                "per_domain": per_domain, "queries": counts, "per_query": per_query,
                "metrics": {m: sum(x[m] for x in per_domain.values()) / len(per_domain) for m in METRICS},
            })
    (out / "results.json").write_text(json.dumps({"reports": reports}))
    start = time.perf_counter()
    subprocess.run([a.sift, "report", str(out), "--out", str(out / "report.html")], check=True)
    secs = time.perf_counter() - start
    size = (out / "report.html").stat().st_size
    print(json.dumps({"seconds": round(secs, 2), "bytes": size, "mb": round(size / 1e6, 1),
                      "domains": len(DOMAINS), "tasks": 4, "retrievers": len(labels)}))


if __name__ == "__main__":
    main()
