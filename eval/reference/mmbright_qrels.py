#!/usr/bin/env python3
"""Independent reference: MM-BRIGHT qrels and exclusions for Tasks 1-4.

Reads a corpus directory in MM-BRIGHT hub layout ({config}/{domain}.parquet) and
writes, for every task/protocol, TREC qrels and a list of excluded (qid, docid)
pairs, plus summary.json with per-domain counts.  It follows
shared/docs/mm-bright-protocol.md, sections "Dataset on the hub" (path
normalisation, struct-or-string image columns, extra columns), "Linking passages
and images (Task 4)" and "Qrels per task" (including the exclusions paragraph and
"Queries whose qrels are empty are dropped before scoring").  It shares no code
with Sift.

    python3 eval/reference/mmbright_qrels.py corpora/sample eval/reference/sample_qrels

Outputs (all domains of the corpus in one file per task/protocol):

  task1.qrels  task1.exclusions          examples: gold_ids (1) / negative_ids
  task2.qrels  task2.exclusions          examples_multimodal: gold_ids (1) / negative_ids
  task3.qrels  task3.exclusions          positive_images (1) / nothing (always empty)
  task4.paper.qrels  task4.paper.exclusions    graded pairs / negative-image pairs
  task4.legacy.qrels task4.legacy.exclusions   rel-1 gold pairs / nothing (always empty)
  summary.json

*.qrels lines are `qid 0 docid grade` (grade > 0 only); *.exclusions lines are
`qid docid`.  Both are sorted by qid, then docid, as Python (code point = UTF-8
byte) string order, and contain no duplicates.  Query ids are the `id` column as
is, passage ids the `gold_ids`/`negative_ids`/`documents.id` strings as is, image
ids are normalised image paths, Task 4 ids are `{pid}|||{image}` or
`{pid}|||__NO_IMAGE__`.

Interpretation choices (where the protocol text leaves room):

* Path normalisation (image paths only: positive/negative images and
  document_images.path): every `\\` becomes `/`, then leading `./` prefixes are
  stripped (repeatedly).  Passage and query ids are used verbatim.
* Image columns may be list<string> or list<struct{image_path, ...}>; null lists
  and null elements are treated as absent.  Duplicate ids in a list count once.
* Dropped queries: a query whose qrels for that task/protocol are empty is
  dropped; nothing of it is written, not even its exclusions.
* Tasks 1/2: every negative_id becomes an exclusion (as the reference code does),
  even one that is also a gold id of the same query (the qrel stays; summary
  counts these as `negative_ids_also_gold`).  A gold id absent from `documents`
  is still a qrel (counted as `gold_ids_missing_from_corpus`).
* Task 3: a positive image absent from document_images is still a qrel (counted
  as `positives_missing_from_candidates`).  No exclusions.
* Task 4 base keys: passage `/([0-9a-f]+)_\\d+\\.txt$`, image
  `{domain}_([0-9a-f]+)_\\d+` (re.search, domain regex-escaped).  A passage or
  image without a key has no image pairs.
* Task 4 candidates: `pid|||__NO_IMAGE__` for every passage of `documents`, and
  `pid|||img` for every document_images path whose key equals pid's key.
* Task 4 paper, per query (positives P, negatives N; an image in both is in P
  only and is counted as `images_both_positive_and_negative`):
  - rel 1: `g|||__NO_IMAGE__` for every gold id g;
  - rel 2: `g|||img` for every img in P and EVERY gold id g with key(g) ==
    key(img) (one rel-2 pair per matching gold passage, not just the first);
  - an img in P whose key matches no gold id of the query (or has no key) is an
    orphan: no pair, counted as `orphan_positive_images`;
  - a rel-1/rel-2 pair that is not a candidate (gold id missing from documents,
    or image missing from document_images) is still a qrel, counted as
    `positive_pairs_missing_from_candidates`;
  - exclusions: every CANDIDATE pair `pid|||img` with img in N \\ P (any passage
    pid of the image's key, gold or not).  Pairs that are not candidates cannot
    be ranked, so none are written for them (this includes negatives whose key
    matches no passage or which are absent from document_images).  Negative
    passage ids (negative_ids) are NOT exclusions in Task 4.
* Task 4 legacy ("gives every gold-passage pair rel 1 and excludes nothing"):
  read as: every CANDIDATE pair whose passage part is a gold id gets rel 1, i.e.
  `g|||__NO_IMAGE__` and `g|||img` for every corpus image with g's key, whatever
  its annotation (positive, negative or none); positive/negative images are not
  consulted, so there are no orphans, and non-candidate pairs are not qrels (a
  gold id missing from documents yields nothing).  This matches the published
  MM-BRIGHT code at github.com/mm-bright/MM-BRIGHT src/eval_runner.py (qrels
  built from the generated pair ids whose prefix is a gold id; its exclusions
  are passage ids, which never match a pair id, so nothing is excluded).
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq

NO_IMAGE = "__NO_IMAGE__"
SEP = "|||"
PASSAGE_KEY_RE = re.compile(r"/([0-9a-f]+)_\d+\.txt$")
CONFIGS = ("documents", "examples", "examples_multimodal", "document_images")
QUERY_COLS = ("id", "gold_ids", "negative_ids")


def norm_path(p):
    p = p.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def passage_key(pid):
    m = PASSAGE_KEY_RE.search(pid)
    return m.group(1) if m else None


def image_key(path, domain):
    m = re.search(re.escape(domain) + r"_([0-9a-f]+)_\d+", path)
    return m.group(1) if m else None


def read_columns(path, names):
    """Read only the named columns (tolerates any extra column) as Python lists."""
    available = pq.read_schema(path).names
    missing = [n for n in names if n not in available]
    if missing:
        sys.exit(f"error: {path} lacks column(s) {missing} (has {available})")
    table = pq.read_table(path, columns=list(names))
    return {n: table.column(n).to_pylist() for n in names}


def str_list(values):
    """A list<string> cell -> list of strings, order kept, duplicates and nulls dropped."""
    out = []
    for v in values or []:
        if v is not None and v not in out:
            out.append(v)
    return out


def image_list(values):
    """A list<string> or list<struct{image_path}> cell -> normalised paths, deduplicated."""
    out = []
    for v in values or []:
        if isinstance(v, dict):
            v = v.get("image_path")
        if v is None:
            continue
        if not isinstance(v, str):
            sys.exit(f"error: unexpected image entry {v!r}")
        v = norm_path(v)
        if v not in out:
            out.append(v)
    return out


def load_domain(root, domain):
    def f(config):
        return root / config / f"{domain}.parquet"

    docs = read_columns(f("documents"), ["id"])["id"]
    images = [norm_path(p) for p in read_columns(f("document_images"), ["path"])["path"]]
    ex = read_columns(f("examples"), QUERY_COLS)
    mm = read_columns(f("examples_multimodal"), QUERY_COLS + ("positive_images", "negative_images"))
    t1 = [
        {"id": q, "gold": str_list(g), "neg": str_list(n)}
        for q, g, n in zip(ex["id"], ex["gold_ids"], ex["negative_ids"])
    ]
    mmq = [
        {"id": q, "gold": str_list(g), "neg": str_list(n),
         "pos_img": image_list(pi), "neg_img": image_list(ni)}
        for q, g, n, pi, ni in zip(mm["id"], mm["gold_ids"], mm["negative_ids"],
                                   mm["positive_images"], mm["negative_images"])
    ]
    return docs, images, t1, mmq


def check_id(s, what):
    if not s or any(c.isspace() for c in s):
        sys.exit(f"error: {what} {s!r} is empty or contains whitespace; cannot write TREC lines")


class TaskOut:
    """Qrels and exclusions of one task/protocol, over all domains."""

    def __init__(self):
        self.qrels = []        # (qid, docid, grade)
        self.exclusions = []   # (qid, docid)

    def add_query(self, qid, qrels, excl, stats):
        """qrels: dict docid -> grade (> 0); excl: set of docids. Drops empty queries."""
        stats["queries"] += 1
        if not qrels:
            stats["dropped_queries"] += 1
            stats["dropped_query_ids"].append(qid)
            return
        stats["judged_queries"] += 1
        check_id(qid, "query id")
        for d, g in qrels.items():
            check_id(d, "doc id")
            stats["qrels_per_grade"][str(g)] = stats["qrels_per_grade"].get(str(g), 0) + 1
            self.qrels.append((qid, d, g))
        for d in excl:
            check_id(d, "doc id")
            self.exclusions.append((qid, d))
        stats["exclusions"] += len(excl)

    def write(self, out_dir, name):
        qr = sorted(set(self.qrels))
        if len({(q, d) for q, d, _ in qr}) != len(qr):
            sys.exit(f"error: {name}: a (qid, docid) has two grades")
        with open(out_dir / f"{name}.qrels", "w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(f"{q} 0 {d} {g}\n" for q, d, g in qr)
        with open(out_dir / f"{name}.exclusions", "w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(f"{q} {d}\n" for q, d in sorted(set(self.exclusions)))


def new_stats():
    return {"queries": 0, "judged_queries": 0, "dropped_queries": 0, "dropped_query_ids": [],
            "qrels_per_grade": {}, "exclusions": 0}


def process_domain(domain, docs, images, t1, mmq, outs):
    doc_set = set(docs)
    img_set = set(images)
    summary = {"passages": len(docs), "document_images": len(images)}

    # ---- consistency between examples and examples_multimodal (informational)
    ex_by_id = {q["id"]: q for q in t1}
    summary["examples_vs_multimodal_differences"] = sorted(
        [q["id"] for q in mmq if q["id"] not in ex_by_id
         or ex_by_id[q["id"]]["gold"] != q["gold"] or ex_by_id[q["id"]]["neg"] != q["neg"]]
        + [q for q in ex_by_id if q not in {m["id"] for m in mmq}])

    # ---- Tasks 1 and 2: passages
    for task, queries in (("task1", t1), ("task2", mmq)):
        st = new_stats()
        st["candidates"] = len(doc_set)
        st["gold_ids_missing_from_corpus"] = 0
        st["negative_ids_also_gold"] = 0
        st["negative_ids_missing_from_corpus"] = 0
        for q in queries:
            qrels = {g: 1 for g in q["gold"]}
            excl = set(q["neg"])
            if qrels:
                st["gold_ids_missing_from_corpus"] += sum(g not in doc_set for g in qrels)
                st["negative_ids_also_gold"] += len(excl & set(qrels))
                st["negative_ids_missing_from_corpus"] += sum(n not in doc_set for n in excl)
            outs[task].add_query(q["id"], qrels, excl, st)
        summary[task] = st

    # ---- Task 3: images
    st = new_stats()
    st["candidates"] = len(img_set)
    st["positives_missing_from_candidates"] = 0
    for q in mmq:
        qrels = {p: 1 for p in q["pos_img"]}
        st["positives_missing_from_candidates"] += sum(p not in img_set for p in qrels)
        outs["task3"].add_query(q["id"], qrels, set(), st)
    summary["task3"] = st

    # ---- Task 4: candidate pairs
    key_to_passages, key_to_images = {}, {}
    for pid in docs:
        k = passage_key(pid)
        if k is not None:
            key_to_passages.setdefault(k, []).append(pid)
    for img in images:
        k = image_key(img, domain)
        if k is not None:
            key_to_images.setdefault(k, []).append(img)
    candidates = {f"{pid}{SEP}{NO_IMAGE}" for pid in docs}
    for k, pids in key_to_passages.items():
        for pid in pids:
            for img in key_to_images.get(k, []):
                candidates.add(f"{pid}{SEP}{img}")
    summary["passages_without_key"] = sum(passage_key(p) is None for p in docs)
    summary["images_without_key"] = sum(image_key(i, domain) is None for i in images)
    summary["images_whose_key_matches_no_passage"] = sorted(
        i for i in images if image_key(i, domain) not in key_to_passages)

    # Task 4, paper protocol
    st = new_stats()
    st.update({"candidates": len(candidates), "orphan_positive_images": 0,
               "orphan_positive_image_list": [], "positive_pairs_missing_from_candidates": 0,
               "positive_pairs_missing_list": [], "images_both_positive_and_negative": 0,
               "images_both_positive_and_negative_list": [],
               "negative_images_without_candidate_pair": 0})
    for q in mmq:
        qid = q["id"]
        pos = q["pos_img"]
        both = [i for i in q["neg_img"] if i in pos]
        st["images_both_positive_and_negative"] += len(both)
        st["images_both_positive_and_negative_list"] += [f"{qid} {i}" for i in both]
        negs = [i for i in q["neg_img"] if i not in pos]
        qrels = {f"{g}{SEP}{NO_IMAGE}": 1 for g in q["gold"]}
        for img in pos:
            k = image_key(img, domain)
            golds = [g for g in q["gold"] if k is not None and passage_key(g) == k]
            if not golds:
                st["orphan_positive_images"] += 1
                st["orphan_positive_image_list"].append(f"{qid} {img}")
                continue
            for g in golds:
                qrels[f"{g}{SEP}{img}"] = 2
        excl = set()
        for img in negs:
            pairs = {f"{pid}{SEP}{img}" for pid in key_to_passages.get(image_key(img, domain), [])}
            pairs &= candidates
            if not pairs:
                st["negative_images_without_candidate_pair"] += 1
            excl |= pairs
        assert not (excl & set(qrels)), (qid, excl & set(qrels))
        if qrels:
            missing = sorted(d for d in qrels if d not in candidates)
            st["positive_pairs_missing_from_candidates"] += len(missing)
            st["positive_pairs_missing_list"] += [f"{qid} {d}" for d in missing]
        outs["task4.paper"].add_query(qid, qrels, excl, st)
    summary["task4.paper"] = st

    # Task 4, legacy protocol
    st = new_stats()
    st["candidates"] = len(candidates)
    for q in mmq:
        qrels = {}
        for g in q["gold"]:
            if g not in doc_set:
                continue
            qrels[f"{g}{SEP}{NO_IMAGE}"] = 1
            for img in key_to_images.get(passage_key(g), []) if passage_key(g) else []:
                qrels[f"{g}{SEP}{img}"] = 1
        outs["task4.legacy"].add_query(q["id"], qrels, set(), st)
    summary["task4.legacy"] = st
    return summary


def main():
    ap = argparse.ArgumentParser(
        description="Build MM-BRIGHT qrels/exclusions for Tasks 1-4 (paper and legacy Task 4 "
                    "protocols) from a corpus in hub layout, following "
                    "shared/docs/mm-bright-protocol.md. See the module docstring for every "
                    "interpretation choice.")
    ap.add_argument("corpus_dir", type=Path,
                    help="directory with documents/, examples/, examples_multimodal/, "
                         "document_images/ ({domain}.parquet each)")
    ap.add_argument("out_dir", type=Path, help="output directory (created if needed)")
    ap.add_argument("--domains", nargs="+", default=None,
                    help="domains to process (default: every examples_multimodal/*.parquet)")
    args = ap.parse_args()

    root = args.corpus_dir
    domains = args.domains or sorted(p.stem for p in (root / "examples_multimodal").glob("*.parquet"))
    if not domains:
        sys.exit(f"error: no domains found under {root / 'examples_multimodal'}")
    for d in domains:
        for c in CONFIGS:
            if not (root / c / f"{d}.parquet").is_file():
                sys.exit(f"error: missing {root / c / (d + '.parquet')}")

    names = ("task1", "task2", "task3", "task4.paper", "task4.legacy")
    outs = {n: TaskOut() for n in names}
    per_domain = {}
    for d in domains:
        per_domain[d] = process_domain(d, *load_domain(root, d), outs)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    for n in names:
        outs[n].write(args.out_dir, n)

    totals = {}
    for n in names:
        t = {"queries": 0, "judged_queries": 0, "dropped_queries": 0, "qrels_per_grade": {},
             "exclusions": 0}
        for s in per_domain.values():
            for k in ("queries", "judged_queries", "dropped_queries", "exclusions"):
                t[k] += s[n][k]
            for g, c in s[n]["qrels_per_grade"].items():
                t["qrels_per_grade"][g] = t["qrels_per_grade"].get(g, 0) + c
        totals[n] = t
    summary = {
        "generator": "eval/reference/mmbright_qrels.py",
        "protocol_doc": "shared/docs/mm-bright-protocol.md",
        "corpus_dir": os.path.normpath(str(root)),
        "domains": per_domain,
        "totals": totals,
    }
    with open(args.out_dir / "summary.json", "w", encoding="utf-8", newline="\n") as fh:
        json.dump(summary, fh, indent=2, sort_keys=True)
        fh.write("\n")
    for n in names:
        t = totals[n]
        print(f"{n:13s} queries={t['queries']} judged={t['judged_queries']} "
              f"dropped={t['dropped_queries']} grades={t['qrels_per_grade']} "
              f"exclusions={t['exclusions']}")


if __name__ == "__main__":
    main()
