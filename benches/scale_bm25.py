#!/usr/bin/env python3
"""BM25 at MM-BRIGHT's real scale for one physics-sized domain: Sift vs Anserini vs bm25s.

Usage (from the repository root):
    python3 -m benches.scale_bm25 --out eval/results/scale_physics
    python3 -m benches.scale_bm25 --passages 20000 --out target/scale/quick   # a quick check

Data (not timed): a synthetic MM-BRIGHT-layout domain from benches/make_synthetic_corpus.py,
generated under --data (default target/scale/<domain>-<passages>) when absent: 338,000
passages, 100 queries of 245 words, 1,001 corpus images, Task 4 candidates planned to be
358,816 (= passages + passage-image pairs; physics' counts). With --passages N the images and
image pairs are scaled by N / 338,000. The passages and queries are then exported once to what
each peer reads (under --work): Anserini's JsonCollection ({"id", "contents"} JSONL, split
into --shards files, because IndexCollection parallelises over input files) and a TSV of the
topics; bm25s reads the same JSONL and TSV. A copy of the corpus with only the first query
(parquet files of passages and images linked, not copied) gives the one-query runs.

Timed, each tool in a fresh process, in the order Sift, Anserini, bm25s, Sift, ... for
--rounds rounds (medians reported; ratio = peer time / Sift time, > 1 means Sift is ahead):
  index   Sift:     sift index --corpus DATA --index IDX --threads T          (parquet -> index)
          Anserini: IndexCollection -collection JsonCollection -threads T       (JSONL -> Lucene)
          bm25s:    read JSONL, bm25s.tokenize (English stop words, PyStemmer english),
                    BM25(method="lucene", k1=0.9, b=0.4, backend="numba").index, save to disk
  search  top --top-k per query for the 100 queries, end to end per process:
          Sift:     sift eval --task 1 --retriever bm25 --json --run-out RUN, with --bm25 lucene
                    (Lucene's BM25Similarity, what Anserini computes) and with the default
                    --bm25 reference (the MM-BRIGHT reference scoring); the eval includes
                    opening the index, reading the queries and qrels, scoring nDCG
          Anserini: SearchCollection -bm25 -bm25.k1 0.9 -bm25.b 0.4 -hits K -threads T
          bm25s:    BM25.load + tokenize the queries + retrieve(k=K, n_threads=T) + write run
        Search time alone: every search is also run with 1 query; (time with 100 queries -
        time with 1 query) / 99 is the time of one more query, which leaves out process
        start, JVM/numba warm-up, opening/loading the index and the per-run fixed costs.
        bm25s also reports its in-process tokenize + retrieve time.
Every process runs with RAYON_NUM_THREADS=NUMBA_NUM_THREADS=OMP_NUM_THREADS=T and its peak
RSS is read from wait4(2). Then (Sift only):
  - nDCG@10 of every tool's last Task 1 run, scored by `sift eval --run --qrels --exclude`
    against the qrels and exclusions (the queries' negative_ids) that `sift eval --qrels-out`
    writes; and the overlap of Sift's --bm25 lucene run with Anserini's (same top 10, top K);
  - /usr/bin/time -v sift eval --task all --retriever bm25 --out DIR --json: peak RSS;
  - Task 4 vs Task 1 per query: --task 4 and --task 1 with 100 and with 1 query, per round;
  - with --multi (default on): a corpus of 3 domains of --multi-passages each (one corpus
    dir), indexed and evaluated (--task all) with /usr/bin/time -v, and its first domain
    alone (--domains), to show that peak memory follows the largest domain, not the corpus.

Writes <out>.json (machine, versions, date, every command, every raw round, medians, ratios)
and <out>.md. Needs: a release build of sift (--sift, default target/release/sift), Java 21+
(--java), Anserini's fat jar (--jar), and benches/requirements-scale.txt.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benches.benchlib import machine, script_argv

REPO = Path(__file__).resolve().parent.parent
GEN = REPO / "benches" / "make_synthetic_corpus.py"
FULL = {"passages": 338_000, "images": 1_001, "pairs": 358_816}
DEFAULT_JAR = "/tmp/pyserini/pyserini-1.6.0/pyserini/resources/jars/anserini-1.7.1-fatjar.jar"
DEFAULT_JAVA = "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java"
PY_PKGS = ["bm25s", "PyStemmer", "numba", "numpy", "scipy", "pyarrow", "pillow"]
K1, B = 0.9, 0.4


# --------------------------------------------------------------------------- bm25s peer
# Run in a fresh process: `python3 -m benches.scale_bm25 _bm25s-index ...` / `_bm25s-search ...`
# (from the repository root); prints one JSON object of in-process timings.


def _read_collection(coll: Path) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    for f in sorted(coll.glob("*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                d = json.loads(line)
                ids.append(d["id"])
                texts.append(d["contents"])
    return ids, texts


def _read_topics(path: Path) -> tuple[list[str], list[str]]:
    qids, texts = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            qid, text = line.rstrip("\n").split("\t", 1)
            qids.append(qid)
            texts.append(text)
    return qids, texts


def bm25s_index(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python3 -m benches.scale_bm25 _bm25s-index")
    ap.add_argument("--collection", type=Path, required=True)
    ap.add_argument("--index", type=Path, required=True)
    a = ap.parse_args(argv)
    t = {}
    t0 = time.perf_counter()
    import bm25s
    import Stemmer

    t["import_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids, texts = _read_collection(a.collection)
    t["read_s"] = time.perf_counter() - t0
    stemmer = Stemmer.Stemmer("english")
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    t["tokenize_s"] = time.perf_counter() - t0
    del texts
    t0 = time.perf_counter()
    retriever = bm25s.BM25(method="lucene", k1=K1, b=B, backend="numba")
    retriever.index(tokens, show_progress=False)
    t["index_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever.save(str(a.index))
    with open(a.index / "ids.json", "w", encoding="utf-8") as f:
        json.dump(ids, f)
    t["save_s"] = time.perf_counter() - t0
    print(json.dumps({"docs": len(ids), "vocab": len(retriever.vocab_dict), **t}))


def bm25s_search(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python3 -m benches.scale_bm25 _bm25s-search")
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--topics", type=Path, required=True)
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    t = {}
    t0 = time.perf_counter()
    import bm25s
    import Stemmer

    t["import_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever = bm25s.BM25.load(str(a.index), backend="numba", show_progress=False)
    with open(a.index / "ids.json", encoding="utf-8") as f:
        ids = json.load(f)
    qids, qtexts = _read_topics(a.topics)
    t["load_s"] = time.perf_counter() - t0
    stemmer = Stemmer.Stemmer("english")
    # numba compiles the retrieval on its first call (seconds): a one-token query first, timed
    # apart, so that tokenize_s + retrieve_s is the search of the queries alone
    t0 = time.perf_counter()
    warm = bm25s.tokenize(qtexts[:1], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    retriever.retrieve([warm[0][:1]], k=1, n_threads=a.threads, show_progress=False)
    t["warmup_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    qtok = bm25s.tokenize(qtexts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    t["tokenize_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    docs, scores = retriever.retrieve(qtok, k=min(a.k, len(ids)), n_threads=a.threads, show_progress=False)
    t["retrieve_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with open(a.run, "w", encoding="utf-8") as f:
        for qi, qid in enumerate(qids):
            for rank, (d, s) in enumerate(zip(docs[qi], scores[qi]), 1):
                if s <= 0:
                    break
                f.write(f"{qid} Q0 {ids[int(d)]} {rank} {float(s):.6f} bm25s\n")
    t["write_s"] = time.perf_counter() - t0
    print(json.dumps({"queries": len(qids), **t}))


# --------------------------------------------------------------------------- helpers


def log(msg: str) -> None:
    print(f"[{_dt.datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def run_timed(cmd: list[str], env: dict, log_path: Path, cwd: Path = REPO) -> dict:
    """Runs cmd, stdout+stderr to log_path; wall time (perf_counter around the process), and
    user/sys CPU and peak RSS of the command as /usr/bin/time reads them from wait4 (not this
    driver's own wait4: a forked child's high-water mark would include the driver's pages)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stats = log_path.with_suffix(".time")
    load_before = loadavg()
    with open(log_path, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-o", str(stats), "-f", "%e %U %S %M"] + cmd, env=env, cwd=cwd,
                           stdout=out, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - t0
    fields = stats.read_text().split()[-4:]
    res = {
        "cmd": shlex.join(cmd),
        "wall_s": wall,
        "user_s": float(fields[1]),
        "sys_s": float(fields[2]),
        "max_rss_mib": int(fields[3]) / 1024.0,
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": loadavg(),
        "log": str(log_path),
    }
    if p.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise SystemExit(f"command failed ({p.returncode}): {res['cmd']}\n{tail}")
    return res


def loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def last_json(text: str) -> dict:
    s = text.strip()
    if s.startswith("{"):
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            pass
    # a pretty-printed object at the end
    i = s.rfind("\n{")
    while i >= 0:
        try:
            return json.loads(s[i + 1 :])
        except json.JSONDecodeError:
            i = s.rfind("\n{", 0, i)
    for line in reversed(s.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON object in output")


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gen_corpus(out: Path, domain: str, passages: int, images: int, pairs: int, queries: int,
               query_words: int, seed: int) -> list[str]:
    cmd = [sys.executable, str(GEN), "--out", str(out), "--domain", domain, "--passages", str(passages),
           "--queries", str(queries), "--images", str(images), "--query-words", str(query_words),
           "--task4-pairs", str(pairs), "--seed", str(seed)]
    if not (out / "documents" / f"{domain}.parquet").exists():
        log("generating: " + shlex.join(cmd))
        subprocess.run(cmd, check=True, cwd=REPO)
    return cmd


def count_pairs(data: Path, domain: str) -> dict:
    """Task 4 candidates counted from the parquet files (the protocol's base-key regexes)."""
    import pyarrow.parquet as pq

    ids = pq.read_table(data / "documents" / f"{domain}.parquet", columns=["id"]).column("id").to_pylist()
    paths = pq.read_table(data / "document_images" / f"{domain}.parquet", columns=["path"]).column("path").to_pylist()
    pid_re = re.compile(r"/([0-9a-f]+)_\d+\.txt$")
    img_re = re.compile(re.escape(domain) + r"_([0-9a-f]+)_\d+")
    chunks: dict[str, int] = {}
    for i in ids:
        m = pid_re.search(i)
        if m:
            chunks[m.group(1)] = chunks.get(m.group(1), 0) + 1
    image_pairs = 0
    for p in paths:
        m = img_re.search(p)
        if m:
            image_pairs += chunks.get(m.group(1), 0)
    return {"passages": len(ids), "images": len(paths), "image_pairs": image_pairs,
            "task4_pairs": len(ids) + image_pairs}


def export(data: Path, domain: str, work: Path, shards: int) -> dict:
    """JSONL collection (Anserini, bm25s), topics TSV (all and the first query), and a
    one-query copy of the corpus for Sift. Not timed."""
    import pyarrow.parquet as pq

    coll = work / "collection"
    done = work / "export.json"
    if done.exists():
        return json.loads(done.read_text())
    shutil.rmtree(coll, ignore_errors=True)
    coll.mkdir(parents=True)
    docs = pq.read_table(data / "documents" / f"{domain}.parquet")
    ids, texts = docs.column("id").to_pylist(), docs.column("content").to_pylist()
    files = [open(coll / f"docs{i:02}.jsonl", "w", encoding="utf-8") for i in range(shards)]
    per = -(-len(ids) // shards)
    for n, (i, t) in enumerate(zip(ids, texts)):
        files[n // per].write(json.dumps({"id": i, "contents": t}, ensure_ascii=False) + "\n")
    for f in files:
        f.close()
    ex = pq.read_table(data / "examples" / f"{domain}.parquet")
    qids, qtexts = ex.column("id").to_pylist(), ex.column("query").to_pylist()
    for name, n in (("topics.tsv", len(qids)), ("topics-1.tsv", 1)):
        with open(work / name, "w", encoding="utf-8") as f:
            for q, t in list(zip(qids, qtexts))[:n]:
                f.write(f"{q}\t{' '.join(t.split())}\n")
    one = work / "corpus-1q"
    shutil.rmtree(one, ignore_errors=True)
    for sub in ("documents", "document_images", "examples_images"):
        (one / sub).mkdir(parents=True)
        os.symlink((data / sub / f"{domain}.parquet").resolve(), one / sub / f"{domain}.parquet")
    for sub in ("examples", "examples_multimodal"):
        (one / sub).mkdir(parents=True)
        t = pq.read_table(data / sub / f"{domain}.parquet")
        pq.write_table(t.slice(0, 1), one / sub / f"{domain}.parquet")
    info = {"collection_files": shards, "docs": len(ids), "queries": len(qids)}
    done.write_text(json.dumps(info))
    return info


def time_v(cmd: list[str], env: dict, log_path: Path) -> dict:
    """run_timed, and `/usr/bin/time -v` around the command, its report kept in the log."""
    res = run_timed(["/usr/bin/time", "-v"] + cmd, env, log_path)
    text = log_path.read_text(errors="replace")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    res["time_v_max_rss_mib"] = int(m.group(1)) / 1024.0 if m else None
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    res["time_v_elapsed"] = m.group(1) if m else None
    return res


def read_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    with open(path) as f:
        for line in f:
            q, _, d, _, s, *_ = line.split()
            out.setdefault(q, []).append((d, float(s)))
    return out


def overlap(a_path: Path, b_path: Path, k: int) -> dict:
    a, b = read_run(a_path), read_run(b_path)
    top10, topk, same_order10, maxdiff = [], [], 0, 0.0
    for q in a:
        ra, rb = a[q], b.get(q, [])
        top10.append(len({d for d, _ in ra[:10]} & {d for d, _ in rb[:10]}) / max(1, min(10, len(ra))))
        topk.append(len({d for d, _ in ra[:k]} & {d for d, _ in rb[:k]}) / max(1, min(k, len(ra))))
        same_order10 += [d for d, _ in ra[:10]] == [d for d, _ in rb[:10]]
        sb = dict(rb)
        for d, s in ra[:10]:
            if d in sb:
                maxdiff = max(maxdiff, abs(s - sb[d]))
    return {"queries": len(a), "mean_top10_overlap": statistics.mean(top10),
            "mean_topk_overlap": statistics.mean(topk), "queries_same_top10_order": same_order10,
            "max_abs_score_diff_top10": maxdiff}


# --------------------------------------------------------------------------- main


def versions(sift: Path, java: str, jar: str) -> dict:
    import importlib.metadata as m

    pk = {}
    for p in PY_PKGS:
        try:
            pk[p] = m.version(p)
        except m.PackageNotFoundError:
            pk[p] = None
    def git(*a):
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--", "crates", "Cargo.toml", "Cargo.lock")
    return {
        "sift": subprocess.run([str(sift), "--version"], capture_output=True, text=True).stdout.strip(),
        "sift_binary": str(sift),
        "sift_binary_sha256": sha256(sift),
        "sift_binary_mtime": _dt.datetime.fromtimestamp(sift.stat().st_mtime, _dt.timezone.utc).isoformat(),
        "git_head": git("rev-parse", "HEAD"),
        "git_uncommitted_in_crates": dirty.splitlines(),
        "java": subprocess.run([java, "-version"], capture_output=True, text=True).stderr.strip().splitlines(),
        "anserini_jar": os.path.basename(jar),
        "python": platform.python_version(),
        "python_packages": pk,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_bm25s-index":
        return bm25s_index(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "_bm25s-search":
        return bm25s_search(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    ap.add_argument("--data", type=Path, help="corpus dir [default: target/scale/DOMAIN-PASSAGES]")
    ap.add_argument("--work", type=Path, help="exports, indexes, runs, logs [default: DATA-work]")
    ap.add_argument("--domain", default="physics")
    ap.add_argument("--passages", type=int, default=FULL["passages"])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--query-words", type=int, default=245)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top-k", type=int, default=1000)
    ap.add_argument("--shards", type=int, default=8, help="JSONL files of the exported collection")
    ap.add_argument("--sift", type=Path, default=REPO / "target" / "release" / "sift")
    ap.add_argument("--jar", default=DEFAULT_JAR, help="Anserini fat jar")
    ap.add_argument("--java", default=DEFAULT_JAVA, help="Java 21+")
    ap.add_argument("--tools", default="sift,anserini,bm25s", help="comma-separated subset")
    ap.add_argument("--multi", action=argparse.BooleanOptionalAction, default=True,
                    help="also the 3-domain memory check")
    ap.add_argument("--multi-passages", type=int, help="passages per domain [default: 110,000 x passages / 338,000]")
    ap.add_argument("--report-from", type=Path, metavar="JSON",
                    help="run nothing: rewrite OUT.md (and OUT.json's summary) from this JSON of an earlier run")
    a = ap.parse_args()
    if a.report_from:
        report = json.loads(a.report_from.read_text())
        st = report["settings"]
        for k in ("threads", "top_k", "rounds", "domain", "queries"):
            setattr(a, k, st.get(k, getattr(a, k)))
        tools = st.get("tools", a.tools).split(",")
        search_tools = []
        for t in tools:
            search_tools += ["sift-lucene", "sift-reference"] if t == "sift" else [t]
        summarise(report, tools, search_tools, a)
        a.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        a.out.with_suffix(".md").write_text(markdown(report, a, search_tools))
        print(a.out.with_suffix(".md").read_text())
        return

    scale = a.passages / FULL["passages"]
    images = max(1, round(FULL["images"] * scale))
    pairs = a.passages + max(images, round((FULL["pairs"] - FULL["passages"]) * scale))
    data = a.data or REPO / "target" / "scale" / f"{a.domain}-{a.passages}"
    work = a.work or data.with_name(data.name + "-work")
    work.mkdir(parents=True, exist_ok=True)
    tools = a.tools.split(",")
    T = str(a.threads)
    env = dict(os.environ, RAYON_NUM_THREADS=T, NUMBA_NUM_THREADS=T, OMP_NUM_THREADS=T,
               OPENBLAS_NUM_THREADS=T, MKL_NUM_THREADS=T)
    sift = a.sift.resolve()
    if not sift.exists():
        raise SystemExit(f"no sift binary at {sift}: cargo build --release -p sift-cli")
    started = _dt.datetime.now(_dt.timezone.utc)
    report: dict = {
        "date_utc": started.isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable] + script_argv()),
        "machine": machine(),
        "versions": versions(sift, a.java, a.jar),
        "settings": {"threads": a.threads, "top_k": a.top_k, "rounds": a.rounds, "k1": K1, "b": B,
                     "domain": a.domain, "queries": a.queries, "tools": a.tools,
                     "env": {k: env[k] for k in ("RAYON_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}},
        "raw": [],
    }
    out_json, out_md = a.out.with_suffix(".json"), a.out.with_suffix(".md")
    out_json.parent.mkdir(parents=True, exist_ok=True)

    def save():
        out_json.write_text(json.dumps(report, indent=1) + "\n")

    # ---- data
    report["data"] = {"dir": str(data), "generator": gen_corpus(data, a.domain, a.passages, images, pairs,
                                                                 a.queries, a.query_words, a.seed)}
    report["data"].update(count_pairs(data, a.domain))
    report["data"]["queries"] = a.queries
    report["data"]["query_words"] = a.query_words
    report["data"]["export"] = export(data, a.domain, work, a.shards)
    log(f"data: {report['data']}")
    # page cache: read everything once
    for f in list(data.rglob("*.parquet")) + list((work / "collection").glob("*")):
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass

    coll = work / "collection"
    idx = {"sift": work / "idx-sift", "anserini": work / "idx-anserini", "bm25s": work / "idx-bm25s"}
    java = [a.java, "-cp", a.jar]

    def index_cmd(tool: str) -> list[str]:
        if tool == "sift":
            return [str(sift), "index", "--corpus", str(data), "--index", str(idx["sift"]), "--threads", T,
                    "--json", "-q"]
        if tool == "anserini":
            return java + ["io.anserini.index.IndexCollection", "-collection", "JsonCollection", "-input", str(coll),
                           "-index", str(idx["anserini"]), "-generator", "DefaultLuceneDocumentGenerator",
                           "-threads", T]
        return [sys.executable, "-m", "benches.scale_bm25", "_bm25s-index", "--collection", str(coll),
                "--index", str(idx["bm25s"])]

    def record(entry: dict) -> dict:
        report["raw"].append(entry)
        save()
        return entry

    # ---- index rounds
    for r in range(1, a.rounds + 1):
        for tool in tools:
            shutil.rmtree(idx[tool], ignore_errors=True)
            res = run_timed(index_cmd(tool), env, work / "logs" / f"index-{tool}-r{r}.log")
            res.update(tool=tool, phase="index", round=r, index_bytes=du(idx[tool]))
            text = Path(res["log"]).read_text(errors="replace")
            if tool in ("sift", "bm25s"):
                res["reported"] = last_json(text)
            else:
                mm = re.search(r"Total ([\d,]+) documents indexed in (\S+)", text)
                if mm:
                    res["reported"] = {"documents": int(mm.group(1).replace(",", "")), "time": mm.group(2)}
            log(f"index {tool} r{r}: {res['wall_s']:.1f} s, {res['max_rss_mib']:.0f} MiB")
            record(res)

    # ---- qrels (Sift writes them; not timed)
    qrels = work / "qrels" / "task1.qrels"
    qrels.parent.mkdir(parents=True, exist_ok=True)
    if "sift" in tools:
        run_timed([str(sift), "eval", "--corpus", str(data), "--index", str(idx["sift"]), "--task", "1",
                   "--retriever", "bm25", "--qrels-out", str(qrels), "--json", "-q"], env,
                  work / "logs" / "qrels.log")

    runs = work / "runs"
    runs.mkdir(exist_ok=True)
    search_tools = []
    for t in tools:
        search_tools += ["sift-lucene", "sift-reference"] if t == "sift" else [t]

    def search_cmd(tool: str, nq: int, run: Path, task: str = "1") -> list[str]:
        corpus = data if nq > 1 else work / "corpus-1q"
        topics = work / ("topics.tsv" if nq > 1 else "topics-1.tsv")
        if tool.startswith("sift"):
            cmd = [str(sift), "eval", "--corpus", str(corpus), "--index", str(idx["sift"]), "--task", task,
                   "--retriever", "bm25", "--top-k", str(a.top_k), "--json", "-q", "--run-out", str(run)]
            return cmd + (["--bm25", "lucene"] if tool == "sift-lucene" else [])
        if tool == "anserini":
            return java + ["io.anserini.search.SearchCollection", "-index", str(idx["anserini"]), "-topics",
                           str(topics), "-topicReader", "TsvString", "-output", str(run), "-bm25", "-bm25.k1",
                           str(K1), "-bm25.b", str(B), "-hits", str(a.top_k), "-threads", T]
        return [sys.executable, "-m", "benches.scale_bm25", "_bm25s-search", "--index", str(idx["bm25s"]),
                "--topics", str(topics), "--run", str(run), "--k", str(a.top_k), "--threads", T]

    # ---- search rounds
    for r in range(1, a.rounds + 1):
        for tool in search_tools:
            for nq in (a.queries, 1):
                run = runs / f"{tool}-q{nq}-r{r}.txt"
                res = run_timed(search_cmd(tool, nq, run), env, work / "logs" / f"search-{tool}-q{nq}-r{r}.log")
                res.update(tool=tool, phase="search", round=r, queries=nq, run=str(run))
                text = Path(res["log"]).read_text(errors="replace")
                if tool == "bm25s":
                    res["reported"] = last_json(text)
                elif tool.startswith("sift"):
                    res["reported_ndcg@10"] = last_json(text)["metrics"]["ndcg@10"]
                else:
                    mm = re.search(r"queries processed in (\S+) = ~([\d.]+) q/s", text)
                    if mm:
                        res["reported"] = {"search_time": mm.group(1), "qps": float(mm.group(2))}
                log(f"search {tool} q{nq} r{r}: {res['wall_s']:.2f} s, {res['max_rss_mib']:.0f} MiB")
                record(res)

    # ---- nDCG@10 of each tool's last 100-query run, and Sift-lucene vs Anserini agreement
    quality = {}
    if "sift" in tools:
        for tool in search_tools:
            run = runs / f"{tool}-q{a.queries}-r{a.rounds}.txt"
            p = subprocess.run([str(sift), "eval", "--run", str(run), "--qrels", str(qrels), "--exclude",
                                str(qrels) + ".exclusions", "--json", "-q"], capture_output=True, text=True, check=True)
            m = last_json(p.stdout)["metrics"]
            quality[tool] = {k: m[k] for k in ("ndcg@10", "recall@100", "mrr") if k in m}
        if "anserini" in tools:
            quality["sift-lucene_vs_anserini"] = overlap(runs / f"sift-lucene-q{a.queries}-r{a.rounds}.txt",
                                                         runs / f"anserini-q{a.queries}-r{a.rounds}.txt", a.top_k)
    report["quality"] = quality
    save()

    # ---- Sift: Task 4 vs Task 1, memory of --task all
    if "sift" in tools:
        for r in range(1, a.rounds + 1):
            for task in ("4", "1"):
                for nq in (a.queries, 1):
                    run = runs / f"sift-task{task}-q{nq}-r{r}.txt"
                    res = run_timed(search_cmd("sift-reference", nq, run, task), env,
                                    work / "logs" / f"task{task}-q{nq}-r{r}.log")
                    res.update(tool="sift-reference", phase=f"task{task}", round=r, queries=nq)
                    log(f"task {task} q{nq} r{r}: {res['wall_s']:.2f} s")
                    record(res)
        outdir = work / "eval-all"
        shutil.rmtree(outdir, ignore_errors=True)
        res = time_v([str(sift), "eval", "--corpus", str(data), "--index", str(idx["sift"]), "--task", "all",
                      "--retriever", "bm25", "--out", str(outdir), "--json", "-q"], env, work / "logs" / "task-all.log")
        res.update(tool="sift-reference", phase="task-all", round=1, queries=a.queries, domains=1,
                   passages=report["data"]["passages"])
        record(res)
        log(f"task all: {res['wall_s']:.1f} s, peak RSS {res['time_v_max_rss_mib']:.0f} MiB")
        try:
            allres = json.loads((outdir / "results.json").read_text())
            report["task_all_results"] = allres
        except (OSError, json.JSONDecodeError):
            pass

    # ---- 3 domains in one corpus
    if "sift" in tools and a.multi:
        per = a.multi_passages or max(1000, round(110_000 * scale))
        s3 = per / FULL["passages"]
        im3 = max(1, round(FULL["images"] * s3))
        pr3 = per + max(im3, round((FULL["pairs"] - FULL["passages"]) * s3))
        mdata = data.with_name(f"multi3-{per}")
        names = [f"multi{i}" for i in range(3)]
        gens = [gen_corpus(mdata, n, per, im3, pr3, a.queries, a.query_words, a.seed + 100 + i)
                for i, n in enumerate(names)]
        midx = work / "idx-multi3"
        multi = {"dir": str(mdata), "domains": names, "generator": gens,
                 "counts": {n: count_pairs(mdata, n) for n in names}}
        for name, dom_args in (("3 domains", []), (f"1 domain ({names[0]})", ["--domains", names[0]])):
            ix = midx if not dom_args else work / "idx-multi1"
            shutil.rmtree(ix, ignore_errors=True)
            res = time_v([str(sift), "index", "--corpus", str(mdata), "--index", str(ix), "--threads", T, "--json",
                          "-q"] + dom_args, env, work / "logs" / f"multi-index-{len(dom_args)}.log")
            res.update(tool="sift", phase="multi-index", label=name, round=1, index_bytes=du(ix))
            record(res)
            log(f"multi index {name}: {res['wall_s']:.1f} s, peak RSS {res['time_v_max_rss_mib']:.0f} MiB")
            od = work / f"eval-multi-{len(dom_args)}"
            shutil.rmtree(od, ignore_errors=True)
            res = time_v([str(sift), "eval", "--corpus", str(mdata), "--index", str(ix), "--task", "all",
                          "--retriever", "bm25", "--out", str(od), "--json", "-q"], env,
                         work / "logs" / f"multi-eval-{len(dom_args)}.log")
            res.update(tool="sift-reference", phase="multi-task-all", label=name, round=1)
            record(res)
            log(f"multi task all {name}: {res['wall_s']:.1f} s, peak RSS {res['time_v_max_rss_mib']:.0f} MiB")
        report["multi"] = multi

    report["finished_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    summarise(report, tools, search_tools, a)
    save()
    out_md.write_text(markdown(report, a, search_tools))
    print(out_md.read_text())


def summarise(report: dict, tools: list[str], search_tools: list[str], a) -> None:
    raw = report["raw"]

    def rows(**kw):
        return [x for x in raw if all(x.get(k) == v for k, v in kw.items())]

    s: dict = {"index": {}, "search": {}, "task": {}}
    for t in tools:
        rs = rows(phase="index", tool=t)
        s["index"][t] = {"wall_s": median([x["wall_s"] for x in rs]),
                         "cpu_s": median([x["user_s"] + x["sys_s"] for x in rs]),
                         "rounds_cpu_s": [x["user_s"] + x["sys_s"] for x in rs],
                         "rounds_loadavg_before": [x.get("loadavg_1min_before") for x in rs],
                         "max_rss_mib": median([x["max_rss_mib"] for x in rs]),
                         "index_mib": median([x["index_bytes"] for x in rs]) / 2**20,
                         "rounds_wall_s": [x["wall_s"] for x in rs]}
        if t == "bm25s":
            s["index"][t]["tokenize+index_s"] = median([x["reported"]["tokenize_s"] + x["reported"]["index_s"] for x in rs])
        if t == "sift":
            s["index"][t]["reported_seconds"] = median([x["reported"].get("seconds") for x in rs])
        if t == "anserini":
            s["index"][t]["reported_time"] = [x.get("reported", {}).get("time") for x in rs]
    for t in search_tools:
        full = rows(phase="search", tool=t, queries=a.queries)
        one = rows(phase="search", tool=t, queries=1)
        marg = [(f["wall_s"] - o["wall_s"]) / (a.queries - 1) for f, o in zip(full, one)]
        e = {"wall_s": median([x["wall_s"] for x in full]), "wall_1q_s": median([x["wall_s"] for x in one]),
             "cpu_s": median([x["user_s"] + x["sys_s"] for x in full]),
             "cpu_1q_s": median([x["user_s"] + x["sys_s"] for x in one]),
             "rounds_loadavg_before": [x.get("loadavg_1min_before") for x in full],
             "per_query_s": median(marg), "max_rss_mib": median([x["max_rss_mib"] for x in full]),
             "rounds_wall_s": [x["wall_s"] for x in full], "rounds_wall_1q_s": [x["wall_s"] for x in one]}
        e["qps_end_to_end"] = a.queries / e["wall_s"]
        e["qps_search_alone"] = 1 / e["per_query_s"] if e["per_query_s"] and e["per_query_s"] > 0 else None
        if t == "anserini":
            e["reported_qps"] = median([x.get("reported", {}).get("qps") for x in full])
        if t == "bm25s":
            e["in_process_tokenize+retrieve_s"] = median([x["reported"]["tokenize_s"] + x["reported"]["retrieve_s"] for x in full])
            e["in_process_load_s"] = median([x["reported"]["load_s"] for x in full])
            e["in_process_warmup_s"] = median([x["reported"]["warmup_s"] for x in full])
            e["in_process_search_alone_qps"] = a.queries / e["in_process_tokenize+retrieve_s"]
        s["search"][t] = e
    for task in ("1", "4"):
        full = rows(phase=f"task{task}", queries=a.queries)
        one = rows(phase=f"task{task}", queries=1)
        if full:
            marg = [(f["wall_s"] - o["wall_s"]) / (a.queries - 1) for f, o in zip(full, one)]
            s["task"][task] = {"wall_s": median([x["wall_s"] for x in full]),
                               "wall_1q_s": median([x["wall_s"] for x in one]),
                               "per_query_s": median(marg),
                               "wall_per_query_s": median([x["wall_s"] for x in full]) / a.queries,
                               "max_rss_mib": median([x["max_rss_mib"] for x in full])}
    ratios = {"index": {}, "index_cpu": {}, "search_end_to_end": {}, "search_cpu": {}, "search_alone": {}}
    base_i = s["index"].get("sift", {}).get("wall_s")
    for t in tools:
        if t != "sift" and base_i:
            ratios["index"][t] = s["index"][t]["wall_s"] / base_i
            ratios["index_cpu"][t] = s["index"][t]["cpu_s"] / s["index"]["sift"]["cpu_s"]
    for base in ("sift-lucene", "sift-reference"):
        if base not in s["search"]:
            continue
        for t in search_tools:
            if t.startswith("sift"):
                continue
            ratios["search_end_to_end"][f"{t}/{base}"] = s["search"][t]["wall_s"] / s["search"][base]["wall_s"]
            ratios["search_cpu"][f"{t}/{base}"] = s["search"][t]["cpu_s"] / s["search"][base]["cpu_s"]
            pb, pt = s["search"][base]["per_query_s"], s["search"][t]["per_query_s"]
            ratios["search_alone"][f"{t}/{base}"] = pt / pb if pb and pb > 0 else None
    s["ratios"] = ratios
    report["summary"] = s


def fmt(x, nd=2):
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if abs(x) >= 100:
            return f"{x:,.0f}"
        if abs(x) >= 10:
            return f"{x:.1f}"
        if abs(x) >= 0.1:
            return f"{x:.{nd}f}"
        return f"{x:.3g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def markdown(report: dict, a, search_tools: list[str]) -> str:
    s, d, v, m = report["summary"], report["data"], report["versions"], report["machine"]
    L = []
    L.append(f"# BM25 at MM-BRIGHT scale ({a.domain}-sized synthetic domain): Sift vs Anserini vs bm25s\n")
    L.append(f"Data: {d['passages']:,} passages, {d['queries']} queries of {d['query_words']} words, "
             f"{d['images']:,} corpus images, {d['task4_pairs']:,} Task 4 candidate pairs "
             f"({d['passages']:,} passages + {d['image_pairs']:,} passage-image pairs), generated by "
             f"`{shlex.join(d['generator'][1:])}`.\n")
    L.append(f"{a.rounds} rounds, tools alternating in each (Sift, Anserini, bm25s); medians; "
             f"{a.threads} threads each; top {a.top_k} per query. Ratio = peer time / Sift time "
             "(> 1: Sift ahead).\n")
    L.append("## Index build (end to end, one process)\n")
    L.append("Wall = elapsed seconds of the process; CPU = its user + sys seconds (steadier than "
             "wall on this shared machine: see the load averages below).\n")
    L.append("| tool | wall s (median) | wall s per round | CPU s (median) | peak RSS MiB | index MiB | "
             "ratio peer/Sift, wall | ratio peer/Sift, CPU |")
    L.append("|---|---:|---|---:|---:|---:|---:|---:|")
    for t, e in s["index"].items():
        r, rc = s["ratios"]["index"].get(t), s["ratios"]["index_cpu"].get(t)
        L.append(f"| {t} | {fmt(e['wall_s'])} | {', '.join(fmt(x) for x in e['rounds_wall_s'])} | "
                 f"{fmt(e['cpu_s'])} | {fmt(e['max_rss_mib'])} | {fmt(e['index_mib'])} | "
                 f"{fmt(r) if r else '-'} | {fmt(rc) if rc else '-'} |")
    if "sift" in s["index"]:
        L.append(f"\nSift's own report (`sift index --json` seconds): {fmt(s['index']['sift']['reported_seconds'])} s.")
    if "anserini" in s["index"]:
        L.append(f"Anserini's own report (Total ... documents indexed in): {', '.join(map(str, s['index']['anserini']['reported_time']))}.")
    if "bm25s" in s["index"]:
        L.append(f"\nbm25s in-process tokenize + index (no JSON reading, no saving): "
                 f"{fmt(s['index']['bm25s']['tokenize+index_s'])} s (bm25s tokenises in one thread).\n")
    L.append("## Search, Task 1, 100 queries\n")
    L.append("End to end = one process: start, open/load the index, read the queries, search, write "
             "the run (Sift's also scores it). Search alone = (time with 100 queries - time with 1 "
             "query) / 99, per query.\n")
    L.append("| tool | e2e wall s | e2e CPU s | e2e q/s | 1-query wall s | search alone ms/query | "
             "search alone q/s | peak RSS MiB |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for t in search_tools:
        e = s["search"][t]
        L.append(f"| {t} | {fmt(e['wall_s'])} | {fmt(e['cpu_s'])} | {fmt(e['qps_end_to_end'])} | {fmt(e['wall_1q_s'])} | "
                 f"{fmt(e['per_query_s'] * 1000 if e['per_query_s'] is not None else None)} | "
                 f"{fmt(e['qps_search_alone'])} | {fmt(e['max_rss_mib'])} |")
    if "anserini" in s["search"]:
        L.append(f"\nAnserini's own report (queries processed ... q/s, the search threads only): "
                 f"{fmt(s['search']['anserini']['reported_qps'])} q/s.")
    if "bm25s" in s["search"]:
        e = s["search"]["bm25s"]
        L.append(f"\nbm25s in process: load {fmt(e['in_process_load_s'])} s; numba compilation (first "
                 f"retrieve, a one-token query) {fmt(e['in_process_warmup_s'])} s; then tokenize + retrieve "
                 f"of the {a.queries} queries {fmt(e['in_process_tokenize+retrieve_s'])} s = "
                 f"{fmt(e['in_process_search_alone_qps'])} q/s.\n")
    L.append("\nRatios peer/Sift (> 1: Sift ahead):\n")
    L.append("| pair | end to end, wall | end to end, CPU | search alone |")
    L.append("|---|---:|---:|---:|")
    for k, val in s["ratios"]["search_end_to_end"].items():
        L.append(f"| {k} | {fmt(val)} | {fmt(s['ratios']['search_cpu'].get(k))} | "
                 f"{fmt(s['ratios']['search_alone'].get(k))} |")
    L.append("\nRaw wall seconds per round (100 queries / 1 query):\n")
    for t in search_tools:
        e = s["search"][t]
        L.append(f"- {t}: {', '.join(fmt(x) for x in e['rounds_wall_s'])} / "
                 f"{', '.join(fmt(x) for x in e['rounds_wall_1q_s'])}")
    q = report.get("quality", {})
    if q:
        L.append("\n## Quality (each tool's last 100-query run, `sift eval --run --qrels --exclude`)\n")
        L.append("| tool | nDCG@10 | recall@100 | MRR |")
        L.append("|---|---:|---:|---:|")
        for t in search_tools:
            if t in q:
                L.append(f"| {t} | {q[t].get('ndcg@10', 0):.4f} | {q[t].get('recall@100', 0):.4f} | "
                         f"{q[t].get('mrr', 0):.4f} |")
        o = q.get("sift-lucene_vs_anserini")
        if o:
            L.append(f"\nSift --bm25 lucene vs Anserini: mean top-10 overlap {o['mean_top10_overlap']:.4f}, "
                     f"mean top-{a.top_k} overlap {o['mean_topk_overlap']:.4f}, identical top-10 order in "
                     f"{o['queries_same_top10_order']}/{o['queries']} queries, largest score difference in "
                     f"the top 10 {o['max_abs_score_diff_top10']:.2g}.\n")
    if s["task"]:
        L.append("## Sift: Task 4 vs Task 1 (bm25, reference scoring)\n")
        L.append("| task | wall s (100 q) | wall s / query | 1-query wall s | search alone ms/query | peak RSS MiB |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for t, e in s["task"].items():
            L.append(f"| {t} | {fmt(e['wall_s'])} | {fmt(e['wall_per_query_s'])} | {fmt(e['wall_1q_s'])} | "
                     f"{fmt(e['per_query_s'] * 1000)} | {fmt(e['max_rss_mib'])} |")
    mem = [x for x in report["raw"] if x["phase"] in ("task-all", "multi-index", "multi-task-all")]
    if mem:
        L.append("\n## Peak memory (`/usr/bin/time -v`, Maximum resident set size)\n")
        L.append("| what | corpus | wall s | peak RSS MiB |")
        L.append("|---|---|---:|---:|")
        for x in mem:
            corpus = x.get("label") or f"1 domain, {d['passages']:,} passages"
            what = {"task-all": "sift eval --task all", "multi-index": "sift index",
                    "multi-task-all": "sift eval --task all"}[x["phase"]]
            L.append(f"| {what} | {corpus} | {fmt(x['wall_s'])} | {fmt(x['time_v_max_rss_mib'])} |")
        if "multi" in report:
            c = report["multi"]["counts"]
            L.append("\n3-domain corpus: " + "; ".join(
                f"{n}: {c[n]['passages']:,} passages, {c[n]['images']} images, {c[n]['task4_pairs']:,} pairs"
                for n in c) + ".\n")
    loads = [x.get("loadavg_1min_before") for x in report["raw"] if x.get("loadavg_1min_before") is not None]
    if loads:
        L.append(f"\nMachine load (1-minute load average before each timed command; 2 CPUs): median "
                 f"{statistics.median(loads):.2f}, range {min(loads):.2f} to {max(loads):.2f} (the "
                 "benchmark's own processes count: a load near the thread count is an idle machine).\n")
    L.append("\n## Setup\n")
    # `uname -a` (reports written before benchlib: platform.uname()'s fields)
    uname = m["uname"] if isinstance(m["uname"], str) else f"{m['uname']['system']} {m['uname']['release']}"
    L.append(f"- Machine: {m.get('Model name')}, {m.get('CPU(s)')} CPUs ({m.get('Core(s) per socket')} cores "
             f"per socket, {m.get('Thread(s) per core')} thread per core, {m.get('Hypervisor vendor', 'bare')} "
             f"guest), {m.get('MemTotal')}; `{uname}`")
    pk = v["python_packages"]
    L.append(f"- Sift: {v['sift']} (`{v['sift_binary']}`, sha256 {v['sift_binary_sha256'][:16]}, built "
             f"{v['sift_binary_mtime']}; git {v['git_head'][:12]}"
             + (f", {len(v['git_uncommitted_in_crates'])} uncommitted files under crates/" if v["git_uncommitted_in_crates"] else "")
             + ")")
    L.append(f"- Anserini: {v['anserini_jar']} on {v['java'][0] if v['java'] else '?'}; JsonCollection in "
             f"{d['export']['collection_files']} files, DefaultLuceneDocumentGenerator, default JVM heap")
    L.append(f"- bm25s {pk.get('bm25s')} (method lucene, k1 {K1}, b {B}, backend numba {pk.get('numba')}, "
             f"stop words \"en\", PyStemmer {pk.get('PyStemmer')} english), numpy {pk.get('numpy')}, "
             f"scipy {pk.get('scipy')}, Python {v['python']}")
    L.append(f"- Threads: RAYON_NUM_THREADS / -threads / n_threads = {a.threads} (NUMBA_NUM_THREADS, "
             f"OMP_NUM_THREADS too)")
    L.append(f"- Date (UTC): {report['date_utc']} to {report.get('finished_utc')}")
    L.append(f"- Reproduce: `{report['command']}`")
    L.append("- Every command and raw round (wall, user, sys, peak RSS, logs) is in the JSON beside this file.\n")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
