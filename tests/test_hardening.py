"""Issue #12, a service a hostile client cannot stall or read: bounded work, request limits, storage
faults and file permissions. Everything goes through the real app over HTTP."""

from __future__ import annotations

import os
import socket
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event

from server.api.guard import has_lone_surrogate
from server.config import Settings
from server.grading.service import GradingService
from server.services import Services
from server.storage.db import Database
from tests.conftest import token_for
from tests.support.servers import derived_services, serve_services

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "对同一个 prompt 采样一组回答，用组内奖励均值做 baseline，再除以标准差。"
QID = "grpo-advantage-baseline"
GAE_QID = "gae-intro"  # a question whose answer code runs against hidden tests in the sandbox
SLOW_GAE = """```python
import time

def compute_gae(rewards, values, dones, gamma, lam):
    time.sleep(60)
    return rewards
```"""


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_for(user)}"}


class HeldGrading:
    """The real grading service, except that every grade waits until the test lets it go."""

    def __init__(self, real: GradingService) -> None:
        self._real = real
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def grade(self, *args, **kwargs):
        self.entered.release()
        self.release.wait(timeout=120)
        return self._real.grade(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._real, name)


@pytest.fixture()
def held(services) -> Iterator[tuple[Services, HeldGrading]]:
    svc = derived_services(services, grading_workers=1, grading_queue_limit=2, grading_per_user=2)
    holder = HeldGrading(services.grading)
    svc.__dict__["grading"] = holder
    yield svc, holder
    holder.release.set()


def post_later(pool: ThreadPoolExecutor, url: str, user: str, answer: str = ANSWER, qid: str = QID):
    body = {"question_id": qid, "answer": answer, "grader": "rubric"}
    return pool.submit(httpx.post, f"{url}/api/grade", json=body, headers=auth(user), timeout=120)


def wait_until(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.05)


# ---------------------------------------------------------------- one client can stall everything


def test_healthz_answers_within_a_second_while_45_slow_coding_answers_are_queued(services):
    """The issue's responsiveness check: 45 coding answers whose code sleeps, in the sandbox."""
    svc = derived_services(
        services,
        grading_queue_limit=64,
        grading_per_user=64,
        sandbox_wall_seconds=3.0,
    )
    with serve_services(svc) as (url, app), ThreadPoolExecutor(45) as pool:
        futures = [post_later(pool, url, "alice", SLOW_GAE, GAE_QID) for _ in range(45)]
        wait_until(lambda: app.state.work.stats().in_system == 45)
        with httpx.Client(base_url=url, headers=auth("bob"), timeout=30) as c:
            t = time.monotonic()
            r = c.get("/healthz")
            elapsed = time.monotonic() - t
            assert r.status_code == 200 and r.json() == {"status": "ok"}
            assert elapsed < 1.0, f"/healthz took {elapsed:.2f} s behind the grading queue"
            # Search and question lookup do not wait behind grading either (no timing asserted).
            assert c.get("/api/questions/search", params={"q": "GAE"}).status_code == 200
            assert c.get(f"/api/questions/{QID}").status_code == 200
        assert app.state.work.stats().in_system > 40  # still queued: the check was under load
        app.state.work.close()  # what SIGTERM does: queued jobs end at once with 503
        codes = [f.result().status_code for f in futures]
    assert codes.count(503) >= 40
    assert set(codes) <= {200, 503}


def test_a_user_beyond_their_share_gets_429_and_a_full_queue_503(held):
    svc, holder = held
    with serve_services(svc) as (url, app), ThreadPoolExecutor(8) as pool:
        first = post_later(pool, url, "alice")
        assert holder.entered.acquire(timeout=30)  # the one worker is busy
        second = post_later(pool, url, "alice")
        wait_until(lambda: app.state.work.stats().in_system == 2)
        r = httpx.post(
            f"{url}/api/grade",
            json={"question_id": QID, "answer": ANSWER},
            headers=auth("alice"),
            timeout=30,
        )
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "too_many_requests"
        assert int(r.headers["Retry-After"]) >= 1
        # Another user still gets in, up to the queue limit (1 worker + 2 queued)...
        third = post_later(pool, url, "bob")
        wait_until(lambda: app.state.work.stats().in_system == 3)
        # ...and beyond it everyone gets 503 with Retry-After; nothing waits unbounded.
        r = httpx.post(
            f"{url}/api/sessions/whatever/answers",
            json={"answer": ANSWER},
            headers=auth("carol"),
            timeout=30,
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == "busy"
        assert int(r.headers["Retry-After"]) >= 1
        # Health does not wait for the held worker.
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        holder.release.set()
        assert [f.result().status_code for f in (first, second, third)] == [200, 200, 200]
    assert app.state.work.stats().in_system == 0


def test_sigterm_does_not_wait_for_the_queue(services, data_dir, tmp_path):
    """A real `sparring serve` process with a slow LLM: SIGTERM answers the queued requests with
    503 at once and the process exits, instead of grading the whole queue first."""
    from tests.support.scripted_llm import ScriptedLLM

    port = _free_port()
    with ScriptedLLM() as llm:
        llm.script(*[("slow", 20, "{}")] * 12)
        env = {
            **os.environ,
            "SPARRING_DATA_DIR": data_dir,
            "SPARRING_AUTH_TOKENS": "",
            "SPARRING_UI_ENABLED": "false",
            "SPARRING_LLM_MODEL": "openai/slow",
            "SPARRING_LLM_API_BASE": llm.base_url,
            "SPARRING_LLM_API_KEY": "test-key",
            "SPARRING_LLM_TIMEOUT_SECONDS": "25",
            "SPARRING_LLM_MAX_RETRIES": "0",
            "SPARRING_GRADING_WORKERS": "1",
        }
        proc = _start_server(port, env, tmp_path)
        url = f"http://127.0.0.1:{port}"
        try:
            with ThreadPoolExecutor(8) as pool:
                body = {"question_id": QID, "answer": ANSWER, "grader": "llm"}
                futures = [
                    pool.submit(httpx.post, f"{url}/api/grade", json=body, timeout=120)
                    for _ in range(8)
                ]
                wait_until(lambda: len(llm.requests) == 1)
                wait_until(
                    lambda: (
                        httpx.get(f"{url}/api/info", timeout=5).json()["grading_queue"]["in_system"]
                        == 8
                    )
                )
                proc.terminate()  # SIGTERM
                results = [f.result() for f in futures]
            # Draining would take 8 x 20 s; the hang guard below is far shorter than that.
            proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    codes = [r.status_code for r in results]
    assert codes.count(503) == 7, codes
    assert all(
        r.json()["error"]["code"] == "shutting_down" for r in results if r.status_code == 503
    )
    assert len(llm.requests) == 1  # the queued answers were never graded


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(port: int, env: dict[str, str], cwd: Path):
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        assert proc.poll() is None, "server exited during start-up"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("server did not start")


# ---------------------------------------------------------------------------- input and faults


def _raw_request(base_url: str, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send a request by hand (headers that promise more body than is ever sent)."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head.encode("latin-1") + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data


def test_a_500_mb_body_without_a_token_is_refused_before_it_is_read(base_url):
    head = (
        "POST /api/grade HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 500000000\r\n\r\n"
    )
    # Only the headers and 1 KB are ever sent: an answer proves nothing waited for the rest.
    status, data = _raw_request(base_url, head, b"{" + b" " * 1024)
    assert status == 401 and b'"unauthorized"' in data


def test_a_500_mb_body_with_a_token_is_refused_by_its_declared_length(base_url):
    head = (
        "POST /api/grade HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token_for('alice')}\r\nContent-Length: 500000000\r\n\r\n"
    )
    status, data = _raw_request(base_url, head, b"{" + b" " * 1024)
    assert status == 413 and b'"body_too_large"' in data


def test_a_streamed_body_over_the_limit_is_cut_off(alice):
    def chunks() -> Iterator[bytes]:
        yield b'{"question_id": "grpo-advantage-baseline", "answer": "'
        for _ in range(2048):  # 2 MB in 1 KB pieces, no Content-Length (chunked)
            yield b"x" * 1024
        yield b'"}'

    r = alice.post("/api/grade", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


def test_a_body_that_is_not_utf8_json_is_a_4xx_not_a_500(alice):
    r = alice.post(
        "/api/grade", content=b"\xff\xfe not json", headers={"content-type": "application/json"}
    )
    assert r.status_code in (400, 422) and r.json()["error"]["code"]


def test_a_lone_surrogate_is_422_and_the_connection_stays_usable(alice):
    raw = b'{"question_id": "grpo-advantage-baseline", "answer": "baseline \\ud800 mean"}'
    r = alice.post("/api/grade", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    assert "surrogate" in r.json()["error"]["message"]
    # The same keep-alive connection serves the next request.
    assert alice.get("/healthz").status_code == 200
    s = alice.post("/api/sessions", json={"mode": "practice", "num_questions": 1})
    sid = s.json()["id"]
    for bad in (b'{"answer": "\\udfff"}', b'{"answer": "ok", "\\ud83d": 1}'):
        r = alice.post(
            f"/api/sessions/{sid}/answers",
            content=bad,
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 422, r.text
    # A proper pair (an emoji written as an escape) is fine.
    r = alice.post(
        f"/api/sessions/{sid}/answers",
        content='{"answer": "组内均值 \\ud83d\\ude00"}'.encode(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200


def test_lone_surrogate_detection_walks_keys_and_nested_values():
    assert has_lone_surrogate({"a": ["ok", {"b": "\udc00"}]})
    assert has_lone_surrogate({"\ud800": 1})
    assert not has_lone_surrogate({"a": ["😀", 1, None, {"b": "中文"}]})


@pytest.fixture()
def own_database(services, tmp_path):
    """Services on a database file of their own, with a short lock wait."""
    svc = derived_services(
        services,
        database_url=f"sqlite:///{tmp_path / 'own.db'}",
        db_busy_timeout_seconds=0.5,
    )
    return svc, tmp_path / "own.db"


def _start(url: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/sessions",
        json={"mode": "practice", "num_questions": 1},
        headers=auth("alice"),
        timeout=60,
    )


def test_a_held_sqlite_write_lock_is_503_with_retry_after_then_recovers(own_database):
    svc, db_file = own_database
    with serve_services(svc) as (url, _):
        assert _start(url).status_code == 201
        holder = sqlite3.connect(db_file, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            r = _start(url)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "storage_busy"
            assert int(r.headers["Retry-After"]) >= 1
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert _start(url).status_code == 201


def test_a_read_only_database_is_503_and_the_pool_recovers_when_it_is_writable(own_database):
    svc, _ = own_database
    database: Database = svc.database

    def read_only(dbapi_conn, _record) -> None:
        dbapi_conn.execute("PRAGMA query_only=ON")  # as if the file had become read-only

    with serve_services(svc) as (url, _):
        assert _start(url).status_code == 201
        event.listen(database.engine, "connect", read_only)
        database.engine.dispose()
        try:
            r = _start(url)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "storage_unavailable"
            assert int(r.headers["Retry-After"]) >= 1
        finally:
            event.remove(database.engine, "connect", read_only)
        # The cause is gone: the pool must not keep the broken connections.
        assert _start(url).status_code == 201


# ------------------------------------------------------------------------------ file permissions


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_dir_and_database_files_are_private(services, alice):
    alice.post("/api/sessions", json={"mode": "practice", "num_questions": 1})  # a write: WAL
    data = services.settings.data_dir
    assert _mode(data) == 0o700
    db = data / "sparring.db"
    assert _mode(db) == 0o600
    for suffix in ("-wal", "-shm"):
        side = db.with_name(db.name + suffix)
        if side.exists():
            assert _mode(side) == 0o600, side


def test_existing_loose_files_are_tightened_at_start(services, tmp_path):
    data = tmp_path / "loose"
    data.mkdir(mode=0o755)
    for name in ("sparring.db", "sparring.db-wal"):
        (data / name).touch(mode=0o644)
        os.chmod(data / name, 0o644)
    os.chmod(data, 0o755)
    Database(Settings(data_dir=data))
    assert _mode(data) == 0o700
    assert _mode(data / "sparring.db") == 0o600 and _mode(data / "sparring.db-wal") == 0o600


def test_env_file_is_0600_and_ignored_by_git(services, tmp_path, monkeypatch):
    from server.api.app import create_app

    env = tmp_path / ".env"
    env.write_text("SPARRING_LLM_API_KEY=sk-secret\n")
    os.chmod(env, 0o644)
    monkeypatch.chdir(tmp_path)
    create_app(services.settings.model_copy(update={"ui_enabled": False}), services)
    assert _mode(env) == 0o600
    ignored = (ROOT / ".gitignore").read_text().split()
    assert ".env" in ignored
