"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

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

    app.include_router(questions.router)
    app.include_router(grading.router)
    app.include_router(sessions.router)
    return app
