"""Type stubs of the Rust extension (crates/sift-py)."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

PathLike = Union[str, os.PathLike[str]]
ImageLike = Union[PathLike, bytes, Any]  # a path, encoded bytes, or a PIL.Image.Image
Progress = Callable[[str, int, Optional[int]], None]

__version__: str

class SiftError(Exception):
    """An error of Sift: its message names the file, row, id or argument at fault."""

class Embedder:
    """An embedding model of any family Sift supports; vectors equal ``sift embed``'s."""

    def __init__(
        self,
        model: str,
        device: str = "cpu",
        dtype: str = "f32",
        batch_size: Optional[int] = None,
        query_instruction: Optional[str] = None,
        profile: str = "default",
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> str: ...
    @property
    def dim(self) -> int: ...
    @property
    def family(self) -> str: ...
    @property
    def sees_images(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def linear_kernel(self) -> str: ...
    @property
    def model_hash(self) -> str: ...
    @property
    def profile(self) -> Optional[str]: ...
    @property
    def fingerprint(self) -> str: ...
    def embed_texts(
        self, texts: Sequence[str], kind: str = "passage", instruction: Optional[str] = None
    ) -> npt.NDArray[np.float32]: ...
    def embed_images(self, images: Sequence[ImageLike]) -> npt.NDArray[np.float32]: ...
    def embed_joint(
        self, text: str, images: Sequence[ImageLike], kind: str = "query"
    ) -> npt.NDArray[np.float32]: ...

class Hit:
    """One search result."""

    rank: int
    id: str
    score: float
    domain: str
    passage: Optional[str]
    image: Optional[str]
    text: Optional[str]
    def to_dict(self) -> dict[str, Any]: ...

class Index:
    """A Sift index, built by ``Index.build`` or ``sift index``."""

    @staticmethod
    def build(
        corpus: PathLike,
        path: PathLike,
        dense: Optional[Sequence[str]] = None,
        *,
        domains: Optional[Sequence[str]] = None,
        k1: Optional[float] = None,
        b: Optional[float] = None,
        threads: Optional[int] = None,
        vector_dtype: str = "f32",
        vectors: Optional[Sequence[PathLike]] = None,
        images: bool = True,
        replace: bool = False,
        device: str = "cpu",
        dtype: str = "f32",
        batch_size: Optional[int] = None,
        profile: str = "default",
        progress: Optional[Progress] = None,
    ) -> Index: ...
    @staticmethod
    def open(
        path: PathLike,
        corpus: Optional[PathLike] = None,
        *,
        retrievers: Optional[Sequence[str]] = None,
        device: str = "cpu",
        dtype: str = "f32",
        batch_size: Optional[int] = None,
        reference_fusion: bool = False,
        pair_link: str = "regex",
    ) -> Index: ...
    @property
    def path(self) -> str: ...
    @property
    def corpus(self) -> Optional[str]: ...
    @property
    def domains(self) -> list[str]: ...
    @property
    def retrievers(self) -> list[str]: ...
    @property
    def manifest_json(self) -> str: ...
    def search(
        self,
        query: str = "",
        images: Optional[Sequence[ImageLike]] = None,
        *,
        retriever: Optional[str] = None,
        domain: Optional[str] = None,
        top_k: int = 10,
        candidates: str = "passages",
        fusion: str = "all",
        k1: Optional[float] = None,
        b: Optional[float] = None,
        ef_search: Optional[int] = None,
    ) -> list[Hit]: ...

class Reranker:
    """A reranker (a cross-encoder, ``pointwise:MODEL`` or ``listwise:GENERATOR``) as
    ``sift rerank --model`` takes it; its scores equal ``sift rerank``'s and
    ``POST /v1/rerank``'s."""

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        dtype: str = "f32",
        batch_size: int = 32,
        max_length: Optional[int] = None,
        endpoint_model: Optional[str] = None,
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def sees_images(self) -> bool: ...
    def score(
        self, pairs: Sequence[Union[tuple[str, Optional[str]], tuple[str, Optional[str], ImageLike]]]
    ) -> list[float]: ...
    def rank(
        self,
        query: str,
        documents: Sequence[Union[str, dict[str, str]]],
        *,
        top_n: Optional[int] = None,
        return_documents: bool = False,
    ) -> list[dict[str, Any]]: ...

class Generator:
    """A generator (a local Qwen2-VL- or Qwen2.5-VL-Instruct checkpoint, or an
    OpenAI-compatible endpoint with ``model``); its answers equal
    ``POST /v1/chat/completions``'s and ``sift generate chats``'."""

    def __init__(
        self,
        generator: str,
        *,
        model: Optional[str] = None,
        device: str = "cpu",
        dtype: str = "f32",
    ) -> None: ...
    @property
    def name(self) -> str: ...
    def chat(self, messages: Sequence[dict[str, Any]], **settings: Any) -> dict[str, Any]: ...

def evaluate(
    corpus: PathLike,
    index: Union[PathLike, Index],
    *,
    tasks: Optional[Sequence[str]] = None,
    retrievers: Optional[Sequence[str]] = None,
    domains: Optional[Sequence[str]] = None,
    top_k: int = 1000,
    per_query: bool = False,
    out: Optional[PathLike] = None,
    query_fusion: Optional[str] = None,
    device: str = "cpu",
    dtype: str = "f32",
    batch_size: Optional[int] = None,
    profile: str = "default",
    progress: Optional[Progress] = None,
) -> str: ...
