"""Sift from Python: build and search indexes, evaluate retrievers, embed texts and images.

The heavy work runs in Sift's Rust engine (the ``sift_ir._sift`` extension) with the GIL
released; errors are :class:`SiftError` carrying Sift's messages (file, row, id or argument
at fault).

- :class:`Index`: ``Index.build(corpus, path, dense=[...])`` / ``Index.open(path)``,
  ``index.search(query, images=[...], retriever=..., domain=..., top_k=...)``.
- :func:`evaluate`: every task, retriever and domain, as ``sift eval`` runs them, returning a
  :class:`Report` (dicts, and a pandas DataFrame when pandas is installed).
- :class:`Embedder`: ``embed_texts``, ``embed_images``, ``embed_joint`` into numpy float32.
- :class:`Reranker`: ``score(pairs)`` (raw scores, as ``sift rerank``) and
  ``rank(query, documents)`` (as ``POST /v1/rerank``).
- :class:`Generator`: ``chat(messages, max_tokens=...)`` (as ``POST /v1/chat/completions``
  and ``sift generate chats``).
- :mod:`sift_ir.mteb`: an MTEB encoder over an :class:`Embedder`.
- :mod:`sift_ir.ray`: embedding a corpus across a Ray cluster for ``sift index --vectors``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable, Sequence, Union

from ._sift import Embedder, Generator, Hit, Index, Reranker, SiftError, __version__
from ._sift import evaluate as _evaluate

__all__ = [
    "Embedder",
    "Generator",
    "Hit",
    "Index",
    "Report",
    "Reranker",
    "SiftError",
    "__version__",
    "evaluate",
]

PathLike = Union[str, "os.PathLike[str]"]


class Report:
    """An evaluation's report, as ``sift eval --json`` prints it.

    ``json`` is the whole report (tasks, retrievers, per-domain metrics, warnings, notes);
    :meth:`to_dicts` flattens it to one dict per (task, retriever, domain) row, and
    :meth:`to_pandas` makes those rows a DataFrame.
    """

    def __init__(self, text: str) -> None:
        self.json: dict[str, Any] = json.loads(text)

    @property
    def jobs(self) -> list[dict[str, Any]]:
        """One report per (task, retriever, query-image mode) job, as ``sift eval --json``
        prints each (one job: the whole report is that job's)."""
        if "reports" in self.json:
            return list(self.json["reports"])
        return [self.json]

    def to_dicts(self) -> list[dict[str, Any]]:
        """One dict per job and domain: task, label, retriever, domain, queries and every
        metric (nDCG@10 as ``"ndcg@10"``)."""
        rows: list[dict[str, Any]] = []
        for job in self.jobs:
            keys = {
                k: v
                for k, v in job.items()
                if isinstance(v, (str, int, float, bool)) or v is None
            }
            queries = job.get("queries", {})
            for domain, metrics in job.get("per_domain", {}).items():
                row = dict(keys)
                row["domain"] = domain
                row["queries"] = queries.get(domain)
                row.update(metrics)
                rows.append(row)
        return rows

    def ndcg10(self, task: str, retriever: str, domain: str) -> float:
        """nDCG@10 of one task, retriever (its label, e.g. ``"bm25"``) and domain
        (KeyError when absent)."""
        for row in self.to_dicts():
            if (
                str(row.get("task")) == str(task)
                and retriever in (row.get("label"), row.get("retriever"))
                and row.get("domain") == domain
            ):
                return float(row["ndcg@10"])
        raise KeyError((task, retriever, domain))

    def to_pandas(self):  # noqa: ANN201 - pandas is optional
        """The rows of :meth:`to_dicts` as a pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("Report.to_pandas needs pandas: pip install pandas") from e
        return pd.DataFrame(self.to_dicts())

    def __repr__(self) -> str:
        return f"Report({len(self.jobs)} jobs)"


def evaluate(
    corpus: PathLike,
    index: Union[PathLike, Index],
    *,
    tasks: Union[str, int, Sequence[Union[str, int]], None] = None,
    retrievers: Union[str, Iterable[str], None] = None,
    domains: Union[Iterable[str], None] = None,
    top_k: int = 1000,
    per_query: bool = False,
    out: Union[PathLike, None] = None,
    query_fusion: Union[str, None] = None,
    device: str = "cpu",
    dtype: str = "f32",
    batch_size: Union[int, None] = None,
    profile: str = "default",
    progress: Union[Callable[[str, int, Union[int, None]], None], None] = None,
) -> Report:
    """Evaluate retrievers on MM-BRIGHT's tasks over an index of ``corpus``, as ``sift eval``.

    ``tasks``: ``"all"``, a task number 1-4, or a list of them (default: task 1).
    ``retrievers``: ``"bm25"``, ``"dense:<name>"``, ``"hybrid:<a>+<b>"`` or a list (default
    bm25). With ``out``, the tables, runs and qrels are written there as ``sift eval --out``
    writes them. ``progress(label, done, total)`` is called as the work advances.
    """
    if tasks is not None and isinstance(tasks, (str, int)):
        tasks = [tasks]
    if isinstance(retrievers, str):
        retrievers = [retrievers]
    text = _evaluate(
        os.fspath(corpus),
        index if isinstance(index, Index) else os.fspath(index),
        tasks=None if tasks is None else [str(t) for t in tasks],
        retrievers=None if retrievers is None else list(retrievers),
        domains=None if domains is None else list(domains),
        top_k=top_k,
        per_query=per_query,
        out=None if out is None else os.fspath(out),
        query_fusion=query_fusion,
        device=device,
        dtype=dtype,
        batch_size=batch_size,
        profile=profile,
        progress=progress,
    )
    return Report(text)
