"""Real database and vector engines for the scale-out tests: PostgreSQL from the `pgserver` wheel
(a real server, on a Unix socket in a temp dir) and `chroma run` on a loopback port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

# Ceilings for the engines' start-up on a loaded machine (load average 10 on 2 cores): waits are
# condition-based, these only stop a start that will never succeed.
PG_START_CEILING = 600.0
CHROMA_START_CEILING = 600.0


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start PostgreSQL in a fresh temp dir; yields a psycopg SQLAlchemy URL (Unix socket, no TCP
    port); stops it and removes its files afterwards."""
    with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set" under CI
        warnings.simplefilter("ignore")
        import pgserver  # dev extra: a pip-installed PostgreSQL (initdb, postgres, pg_ctl)
        import pgserver.postgres_server as pg_module

    # pgserver gives `pg_ctl -w start` a fixed 10 s, which a busy CI machine exceeds; pg_ctl
    # itself waits for the server to be ready, so give it a generous ceiling instead.
    pg_ctl = pg_module.pg_ctl
    if not getattr(pg_ctl, "generous", False):

        def patient_pg_ctl(args: list[str], **kwargs: object) -> str:
            if "timeout" in kwargs:
                kwargs["timeout"] = max(float(kwargs["timeout"]), PG_START_CEILING)  # type: ignore[arg-type]
                if "-w" in args and "-t" not in args:
                    args = ["-t", str(int(PG_START_CEILING)), *args]
            return pg_ctl(args, **kwargs)

        patient_pg_ctl.generous = True  # type: ignore[attr-defined]
        pg_module.pg_ctl = patient_pg_ctl

    # Its own dir under /tmp, not pytest's: as root, pgserver runs postgres as a `pgserver` user
    # that must traverse every parent, and pytest keeps its tree private (0700).
    base = Path(tempfile.mkdtemp(prefix="sparring-pg-"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(str(base / "pgdata"), cleanup_mode="stop")
    try:
        yield server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def chroma_binary() -> str:
    found = Path(sys.executable).with_name("chroma")
    return str(found) if found.exists() else (shutil.which("chroma") or "chroma")


@contextmanager
def chroma_server(path: Path, port: int) -> Iterator[str]:
    """`chroma run` (ships with chromadb) on 127.0.0.1:`port`; yields its URL."""
    log = open(path.parent / f"chroma-{port}.log", "wb")  # noqa: SIM115 (closed below)
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    proc = subprocess.Popen(
        [chroma_binary(), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + CHROMA_START_CEILING
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"chroma run exited ({proc.returncode}); see {log.name}")
            try:
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError("chroma run did not start")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
