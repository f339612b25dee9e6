#!/usr/bin/env python3
"""Load test of `sift serve` on loopback with wrk: the sample corpus plus a generated
50,000-passage domain, BM25 and the tiny CLIP, a mix of searches (BM25 and dense text search
on both, text -> images, reverse image search, Serper's /search, and searches of every domain
at once: Serper by POST and GET, SerpAPI, images, dense), 32 connections for 60 s.

Records requests/s, p50/p90/p99 latency, errors (non-2xx answers and socket errors) and the
server's resident memory sampled every second (flat = no growth over the run), into
<out>.json and <out>.md.

    cargo build --release -p sift-cli
    python3 benches/serve_load.py --out eval/results/serve_load     # 60 s, 32 connections
    python3 benches/serve_load.py --duration 5 --out /tmp/smoke     # a quick check

Needs wrk (Debian: apt install wrk) and benches/requirements-scale.txt (pyarrow, numpy,
Pillow) for the generated domain.
"""
import argparse
import base64
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
CLIP = REPO / "models/fixtures/vision/tiny-clip-quickgelu"

LUA = r"""
-- rotates through the requests in requests.json (method, path, body)
local json_requests = {}
local n = 0
init = function(args)
  local f = assert(io.open(args[1], "r"))
  for line in f:lines() do
    local sep = line:find("\t", 1, true)
    local sep2 = line:find("\t", sep + 1, true)
    n = n + 1
    json_requests[n] = {line:sub(1, sep - 1), line:sub(sep + 1, sep2 - 1), line:sub(sep2 + 1)}
  end
  f:close()
  counter = math.random(n)
end
request = function()
  counter = counter % n + 1
  local r = json_requests[counter]
  return wrk.format(r[1], r[2], {["Content-Type"] = "application/json"}, r[3])
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


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def wrk_version():
    out = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
    text = (out.stdout or out.stderr).strip()
    return " ".join(text.split()[:2]) if text else "wrk"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sift", default=str(REPO / "target/release/sift"))
    p.add_argument("--work", default=str(REPO / "target/serve-load"))
    p.add_argument("--passages", type=int, default=50_000)
    p.add_argument("--duration", type=int, default=60)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--threads", type=int, default=2, help="wrk threads")
    p.add_argument("--out", required=True, help="results path without extension")
    a = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian: apt install wrk)")
    work = Path(a.work)
    corpus = work / "corpus"
    index = work / "index"
    marker = work / f"built-{a.passages}"
    if not marker.exists():
        shutil.rmtree(work, ignore_errors=True)
        run([sys.executable, REPO / "benches/make_synthetic_corpus.py", "--out", corpus,
             "--domain", "synthetic", "--passages", str(a.passages), "--queries", "50",
             "--images", "200"])
        for config in ["documents", "examples", "examples_multimodal", "document_images",
                       "examples_images"]:
            src = REPO / "corpora/sample" / config
            if src.is_dir():
                (corpus / config).mkdir(parents=True, exist_ok=True)
                for f in src.glob("*.parquet"):
                    shutil.copy(f, corpus / config / f.name)
        run([a.sift, "index", "--corpus", corpus, "--index", index, "--dense", CLIP, "-q"])
        marker.touch()

    queries = pq.read_table(corpus / "examples/synthetic.parquet", columns=["query"]).column(0).to_pylist()
    sample_q = ["how do plants make sugar", "map projection distortion", "enzyme kinetics",
                "magnetic field of a coil", "projected coordinate system"]
    images = pq.read_table(corpus / "document_images/synthetic.parquet", columns=["path"]).column(0).to_pylist()
    sample_img = pq.read_table(REPO / "corpora/sample/document_images/biology.parquet", columns=["bytes"]).column(0).to_pylist()[0]
    reqs = []
    for i, q in enumerate(queries[:20]):
        q = " ".join(q.split()[:40])
        reqs.append(("POST", "/v1/search", {"query": q, "domain": "synthetic", "top_k": 10}))
        reqs.append(("POST", "/v1/search", {"query": q, "domain": "synthetic", "top_k": 10,
                                            "retriever": "dense:tiny-clip-quickgelu"}))
        reqs.append(("POST", "/v1/search", {"images": [{"image_id": images[i % len(images)]}],
                                            "domain": "synthetic", "candidates": "images"}))
    # every domain at once (no domain: the 4 domains merged), as the harnesses send them
    from urllib.parse import quote_plus
    for i, q in enumerate(queries[20:30]):
        q = " ".join(q.split()[:40])
        reqs.append(("POST", "/search", {"q": q, "num": 10}))
        reqs.append(("GET", f"/search?q={quote_plus(q)}&api_key=x", ""))
        reqs.append(("GET", f"/search?engine=google&q={quote_plus(q)}&num=10&api_key=x", ""))
        reqs.append(("POST", "/images", {"q": q, "num": 8}))
        reqs.append(("POST", "/v1/search", {"query": q, "top_k": 10,
                                            "retriever": "dense:tiny-clip-quickgelu"}))
    for q in sample_q:
        reqs.append(("POST", "/search", {"q": q, "num": 10, "domain": "biology"}))
        reqs.append(("POST", "/v1/search", {"query": q, "domain": "gis", "candidates": "images"}))
        reqs.append(("POST", "/v1/search", {"query": q, "domain": "physics",
                                            "candidates": "pairs", "top_k": 20}))
    reqs.append(("POST", "/v1/search", {"images": [{"data": base64.b64encode(sample_img).decode()}],
                                        "domain": "biology", "candidates": "images"}))
    req_file = work / "requests.tsv"
    def body(b):
        return json.dumps(b) if b != "" else ""

    req_file.write_text("".join(f"{m}\t{path}\t{body(b)}\n" for m, path, b in reqs))
    lua = work / "mix.lua"
    lua.write_text(LUA)

    port = 18300 + os.getpid() % 500
    log = open(work / "access.log", "w")
    server = subprocess.Popen([a.sift, "serve", "--index", index, "--corpus", corpus,
                               "--addr", f"127.0.0.1:{port}", "--json"],
                              stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                out = subprocess.run(["curl", "-sf", f"{base}/healthz"], capture_output=True)
                if out.returncode == 0:
                    break
            except FileNotFoundError:
                sys.exit("curl is needed")
            time.sleep(0.5)
        else:
            sys.exit("the server did not come up; see access.log")
        # every request of the mix answers 200 before the run
        for m, path, body in reqs:
            data = ["-d", json.dumps(body)] if m == "POST" else []
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", m,
                                  "-H", "content-type: application/json", *data,
                                  base + path], capture_output=True, text=True)
            if out.stdout != "200":
                sys.exit(f"{path} {body}: HTTP {out.stdout}")
        samples = []
        stop = threading.Event()

        def sample():
            t0 = time.time()
            while not stop.is_set():
                samples.append((round(time.time() - t0, 1), rss_kib(server.pid)))
                stop.wait(1.0)

        sampler = threading.Thread(target=sample)
        sampler.start()
        wrk = subprocess.run(["wrk", "-t", str(a.threads), "-c", str(a.connections),
                              "-d", f"{a.duration}s", "--timeout", "10s", "--latency",
                              "-s", str(lua), base, "--", str(req_file)],
                             capture_output=True, text=True, check=True)
        stop.set()
        sampler.join()
        health = subprocess.run(["curl", "-s", f"{base}/healthz"], capture_output=True, text=True).stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    line = next(l for l in wrk.stdout.splitlines() if l.startswith("WRK_JSON "))
    res = json.loads(line[len("WRK_JSON "):])
    secs = res["duration_us"] / 1e6
    errors = sum(res[k] for k in res if k.startswith("errors_"))
    rss = [kib for _, kib in samples]
    k = max(1, min(10, len(rss) // 3))
    first, last = sum(rss[:k]) / k, sum(rss[-k:]) / k
    statuses = {}
    for l in open(work / "access.log"):
        if l.startswith("{"):
            s = json.loads(l)["status"]
            statuses[s] = statuses.get(s, 0) + 1
    report = {
        "command": f"python3 benches/serve_load.py --duration {a.duration} --connections {a.connections} --out {a.out}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU threads",
        "load_generator": wrk_version(),
        "domains": {"synthetic": a.passages, "sample": "biology, gis, physics (46 passages)"},
        "retrievers": ["bm25", "dense:tiny-clip-quickgelu"],
        "request_mix": len(reqs),
        "connections": a.connections,
        "duration_s": round(secs, 1),
        "requests": res["requests"],
        "requests_per_s": round(res["requests"] / secs, 1),
        "errors": errors,
        "error_kinds": {k: v for k, v in res.items() if k.startswith("errors_")},
        "statuses_logged": statuses,
        "latency_ms": {q: res[f"{q}_ms"] for q in ["p50", "p90", "p99", "max", "mean"]},
        "rss_mib": {"first_10s_mean": round(first / 1024, 1), "last_10s_mean": round(last / 1024, 1),
                    "max": round(max(rss) / 1024, 1), "growth_pct": round(100 * (last - first) / first, 2)},
        "rss_samples_kib": samples,
        "health_after": json.loads(health) if health else None,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    md = f"""# `sift serve` under load

`{report['command']}` ({report['date']}, {report['machine']}; {report['load_generator']})

Index: the sample corpus (3 domains, 46 passages) plus a generated {a.passages:,}-passage domain
(`benches/make_synthetic_corpus.py`, 200 corpus images), BM25 and the tiny CLIP
(`models/fixtures/vision/tiny-clip-quickgelu`). Mix of {len(reqs)} requests rotated by wrk:
BM25 and dense text search on the generated domain, reverse image search by corpus id, Serper
`/search`, text -> images, text -> Task 4 pairs, an uploaded image (base64), and searches of
every domain at once (no domain: the 4 domains merged): Serper `/search` by POST and GET,
SerpAPI's `engine=google`, Serper `/images` and dense `/v1/search`. The server logs
every request as JSON (`--json`) to a file.

| connections | duration | requests | requests/s | errors | p50 | p90 | p99 | max |
|---|---|---|---|---|---|---|---|---|
| {a.connections} | {secs:.1f} s | {res['requests']:,} | {report['requests_per_s']} | {errors} | {res['p50_ms']:.2f} ms | {res['p90_ms']:.2f} ms | {res['p99_ms']:.2f} ms | {res['max_ms']:.1f} ms |

Statuses in the access log: {statuses}.

Resident memory of the server (sampled every second): first 10 s mean
{report['rss_mib']['first_10s_mean']} MiB, last 10 s mean {report['rss_mib']['last_10s_mean']} MiB
(growth {report['rss_mib']['growth_pct']} %), max {report['rss_mib']['max']} MiB.
"""
    out.with_suffix(".md").write_text(md)
    print(md)
    if errors:
        sys.exit(f"{errors} errors")


if __name__ == "__main__":
    main()
