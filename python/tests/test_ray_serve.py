"""Sift behind Ray Serve (`sift_ir.ray_serve`), on a local Ray instance with 2 replicas.

Each replica runs the `sift` binary (conftest's `sift_bin`: SIFT_BIN, else the workspace's
debug build) over a BM25 index of the bundled sample corpus. The answers through Ray are
compared with a plain `sift serve` of the same index, byte for byte; under load from
clients with verl's retry policy, one replica's actor is killed (its `sift serve` must go
with it, and the replica come back), then the other replica's `sift serve` is killed (the
health check must fail and the replica be replaced), and every request must still end with
the right answer. Skipped only when Ray Serve is not installed.

Ray runs with 2 logical CPUs (the project's machines have 2 cores), each replica asking
for 0.5.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import SAMPLE, run_sift

pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'ray[serve]'")
requests = pytest.importorskip("requests", reason="requests is not installed")
import ray  # noqa: E402
from ray import serve  # noqa: E402

from sift_ir.ray_serve import build, deployment, find_sift  # noqa: E402

APP = "sift"
QUERIES = [
    "how do plants make sugar",
    "map projection distortion",
    "dark matter",
    "entropy of a reservoir",
    "coordinate reference system",
    "enzyme membrane protein",
]
# verl's search tool: 10 tries, on 500/502/503/504, connection errors and timeouts, with a
# linear back-off (verl's step is 1 s; shortened here to keep the test short)
RETRY_STATUS = {500, 502, 503, 504}
TRIES = 10
STEP_S = 0.3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def index(sift_bin, tmp_path_factory) -> Path:
    """The sample corpus indexed with BM25."""
    out = tmp_path_factory.mktemp("ray-serve") / "index"
    run_sift(sift_bin, "index", "--corpus", str(SAMPLE), "--index", str(out), "-q")
    return out


@pytest.fixture(scope="module")
def plain(sift_bin, index):
    """A plain `sift serve` of the same index: the answers to compare with."""
    proc = subprocess.Popen(
        [sift_bin, "serve", "--index", str(index), "--corpus", str(SAMPLE), "--quiet",
         "--addr", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = None
    for line in proc.stderr:
        if line.startswith("sift serve: listening on "):
            base = line.split("listening on ", 1)[1].strip()
            break
    assert base, "the plain sift serve did not start"
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    try:
        yield base
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.fixture(scope="module")
def ray_serve(sift_bin, index):
    """2 replicas on a local Ray, Serve's proxy on a free loopback port: its base URL."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 1024**2,
        log_to_driver=False,
    )
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(
            deployment(
                index,
                corpus=SAMPLE,
                sift_bin=sift_bin,
                num_replicas=2,
                num_cpus=0.5,
                health_check_period_s=1.0,
                health_check_timeout_s=10.0,
            ),
            name=APP,
            route_prefix="/",
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def retrieve_body(i: int) -> dict:
    """Search-R1's batch call; the i-th of a cycle of query pairs."""
    k = i % len(QUERIES)
    return {"queries": [QUERIES[k], QUERIES[(k + 1) % len(QUERIES)]], "topk": 3,
            "return_scores": True}


def post_with_retries(url: str, body: dict, log: list) -> requests.Response:
    """verl's policy: the answer, or the last failure raised after TRIES tries."""
    last = None
    for attempt in range(TRIES):
        try:
            r = requests.post(url, json=body, timeout=30)
            if r.status_code not in RETRY_STATUS:
                return r
            last = RuntimeError(f"{r.status_code}: {r.text[:200]}")
            log.append(f"{r.status_code} (Retry-After {r.headers.get('retry-after')})")
        except (requests.ConnectionError, requests.Timeout) as e:
            last = e
            log.append(type(e).__name__)
        time.sleep(STEP_S * (attempt + 1))
    raise AssertionError(f"{TRIES} tries failed: {last}")


def replicas() -> dict:
    """The deployment's live replica actors: {actor name: process id}."""
    found = {}
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{APP}#"):
            try:
                actor = ray.get_actor(a["name"], namespace="serve")
                # a lambda: cloudpickle sends it by value (a function of this module would go
                # by reference, and the worker cannot import the tests' module)
                found[a["name"]] = ray.get(
                    actor.__ray_call__.remote(lambda _actor: __import__("os").getpid()), timeout=10)
            except (ValueError, ray.exceptions.RayError):
                continue  # dead, or not up yet
    return found


def children(pid: int) -> list:
    """The processes whose parent is `pid` (Linux /proc): (pid, command name)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == pid:
            found.append((int(entry.name), name))
    return found


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_for(what: str, check, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_find_sift_says_what_is_missing(monkeypatch, tmp_path, sift_bin):
    assert find_sift(sift_bin) == str(Path(sift_bin).resolve())
    monkeypatch.setenv("SIFT_BIN", sift_bin)
    assert find_sift() == str(Path(sift_bin).resolve())
    monkeypatch.setenv("SIFT_BIN", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="SIFT_BIN="):
        find_sift()
    monkeypatch.delenv("SIFT_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no sift binary"):
        find_sift()
    with pytest.raises(ValueError, match="index=DIR"):
        build({"replicas": "2"})
    with pytest.raises(ValueError, match="unknown arguments"):
        build({"index": "x", "replicaz": "2"})


def test_every_route_answers_as_sift_serve(ray_serve, plain):
    """Bodies, statuses and headers as the binary gives them, errors included."""
    calls = [
        ("POST", "/retrieve", {"queries": QUERIES, "topk": 3, "return_scores": True}),
        ("POST", "/retrieve", {"queries": QUERIES[:2]}),
        ("POST", "/retrieve", {"query": "dark matter"}),
        ("POST", "/v1/search", {"query": "how do plants make sugar", "domain": "biology"}),
        ("POST", "/retrieve", {"queries": "not a list"}),
        ("POST", "/v1/search", {"query": "x", "top_k": 0}),
        ("GET", "/v1/indexes", None),
        ("GET", "/search?q=photosynthesis&num=3", None),
        ("GET", "/v1/nope/doc/nothing", None),
        ("GET", "/healthz", None),
    ]
    statuses = set()
    for method, path, body in calls:
        want = requests.request(method, plain + path, json=body, timeout=30)
        got = requests.request(method, ray_serve + path, json=body, timeout=30)
        what = f"{method} {path}"
        assert got.status_code == want.status_code, f"{what}: {got.text}"
        # links to pages are built from the Host the client called: through Ray, Serve's
        # proxy, where the client can follow them
        assert got.content == want.content.replace(plain.encode(), ray_serve.encode()), what
        for h in ("content-type", "x-content-type-options"):
            assert got.headers.get(h) == want.headers.get(h), f"{what}: {h}"
        statuses.add(got.status_code)
    # successes and the binary's own refusals both went through
    assert 200 in statuses and any(400 <= s < 500 for s in statuses), statuses
    organic = requests.get(ray_serve + "/search?q=photosynthesis", timeout=30).json()["organic"]
    link = organic[0]["link"]
    assert link.startswith(ray_serve + "/"), link
    page = requests.get(link, timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    result = requests.post(ray_serve + "/retrieve", json=calls[0][2], timeout=30).json()
    assert len(result["result"]) == len(QUERIES)
    assert all(hits and hits[0]["document"]["contents"] for hits in result["result"]), result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_a_replica_killed_under_load_loses_no_request(ray_serve, plain):
    url = ray_serve + "/retrieve"
    expected = {}
    for i in range(len(QUERIES)):
        r = requests.post(plain + "/retrieve", json=retrieve_body(i), timeout=30)
        assert r.status_code == 200
        # the documents' page links name the host asked (the proxy's, through Ray)
        expected[i] = r.content.replace(plain.encode(), ray_serve.encode())
    before = wait_for("2 replicas", lambda: (r := replicas()) and len(r) == 2 and r)

    stop = threading.Event()
    done = []  # (i, status, body)
    failures = []
    retries = []
    lock = threading.Lock()

    def client(offset: int) -> None:
        i = offset
        while not stop.is_set():
            try:
                r = post_with_retries(url, retrieve_body(i), retries)
                with lock:
                    done.append((i % len(QUERIES), r.status_code, r.content))
            except AssertionError as e:
                with lock:
                    failures.append(str(e))
            i += 2

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    try:
        wait_for("requests before the kill", lambda: len(done) >= 20)
        victim, victim_pid = sorted(before.items())[0]
        sift_children = [p for p, name in children(victim_pid) if name == "sift"]
        assert len(sift_children) == 1, children(victim_pid)
        at_kill = len(done)
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)

        # the killed replica's sift serve goes with it (the parent-death signal)
        wait_for("the killed replica's sift serve to exit",
                 lambda: not running(sift_children[0]), 30)
        # and Serve starts a new replica in its place
        after = wait_for(
            "a new replica",
            lambda: (r := replicas()) and len(r) == 2 and victim not in r and r,
            90,
        )
        wait_for("the application running",
                 lambda: serve.status().applications[APP].status == "RUNNING", 60)
        new = (set(after) - set(before)).pop()
        assert [name for _, name in children(after[new])].count("sift") == 1
        # load goes on over both replicas for a while
        target = len(done) + 20
        wait_for("requests after the new replica", lambda: len(done) >= target)

        # the engine itself dies (SIGKILL to the other replica's sift serve): check_health
        # fails, Serve replaces that replica; meanwhile it answers 503 with Retry-After
        survivor = next(name for name in after if name != new)
        (engine,) = [p for p, name in children(after[survivor]) if name == "sift"]
        os.kill(engine, signal.SIGKILL)
        wait_for(
            "the replica whose sift serve died to be replaced",
            lambda: (r := replicas()) and len(r) == 2 and survivor not in r,
            90,
        )
        target = len(done) + 20
        wait_for("requests after the second replacement", lambda: len(done) >= target)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not failures, failures[:3]
    assert len(done) > at_kill + 40
    wrong = [(i, s) for i, s, body in done if s != 200 or body != expected[i]]
    assert not wrong, wrong[:5]
    print(f"{len(done)} requests, {len(retries)} retried ({sorted(set(retries))})",
          file=sys.stderr)


def test_the_module_runs_as_a_command(sift_bin):
    """`python -m sift_ir.ray_serve --help` describes the entry point without Ray running."""
    out = subprocess.run(
        [sys.executable, "-m", "sift_ir.ray_serve", "--help"],
        capture_output=True, text=True, env={**os.environ, "SIFT_BIN": sift_bin},
    )
    assert out.returncode == 0, out.stderr
    assert "--replicas" in out.stdout and "--index" in out.stdout
