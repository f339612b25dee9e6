"""Shared fixtures of the Python package's tests (run by scripts/test after `pip install .`).

SIFT_BIN: the `sift` binary the results are compared with (default: the workspace's debug
build); SIFT_MINILM_DIR: the real all-MiniLM-L6-v2 weights (scripts/test installs them).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "corpora" / "sample"


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


@pytest.fixture(scope="session")
def sift_bin() -> str:
    """The sift binary (SIFT_BIN, else the workspace's debug build)."""
    path = os.environ.get("SIFT_BIN") or str(_target_dir() / "debug" / "sift")
    if not Path(path).is_file():
        pytest.fail(f"no sift binary at {path}: build it (cargo build -p sift-cli) or set SIFT_BIN")
    return path


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """The real all-MiniLM-L6-v2 directory (SIFT_MINILM_DIR)."""
    path = os.environ.get("SIFT_MINILM_DIR", str(ROOT / "models" / "local" / "all-MiniLM-L6-v2"))
    if not (Path(path) / "model.safetensors").is_file():
        pytest.fail(f"no all-MiniLM-L6-v2 weights at {path}: run scripts/test, or set SIFT_MINILM_DIR")
    return path


@pytest.fixture(scope="session")
def sample() -> Path:
    """The bundled sample corpus (MM-BRIGHT layout, three domains)."""
    return SAMPLE


def run_sift(sift_bin: str, *args: str) -> str:
    """Runs sift with `args`; its standard output (a failure shows its standard error)."""
    done = subprocess.run([sift_bin, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"sift {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def sift_json(sift_bin: str, *args: str) -> dict:
    """Runs sift with `args` and --json; the parsed output."""
    return json.loads(run_sift(sift_bin, *args, "--json"))
