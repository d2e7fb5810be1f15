"""Running the app under uvicorn for `sparring serve`: announce the address only once it accepts
connections, and stop on Ctrl+C within a bounded time even with browser tabs open."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable

import httpx
import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from server.api.connection_guard import server_config
from server.config import Settings


class AnnouncingServer(uvicorn.Server):
    """A uvicorn server that calls `on_ready` once its socket listens and the app has started,
    and `on_stop` when a shutdown begins (uvicorn itself says nothing at log level warning)."""

    def __init__(
        self, config: uvicorn.Config, on_ready: Callable[[], None], on_stop: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self._on_ready, self._on_stop = on_ready, on_stop

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # the lifespan ran and the socket is bound: connections are accepted
            self._on_ready()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_stop()
        # Connections still open after the grace period are cancelled on purpose: that is not an
        # error worth a traceback per open tab.
        logging.getLogger("uvicorn.error").addFilter(_expected_cancellation)
        await super().shutdown(sockets)


def _expected_cancellation(record: logging.LogRecord) -> bool:
    if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
        return False
    return "timeout graceful shutdown exceeded" not in record.getMessage()


def serve_app(
    app: FastAPI, settings: Settings, on_ready: Callable[[], None], on_stop: Callable[[], None]
) -> None:
    """Serve in this process until SIGINT/SIGTERM. Open connections (a browser tab keeps Gradio's
    event stream open) get `settings.shutdown_grace_seconds` to finish, then are cancelled."""
    config = server_config(app, settings)
    # uvicorn re-raises the Ctrl+C it handled once it has shut down; the shutdown is done by then.
    with contextlib.suppress(KeyboardInterrupt):
        AnnouncingServer(config, on_ready, on_stop).run()


def serve_workers(settings: Settings) -> None:
    """`--workers N`: uvicorn's supervisor and N worker processes, each building its app from the
    environment (server/asgi.py), with the same configuration as one process. This is what
    `uvicorn.run(..., workers=N)` does, with our Config (uvicorn.run builds its own)."""
    config = server_config(
        "server.asgi:create_worker_app", settings, factory=True, workers=settings.workers
    )
    sock = config.bind_socket()
    with contextlib.suppress(KeyboardInterrupt):
        Multiprocess(config, sockets=[sock]).run()


def local_url(host: str, port: int) -> str:
    """The address this machine reaches a server bound to `host` at (wildcards -> loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def announce_when_healthy(
    url: str, on_ready: Callable[[], None], give_up_seconds: float = 600.0
) -> threading.Thread:
    """For worker processes started by uvicorn's supervisor (no hook into their start-up): call
    `on_ready` once `url`/healthz answers."""

    def poll() -> None:
        deadline = time.monotonic() + give_up_seconds
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    on_ready()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)

    thread = threading.Thread(target=poll, name="announce-ready", daemon=True)
    thread.start()
    return thread
