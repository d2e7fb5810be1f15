"""Polish from issue #15, items 8–10: start-up and shutdown of `sparring serve`, `/` sends a browser to
the UI, bank text rendered as Markdown (line breaks, code, subscripts), evidence quotes that cannot
break a card, a report table that keeps full text, interviewer lines that read as questions, and
the report's follow-up count matching the chat."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from server.config import PROJECT_ROOT
from tests.conftest import client_for, free_port

SPARRING = str(Path(sys.executable).with_name("sparring"))


# ----- 9. start-up and shell -------------------------------------------------------------------


def test_root_sends_a_browser_to_the_ui_and_unknown_api_paths_stay_json(base_url):
    r = httpx.get(f"{base_url}/", follow_redirects=False, timeout=30)
    assert r.status_code in (302, 307) and r.headers["location"] == "/ui/"
    page = httpx.get(f"{base_url}/", follow_redirects=True, timeout=60)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    with client_for(base_url, "alice") as c:
        missing = c.get("/api/nothing-here")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith(
        "application/json"
    )
    assert httpx.get(f"{base_url}/nothing-here", timeout=30).status_code == 404


class Output:
    """A subprocess's merged output, read on a thread, with a way to wait for a line."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> int:
        """Index of the first line containing `text`; fails after `timeout` seconds."""
        end = time.monotonic() + timeout
        with self._changed:
            while True:
                for i, line in enumerate(self.lines):
                    if text in line:
                        return i
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {text!r} in the output:\n" + "\n".join(self.lines))
                self._changed.wait(left)


@pytest.fixture()
def serve_data_dir(services, tmp_path) -> Path:
    """A data dir holding a copy of the session's ready index, so `serve` embeds nothing."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(services.settings.chroma_path, data / "chroma")
    return data


def test_serve_announces_when_listening_and_ctrl_c_stops_it_with_a_tab_open(serve_data_dir):
    port = free_port()
    env = {
        **os.environ,
        "SPARRING_DATA_DIR": str(serve_data_dir),
        "SPARRING_AUTH_TOKENS": "",
        "SPARRING_LLM_MODEL": "",
        "SPARRING_SHUTDOWN_GRACE_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }
    proc = subprocess.Popen(
        [SPARRING, "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = Output(proc)
    url = f"http://127.0.0.1:{port}"
    try:
        out.wait_for("Index ready", timeout=300)
        out.wait_for("Sparring on", timeout=300)
        # The line is printed only once the socket accepts connections and the app has started:
        # the very next request is answered, with no retry.
        assert httpx.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
        assert httpx.get(f"{url}/", timeout=30).status_code in (302, 307)
        # A browser tab holds streams open (Gradio's heartbeat and event streams); an upload still
        # in flight holds its connection the same way: uvicorn waits for both before it stops.
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as upload,
            httpx.Client(timeout=30) as browser,
            browser.stream("GET", f"{url}/ui/gradio_api/heartbeat/tab-1") as tab,
        ):
            assert tab.status_code == 200 and "ALIVE" in next(tab.iter_text())
            upload.sendall(
                b"POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                b'application/json\r\nContent-Length: 100000\r\n\r\n{"mode": '
            )
            time.sleep(0.5)  # let the server start reading the body
            proc.send_signal(signal.SIGINT)  # Ctrl+C
            # The test's bound, not a speed claim: without a graceful-shutdown timeout the
            # process waits for these connections forever.
            code = proc.wait(timeout=90)
        out.wait_for("Sparring stopped.", timeout=10)
        assert code == 0, "\n".join(out.lines)
        assert any(line.startswith("Stopping") for line in out.lines)
        assert not any("Traceback" in line for line in out.lines), "\n".join(out.lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
