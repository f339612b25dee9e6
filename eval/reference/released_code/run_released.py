#!/usr/bin/env python3
"""Runs MM-BRIGHT's released evaluation code itself on Sift's sample corpus with the tiny
test checkpoints, on the CPU, and records every query's scores, so that Sift's tests can
check `--profile reference` against what that code computes (not against a reading of it).

The released code (github.com/mm-bright/MM-BRIGHT at commit 2d37a4d) is not part of this
repository: check it out and pass its directory. Its runner (`src/eval_runner.py`,
`EvaluationRunner._evaluate_domain`), data loader (`src/data.py`) and retrievers
(`src/retrievers/task{2,3,4}_*.py`) run unchanged; only what cannot run here is replaced:

- the Hugging Face hub: `datasets.load_dataset` and `huggingface_hub.hf_hub_download` read
  `corpora/sample/<config>/<domain>.parquet` (the same rows the hub's files hold), and the
  hub ids the retrievers load (`openai/clip-vit-large-patch14`, ...) resolve to the tiny
  checkpoints under `models/fixtures/` (remote-code models through the published modelling
  code vendored there, as their fixtures' scripts load it);
- CUDA: `.to("cuda")` goes to the CPU;
- imports the multimodal retrievers do not call: `clip` (openai/CLIP), `sklearn`, `tiktoken`,
  and the
  retrievers package's `__init__` (which imports every text retriever's client libraries;
  `task4_pair.py`'s import of `task1_text.calculate_retrieval_metrics` gets a stub, since
  the scores, not its metrics, are recorded).

Writes `scores.json` beside this script: {"task<N>": {"<model>": {"<domain>": {qid: {id:
score}}}}}, the scores as the retrievers return them (x100 cosines). GME is not run (its
sentence-transformers module needs transformers < 4.52); Jina-CLIP needs torchvision, which
PyPI has no wheel of for torch 2.15 (see models/fixtures/jina_clip/requirements.txt): it
runs when `--torchvision DIR` points at one installed with
`pip install --no-deps --target DIR torchvision==0.29.2`.

    pip install -r eval/reference/released_code/requirements.txt
    git clone https://github.com/mm-bright/MM-BRIGHT /tmp/MM-BRIGHT && git -C /tmp/MM-BRIGHT checkout 2d37a4d
    python3 -m eval.reference.released_code.run_released --mmbright /tmp/MM-BRIGHT   # from the repository root

The repository's code it uses (the fixtures' scripts, the vendored published code) is imported
as modules of the repository root's packages (models.fixtures.*). The released code's package
`src` is the one of the --mmbright checkout (its `__path__`, as for src.retrievers below).
"""
import argparse
import importlib
import importlib.machinery
import importlib.util
import json
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SAMPLE = REPO / "corpora" / "sample"
FIX = REPO / "models" / "fixtures"
DOMAINS = ["biology", "gis", "physics"]

# the retrievers each task's runner maps (run_experiments.py), CLIP and SigLIP in Task 3
# too (commented out of its run list, but Sift evaluates them there)
TASKS = {
    "task2": ("multimodal_text", "task2_multimodal", "MULTIMODAL_RETRIEVAL_FUNCS",
              ["clip", "siglip", "nomic-vision", "bge-vl-large", "jina-clip"]),
    "task3": ("text_image", "task3_image", "MULTIMODAL_IMAGE_RETRIEVAL_FUNCS",
              ["clip", "siglip", "nomic-vision", "bge-vl-large", "jina-clip"]),
    "task4": ("text_pair", "task4_pair", "MULTIMODAL_PAIR_RETRIEVAL_FUNCS",
              ["clip", "siglip", "nomic-vision", "bge-vl-large", "jina-clip"]),
}


def stub(name):
    """An empty module that importlib's lookups accept."""
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return mod


def cpu_only():
    import torch

    torch.cuda.is_available = lambda: False

    def fix(a):
        if isinstance(a, str) and a.startswith("cuda"):
            return "cpu"
        if isinstance(a, torch.device) and a.type == "cuda":
            return torch.device("cpu")
        return a

    tensor_to, module_to = torch.Tensor.to, torch.nn.Module.to
    torch.Tensor.to = lambda self, *a, **k: tensor_to(
        self, *[fix(x) for x in a], **{n: fix(v) for n, v in k.items()})
    torch.nn.Module.to = lambda self, *a, **k: module_to(
        self, *[fix(x) for x in a], **{n: fix(v) for n, v in k.items()})
    torch.set_num_threads(1)


class Rows(list):
    """What the released loader reads of a `datasets.Dataset`: rows, and columns by name."""

    def __getitem__(self, key):
        if isinstance(key, str):
            return [r[key] for r in self]
        return list.__getitem__(self, key)


def stub_hub():
    import pyarrow.parquet as pq

    datasets = stub("datasets")

    def load_dataset(name, config, split, trust_remote_code=False):
        return Rows(pq.read_table(SAMPLE / config / f"{split}.parquet").to_pylist())

    datasets.load_dataset = load_dataset
    sys.modules["datasets"] = datasets
    import huggingface_hub

    huggingface_hub.hf_hub_download = lambda repo_id, filename, repo_type=None, **k: str(SAMPLE / filename)


def stub_unused_imports(mmbright):
    sys.modules["clip"] = stub("clip")
    sys.modules["tiktoken"] = stub("tiktoken")  # src/utils.py's text cutting, not called here
    import numpy as np

    pairwise = stub("sklearn.metrics.pairwise")

    def cosine_similarity(a, b):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        return a @ b.T

    pairwise.cosine_similarity = cosine_similarity
    for name in ["sklearn", "sklearn.metrics"]:
        sys.modules[name] = stub(name)
    sys.modules["sklearn.metrics.pairwise"] = pairwise
    # the released code's package `src`, from the checkout (its __init__.py is empty)
    src = stub("src")
    src.__path__ = [str(mmbright / "src")]
    sys.modules["src"] = src
    # the retrievers package without its __init__ (which imports every text retriever)
    pkg = stub("src.retrievers")
    pkg.__path__ = [str(mmbright / "src" / "retrievers")]
    sys.modules["src.retrievers"] = pkg
    t1 = stub("src.retrievers.task1_text")
    t1.calculate_retrieval_metrics = lambda results, qrels, **k: {}
    sys.modules["src.retrievers.task1_text"] = t1


def era_copy(src, tmp):
    """A copy of a checkpoint directory whose tokenizer.json the tokenizers of the released
    code's era read (BPE merges as "a b" strings, not pairs); the same tokenizer."""
    import shutil

    dst = Path(tmp) / "models" / src.name
    if not dst.exists():
        shutil.copytree(src, dst)
        tok = dst / "tokenizer.json"
        if tok.exists():
            t = json.loads(tok.read_text())
            merges = t.get("model", {}).get("merges")
            if merges:
                t["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in merges]
                tok.write_text(json.dumps(t, ensure_ascii=False))
    return dst


def redirect_models(torchvision, tmp):
    """Hub ids -> the tiny checkpoints (remote code through the vendored published code)."""
    import transformers

    clip_dir = era_copy(FIX / "vision" / "tiny-clip-quickgelu", tmp)
    siglip_dir = era_copy(FIX / "vision" / "tiny-siglip", tmp)
    bge_dir = era_copy(FIX / "bge_vl" / "tiny-bge-vl", tmp)
    nomic_text = FIX / "nomic" / "tiny-nomic-embed-text-v1.5"
    nomic_vision = FIX / "nomic" / "tiny-nomic-embed-vision-v1.5"
    dirs = {
        "openai/clip-vit-large-patch14": clip_dir,
        "google/siglip-so400m-patch14-384": siglip_dir,
        "BAAI/BGE-VL-large": bge_dir,
        "nomic-ai/nomic-embed-text-v1.5": nomic_text,
        "nomic-ai/nomic-embed-vision-v1.5": nomic_vision,
    }
    # the published modelling code, loaded as the fixtures' scripts load it
    sys.argv = [sys.argv[0]]
    nomic = importlib.import_module("models.fixtures.nomic.make_tiny_nomic")
    try:  # its imports need transformers 4 (models/fixtures/bge_vl/README.md)
        mmret = importlib.import_module("models.fixtures.bge_vl.vendor.modeling_MMRet_CLIP")
    except ImportError:
        mmret = None
    jina = None
    if torchvision:
        # the --target install of torchvision named on the command line (not in the
        # repository), imported from that folder now and not found from the start
        # (PYTHONPATH): transformers, imported above, has taken torchvision to be absent, so
        # CLIP's and SigLIP's image processors keep their PIL backend, as in the run that wrote
        # scores.json. Found in that folder alone (sys.path stays as it is); the published
        # code's `import torchvision` then gets this module.
        spec = importlib.machinery.PathFinder.find_spec("torchvision", [str(torchvision)])
        if spec is None or spec.loader is None:
            raise RuntimeError(f"--torchvision {torchvision}: no torchvision package in it")
        module = importlib.util.module_from_spec(spec)
        sys.modules["torchvision"] = module
        spec.loader.exec_module(module)
        jina = importlib.import_module("models.fixtures.jina_clip.make_tiny_jina_clip")

    def model(name, **kw):
        if name == "BAAI/BGE-VL-large":
            if mmret is None:
                raise RuntimeError("BGE-VL's published code needs transformers 4.44.2")
            return mmret.CLIPModel.from_pretrained(str(bge_dir)).eval()
        if name == "nomic-ai/nomic-embed-text-v1.5":
            return nomic.HUB.NomicBertModel.from_pretrained(str(nomic_text)).eval()
        if name == "nomic-ai/nomic-embed-vision-v1.5":
            from safetensors.torch import load_file

            cfg = json.loads((nomic_vision / "config.json").read_text())
            m = nomic.HUB.NomicVisionModel(nomic.make_config(nomic.HUB_CFG, cfg)).eval()
            m.load_state_dict(load_file(str(nomic_vision / "model.safetensors")), strict=True)
            return m
        if name == "jinaai/jina-clip-v1":
            if jina is None:
                raise RuntimeError("Jina-CLIP needs --torchvision")
            from safetensors.torch import load_file

            ckpt = jina.CKPT
            m = jina.build_model(json.loads((ckpt / "config.json").read_text()))
            m.load_state_dict(load_file(str(ckpt / "model.safetensors")), strict=True)
            return jina.attach_processors(m).eval()
        return None

    def patch(cls, attr="from_pretrained", factory=None):
        orig = getattr(cls, attr)

        def f(name, *a, **k):
            if factory is not None:
                m = factory(str(name), **k)
                if m is not None:
                    return m
            k.pop("trust_remote_code", None)
            k.pop("torch_dtype", None)
            target = dirs.get(str(name), name)
            return orig(str(target), *a, **k)

        setattr(cls, attr, staticmethod(f) if not hasattr(orig, "__self__") else f)

    # transformers 5's get_*_features return an output object whose pooler_output is what
    # transformers 4 (the released code's era) returned
    for cls in [transformers.CLIPModel, transformers.SiglipModel]:
        for attr in ["get_text_features", "get_image_features"]:
            orig_fn = getattr(cls, attr)

            def features(self, *a, _orig=orig_fn, **k):
                out = _orig(self, *a, **k)
                return getattr(out, "pooler_output", out)

            setattr(cls, attr, features)
    patch(transformers.AutoModel, factory=model)
    for cls in [transformers.CLIPModel, transformers.CLIPProcessor, transformers.AutoProcessor,
                transformers.AutoTokenizer, transformers.AutoImageProcessor,
                transformers.CLIPImageProcessor]:
        patch(cls)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mmbright", type=Path, required=True,
                    help="a checkout of mm-bright/MM-BRIGHT at commit 2d37a4d")
    ap.add_argument("--torchvision", type=Path, help="a --target install of torchvision (Jina-CLIP)")
    ap.add_argument("--out", type=Path, default=HERE / "scores.json")
    ap.add_argument("--only", help="comma-separated models to run")
    a = ap.parse_args()
    cpu_only()
    stub_hub()
    stub_unused_imports(a.mmbright.resolve())
    from src.data import DataLoader
    from src.eval_runner import EvaluationRunner

    out = {}
    only = set(a.only.split(",")) if a.only else None
    with tempfile.TemporaryDirectory() as tmp:
        redirect_models(a.torchvision, tmp)
        for task, (task_type, module, funcs, models) in TASKS.items():
            retrievers = getattr(importlib.import_module(f"src.retrievers.{module}"), funcs)
            runner = EvaluationRunner("sift parity", retrievers, task_type=task_type)
            for model in models:
                if only and model not in only:
                    continue
                if model == "jina-clip" and not a.torchvision:
                    print(f"{task} {model}: skipped (no --torchvision)", file=sys.stderr)
                    continue
                args = types.SimpleNamespace(
                    model=model, batch_size=8, debug=False, force_rerun=True,
                    cache_dir=str(Path(tmp) / "cache" / task / model), model_name=None)
                run_dir = Path(tmp) / "out" / task / model
                per_domain = {}
                for domain in DOMAINS:
                    runner._evaluate_domain(domain, DataLoader(), args, {"instructions": {
                        "query": "", "document": ""}}, str(run_dir))
                    per_domain[domain] = json.loads((run_dir / domain / "scores.json").read_text())
                out.setdefault(task, {})[model] = per_domain
                print(f"{task} {model}: done", file=sys.stderr)
    # several runs (one per transformers era) fill one file
    merged = json.loads(a.out.read_text()) if a.out.exists() else {}
    for task, models in out.items():
        merged.setdefault(task, {}).update(models)
    a.out.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
