"""Rubric grading latency through HTTP (p50/p95) on answers up to 1,500 characters, beside a
baseline request (GET /api/questions/{id}) in the same run, so the ratio shows what grading costs.

Answers: every labelled answer of the grading sets up to 1,500 characters, plus answers of 1,000–1,500
characters made by joining two answers to the same question (the grader reads all of an answer).

Run: .venv/bin/python benchmarks/grade_latency.py [--requests 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import httpx
from common import ROOT, percentile, serve, summary

from server.config import Settings
from server.evaluation.grading import load_datasets
from server.services import Services

MAX_CHARS = 1500


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        services = Services(Settings(data_dir=data_dir))
        cases = load_datasets(
            [ROOT / "tests/eval/grading.jsonl", ROOT / "tests/eval/grading_v2"], services.bank
        )
        services.ingest()
        answers = [(c.entry.id, c.answer) for c in cases if len(c.answer) <= MAX_CHARS]
        by_question: dict[str, list[str]] = {}
        for qid, answer in answers:
            by_question.setdefault(qid, []).append(answer)
        for qid, texts in sorted(by_question.items()):
            long = "\n".join(texts[:2])
            while len(long) < 1000 and len(texts) > 2:
                long += "\n" + texts[len(long) % len(texts)]
            answers.append((qid, long[:MAX_CHARS]))
        # Interleave short and long so every window of requests sees both.
        answers.sort(key=lambda a: hash(a[1]) % 997)
        bodies = [{"question_id": q, "answer": a, "grader": "rubric"} for q, a in answers]
        with serve(services) as url, httpx.Client(base_url=url, timeout=60) as client:
            # Warm-up: the first grade of each question embeds its rubric once (then cached).
            for entry_id in {b["question_id"] for b in bodies}:
                client.post(
                    "/api/grade",
                    json={"question_id": entry_id, "answer": "warm up", "grader": "rubric"},
                )
            ms, base = [], []
            for n in range(args.requests):
                body = bodies[n % len(bodies)]
                t = time.perf_counter()
                client.get(f"/api/questions/{body['question_id']}").raise_for_status()
                base.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                r = client.post("/api/grade", json=body)
                ms.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
        lengths = sorted(len(b["answer"]) for b in bodies)
        print(
            f"answers: {len(bodies)} (median {lengths[len(lengths) // 2]} chars, max {lengths[-1]})"
        )
        print(summary("GET /api/questions/{id} (baseline)", base, None))
        print(summary("POST /api/grade (rubric)", ms, 200))
        ratio = percentile(ms, 95) / percentile(base, 95)
        print(f"p95 ratio grade / baseline: {ratio:.1f}x")


if __name__ == "__main__":
    main()
