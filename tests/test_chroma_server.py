"""The vector index on a Chroma server (`chroma run`, HttpClient) behaves as the embedded one."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import Settings
from server.retrieval.vector_store import ChromaUnavailable, VectorStore, make_client
from tests.conftest import free_port
from tests.support.engines import chroma_server


def test_index_on_a_chroma_server(services, tmp_path: Path) -> None:
    docs = services.documents[:24]
    with chroma_server(tmp_path / "chroma", free_port()) as url:
        client = make_client(Settings(chroma_url=url, data_dir=tmp_path / "unused"))
        assert type(client).__name__ != "PersistentClient"  # nothing embedded, nothing on disk
        assert not (tmp_path / "unused" / "chroma").exists()
        store = VectorStore(client, services.embedder, "questions")
        first = store.ingest(docs)
        assert (first.embedded, first.unchanged) == (len(docs), 0)
        # A second API process opening the same server sees the same index: nothing to embed.
        again = VectorStore(make_client(Settings(chroma_url=url)), services.embedder, "questions")
        assert again.count() == len(docs)
        assert again.ingest(docs).unchanged == len(docs)
        for doc in docs[:5]:
            best, similarity = again.query(doc.text, 3)[0]
            assert best == doc.doc_id and similarity > 0.9


def test_unreachable_chroma_server_is_a_clear_error() -> None:
    with pytest.raises(ChromaUnavailable, match="SPARRING_CHROMA_URL"):
        make_client(Settings(chroma_url=f"http://127.0.0.1:{free_port()}"))
