from __future__ import annotations

import pytest

from server.config import Settings
from server.retrieval.embedder import make_embedder


@pytest.fixture(scope="session")
def embedder():
    """The real default embedding model, loaded once per test session."""
    return make_embedder(Settings())
