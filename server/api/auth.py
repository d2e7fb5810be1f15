"""Bearer-token users, checked in front of every route (before any body is read).

Without configured tokens (the loopback default) everyone is the local user; that install only
answers requests whose `Host` is a loopback name, so a web page cannot reach it by DNS rebinding."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from fastapi import Request

from server.api.errors import ApiError
from server.config import LOOPBACK_HOSTS

LOCAL_USER = "local"
UNAUTHORIZED = "a valid 'Authorization: Bearer <token>' header is required"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class TokenTable:
    """Configured tokens, kept as digests so every comparison is constant-time and fixed-length."""

    users: dict[bytes, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tokens: dict[str, str]) -> TokenTable:
        return cls({_digest(t): u for t, u in tokens.items()})

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def user_for(self, header: str | None) -> str | None:
        """The user of a well-formed `Bearer <token>` header, or None for anything else."""
        if not header or not header.isascii():  # a non-ASCII header can never be a token
            return None
        scheme, _, supplied = header.strip().partition(" ")
        supplied = supplied.strip()
        if scheme.lower() != "bearer" or not supplied or " " in supplied:
            return None
        digest = _digest(supplied)
        found = None
        for known, user in self.users.items():  # no early exit: same work for every token
            if hmac.compare_digest(known, digest):
                found = user
        return found


@dataclass
class FailedAttempts:
    """Failed tokens per client address in a sliding window; beyond the limit the client waits.

    Bounded: at most `max_clients` addresses are tracked, the oldest forgotten first."""

    limit: int
    window: float
    max_clients: int = 10_000
    _seen: OrderedDict[str, list[float]] = field(default_factory=OrderedDict)

    def _recent(self, client: str, now: float) -> list[float]:
        times = [t for t in self._seen.get(client, []) if now - t < self.window]
        if times:
            self._seen[client] = times
        else:
            self._seen.pop(client, None)
        return times

    def retry_after(self, client: str, now: float | None = None) -> float:
        """Seconds this client must wait before its next attempt, 0 when it may try."""
        now = time.monotonic() if now is None else now
        times = self._recent(client, now)
        if len(times) < self.limit:
            return 0.0
        return max(1.0, self.window - (now - times[-self.limit]))

    def record(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        times = self._recent(client, now)
        times.append(now)
        self._seen[client] = times
        self._seen.move_to_end(client)
        while len(self._seen) > self.max_clients:
            self._seen.popitem(last=False)


def host_name(host_header: str) -> str:
    """`example.com:8000` -> `example.com`; `[::1]:8000` -> `[::1]`; lower-case."""
    host = host_header.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end > 0 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback_host(host_header: str | None, extra: frozenset[str] = frozenset()) -> bool:
    if not host_header:
        return False
    name = host_name(host_header)
    return name in LOOPBACK_HOSTS or name in extra


async def current_user(request: Request) -> str:
    """The user the guard middleware authenticated; checked again here if it did not run.

    Async on purpose: a sync dependency would wait for a thread of the shared pool."""
    user = getattr(request.state, "user", None)
    if user is not None:
        return user
    tokens: TokenTable = request.app.state.tokens
    if not tokens.enabled:
        return LOCAL_USER
    found = tokens.user_for(request.headers.get("authorization"))
    if found is None:
        raise ApiError(401, "unauthorized", UNAUTHORIZED, {"WWW-Authenticate": "Bearer"})
    return found
