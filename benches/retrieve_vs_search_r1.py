#!/usr/bin/env python3
"""`sift serve`'s POST /retrieve against Search-R1's own retrieval server
(`search_r1/search/retrieval_server.py`: FastAPI + FAISS + a transformers encoder), on the CPU,
same corpus, same model (all-MiniLM-L6-v2), same vectors, same threads.

Two patterns, as RL trainers call the retriever:

  (a) batch: one POST /retrieve of --batch queries (2,560; topk 3, return_scores true), timed
      end to end (a GRPO step sending every rollout's query at once);
  (b) concurrent: --clients closed-loop clients (120), one query per request, for --duration
      seconds (verl's search tool), driven by wrk (one thread, a Lua script POSTing a random
      query of the query file per request; its own CPU time is recorded).

Each round starts each server as a fresh process (the two alternate, the order flipping every
round), records its start-up time (process start to the first answered /retrieve), runs (a)
then (b) against it, and its peak resident memory (VmHWM of the server process, and the peak
of its process tree's RSS sampled every 0.2 s). Errors: non-2xx answers and socket errors
(wrk), a batch answer of the wrong length. Sift's answers are checked against exact search
(recall@3 of its /retrieve top 3 against a brute-force top 3 over the same passage vectors,
with Sift's own query vectors from its POST /embed) and compared with the reference's (top-3
agreement).

The reference runs from a clone of its public repository (`--search-r1 DIR`), changed only
so that it runs on the CPU (benches/search_r1_peer.py: no .cuda(), f32), its upstream commit
and file hash recorded. Its dependencies: benches/requirements-search-r1.txt in a venv that
also sees torch and transformers; this driver runs in that venv.

The corpus is generated (benches/make_r1_corpus.py: Search-R1's jsonl rows {"id", "contents"})
and encoded once, with the reference's own Encoder class (mean pooling, normalised, max length
256): the vectors go into a FAISS IndexFlatIP for the reference (exact search, as its
e5_Flat.index) and, as Parquet, into `sift index --vectors` for Sift (its dense index: HNSW
over the same vectors; `--sift-ann exact` serves it by exact search instead).

Commands (the venv and the clone once; `prepare` is resumable and builds every --sizes):

    python3 -m venv --system-site-packages /var/tmp/r1-venv
    /var/tmp/r1-venv/bin/pip install -r benches/requirements-search-r1.txt
    git clone https://github.com/PeterGriffinJin/Search-R1 /var/tmp/search-r1
    cargo build --release -p sift-cli
    /var/tmp/r1-venv/bin/python -m benches.retrieve_vs_search_r1 prepare \\
        --search-r1 /var/tmp/search-r1 --work /var/tmp/r1-bench --passages 200000 \\
        --sizes 50000,200000 --sift target/release/sift
    /var/tmp/r1-venv/bin/python -m benches.retrieve_vs_search_r1 run \\
        --work /var/tmp/r1-bench --size 200000 --sift target/release/sift \\
        --rounds 3 --duration 60 --out eval/results/retrieve_vs_search_r1
    # a smoke run: --size 20000 --rounds 1 --duration 10 --out /tmp/r1-smoke
    # Sift by exact search instead of HNSW: --sift-ann exact; other `sift serve` flags
    # (a build with cross-request batching): --sift-arg=--query-batch=64 (repeat --sift-arg);
    # the report's recall@3 says whether HNSW's default --ef-search (128) is enough on this
    # corpus (--sift-arg=--ef-search=512 for more)

`prepare` encodes 10,000 passages per shard (work/vectors/shard-NNNNN.npy) and can be stopped
and run again: it goes on from the last shard written. Smaller --sizes are corpus prefixes,
built as soon as their shards exist.

Sift reads the passages as a knowledge-base jsonl ({"id", "text"}, text = the row's contents)
and the vectors through `sift index --vectors` (Parquet of id, vector). Builds that read
Search-R1's {"id", "contents"} rows directly and adopt a FAISS index file (`sift index
--faiss`) can skip both conversions; this driver does not depend on them.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benches import search_r1_peer
from benches.benchlib import REPO as _REPO
from benches.benchlib import machine, script_argv, write_report

REPO = Path(_REPO)
MODEL = REPO / "models/local/all-MiniLM-L6-v2"
SHARD = 10_000

WRK_LUA = r"""
-- one query per request: a random line of the body file (a JSON body each)
local bodies = {}
init = function(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
  math.randomseed(tonumber(args[2]))
end
request = function()
  return wrk.format("POST", "/retrieve", {["Content-Type"] = "application/json"},
                    bodies[math.random(#bodies)])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_JSON {\"requests\": %d, \"duration_us\": %d, \"bytes\": %d, " ..
    "\"errors_connect\": %d, \"errors_read\": %d, \"errors_write\": %d, " ..
    "\"errors_status\": %d, \"errors_timeout\": %d, \"p50_ms\": %.3f, \"p90_ms\": %.3f, " ..
    "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"mean_ms\": %.3f}\n",
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, latency.mean / 1000))
end
"""


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    log("+", " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


# ---------------------------------------------------------------- prepare


def peer_module(work: Path):
    """The reference's CPU copy imported as a module (its __main__ block does not run)."""
    spec = importlib.util.spec_from_file_location("r1_retrieval_server", work / "peer/retrieval_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_contents(path: Path, n: int | None = None) -> list[str]:
    out = []
    with open(path) as f:
        for line in f:
            if n is not None and len(out) >= n:
                break
            out.append(json.loads(line)["contents"])
    return out


def encode(work: Path, passages: int, threads: int, batch: int, sift_encoder: str | None = None) -> None:
    """Passage vectors in shards of SHARD rows, work/vectors/shard-NNNNN.npy (resumable),
    encoded by the reference's Encoder (the code path its index builder and server share), or,
    with `sift_encoder` (a sift binary), by `sift embed --kind passage` (the same model, mean
    pooled, normalised, cut at 256 tokens; faster on this CPU). Which encoder wrote each shard
    is recorded in work/vectors/encoders.json; both servers search the same vectors either way."""
    import numpy as np

    out = work / "vectors"
    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in range(0, passages, SHARD) if not (out / f"shard-{s // SHARD:05d}.npy").exists()]
    if not todo:
        return
    texts = read_contents(work / "data/corpus.jsonl", passages)
    record = out / "encoders.json"
    encoders = json.loads(record.read_text()) if record.exists() else {}
    if sift_encoder:
        for s in todo:
            t0 = time.time()
            name = f"shard-{s // SHARD:05d}"
            inputs = out / f"{name}.input.jsonl"
            with open(inputs, "w") as f:
                for i, t in enumerate(texts[s:s + SHARD]):
                    f.write(json.dumps({"id": str(s + i), "text": t}) + "\n")
            sh([sift_encoder, "embed", "--model", MODEL, "--input", inputs, "--kind", "passage",
                "--out", out / f"{name}.tmp.npy", "--batch-size", batch],
               env={**os.environ, "RAYON_NUM_THREADS": str(threads)})
            inputs.unlink()
            (out / f"{name}.tmp.npy").rename(out / f"{name}.npy")
            encoders[name] = f"sift embed ({sift_encoder})"
            record.write_text(json.dumps(encoders, indent=1) + "\n")
            log(f"encoded passages {s}..{s + SHARD} with sift embed in {time.time() - t0:.0f} s")
        return
    import torch

    torch.set_num_threads(threads)
    mod = peer_module(work)
    enc = mod.Encoder(model_name="minilm", model_path=str(MODEL), pooling_method="mean",
                      max_length=256, use_fp16=False)
    for s in todo:
        t0 = time.time()
        chunk = texts[s:s + SHARD]
        order = sorted(range(len(chunk)), key=lambda i: len(chunk[i]))
        vecs = np.zeros((len(chunk), 384), dtype=np.float32)
        for b in range(0, len(order), batch):
            idx = order[b:b + batch]
            vecs[idx] = enc.encode([chunk[i] for i in idx], is_query=False)
        tmp = out / f"shard-{s // SHARD:05d}.tmp.npy"
        np.save(tmp, vecs)
        tmp.rename(out / f"shard-{s // SHARD:05d}.npy")
        encoders[f"shard-{s // SHARD:05d}"] = "the reference's Encoder"
        record.write_text(json.dumps(encoders, indent=1) + "\n")
        log(f"encoded passages {s}..{s + len(chunk)} in {time.time() - t0:.0f} s")


def load_vectors(work: Path, n: int):
    import numpy as np

    shards = [np.load(work / f"vectors/shard-{s // SHARD:05d}.npy") for s in range(0, n, SHARD)]
    return np.concatenate(shards)[:n]


def encoder_counts(work: Path, n: int) -> dict:
    """Passages per encoder among the first `n` (work/vectors/encoders.json; shards written
    before it existed were the reference's)."""
    record = work / "vectors/encoders.json"
    encoders = json.loads(record.read_text()) if record.exists() else {}
    counts: dict = {}
    for s in range(0, n, SHARD):
        who = encoders.get(f"shard-{s // SHARD:05d}", "the reference's Encoder")
        counts[who] = counts.get(who, 0) + min(SHARD, n - s)
    return counts


def encoders_line(r: dict) -> str:
    enc = r.get("passage_encoders") or {}
    line = ", ".join(f"{v:,} by {k}" for k, v in enc.items())
    corpus = r.get("sift_corpus", "kb.jsonl")
    how = ("Sift indexed Search-R1's corpus.jsonl and adopted its flat.index (sift index --faiss)"
           if corpus == "corpus.jsonl" else "Sift read them through sift index --vectors")
    return f"{line}; {how}" if line else how


def build_size(work: Path, n: int, sift: str | None, threads: int, faiss_adopt: bool = False) -> None:
    """work/n<N>/: the reference's corpus.jsonl and flat.index, Sift's kb.jsonl, vectors/
    (sift index --vectors) and sift-index/."""
    import faiss
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = work / f"n{n}"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "flat.index").exists():
        with open(work / "data/corpus.jsonl") as src, open(d / "corpus.jsonl", "w") as dst, \
                open(d / "kb.jsonl", "w") as kb:
            for i, line in enumerate(src):
                if i >= n:
                    break
                dst.write(line)
                row = json.loads(line)
                kb.write(json.dumps({"id": row["id"], "text": row["contents"]}) + "\n")
        vecs = load_vectors(work, n)
        index = faiss.IndexFlatIP(vecs.shape[1])
        index.add(vecs)
        faiss.write_index(index, str(d / "flat.tmp.index"))
        (d / "flat.tmp.index").rename(d / "flat.index")
    vdir = d / "vectors"
    if not (vdir / "sift-vectors.json").exists():
        ids = []
        with open(d / "corpus.jsonl") as f:
            for line in f:
                ids.append(json.loads(line)["id"])
        vecs = load_vectors(work, n)
        dim = vecs.shape[1]
        (vdir / "kb/passages").mkdir(parents=True, exist_ok=True)
        vector = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), dim)
        pq.write_table(pa.table({"id": pa.array(ids, pa.string()), "vector": vector}),
                       vdir / "kb/passages/part-00000.parquet")
        import torch
        import transformers

        manifest = {"format": 1, "model": "all-MiniLM-L6-v2",
                    "fingerprint": f"search-r1 Encoder (mean pooling, normalised, max_length 256, f32, cpu), "
                                   f"torch {torch.__version__}, transformers {transformers.__version__}",
                    "model_hash": "", "profile": None, "dim": dim,
                    "domains": {"kb": {"passages": len(ids)}}}
        (vdir / "sift-vectors.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if sift and not (d / "sift-index/manifest.json").exists():
        t0 = time.time()
        if faiss_adopt:
            # Search-R1's own files as they are: its corpus rows and the FAISS index it loads
            sh([sift, "index", "--corpus", d / "corpus.jsonl", "--index", d / "sift-index",
                "--dense", MODEL, "--faiss", d / "flat.index", "--threads", threads, "-q"])
            (d / "sift-corpus.txt").write_text("corpus.jsonl\n")
        else:
            sh([sift, "index", "--corpus", d / "kb.jsonl", "--index", d / "sift-index", "--dense", MODEL,
                "--vectors", vdir, "--threads", threads, "-q"])
        (d / "sift-index-build.json").write_text(json.dumps({"seconds": round(time.time() - t0, 1)}) + "\n")


def cmd_prepare(a) -> None:
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    stamp = work / "data" / f"done-{a.passages}-{a.queries}-{a.seed}"
    if not stamp.exists():
        sh([sys.executable, REPO / "benches/make_r1_corpus.py", "--out", work / "data", "--passages", a.passages,
            "--queries", a.queries, "--seed", a.seed])
        stamp.touch()
    info = search_r1_peer.write_cpu_copy(Path(a.search_r1), work / "peer")
    (work / "peer/provenance.json").write_text(json.dumps(info, indent=1) + "\n")
    sizes = sorted(int(s) for s in a.sizes.split(","))
    if sizes[-1] > a.passages:
        raise SystemExit(f"--sizes {sizes[-1]} > --passages {a.passages}")
    for n in sizes:  # the smaller sizes are ready first
        encode(work, n, a.threads, a.encode_batch, a.sift if a.encoder == "sift" else None)
        build_size(work, n, a.sift, a.threads, a.sift_index == "faiss")
    log(f"prepared {work}")


# ---------------------------------------------------------------- run


def post(port: int, path: str, body: dict, timeout: float = 600) -> tuple[int, dict | None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, None
    finally:
        conn.close()


def tree(pid: int) -> list[int]:
    """pid and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(e))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def status_kib(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


class Server:
    """A server process, its start-up time and its memory, sampled."""

    def __init__(self, name: str, cmd: list, env: dict, port: int, logpath: Path):
        self.name, self.port = name, port
        self.log = open(logpath, "w")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.peak_tree_kib = 0
        self.stop = threading.Event()
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()

    def _sample(self):
        while not self.stop.is_set():
            kib = sum(status_kib(p, "VmRSS") for p in tree(self.proc.pid))
            self.peak_tree_kib = max(self.peak_tree_kib, kib)
            self.stop.wait(0.2)

    def wait_ready(self, probe: str, limit: float) -> float:
        while time.perf_counter() - self.t0 < limit:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                status, res = post(self.port, "/retrieve", {"queries": [probe], "topk": 3, "return_scores": True},
                                   timeout=60)
                if status == 200 and res and len(res.get("result", [])) == 1:
                    return time.perf_counter() - self.t0
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"{self.name} did not answer within {limit} s; see {self.log.name}")

    def close(self) -> dict:
        pids = tree(self.proc.pid)
        out = {"vmhwm_mib": round(status_kib(self.proc.pid, "VmHWM") / 1024, 1),
               "cpu_s": round(cpu_seconds(pids), 1)}
        self.stop.set()
        self.sampler.join()
        out["tree_rss_peak_mib"] = round(self.peak_tree_kib / 1024, 1)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return out


def ids_of(result: list) -> list[list[str]]:
    # Sift's ids may carry the domain (`kb/123`); the reference's are the corpus ids
    return [[str(h["document"]["id"]).rsplit("/", 1)[-1] for h in hits] for hits in result]


def run_batch(port: int, queries: list[str]) -> dict:
    t0 = time.perf_counter()
    status, res = post(port, "/retrieve", {"queries": queries, "topk": 3, "return_scores": True})
    secs = time.perf_counter() - t0
    ok = status == 200 and res is not None and len(res.get("result", [])) == len(queries)
    return {"seconds": round(secs, 3), "queries_per_s": round(len(queries) / secs, 1),
            "status": status, "errors": 0 if ok else 1,
            "ids": ids_of(res["result"]) if ok else None}


def run_wrk(port: int, a, lua: Path, bodies: Path, seed: int) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = sh(["wrk", "-t", "1", "-c", a.clients, "-d", f"{a.duration}s", "--timeout", f"{a.wrk_timeout}s",
              "--latency", "-s", lua, f"http://127.0.0.1:{port}", "--", bodies, seed],
             capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next(x for x in out.stdout.splitlines() if x.startswith("WRK_JSON "))
    r = json.loads(line[len("WRK_JSON "):])
    secs = r["duration_us"] / 1e6
    errors = sum(v for k, v in r.items() if k.startswith("errors_"))
    return {"requests": r["requests"], "seconds": round(secs, 2),
            "queries_per_s": round(r["requests"] / secs, 1), "errors": errors,
            "error_kinds": {k: v for k, v in r.items() if k.startswith("errors_")},
            "latency_ms": {q: r[f"{q}_ms"] for q in ("p50", "p90", "p99", "max", "mean")},
            "client_cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2)}


def dense_name(index: Path) -> str:
    dense = json.loads((index / "manifest.json").read_text()).get("dense", {})
    if len(dense) != 1:
        raise SystemExit(f"{index}: expected one dense index, found {list(dense)}")
    return "dense:" + next(iter(dense))


def exact_top3(work: Path, n: int, qvecs) -> list[list[str]]:
    import numpy as np

    vecs = load_vectors(work, n)
    out = []
    for s in range(0, len(qvecs), 256):
        scores = qvecs[s:s + 256] @ vecs.T
        top = np.argsort(-scores, axis=1)[:, :3]
        out.extend([[str(i) for i in row] for row in top])
    return out


def overlap(a: list[list[str]], b: list[list[str]]) -> float:
    return sum(len(set(x) & set(y)) for x, y in zip(a, b)) / sum(len(y) for y in b)


def med(xs):
    return round(statistics.median(xs), 3) if xs else None


def cmd_run(a) -> None:
    import numpy as np

    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt install wrk)")
    work = Path(a.work)
    d = work / f"n{a.size}"
    for f in (d / "flat.index", d / "sift-index/manifest.json", work / "peer/provenance.json"):
        if not f.exists():
            raise SystemExit(f"{f} missing: run `prepare` with --sizes including {a.size} (and --sift)")
    queries = [json.loads(x)["query"] for x in open(work / "data/queries.jsonl")]
    if len(queries) < a.batch:
        raise SystemExit(f"{len(queries)} queries < --batch {a.batch}")
    batch = queries[:a.batch]
    runs = work / "runs" / time.strftime("%Y%m%d-%H%M%S")
    runs.mkdir(parents=True)
    lua = runs / "retrieve.lua"
    lua.write_text(WRK_LUA)
    bodies = runs / "bodies.jsonl"
    bodies.write_text("".join(json.dumps({"queries": [q], "topk": 3, "return_scores": True}) + "\n"
                              for q in queries))
    sift_version = subprocess.run([a.sift, "--version"], capture_output=True, text=True).stdout.strip()
    dense = dense_name(d / "sift-index")
    threads = str(a.threads)
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("OMP_", "MKL_", "RAYON_", "SIFT_"))}
    thread_env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
                  "RAYON_NUM_THREADS": threads}
    peer_env = {**base_env, **thread_env, "HF_DATASETS_CACHE": str(work / "hf-cache"),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    sift_env = {**base_env, **thread_env}
    port0 = 18600 + os.getpid() % 200 * 4

    def command(side: str, port: int) -> tuple[list, dict]:
        if side == "sift":
            corpus = (d / "sift-corpus.txt").read_text().strip() if (d / "sift-corpus.txt").exists() \
                else "kb.jsonl"
            return ([a.sift, "serve", "--index", d / "sift-index", "--corpus", d / corpus,
                     "--addr", f"127.0.0.1:{port}", "--retriever", dense, "--ann", a.sift_ann,
                     "--max-concurrency", a.sift_max_concurrency or threads, "--quiet",
                     # the reference has no time limit; Sift's default (60 s) could cut (a) short
                     "--timeout", str(a.sift_timeout),
                     *a.sift_arg], sift_env)
        return ([sys.executable, work / "peer/launch.py", work / "peer/retrieval_server.py", port,
                 "--index_path", d / "flat.index", "--corpus_path", d / "corpus.jsonl", "--topk", "3",
                 "--retriever_name", "minilm", "--retriever_model", MODEL], peer_env)

    # one untimed start of each (the reference's datasets cache of the corpus, the page cache)
    for i, side in enumerate(("peer", "sift")):
        cmd, env = command(side, port0 + i)
        s = Server(side, cmd, env, port0 + i, runs / f"warm-{side}.log")
        s.wait_ready(queries[0], a.start_limit)
        s.close()

    rounds = []
    answers: dict[str, list] = {}
    qvecs = None
    for r in range(a.rounds):
        order = ("sift", "peer") if r % 2 == 0 else ("peer", "sift")
        for j, side in enumerate(order):
            port = port0 + 2 + (2 * r + j) % 2
            cmd, env = command(side, port)
            log(f"round {r + 1}/{a.rounds}: {side}")
            load0 = os.getloadavg()[0]
            s = Server(side, cmd, env, port, runs / f"r{r}-{side}.log")
            try:
                startup = s.wait_ready(queries[-1], a.start_limit)
                b = run_batch(port, batch)
                if b["ids"] is not None and side not in answers:
                    answers[side] = b["ids"]
                b.pop("ids")
                w = run_wrk(port, a, lua, bodies, r)
                if side == "sift" and qvecs is None:
                    vs = []
                    for k in range(0, len(batch), 128):
                        status, res = post(port, "/embed", {"inputs": batch[k:k + 128]})
                        if status != 200:
                            raise SystemExit(f"sift /embed: HTTP {status}")
                        vs.extend(res)
                    qvecs = np.asarray(vs, dtype=np.float32)
            finally:
                mem = s.close()
            rounds.append({"round": r + 1, "side": side, "position": j, "loadavg_1m_before": round(load0, 2),
                           "startup_s": round(startup, 2), "batch": b, "concurrent": w, **mem})
            log(json.dumps(rounds[-1]))

    quality = {}
    if qvecs is not None and "sift" in answers:
        exact = exact_top3(work, a.size, qvecs)
        quality["sift_recall_at_3_vs_exact"] = round(overlap(answers["sift"], exact), 4)
        if "peer" in answers:
            quality["peer_recall_at_3_vs_exact"] = round(overlap(answers["peer"], exact), 4)
            quality["top3_agreement_sift_peer"] = round(overlap(answers["sift"], answers["peer"]), 4)
            quality["top1_agreement_sift_peer"] = round(
                sum(x[0] == y[0] for x, y in zip(answers["sift"], answers["peer"])) / len(batch), 4)
        quality["exact"] = ("brute force over the same passage vectors with Sift's query vectors "
                            "(POST /embed); the reference's FAISS IndexFlatIP is exact with its own")

    summary = {}
    for side in ("sift", "peer"):
        rs = [x for x in rounds if x["side"] == side]
        summary[side] = {
            "batch_queries_per_s": med([x["batch"]["queries_per_s"] for x in rs]),
            "batch_seconds": med([x["batch"]["seconds"] for x in rs]),
            "concurrent_queries_per_s": med([x["concurrent"]["queries_per_s"] for x in rs]),
            "concurrent_p50_ms": med([x["concurrent"]["latency_ms"]["p50"] for x in rs]),
            "concurrent_p99_ms": med([x["concurrent"]["latency_ms"]["p99"] for x in rs]),
            "errors": sum(x["batch"]["errors"] + x["concurrent"]["errors"] for x in rs),
            "startup_s": med([x["startup_s"] for x in rs]),
            "peak_rss_mib": max(max(x["vmhwm_mib"], x["tree_rss_peak_mib"]) for x in rs),
        }
    S, P = summary["sift"], summary["peer"]
    ratios = {
        "batch_qps": round(S["batch_queries_per_s"] / P["batch_queries_per_s"], 2),
        "batch_latency_peer_over_sift": round(P["batch_seconds"] / S["batch_seconds"], 2),
        "concurrent_qps": round(S["concurrent_queries_per_s"] / P["concurrent_queries_per_s"], 2),
        "concurrent_p99_peer_over_sift": round(P["concurrent_p99_ms"] / S["concurrent_p99_ms"], 2),
    }
    per_round = {"batch_qps": [], "concurrent_qps": [], "concurrent_p99_peer_over_sift": []}
    for r in range(1, a.rounds + 1):
        x = {z["side"]: z for z in rounds if z["round"] == r}
        per_round["batch_qps"].append(round(x["sift"]["batch"]["queries_per_s"] / x["peer"]["batch"]["queries_per_s"], 2))
        per_round["concurrent_qps"].append(round(x["sift"]["concurrent"]["queries_per_s"]
                                                / x["peer"]["concurrent"]["queries_per_s"], 2))
        per_round["concurrent_p99_peer_over_sift"].append(round(x["peer"]["concurrent"]["latency_ms"]["p99"]
                                                                / x["sift"]["concurrent"]["latency_ms"]["p99"], 2))
    recall = quality.get("sift_recall_at_3_vs_exact")
    goal = {
        "batch_qps_at_least_3x": ratios["batch_qps"] >= 3,
        "concurrent_qps_at_least_3x": ratios["concurrent_qps"] >= 3,
        "batch_latency_at_most_a_third": ratios["batch_latency_peer_over_sift"] >= 3,
        "concurrent_p99_at_most_a_third": ratios["concurrent_p99_peer_over_sift"] >= 3,
        "recall_at_3_at_least_0_99": recall is not None and recall >= 0.99,
    }
    goal["met"] = all(goal.values())
    prov = json.loads((work / "peer/provenance.json").read_text())
    build = d / "sift-index-build.json"
    manifest = json.loads((d / "sift-index/manifest.json").read_text())
    report = {
        "command": " ".join(["python3", *script_argv()]),
        "label": a.label,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "sift": {"binary": str(a.sift), "version": sift_version, "git": git_head(),
                 "retriever": dense, "ann": a.sift_ann, "ef_search_default": "128 (sift serve --ef-search)",
                 "max_concurrency": int(a.sift_max_concurrency or threads), "timeout_s": a.sift_timeout,
                 "extra_args": a.sift_arg,
                 "index_build_s": json.loads(build.read_text())["seconds"] if build.exists() else None,
                 "index_dense": manifest.get("dense")},
        "peer": {**prov, "launch": "runpy under uvicorn.run bound to 127.0.0.1:<port>",
                 "index": "faiss.IndexFlatIP (exact)", "versions": versions()},
        "passage_encoders": encoder_counts(work, a.size),
        "sift_corpus": (d / "sift-corpus.txt").read_text().strip() if (d / "sift-corpus.txt").exists()
        else "kb.jsonl",
        "setup": {"passages": a.size, "queries_in_file": len(queries), "batch": a.batch, "topk": 3,
                  "clients": a.clients, "duration_s": a.duration, "rounds": a.rounds, "threads": a.threads,
                  "model": str(MODEL), "load_generator": wrk_version() + ", 1 thread",
                  "thread_env": thread_env},
        "summary_medians": summary,
        "ratios_of_medians": ratios,
        "ratios_per_round": per_round,
        "quality": quality,
        "goal": goal,
        "rounds": rounds,
        "logs": str(runs),
    }
    write_report(a.out, report, markdown(report))
    print(markdown(report))


def git_head() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def versions() -> dict:
    out = {}
    for m in ("torch", "transformers", "faiss", "fastapi", "uvicorn", "datasets", "numpy"):
        try:
            out[m] = __import__(m).__version__
        except Exception:
            out[m] = None
    return out


def wrk_version() -> str:
    p = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
    text = (p.stdout or p.stderr).strip()
    return " ".join(text.split()[:2]) if text else "wrk"


def markdown(r: dict) -> str:
    S, P = r["summary_medians"]["sift"], r["summary_medians"]["peer"]
    st, ra, q, g = r["setup"], r["ratios_of_medians"], r["quality"], r["goal"]
    m = r["machine"]

    def row(name, s, p, ratio):
        return f"| {name} | {s} | {p} | {ratio} |\n"

    md = "# `sift serve` /retrieve vs Search-R1's retrieval_server.py (CPU)\n\n"
    if r.get("label"):
        md += f"**{r['label']}**\n\n"
    md += (f"`{r['command']}` ({r['date']}; {m.get('cpu')}, {m.get('nproc')} CPUs, "
           f"`{m.get('uname')}`; load average at start {m.get('loadavg_at_start')})\n\n"
           f"Sift: `{r['sift']['version']}` (`{r['sift']['binary']}`; repository at {r['sift']['git']} when run), "
           f"`{r['sift']['retriever']}`, `--ann {r['sift']['ann']}`, "
           f"`--max-concurrency {r['sift']['max_concurrency']}`. Reference: Search-R1 "
           f"{(r['peer']['commit'] or '?')[:12]} `{r['peer']['path']}` (blob {r['peer']['git_blob'][:12]}), "
           f"edits: {'; '.join(r['peer']['edits'])}; FAISS IndexFlatIP; "
           + ", ".join(f"{k} {v}" for k, v in r["peer"]["versions"].items()) + ".\n\n"
           f"{st['passages']:,} generated passages (benches/make_r1_corpus.py), all-MiniLM-L6-v2, one encoding "
           f"of the passages shared by both ({encoders_line(r)}); {st['threads']} threads each ({', '.join(f'{k}={v}' for k, v in st['thread_env'].items())}); "
           f"{st['rounds']} rounds, fresh processes, alternating (the order flips each round); medians over rounds.\n\n"
           f"(a) one POST /retrieve of {st['batch']:,} queries (topk 3, scores); (b) {st['clients']} closed-loop "
           f"clients, one query per request, {st['duration_s']} s ({st['load_generator']}).\n\n"
           "| | Sift | Search-R1 | ratio (> 1: Sift ahead) |\n|---|---|---|---|\n")
    md += row("(a) queries/s", S["batch_queries_per_s"], P["batch_queries_per_s"], f"{ra['batch_qps']} (Sift's / Search-R1's)")
    md += row("(a) request time, s", S["batch_seconds"], P["batch_seconds"],
              f"{ra['batch_latency_peer_over_sift']} (Search-R1's / Sift's)")
    md += row("(b) queries/s", S["concurrent_queries_per_s"], P["concurrent_queries_per_s"], f"{ra['concurrent_qps']} (Sift's / Search-R1's)")
    md += row("(b) p50 latency, ms", S["concurrent_p50_ms"], P["concurrent_p50_ms"], "")
    md += row("(b) p99 latency, ms", S["concurrent_p99_ms"], P["concurrent_p99_ms"],
              f"{ra['concurrent_p99_peer_over_sift']} (Search-R1's / Sift's)")
    md += row("errors (all rounds)", S["errors"], P["errors"], "")
    md += row("start-up, s (to the first answer)", S["startup_s"], P["startup_s"], "")
    md += row("peak RSS, MiB", S["peak_rss_mib"], P["peak_rss_mib"], "")
    md += (f"\nPer-round ratios (noise): (a) q/s {r['ratios_per_round']['batch_qps']}, (b) q/s "
           f"{r['ratios_per_round']['concurrent_qps']}, (b) p99 Search-R1/Sift "
           f"{r['ratios_per_round']['concurrent_p99_peer_over_sift']}.\n\n")
    if q:
        md += (f"Answers to (a): Sift's recall@3 against exact search {q.get('sift_recall_at_3_vs_exact')}, "
               f"Search-R1's {q.get('peer_recall_at_3_vs_exact')} ({q['exact']}); top-3 agreement Sift / "
               f"Search-R1 {q.get('top3_agreement_sift_peer')}, top-1 {q.get('top1_agreement_sift_peer')}.\n\n")
    md += ("Goal (3x the queries/s in both patterns, p99 at most a third, recall@3 >= 0.99): "
           + ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in g.items() if k != "met")
           + f". **Met: {'yes' if g['met'] else 'no'}.**\n\n"
           "The machine is shared (other builds run beside it): rounds alternate and the ratios are of "
           "medians; the per-round ratios show the spread. In (b) the latency is mostly waiting: 120 "
           "clients in a closed loop keep about 120 / (queries/s) seconds of work queued. Raw numbers, "
           "per round: the .json.\n")
    return md


def cmd_render(a) -> None:
    report = json.loads(Path(a.out + ".json").read_text())
    Path(a.out + ".md").write_text(markdown(report))
    print(markdown(report))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prepare", help="corpus, queries, the reference's CPU copy, vectors, indexes")
    pr.add_argument("--search-r1", required=True, help="a clone of github.com/PeterGriffinJin/Search-R1")
    pr.add_argument("--work", default="/var/tmp/r1-bench")
    pr.add_argument("--passages", type=int, default=200_000, help="corpus rows generated")
    pr.add_argument("--sizes", default="200000", help="comma-separated corpus prefixes to index")
    pr.add_argument("--queries", type=int, default=4096)
    pr.add_argument("--seed", type=int, default=20251029)
    pr.add_argument("--threads", type=int, default=2)
    pr.add_argument("--encode-batch", type=int, default=64)
    pr.add_argument("--sift", help="the sift binary (release build); builds each size's Sift index")
    pr.add_argument("--encoder", choices=["reference", "sift"], default="reference",
                    help="what encodes the passages not yet encoded (sift: `sift embed`, needs --sift)")
    pr.add_argument("--sift-index", choices=["vectors", "faiss"], default="vectors",
                    help="Sift's index from the shared vectors (`sift index --vectors`) or from the "
                         "reference's own corpus.jsonl and flat.index (`sift index --faiss`)")
    pr.set_defaults(func=cmd_prepare)
    ru = sub.add_parser("run", help="the benchmark rounds and the report")
    ru.add_argument("--work", default="/var/tmp/r1-bench")
    ru.add_argument("--size", type=int, default=200_000, help="which prepared corpus size")
    ru.add_argument("--sift", default=str(REPO / "target/release/sift"))
    ru.add_argument("--sift-ann", default="hnsw", choices=["hnsw", "exact", "auto"])
    ru.add_argument("--sift-max-concurrency", help="default: --threads")
    ru.add_argument("--sift-arg", action="append", default=[], help="another `sift serve` argument (repeat)")
    ru.add_argument("--sift-timeout", type=float, default=600, help="sift serve --timeout (seconds)")
    ru.add_argument("--threads", type=int, default=2)
    ru.add_argument("--rounds", type=int, default=3)
    ru.add_argument("--batch", type=int, default=2560)
    ru.add_argument("--clients", type=int, default=120)
    ru.add_argument("--duration", type=int, default=60, help="seconds of pattern (b) per round")
    ru.add_argument("--wrk-timeout", type=int, default=60, help="seconds before wrk counts a request timed out")
    ru.add_argument("--start-limit", type=float, default=900, help="seconds a server has to come up")
    ru.add_argument("--label", help="a line for the report's head (e.g. the build and scale)")
    ru.add_argument("--out", required=True, help="results path without extension")
    ru.set_defaults(func=cmd_run)
    re_ = sub.add_parser("render", help="write <out>.md again from <out>.json")
    re_.add_argument("--out", required=True, help="results path without extension")
    re_.set_defaults(func=cmd_render)
    a = p.parse_args()
    random.seed(0)
    a.func(a)


if __name__ == "__main__":
    main()
