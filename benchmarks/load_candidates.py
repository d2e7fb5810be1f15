"""Capacity: simulated candidates against `sparring serve --workers N` on the scale-out topology
(PostgreSQL from pgserver, `chroma run`), for several N in one run.

For each N: one candidate alone (the service time of an answer), then candidates answering with
no think time (saturation: throughput per core), then candidates who think 30–120 s between
answers (scaled by --think-scale for short runs; a scaled run emulates candidates / scale real
candidates, since the load is their arrival rate). Reported: p50/p95 answer latency, answers/s
and per core, 429/503 counts, errors, and where the time goes (CPU seconds per answer in the API
workers, Chroma and PostgreSQL, versus time spent waiting).

Smoke run (about a minute of load per N, plus start-up):
  .venv/bin/python benchmarks/load_candidates.py --workers 1,2 --duration 10 \
      --saturate 8 --think 16,32 --think-scale 0.05
The real measurement (the issue's: think time at full length, minutes per step):
  .venv/bin/python benchmarks/load_candidates.py --workers 1,2 --duration 180 \
      --saturate 50 --think 50,100,200,400 --think-scale 0.1
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import ROOT, percentile

from tests.conftest import free_port
from tests.support.engines import chroma_server, postgres_server

ANSWER = (
    "GRPO 对同一个 prompt 采样一组回答，用组内奖励均值做 baseline，再除以标准差得到优势，"
    "不需要 critic；PPO 用 clip 限制新旧策略比值，KL 惩罚约束与参考模型的偏离。"
)
TICK = os.sysconf("SC_CLK_TCK")
TARGET_P95_S = 2.0


# ------------------------------------------------------------------ CPU accounting from /proc


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on


def cpu_seconds(match) -> float:
    """utime+stime of the live processes for which `match(pid, fields)` holds."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) and match(int(entry), fields):
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def in_group(pgid: int):
    return lambda _pid, f: int(f[2]) == pgid  # field 5: process group


def child_of_or_is(root: int):
    return lambda pid, f: pid == root or int(f[1]) == root  # field 4: parent pid


# ------------------------------------------------------------------ the candidates


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)  # seconds, answers that got 200
    codes: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, code: int, seconds: float) -> None:
        with self.lock:
            self.codes[code] += 1
            if code == 200:
                self.latencies.append(seconds)


def candidate(url: str, n: int, until: float, think: tuple[float, float], tally: Tally) -> None:
    rng = random.Random(n)
    with httpx.Client(base_url=url, timeout=300) as c:
        sid = None
        k = 0
        while time.monotonic() < until:
            try:
                if sid is None:
                    r = c.post("/api/sessions", json={"mode": "practice", "num_questions": 50})
                    if r.status_code != 201:
                        tally.add(r.status_code, 0)
                        time.sleep(float(r.headers.get("Retry-After", 1)))
                        continue
                    sid = r.json()["id"]
                if think[1] > 0:  # the candidate reads the question and thinks
                    time.sleep(min(rng.uniform(*think), max(0.0, until - time.monotonic())))
                    if time.monotonic() >= until:
                        break
                t = time.perf_counter()
                r = c.post(f"/api/sessions/{sid}/answers", json={"answer": f"[{n}-{k}] {ANSWER}"})
                tally.add(r.status_code, time.perf_counter() - t)
                k += 1
                if r.status_code in (429, 503):  # back-pressure: do as told
                    time.sleep(float(r.headers.get("Retry-After", 1)))
                elif r.status_code == 200 and r.json()["next"]["kind"] == "end":
                    sid = None
                elif r.status_code != 200:
                    tally.errors.append(f"{r.status_code}: {r.text[:200]}")
            except httpx.HTTPError as exc:
                tally.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(1)


@dataclass
class Engines:
    api_pgid: int
    chroma_pid: int
    postgres_pid: int

    def cpu(self) -> dict[str, float]:
        return {
            "api": cpu_seconds(in_group(self.api_pgid)),
            "chroma": cpu_seconds(child_of_or_is(self.chroma_pid)),
            "postgres": cpu_seconds(child_of_or_is(self.postgres_pid)),
        }


def run_phase(
    url: str, engines: Engines, candidates: int, seconds: float, think: tuple[float, float]
) -> dict:
    tally = Tally()
    before = engines.cpu()
    client_before = time.process_time()  # this script's own threads: is the client the limit?
    until = time.monotonic() + seconds
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=candidate, args=(url, n, until, think, tally), daemon=True)
        for n in range(candidates)
    ]
    for t in threads:
        t.start()
        if think[1] > 0:
            time.sleep(min(0.05, seconds / max(1, candidates) / 4))  # stagger arrivals
    for t in threads:
        t.join(timeout=seconds + 600)
    wall = time.perf_counter() - t0
    after = engines.cpu()
    client_cpu = time.process_time() - client_before
    ok = len(tally.latencies)
    cpu = {k: after[k] - before[k] for k in after}
    return {
        "candidates": candidates,
        "wall": wall,
        "answers": ok,
        "p50": percentile(tally.latencies, 50) if ok else float("nan"),
        "p95": percentile(tally.latencies, 95) if ok else float("nan"),
        "rate": ok / wall,
        "codes": dict(tally.codes),
        "errors": tally.errors,
        "cpu_per_answer": {k: v / ok for k, v in cpu.items()} if ok else {},
        "cpu_util": sum(cpu.values()) / wall,
        "client_util": client_cpu / wall,
    }


# ------------------------------------------------------------------ one server, N workers


def start_api(env: dict[str, str], workers: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "server.cli",
                "serve",
                "--port",
                str(port),
                "--workers",
                str(workers),
            ],
            cwd=ROOT,
            env={**env, "SPARRING_WORKERS": str(workers)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited; see {log}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                # every worker answers only once it has loaded everything: warm each a little
                for _ in range(4 * workers):
                    httpx.get(f"{url}/api/info", timeout=120)
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError("server did not start")


def line(name: str, r: dict, cores: int, scale: float = 1.0) -> str:
    codes = r["codes"]
    busy = f"429={codes.get(429, 0)} 503={codes.get(503, 0)}"
    other = sum(v for k, v in codes.items() if k not in (200, 201, 429, 503))
    where = ", ".join(f"{k} {v * 1000:.0f}" for k, v in r["cpu_per_answer"].items())
    waiting = r["p50"] - sum(r["cpu_per_answer"].values()) if r["cpu_per_answer"] else 0.0
    emulated = f" (emulates {r['candidates'] / scale:.0f} at full think time)" if scale != 1 else ""
    return (
        f"  {name}: {r['candidates']} candidates{emulated}, {r['answers']} answers in "
        f"{r['wall']:.0f} s: {r['rate']:.2f}/s = {r['rate'] / cores:.2f}/s per core; "
        f"p50 {r['p50']:.2f} s p95 {r['p95']:.2f} s; {busy}, other errors {other + len(r['errors'])}; "
        f"CPU ms/answer: {where}; of the p50, {waiting * 1000:.0f} ms is waiting (queue, GIL, "
        f"other load); server CPU {r['cpu_util']:.2f} + client CPU {r['client_util']:.2f} of "
        f"{cores} cores"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2", help="worker counts to compare, e.g. 1,2")
    parser.add_argument("--duration", type=float, default=60, help="seconds of load per phase")
    parser.add_argument("--saturate", type=int, default=16, help="candidates with no think time")
    parser.add_argument(
        "--think", default="16,32", help="candidate counts (a ramp) with think time 30–120 s"
    )
    parser.add_argument(
        "--think-scale", type=float, default=0.05, help="multiply think times (1 = real)"
    )
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    args = parser.parse_args()
    worker_counts = [int(w) for w in args.workers.split(",")]
    ramp = [int(c) for c in args.think.split(",") if c]
    think = (30 * args.think_scale, 120 * args.think_scale)
    cores = os.cpu_count() or 1

    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sparring-load-")))
        chroma_port = free_port()
        chroma_url = stack.enter_context(chroma_server(work / "chroma", chroma_port))
        env = {
            **os.environ,
            "SPARRING_DATA_DIR": str(work / "data"),
            "SPARRING_CHROMA_URL": chroma_url,
            "SPARRING_AUTH_TOKENS": "",
            "SPARRING_UI_ENABLED": "false",
        }
        postgres_pid = 0
        if args.database == "postgres":
            env["SPARRING_DATABASE_URL"] = db_url = stack.enter_context(postgres_server())
            pgdata = Path(db_url.split("host=")[1])
            postgres_pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        chroma_pid = next(
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit()
            and f"--port\x00{chroma_port}".encode() in Path(f"/proc/{p}/cmdline").read_bytes()
        )
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "server.cli", "ingest"], cwd=ROOT, env=env, check=True
        )
        print(f"index built into the Chroma server in {time.perf_counter() - t:.0f} s")
        print(
            f"machine: {cores} cores, load average {Path('/proc/loadavg').read_text().split()[0]} "
            f"(other work on the machine slows every figure); database {args.database}; load {args.duration:.0f} s per "
            f"phase; think {think[0]:.1f}–{think[1]:.1f} s (scale {args.think_scale})"
        )
        for workers in worker_counts:
            proc, url = start_api(env, workers, work / f"api-{workers}.log")
            try:
                engines = Engines(proc.pid, chroma_pid, postgres_pid)
                print(f"\n--workers {workers}")
                alone = run_phase(url, engines, 1, min(args.duration, 15), (0, 0))
                print(line("one candidate alone (service time)", alone, cores))
                sat = run_phase(url, engines, args.saturate, args.duration, (0, 0))
                print(line("no think time", sat, cores))
                served = 0
                for n in ramp:
                    r = run_phase(url, engines, n, args.duration, think)
                    print(line("think time", r, cores, args.think_scale))
                    if r["answers"] and r["p95"] <= TARGET_P95_S and not r["errors"]:
                        served = max(served, round(n / args.think_scale))
                print(
                    f"  served at p95 <= {TARGET_P95_S:.0f} s with think time 30–120 s: "
                    f"{served} concurrent candidates (largest passing step of the ramp)"
                )
                for err in (sat["errors"] + alone["errors"])[:3]:
                    print("  error:", err)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
