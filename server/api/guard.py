"""The request guard: one raw ASGI layer in front of every route, run before any body is read.

In order: the `Host` check (no-auth loopback install), the UI's loopback-only rule (when auth is
configured the UI acts as one configured user), bearer auth with a per-client limit on failed
tokens, and the body limit (Content-Length first, then a cap on what is actually streamed).
JSON bodies are read here, within the limit, so a lone UTF-16 surrogate is refused with 422
instead of failing deep inside the app."""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.api.auth import UNAUTHORIZED, FailedAttempts, TokenTable, is_loopback_host
from server.api.errors import send_error

_PROTECTED = ("/api/", "/v1/")
_LOOPBACK_CLIENTS = ("127.", "::1", "::ffff:127.")
AUDIO_SUFFIX = "/answers/audio"


class BodyTooLarge(Exception):
    pass


@dataclass(frozen=True)
class GuardPolicy:
    tokens: TokenTable
    failures: FailedAttempts
    max_body_bytes: int
    max_audio_bytes: int  # the spoken-answer route (AUDIO_SUFFIX) takes audio files
    check_host: bool  # the no-auth loopback install: only loopback Host names
    extra_hosts: frozenset[str]
    ui_path: str | None  # where the UI is mounted, when it must stay on loopback


def _protected(path: str) -> bool:
    return path in ("/api", "/v1") or path.startswith(_PROTECTED)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def _loopback_client(scope: Scope) -> bool:
    """The client is on this machine. `client` is the TCP peer, or the address a trusted proxy
    (SPARRING_FORWARDED_ALLOW_IPS) forwarded for; X-Forwarded-For from any other peer is ignored
    by the server (server/api/connection_guard.py). A request that still names another address
    in a forwarding header came through some proxy on this machine: not a local browser."""
    client = scope.get("client")
    if not (client and str(client[0]).startswith(_LOOPBACK_CLIENTS)):
        return False
    headers = Headers(scope=scope)
    named = [a for v in headers.getlist("x-forwarded-for") for a in v.split(",")]
    for value in headers.getlist("forwarded"):
        for part in value.replace(",", ";").split(";"):
            key, _, address = part.strip().partition("=")
            if key.strip().lower() == "for":
                named.append(address.strip().strip('"').strip("[]"))
    return all(a.strip().startswith(_LOOPBACK_CLIENTS) for a in named)


def has_lone_surrogate(value: object) -> bool:
    """Any str (key or value) in a decoded JSON document that holds an unpaired surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= ch <= "\udfff" for ch in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class RequestGuard:
    def __init__(self, app: ASGIApp, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        p = self.policy
        headers = Headers(scope=scope)
        path: str = scope.get("path", "")

        if p.check_host and not is_loopback_host(headers.get("host"), p.extra_hosts):
            await self._reject(
                scope,
                send,
                421,
                "misdirected_request",
                "this server answers only http://127.0.0.1 / localhost (Host header refused); "
                "set SPARRING_ALLOWED_HOSTS to add a name",
            )
            return
        if (
            p.ui_path
            and _under(path, p.ui_path)
            and not (_loopback_client(scope) and is_loopback_host(headers.get("host")))
        ):
            await self._reject(
                scope,
                send,
                403,
                "ui_local_only",
                "with auth configured the UI is served to loopback only: open it through an SSH "
                "tunnel (ssh -L 8000:127.0.0.1:8000 host) or use the API with your own token",
            )
            return
        if p.tokens.enabled and _protected(path):
            client = str((scope.get("client") or ("unknown",))[0])
            wait = p.failures.retry_after(client)
            if wait:
                await self._reject(
                    scope,
                    send,
                    429,
                    "too_many_failed_logins",
                    "too many invalid tokens from this address; wait and retry",
                    {"Retry-After": str(round(wait))},
                )
                return
            user = p.tokens.user_for(headers.get("authorization"))
            if user is None:
                p.failures.record(client)
                await self._reject(
                    scope, send, 401, "unauthorized", UNAUTHORIZED, {"WWW-Authenticate": "Bearer"}
                )
                return
            scope.setdefault("state", {})["user"] = user

        if scope["type"] == "http":
            await self._http(scope, receive, send, headers)
        else:
            await self.app(scope, receive, send)

    def _limit(self, scope: Scope) -> int:
        if scope.get("method") == "POST" and str(scope.get("path", "")).endswith(AUDIO_SUFFIX):
            return self.policy.max_audio_bytes
        return self.policy.max_body_bytes

    async def _http(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        limit = self._limit(scope)
        declared = headers.get("content-length")
        if declared is not None:
            if not (declared.strip().isascii() and declared.strip().isdigit()):
                await send_error(send, 400, "bad_request", "invalid Content-Length header")
                return
            if int(declared) > limit:
                await self._too_large(send, limit)
                return
        if "json" in headers.get("content-type", "").lower():
            # Read the (bounded) JSON body here so it can be checked before the app parses it.
            try:
                body = await _read_body(receive, limit)
            except BodyTooLarge:
                await self._too_large(send, limit)
                return
            if b"\\u" in body and _lone_surrogate_in(body):
                await send_error(
                    send,
                    422,
                    "invalid_request",
                    "the JSON body contains an unpaired UTF-16 surrogate (\\ud800-\\udfff)",
                )
                return
            await self.app(scope, _replay(body, receive), send)
            return

        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, _capped(receive, limit), tracking_send)
        except BodyTooLarge:
            if not started:
                await self._too_large(send, limit)

    async def _too_large(self, send: Send, limit: int) -> None:
        await send_error(
            send, 413, "body_too_large", f"the request body is larger than {limit} bytes"
        )

    @staticmethod
    async def _reject(
        scope: Scope,
        send: Send,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": code})
            return
        await send_error(send, status, code, message, headers)


def _lone_surrogate_in(body: bytes) -> bool:
    try:
        return has_lone_surrogate(json.loads(body))
    except (ValueError, RecursionError):
        return False  # not valid JSON: the app answers 422 for that itself


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # disconnect: the app will see an empty body and the client is gone anyway
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _capped(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge
        return message

    return capped
