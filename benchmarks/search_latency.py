"""Search latency through HTTP (p50/p95 of search v2, the API's pipeline) and first/second ingest
time of the whole bank; then, in process, v1 hybrid vs v2 per query so the cost of v2's extra stages
(glossary, per-part BM25, the ranker) is visible beside the encoder's.

Queries: every query of tests/eval/retrieval*.jsonl, each new to the server's query-vector cache
until the list wraps (use --requests <= the number of queries for a cache-free figure).

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
from server.retrieval.search import SearchMode
from server.services import Services


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    queries = [
        json.loads(line)["q"]
        for name in ("retrieval.jsonl", "retrieval_v2.jsonl")
        for line in (ROOT / "tests/eval" / name).read_text().splitlines()
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
            for q in ("warm up", "预热一下", "GRPO", "PPO clip"):
                client.get("/api/questions/search", params={"q": q, "k": 5})
            ms = []
            for n in range(args.requests):
                q = queries[n % len(queries)]
                t = time.perf_counter()
                r = client.get("/api/questions/search", params={"q": q, "k": 5})
                ms.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
        print(summary("GET /api/questions/search (v2)", ms, 50))

        # In process, on queries the cache has seen: the cost of each pipeline without the encoder.
        searcher = first.searcher
        timed = queries[: min(args.requests, len(queries))]
        for q in timed:  # both pipelines' query texts (v2 embeds an annotated one) into the cache
            searcher.search(q, k=5, mode=SearchMode.hybrid)
        for mode in (SearchMode.hybrid, SearchMode.v2):
            ms = []
            for q in timed:
                t = time.perf_counter()
                searcher.search(q, k=5, mode=mode)
                ms.append((time.perf_counter() - t) * 1000)
            print(summary(f"in-process {mode.value}, query vector cached", ms, None))


if __name__ == "__main__":
    main()
