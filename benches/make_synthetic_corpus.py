#!/usr/bin/env python3
"""A synthetic MM-BRIGHT-shaped corpus at real scale, for scale and reliability checks.

Usage:
    python3 benches/make_synthetic_corpus.py --out target/synthetic --passages 50000
    python3 benches/make_synthetic_corpus.py --out target/physics-sized --passages 338000 \\
        --queries 100 --images 1001 --query-words 245

Writes the MM-BRIGHT hub layout (see ../shared/docs/mm-bright-protocol.md) for one domain
(`--domain`, default `synthetic`):

    documents/{domain}.parquet            id, content      (passage ids {domain}/{key}_{n}.txt)
    examples/{domain}.parquet             id, query, gold_ids, negative_ids
    examples_multimodal/{domain}.parquet  + image_paths, positive_images, negative_images
    document_images/{domain}.parquet      path, bytes      ({domain}/{domain}_{key}_{i:04}/image_1.png)
    examples_images/{domain}.parquet      path, bytes      (query images)

Passages are grouped into pages (a hex key, several chunks each) of words drawn from a
Zipf-distributed synthetic vocabulary, so term statistics look like text; each query is built
from words of its gold passages plus background words; corpus images belong to pages, and a
query's positive images are images of its gold pages. Deterministic for a given --seed.

Task 4 pairs a passage with every corpus image of its page (same hex key), so the candidate
count is passages + the sum over images of their page's chunk count. By default images go to
random pages (about --chunks-per-page pairs per image); `--task4-pairs N` instead plans the
pages that carry images (1-3 images each, chunk counts chosen so the total is exactly N) among
ordinary pages, in a shuffled order: MM-BRIGHT's physics domain has 338,000 passages, 1,001
images and 358,816 candidate pairs, i.e. about 20.8 chunks per image. Either way the exact
count is printed. Several domains can share one --out (run once per --domain).
Requires pyarrow, numpy and Pillow (corpora/sample/requirements.txt plus numpy).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

SYLLABLES = [
    c + v
    for c in "bcdfghjklmnprstvwz"
    for v in ("a", "e", "i", "o", "u", "ai", "ou", "ei")
]


def vocabulary(n: int, rng: np.random.Generator) -> list[str]:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        k = int(rng.integers(1, 5))
        w = "".join(SYLLABLES[int(i)] for i in rng.integers(0, len(SYLLABLES), k))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def zipf_words(rng: np.random.Generator, vocab: list[str], count: int) -> list[str]:
    ranks = rng.zipf(1.15, count)
    ranks = np.minimum(ranks, len(vocab)) - 1
    return [vocab[int(r)] for r in ranks]


def png(rng: np.random.Generator, size: int) -> bytes:
    img = Image.new("RGB", (size, size), tuple(int(x) for x in rng.integers(0, 256, 3)))
    px = img.load()
    for _ in range(4):
        x0, y0 = (int(v) for v in rng.integers(0, size, 2))
        colour = tuple(int(x) for x in rng.integers(0, 256, 3))
        for x in range(x0, min(size, x0 + size // 3)):
            for y in range(y0, min(size, y0 + size // 3)):
                px[x, y] = colour
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def plan_pages(rng: np.random.Generator, a: argparse.Namespace) -> tuple[list[int], list[int]]:
    """Chunk counts of every page, in corpus order, and how many images each page carries, so
    that passages = --passages and passages + sum(images x chunks) = --task4-pairs exactly."""
    extra = a.task4_pairs - a.passages
    if a.images < 1 or extra < a.images:
        raise SystemExit(f"--task4-pairs needs at least --passages + --images ({a.passages + a.images})")
    # pages with images: 1-3 images each (the first page exactly 1, for exact totals)
    groups = [1]
    while sum(groups) < a.images:
        groups.append(min(int(rng.integers(1, 4)), a.images - sum(groups)))
    mean = extra / a.images  # chunks per image
    counts = [max(1, int(round(mean * rng.uniform(0.5, 1.5)))) for _ in groups]
    deficit = extra - sum(n * c for n, c in zip(groups, counts))
    while deficit:
        moved = False
        for g, n in enumerate(groups):
            if 0 < n <= deficit:
                counts[g] += 1
                deficit -= n
                moved = True
            elif 0 < n <= -deficit and counts[g] > 1:
                counts[g] -= 1
                deficit += n
                moved = True
            if not deficit:
                break
        if not moved:
            raise SystemExit("cannot plan the Task 4 pairs exactly")
    rest = a.passages - sum(counts)
    if rest < 0:
        raise SystemExit(f"the pages with images alone need {sum(counts)} passages: raise --passages")
    plain: list[int] = []
    while rest > 0:
        c = min(int(rng.integers(1, 2 * a.chunks_per_page)), rest)
        plain.append(c)
        rest -= c
    chunks = counts + plain
    images = groups + [0] * len(plain)
    order = rng.permutation(len(chunks))
    return [chunks[int(i)] for i in order], [images[int(i)] for i in order]


def write(table: pa.Table, path: Path, row_group: int = 16384) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group, compression="zstd")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--domain", default="synthetic")
    ap.add_argument("--passages", type=int, default=50_000)
    ap.add_argument("--chunks-per-page", type=int, default=8, help="mean passages per page")
    ap.add_argument("--passage-words", type=int, default=120, help="mean words per passage")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--query-words", type=int, default=245)
    ap.add_argument("--images", type=int, default=1001, help="corpus images")
    ap.add_argument("--image-size", type=int, default=48)
    ap.add_argument("--vocab", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--task4-pairs",
        type=int,
        help="plan the pages with images so Task 4 has exactly this many candidate pairs "
        "(passages + image pairs; e.g. 358816 with 338000 passages and 1001 images)",
    )
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    d = a.domain
    vocab = vocabulary(a.vocab, rng)

    # pages of passages
    keys: list[str] = []
    ids: list[str] = []
    texts: list[str] = []
    page_of: list[int] = []
    used: set[str] = set()

    def new_key() -> str:
        while True:
            key = f"{int(rng.integers(0, 2**32)):08x}"
            if key not in used:
                used.add(key)
                return key

    def add_chunk(page: int, n: int) -> None:
        length = max(5, int(rng.normal(a.passage_words, a.passage_words / 3)))
        ids.append(f"{d}/{keys[page]}_{n}.txt")
        texts.append(" ".join(zipf_words(rng, vocab, length)))
        page_of.append(page)

    planned_images: list[int] | None = None  # image i -> page, when --task4-pairs plans them
    if a.task4_pairs is None:
        while len(ids) < a.passages:
            page = len(keys)
            keys.append(new_key())
            for n in range(int(rng.integers(1, 2 * a.chunks_per_page))):
                if len(ids) >= a.passages:
                    break
                add_chunk(page, n)
    else:
        chunks, image_groups = plan_pages(rng, a)
        planned_images = []
        for page, count in enumerate(chunks):
            keys.append(new_key())
            for n in range(count):
                add_chunk(page, n)
            planned_images += [page] * image_groups[page]
    passages_of_page: dict[int, list[int]] = {}
    for i, p in enumerate(page_of):
        passages_of_page.setdefault(p, []).append(i)
    write(pa.table({"id": ids, "content": texts}), a.out / "documents" / f"{d}.parquet")

    # corpus images, attached to random pages
    image_paths: list[str] = []
    image_bytes: list[bytes] = []
    images_of_page: dict[int, list[str]] = {}
    for i in range(a.images):
        page = planned_images[i] if planned_images is not None else int(rng.integers(0, len(keys)))
        path = f"{d}/{d}_{keys[page]}_{i:04}/image_1.png"
        image_paths.append(path)
        image_bytes.append(png(rng, a.image_size))
        images_of_page.setdefault(page, []).append(path)
    write(
        pa.table({"path": image_paths, "bytes": pa.array(image_bytes, pa.binary())}),
        a.out / "document_images" / f"{d}.parquet",
        row_group=256,
    )

    # queries: words of 1-3 gold passages of one page (pages with images first, so Tasks
    # 3-4 have positives), plus background words
    pages_with_images = sorted(images_of_page)
    q_ids, q_text, gold, neg, q_imgs, pos, negimg = [], [], [], [], [], [], []
    qi_paths: list[str] = []
    qi_bytes: list[bytes] = []
    for q in range(a.queries):
        if pages_with_images and q % 2 == 0:
            page = pages_with_images[int(rng.integers(0, len(pages_with_images)))]
        else:
            page = int(rng.integers(0, len(keys)))
        members = passages_of_page[page]
        k = min(len(members), int(rng.integers(1, 4)))
        golds = [members[int(i)] for i in rng.choice(len(members), k, replace=False)]
        words: list[str] = []
        for g in golds:
            w = texts[g].split()
            words += [w[int(i)] for i in rng.integers(0, len(w), a.query_words // (2 * k))]
        words += zipf_words(rng, vocab, a.query_words - len(words))
        rng.shuffle(words)
        qid = f"{d}_{q:04}"
        q_ids.append(qid)
        q_text.append(" ".join(words))
        gold.append([ids[g] for g in golds])
        others = [int(rng.integers(0, len(ids))) for _ in range(2)]
        neg.append([ids[o] for o in others if o not in golds])
        imgs = []
        for j in range(int(rng.integers(1, 3))):
            path = f"{d}/{qid}/query_image_{j + 1}.png"
            qi_paths.append(path)
            qi_bytes.append(png(rng, a.image_size))
            imgs.append(path)
        q_imgs.append(imgs)
        page_images = images_of_page.get(page, [])
        pos.append(page_images[:2])
        negimg.append(page_images[2:3])
    write(
        pa.table({"id": q_ids, "query": q_text, "gold_ids": gold, "negative_ids": neg}),
        a.out / "examples" / f"{d}.parquet",
    )
    write(
        pa.table(
            {
                "id": q_ids,
                "query": q_text,
                "gold_ids": gold,
                "negative_ids": neg,
                "image_paths": q_imgs,
                "positive_images": pos,
                "negative_images": negimg,
            }
        ),
        a.out / "examples_multimodal" / f"{d}.parquet",
    )
    write(
        pa.table({"path": qi_paths, "bytes": pa.array(qi_bytes, pa.binary())}),
        a.out / "examples_images" / f"{d}.parquet",
        row_group=256,
    )
    image_pairs = sum(len(passages_of_page[p]) * len(v) for p, v in images_of_page.items())
    print(
        f"{a.out}: domain {d}: {len(ids)} passages on {len(keys)} pages, {a.images} images, "
        f"{a.queries} queries of {a.query_words} words, {len(ids) + image_pairs} Task 4 pairs "
        f"({len(ids)} passages + {image_pairs} passage-image pairs)"
    )


if __name__ == "__main__":
    main()
