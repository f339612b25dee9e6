#!/usr/bin/env python3
"""The fourth adversarial campaign: attacks on the `sift` binary and `sift serve` as an attacker
and an unlucky user would make them, each with the outcome it must get, printed as the Markdown
table the README's reliability section holds.

Every attack runs the real binary in a fresh process (a hang is a time-out, a crash is exit 101
or a panic message, memory is the child's peak resident set from wait4). Servers are started on
127.0.0.1 only; fake OpenAI-compatible endpoints (hung, rate-limiting, misbehaving) are threads
of this script on 127.0.0.1. Nothing else is reached.

    python3 scripts/campaign.py [--sift target/debug/sift] [--out table.md] [--only WORD]

Exit status 0 when every attack got its outcome, 1 otherwise (the table says which).
"""
import argparse
import base64
import http.server as httpserver
import json
import os
import resource
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "corpora" / "sample"
TINY_CLIP = REPO / "models" / "fixtures" / "vision" / "tiny-clip-quickgelu"


class Result:
    def __init__(self, rc, secs, out, err, rss_mb, timed_out):
        self.rc, self.secs, self.out, self.err = rc, secs, out, err
        self.rss_mb, self.timed_out = rss_mb, timed_out

    def crashed(self):
        return self.rc == 101 or "panicked" in self.err


# The address-space limit put on every process started (--memory-limit-mb): a build that
# reads /dev/zero forever stops at it instead of taking the machine's memory.
MEMORY_LIMIT = None


def limit_memory():
    if MEMORY_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(args, timeout=60, stdin=subprocess.DEVNULL, env=None):
    """Runs the binary with a deadline; returns its status, time, output and peak RSS."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(args, stdin=stdin, stdout=out, stderr=err, env=env, preexec_fn=limit_memory)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                timed_out = True
                p.kill()
                pid, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Result(
            p.returncode,
            time.monotonic() - start,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            usage.ru_maxrss / 1024,
            timed_out,
        )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def png(width, height):
    """A 1-bit greyscale PNG of zeros (a few hundred KB for 23,000 x 23,000 pixels)."""
    raw = zlib.compressobj(9)
    row = b"\0" + b"\0" * ((width + 7) // 8)
    data = b"".join(raw.compress(row) for _ in range(height)) + raw.flush()

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def http(method, url, body=None, headers=None, timeout=30):
    """(status, headers, body bytes); a dropped connection is status 0."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout) as e:
        return 0, {}, str(e).encode()


def raw_get(port, target, timeout=10):
    """Sends a request line byte for byte (raw UTF-8 in the path); returns the status or 0."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except (ConnectionError, socket.timeout):
            pass
    m = re.match(rb"HTTP/1\.1 (\d+)", data)
    return int(m.group(1)) if m else 0


class Endpoint:
    """A fake OpenAI-compatible endpoint on 127.0.0.1 whose behaviour `mode` picks."""

    def __init__(self, mode):
        self.mode, self.hits = mode, 0
        outer = self

        class H(httpserver.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                outer.hits += 1
                n = int(self.headers.get("content-length", 0))
                self.rfile.read(n)
                m = outer.mode
                if m == "hang":
                    time.sleep(3600)
                    return
                if m.startswith("retry-after:"):
                    self.send_response(429)
                    self.send_header("Retry-After", m.split(":", 1)[1])
                    self.send_header("content-type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "slow down"}}')
                    return
                if m == "nan-logprobs":
                    # a positive log probability and llama.cpp's lowest f32 for "impossible"
                    tokens = [{"token": "yes", "logprob": 5.0}, {"token": "no", "logprob": -3.4028234663852886e38}]
                    body = {"choices": [{"message": {"role": "assistant", "content": "yes"},
                                         "logprobs": {"content": [{"token": "yes", "logprob": 0.0,
                                                                   "top_logprobs": tokens}]}}]}
                    data = json.dumps(body).encode()
                else:
                    body = {"choices": [{"message": {"role": "assistant", "content": "a caption"}}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
                    data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = httpserver.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


class Server:
    """`sift serve` on a free port of 127.0.0.1."""

    def __init__(self, sift, args, env=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen([sift, "serve", "--addr", f"127.0.0.1:{self.port}", "--quiet", *args],
                                  stdout=self.log, stderr=self.log, env=env, preexec_fn=limit_memory)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"sift serve exited: {self.output()}")
            if http("GET", self.base + "/healthz", timeout=2)[0] == 200:
                return
            time.sleep(0.1)
        raise RuntimeError("sift serve did not start")

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def rss_mb(self):
        for line in Path(f"/proc/{self.p.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def close(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()


class Campaign:
    def __init__(self, sift, only):
        self.sift, self.only, self.rows = sift, only, []
        self.tmp = Path(tempfile.mkdtemp(prefix="sift-campaign-"))

    def attack(self, area, name, fn):
        if self.only and self.only not in f"{area} {name}":
            return
        start = time.monotonic()
        try:
            handled, outcome = fn()
        except Exception as e:  # an attack that could not be made is a failure of the table
            handled, outcome = False, f"campaign error: {type(e).__name__}: {e}"
        outcome = outcome.replace(str(self.tmp) + "/", "").replace(str(self.tmp), "TMP")
        outcome = outcome.replace("|", "\\|").replace("\n", " ")
        self.rows.append((area, name, outcome, handled))
        mark = "handled" if handled else "NOT HANDLED"
        print(f"[{mark}] {area}: {name}: {outcome} ({time.monotonic() - start:.1f} s)", file=sys.stderr)

    def t(self, name):
        return self.tmp / name

    def fifo(self, name):
        p = self.t(name)
        if not p.exists():
            os.mkfifo(p)
        return p

    def table(self, before=None, before_label="before"):
        """The Markdown table; with `before` (rows of another build's --json), a column of
        whether that build handled each attack."""
        prior = {(r["area"], r["attack"]): r for r in before or []}
        head = f" {before_label} |" if before is not None else ""
        lines = [f"| # | area | attack | outcome | |{head}", "|---|---|---|---|---|" + ("---|" if head else "")]
        for i, (area, name, outcome, handled) in enumerate(self.rows, 1):
            extra = ""
            if before is not None:
                b = prior.get((area, name))
                extra = " - |" if b is None else f" {'ok' if b['handled'] else 'not handled: ' + b['outcome']} |"
            lines.append(f"| {i} | {area} | {name} | {outcome} | {'ok' if handled else '**not handled**'} |{extra}")
        n_ok = sum(r[3] for r in self.rows)
        lines.append("")
        lines.append(f"{n_ok} of {len(self.rows)} attacks handled.")
        return "\n".join(lines)


def refused(r, *words, secs=10):
    """An error exit (1 or 2) within `secs` whose message holds every word."""
    ok = not r.timed_out and r.rc in (1, 2) and all(w in r.err for w in words) and r.secs < secs
    first = next((line for line in r.err.splitlines() if "error" in line.lower()), r.err.strip()[:160])
    if r.timed_out:
        return False, f"hung: killed after {r.secs:.0f} s"
    if r.crashed():
        return False, f"crashed (exit {r.rc})"
    return ok, f"exit {r.rc} in {r.secs:.1f} s, peak {r.rss_mb:.0f} MB: {first[:200]}"


def file_attacks(c, sift):
    idx = c.t("idx")
    r = run([sift, "index", "--corpus", str(SAMPLE), "--index", str(idx), "--dense", str(TINY_CLIP), "-q"], 300)
    assert r.rc == 0, r.err
    c.t("run").write_text("q1 Q0 d1 1 1.0 x\n")
    c.t("qrels").write_text("q1 0 d1 1\n")
    fifo = c.fifo("fifo")
    sparse = c.t("sparse")
    with open(sparse, "wb") as f:
        f.truncate(100 << 30)
    dev_link = c.t("zero-link")
    dev_link.symlink_to("/dev/zero")
    base_eval = [sift, "eval", "--corpus", str(SAMPLE), "--index", str(idx), "--domains", "gis"]
    dead = "http://127.0.0.1:9/v1"
    gen = [sift, "generate", "captions", "--corpus", str(SAMPLE), "--domains", "gis", "--generator", dead,
           "--model", "m", "--out", str(c.t("gen"))]
    cases = [
        ("`eval --run /dev/zero`", [sift, "eval", "--run", "/dev/zero", "--qrels", str(c.t("qrels"))],
         ["character device"]),
        ("`eval --qrels` a FIFO without a writer", [sift, "eval", "--run", str(c.t("run")), "--qrels", str(fifo)],
         ["FIFO"]),
        ("`eval --run` a sparse 100 GiB file without newlines",
         [sift, "eval", "--run", str(sparse), "--qrels", str(c.t("qrels"))], ["sparse:1", "bytes"]),
        ("`eval --run` a symlink to /dev/zero", [sift, "eval", "--run", str(dev_link), "--qrels", str(c.t("qrels"))],
         ["character device"]),
        ("`eval --exclude` a directory",
         [sift, "eval", "--run", str(c.t("run")), "--qrels", str(c.t("qrels")), "--exclude", str(c.tmp)],
         ["directory"]),
        ("`eval --query-augment` a FIFO", base_eval + ["--query-augment", f"captions:{fifo}"], ["FIFO"]),
        ("`eval --instructions-file /dev/urandom`", base_eval + ["--instructions-file", "/dev/urandom"],
         ["character device"]),
        ("`eval --rerank-prompt /dev/zero`",
         base_eval + ["--rerank", f"pointwise:{dead}", "--rerank-model", "m", "--rerank-prompt", "/dev/zero"],
         ["character device"]),
        ("`eval --rerank-cache` a FIFO",
         base_eval + ["--rerank", f"pointwise:{dead}", "--rerank-model", "m", "--rerank-cache", str(fifo)],
         ["FIFO"]),
        ("`generate --prompt` a FIFO", gen + ["--prompt", str(fifo)], ["FIFO"]),
        ("`generate --cache /dev/zero`", gen + ["--cache", "/dev/zero"], ["character device"]),
    ]
    for name, args, words in cases:
        c.attack("file arguments", name, lambda a=args, w=words: refused(run(a, 60), *w))

    def report_fifo():
        d = c.t("results-fifo")
        d.mkdir()
        os.mkfifo(d / "results.json")
        return refused(run([sift, "report", str(d), "--out", str(c.t("r.html"))], 60), "FIFO")

    c.attack("file arguments", "`report`: results.json a FIFO", report_fifo)

    def report_sparse():
        d = c.t("results-sparse")
        d.mkdir()
        with open(d / "results.json", "wb") as f:
            f.truncate(10 << 30)
        return refused(run([sift, "report", str(d), "--out", str(c.t("r.html"))], 60), "over the limit")

    c.attack("file arguments", "`report`: results.json a sparse 10 GiB file", report_sparse)

    def embed_cache_fifo():
        idx2 = c.t("idx-cache")
        r = run([sift, "index", "--corpus", str(SAMPLE), "--index", str(idx2), "--domains", "gis",
                 "--dense", str(TINY_CLIP), "-q"], 300)
        assert r.rc == 0, r.err
        cache = next((idx2 / "embed-cache").glob("*.bin"))
        cache.unlink()
        os.mkfifo(cache)
        return refused(run([sift, "index", "--corpus", str(SAMPLE), "--index", str(idx2), "--domains", "gis",
                            "--dense", str(TINY_CLIP), "--replace", "-q"], 120), "FIFO")

    c.attack("file arguments", "`index`: INDEX/embed-cache/*.bin a FIFO", embed_cache_fifo)

    def bad_utf8():
        p = c.t("run-utf8")
        p.write_bytes(b"q1 Q0 d1 1 1.0 x\nq1 Q0 d\xff 2 0.5 x\n")
        return refused(run([sift, "eval", "--run", str(p), "--qrels", str(c.t("qrels"))]), "run-utf8:2", "UTF-8")

    c.attack("file arguments", "`eval --run` with invalid UTF-8 on line 2", bad_utf8)
    return idx


def output_attacks(c, sift, idx):
    results = c.t("results")
    r = run([sift, "eval", "--corpus", str(SAMPLE), "--index", str(idx), "--out", str(results), "-q"], 300)
    assert r.rc == 0, r.err

    def fifo_out():
        f = c.fifo("page.fifo")
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("bytes", Path(f).read_bytes()))
        t.start()
        r = run([sift, "report", str(results), "--out", str(f)], 60)
        t.join(30)
        still = f.is_fifo()
        n = len(got.get("bytes", b""))
        return r.rc == 0 and still and n > 1000, f"exit {r.rc}; the reader got {n} bytes; still a FIFO: {still}"

    c.attack("outputs", "`report --out` a FIFO", fifo_out)

    def dev_full():
        # a device node of /dev/full's numbers made here (as root), so that a build that
        # replaces devices replaces this one, not the system's
        full = c.t("full")
        if os.geteuid() != 0:
            return False, "skipped: making a device node needs root"
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        r = run([sift, "report", str(results), "--out", str(full)], 60)
        still = full.is_char_device()
        return r.rc == 1 and still and "No space" in r.err, f"exit {r.rc}; still a device: {still}"

    c.attack("outputs", "`report --out` a device (a node of /dev/full's numbers)", dev_full)

    def link_out():
        target, link = c.t("target.html"), c.t("link.html")
        target.write_text("old")
        link.symlink_to(target)
        r = run([sift, "report", str(results), "--out", str(link)], 60)
        return (r.rc == 0 and link.is_symlink() and target.stat().st_size > 1000,
                f"exit {r.rc}; link kept: {link.is_symlink()}; target {target.stat().st_size} bytes")

    c.attack("outputs", "`report --out` a symbolic link", link_out)

    def dangling_out():
        link = c.t("dangling.html")
        link.symlink_to(c.t("nowhere/x.html"))
        return refused(run([sift, "report", str(results), "--out", str(link)], 60), "symbolic link to nothing")

    c.attack("outputs", "`report --out` a dangling symbolic link", dangling_out)
    c.attack("outputs", "`report --out` a directory",
             lambda: refused(run([sift, "report", str(results), "--out", str(c.tmp)], 60), "directory"))

    def stale_tmp():
        stale = results / "runs" / ".task1.bm25.trec.tmp-4194999"
        stale.write_text("half")
        r = run([sift, "eval", "--corpus", str(SAMPLE), "--index", str(idx), "--out", str(results), "-q"], 300)
        return r.rc == 0 and not stale.exists(), f"exit {r.rc}; a killed run's temporary file left: {stale.exists()}"

    c.attack("outputs", "a killed `eval`'s `runs/*.trec.tmp-PID`, then another eval", stale_tmp)


def flag_attacks(c, sift):
    big = "18446744073709551615"
    cases = [
        ("`report --resamples 2^64-1`", ["report", "d", "--out", "o", "--resamples", big]),
        ("`generate --timeout 2^64-1`", ["generate", "captions", "--corpus", "c", "--generator", "g",
                                         "--out", "o", "--timeout", big]),
        ("`generate --retries 4294967295`", ["generate", "captions", "--corpus", "c", "--generator", "g",
                                             "--out", "o", "--retries", "4294967295"]),
        ("`generate --temperature NaN`", ["generate", "captions", "--corpus", "c", "--generator", "g",
                                          "--out", "o", "--temperature", "NaN"]),
        ("`index --hnsw-m 2^64-1`", ["index", "--corpus", "c", "--index", "i", "--hnsw-m", big]),
        ("`eval --rerank-depth 2^64-1`", ["eval", "--corpus", "c", "--index", "i", "--rerank-depth", big]),
        ("`rag --top-k 0`", ["rag", "--corpus", "c", "--index", "i", "--generator", "g", "--out", "o",
                             "--top-k", "0"]),
        ("`report --max-mb 2^64-1`", ["report", "d", "--out", "o", "--max-mb", big]),
    ]
    for name, args in cases:
        c.attack("numeric flags", name, lambda a=args: refused(run([sift, *a], 30), "out of range"))
    c.attack("numeric flags", "`eval --k1 NaN` on an index",
             lambda: refused(run([sift, "eval", "--corpus", str(SAMPLE), "--index", str(c.t("idx")), "--k1", "NaN"],
                                 60), "k1 must be"))


def image_attacks(c, sift):
    kb = c.t("kb")
    kb.mkdir()
    bomb = png(23_000, 23_000)
    for i in range(2):
        (kb / f"bomb{i}.png").write_bytes(bomb)
    rows = [{"id": f"p{i}", "text": "a picture", "image_path": f"bomb{i}.png"} for i in range(2)]
    (kb / "kb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def index_bombs():
        r = run([sift, "index", "--corpus", str(kb / "kb.jsonl"), "--index", str(c.t("kb-idx")), "--dense",
                 str(TINY_CLIP), "--threads", "2", "--json"], 300)
        named = "bomb0.png" in r.out + r.err and "over the limit" in r.out + r.err
        return (r.rc == 0 and named and r.rss_mb < 1024,
                f"exit {r.rc}, peak {r.rss_mb:.0f} MB, each image skipped and named: {named}")

    c.attack("images", f"`index --dense` two 23,000 x 23,000 1-bit PNGs ({len(bomb) // 1024} KB each)", index_bombs)
    c.attack("images", "`search --image` the same PNG",
             lambda: refused(run([sift, "search", "--index", str(c.t("kb-idx")), "--image",
                                  str(kb / "bomb0.png"), "--retriever", f"dense:{TINY_CLIP.name}"], 60),
                             "pixels"))


def next_attacks(c, sift, idx):
    """The surfaces the next issues build on (training-scale serving, mapped vectors, video and
    audio, kernel levels), attacked as they stand."""
    def retrieve_batch():
        srv = Server(sift, ["--index", str(idx), "--corpus", str(SAMPLE)])
        try:
            body = {"queries": ["how do plants make sugar"] * 2560, "topk": 3, "return_scores": True}
            t0 = time.monotonic()
            status, h, text = post_json(srv.base, "/retrieve", body)
            secs = time.monotonic() - t0
            is_json = "json" in {k.lower(): v for k, v in h.items()}.get("content-type", "")
            health = http("GET", srv.base + "/healthz")[0]
        finally:
            srv.close()
        return (status in (200, 400, 404, 413) and is_json and health == 200 and secs < 30,
                f"Search-R1's 2,560-query batch: {status} ({'JSON' if is_json else 'not JSON'}) in {secs:.1f} s; "
                f"/healthz {health}")

    c.attack("next issues", "`POST /retrieve` with 2,560 queries (Search-R1's shape, issue 54)", retrieve_batch)

    def searches_during_embeddings():
        srv = Server(sift, ["--index", str(idx), "--corpus", str(SAMPLE), "--max-concurrency", "4"])
        stop = time.monotonic() + 4
        img = "data:image/png;base64," + base64.b64encode(small_png()).decode()
        heavy, light = [], []

        def embed_loop():
            while time.monotonic() < stop:
                heavy.append(post_json(srv.base, "/v1/embeddings", {"model": TINY_CLIP.name, "input": [img] * 8})[0])

        def search_loop(i):
            for j in range(6):
                light.append(post_json(srv.base, "/v1/search",
                                       {"query": f"plants {i} {j}", "domain": "biology", "top_k": 3})[0])
        try:
            threads = [threading.Thread(target=embed_loop) for _ in range(8)]
            threads += [threading.Thread(target=search_loop, args=(i,)) for i in range(24)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        finally:
            srv.close()
        counts = {k: light.count(k) for k in sorted(set(light))}
        hcounts = {k: heavy.count(k) for k in sorted(set(heavy))}
        dropped = light.count(0)
        ok_share = light.count(200) / max(1, len(light))
        return (dropped == 0 and ok_share >= 0.9,
                f"24 search clients beside 8 embedding clients (--max-concurrency 4): searches {counts}, "
                f"embeddings {hcounts}")

    c.attack("next issues", "searches while embedding clients saturate the service (issue 54's load)",
             searches_during_embeddings)

    def truncated_vectors():
        copy = c.t("idx-truncated")
        shutil.copytree(idx, copy, symlinks=True)
        vec = next(copy.glob("gen-*/dense/*/gis/vectors.*"))
        with open(vec, "r+b") as f:
            f.truncate(max(0, vec.stat().st_size // 2 - 3))
        r = run([sift, "search", "--index", str(copy), "--query", "plants", "--domain", "gis",
                 "--retriever", f"dense:{TINY_CLIP.name}"], 60)
        return refused(r, vec.name)

    c.attack("next issues", "a dense index's vectors file cut short (issue 55 maps these files)", truncated_vectors)

    def media_in_kb():
        kb = c.t("media-kb")
        kb.mkdir()
        (kb / "clip.mp4").write_bytes(b"\0\0\0\x18ftypmp42" + os.urandom(2000))
        (kb / "talk.wav").write_bytes(b"RIFF\x24\0\0\0WAVEfmt " + os.urandom(500))
        rows = [{"id": "v1", "text": "a video", "image_path": "clip.mp4"},
                {"id": "a1", "text": "a recording", "image_path": "talk.wav"}]
        (kb / "kb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        r = run([sift, "index", "--corpus", str(kb / "kb.jsonl"), "--index", str(c.t("media-idx")), "--dense",
                 str(TINY_CLIP), "--json"], 120)
        text = r.out + r.err
        named = "clip.mp4" in text and "talk.wav" in text
        return (r.rc == 0 and named, f"exit {r.rc}; both files counted as undecodable images and named: {named}")

    c.attack("next issues", "an MP4 and a WAV named as knowledge-base images (issue 56)", media_in_kb)

    def kernels_env():
        r = run([sift, "search", "--index", str(idx), "--query", "plants", "--domain", "gis", "--retriever",
                 f"dense:{TINY_CLIP.name}"], 60, env={**os.environ, "SIFT_KERNELS": "avx9000"})
        warned = "SIFT_KERNELS" in r.err
        return (r.rc == 0 and warned, f"exit {r.rc}; warned: {warned}: {r.err.strip().splitlines()[0][:120]}")

    c.attack("next issues", "`SIFT_KERNELS=avx9000` (issue 57's switch)", kernels_env)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    p.add_argument("--sift", default=str(target / "debug" / "sift"))
    p.add_argument("--out", help="write the Markdown table here too")
    p.add_argument("--only", help="run the attacks whose area or name contains this")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--before", help="another build's --json rows: the table gains a column of its outcomes")
    p.add_argument("--before-label", default="before", help="that column's heading")
    p.add_argument("--memory-limit-mb", type=int, help="address-space limit of every process started")
    a = p.parse_args()
    global MEMORY_LIMIT
    MEMORY_LIMIT = a.memory_limit_mb << 20 if a.memory_limit_mb else None
    c = Campaign(a.sift, a.only)
    try:
        idx = file_attacks(c, a.sift)
        output_attacks(c, a.sift, idx)
        flag_attacks(c, a.sift)
        image_attacks(c, a.sift)
        serve_attacks(c, a.sift, idx)
        endpoint_attacks(c, a.sift, idx)
        next_attacks(c, a.sift, idx)
    finally:
        if not a.keep:
            shutil.rmtree(c.tmp, ignore_errors=True)
    before = json.loads(Path(a.before).read_text()) if a.before else None
    table = c.table(before, a.before_label)
    print(table)
    if a.json:
        rows = [{"area": r[0], "attack": r[1], "outcome": r[2], "handled": r[3]} for r in c.rows]
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    if a.out:
        Path(a.out).write_text(table + "\n")
    sys.exit(0 if all(r[3] for r in c.rows) else 1)


def small_png():
    """A valid 8 x 8 RGB PNG."""
    raw = b"".join(b"\0" + bytes([200, 30, 30]) * 8 for _ in range(8))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def post_json(base, path, body, headers=None, timeout=60):
    h = {"content-type": "application/json", **(headers or {})}
    return http("POST", base + path, json.dumps(body).encode(), h, timeout)


def serve_attacks(c, sift, idx):
    """The service: files swapped under it, odd URLs, bulk requests, keys, links, headers."""
    kb = c.t("served-kb")
    kb.mkdir()
    (kb / "cat.png").write_bytes(small_png())
    (kb / "kb.jsonl").write_text(json.dumps({"id": "p1", "text": "a red square", "image_path": "cat.png"}) + "\n")
    kb_idx = c.t("served-kb-idx")
    r = run([sift, "index", "--corpus", str(kb / "kb.jsonl"), "--index", str(kb_idx), "-q"], 120)
    assert r.rc == 0, r.err
    srv = Server(sift, ["--index", str(kb_idx), "--corpus", str(kb / "kb.jsonl")])
    try:
        image_url = srv.base + "/v1/kb/image/cat.png"
        assert http("GET", image_url)[0] == 200

        def link_swap():
            os.rename(kb / "cat.png", kb / "cat.kept")
            os.symlink("/etc/passwd", kb / "cat.png")
            status, _, body = http("GET", image_url)
            leaked = b"root:" in body
            os.unlink(kb / "cat.png")
            os.rename(kb / "cat.kept", kb / "cat.png")
            return (status != 200 and not leaked and b"/etc/passwd" not in body,
                    f"{status}; system file in the answer: {leaked}; answer: {body[:90].decode(errors='replace')}")

        c.attack("service", "an image replaced by a link to /etc/passwd after start", link_swap)

        def fifo_swap():
            os.rename(kb / "cat.png", kb / "cat.kept")
            os.mkfifo(kb / "cat.png")
            times = []
            for _ in range(4):
                t0 = time.monotonic()
                status = http("GET", image_url, timeout=30)[0]
                times.append((status, round(time.monotonic() - t0, 2)))
            health = http("GET", srv.base + "/healthz")[0]
            os.unlink(kb / "cat.png")
            os.rename(kb / "cat.kept", kb / "cat.png")
            back = http("GET", image_url)[0]
            return (all(st == 500 and t < 2 for st, t in times) and health == 200 and back == 200,
                    f"four reads {times}; /healthz {health}; the file put back: {back}")

        c.attack("service", "an image replaced by a FIFO after start (four reads)", fifo_swap)

        def raw_utf8():
            got = {t: raw_get(srv.port, t) for t in [b"/r/http%3\xc3\xa9xxx", b"/r/123456\xc3\xa9"]}
            health = http("GET", srv.base + "/healthz")[0]
            return (all(v in (400, 404) for v in got.values()) and health == 200,
                    f"{ {k.decode(errors='replace'): v for k, v in got.items()} }; /healthz {health}")

        c.attack("service", "`GET /r/` with raw UTF-8 where the scheme would be", raw_utf8)

        def serper_batch():
            before = srv.rss_mb()
            batch = json.dumps([{"q": "a"}] * 2_500_000, separators=(",", ":")).encode()
            t0 = time.monotonic()
            status, _, body = http("POST", srv.base + "/search", batch, {"content-type": "application/json"})
            secs = time.monotonic() - t0
            grew = srv.rss_mb() - before
            return (status == 400 and grew < 200 and b"100" in body,
                    f"{len(batch) / 1e6:.0f} MB array: {status} in {secs:.1f} s, resident memory +{grew:.0f} MB")

        c.attack("service", "a Serper batch of 2,500,000 queries (27 MB)", serper_batch)

        def key_spaces():
            out = run([sift, "serve", "--index", str(kb_idx), "--api-key", "", "--addr", f"127.0.0.1:{free_port()}"],
                      15)
            empty_ok = out.rc == 1 and "api-key" in out.err.lower()
            s2 = Server(sift, ["--index", str(kb_idx), "--api-key", "  secret  "])
            try:
                plain = http("GET", s2.base + "/v1/indexes", headers={"X-API-KEY": "secret"})[0]
                bearer = http("GET", s2.base + "/v1/indexes", headers={"Authorization": "bearer secret"})[0]
                wrong = http("GET", s2.base + "/v1/indexes", headers={"X-API-KEY": "secreT"})[0]
                warned = "trim" in s2.output().lower()
            finally:
                s2.close()
            return (empty_ok and plain == 200 and bearer == 200 and wrong == 401 and warned,
                    f"--api-key '': exit {out.rc}; '  secret  ': X-API-KEY secret {plain}, "
                    f"'bearer secret' {bearer}, a wrong key {wrong}, warned at start: {warned}")

        c.attack("service", "`--api-key` empty / with spaces, `bearer` in lower case", key_spaces)
    finally:
        srv.close()

    dense = Server(sift, ["--index", str(idx), "--corpus", str(SAMPLE)])
    try:
        def embeddings_flood():
            # just under the per-image limit (40,000,000 pixels by default)
            bomb = base64.b64encode(png(6320, 6320)).decode()
            body = {"model": TINY_CLIP.name, "input": [f"data:image/png;base64,{bomb}"] * 256}
            t0 = time.monotonic()
            status, _, text = post_json(dense.base, "/v1/embeddings", body)
            secs = time.monotonic() - t0
            t1 = time.monotonic()
            search = post_json(dense.base, "/v1/search", {"query": "plants", "domain": "biology", "top_k": 3})[0]
            return (status in (400, 413) and secs < 5 and search == 200,
                    f"256 images of 40 Mpx: {status} in {secs:.1f} s ({text[:80].decode(errors='replace')}); "
                    f"a search meanwhile {search} in {time.monotonic() - t1:.1f} s")

        c.attack("service", "`/v1/embeddings` with 256 images of 40 Mpx each", embeddings_flood)

        def headers():
            hit = post_json(dense.base, "/v1/search", {"query": "plants", "domain": "biology", "top_k": 1})
            page = json.loads(hit[2])["hits"][0]["page_url"]
            status, h, _ = http("GET", page if page.startswith("http") else dense.base + page)
            h = {k.lower(): v for k, v in h.items()}
            csp = h.get("content-security-policy", "")
            return (status == 200 and h.get("x-content-type-options") == "nosniff" and "script" not in csp
                    and "default-src 'none'" in csp, f"{status}; nosniff: {h.get('x-content-type-options')}; CSP: {csp}")

        c.attack("service", "a page's headers (script from the corpus)", headers)
    finally:
        dense.close()

    def dot_segments():
        import requests
        beir = c.t("dots")
        beir.mkdir()
        (beir / "corpus.jsonl").write_text(json.dumps({"_id": "docs/../notes/x", "text": "boundary layer flow"}) + "\n"
                                           + json.dumps({"_id": "./y", "text": "heat transfer"}) + "\n")
        (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "boundary layer"}) + "\n")
        (beir / "qrels").mkdir()
        (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tdocs/../notes/x\t1\n")
        didx = c.t("dots-idx")
        r = run([sift, "index", "--corpus", str(beir), "--index", str(didx), "-q"], 120)
        assert r.rc == 0, r.err
        s3 = Server(sift, ["--index", str(didx), "--corpus", str(beir)])
        try:
            hits = json.loads(post_json(s3.base, "/v1/search", {"query": "boundary layer heat", "top_k": 2})[2])["hits"]
            got = []
            for hit in hits:
                url = hit["page_url"] if hit["page_url"].startswith("http") else s3.base + hit["page_url"]
                resp = requests.get(url, timeout=10)
                got.append((hit["id"], resp.status_code, hit["text"] in resp.text))
        finally:
            s3.close()
        return (len(got) == 2 and all(st == 200 and found for _, st, found in got),
                f"ids with dot segments, page links fetched with requests: {got}")

    c.attack("service", "ids `docs/../notes/x` and `./y`: their page links through `requests`", dot_segments)


def endpoint_attacks(c, sift, idx):
    """Misbehaving OpenAI-compatible endpoints behind generation and reranking."""
    gen = [sift, "generate", "captions", "--corpus", str(SAMPLE), "--domains", "gis", "--model", "m"]

    def retry_after(value):
        def attack():
            e = Endpoint(f"retry-after:{value}")
            try:
                r = run(gen + ["--generator", e.url, "--out", str(c.t(f"gen-ra-{len(value)}")), "--retries", "0"], 60)
            finally:
                e.close()
            ok = r.rc == 1 and not r.crashed() and "429" in r.err and r.secs < 30
            return ok, f"exit {r.rc} in {r.secs:.1f} s: {'crashed' if r.crashed() else 'HTTP 429 named'}"
        return attack

    for v in ["1e20", "-1", "NaN", "Fri, 31 Dec 9999 23:59:59 GMT"]:
        c.attack("endpoints", f"429 with `Retry-After: {v}` (`sift generate`)", retry_after(v))

    def hung_generate():
        e = Endpoint("hang")
        try:
            r = run(gen + ["--generator", e.url, "--out", str(c.t("gen-hang")), "--timeout", "2", "--retries", "1"], 120)
        finally:
            e.close()
        return (r.rc == 1 and r.secs < 20 and not r.crashed(),
                f"exit {r.rc} in {r.secs:.1f} s ({e.hits} requests: --timeout 2 --retries 1)")

    c.attack("endpoints", "a hung endpoint (`sift generate --timeout 2 --retries 1`)", hung_generate)

    def hung_eval():
        e = Endpoint("hang")
        out = c.t("eval-hang")
        try:
            r = run([sift, "eval", "--corpus", str(SAMPLE), "--index", str(idx), "--domains", "gis",
                     "--rerank", f"listwise:{e.url}", "--rerank-model", "m", "--rerank-timeout", "1",
                     "--rerank-retries", "0", "--out", str(out)], 300)
        finally:
            e.close()
        runs = sorted(p.name for p in (out / "runs").glob("*.trec")) if (out / "runs").exists() else []
        return (r.rc == 1 and r.secs < 60 and len(runs) >= 2 and "partial" in r.err,
                f"exit {r.rc} in {r.secs:.1f} s; runs written: {runs}")

    c.attack("endpoints", "a hung listwise reranker (`sift eval --rerank-timeout 1 --rerank-retries 0`)", hung_eval)

    def hung_serve():
        e = Endpoint("hang")
        srv = Server(sift, ["--index", str(idx), "--corpus", str(SAMPLE), "--rerank", f"listwise:{e.url}",
                            "--rerank-model", "m", "--timeout", "2", "--max-concurrency", "2"])
        try:
            seen = []
            for i in range(4):
                t0 = time.monotonic()
                status, _, _ = http("POST", srv.base + "/v1/search",
                                    json.dumps({"query": f"plants {i}", "domain": "biology", "top_k": 3}).encode(),
                                    {"content-type": "application/json"}, timeout=30)
                seen.append((status, round(time.monotonic() - t0, 1)))
            healthy = http("GET", srv.base + "/healthz")[0]
        finally:
            srv.close()
            e.close()
        ok = all(s in (500, 502, 504) and t < 6 for s, t in seen) and healthy == 200
        return ok, f"four searches in a row: {seen} (status, seconds); /healthz {healthy}"

    c.attack("endpoints", "`sift serve --rerank listwise:HUNG --timeout 2`, four searches", hung_serve)

    def nan_cache():
        cache = c.t("rerank-cache.jsonl")
        e = Endpoint("nan-logprobs")
        args = [sift, "eval", "--corpus", str(SAMPLE), "--index", str(idx), "--domains", "gis", "--rerank",
                f"pointwise:{e.url}", "--rerank-model", "m", "--rerank-cache", str(cache), "--rerank-depth", "3",
                "--out", str(c.t("eval-nan"))]
        try:
            r = run(args, 300)
        finally:
            e.close()
        run_file = next((p for p in c.tmp.glob("eval-nan/runs/*rerank*.trec")), None)
        scores = [float(line.split()[4]) for line in run_file.read_text().splitlines()] if run_file else []
        finite = bool(scores) and all(x == x and abs(x) != float("inf") for x in scores)
        return (r.rc == 0 and finite,
                f"exit {r.rc}; {len(scores)} reranked scores, all finite: {finite}")

    c.attack("endpoints", "a pointwise endpoint whose log probabilities are +5 and -3.4e38", nan_cache)

    def nan_in_cache():
        cache = c.t("rerank-cache-poisoned.jsonl")
        e = Endpoint("nan-logprobs")
        try:
            # a cache written by a run with scores, as the endpoint gives them
            run([sift, "eval", "--corpus", str(SAMPLE), "--index", str(idx), "--domains", "gis", "--rerank",
                 f"pointwise:{e.url}", "--rerank-model", "m", "--rerank-cache", str(cache), "--rerank-depth", "3"], 300)
        finally:
            e.close()
        text = cache.read_text() if cache.exists() else ""
        # the score is the cached generation's text: NaN, inf and -inf in turn
        values = iter(["NaN", "inf", "-inf"] * len(text))
        poisoned = re.sub(r'"text":"[-0-9.e+]+"', lambda m: f'"text":"{next(values)}"', text)
        cache.write_text(poisoned)
        e = Endpoint("nan-logprobs")
        try:
            r = run([sift, "eval", "--corpus", str(SAMPLE), "--index", str(idx), "--domains", "gis", "--rerank",
                     f"pointwise:{e.url}", "--rerank-model", "m", "--rerank-cache", str(cache), "--rerank-depth", "3",
                     "--out", str(c.t("eval-nan2"))], 300)
        finally:
            e.close()
        run_file = next((p for p in c.tmp.glob("eval-nan2/runs/*rerank*.trec")), None)
        scores = [float(line.split()[4]) for line in run_file.read_text().splitlines()] if run_file else []
        finite = bool(scores) and all(x == x and abs(x) != float("inf") for x in scores)
        return (r.rc == 0 and finite and e.hits > 0 and poisoned != text,
                f"exit {r.rc}; cache entries made NaN were asked again ({e.hits} requests); scores finite: {finite}")

    c.attack("endpoints", "pointwise rerank cache entries edited to NaN", nan_in_cache)


if __name__ == "__main__":
    main()
