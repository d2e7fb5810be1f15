"""Every error leaves the API as JSON {"error": {"code", "message", "type", "param"}} with a fitting
status: `code` and `message` for people and scripts, `type` and `param` as OpenAI's API sends them,
so OpenAI clients (the SDK, chat apps) pointed at /v1 read every error, auth and size included."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        param: str | None = None,  # the request field at fault, as OpenAI names it
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.param = param


def busy(status: int, code: str, message: str, retry_after: float) -> ApiError:
    """429/503 with `Retry-After` (whole seconds, at least 1)."""
    return ApiError(status, code, message, {"Retry-After": str(max(1, round(retry_after)))})


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} {ident!r} does not exist")


# OpenAI's error `type` per status (their SDK maps the status to an exception class itself).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    421: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(code: str, message: str, status: int = 400, param: str | None = None) -> dict:
    return {"error": {"code": code, "message": message, "type": error_type(status), "param": param}}


async def send_error(
    send: Send, status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> None:
    """The JSON error format, sent from raw ASGI middleware (before any route or body parsing)."""
    body = json.dumps(error_body(code, message, status)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# SQLite and PostgreSQL messages that mean "the storage is unavailable for now", not "the request
# is wrong". A deadlock or serialization failure aborts one transaction of two: it can be retried.
_STORAGE_BUSY = ("locked", "busy", "deadlock detected", "could not serialize")
_STORAGE_DOWN = ("readonly", "read-only", "unable to open", "disk i/o", "disk is full")


def storage_unavailable(exc: DBAPIError) -> ApiError | None:
    """Classify a database error as 503 + Retry-After (lock held, read-only, disk), or None."""
    text = str(exc.orig or exc).lower()
    if isinstance(exc, IntegrityError):
        # Two processes raced for one unique row (a session's next turn, a review card): the loser
        # rolled back whole, so a retry sees the winner's commit.
        return busy(
            409, "conflict", "a concurrent request changed this; nothing was saved, retry", 1
        )
    if any(m in text for m in _STORAGE_BUSY):
        return busy(503, "storage_busy", "the database is busy; nothing was saved, retry", 2)
    if any(m in text for m in _STORAGE_DOWN) or exc.connection_invalidated:
        return busy(
            503, "storage_unavailable", "the database cannot be written now; nothing was saved", 10
        )
    return None


def _describe(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path"))
        parts.append(f"{loc or 'request'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.code, exc.message, exc.status, exc.param),
            status_code=exc.status,
            headers=exc.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body("invalid_request", _describe(exc), 422), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
            exc.status_code, "http_error"
        )
        return JSONResponse(
            error_body(code, str(exc.detail), exc.status_code),
            status_code=exc.status_code,
            headers=exc.headers,
        )

    @app.exception_handler(SQLAlchemyTimeoutError)
    async def _busy(_: Request, exc: SQLAlchemyTimeoutError) -> JSONResponse:
        return JSONResponse(
            error_body(
                "busy", "the server is overloaded; nothing was saved, retry in a moment", 503
            ),
            status_code=503,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(DBAPIError)
    async def _storage(_: Request, exc: DBAPIError) -> JSONResponse:
        mapped = storage_unavailable(exc)
        if mapped is None:
            log.exception("database error", exc_info=exc)
            return JSONResponse(
                error_body("internal", "internal server error", 500), status_code=500
            )
        log.warning("storage unavailable: %s", exc.orig or exc)
        return JSONResponse(
            error_body(mapped.code, mapped.message, mapped.status),
            status_code=mapped.status,
            headers=mapped.headers,
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse(error_body("internal", "internal server error", 500), status_code=500)
