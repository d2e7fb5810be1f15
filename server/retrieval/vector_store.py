"""Chroma as the dense index: embedded PersistentClient by default, HttpClient when a URL is set."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlparse

import chromadb
import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings as ChromaSettings

import server.offline  # noqa: F401
from server.config import Settings
from server.retrieval.documents import SearchDocument
from server.retrieval.embedder import Embedder
from server.retrieval.embedding_cache import EmbeddingCache

BATCH = 64
QUERY_CACHE_SIZE = 2048


class ProjectEmbeddingFunction(EmbeddingFunction[Documents]):
    """Wraps our embedder so Chroma never falls back to its own (downloading) default model."""

    def __init__(self, embedder: Embedder | None = None, embedder_name: str = "") -> None:
        self._embedder = embedder
        self._embedder_name = embedder.name if embedder else embedder_name

    def _model(self) -> Embedder:
        if self._embedder is None:  # rebuilt from a stored collection config: load on first use
            from server.retrieval.embedder import embedder_by_name

            self._embedder = embedder_by_name(self._embedder_name)
        return self._embedder

    def __call__(self, input: Documents) -> Embeddings:  # noqa: A002 (Chroma's parameter name)
        return [v for v in self._model().embed_documents(list(input))]

    @staticmethod
    def name() -> str:
        return "sparring"

    def get_config(self) -> dict:
        return {"embedder": self._embedder_name}

    @staticmethod
    def build_from_config(config: dict) -> ProjectEmbeddingFunction:
        return ProjectEmbeddingFunction(embedder_name=str(config.get("embedder", "")))

    def is_legacy(self) -> bool:
        return False


@dataclass
class IngestReport:
    embedded: int  # written to the index: encoded now or read from the embedding cache
    deleted: int
    unchanged: int
    cached: int = 0  # of `embedded`, read from the embedding cache instead of the encoder

    @property
    def total(self) -> int:
        return self.embedded + self.unchanged


class ChromaUnavailable(RuntimeError):
    """SPARRING_CHROMA_URL is set but no Chroma server answers there."""


def make_client(settings: Settings) -> chromadb.ClientAPI:
    """The embedded PersistentClient (one process), or an HttpClient for SPARRING_CHROMA_URL (a
    `chroma run` server that several API processes share)."""
    chroma_settings = ChromaSettings(anonymized_telemetry=False)
    if settings.chroma_url:
        url = urlparse(settings.chroma_url)
        try:
            return chromadb.HttpClient(
                host=url.hostname or "localhost",
                port=url.port or (443 if url.scheme == "https" else 8000),
                ssl=url.scheme == "https",
                settings=chroma_settings,
            )
        except ValueError as exc:  # chromadb's "Could not connect to a Chroma server"
            raise ChromaUnavailable(
                f"no Chroma server answers at SPARRING_CHROMA_URL={settings.chroma_url}: start one "
                "(chroma run --path data/chroma-server --host 127.0.0.1 --port 8001) or unset it "
                "to use the embedded index"
            ) from exc
    settings.chroma_path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(settings.chroma_path), settings=chroma_settings)


class VectorStore:
    def __init__(
        self,
        client: chromadb.ClientAPI,
        embedder: Embedder,
        prefix: str,
        embedding_cache: EmbeddingCache | None = None,
    ) -> None:
        self._embedder = embedder
        self._embedding_cache = embedding_cache
        self._query_cache: dict[str, np.ndarray] = {}
        self._cache_lock = threading.Lock()
        self._collection = client.get_or_create_collection(
            name=f"{prefix}-{embedder.name}",
            embedding_function=ProjectEmbeddingFunction(embedder),
            configuration={"hnsw": {"space": "cosine"}},
        )
        # The rubric key points' follow-up questions (documents.build_probe_documents), apart from
        # the question documents so the dense and hybrid baselines read the questions alone.
        self._probes = client.get_or_create_collection(
            name=f"{prefix}-{embedder.name}-probes",
            embedding_function=ProjectEmbeddingFunction(embedder),
            configuration={"hnsw": {"space": "cosine"}},
        )
        # Query vectors of fixed texts (the glossary's concept names), embedded at ingest and
        # read back at start-up instead of going through the encoder again.
        self._named = client.get_or_create_collection(
            name=f"{prefix}-{embedder.name}-named-queries",
            embedding_function=ProjectEmbeddingFunction(embedder),
        )

    def count(self) -> int:
        return self._collection.count()

    def ingest(
        self,
        docs: list[SearchDocument],
        progress: Callable[[int, int], None] | None = None,
        probes: list[SearchDocument] | None = None,
    ) -> IngestReport:
        """Embed only new or changed documents (keyed by content hash) and delete removed ones:
        the question documents, and the key points' follow-up questions when given."""
        plans = [(self._collection, docs)]
        if probes is not None:
            plans.append((self._probes, probes))
        name = self._embedder.name
        # (collection, document, content hash): the hash is also the embedding cache's key.
        todo: list[tuple[chromadb.Collection, SearchDocument, str]] = []
        deleted = 0
        for collection, wanted_docs in plans:
            existing = collection.get(include=["metadatas"])
            stored = {
                doc_id: (meta or {}).get("content_hash")
                for doc_id, meta in zip(existing["ids"], existing["metadatas"] or [], strict=False)
            }
            wanted = {d.doc_id for d in wanted_docs}
            stale = [doc_id for doc_id in stored if doc_id not in wanted]
            if stale:
                collection.delete(ids=stale)
            deleted += len(stale)
            for d in wanted_docs:
                key = d.content_hash(name)
                if stored.get(d.doc_id) != key:
                    todo.append((collection, d, key))
            self._backfill_cache(collection, stored)
        # Similar lengths in one batch waste less padding in the encoder.
        todo.sort(key=lambda cdk: len(cdk[1].text))
        done = 0
        if progress:
            progress(0, len(todo))
        cache = self._embedding_cache
        known = (
            cache.get_many((key for _, _, key in todo), self._embedder.dim)
            if cache is not None
            else {}
        )
        cached = 0
        for start in range(0, len(todo), BATCH):
            batch = todo[start : start + BATCH]
            missing = [(d.text, key) for _, d, key in batch if key not in known]
            if missing:
                fresh = self._embedder.embed_documents([text for text, _ in missing])
                found = {key: v for (_, key), v in zip(missing, fresh, strict=True)}
                if cache is not None:
                    cache.put_many(found.items())
                known.update(found)
            cached += len(batch) - len(missing)
            for collection, _ in plans:
                rows = [(d, known[key]) for c, d, key in batch if c is collection]
                if rows:
                    self._upsert(collection, rows)
            done += len(batch)
            if progress:
                progress(done, len(todo))
        total = len(docs) + len(probes or [])
        return IngestReport(
            embedded=len(todo), deleted=deleted, unchanged=total - len(todo), cached=cached
        )

    def _backfill_cache(self, collection: chromadb.Collection, stored: dict[str, str]) -> None:
        """Copy the index's current vectors into an embedding cache that lacks them (an index
        built before the cache existed), so a later new index reads them instead of encoding."""
        cache = self._embedding_cache
        hashes = {h for h in stored.values() if h}
        if cache is None or not hashes:
            return
        have = cache.get_many(hashes, self._embedder.dim)
        lacking = [doc_id for doc_id, h in stored.items() if h and h not in have]
        for start in range(0, len(lacking), 1000):
            got = collection.get(ids=lacking[start : start + 1000], include=["embeddings"])
            by_id = dict(zip(got["ids"], got["embeddings"], strict=True))
            cache.put_many((stored[i], np.asarray(v, dtype=np.float32)) for i, v in by_id.items())

    def _upsert(
        self, collection: chromadb.Collection, rows: list[tuple[SearchDocument, np.ndarray]]
    ) -> None:
        collection.upsert(
            ids=[d.doc_id for d, _ in rows],
            documents=[d.text for d, _ in rows],
            embeddings=[v for _, v in rows],
            metadatas=[
                {
                    "entry_id": d.entry_id,
                    "subquestion_id": d.subquestion_id,
                    "content_hash": d.content_hash(self._embedder.name),
                }
                for d, _ in rows
            ],
        )

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Query vectors; repeated texts (evaluation runs, the engine's follow-up searches on
        question texts) come from a small per-store cache instead of the encoder."""
        # The encoder serialises calls anyway, so one lock around the whole lookup costs nothing.
        with self._cache_lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._query_cache]
            if todo:
                for t, v in zip(todo, self._embedder.embed_queries(todo), strict=True):
                    if len(self._query_cache) >= QUERY_CACHE_SIZE:
                        self._query_cache.pop(next(iter(self._query_cache)))
                    self._query_cache[t] = v
            return np.stack([self._query_cache[t] for t in texts])

    def named_query_vectors(self, named: dict[str, str]) -> dict[str, np.ndarray]:
        """Query vectors for {id: text}: read from the index where the stored text is the same,
        embedded (and stored) otherwise; ids no longer named are dropped."""
        stored = self._named.get(include=["embeddings", "documents"])
        embeddings = stored["embeddings"] if stored["embeddings"] is not None else []
        have = {
            i: np.asarray(e, dtype=np.float32)
            for i, e, d in zip(stored["ids"], embeddings, stored["documents"] or [], strict=False)
            if named.get(i) == d
        }
        stale = [i for i in stored["ids"] if i not in named]
        if stale:
            self._named.delete(ids=stale)
        todo = [i for i in named if i not in have]
        for start in range(0, len(todo), BATCH):
            batch = todo[start : start + BATCH]
            vectors = self.embed_queries([named[i] for i in batch])
            self._named.upsert(
                ids=batch, documents=[named[i] for i in batch], embeddings=[v for v in vectors]
            )
            have.update(zip(batch, vectors, strict=True))
        return {i: have[i] for i in named}

    def document_vectors(self, probes: bool = False) -> tuple[list[str], np.ndarray]:
        """Every stored document's id and vector (L2-normalised), for exact scoring in memory:
        the question documents, or the key points' follow-up questions."""
        stored = (self._probes if probes else self._collection).get(include=["embeddings"])
        vectors = stored["embeddings"] if stored["embeddings"] is not None else []
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(stored["ids"]), -1)
        return list(stored["ids"]), matrix

    def query(self, text: str, n: int) -> list[tuple[str, float]]:
        """(doc_id, cosine similarity) best first."""
        return self.query_vector(self.embed_queries([text])[0], n)

    def query_vector(self, vector, n: int) -> list[tuple[str, float]]:
        n = max(1, min(n, self.count()))
        res = self._collection.query(query_embeddings=[vector], n_results=n, include=["distances"])
        return [
            (doc_id, 1.0 - float(dist))
            for doc_id, dist in zip(res["ids"][0], res["distances"][0], strict=True)
        ]
