"""Search-R1's retrieval server (`search_r1/search/retrieval_server.py` of
https://github.com/PeterGriffinJin/Search-R1), made to run on the CPU, for
`benches/retrieve_vs_search_r1.py`.

The file is read from a clone the user gives (`--search-r1 DIR`), never vendored, and changed
in one respect, programmatically and checked (each edit must match exactly once): no GPU use.

* `model.cuda()` is dropped (the encoder stays on the CPU);
* `inputs = {k: v.cuda() ...}` is dropped (the tokenizer's tensors stay on the CPU);
* `retrieval_use_fp16=True` in its `__main__` block becomes `False` unless `fp16=True`:
  half precision is how it runs on a GPU; on the CPU, PyTorch runs f16 matrix products
  without the vector units f32 uses, so keeping it would slow the reference for no reason.

`torch.cuda.empty_cache()` stays (a no-op where CUDA was never initialised); `--faiss_gpu`
is simply not passed. The written copy records the upstream commit, the file's git blob hash
and its sha256 (`provenance()`).

The server binds 0.0.0.0:8000 in its own code; `LAUNCHER` runs the copy unchanged under
`runpy` with `uvicorn.run` wrapped to bind 127.0.0.1:<port> instead (harness plumbing, not a
change to the file).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

UPSTREAM_PATH = "search_r1/search/retrieval_server.py"

EDITS = [
    ("    model.cuda()\n", "", "model.cuda(): the encoder stays on the CPU"),
    ("        inputs = {k: v.cuda() for k, v in inputs.items()}\n", "",
     "inputs .cuda(): the tokenizer's tensors stay on the CPU"),
]
FP16 = ("        retrieval_use_fp16=True,\n", "        retrieval_use_fp16=False,\n",
        "retrieval_use_fp16=True -> False: f16 is the GPU setting")

LAUNCHER = r"""
import runpy, sys
import uvicorn
PORT = int(sys.argv[2])
_run = uvicorn.run
def run(app, *args, **kw):
    kw["host"], kw["port"] = "127.0.0.1", PORT
    return _run(app, *args, **kw)
uvicorn.run = run
path = sys.argv[1]
sys.argv = [path] + sys.argv[3:]
runpy.run_path(path, run_name="__main__")
"""


def git_blob_hash(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def patch(text: str, fp16: bool = False) -> tuple[str, list[str]]:
    """The CPU copy of `text` and the edits made (each must occur exactly once)."""
    made = []
    for old, new, why in EDITS + ([] if fp16 else [FP16]):
        count = text.count(old)
        if count != 1:
            raise SystemExit(f"retrieval_server.py: expected one {old.strip()!r}, found {count}: "
                             "another upstream version; check the edits in benches/search_r1_peer.py")
        text = text.replace(old, new)
        made.append(why)
    if ".cuda()" in text:
        raise SystemExit("retrieval_server.py: a .cuda() call is left after the edits")
    return text, made


def provenance(clone: Path) -> dict:
    src = clone / UPSTREAM_PATH
    data = src.read_bytes()
    commit = None
    try:
        commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return {"repository": "https://github.com/PeterGriffinJin/Search-R1", "commit": commit,
            "path": UPSTREAM_PATH, "git_blob": git_blob_hash(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def write_cpu_copy(clone: Path, out_dir: Path, fp16: bool = False) -> dict:
    """Writes <out_dir>/retrieval_server.py (the CPU copy) and the launcher; returns the
    provenance with the edits made."""
    src = clone / UPSTREAM_PATH
    if not src.is_file():
        raise SystemExit(f"{src} not found: --search-r1 must be a clone of Search-R1")
    text, made = patch(src.read_text(), fp16)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "retrieval_server.py").write_text(text)
    (out_dir / "launch.py").write_text(LAUNCHER)
    info = provenance(clone)
    info["edits"] = made
    return info
