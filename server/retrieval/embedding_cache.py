"""Document vectors kept beside the index, keyed by the embedder and the text.

A fresh index costs minutes of encoder time (8,300 texts take about 10 minutes on 2 cores). The
vectors depend only on the model and the text, so a new Chroma (a `chroma run` server after the
embedded index, a new collection prefix, a deleted `data/chroma`) reads them back from here and
embeds only texts it has never seen. One SQLite file; several processes may share it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path

import numpy as np

# Keys are `SearchDocument.content_hash(embedder name)`: sha256 of the name and the text.
_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, dim INTEGER, vector BLOB)"
_LOOKUP_CHUNK = 500  # below SQLite's bound-parameter limit


class EmbeddingCacheError(ValueError):
    """SPARRING_EMBEDDING_CACHE names something that cannot hold the cache."""


class EmbeddingCache:
    def __init__(self, path: Path, timeout_seconds: float = 30.0) -> None:
        self.path = path
        self._timeout = timeout_seconds
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with closing(self._connect()) as db, db:
                db.execute(_SCHEMA)
                db.execute("SELECT COUNT(*) FROM vectors").fetchone()
        except (OSError, sqlite3.Error) as exc:
            raise EmbeddingCacheError(
                f"cannot use {path} as the embedding cache ({exc}): set SPARRING_EMBEDDING_CACHE "
                "to a writable file path (it need not exist) or to 'off'"
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=self._timeout)

    def get_many(self, keys: Iterable[str], dim: int) -> dict[str, np.ndarray]:
        """The stored vectors of those keys that have one of this dimension."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, np.ndarray] = {}
        with closing(self._connect()) as db:
            for start in range(0, len(wanted), _LOOKUP_CHUNK):
                chunk = wanted[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT key, vector FROM vectors WHERE dim = ? AND key IN ({marks})",
                    (dim, *chunk),
                )
                for key, blob in rows:
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if vector.shape == (dim,):  # a truncated row is a miss, not a crash
                        found[key] = vector.copy()
        return found

    def put_many(self, rows: Iterable[tuple[str, np.ndarray]]) -> None:
        data = [
            (key, int(v.shape[-1]), np.asarray(v, dtype=np.float32).tobytes()) for key, v in rows
        ]
        if not data:
            return
        with closing(self._connect()) as db, db:
            db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", data)

    def __len__(self) -> int:
        with closing(self._connect()) as db:
            return int(db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])
