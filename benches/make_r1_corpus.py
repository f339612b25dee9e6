#!/usr/bin/env python3
"""A generated Wikipedia-like corpus in Search-R1's layout, and queries over it, for
`benches/retrieve_vs_search_r1.py`.

    python3 benches/make_r1_corpus.py --out /var/tmp/r1-bench/data --passages 200000 --queries 4096

Writes, deterministic for a given --seed and vocabulary file:

    <out>/corpus.jsonl    {"id": "0", "contents": "\\"Title\\"\\nbody"}   (Search-R1's wiki-18 rows)
    <out>/queries.jsonl   {"id": "q0", "query": "...", "gold": "<passage id>"}

Words are whole words of the model's WordPiece vocabulary (`--vocab`, all-MiniLM-L6-v2's
vocab.txt by default: lower-case alphabetic entries of 3 to 12 letters), so a word is about one
token and a 40-100-word passage encodes at about Wikipedia chunk cost. Passages are grouped
into pages (1-4 chunks, as wiki-18 cuts articles into 100-word chunks) that share a title and
a set of topic words; bodies are sentences mixing topic words, Zipf-distributed background
words and function words. A query names words of one passage's title and topic plus a few
background words ("what is ... ", "who ...", ...); queries are distinct. A prefix of the
corpus (its first N rows) is itself a complete corpus: the benchmark's smaller sizes use it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
FUNCTION = ["the", "of", "and", "in", "to", "was", "is", "for", "on", "as", "by", "with",
            "from", "at", "which", "that", "his", "her", "its", "an", "a", "it", "were", "also"]
OPENERS = ["what is", "who was", "where is", "when was", "which", "how did", "what", "who",
           "tell me about", "history of"]


def vocabulary(path: Path, rng: np.random.Generator) -> list[str]:
    words = sorted({w for w in path.read_text().split("\n") if re.fullmatch(r"[a-z]{3,12}", w)}
                   - set(FUNCTION))
    rng.shuffle(words)
    return words


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--passages", type=int, default=200_000)
    p.add_argument("--queries", type=int, default=4096)
    p.add_argument("--seed", type=int, default=20251029)
    p.add_argument("--vocab", default=str(REPO / "models/local/all-MiniLM-L6-v2/vocab.txt"))
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    vocab = vocabulary(Path(a.vocab), rng)
    n = len(vocab)
    zipf = 1.0 / np.arange(1, n + 1) ** 1.05
    zipf /= zipf.sum()
    pool = {"words": np.empty(0, dtype=np.int64), "at": 0}

    def background(k: int) -> list[int]:
        # Zipf-distributed word indices, drawn a million at a time
        if pool["at"] + k > len(pool["words"]):
            pool["words"] = np.concatenate([pool["words"][pool["at"]:], rng.choice(n, 1 << 20, p=zipf)])
            pool["at"] = 0
        taken = pool["words"][pool["at"]:pool["at"] + k]
        pool["at"] += k
        return taken.tolist()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    pages = []  # per passage: (title words, topic words)
    with open(out / "corpus.jsonl.tmp", "w") as f:
        pid = 0
        while pid < a.passages:
            title = [vocab[int(i)] for i in rng.integers(200, n, int(rng.integers(1, 4)))]
            topic = [vocab[int(i)] for i in rng.integers(100, n, 8)]
            for _ in range(int(rng.integers(1, 5))):
                if pid >= a.passages:
                    break
                target = int(rng.integers(40, 101))
                kind = rng.random(target)
                fn = rng.integers(0, len(FUNCTION), target)
                tp = rng.integers(0, len(topic), target)
                tt = rng.integers(0, len(title), target)
                bg = background(target)
                words = [FUNCTION[fn[i]] if r < 0.3 else topic[tp[i]] if r < 0.55
                         else title[tt[i]] if r < 0.62 else vocab[bg[i]] for i, r in enumerate(kind)]
                # sentences of 6-15 words
                i = 0
                while i < target:
                    words[i] = words[i].capitalize()
                    i += int(rng.integers(6, 16))
                    words[min(i, target) - 1] += "."
                body = " ".join(words)
                head = " ".join(w.capitalize() for w in title)
                f.write(json.dumps({"id": str(pid), "contents": f'"{head}"\n{body}'}) + "\n")
                pages.append((title, topic))
                pid += 1
    (out / "corpus.jsonl.tmp").rename(out / "corpus.jsonl")
    seen: set[str] = set()
    with open(out / "queries.jsonl", "w") as f:
        while len(seen) < a.queries:
            gold = int(rng.integers(0, a.passages))
            title, topic = pages[gold]
            picked = list(title) + [topic[int(i)] for i in rng.choice(len(topic), int(rng.integers(2, 5)), replace=False)]
            picked += [vocab[i] for i in background(int(rng.integers(0, 3)))]
            rng.shuffle(picked)
            q = OPENERS[int(rng.integers(0, len(OPENERS)))] + " " + " ".join(picked)
            if q in seen:
                continue
            seen.add(q)
            f.write(json.dumps({"id": f"q{len(seen) - 1}", "query": q, "gold": str(gold)}) + "\n")
    print(f"{a.passages} passages, {a.queries} queries -> {out}")


if __name__ == "__main__":
    main()
