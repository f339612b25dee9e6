"""Embed a Sift corpus across a Ray cluster with Ray Data, for `sift index --vectors`.

    import ray
    from sift_ir.ray import embed_corpus

    ray.init()  # or ray.init(address="auto") on a cluster node
    embed_corpus("corpora/sample", "target/vectors", "models/local/all-MiniLM-L6-v2")
    # then: sift index --corpus corpora/sample --index target/idx \\
    #           --dense models/local/all-MiniLM-L6-v2 --vectors target/vectors

The corpus is Sift's MM-BRIGHT layout: `<corpus>/documents/<domain>.parquet` (or shards
`<domain>-00000-of-00002.parquet`) with the columns `id` and `content` (strings). Each domain
is read with `ray.data.read_parquet`, embedded by a pool of `EmbedActor`s (one model load per
actor, passages embedded with `kind="passage"`) and written with `Dataset.write_parquet`:

    <out>/<domain>/passages/*.parquet   one or more files, rows in no particular order
    <out>/sift-vectors.json             written last, once every domain is checked

Each Parquet file has two columns, the Arrow schema stored in the file (`ARROW:schema`):

    id:     string
    vector: fixed_size_list<item: float>[dim]   (unit rows, float32)

Parquet has no fixed-size list: the column's Parquet type is a LIST of optional FLOAT, and
readers that honour the stored Arrow schema (pyarrow, arrow-rs) give it back as
`fixed_size_list<float>[dim]`; others see `list<float>`. Rows follow no order: a reader joins
them to the corpus by `id`.

`sift-vectors.json`:

    {"format": 1, "model": <Embedder.name>, "fingerprint": ..., "model_hash": ...,
     "profile": ... or null, "dim": ..., "domains": {<domain>: {"passages": <rows>}}}

The model's description comes from one `Embedder` built in a small Ray task on a worker
(`model_info`), with the resources of one actor, before the actors start: the driver never
loads the model, a model that does not load fails before the pool starts, and every actor
checks that its own model has the same fingerprint (nodes with different files under the same
path would otherwise mix vectors of two models).

Each domain is cut into blocks of `batch_size` rows (`Dataset.repartition`), so that every
actor gets work (a file's row group is otherwise one block, for one actor) and a batch is the
unit of retry.

Fault tolerance: an actor whose process dies (killed, out of memory, a crash in native code,
a lost node) is restarted (`max_restarts=-1`: the constructor runs again and loads the model)
and the tasks it held are retried on the pool (`max_task_retries`). Files are written by
separate Ray tasks (`Write`, after the actors), under names fixed by the write and the task's
index: a retried write replaces its own file rather than adding one. A Python exception
raised by the embedder (bad input, a Rust panic surfaced by PyO3) is not retried: the run
fails. Ray Data's `max_errored_blocks` is held at 0 during the run (a failed block fails the
run instead of being dropped), and after each domain the ids written are checked against the
corpus: every id once, none lost, none added.

Paths must be the same for the driver and every worker (a shared filesystem on a cluster):
the workers read the corpus and write the vectors.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

FORMAT = 1
MANIFEST = "sift-vectors.json"
# `physics-00000-of-00002` -> physics, shard 0 of 2 (as sift-core's parse_shard)
_SHARD = re.compile(r"^(?P<domain>.+)-(?P<index>[0-9]+)-of-(?P<total>[0-9]+)$")


def make_embedder(
    model: str,
    device: str = "cpu",
    dtype: str = "f32",
    batch_size: int | None = None,
    embedder_factory: Callable[..., Any] | None = None,
    profile: str | None = None,
):
    """`sift_ir.Embedder(model, device, dtype, batch_size)` (and `profile=` when given), or
    `embedder_factory` called with the same arguments (a stand-in with the Embedder's
    attributes and `embed_texts`)."""
    kwargs: dict[str, Any] = {"device": device, "dtype": dtype, "batch_size": batch_size}
    if profile is not None:
        kwargs["profile"] = profile
    if embedder_factory is not None:
        return embedder_factory(model, **kwargs)
    from sift_ir import Embedder

    return Embedder(model, **kwargs)


def describe(embedder) -> dict[str, Any]:
    """The manifest's description of a model: name, dim, fingerprint, model_hash, profile,
    sees_images."""
    return {
        "name": str(embedder.name),
        "dim": int(embedder.dim),
        "fingerprint": str(embedder.fingerprint),
        "model_hash": str(embedder.model_hash),
        "profile": None if embedder.profile is None else str(embedder.profile),
        "sees_images": bool(embedder.sees_images),
    }


def _model_info_task(model, device, dtype, batch_size, embedder_factory, profile):
    return describe(make_embedder(model, device, dtype, batch_size, embedder_factory, profile))


def model_info(
    model: str,
    device: str = "cpu",
    dtype: str = "f32",
    batch_size: int | None = None,
    embedder_factory: Callable[..., Any] | None = None,
    profile: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float = 0,
) -> dict[str, Any]:
    """`describe` of the model, loaded once in a Ray task on a worker (with `num_cpus` /
    `num_gpus`, an actor's resources), so that the driver never holds the model."""
    import ray

    options: dict[str, Any] = {"num_cpus": 1 if num_cpus is None else num_cpus}
    if num_gpus:
        options["num_gpus"] = num_gpus
    task = ray.remote(_model_info_task).options(**options)
    return ray.get(task.remote(model, device, dtype, batch_size, embedder_factory, profile))


def vectors_table(ids, vectors, dim: int | None = None) -> pa.Table:
    """`{"id": string, "vector": fixed_size_list<float>[dim]}` from ids and an (n, dim)
    float32 array; refuses another dtype or shape, and non-finite values."""
    v = np.asarray(vectors)
    if v.dtype != np.float32:
        raise TypeError(f"embeddings must be float32, got {v.dtype}")
    n = len(ids)
    if v.ndim != 2 or v.shape[0] != n or (dim is not None and v.shape[1] != dim):
        want = f"({n}, {dim if dim is not None else 'dim'})"
        raise ValueError(f"embeddings of shape {v.shape} for {n} ids, expected {want}")
    if not np.isfinite(v).all():
        raise ValueError("embeddings hold NaN or infinite values")
    flat = pa.array(np.ascontiguousarray(v).reshape(-1), type=pa.float32())
    column = pa.FixedSizeListArray.from_arrays(flat, v.shape[1])
    return pa.table({"id": pa.array(ids, type=pa.string()), "vector": column})


def _strings(batch, name: str) -> list[str]:
    """Column `name` of a Ray Data batch (pyarrow Table, dict of numpy arrays, or pandas
    DataFrame) as Python strings; a null is an error, as it is for `sift index`."""
    if isinstance(batch, pa.Table):
        column = batch.column(name)
        if column.null_count:
            raise ValueError(f"column {name!r} holds {column.null_count} null(s)")
        return column.to_pylist()
    values = batch[name]
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    if any(v is None for v in values):
        raise ValueError(f"column {name!r} holds nulls")
    return [str(v) for v in values]


class EmbedActor:
    """Ray Data callable class: embeds each batch's `content` as passages.

        ds.map_batches(EmbedActor, fn_constructor_kwargs={"model": ...},
                       compute=ray.data.ActorPoolStrategy(size=2), batch_size=64,
                       batch_format="pyarrow")

    The model is loaded once per actor (the constructor). A batch (pyarrow Table, dict of
    numpy arrays or pandas DataFrame) with `id` and `content` becomes a pyarrow Table
    `{"id": string, "vector": fixed_size_list<float>[dim]}` (`vectors_table`).

    `embed_batch_size` is the Embedder's own batch size (texts per forward pass), not Ray's;
    `fingerprint`, when given, must be the loaded model's (`model_info`); `profile`, when
    given, is the Embedder's embedding profile (as `sift index --profile`).
    """

    def __init__(
        self,
        model: str,
        device: str = "cpu",
        dtype: str = "f32",
        embed_batch_size: int | None = None,
        embedder_factory: Callable[..., Any] | None = None,
        fingerprint: str | None = None,
        profile: str | None = None,
    ):
        self.embedder = make_embedder(
            model, device, dtype, embed_batch_size, embedder_factory, profile
        )
        if fingerprint is not None and self.embedder.fingerprint != fingerprint:
            raise RuntimeError(
                f"{model}: this worker's model has fingerprint {self.embedder.fingerprint}, "
                f"the run's is {fingerprint} (different model files on different nodes?)"
            )
        self.dim = int(self.embedder.dim)

    def __call__(self, batch) -> pa.Table:
        ids = _strings(batch, "id")
        texts = _strings(batch, "content")
        if not ids:
            table = vectors_table(ids, np.zeros((0, self.dim), np.float32), self.dim)
        else:
            table = vectors_table(ids, self.embedder.embed_texts(texts, kind="passage"), self.dim)
        if _has_column(batch, "domain"):
            table = table.append_column("domain", pa.array(_strings(batch, "domain"), pa.string()))
        return table


def _has_column(batch, name: str) -> bool:
    if isinstance(batch, pa.Table):
        return name in batch.column_names
    return name in batch


def corpus_domains(corpus: str | os.PathLike) -> dict[str, list[Path]]:
    """The passage files of each domain of an MM-BRIGHT corpus: `documents/<domain>.parquet`,
    or complete shards `documents/<domain>-00000-of-00002.parquet`; sorted by domain."""
    docs = Path(corpus) / "documents"
    if not docs.is_dir():
        raise FileNotFoundError(f"{corpus}: no documents/ directory (MM-BRIGHT layout)")
    groups: dict[str, list[tuple[Path, tuple[int, int] | None]]] = {}
    for path in sorted(docs.glob("*.parquet")):
        m = _SHARD.match(path.stem)
        if m:
            key, shard = m["domain"], (int(m["index"]), int(m["total"]))
        else:
            key, shard = path.stem, None
        groups.setdefault(key, []).append((path, shard))
    out = {}
    for domain, files in sorted(groups.items()):
        shards = [s for _, s in files if s is not None]
        if shards:
            totals = {t for _, t in shards}
            if len(shards) != len(files):
                raise ValueError(f"{docs}: {domain} has both an unsharded file and shards")
            if len(totals) != 1 or sorted(i for i, _ in shards) != list(range(totals.pop())):
                raise ValueError(f"{docs}: the shards of {domain} are incomplete or disagree")
        out[domain] = [p for p, _ in files]
    return out


def _check_written(domain: str, sources: list[Path], dest: Path, dim: int) -> int:
    """Rows written for `domain`, after checking that the ids in `dest` are the corpus's,
    each exactly once, and that the vector column is fixed_size_list<float>[dim]."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    want = pads.dataset([str(p) for p in sources], format="parquet").to_table(columns=["id"])
    want = want.column("id").cast(pa.string())
    files = sorted(str(p) for p in dest.glob("*.parquet"))
    if files:
        written = pads.dataset(files, format="parquet")
        vector = written.schema.field("vector").type
        expected = pa.list_(pa.float32(), dim)
        if vector != expected:
            raise RuntimeError(f"{dest}: vector column is {vector}, expected {expected}")
        got = written.to_table(columns=["id"]).column("id").cast(pa.string())
    else:
        got = pa.chunked_array([], type=pa.string())
    problems = []
    if len(pc.unique(want)) != len(want):
        problems.append(f"the corpus has {len(want) - len(pc.unique(want))} duplicate id(s)")
    duplicated = len(got) - len(pc.unique(got))
    if duplicated:
        problems.append(f"{duplicated} id(s) written more than once")
    missing = pc.sum(pc.invert(pc.is_in(want, value_set=pc.unique(got)))).as_py() or 0
    if missing:
        problems.append(f"{missing} passage(s) not written")
    unknown = pc.sum(pc.invert(pc.is_in(got, value_set=pc.unique(want)))).as_py() or 0
    if unknown:
        problems.append(f"{unknown} id(s) not in the corpus")
    if problems:
        raise RuntimeError(f"{domain}: {'; '.join(problems)} ({dest})")
    return len(got)


def _warn_if_pool_takes_every_cpu(ray, actors: float, cpus_per_actor: float) -> None:
    """Ray Data reads and writes in tasks of 1 CPU: a pool that holds every CPU of the
    cluster leaves none for them, and the run waits for ever."""
    total = ray.cluster_resources().get("CPU", 0)
    if actors != float("inf") and total and actors * cpus_per_actor > total - 1:
        warnings.warn(
            f"{actors:g} actors of {cpus_per_actor:g} CPU leave less than 1 of the cluster's "
            f"{total:g} CPUs for reading and writing; lower num_cpus (e.g. 0.5) or concurrency",
            stacklevel=3,
        )


def embed_corpus(
    corpus: str | os.PathLike,
    out: str | os.PathLike,
    model: str,
    domains: Iterable[str] | str | None = None,
    concurrency: int | tuple[int, int] = 2,
    num_gpus: float = 0,
    batch_size: int = 64,
    device: str = "cpu",
    dtype: str = "f32",
    embedder_factory: Callable[..., Any] | None = None,
    *,
    embed_batch_size: int | None = None,
    profile: str | None = None,
    num_cpus: float | None = None,
    max_task_retries: int | None = None,
    rows_per_file: int = 16_384,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Embeds the passages of `corpus` (every domain, or `domains`: names or a comma-separated
    string) with `model` on the Ray cluster this process is connected to (`ray.init()` is
    called when it is not), writes `<out>/<domain>/passages/*.parquet` and then
    `<out>/sift-vectors.json`, and returns the manifest.

    concurrency: actors (one pool for every domain: each actor loads the model once; an int, or (min, max) for an autoscaling pool); with
    GPUs, the number of GPUs to use. num_gpus / num_cpus: resources of each actor (and of
    the `model_info` task); with `num_gpus=1` pass `device="cuda"`. dtype: the weights'
    dtype, "f32" by default as for `sift index` ("auto" is bfloat16 on a CPU too: vectors
    that rank slightly differently from an f32 index's). batch_size: rows per Ray batch
    (one `embed_texts` call); embed_batch_size: the Embedder's own batch size (texts per
    forward pass); profile: the Embedder's embedding profile (None: the model's default).
    max_task_retries: how many times a batch whose actor died is retried; None keeps Ray
    Data's default, without limit (actors are restarted without limit either way).
    rows_per_file: the fewest rows in one written file (Ray Data's min_rows_per_file; the
    last file of a domain may hold fewer). info: the model's `describe` when already known,
    to skip the `model_info` task. embedder_factory: a picklable callable used instead of
    `sift_ir.Embedder` (tests).

    Every domain runs through one pipeline (one actor pool), written as Hive partitions under
    `<out>/_staging/` and then moved into place: each chosen domain's passages directory is
    replaced, and a
    `sift-vectors.json` left by an earlier run is removed first, so a run that fails leaves
    no manifest.
    """
    import ray
    import ray.data

    corpus = Path(corpus).resolve()
    out = Path(out).resolve()
    files = corpus_domains(corpus)
    if domains is None:
        chosen = list(files)
    else:
        if isinstance(domains, str):
            domains = domains.split(",")
        chosen = [d.strip() for d in domains]
        unknown = [d for d in chosen if d not in files]
        if unknown:
            raise ValueError(f"{corpus}: no domain {', '.join(unknown)} (has {', '.join(files)})")
    if not chosen:
        raise ValueError(f"{corpus}: no domains to embed")

    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    if not ray.is_initialized():
        ray.init()
    if info is None:
        info = model_info(
            model,
            device,
            dtype,
            embed_batch_size,
            embedder_factory,
            profile,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
        )
    dim = int(info["dim"])

    actor_kwargs = {
        "model": model,
        "device": device,
        "dtype": dtype,
        "embed_batch_size": embed_batch_size,
        "embedder_factory": embedder_factory,
        "fingerprint": info["fingerprint"],
        "profile": profile,
    }
    if isinstance(concurrency, int):
        compute = ray.data.ActorPoolStrategy(size=concurrency)
    else:
        compute = ray.data.ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1])
    options: dict[str, Any] = {}
    if num_gpus:
        options["num_gpus"] = num_gpus
    if num_cpus is not None:
        options["num_cpus"] = num_cpus
    if max_task_retries is not None:
        # Ray Data's default is -1 (unlimited); Ray 2.60 takes it only among the
        # deprecated `**ray_remote_args`
        options["max_task_retries"] = max_task_retries
    _warn_if_pool_takes_every_cpu(ray, compute.max_size, 1 if num_cpus is None else num_cpus)

    context = ray.data.DataContext.get_current()
    errored_blocks = context.max_errored_blocks
    context.max_errored_blocks = 0
    staging = out / "_staging"
    try:
        # every domain in one pipeline, so that each actor loads the model once (a 7B model
        # takes a while), its rows tagged with their domain
        parts = []
        for domain in chosen:
            part = ray.data.read_parquet([str(p) for p in files[domain]])
            part = part.select_columns(["id", "content"])
            part = part.add_column(
                "domain",
                lambda t, d=domain: pa.array([d] * len(t), type=pa.string()),
                batch_format="pyarrow",
            )
            parts.append(part)
        ds = parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]
        # a block per batch: a file's row group is one block, which one actor would embed
        # alone, and which a dead actor's retry would embed again from the start
        ds = ds.repartition(target_num_rows_per_block=batch_size)
        ds = ds.map_batches(
            EmbedActor,
            fn_constructor_kwargs=actor_kwargs,
            compute=compute,
            batch_size=batch_size,
            batch_format="pyarrow",
            # Ray Data gives its actors max_restarts=-1 and max_task_retries=-1: a dead
            # actor is restarted (its constructor loads the model again) and the tasks it
            # held are retried
            **options,
        )
        if staging.exists():
            shutil.rmtree(staging)
        # Hive partitions: _staging/domain=<domain>/*.parquet, then moved into place
        ds.write_parquet(
            str(staging), partition_cols=["domain"], min_rows_per_file=rows_per_file
        )
        counts = {}
        for domain in chosen:
            dest = out / domain / "passages"
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            written = staging / f"domain={domain}"
            if written.is_dir():
                os.replace(written, dest)
            else:  # a domain without passages writes nothing
                dest.mkdir()
            counts[domain] = _check_written(domain, files[domain], dest, dim)
    finally:
        context.max_errored_blocks = errored_blocks
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

    manifest = {
        "format": FORMAT,
        "model": info["name"],
        "fingerprint": info["fingerprint"],
        "model_hash": info["model_hash"],
        "profile": info["profile"],
        "dim": dim,
        "domains": {d: {"passages": counts[d]} for d in chosen},
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)
    return manifest


def read_vectors(out: str | os.PathLike, domain: str) -> tuple[list[str], np.ndarray]:
    """The ids and (n, dim) float32 vectors written for `domain`, sorted by id."""
    import pyarrow.dataset as pads

    files = sorted(str(p) for p in (Path(out) / domain / "passages").glob("*.parquet"))
    if not files:
        return [], np.zeros((0, 0), np.float32)
    table = pads.dataset(files, format="parquet").to_table().sort_by("id")
    vector = table.column("vector").combine_chunks()
    dim = vector.type.list_size
    values = vector.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return table.column("id").to_pylist(), values.reshape(len(table), dim)
