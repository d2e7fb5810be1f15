"""Warm start: seconds from `sparring serve` (what `make run` starts) to /healthz answering 200 and
to the UI at /ui/ answering 200, with the index already built; p50/p95 over N starts.

    .venv/bin/python benchmarks/startup.py [--runs 5] [--data-dir DIR]

Without --data-dir a fresh temporary one is used and the first start builds the index (a cold
start, reported apart, not counted). Output is redirected to a pipe, as a service manager does, and
every line the server prints is time-stamped, so the report says where the seconds go. Each start
also reports the server's CPU seconds (user + sys of the process, all its threads) at both moments:
on a machine shared with busy processes wall time mostly measures the wait for a core, CPU time
what start-up costs. The load average (`uptime`) is printed before and after every start.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0


@dataclass
class Start:
    healthz: float = 0.0  # seconds from spawn to the first 200 from /healthz
    healthz_cpu: float = 0.0  # the server's user + sys CPU seconds at that moment
    ui: float = 0.0  # seconds to the first 200 from /ui/ (503 "loading" page before)
    ui_cpu: float = 0.0
    lines: list[tuple[float, str]] = field(default_factory=list)  # (seconds, server output line)
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """user + sys CPU seconds the process (all its threads) has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def one_start(data_dir: str, timeout: float) -> Start:
    port = free_port()
    env = {
        **os.environ,
        "SPARRING_DATA_DIR": data_dir,
        "SPARRING_LLM_MODEL": "",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    result = Start()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.Popen(
        # `sparring serve` as `make run` starts it, through this checkout's code (cwd first).
        [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            result.lines.append((time.perf_counter() - started, line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=2) as client:
            for path in ("/healthz", "/ui/"):
                while True:
                    if proc.poll() is not None:
                        tail = "\n".join(line for _, line in result.lines[-20:])
                        raise RuntimeError(f"the server exited:\n{tail}")
                    try:
                        if client.get(base + path).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.perf_counter() - started > timeout:
                        raise RuntimeError(f"no 200 from {path} within {timeout:.0f} s")
                    time.sleep(0.05)
                seconds, cpu = time.perf_counter() - started, cpu_seconds(proc.pid)
                if path == "/healthz":
                    result.healthz, result.healthz_cpu = seconds, cpu
                else:
                    result.ui, result.ui_cpu = seconds, cpu
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)
    result.load = (load_before, os.getloadavg()[0])
    return result


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def describe(name: str, values: list[float]) -> str:
    return (
        f"{name}: p50 {percentile(values, 50):.1f} s, p95 {percentile(values, 95):.1f} s "
        f"(min {min(values):.1f}, max {max(values):.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="warm starts to time")
    parser.add_argument("--data-dir", default="", help="a built index; default: build one first")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    print(f"before: {uptime()} (cores: {os.cpu_count()})")
    data_dir = args.data_dir
    if not data_dir:
        data_dir = tempfile.mkdtemp(prefix="sparring-start-")
        first = one_start(data_dir, args.timeout)
        print(f"first start (builds the index): {first.healthz:.1f} s to /healthz")
    warm: list[Start] = []
    for i in range(args.runs):
        run = one_start(data_dir, args.timeout)
        warm.append(run)
        print(
            f"warm start {i + 1}: /healthz {run.healthz:.1f} s (CPU {run.healthz_cpu:.1f} s), "
            f"UI {run.ui:.1f} s (CPU {run.ui_cpu:.1f} s), load {run.load[0]:.1f} → {run.load[1]:.1f}"
        )
    print("server output of the last warm start (seconds since spawn):")
    for seconds, line in warm[-1].lines:
        print(f"  {seconds:6.1f}  {line}")
    print(describe("to /healthz", [r.healthz for r in warm]))
    print(describe("CPU at /healthz", [r.healthz_cpu for r in warm]))
    print(describe("to the UI", [r.ui for r in warm]))
    print(describe("CPU at the UI", [r.ui_cpu for r in warm]))
    print(f"target: /healthz < {TARGET_SECONDS:.0f} s on a quiet 2-core machine")
    print(f"after: {uptime()}")


if __name__ == "__main__":
    main()
