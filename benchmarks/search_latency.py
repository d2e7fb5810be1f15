"""Search latency through HTTP (p50/p95) and first/second ingest time of the whole bank.

Run: .venv/bin/python benchmarks/search_latency.py [--requests 300]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import httpx
from common import ROOT, serve, summary

from server.config import Settings
from server.services import Services


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    queries = [
        json.loads(line)["q"]
        for line in (ROOT / "tests/eval/retrieval.jsonl").read_text().splitlines()
        if line.strip()
    ]

    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(data_dir=data_dir)
        first = Services(settings)
        _ = first.embedder, first.bank  # model load and bank parse are not ingest
        t = time.perf_counter()
        report1 = first.ingest()
        first_s = time.perf_counter() - t
        second = Services(settings)
        second.__dict__["embedder"] = first.embedder
        t = time.perf_counter()
        report2 = second.ingest()
        second_s = time.perf_counter() - t
        print(
            f"first ingest: {first_s:.1f} s, {report1.embedded} documents embedded "
            f"| target <= 30 s: {'PASS' if first_s <= 30 else 'FAIL'}"
        )
        print(
            f"second ingest: {second_s:.2f} s, {report2.embedded} embedded, {report2.unchanged} unchanged "
            f"| target: embeds nothing: {'PASS' if report2.embedded == 0 else 'FAIL'}"
        )

        with serve(first) as url, httpx.Client(base_url=url, timeout=30) as client:
            for q in queries[:20]:  # warm-up
                client.get("/api/questions/search", params={"q": q, "k": 5})
            ms = []
            for n in range(args.requests):
                q = queries[n % len(queries)]
                t = time.perf_counter()
                r = client.get("/api/questions/search", params={"q": q, "k": 5})
                ms.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
        print(summary("GET /api/questions/search", ms, 50))


if __name__ == "__main__":
    main()
