"""Sift behind Ray Serve: N replicas of `sift serve` behind one route (`sift_ir.ray_serve`).

For training runs of search agents (Search-R1 / verl, ASearcher) that call one URL with
thousands of queries: each replica of the deployment loads the index once and answers every
route `sift serve` answers (Search-R1's and verl's `POST /retrieve`, `/v1/search`, the
Serper and SerpAPI shapes, pages, `/healthz`, ...), with the same bodies, statuses and
headers (`Retry-After` on a 503 included); Ray Serve's proxy spreads requests over the
replicas and replaces a replica that dies.

    from ray import serve
    from sift_ir.ray_serve import deployment

    serve.run(deployment("/data/wiki-index", corpus="/data/wiki", num_replicas=4))
    # POST http://HEAD:8000/retrieve {"queries": [...], "topk": 3, "return_scores": true}

or from the command line (a running cluster: `ray start --head` first, or a local one):

    python -m sift_ir.ray_serve --index /data/wiki-index --corpus /data/wiki --replicas 4
    serve run sift_ir.ray_serve:build index=/data/wiki-index corpus=/data/wiki replicas=4

Design. Each replica (a `SiftReplica` actor) starts one `sift serve` process on a loopback
port of its node and forwards every request to it, path, method, query, headers and body,
and answers with the child's status, headers and body (server-sent events, MCP's streams,
are streamed through). The alternative was to serve in-process through the extension module
(`sift_ir._sift`, `Index.search` per query, the routes written again in Python). The child
process was chosen because:

- the answers are `sift serve`'s own, not a second implementation of its shapes, errors and
  limits (`/retrieve`'s contents and 413, the OpenAPI routes, `Retry-After`): what
  `tests/serve` and `tests/harness_clients.py` check of the binary holds through Ray;
- searches run on Sift's own worker threads (`--max-concurrency`, concurrent requests in
  parallel, no GIL), with its request time limits; a Python replica would serialise its
  request handling on one interpreter;
- a crash of the engine takes down the child, not the replica: `check_health` reports it
  and Ray Serve replaces the replica (the child is killed with it: it gets SIGKILL when the
  replica's process dies, through Linux's parent-death signal, and SIGTERM when the replica
  stops cleanly).

The cost is one loopback HTTP hop per request (well under a millisecond) and the binary,
which every node must have: `sift_bin=`, else `SIFT_BIN` in the replica's environment,
else `sift` on its PATH. The index (and corpus) must be readable at the same path on every
node that runs a replica (a shared file system, or copied to each node).

Batching. Sift searches the queries of one request (Search-R1's batch: a GRPO step's
queries in one `/retrieve` call) one after another on one worker thread, and concurrent
requests in parallel on its workers; it encodes no queries of different requests together
yet. So the deployment does not merge requests with `@serve.batch`: merging verl's
one-query requests into one `/retrieve` call would put them on one worker, in sequence,
where they now run in parallel. Each replica takes up to `max_ongoing_requests` requests at
once (Ray queues the rest), which its `sift serve` spreads over its workers.

Limits: MCP over HTTP (`/mcp`) keeps sessions in one process, and Ray Serve does not route a
session's requests to the same replica: use MCP with one replica, or a `sift serve` of its
own. A request in flight on a replica that dies is lost with it (the proxy answers 500 or
503, or the connection drops): clients retry, as verl's and ASearcher's do.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

__all__ = ["SiftReplica", "build", "deployment", "find_sift", "main"]

logger = logging.getLogger("ray.serve")

# headers that belong to one connection, not to the request or answer carried (Host is
# kept: the links sift serve gives, to pages and images, are built from it, so they name
# the address the client called)
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
_LISTENING = "sift serve: listening on "


def find_sift(sift_bin: Optional[str] = None) -> str:
    """The `sift` binary: `sift_bin`, else `SIFT_BIN`, else `sift` on PATH."""
    for candidate, source in ((sift_bin, "sift_bin"), (os.environ.get("SIFT_BIN"), "SIFT_BIN")):
        if candidate:
            path = Path(candidate)
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise FileNotFoundError(f"{source}={candidate} is not an executable file")
            return str(path.resolve())
    found = shutil.which("sift")
    if found is None:
        raise FileNotFoundError(
            "no sift binary: pass sift_bin=, set SIFT_BIN, or put `sift` on PATH "
            "(cargo build --release -p sift-cli)"
        )
    return found


def _parent_death_signal() -> Any:
    """A `preexec_fn` that has Linux send the child SIGKILL when the thread that started it
    ends (here: the replica's process dies), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    # looked up before the fork: the child runs nothing that could wait on a lock another
    # thread of the replica held when it forked
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()
    pr_set_pdeathsig = 1
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigkill)
        # the replica died between fork and prctl: nothing would signal us
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class _Child:
    """One `sift serve` on a loopback port, started and watched by a thread of its own (the
    parent-death signal fires when the thread that forked ends: this one ends only after
    the child), its log lines passed to the replica's logger."""

    def __init__(self, command: Sequence[str], startup_timeout_s: float):
        self.command = list(command)
        self.base: Optional[str] = None
        self.returncode: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self._started = threading.Event()
        self._error: Optional[BaseException] = None
        self._tail: list = []
        self._stopping = False
        threading.Thread(target=self._run, name="sift-serve", daemon=True).start()
        if not self._started.wait(startup_timeout_s):
            self.stop()
            raise TimeoutError(
                f"sift serve did not listen within {startup_timeout_s} s: {self._log_tail()}"
            )
        if self._error is not None:
            raise self._error
        if self.base is None:
            raise RuntimeError(
                f"sift serve exited ({self.returncode}) before listening: {self._log_tail()}"
            )

    def _log_tail(self) -> str:
        return "\n".join(self._tail[-20:]) or "(no output)"

    def _run(self) -> None:
        try:
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                preexec_fn=_parent_death_signal(),
            )
        except BaseException as e:  # noqa: BLE001 (handed to the constructor)
            self._error = e
            self._started.set()
            return
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            if self.base is None:
                self._tail.append(line)
                if line.startswith(_LISTENING):
                    self.base = line[len(_LISTENING) :].strip()
                    self._started.set()
            logger.info("%s", line)
        self.returncode = self.proc.wait()
        if self._stopping:
            logger.info("sift serve stopped (status %s)", self.returncode)
        else:
            logger.warning("sift serve exited with status %s", self.returncode)
        self._started.set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM (sift serve drains its requests), then SIGKILL after `grace_s`."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self._stopping = True
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SiftReplica:
    """A Ray Serve replica: one `sift serve --index INDEX ARGS...` on a loopback port, every
    request forwarded to it. `deployment` wraps this class with `serve.deployment`."""

    def __init__(
        self,
        index: Optional[str],
        corpus: Optional[str] = None,
        sift_bin: Optional[str] = None,
        args: Sequence[str] = (),
        access_log: bool = False,
        startup_timeout_s: float = 1800.0,
        shutdown_grace_s: float = 15.0,
    ):
        command = [find_sift(sift_bin), "serve", "--addr", "127.0.0.1:0"]
        if index is not None:
            command += ["--index", str(index)]
        if corpus is not None:
            command += ["--corpus", str(corpus)]
        if not access_log:
            command.append("--quiet")
        command += [str(a) for a in args]
        self._grace = shutdown_grace_s
        self._child = _Child(command, startup_timeout_s)
        self._session: Any = None
        logger.info("sift serve ready at %s (pid %s)", self._child.base, self._child.proc.pid)

    @property
    def child_url(self) -> str:
        """The loopback URL of this replica's `sift serve`."""
        return str(self._child.base)

    def _client(self) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                base_url=self._child.base,
                # answers go to the client as the child wrote them
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None),
                connector=aiohttp.TCPConnector(limit=0),
            )
        return self._session

    async def __call__(self, request: Any) -> Any:
        """Forwards a Starlette request to the child; its answer, status and headers kept."""
        import aiohttp
        from starlette.responses import Response, StreamingResponse

        url = request.url.path
        if request.url.query:
            url += "?" + request.url.query
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP]
        body = await request.body()
        try:
            resp = await self._client().request(
                request.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            )
        except aiohttp.ClientError as e:
            # the child is gone or going: the client retries, on another replica once Ray
            # has replaced this one (check_health fails meanwhile)
            logger.warning("sift serve unreachable: %r", e)
            return Response(
                b'{"error": {"type": "unavailable", "field": null, '
                b'"message": "this replica\'s sift serve is not answering"}}',
                status_code=503,
                headers={"Retry-After": "1"},
                media_type="application/json",
            )
        out = [
            (k, v)
            for k, v in resp.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() not in ("date", "server")
        ]
        if resp.headers.get("content-type", "").startswith("text/event-stream"):

            async def chunks():
                try:
                    async for chunk in resp.content.iter_any():
                        yield chunk
                finally:
                    resp.release()

            stream = StreamingResponse(chunks(), status_code=resp.status)
            stream.raw_headers = _raw(out)
            return stream
        async with resp:
            data = await resp.read()
        answer = Response(data, status_code=resp.status)
        # the child's headers, repeated ones kept (Starlette's dict would merge them)
        answer.raw_headers = _raw(out) + [
            (k, v) for k, v in answer.raw_headers if k == b"content-length"
        ]
        return answer

    async def check_health(self) -> None:
        """Fails when the child has exited or does not answer `/healthz`: Ray Serve then
        replaces this replica."""
        import aiohttp

        if not self._child.alive():
            raise RuntimeError(f"sift serve exited with status {self._child.returncode}")
        try:
            async with self._client().get(
                "/healthz", timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"sift serve's /healthz answered {resp.status}")
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise RuntimeError(f"sift serve's /healthz did not answer: {e!r}") from e

    def __del__(self) -> None:
        child = getattr(self, "_child", None)
        if child is not None:
            child.stop(self._grace)


def _raw(headers: Sequence[tuple]) -> list:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


def deployment(
    index: Optional[str],
    *,
    corpus: Optional[str] = None,
    sift_bin: Optional[str] = None,
    args: Sequence[str] = (),
    num_replicas: int = 2,
    num_cpus: float = 1.0,
    max_ongoing_requests: int = 64,
    access_log: bool = False,
    health_check_period_s: float = 5.0,
    health_check_timeout_s: float = 30.0,
    name: str = "SiftServe",
    ray_actor_options: Optional[Dict[str, Any]] = None,
    **deployment_options: Any,
) -> Any:
    """A bound Ray Serve application of `num_replicas` replicas serving `index` (for
    `serve.run`); each runs `sift serve --index INDEX [--corpus CORPUS] ARGS...`.

    sift_bin: the binary on the replicas' nodes (default: SIFT_BIN there, else `sift` on
    PATH). args: more `sift serve` flags (`--retriever`, `--domain`, `--max-concurrency`,
    `--max-batch-queries`, `--api-key`, ...; not `--addr`). num_cpus: Ray CPUs reserved per
    replica. access_log: the child's access log lines in the replica's log (off: `--quiet`).
    Other keyword arguments go to `serve.deployment` (`autoscaling_config`,
    `max_replicas_per_node`, `graceful_shutdown_timeout_s`, ...).
    """
    from ray import serve

    options = dict(ray_actor_options or {})
    options.setdefault("num_cpus", num_cpus)
    deployment_options.setdefault("num_replicas", num_replicas)
    cls = serve.deployment(
        SiftReplica,
        name=name,
        ray_actor_options=options,
        max_ongoing_requests=max_ongoing_requests,
        health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s,
        **deployment_options,
    )
    return cls.bind(
        None if index is None else str(index),
        corpus=None if corpus is None else str(corpus),
        sift_bin=sift_bin,
        args=tuple(str(a) for a in args),
        access_log=access_log,
    )


def build(config: Dict[str, str]) -> Any:
    """An application builder for `serve run sift_ir.ray_serve:build index=DIR [corpus=DIR]
    [replicas=N] [sift_bin=PATH] [num_cpus=C] [args="--retriever bm25 ..."]` and Serve config
    files (`args:` of an application)."""
    import shlex

    config = dict(config)
    known = {"index", "corpus", "replicas", "sift_bin", "num_cpus", "args", "access_log"}
    unknown = set(config) - known
    if unknown:
        raise ValueError(f"unknown arguments {sorted(unknown)}: give {sorted(known)}")
    if "index" not in config:
        raise ValueError("give index=DIR")
    return deployment(
        config["index"],
        corpus=config.get("corpus"),
        sift_bin=config.get("sift_bin"),
        args=shlex.split(config.get("args", "")),
        num_replicas=int(config.get("replicas", 2)),
        num_cpus=float(config.get("num_cpus", 1.0)),
        access_log=str(config.get("access_log", "")).lower() in ("1", "true", "yes"),
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m sift_ir.ray_serve --index DIR --replicas N [-- sift serve flags]`."""
    parser = argparse.ArgumentParser(
        prog="python -m sift_ir.ray_serve",
        description="Serve a Sift index from N Ray Serve replicas behind one HTTP route "
        "(each replica runs `sift serve`; flags after `--` go to it).",
    )
    parser.add_argument("--index", required=True, help="index directory (on every node)")
    parser.add_argument("--corpus", help="the corpus the index was built from (passage texts)")
    parser.add_argument("--replicas", type=int, default=2, help="replicas (default 2)")
    parser.add_argument("--num-cpus", type=float, default=1.0, help="Ray CPUs per replica")
    parser.add_argument("--sift-bin", help="the sift binary on the nodes (default: SIFT_BIN, PATH)")
    parser.add_argument("--host", default="0.0.0.0", help="HTTP host of Serve's proxy")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port of Serve's proxy")
    parser.add_argument(
        "--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, or auto)"
    )
    parser.add_argument("--access-log", action="store_true", help="sift serve's access logs")
    parser.add_argument("sift_args", nargs="*", help="flags for sift serve (after --)")
    a = parser.parse_args(argv)

    import ray
    from ray import serve

    ray.init(address=a.address or os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True)
    serve.start(http_options={"host": a.host, "port": a.port})
    app = deployment(
        a.index,
        corpus=a.corpus,
        sift_bin=a.sift_bin,
        args=a.sift_args,
        num_replicas=a.replicas,
        num_cpus=a.num_cpus,
        access_log=a.access_log,
    )
    serve.run(app, name="sift", route_prefix="/")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(
        f"sift_ir.ray_serve: {a.replicas} replica(s) of {a.index} at "
        f"http://{a.host}:{a.port}/ (POST /retrieve for Search-R1 and verl); "
        "Ctrl-C or SIGTERM stops",
        flush=True,
    )
    while not stop.wait(1.0):
        pass
    # the replicas drain and stop their sift serve (a second signal does not cut this short)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    serve.delete("sift")
    print("sift_ir.ray_serve: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
