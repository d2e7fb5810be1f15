"""The app as each worker process builds it: `sparring serve --workers N` starts N of these, and so
can any ASGI server, e.g. `uvicorn --factory server.asgi:create_worker_app --workers 4` or
`gunicorn -k uvicorn.workers.UvicornWorker 'server.asgi:create_worker_app()'`. Those lack what
`sparring serve` configures (server/api/connection_guard.py: header and body timeouts, the
per-address connection cap) and trust X-Forwarded-For from 127.0.0.1 unless told otherwise
(`--forwarded-allow-ips` / `--no-proxy-headers`); prefer `sparring serve`.

Every worker reads its settings from the environment (SPARRING_*) and builds its own Services:
nothing is shared in memory, which is why several workers need a Chroma server and one database."""

from __future__ import annotations

from fastapi import FastAPI

from server.config import Settings


class ScaleOutError(ValueError):
    """A configuration that cannot run several worker processes safely."""


def check_workers(settings: Settings, workers: int) -> None:
    """Several processes cannot share the embedded Chroma: each would open its own copy of the
    on-disk index and their writes would clobber one another. SQLite is shared safely on one
    machine (WAL, one writer at a time); PostgreSQL is needed across machines."""
    if workers > 1 and not settings.chroma_url:
        raise ScaleOutError(
            f"--workers {workers} needs a Chroma server: the embedded Chroma (data_dir/chroma) "
            "belongs to one process. Start one (chroma run --path data/chroma-server --host "
            "127.0.0.1 --port 8001) and set SPARRING_CHROMA_URL=http://127.0.0.1:8001, "
            "or serve with --workers 1. See docs/deploy.md."
        )


def create_worker_app() -> FastAPI:
    from server.api.app import create_app
    from server.services import Services

    settings = Settings()
    check_workers(settings, settings.workers)
    return create_app(settings, Services(settings))
