"""What every benchmark driver shares: where the repository is, running a command from it
and reading its JSON result, how the driver itself was run, the machine a run was on, the report
files and the number format.

The drivers are modules of the `benches` package, run from the repository root
(`python3 -m benches.<driver>`); they import this one as `benches.benchlib` and the peers as
`eval.peers.<peer>`.
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_DIR = os.path.join(REPO, "eval", "peers")


def script_argv() -> list:
    """How this driver was run, for the report: `-m benches.<driver> ARGS...` (under `-m`,
    sys.argv[0] is the module's file, which does not run on its own)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return ["-m", spec.name, *sys.argv[1:]] if spec is not None else list(sys.argv)


def last_json_object(stdout: str) -> dict:
    """The last line of stdout that is a JSON object, or the whole output when it is one
    pretty-printed object (`sift bench embed --json`)."""
    text = stdout.strip()
    if text.startswith("{") and "\n" in text:
        try:
            obj = json.loads(text)
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    raise ValueError("no line of stdout parses as a JSON object")


def run_cmd(label: str, cmd, shell: bool) -> tuple[dict, float]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, shell=shell, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"{label}: command failed with exit status {p.returncode}: {cmd}")
    try:
        return last_json_object(p.stdout), wall
    except ValueError as e:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        raise SystemExit(f"{label}: {e}: {cmd}")


def machine() -> dict:
    """The machine: `uname -a`, the processor, CPUs, memory, lscpu's topology where it
    answers, and the load average when the run started (the machine is shared: a busy one
    explains a slow round)."""
    info: dict = {}
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        nproc = int(subprocess.run(["nproc"], stdout=subprocess.PIPE, text=True, check=True).stdout)
    except Exception:
        nproc = len(os.sched_getaffinity(0))
    info["uname"] = subprocess.run(["uname", "-a"], stdout=subprocess.PIPE, text=True).stdout.strip()
    info["cpu"] = cpu or platform.processor()
    info["nproc"] = nproc
    try:
        info["loadavg_at_start"] = os.getloadavg()
    except OSError:
        info["loadavg_at_start"] = None
    try:
        with open("/proc/meminfo") as f:
            info["MemTotal"] = f.readline().split(":")[1].strip()
    except OSError:
        pass
    try:
        ls = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for key in ("Model name", "CPU(s)", "Core(s) per socket", "Thread(s) per core", "Socket(s)",
                    "Hypervisor vendor", "L3 cache"):
            m = re.search(rf"^{re.escape(key)}:\s*(.+)$", ls, re.M)
            if m:
                info[key] = m.group(1).strip()
    except OSError:
        pass
    return info


def write_report(out: str, report: dict, md: str) -> None:
    """Writes <out>.json (the report) and <out>.md (the table), creating the folder."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    with open(out + ".md", "w") as f:
        f.write(md)


def fmt(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 0.1:
        return f"{v:.3f}"
    return f"{v:.4f}"
