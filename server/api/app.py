"""The FastAPI application factory."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, RedirectResponse

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
FAVICON = Path(__file__).resolve().parents[2] / "ui" / "favicon.svg"


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


STARTING_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="refresh" content="2"><title>Sparring</title></head>
<body style="font-family: sans-serif; margin: 3em">
<p>Sparring is loading its interface… this page reloads by itself.</p>
<p>Sparring 正在加载界面……页面会自动刷新。</p></body></html>"""


def _mount_ui_in_background(app: FastAPI, settings: Settings) -> None:
    """Serve a self-reloading "starting" page at /ui, build the Gradio UI in a thread, then mount
    it and run its start-up on the server's event loop (as gr.mount_gradio_app's lifespan would,
    had the UI existed when the server started)."""
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    def starting(_request: Request) -> HTMLResponse:
        return HTMLResponse(STARTING_PAGE, status_code=503, headers={"Retry-After": "2"})

    placeholders = [
        Route(UI_PATH, starting),
        Route(UI_PATH + "/{rest:path}", starting),
    ]
    app.router.routes.extend(placeholders)

    async def start_ui(gradio_app: Any) -> None:
        stack = AsyncExitStack()
        await stack.enter_async_context(gradio_app.router.lifespan_context(gradio_app))
        gradio_app.get_blocks().run_startup_events()
        await gradio_app.get_blocks().run_extra_startup_events()
        app.state.ui_stack = stack

    def build() -> None:
        try:
            import gradio as gr

            from ui.app import HEAD, build_ui

            blocks = build_ui(settings.api_url_for_ui, settings.ui_token)
            ours = app.router.lifespan_context
            gr.mount_gradio_app(app, blocks, path=UI_PATH, head=HEAD)
            app.router.lifespan_context = ours  # its start-up runs below, on the running loop
            mounted = app.router.routes[-1]
            for route in placeholders:
                app.router.routes.remove(route)
            app.state.loop_ready.wait()
            asyncio.run_coroutine_threadsafe(start_ui(mounted.app), app.state.loop).result()
            app.state.ui_ready.set()
        except Exception:
            log.exception("the UI failed to load; the API keeps serving")

    # Started by the lifespan, once the server is up: building it alongside the start-up would
    # hold the GIL the start-up needs, and /healthz would come later.
    app.state.ui_builder = build


def _warm_up(services: Services) -> None:
    """Build what requests need (a request that comes first waits for the same object)."""
    try:
        services.ingest()
        _ = services.searcher
        _ = services.grading
    except Exception:  # a request that needs the part reports the error itself
        log.exception("warming up the search index failed")


def create_app(
    settings: Settings | None = None,
    services: Services | None = None,
    ui_in_background: bool = False,
) -> FastAPI:
    """The API (and the UI at /ui). With `ui_in_background` (`sparring serve`) the UI is built
    in a thread while the API already answers (Gradio takes seconds to load); /ui says it is
    starting until then, and `app.state.ui_ready` is set once it serves."""
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
        app.state.loop = asyncio.get_running_loop()
        app.state.loop_ready.set()
        builder = getattr(app.state, "ui_builder", None)
        # The index is current (serve and ingest build it before the app starts) and the database
        # migrated; the searcher (BM25, jieba, Chroma) and the grader are built in the
        # background, so /healthz answers at once and the first request rarely waits for them.
        _ = services.database

        def background() -> None:
            # One after the other, the UI first: both are CPU-bound Python (one GIL), so side by
            # side each would take as long as both; a person opening /ui waits for the UI, while a
            # request that needs the searcher before it is built builds it itself.
            if builder is not None:
                builder()
            _warm_up(services)

        threading.Thread(target=background, name="warm-up", daemon=True).start()
        with _close_on_signal(work.close):
            try:
                yield
            finally:
                work.close()
                ui_stack = getattr(app.state, "ui_stack", None)
                if ui_stack is not None:
                    await ui_stack.aclose()

    app = FastAPI(title="Sparring", version="0.1.0", lifespan=lifespan)
    app.state.loop_ready = threading.Event()
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
    app.state.ui_ready = threading.Event()
    if settings.ui_enabled:
        if ui_in_background:
            _mount_ui_in_background(app, settings)
        else:
            import gradio as gr

            from ui.app import HEAD, build_ui

            app = gr.mount_gradio_app(
                app, build_ui(settings.api_url_for_ui, settings.ui_token), path=UI_PATH, head=HEAD
            )
            app.state.ui_ready.set()
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
    async def root(request: Request) -> RedirectResponse:
        # The query goes along: /?lang=en opens the English UI.
        query = request.url.query
        return RedirectResponse(landing + (f"?{query}" if query else ""), status_code=307)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        return FileResponse(FAVICON, media_type="image/svg+xml")

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
