"""Statelessness: a restarted server and two servers on one database continue the same interview."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

# A first request may load the embedding model (imports are lazy): generous on a loaded CI machine.
TIMEOUT = 180
ANSWER = "对同一个 prompt 采样一组回答，用组内奖励均值做 baseline，再除以标准差。"


class ServerProcess:
    def __init__(self, data_dir: str, port: int) -> None:
        env = {**os.environ, "SPARRING_DATA_DIR": data_dir, "SPARRING_AUTH_TOKENS": ""}
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--port", str(port)],
            cwd=Path(__file__).resolve().parents[1],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited during start-up")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        self.kill()
        raise RuntimeError("server did not start")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture()
def shared_data_dir(data_dir, services) -> str:
    # The session's data dir already holds the index, so these servers embed nothing at start.
    return data_dir


def test_kill_and_restart_mid_interview(shared_data_dir):
    port = free_port()
    server = ServerProcess(shared_data_dir, port)
    try:
        s = httpx.post(
            f"{server.url}/api/sessions",
            json={"mode": "practice", "num_questions": 2, "seed": 3},
            timeout=TIMEOUT,
        ).json()
        first = httpx.post(
            f"{server.url}/api/sessions/{s['id']}/answers", json={"answer": ANSWER}, timeout=TIMEOUT
        )
        assert first.status_code == 200
    finally:
        server.kill()
    server = ServerProcess(shared_data_dir, port)
    try:
        state = httpx.get(f"{server.url}/api/sessions/{s['id']}", timeout=TIMEOUT).json()
        assert state["status"] == "active"
        assert [t["kind"] for t in state["turns"]][:2] == ["question", "answer"]
        nxt = httpx.post(f"{server.url}/api/sessions/{s['id']}/skip", timeout=TIMEOUT)
        assert nxt.status_code == 200
    finally:
        server.kill()


def test_two_servers_serve_alternate_turns(shared_data_dir):
    a = ServerProcess(shared_data_dir, free_port())
    b = ServerProcess(shared_data_dir, free_port())
    try:
        s = httpx.post(
            f"{a.url}/api/sessions",
            json={"mode": "practice", "num_questions": 3, "seed": 5},
            timeout=TIMEOUT,
        ).json()
        kinds = []
        for n in range(6):
            server = (a, b)[n % 2]
            r = httpx.post(
                f"{server.url}/api/sessions/{s['id']}/answers",
                json={"answer": f"第{n}次回答：{ANSWER}"},
                timeout=TIMEOUT,
            )
            assert r.status_code == 200, r.text
            kinds.append(r.json()["next"]["kind"])
            if kinds[-1] == "end":
                break
        state_a = httpx.get(f"{a.url}/api/sessions/{s['id']}", timeout=TIMEOUT).json()
        state_b = httpx.get(f"{b.url}/api/sessions/{s['id']}", timeout=TIMEOUT).json()
        assert state_a == state_b
        answers = [t["text"] for t in state_a["turns"] if t["kind"] == "answer"]
        assert answers == [f"第{n}次回答：{ANSWER}" for n in range(len(kinds))]
    finally:
        a.kill()
        b.kill()
