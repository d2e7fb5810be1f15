"""Shared benchmark plumbing: a real server on loopback, percentiles."""

from __future__ import annotations

import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.api.app import create_app  # noqa: E402
from server.services import Services  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(name: str, ms: list[float], target_p95: float | None) -> str:
    p50, p95 = percentile(ms, 50), percentile(ms, 95)
    line = (
        f"{name}: n={len(ms)} p50={p50:.1f} ms p95={p95:.1f} ms mean={statistics.mean(ms):.1f} ms "
        f"max={max(ms):.1f} ms"
    )
    if target_p95 is None:
        return line
    return (
        f"{line} | target p95 <= {target_p95:.0f} ms: "
        f"{'PASS' if p95 <= target_p95 else 'FAIL'} (p95/target = {p95 / target_p95:.2f})"
    )


@contextmanager
def serve(services: Services) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(services.settings, services),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
