"""Warm start: seconds from `sparring serve` to the first 200 from /healthz, with the index built.

    .venv/bin/python benchmarks/warm_start.py [--runs 3] [--data-dir DIR]

The first run against a fresh data dir builds the index (a cold start, reported apart); every
later run is warm. Output is redirected to a file, as a service manager does, so the plain
progress lines are what it prints. Each run also reports the child's CPU seconds (user + sys):
on a busy machine wall time mostly measures the wait for a core, CPU time what start-up costs.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SPARRING = ROOT / ".venv" / "bin" / "sparring"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_start(data_dir: str, log: Path, timeout: float) -> tuple[float, float, str]:
    """(seconds to /healthz, child CPU seconds until then, the server's output)."""
    port = free_port()
    env = {
        **os.environ,
        "SPARRING_DATA_DIR": data_dir,
        "SPARRING_LLM_MODEL": "",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(SPARRING), "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.perf_counter() - started > timeout:
                    raise RuntimeError(f"no /healthz within {timeout:.0f} s")
                time.sleep(0.1)
            seconds = time.perf_counter() - started
            cpu = _cpu_of(proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return seconds, cpu, log.read_text()


def _cpu_of(pid: int) -> float:
    """user + sys CPU seconds the server process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="warm starts to time")
    parser.add_argument("--data-dir", default="", help="default: a fresh temporary directory")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="sparring-warm-")
    log = Path(data_dir) / "serve.log"
    print(f"load average before: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})")
    seconds, cpu, output = one_start(data_dir, log, args.timeout)
    print(
        f"first start (builds the index if the data dir is new): {seconds:.1f} s, CPU {cpu:.1f} s"
    )
    warm = []
    for i in range(args.runs):
        seconds, cpu, output = one_start(data_dir, log, args.timeout)
        warm.append(seconds)
        print(f"warm start {i + 1}: {seconds:.1f} s to /healthz, CPU {cpu:.1f} s")
    print("server output of the last warm start:")
    print("  " + "\n  ".join(output.strip().splitlines()[-12:]))
    if warm:
        print(f"warm start: best {min(warm):.1f} s, worst {max(warm):.1f} s (target < 10 s)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    sys.exit(0)


if __name__ == "__main__":
    main()
