"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import server.offline  # noqa: F401  (Gradio analytics off before gradio loads)
from server.api.auth import parse_tokens
from server.api.errors import install_error_handlers
from server.api.routes import grading, questions, sessions
from server.config import Settings
from server.services import Services


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    settings = settings or Settings()
    services = services or Services(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Build everything before the first request, so no request pays for model loading.
        services.ingest()
        _ = services.searcher
        _ = services.grading
        _ = services.database
        yield

    app = FastAPI(title="Sparring", version="0.1.0", lifespan=lifespan)
    app.state.services = services
    app.state.tokens = parse_tokens(settings.auth_tokens)
    install_error_handlers(app)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/info")
    def info() -> dict:
        bank = services.bank
        return {
            "questions": len(bank),
            "llm_configured": services.grading.llm_configured,
            "llm_model": settings.llm_model or None,
            "embedder": services.embedder.name,
            "areas": sorted({e.area.value for e in bank}),
            "topics": sorted({e.topic for e in bank}),
            "companies": sorted({c for e in bank for c in e.companies}),
        }

    app.include_router(questions.router)
    app.include_router(grading.router)
    app.include_router(sessions.router)
    if settings.ui_enabled:
        import gradio as gr

        from ui.app import HEAD, build_ui

        app = gr.mount_gradio_app(
            app, build_ui(settings.api_url_for_ui, settings.ui_token), path="/ui", head=HEAD
        )
    return app
