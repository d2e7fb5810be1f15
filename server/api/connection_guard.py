"""Connection-level limits and the one uvicorn configuration every way of serving uses.

uvicorn closes idle keep-alive connections but puts no bound on how long a client may take to send
a request: a request line and one header, never finished, holds a connection (and its file
descriptor) forever, and thousands of them starve the server (slowloris). This module adds, to
uvicorn's own HTTP protocol classes:

- a header deadline: a request's headers must be complete `header_timeout` seconds after the
  connection opened (or after the previous response, on a kept-alive connection), else 408 and
  close;
- a body idle limit: while a request body is being received, a pause longer than `body_idle`
  seconds closes the connection (a pause because the app is not reading does not count);
- a cap on open connections per client address (a trusted reverse proxy is exempt: it carries
  many clients and enforces its own limits).

It also decides which peers may set X-Forwarded-For (`SPARRING_FORWARDED_ALLOW_IPS`, empty by
default), instead of uvicorn's default of trusting 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from server.config import Settings

try:  # the protocol uvicorn's "auto" picks: httptools when installed (uvicorn[standard])
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def _raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete HTTP/1.1 error response in the API's error shape, written before closing."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float = 10.0
    body_idle: float = 30.0
    max_per_client: int = 64  # 0 = no cap
    trusted_proxies: tuple[str, ...] = ()
    _networks: tuple[Any, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        nets = tuple(ipaddress.ip_network(p) for p in self.trusted_proxies if p != "*")
        object.__setattr__(self, "_networks", nets)

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            header_timeout=settings.header_timeout_seconds,
            body_idle=settings.body_idle_timeout_seconds,
            max_per_client=settings.max_connections_per_client,
            trusted_proxies=tuple(settings.trusted_proxies),
        )

    def is_trusted_proxy(self, host: str) -> bool:
        if "*" in self.trusted_proxies:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in net for net in self._networks)


class GuardedConfig(uvicorn.Config):
    """uvicorn's Config plus the connection limits its protocol instances read. A module-level
    class, so `--workers N` can hand it to the worker processes (they are spawned, not forked)."""

    def __init__(self, *args: Any, connection_limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection_limits = connection_limits


class _Guard:
    """Mixed in before one of uvicorn's HTTP protocol classes (one instance per connection)."""

    # Provided by the uvicorn protocol class this is mixed into.
    config: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: set[Any]
    client: tuple[str, int] | None
    cycle: Any
    flow: Any

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[misc]
        self._limits: ConnectionLimits = getattr(self.config, "connection_limits", None) or (
            ConnectionLimits()
        )
        self._timer: asyncio.TimerHandle | None = None
        self._phase = "headers"
        self._cycle_before: Any = self.cycle
        self._last_data = self.loop.time()
        host = self.client[0] if self.client else None
        if host and self._over_cap(host):
            transport.write(
                _raw_error(
                    429,
                    "Too Many Requests",
                    "too_many_connections",
                    f"more than {self._limits.max_per_client} open connections from this "
                    "address; close some and retry",
                )
            )
            transport.close()
            return
        self._expect_headers()

    def _over_cap(self, host: str) -> bool:
        cap = self._limits.max_per_client
        if not cap or len(self.connections) <= cap or self._limits.is_trusted_proxy(host):
            return False
        same = sum(1 for c in self.connections if (getattr(c, "client", None) or ("",))[0] == host)
        return same > cap  # this connection is already in the set

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expect_headers(self) -> None:
        """The next request's headers are due within the header timeout from now."""
        self._cancel()
        self._phase = "headers"
        self._cycle_before = self.cycle
        self._timer = self.loop.call_later(self._limits.header_timeout, self._headers_late)

    def _busy(self) -> bool:
        """A request is being handled (its response is not complete)."""
        return self.cycle is not None and not self.cycle.response_complete

    def _headers_late(self) -> None:
        self._timer = None
        if self._phase != "headers" or self.transport.is_closing():
            return
        if self.cycle is not self._cycle_before or self._busy():
            return  # a (pipelined) request is in progress; its response re-arms the deadline
        self.transport.write(
            _raw_error(
                408,
                "Request Timeout",
                "request_timeout",
                f"the request headers did not arrive within {self._limits.header_timeout:g} s",
            )
        )
        self.transport.close()

    def _body_idle(self) -> None:
        self._timer = None
        if self._phase != "body" or self.transport.is_closing():
            return
        if not self.cycle.more_body or self.cycle.response_complete:
            return
        idle = self.loop.time() - self._last_data
        if idle < self._limits.body_idle or self.flow.read_paused:
            # Data came meanwhile, or the app has not read what it has (not the client's fault).
            wait = max(self._limits.body_idle - idle, 0.05)
            self._timer = self.loop.call_later(wait, self._body_idle)
            return
        self.transport.close()  # the app sees a disconnect; a response may have begun already

    def data_received(self, data: bytes) -> None:
        self._last_data = self.loop.time()
        super().data_received(data)  # type: ignore[misc]
        if self.transport.is_closing():
            self._cancel()
            return
        if self._phase == "headers" and self.cycle is not self._cycle_before:
            self._cancel()  # headers complete
            self._phase = "body"
        if self._phase == "body":
            if self.cycle.more_body and not self.cycle.response_complete:
                if self._timer is None:
                    self._timer = self.loop.call_later(self._limits.body_idle, self._body_idle)
            else:
                self._cancel()
                self._phase = "app"

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():
            self._expect_headers()  # a kept-alive connection: the next request's headers are due

    def handle_websocket_upgrade(self, *args: Any) -> None:
        self._cancel()  # the connection now belongs to the WebSocket protocol
        self._phase = "upgraded"
        super().handle_websocket_upgrade(*args)  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)  # type: ignore[misc]


class GuardedH11Protocol(_Guard, H11Protocol):
    pass


if HttpToolsProtocol is not None:

    class GuardedHttpToolsProtocol(_Guard, HttpToolsProtocol):
        pass

    GuardedProtocol: type[asyncio.Protocol] = GuardedHttpToolsProtocol
else:  # pragma: no cover
    GuardedProtocol = GuardedH11Protocol


def server_config(app: Any, settings: Settings, **overrides: Any) -> GuardedConfig:
    """The uvicorn configuration of `sparring serve` (one process or `--workers N`) and of the
    tests that exercise it: forwarded headers only from the configured proxies, the connection
    limits above, and a worker health check that tolerates a busy machine."""
    proxies = settings.trusted_proxies
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": "warning",
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds,
        "http": GuardedProtocol,
        # uvicorn's default trusts X-Forwarded-For from 127.0.0.1 (FORWARDED_ALLOW_IPS): any
        # local process or loopback proxy could then pick the address the limits key on.
        "proxy_headers": bool(proxies),
        "forwarded_allow_ips": ",".join(proxies) if proxies else "",
        "timeout_worker_healthcheck": settings.worker_healthcheck_seconds,
        **overrides,
    }
    return GuardedConfig(app, connection_limits=ConnectionLimits.of(settings), **options)
