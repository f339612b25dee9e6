"""Evaluate a Sift :class:`~sift_ir.Embedder` with MTEB (the ``mteb`` package, 2.x).

:class:`SiftMTEBEncoder` implements mteb's encoder protocol (``mteb.models.EncoderProtocol``):
``encode`` over mteb's data loaders, ``similarity`` and ``similarity_pairwise`` (dot products
of Sift's unit-norm vectors, i.e. cosine similarity) and ``mteb_model_meta``. Any mteb task
runs on it, and so do the in-memory retrieval tasks of :mod:`sift_ir.mteb_local`::

    import mteb
    from sift_ir.mteb import SiftMTEBEncoder

    model = SiftMTEBEncoder("models/local/all-MiniLM-L6-v2")
    result = mteb.evaluate(model, mteb.get_task("SciFact"), cache=None)

This module imports mteb (and torch, which mteb needs); ``import sift_ir`` does not import it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from mteb.models import ModelMeta
from mteb.types import PromptType

if TYPE_CHECKING:
    from mteb.abstasks.task_metadata import TaskMetadata
    from torch.utils.data import DataLoader

__all__ = ["SiftMTEBEncoder"]

_KINDS = ("query", "passage")


class SiftMTEBEncoder:
    """An mteb encoder backed by a Sift :class:`~sift_ir.Embedder`.

    Args:
        model: an :class:`~sift_ir.Embedder`, or what ``Embedder(model, ...)`` takes (a model
            directory, hub id or registry alias); then the Embedder is created on first use
            (the first ``encode``, or reading ``embedder`` or ``mteb_model_meta``).
        revision: the revision reported in the model metadata (default: the Embedder's
            ``fingerprint``, with every run of characters other than letters, digits and
            ``._=+-`` made one ``_``: mteb's result cache names a directory after it).
            mteb's protocol passes it second.
        device: ``Embedder(device=...)`` (default ``"cpu"``); only with a model spec.
        dtype: ``Embedder(dtype=...)``; only with a model spec.
        batch_size: ``Embedder(batch_size=...)``; only with a model spec. mteb's own
            ``encode_kwargs["batch_size"]`` (32 by default) sizes the batches handed to
            ``encode``, each embedded with one Embedder call.
        instructions: task name -> query instruction, given to
            ``embed_texts(..., instruction=...)`` for that task's queries (and for its inputs
            when mteb names no prompt type, as in STS or classification); never for documents.
        use_task_prompts: for a task not in ``instructions``, use the task's own prompt from
            its metadata (``TaskMetadata.prompt``: a string, or the ``"query"`` entry of a
            dict) as the instruction. Off by default: the Embedder then applies the model's
            own default for queries, as ``sift eval`` does.
        default_kind: the Embedder ``kind`` for inputs mteb gives no prompt type
            (symmetric tasks): ``"passage"`` (default) or ``"query"``.
        **embedder_kwargs: further keyword arguments for ``Embedder`` (only with a model spec).

    The model metadata is named ``sift/<Embedder.name>``, with the Embedder's dimension,
    ``similarity_fn_name="cosine"`` and modalities ``["text", "image"]`` when the model sees
    images, else ``["text"]``.
    """

    def __init__(
        self,
        model: Any,  # noqa: ANN401 -- an Embedder or what Embedder() takes
        revision: str | None = None,
        *,
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int | None = None,
        instructions: Mapping[str, str] | None = None,
        use_task_prompts: bool = False,
        default_kind: str = "passage",
        **embedder_kwargs: Any,
    ) -> None:
        if default_kind not in _KINDS:
            raise ValueError(f"default_kind must be one of {_KINDS}, not {default_kind!r}")
        options: dict[str, Any] = dict(embedder_kwargs)
        if device is not None:
            options["device"] = device
        if dtype is not None:
            options["dtype"] = dtype
        if batch_size is not None:
            options["batch_size"] = batch_size
        if isinstance(model, (str, os.PathLike)):
            self._spec: str | None = os.fspath(model)
            self._embedder: Any = None
        else:
            if options:
                raise ValueError(
                    "device, dtype, batch_size and other Embedder options apply only when "
                    f"the model is given by name; got an Embedder and {sorted(options)}"
                )
            for attr in ("embed_texts", "name", "dim"):
                if not hasattr(model, attr):
                    raise TypeError(
                        f"model must be a sift_ir.Embedder or a model name/path, got "
                        f"{type(model).__name__} (no {attr!r})"
                    )
            self._spec = None
            self._embedder = model
        self._options = options
        self._revision = revision
        self.instructions: dict[str, str] = dict(instructions or {})
        self.use_task_prompts = use_task_prompts
        self.default_kind = default_kind
        self._meta: ModelMeta | None = None

    def __repr__(self) -> str:
        what = self._spec if self._embedder is None else self._embedder.name
        return f"SiftMTEBEncoder({what!r})"

    @property
    def embedder(self) -> Any:  # noqa: ANN401 -- sift_ir.Embedder (a compiled class)
        """The wrapped :class:`~sift_ir.Embedder`, created here on first access."""
        if self._embedder is None:
            from sift_ir import Embedder

            self._embedder = Embedder(self._spec, **self._options)
        return self._embedder

    @property
    def mteb_model_meta(self) -> ModelMeta:
        """mteb's metadata of the model (creates the Embedder if it is not there yet)."""
        if self._meta is None:
            emb = self.embedder
            sees_images = bool(getattr(emb, "sees_images", False))
            self._meta = ModelMeta(
                loader=None,
                name=f"sift/{str(emb.name).strip('/')}",
                revision=self._revision or _path_safe(str(emb.fingerprint)),
                release_date=None,
                languages=None,
                n_parameters=None,
                memory_usage_mb=None,
                max_tokens=None,
                embed_dim=int(emb.dim),
                license=None,
                open_weights=None,
                public_training_code=None,
                public_training_data=None,
                framework=[],
                reference=None,
                similarity_fn_name="cosine",
                use_instructions=bool(self.instructions) or self.use_task_prompts,
                training_datasets=None,
                modalities=["text", "image"] if sees_images else ["text"],
                model_type=["dense"],
            )
        return self._meta

    def kind(self, prompt_type: PromptType | str | None) -> str:
        """The Embedder ``kind`` for mteb's prompt type: query -> ``"query"``, document
        (passage) -> ``"passage"``, none -> ``default_kind``."""
        if prompt_type is None:
            return self.default_kind
        value = prompt_type.value if isinstance(prompt_type, PromptType) else str(prompt_type)
        if value == PromptType.query.value:
            return "query"
        if value in {PromptType.document.value, "passage"}:
            return "passage"
        raise ValueError(f"unknown mteb prompt type {prompt_type!r}")

    def instruction(
        self, task_metadata: TaskMetadata, prompt_type: PromptType | str | None
    ) -> str | None:
        """The instruction for this task's inputs of this prompt type (None: the model's
        default). Documents never get one."""
        if self.kind(prompt_type) == "passage" and prompt_type is not None:
            return None
        if task_metadata.name in self.instructions:
            return self.instructions[task_metadata.name]
        if self.use_task_prompts:
            prompt = task_metadata.prompt
            if isinstance(prompt, Mapping):
                prompt = prompt.get(PromptType.query.value)
            if prompt:
                return str(prompt)
        return None

    def encode(
        self,
        inputs: DataLoader[Any],
        *,
        task_metadata: TaskMetadata,
        hf_split: str,
        hf_subset: str,
        prompt_type: PromptType | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Embeds every row of mteb's data loader: an ``(n, dim)`` float32 array.

        A row with text only (``batch["text"]``) is embedded with ``embed_texts`` (``kind``
        from the prompt type, the task's instruction for queries); a row with an image only
        (``batch["image"]``, a PIL image) with ``embed_images``; a row with both, or whose
        image entry is a list of images, with ``embed_joint(text, images, kind=kind)``. Rows keep their
        order. ``hf_split``, ``hf_subset`` and ``kwargs`` (mteb's ``encode_kwargs``, e.g.
        ``batch_size``, ``show_progress_bar``) are not used.
        """
        emb = self.embedder
        kind = self.kind(prompt_type)
        instruction = self.instruction(task_metadata, prompt_type)
        parts = [
            self._encode_batch(emb, batch, kind, instruction) for batch in inputs
        ]
        if not parts:
            return np.zeros((0, int(emb.dim)), dtype=np.float32)
        return np.concatenate(parts, axis=0)

    @staticmethod
    def _encode_batch(
        emb: Any,  # noqa: ANN401
        batch: Mapping[str, Any],
        kind: str,
        instruction: str | None,
    ) -> np.ndarray:
        texts = batch.get("text")
        images = batch.get("image")
        if texts is None and images is None:
            raise ValueError(
                f"mteb batch has neither 'text' nor 'image' (keys: {sorted(batch)}); "
                "Sift embeds text and images only"
            )
        n = len(texts) if texts is not None else len(images)
        if texts is not None and isinstance(texts, str):
            raise TypeError("mteb batch 'text' must be a list of strings")
        text_rows: list[int] = []
        image_rows: list[int] = []
        joint_rows: list[int] = []
        for i in range(n):
            text = texts[i] if texts is not None else None
            image = images[i] if images is not None else None
            if image is None:
                text_rows.append(i)
            elif not text and not isinstance(image, (list, tuple)):
                image_rows.append(i)
            else:
                joint_rows.append(i)
        if (image_rows or joint_rows) and not getattr(emb, "sees_images", False):
            raise ValueError(
                f"model {emb.name!r} does not embed images, but this mteb task gives it some"
            )
        out = np.empty((n, int(emb.dim)), dtype=np.float32)
        if text_rows:
            out[text_rows] = np.asarray(
                emb.embed_texts(
                    [str(texts[i]) for i in text_rows], kind=kind, instruction=instruction
                ),
                dtype=np.float32,
            )
        if image_rows:
            out[image_rows] = np.asarray(
                emb.embed_images([images[i] for i in image_rows]), dtype=np.float32
            )
        for i in joint_rows:
            image = images[i]
            listed = list(image) if isinstance(image, (list, tuple)) else [image]
            text = str(texts[i]) if texts is not None and texts[i] is not None else ""
            out[i] = np.asarray(emb.embed_joint(text, listed, kind=kind), dtype=np.float32)
        return out

    def similarity(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:  # noqa: ANN401
        """``[n1, n2]`` dot products in float32: cosine similarity of Sift's unit vectors.

        Unlike mteb's ``cos_sim`` the vectors are not normalised again, so the scores are the
        ones Sift's dense search computes (up to float32 summation order).
        """
        a = _as_matrix(embeddings1)
        b = _as_matrix(embeddings2)
        return a @ b.T

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:  # noqa: ANN401
        """``[n]`` dot products of corresponding rows (cosine similarity of unit vectors)."""
        a = _as_matrix(embeddings1)
        b = _as_matrix(embeddings2)
        return (a * b).sum(dim=-1)


def _path_safe(text: str) -> str:
    """``text`` with each run of characters other than letters, digits and ``._=+-`` as ``_``."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_") or "unknown"


def _as_matrix(x: Any) -> torch.Tensor:  # noqa: ANN401
    """A 2-D float32 CPU tensor of a numpy array, tensor or nested list (1-D: one row)."""
    t = torch.as_tensor(x).detach().to(device="cpu", dtype=torch.float32)
    if t.ndim == 1:
        t = t.unsqueeze(0)
    if t.ndim != 2:
        raise ValueError(f"expected [n, dim] or [dim] embeddings, got shape {tuple(t.shape)}")
    return t
