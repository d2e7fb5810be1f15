"""Issue #12, auth that fails closed: token configuration, malformed headers, failed-token limits,
the Host check of the no-auth loopback install and the UI's loopback-only rule; over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from server.api.app import create_app
from server.api.auth import FailedAttempts, TokenTable, host_name, is_loopback_host
from server.config import ConfigError, Settings
from tests.conftest import token_for
from tests.support.servers import derived_services, serve_services

ROOT = Path(__file__).resolve().parents[1]
GOOD = token_for("alice")


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (" , ", "entry 1 is blank"),
        (",", "entry 1 is blank"),
        (":alice", "must be at least 16"),
        ("short-token:alice", "must be at least 16"),
        ("a-long-enough-token-0001", "has no user"),
        ("a-long-enough-token-0001:", "has no user"),
        ("a-long-enough-token-0001:alice,", "entry 2 is blank"),
        ("a-long-enough-token-0001:alice,a-long-enough-token-0001:bob", "repeats a token"),
        ("a-long-enough-token-0001:al ice", "invalid user"),
        ("a-long-enough-tökén-0001:alice", "visible ASCII"),
    ],
)
def test_weak_or_malformed_token_entries_stop_the_start(raw, says):
    with pytest.raises(ValidationError, match=says):
        Settings(auth_tokens=raw)


def test_real_tokens_are_accepted():
    s = Settings(auth_tokens=f"{GOOD}:alice, {token_for('bob')}:bob")
    assert s.tokens == {GOOD: "alice", token_for("bob"): "bob"}


def test_a_short_ui_token_stops_the_start():
    with pytest.raises(ValidationError, match="SPARRING_UI_TOKEN"):
        Settings(ui_token="frank")


def test_no_non_loopback_bind_without_a_real_token(services):
    for host in ("0.0.0.0", "::", "192.0.2.2"):
        with pytest.raises(ConfigError, match="refusing to serve"):
            create_app(services.settings.model_copy(update={"host": host, "auth_tokens": ""}))


@pytest.mark.parametrize("tokens", [" , ", ":alice"])
def test_sparring_serve_refuses_blank_or_userless_tokens_off_loopback(tokens):
    env = {**os.environ, "SPARRING_AUTH_TOKENS": tokens, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "SPARRING_AUTH_TOKENS" in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def lenient(services):
    """An app of its own (its failure counter too), lenient enough for many bad headers."""
    svc = derived_services(services, auth_max_failures=1000)
    with serve_services(svc) as (url, _):
        yield url


def _raw_get(url: str, path: str, headers: bytes) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
        data = b""
        while b"}" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), data


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "bearer    ",
        "Basic " + GOOD,
        GOOD,
        f"Bearer {GOOD} {GOOD}",
        f"Bearer {GOOD[:-1]}",
        f"Token {GOOD}",
    ],
)
def test_malformed_or_wrong_authorization_is_401_json(lenient, header):
    # Sent by hand: an HTTP client library refuses some of these headers itself.
    raw = b"" if header is None else b"Authorization: " + header.encode() + b"\r\n"
    status, data = _raw_get(lenient, "/api/questions", raw)
    assert status == 401 and b'"unauthorized"' in data
    assert b"www-authenticate: Bearer" in data.lower().replace(b"bearer", b"Bearer")


@pytest.mark.parametrize(
    "raw",
    [
        "Authorization: Bearer tökén-0123456789abcdef\r\n".encode(),  # UTF-8 bytes
        b"Authorization: Bearer \xff\xfe\xfd-0123456789abcdef\r\n",  # not even UTF-8
        "Authorization: Bearer 令牌令牌令牌令牌令牌令牌\r\n".encode(),
    ],
)
def test_a_non_ascii_bearer_is_401_not_500(lenient, raw):
    status, data = _raw_get(lenient, "/api/questions", raw)
    assert status == 401 and b'"unauthorized"' in data


def test_the_right_token_still_works(lenient):
    r = httpx.get(f"{lenient}/api/questions", headers={"Authorization": f"Bearer {GOOD}"})
    assert r.status_code == 200


def test_failed_tokens_are_rate_limited_per_client(services):
    svc = derived_services(services, auth_max_failures=3, auth_failure_window_seconds=600)
    with serve_services(svc) as (url, _):
        for _ in range(3):
            r = httpx.get(f"{url}/api/questions", headers={"Authorization": "Bearer guess"})
            assert r.status_code == 401
        r = httpx.get(f"{url}/api/questions", headers={"Authorization": "Bearer guess"})
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "too_many_failed_logins"
        assert int(r.headers["Retry-After"]) >= 1
        # While locked out even the right token gets 429: a guess must not be testable.
        ok = httpx.get(f"{url}/api/questions", headers={"Authorization": f"Bearer {GOOD}"})
        assert ok.status_code == 429
        assert httpx.get(f"{url}/healthz").status_code == 200  # health is not behind auth


def test_the_failure_window_slides_and_the_table_is_bounded():
    f = FailedAttempts(limit=2, window=10.0, max_clients=3)
    f.record("a", now=0)
    f.record("a", now=1)
    assert f.retry_after("a", now=2) == pytest.approx(8.0)
    assert f.retry_after("a", now=11.5) == 0.0
    for n, client in enumerate("bcde"):
        f.record(client, now=12 + n)
    assert len(f._seen) == 3


def test_token_table_never_matches_malformed_input():
    table = TokenTable.of({GOOD: "alice"})
    assert table.user_for(f"Bearer {GOOD}") == "alice"
    assert table.user_for(f"bearer   {GOOD}  ") == "alice"
    for bad in (None, "", "Bearer", f"Bearer\t{GOOD}", "Bearer tökén", f"Bearer {GOOD}x"):
        assert table.user_for(bad) is None


# ---------------------------------------------------------------- Host check (DNS rebinding)


@pytest.fixture(scope="module")
def no_auth(services):
    svc = derived_services(services, auth_tokens="", allowed_hosts="sparring.lan")
    with serve_services(svc) as (url, _):
        yield url


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:8000", "localhost", "LOCALHOST:1", "[::1]:8000", "sparring.lan"],
)
def test_no_auth_install_answers_loopback_host_names(no_auth, host):
    r = httpx.get(f"{no_auth}/api/questions", headers={"Host": host}, params={"limit": 1})
    assert r.status_code == 200


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "192.0.2.2:8000"]
)
def test_no_auth_install_refuses_other_host_names(no_auth, host):
    r = httpx.get(f"{no_auth}/api/questions", headers={"Host": host})
    assert r.status_code == 421 and r.json()["error"]["code"] == "misdirected_request"
    # A rebinding page would POST answers or read sessions: refused the same way.
    r = httpx.post(
        f"{no_auth}/api/sessions", json={"mode": "practice"}, headers={"Host": host}, timeout=30
    )
    assert r.status_code == 421


def test_host_names_are_parsed_with_ports_and_brackets():
    assert host_name("[::1]:8000") == "[::1]" and host_name("LocalHost:80") == "localhost"
    assert is_loopback_host("[::1]") and not is_loopback_host("[::2]:80")
    assert not is_loopback_host(None) and not is_loopback_host("")


# --------------------------------------------------------------------------- the UI with a token


def _public_address() -> str | None:
    """An address of this machine that is not loopback, to reach the server from "outside"."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent for UDP connect
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_ui_with_a_token_serves_loopback_browsers_only(services):
    public = _public_address()
    svc = derived_services(services, host="0.0.0.0")
    with serve_services(svc, ui_enabled=True, ui_token=token_for("frank")) as (url, _):
        port = url.rsplit(":", 1)[1]
        assert httpx.get(f"{url}/ui/", timeout=30).status_code == 200
        for path in ("/ui/", "/ui/gradio_api/info", "/ui/config"):
            r = httpx.get(f"{url}{path}", headers={"Host": "evil.example"}, timeout=30)
            assert r.status_code == 403 and r.json()["error"]["code"] == "ui_local_only"
        if public is None:
            pytest.skip("no non-loopback address to test a remote visitor from")
        for path in ("/ui/", "/ui/gradio_api/info"):
            r = httpx.get(f"http://{public}:{port}{path}", timeout=30)
            assert r.status_code == 403, (path, r.status_code)
        # The API itself answers remote clients that bring their own token.
        r = httpx.get(
            f"http://{public}:{port}/api/questions",
            headers={"Authorization": f"Bearer {GOOD}"},
            params={"limit": 1},
            timeout=30,
        )
        assert r.status_code == 200
