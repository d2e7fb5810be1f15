from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from server.api.app import create_app
from server.config import Settings
from server.retrieval.embedder import make_embedder
from server.services import Services

USERS = ("alice", "bob", "carol", "dave", "erin", "frank")


def token_for(user: str) -> str:
    """Tokens must have at least 16 characters (the server refuses shorter ones at start-up)."""
    return f"tok-{user}-0123456789abcdef"


TOKENS = ",".join(f"{token_for(u)}:{u}" for u in USERS)


@pytest.fixture(scope="session")
def embedder():
    """The real default embedding model, loaded once per test session."""
    return make_embedder(Settings())


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("sparring-data"))


@pytest.fixture(scope="session")
def settings(data_dir) -> Settings:
    return Settings(data_dir=data_dir, auth_tokens=TOKENS, llm_model="")


@pytest.fixture(scope="session")
def services(settings, embedder) -> Services:
    svc = Services(settings)
    svc.__dict__["embedder"] = embedder  # share the one loaded model (cached_property slot)
    svc.ingest()
    return svc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def base_url(settings, services) -> Iterator[str]:
    """The real FastAPI app served by uvicorn on loopback, in a background thread."""
    port = free_port()
    # The mounted UI calls this same server, as the UI user "frank".
    app_settings = settings.model_copy(update={"port": port, "ui_token": token_for("frank")})
    config = uvicorn.Config(
        create_app(app_settings, services), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        raise RuntimeError("test server did not start")
    yield url
    server.should_exit = True
    thread.join(timeout=10)


def client_for(base_url: str, user: str) -> httpx.Client:
    return httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token_for(user)}"}, timeout=60
    )


@pytest.fixture()
def alice(base_url) -> Iterator[httpx.Client]:
    with client_for(base_url, "alice") as c:
        yield c


@pytest.fixture()
def bob(base_url) -> Iterator[httpx.Client]:
    with client_for(base_url, "bob") as c:
        yield c
