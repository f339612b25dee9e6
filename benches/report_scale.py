#!/usr/bin/env python3
"""Generated evaluation results at MM-BRIGHT's scale for `sift report`: 29 domains, the four
tasks (Task 1 1,585 queries, Tasks 2-4 1,218), 10 retrievers, per-query metrics, runs of
each query's top 100 and qrels, written as `sift eval --out` writes them. Then times
`sift report` on them and reports the page's size.

With `--corpus`, also a generated corpus in MM-BRIGHT's hub layout that the runs rank:
passages of StackExchange-like length, MM-BRIGHT's 17,673 corpus images (JPEG and PNG
photographs-like pictures at screenshot sizes) and 1-3 images per query, so that the report
carries query texts, snippets and thumbnails as it would on the real data.

    python3 benches/report_scale.py --out target/report-scale --sift target/release/sift
    python3 benches/report_scale.py --out target/report-scale --sift target/release/sift --corpus
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
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
CORPUS_IMAGES = 17_673
METRICS = ["ndcg@10", "ndcg@100", "map@10", "recall@10", "recall@100", "p@10", "mrr"]


def split(total: int, parts: int) -> list[int]:
    base = [total // parts] * parts
    for i in range(total % parts):
        base[i] += 1
    return base


def picture(rng: random.Random, w: int, h: int, fmt: str) -> bytes:
    """A picture with gradients, shapes and text-like strokes (compresses like a screenshot
    or a photograph does, not like flat colour)."""
    from PIL import Image, ImageDraw, ImageFilter

    img = Image.linear_gradient("L").resize((w, h)).convert("RGB")
    d = ImageDraw.Draw(img)
    for _ in range(rng.randrange(10, 40)):
        x, y = rng.randrange(w), rng.randrange(h)
        c = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            d.rectangle([x, y, x + rng.randrange(20, w // 2), y + rng.randrange(10, h // 3)], fill=c)
        else:
            d.ellipse([x, y, x + rng.randrange(20, w // 3), y + rng.randrange(20, h // 3)], outline=c, width=3)
    for row in range(0, h, 18):
        if rng.random() < 0.4:
            d.text((8, row), "".join(rng.choice("abcdefghij =+()0123") for _ in range(w // 8)), fill=(0, 0, 0))
    img = img.filter(ImageFilter.GaussianBlur(0.6))
    out = io.BytesIO()
    img.save(out, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
    return out.getvalue()


def make_corpus(root: Path, counts1: dict, counts_mm: dict, passages: int, rng: random.Random):
    """Writes the corpus; returns per domain (passage ids, image ids, query image paths per
    query, base key -> image ids)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    words = ["".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randrange(2, 10)))
             for _ in range(4000)]
    per_domain_images = dict(zip(DOMAINS, split(CORPUS_IMAGES, len(DOMAINS))))
    list_str = pa.list_(pa.string())
    out = {}
    for n_d, d in enumerate(DOMAINS):
        keys = sorted({f"{rng.randrange(1 << 32):08x}" for _ in range(max(1, passages // 4))})
        pids = [f"{d}/{keys[i % len(keys)]}_{i // len(keys)}.txt" for i in range(passages)]
        texts = [" ".join(rng.choices(words, k=rng.randrange(120, 400))) for _ in pids]
        # images of a passage share its base key, as MM-BRIGHT's do
        imgs, blobs, by_key = [], [], {}
        for i in range(per_domain_images[d]):
            k = keys[rng.randrange(len(keys))]
            fmt = "PNG" if i % 4 == 0 else "JPEG"
            ext = "png" if fmt == "PNG" else "jpg"
            path = f"{d}/{d}_{k}_{i:04d}/image_1.{ext}"
            imgs.append(path)
            by_key.setdefault(k, []).append(path)
            blobs.append(picture(rng, rng.choice([640, 800, 1024]), rng.choice([400, 600, 768]), fmt))
        qimgs, qblobs, qpaths = {}, [], []
        for i in range(max(counts1[d], counts_mm[d])):
            q = f"{d}-{i}"
            qimgs[q] = [f"{d}/{d}_q{i}_0001/image_{j + 1}.png" for j in range(rng.randrange(1, 4))]
            for p in qimgs[q]:
                qpaths.append(p)
                qblobs.append(picture(rng, 640, 480, "PNG" if len(qpaths) % 2 else "JPEG"))
        for config in ("documents", "document_images", "examples", "examples_multimodal",
                       "examples_images"):
            (root / config).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": pids, "content": texts}), root / "documents" / f"{d}.parquet")
        pq.write_table(pa.table({"path": imgs, "bytes": blobs}, schema=pa.schema(
            [("path", pa.string()), ("bytes", pa.binary())])), root / "document_images" / f"{d}.parquet")
        pq.write_table(pa.table({"path": qpaths, "bytes": qblobs}, schema=pa.schema(
            [("path", pa.string()), ("bytes", pa.binary())])), root / "examples_images" / f"{d}.parquet")
        for config, n in (("examples", counts1[d]), ("examples_multimodal", counts_mm[d])):
            ids = [f"{d}-{i}" for i in range(n)]
            cols = {
                "id": ids,
                "query": [" ".join(rng.choices(words, k=rng.randrange(40, 200))) + "?" for _ in ids],
                "gold_ids": pa.array([[pids[rng.randrange(passages)]] for _ in ids], list_str),
                "gold_answers": pa.array([[] for _ in ids], list_str),
                "image_paths": pa.array([qimgs[q] for q in ids], list_str),
                "negative_ids": pa.array([[] for _ in ids], list_str),
            }
            if config == "examples_multimodal":
                cols["positive_images"] = pa.array([[imgs[rng.randrange(len(imgs))]] for _ in ids], list_str)
                cols["negative_images"] = pa.array([[] for _ in ids], list_str)
            pq.write_table(pa.table(cols), root / config / f"{d}.parquet")
        out[d] = (pids, imgs, by_key)
        print(f"corpus: {n_d + 1}/{len(DOMAINS)} domains", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sift", default="target/release/sift")
    p.add_argument("--retrievers", type=int, default=10)
    p.add_argument("--depth", type=int, default=100, help="run entries per query")
    p.add_argument("--corpus", action="store_true",
                   help="also generate a corpus the runs rank (texts, images) and give it to the report")
    p.add_argument("--passages", type=int, default=4000, help="passages per domain of the corpus")
    a = p.parse_args()
    rng = random.Random(0)
    out = a.out
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    counts = {t: dict(zip(DOMAINS, split(n, len(DOMAINS)))) for t, n in QUERIES.items()}
    corpus = None
    if a.corpus:
        corpus = make_corpus(out / "corpus", counts["1"], counts["2"], a.passages, rng)

    def doc(task: str, d: str, salt: int) -> str:
        if corpus is None:
            return f"{d}/{rng.randrange(1 << 30):08x}_{salt}.txt"
        pids, imgs, by_key = corpus[d]
        if task == "3":
            return imgs[rng.randrange(len(imgs))]
        pid = pids[rng.randrange(len(pids))]
        if task == "4":
            linked = by_key.get(pid.split("/")[1].split("_")[0], [])
            img = linked[rng.randrange(len(linked))] if linked and rng.random() < 0.5 else "__NO_IMAGE__"
            return f"{pid}|||{img}"
        return pid

    labels = ["bm25"] + [f"dense:model{i}" for i in range(1, a.retrievers)]
    reports = []
    for task, total in QUERIES.items():
        qrels_lines = []
        gold = {}
        for d, n in counts[task].items():
            for i in range(n):
                q = f"{d}-{i}"
                gold[q] = [doc(task, d, 0) for _ in range(2)]
                qrels_lines += [f"{q} 0 {g} 1\n" for g in gold[q]]
        (out / "qrels" / f"task{task}.qrels").write_text("".join(qrels_lines))
        (out / "qrels" / f"task{task}.exclusions").write_text("")
        for r, label in enumerate(labels):
            skill = 0.2 + 0.05 * r
            per_query, per_domain, run = {}, {}, []
            for d, n in counts[task].items():
                per_query[d] = {}
                for i in range(n):
                    q = f"{d}-{i}"
                    v = min(1.0, max(0.0, rng.gauss(skill, 0.2)))
                    per_query[d][q] = {m: v for m in METRICS}
                    docs = list(gold[q]) if rng.random() < v else []
                    seen = set(docs)
                    while len(docs) < a.depth:
                        x = doc(task, d, 1)
                        if x not in seen:
                            seen.add(x)
                            docs.append(x)
                    run += [f"{q} Q0 {x} {k + 1} {1 - k / a.depth:.6f} sift\n" for k, x in enumerate(docs)]
                vals = [m["ndcg@10"] for m in per_query[d].values()]
                per_domain[d] = {m: sum(vals) / len(vals) for m in METRICS}
            safe = "".join(c if c.isalnum() or c in "-." else "_" for c in label)
            (out / "runs" / f"task{task}.{safe}.trec").write_text("".join(run))
            reports.append({
                "task": task, "label": label, "retriever": label,
                "per_domain": per_domain, "queries": counts[task], "per_query": per_query,
                "metrics": {m: sum(x[m] for x in per_domain.values()) / len(per_domain) for m in METRICS},
            })
    (out / "results.json").write_text(json.dumps({"reports": reports}))
    cmd = [a.sift, "report", str(out), "--out", str(out / "report.html"), "--json"]
    if corpus is not None:
        cmd += ["--corpus", str(out / "corpus")]
    start = time.perf_counter()
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    secs = time.perf_counter() - start
    summary = json.loads(res.stdout)
    size = (out / "report.html").stat().st_size
    print(json.dumps({
        "seconds": round(secs, 2), "bytes": size, "mb": round(size / 1e6, 1),
        "domains": len(DOMAINS), "tasks": 4, "retrievers": len(labels),
        "corpus": corpus is not None, "thumbnails": summary["thumbnails"],
        "images_without_thumbnail": summary["images_without_thumbnail"],
        "warnings": summary["warnings"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
    }))


if __name__ == "__main__":
    main()
