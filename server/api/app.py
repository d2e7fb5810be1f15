"""The FastAPI application factory."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

import server.offline  # noqa: F401  (Gradio analytics off before gradio loads)
from server.api.auth import FailedAttempts, TokenTable
from server.api.errors import install_error_handlers
from server.api.guard import GuardPolicy, RequestGuard
from server.api.routes import grading, openai_compat, questions, sessions, speech
from server.config import Settings, is_loopback, secure_env_file
from server.services import Services
from server.speech import Transcriber
from server.work_queue import WorkQueue

log = logging.getLogger(__name__)
UI_PATH = "/ui"


@contextmanager
def _close_on_signal(close: Callable[[], None]) -> Iterator[None]:
    """On SIGTERM/SIGINT drop the queued grading jobs at once, then let uvicorn shut down.

    Why: uvicorn waits for every open request before the app hears about shutdown, so without
    this a long grading queue would hold SIGTERM for minutes. Only possible in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {}

    def handler(sig: int, frame: Any) -> None:
        loop.call_soon_threadsafe(close)  # not close() here: it takes locks the loop may hold
        prev = previous.get(sig)
        if callable(prev):
            prev(sig, frame)

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, prev in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, prev)


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    settings = settings or Settings()
    settings.check_bind()  # a non-loopback bind without a real token never starts
    secure_env_file()
    services = services or Services(settings)
    tokens = TokenTable.of(settings.tokens)
    work = WorkQueue(
        settings.grading_workers,
        settings.grading_queue_limit,
        settings.grading_per_user,
        name="grading",
        max_wait_seconds=settings.grading_max_wait_seconds,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Build everything before the first request, so no request pays for model loading.
        services.ingest()
        _ = services.searcher
        _ = services.grading
        _ = services.database
        with _close_on_signal(work.close):
            try:
                yield
            finally:
                work.close()

    app = FastAPI(title="Sparring", version="0.1.0", lifespan=lifespan)
    app.state.services = services
    app.state.tokens = tokens
    app.state.transcriber = Transcriber(settings)
    app.state.work = work
    failures = FailedAttempts(settings.auth_max_failures, settings.auth_failure_window_seconds)
    app.state.auth_failures = failures
    # Per-user limits only mean something when there are users; the no-auth install is one person.
    app.state.per_user_limits = tokens.enabled
    install_error_handlers(app)

    # Async and free of the thread pool: answers while every worker is busy grading.
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/info")
    def info() -> dict:
        bank = services.bank
        queue = work.stats()
        return {
            "grading_queue": {
                "workers": queue.workers,
                "in_system": queue.in_system,
                "queue_limit": queue.queue_limit,
                "expected_wait_seconds": round(work.expected_wait(), 2),
            },
            "questions": len(bank),
            "llm_configured": services.grading.llm_configured,
            "llm_model": settings.llm_model or None,
            "speech_enabled": settings.speech_configured,  # clients show a microphone only then
            "embedder": services.embedder.name,
            "areas": sorted({e.area.value for e in bank}),
            "topics": sorted({e.topic for e in bank}),
            "companies": sorted({c for e in bank for c in e.companies}),
        }

    app.include_router(questions.router)
    app.include_router(grading.router)
    app.include_router(sessions.router)
    app.include_router(openai_compat.router)
    app.include_router(speech.router)
    ui_mounted = False
    if settings.ui_enabled:
        import gradio as gr

        from ui.app import HEAD, build_ui

        app = gr.mount_gradio_app(
            app, build_ui(settings.api_url_for_ui, settings.ui_token), path=UI_PATH, head=HEAD
        )
        ui_mounted = True
        if tokens.enabled and not is_loopback(settings.host):
            log.warning(
                "auth is on: the UI at %s answers loopback browsers only (it acts as the "
                "SPARRING_UI_TOKEN user); others use the API with their own token",
                UI_PATH,
            )
    # A browser opening the bare address lands on the UI (or the API docs without it); every other
    # unknown path keeps its JSON 404.
    landing = UI_PATH + "/" if ui_mounted else "/docs"

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse(landing, status_code=307)

    app.add_middleware(
        RequestGuard,
        policy=GuardPolicy(
            tokens=tokens,
            failures=failures,
            max_body_bytes=settings.max_body_bytes,
            max_audio_bytes=settings.max_audio_bytes,
            check_host=not tokens.enabled,
            extra_hosts=settings.extra_hosts,
            # The UI has no sign-in of its own: with auth on it would show one user's data to
            # every visitor, so it answers loopback browsers only.
            ui_path=UI_PATH if ui_mounted and tokens.enabled else None,
        ),
    )
    return app
