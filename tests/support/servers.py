"""Extra real servers for the hardening tests: the app with other settings, over HTTP on a port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from server.api.app import create_app
from server.services import Services

# Built once per test session and safe to share; everything else is rebuilt from the settings.
SHARED = ("bank", "embedder", "documents", "vector_store", "searcher", "coding_tasks")


def derived_services(base: Services, **updates: Any) -> Services:
    """Services with some settings changed that reuse the session's loaded model and index, and
    its database unless the updates name another one (`database_url`)."""
    svc = Services(base.settings.model_copy(update=updates))
    for name in SHARED:
        svc.__dict__[name] = getattr(base, name)
    if "database_url" not in updates:
        svc.__dict__["database"] = base.database
    return svc


@contextmanager
def serve_app(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread; yields the loopback base URL."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 120
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{bound}"
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=60)


@contextmanager
def serve_services(services: Services, **settings_updates: Any) -> Iterator[tuple[str, FastAPI]]:
    settings = services.settings.model_copy(update={"ui_enabled": False, **settings_updates})
    app = create_app(settings, services)
    with serve_app(app, host=settings.host) as url:
        yield url, app
