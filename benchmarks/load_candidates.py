"""Load: N concurrent simulated candidates against one server process; no errors, no lost answers.

Run: .venv/bin/python benchmarks/load_candidates.py [--candidates 100 --answers 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from common import percentile, serve

from server.config import Settings
from server.services import Services

ANSWER = "GRPO 对同一个 prompt 采样一组回答，用组内奖励均值做 baseline，再除以标准差得到优势，不需要 critic。"


def candidate(url: str, n: int, answers: int) -> tuple[int, int, list[float], str | None]:
    """Returns (answers sent, answers stored, latencies ms, error)."""
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=300) as c:
        try:
            r = c.post("/api/sessions", json={"mode": "practice", "num_questions": 5, "seed": n})
            r.raise_for_status()
            sid = r.json()["id"]
            sent = 0
            for k in range(answers):
                t = time.perf_counter()
                r = c.post(f"/api/sessions/{sid}/answers", json={"answer": f"[{n}-{k}] {ANSWER}"})
                latencies.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
                sent += 1
                if r.json()["next"]["kind"] == "end":
                    break
            turns = c.get(f"/api/sessions/{sid}").json()["turns"]
            stored = sum(
                1 for t in turns if t["kind"] == "answer" and t["text"].startswith(f"[{n}-")
            )
            return sent, stored, latencies, None
        except Exception as exc:  # report, do not hide
            return 0, 0, latencies, f"{type(exc).__name__}: {exc}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--answers", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        services = Services(Settings(data_dir=data_dir))
        services.ingest()
        with serve(services) as url:
            t = time.perf_counter()
            with ThreadPoolExecutor(max_workers=args.candidates) as pool:
                results = list(
                    pool.map(lambda n: candidate(url, n, args.answers), range(args.candidates))
                )
            wall = time.perf_counter() - t
    errors = [e for *_, e in results if e]
    sent = sum(r[0] for r in results)
    stored = sum(r[1] for r in results)
    lat = [x for r in results for x in r[2]]
    print(
        f"{args.candidates} concurrent candidates, {sent} answers sent, {stored} stored, "
        f"{len(errors)} errors, wall {wall:.1f} s"
    )
    if lat:
        print(
            f"answer latency under load: p50 {percentile(lat, 50):.0f} ms, p95 {percentile(lat, 95):.0f} ms"
        )
    for e in errors[:5]:
        print("  error:", e)
    print("PASS" if not errors and sent == stored else "FAIL")


if __name__ == "__main__":
    main()
