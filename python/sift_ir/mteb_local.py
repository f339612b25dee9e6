"""Retrieval tasks over in-memory data for MTEB (the ``mteb`` package, 2.x), with no hub.

:func:`local_retrieval_task` turns a corpus, queries and qrels (and optional per-query
exclusions) into an ``mteb.AbsTaskRetrieval`` that ``mteb.evaluate`` runs offline;
:func:`mm_bright_domain_task` builds one from a domain of an MM-BRIGHT-layout corpus the way
``sift eval --task 1`` reads it; :func:`evaluate_offline` runs a task without mteb's result
cache and returns its scores::

    from sift_ir.mteb import SiftMTEBEncoder
    from sift_ir.mteb_local import evaluate_offline, mm_bright_domain_task

    task = mm_bright_domain_task("corpora/sample", "biology")
    scores = evaluate_offline(SiftMTEBEncoder("models/local/all-MiniLM-L6-v2"), task)
    scores["ndcg_at_10"]

How mteb scores (2.26): every query is searched over the whole corpus (or over its candidate
list when there are exclusions), the top ``max(k_values)`` (1000) documents are kept, and
pytrec_eval (trec_eval: score descending, then document id descending) computes the metrics;
each mean is rounded to 5 decimals. Queries without qrels are dropped. A document whose id
equals the query id is kept unless ``ignore_identical_ids=True``.

This module imports mteb; ``import sift_ir`` does not import it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datasets import Dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.abstasks.task_metadata import TaskMetadata

if TYPE_CHECKING:
    import os

__all__ = [
    "evaluate_offline",
    "local_retrieval_task",
    "mm_bright_domain_task",
    "task_scores",
]


class _LocalRetrievalTask(AbsTaskRetrieval):
    """An AbsTaskRetrieval whose data is held in memory (``load_data`` reads no hub).

    :func:`local_retrieval_task` makes a subclass of it per task with the task's
    ``metadata`` as a class attribute: mteb's ``unload_data`` (run after an evaluation that
    loaded the data) drops an instance's own ``metadata``.
    """

    def __init__(self, data: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._local = data

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """Builds ``self.dataset`` ({"default": {split: RetrievalSplitData}}) from memory."""
        if self.data_loaded:
            return
        d = self._local
        corpus_rows = []
        for doc_id, doc in d["corpus"].items():
            row = {"id": doc_id, "text": doc["text"]}
            if d["titles"]:
                row["title"] = doc["title"]
            corpus_rows.append(row)
        split = RetrievalSplitData(
            corpus=Dataset.from_list(corpus_rows),
            queries=Dataset.from_list(
                [{"id": qid, "text": text} for qid, text in d["queries"].items()]
            ),
            relevant_docs={qid: dict(docs) for qid, docs in d["qrels"].items()},
            top_ranked=(
                {qid: list(ids) for qid, ids in d["top_ranked"].items()}
                if d["top_ranked"] is not None
                else None
            ),
        )
        self.dataset = {"default": {d["split"]: split}}
        self.data_loaded = True


def local_retrieval_task(
    name: str,
    corpus: Mapping[Any, str | Mapping[str, str]],
    queries: Mapping[Any, str],
    qrels: Mapping[Any, Mapping[Any, int]],
    *,
    excluded: Mapping[Any, Iterable[Any]] | None = None,
    description: str | None = None,
    split: str = "test",
    eval_langs: Sequence[str] = ("eng-Latn",),
    main_score: str = "ndcg_at_10",
    prompt: str | Mapping[str, str] | None = None,
    k_values: Sequence[int] | None = None,
    ignore_identical_ids: bool = False,
) -> AbsTaskRetrieval:
    """An mteb retrieval task over in-memory data, for ``mteb.evaluate``; reads no hub.

    Args:
        name: the task's name (mteb's ``TaskMetadata.name``; also the key of
            ``SiftMTEBEncoder(instructions=...)``).
        corpus: document id -> text, or -> ``{"text": ..., "title": ...}`` (mteb embeds
            ``title + " " + text``, stripped).
        queries: query id -> text.
        qrels: query id -> {document id: relevance grade}. Queries without a judged document
            are dropped by mteb; grades are ints (0 = judged not relevant).
        excluded: query id -> document ids removed from that query's ranking before scoring
            (as ``sift eval`` removes MM-BRIGHT's ``negative_ids``). mteb has no exclusion
            list: the task then gives each query a candidate list (mteb's ``top_ranked``: the
            corpus in its order, less the excluded documents), and mteb scores only those
            candidates, as mteb's own BRIGHT v1.1 tasks do with ``excluded_ids``.
        description: the task's description.
        split: the evaluation split name.
        eval_langs: ISO 639-3 + script codes.
        main_score: the score mteb reports as ``main_score``.
        prompt: the task prompt (``TaskMetadata.prompt``), used by
            ``SiftMTEBEncoder(use_task_prompts=True)``.
        k_values: cut-offs mteb reports (default mteb's 1, 3, 5, 10, 20, 100, 1000; 1 is
            always added); the largest is how many documents each query keeps.
        ignore_identical_ids: drop a retrieved document whose id equals the query id (mteb's
            default is to keep it).

    Ids are turned into strings. Qrels naming an unknown query raise ``ValueError``; qrels
    naming an unknown document are kept (never retrieved, but counted in the ideal ranking,
    as in trec_eval).
    """
    docs: dict[str, dict[str, str]] = {}
    titles = False
    for doc_id, doc in corpus.items():
        if isinstance(doc, str):
            docs[str(doc_id)] = {"text": doc, "title": ""}
        else:
            title = str(doc.get("title") or "")
            titles = titles or bool(title)
            docs[str(doc_id)] = {"text": str(doc["text"]), "title": title}
    query_texts = {str(qid): str(text) for qid, text in queries.items()}
    judged: dict[str, dict[str, int]] = {}
    for qid, grades in qrels.items():
        if str(qid) not in query_texts:
            raise ValueError(f"qrels name query {qid!r}, which is not among the queries")
        judged[str(qid)] = {str(doc): int(g) for doc, g in grades.items()}
    top_ranked = None
    if excluded and any(excluded.values()):
        order = list(docs)
        top_ranked = {}
        for qid in query_texts:
            drop = {str(d) for d in (excluded.get(qid) or ())}
            top_ranked[qid] = [d for d in order if d not in drop]

    # the data's hash stands for the dataset revision that mteb records in its results
    digest = hashlib.sha256(
        json.dumps([docs, query_texts, judged, top_ranked], sort_keys=True).encode()
    ).hexdigest()[:16]
    metadata = TaskMetadata(
        name=name,
        description=description or f"Local retrieval task {name} (in memory).",
        dataset={"path": f"local/{name}", "revision": digest},
        type="Retrieval",
        category="t2t",
        modalities=["text"],
        eval_splits=[split],
        eval_langs=list(eval_langs),
        main_score=main_score,
        prompt=dict(prompt) if isinstance(prompt, Mapping) else prompt,
    )
    attrs: dict[str, Any] = {
        "metadata": metadata,
        "ignore_identical_ids": ignore_identical_ids,
        "__module__": __name__,
    }
    if k_values is not None:
        # mteb's score dict reads Recall@1 (its "accuracy"): 1 is always among the cut-offs
        attrs["k_values"] = tuple(sorted({1, *(int(k) for k in k_values)}))
    cls = type(_class_name(name), (_LocalRetrievalTask,), attrs)
    return cls(
        {
            "corpus": docs,
            "titles": titles,
            "queries": query_texts,
            "qrels": judged,
            "top_ranked": top_ranked,
            "split": split,
        }
    )


def _class_name(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name)
    return f"LocalRetrieval_{cleaned}"


def mm_bright_domain_task(
    corpus_dir: str | os.PathLike[str],
    domain: str,
    *,
    exclude_negatives: bool = True,
    name: str | None = None,
) -> AbsTaskRetrieval:
    """The text-to-passage task (``sift eval --task 1``) of one domain of an MM-BRIGHT corpus.

    Reads ``documents/{domain}.parquet`` (``id``, ``content``) and
    ``examples/{domain}.parquet`` (``id``, ``query``, ``gold_ids``, ``negative_ids``): each
    gold id is relevant (grade 1), queries without gold ids are dropped, and, with
    ``exclude_negatives`` (Sift's and MM-BRIGHT's protocol), each query's ``negative_ids``
    are removed from its ranking. The task is named ``name`` (default
    ``SiftMMBright_{domain}``).
    """
    import pyarrow.parquet as pq

    root = Path(corpus_dir)
    docs = pq.read_table(root / "documents" / f"{domain}.parquet", columns=["id", "content"])
    corpus = dict(zip(docs["id"].to_pylist(), docs["content"].to_pylist(), strict=True))
    examples = pq.read_table(
        root / "examples" / f"{domain}.parquet",
        columns=["id", "query", "gold_ids", "negative_ids"],
    ).to_pylist()
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    excluded: dict[str, list[str]] = {}
    for ex in examples:
        gold = ex["gold_ids"] or []
        if not gold:
            continue
        queries[ex["id"]] = ex["query"]
        qrels[ex["id"]] = dict.fromkeys(gold, 1)
        if exclude_negatives and ex["negative_ids"]:
            excluded[ex["id"]] = list(ex["negative_ids"])
    return local_retrieval_task(
        name or f"SiftMMBright_{domain}",
        corpus,
        queries,
        qrels,
        excluded=excluded or None,
        description=f"MM-BRIGHT-layout corpus {root}, domain {domain}, Task 1 (query text to passages).",
    )


def task_scores(
    result: Any,  # noqa: ANN401 -- mteb.results.ModelResult
    task_name: str | None = None,
    *,
    split: str = "test",
    subset: str = "default",
) -> dict[str, Any]:
    """The scores dict of one task, split and subset of ``mteb.evaluate``'s result
    (``ndcg_at_10``, ``map_at_10``, ``recall_at_100``, ``mrr_at_10``, ``main_score``, ...).

    ``task_name`` may be omitted when the result holds one task. Read the scores this way,
    not through ``TaskResult.task``/``domains``/``get_score``'s helpers that look the task
    up in mteb's registry, where a local task is not.
    """
    if getattr(result, "exceptions", None):
        raise RuntimeError(f"mteb evaluation failed: {result.exceptions}")
    task_results = list(result.task_results)
    if task_name is not None:
        task_results = [t for t in task_results if t.task_name == task_name]
    if len(task_results) != 1:
        names = [t.task_name for t in result.task_results]
        raise KeyError(f"expected one result for task {task_name!r}, have {names}")
    for scores in task_results[0].scores[split]:
        if scores["hf_subset"] == subset:
            return dict(scores)
    raise KeyError(f"no scores for subset {subset!r} of split {split!r}")


def evaluate_offline(
    model: Any,  # noqa: ANN401 -- an mteb encoder, e.g. SiftMTEBEncoder
    task: AbsTaskRetrieval,
    *,
    batch_size: int = 32,
    **evaluate_kwargs: Any,
) -> dict[str, Any]:
    """Runs ``mteb.evaluate(model, task)`` with no result cache (nothing read or written
    under ``~/.cache/mteb``), no CO2 tracking and no progress bars (mteb's nor the
    ``datasets`` library's), and returns the task's scores (:func:`task_scores`).
    ``evaluate_kwargs`` override those settings."""
    import datasets
    import mteb

    options: dict[str, Any] = {
        "cache": None,
        "co2_tracker": False,
        "show_progress_bar": False,
        "overwrite_strategy": "always",
        "encode_kwargs": {"batch_size": batch_size, "show_progress_bar": False},
    }
    options.update(evaluate_kwargs)
    quiet = not options["show_progress_bar"] and datasets.is_progress_bar_enabled()
    if quiet:
        datasets.disable_progress_bars()
    try:
        result = mteb.evaluate(model, task, **options)
    finally:
        if quiet:
            datasets.enable_progress_bars()
    return task_scores(result, task.metadata.name)
