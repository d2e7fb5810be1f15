"""Embedders and the Chroma index: real models, real Chroma, idempotent ingestion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from server.config import EmbedderName, Settings
from server.retrieval.documents import SearchDocument
from server.retrieval.embedder import (
    MAX_QUERY_TOKENS,
    E5Embedder,
    SentenceTransformerEmbedder,
    UseEmbedder,
    make_embedder,
)
from server.retrieval.embedding_cache import EmbeddingCache, EmbeddingCacheError
from server.retrieval.tokenize import tokenize
from server.retrieval.vector_store import VectorStore, make_client

DOCS = [
    SearchDocument("a#zh", "a", "", "GRPO 的优势函数如何用组内均值计算"),
    SearchDocument("b#zh", "b", "", "DPO 的损失函数如何从 Bradley-Terry 推导"),
    SearchDocument("c#en", "c", "", "What does the KL penalty do in RLHF?"),
]


def _unit_rows(v: np.ndarray) -> bool:
    return bool(np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3))


@pytest.mark.parametrize("backend", [E5Embedder, UseEmbedder])
def test_packaged_multilingual_backends(backend):
    emb = backend()
    docs = emb.embed_documents([d.text for d in DOCS])
    q = emb.embed_queries(["how is the GRPO advantage computed from the group mean"])
    assert docs.shape == (3, emb.dim) and _unit_rows(docs)
    assert int(np.argmax(docs @ q[0])) == 0  # zh document found from an English query


def test_native_encoder_runs_on_one_thread_whoever_calls_it():
    """OpenMP keeps a team of spinning workers per calling thread: the server's rotating pool
    threads each got one, and idle teams slowed the busy one. Every call now runs on one
    dedicated thread, one at a time, and concurrent callers still get their own vectors."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    emb = E5Embedder()
    model_query = emb._model.query
    ran_on: set[int] = set()

    def recording(texts):
        ran_on.add(threading.get_ident())
        return model_query(texts)

    emb._model.query = recording
    texts = [d.text for d in DOCS] * 4
    alone = np.vstack([emb.embed_queries([t]) for t in texts])
    with ThreadPoolExecutor(max_workers=6) as pool:
        together = np.vstack(list(pool.map(lambda t: emb.embed_queries([t]), texts)))
    assert len(ran_on) == 1 and threading.get_ident() not in ran_on
    assert np.allclose(alone, together, atol=1e-5)
    # A call made from the encoder thread itself runs there (no wait on its own queue).
    nested = emb._thread.run(lambda ts: emb.embed_queries(ts), [texts[0]])
    assert np.allclose(nested[0], alone[0], atol=1e-5)


def test_a_long_query_is_encoded_from_its_first_tokens_only():
    """A pasted page would hold the one encoder thread for half a second: the query side reads at
    most MAX_QUERY_TOKENS tokens (documents are not cut)."""
    emb = E5Embedder()
    tokens = emb._model.token_count
    short = "GRPO 为什么不需要 critic"
    assert emb.capped(short) == short
    long = "PPO 的 clip 为什么能近似约束 KL？我的 reward 一直不涨。" * 20
    cut = emb.capped(long)
    assert long.startswith(cut) and len(cut) < len(long)
    assert tokens(cut, True) <= MAX_QUERY_TOKENS < tokens(long[: len(cut) + 1], True)
    assert np.allclose(emb.embed_queries([long]), emb.embed_queries([cut]), atol=1e-6)
    assert not np.allclose(emb.embed_documents([long]), emb.embed_documents([cut]), atol=1e-3)


def test_sentence_transformers_backend_loads_the_packaged_minilm_offline():
    emb = make_embedder(Settings(embedder=EmbedderName.sentence_transformers))
    # The name is known before the model loads (a warm start never loads it).
    assert emb.name == "st-all-minilm-l6-v2" or emb.name.startswith("st-")
    assert isinstance(emb.loaded, SentenceTransformerEmbedder) and emb.dim == 384
    assert emb.loaded.name == emb.name
    v = emb.embed_documents(["What does the KL penalty do in RLHF?", "How to bake bread"])
    q = emb.embed_queries(["role of the KL term in RLHF"])
    assert _unit_rows(v) and int(np.argmax(v @ q[0])) == 0


def test_ingest_is_idempotent_and_tracks_changes(tmp_path, embedder):
    settings = Settings(data_dir=tmp_path)
    store = VectorStore(make_client(settings), embedder, "test")
    first = store.ingest(DOCS)
    assert (first.embedded, first.unchanged, first.deleted) == (3, 0, 0)
    again = VectorStore(make_client(settings), embedder, "test").ingest(DOCS)
    assert (again.embedded, again.unchanged, again.deleted) == (0, 3, 0)
    changed = [DOCS[0], SearchDocument("b#zh", "b", "", "DPO 的隐式奖励是什么"), DOCS[2]]
    third = store.ingest(changed[:2])  # b changed, c removed
    assert (third.embedded, third.unchanged, third.deleted) == (1, 1, 1)
    assert store.count() == 2
    top = store.query("DPO implicit reward", 2)
    assert top[0][0] == "b#zh" and -1.0 <= top[0][1] <= 1.0


def test_ingest_reports_progress(tmp_path, embedder):
    store = VectorStore(make_client(Settings(data_dir=tmp_path)), embedder, "progress")
    seen = []
    store.ingest(DOCS, progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)


class CountingEmbedder:
    """The real embedder, counting the document texts it is asked to encode."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.encoded: list[str] = []

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.encoded += texts
        return self._inner.embed_documents(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._inner.embed_queries(texts)


def test_a_new_index_reads_known_vectors_from_the_embedding_cache(tmp_path, embedder):
    """A second index (a Chroma server after the embedded one, another prefix) over the same
    texts encodes nothing: the vectors come from the cache file, identical to the first index's."""
    cache = EmbeddingCache(tmp_path / "cache" / "vectors.sqlite3")
    counting = CountingEmbedder(embedder)
    first = VectorStore(make_client(Settings(data_dir=tmp_path / "a")), counting, "q", cache)
    report = first.ingest(DOCS)
    assert (report.embedded, report.cached) == (3, 0) and len(counting.encoded) == 3
    assert len(cache) == 3
    second = VectorStore(make_client(Settings(data_dir=tmp_path / "b")), counting, "q", cache)
    changed = [DOCS[0], SearchDocument("b#zh", "b", "", "DPO 的隐式奖励是什么"), DOCS[2]]
    report = second.ingest(changed)
    # Two texts were known; only the changed one went through the encoder.
    assert (report.embedded, report.cached) == (3, 2)
    assert counting.encoded[3:] == ["DPO 的隐式奖励是什么"]
    a = first._collection.get(ids=["a#zh", "c#en"], include=["embeddings"])
    b = second._collection.get(ids=["a#zh", "c#en"], include=["embeddings"])
    assert a["ids"] == b["ids"] and np.allclose(a["embeddings"], b["embeddings"], atol=1e-7)
    assert second.query("DPO implicit reward", 1)[0][0] == "b#zh"


def test_an_index_built_before_the_cache_fills_it_at_the_next_ingest(tmp_path, embedder):
    """An install whose index predates the cache: its next ingest copies the stored vectors into
    the cache, so moving to a Chroma server afterwards encodes nothing."""
    settings = Settings(data_dir=tmp_path / "old")
    VectorStore(make_client(settings), embedder, "q").ingest(DOCS)  # no cache then
    cache = EmbeddingCache(tmp_path / "vectors.sqlite3")
    report = VectorStore(make_client(settings), embedder, "q", cache).ingest(DOCS)
    assert (report.embedded, report.unchanged) == (0, 3) and len(cache) == 3
    counting = CountingEmbedder(embedder)
    moved = VectorStore(make_client(Settings(data_dir=tmp_path / "new")), counting, "q", cache)
    report = moved.ingest(DOCS)
    assert (report.embedded, report.cached) == (3, 3) and counting.encoded == []
    assert moved.query("DPO implicit reward", 1)[0][0] == "b#zh"


def test_the_embedding_cache_ignores_rows_of_another_shape_and_can_be_turned_off(tmp_path):
    cache = EmbeddingCache(tmp_path / "vectors.sqlite3")
    cache.put_many([("k1", np.ones(4, dtype=np.float32)), ("k2", np.ones(8, dtype=np.float32))])
    found = cache.get_many(["k1", "k2", "k3"], dim=4)
    assert list(found) == ["k1"] and found["k1"].dtype == np.float32
    assert Settings(data_dir=tmp_path).embedding_cache_file == tmp_path / "embedding-cache.sqlite3"
    assert Settings(data_dir=tmp_path, embedding_cache="off").embedding_cache_file is None
    assert (
        Settings(embedding_cache=str(tmp_path / "x.db")).embedding_cache_file == tmp_path / "x.db"
    )


@pytest.mark.parametrize("kind", ["directory", "not a database"])
def test_an_unusable_embedding_cache_setting_is_a_clear_error_that_touches_nothing(tmp_path, kind):
    """`sparring ingest` stops with a message (no traceback, exit 2) and leaves the file as it was."""
    target = tmp_path / "cache"
    if kind == "directory":
        target.mkdir()
    else:
        target.write_text("my notes, not a cache\n")
    out = subprocess.run(
        [str(Path(sys.executable).parent / "sparring"), "ingest"],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "SPARRING_DATA_DIR": str(tmp_path / "data"),
            "SPARRING_EMBEDDING_CACHE": str(target),
            "COLUMNS": "300",
        },
    )
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join((out.stdout + out.stderr).split())
    assert f"cannot use {target} as the embedding cache" in said and "'off'" in said, said
    assert "Traceback" not in said and not (tmp_path / "data" / "chroma").exists()
    if kind == "directory":
        assert list(target.iterdir()) == []
    else:
        assert target.read_text() == "my notes, not a cache\n"
    with pytest.raises(EmbeddingCacheError):
        EmbeddingCache(target)


def test_tokenizer_keeps_latin_terms_whole():
    tokens = tokenize("PPO-clip 和 Bradley-Terry 以及 KL 散度、GRPO 的 k3 估计")
    for term in ("ppo-clip", "bradley-terry", "kl", "grpo", "k3", "ppo", "clip"):
        assert term in tokens
    assert "的" not in tokens and "散度" in tokens


def test_sparse_bm25_matches_rank_bm25():
    from rank_bm25 import BM25Okapi

    from server.retrieval.search import _Bm25Matrix

    corpus = [list(tokenize(d.text)) for d in DOCS] + [list(tokenize("PPO 的 clip 与 KL 惩罚"))]
    query = list(tokenize("DPO 的 KL 和 clip"))
    assert np.allclose(BM25Okapi(corpus).get_scores(query), _Bm25Matrix(corpus).scores(query))
    assert not _Bm25Matrix(corpus).scores(["未出现的词"]).any()
