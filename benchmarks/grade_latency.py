"""Rubric grading latency through HTTP (p50/p95), over the labelled answers of the grading set.

Run: .venv/bin/python benchmarks/grade_latency.py [--requests 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import httpx
from common import ROOT, serve, summary

from server.config import Settings
from server.evaluation.grading import load_cases
from server.services import Services


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        services = Services(Settings(data_dir=data_dir))
        cases = load_cases(ROOT / "tests/eval/grading.jsonl", services.bank)
        services.ingest()
        bodies = [
            {"question_id": c.entry.id, "answer": c.answer, "grader": "rubric"} for c in cases
        ]
        with serve(services) as url, httpx.Client(base_url=url, timeout=60) as client:
            # Warm-up: the first grade of each question embeds its rubric once (then cached).
            for entry_id in {b["question_id"] for b in bodies}:
                client.post(
                    "/api/grade",
                    json={"question_id": entry_id, "answer": "warm up", "grader": "rubric"},
                )
            ms = []
            for n in range(args.requests):
                body = bodies[n % len(bodies)]
                t = time.perf_counter()
                r = client.post("/api/grade", json=body)
                ms.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
        lengths = sorted(len(b["answer"]) for b in bodies)
        print(
            f"answers: {len(bodies)} (median {lengths[len(lengths) // 2]} chars, max {lengths[-1]})"
        )
        print(summary("POST /api/grade (rubric)", ms, 200))


if __name__ == "__main__":
    main()
