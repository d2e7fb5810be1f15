"""Search latency through HTTP (p50/p95 of search v3, the API's pipeline) and first/second ingest
time of the whole bank; then, in process, v1 hybrid vs v2 vs v3 per query so the cost of the extra
stages (glossary, per-part BM25, the ranker) is visible beside the encoder's.

On a shared, loaded machine the absolute figures move with the load: read the ratios (HTTP v3 vs
in-process v3, v3 vs v2) as well as the milliseconds.

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
    parser.add_argument(
        "--data-dir",
        default="",
        help="reuse this index directory (the ingest figures then time an incremental ingest)",
    )
    args = parser.parse_args()
    queries = [
        json.loads(line)["q"]
        for name in ("retrieval.jsonl", "retrieval_v2.jsonl", "retrieval_v3.jsonl")
        for line in (ROOT / "tests/eval" / name).read_text().splitlines()
        if line.strip()
    ]

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or tmp
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
        print(summary("GET /api/questions/search (v3)", ms, 50))

        # In process, on queries the cache has seen: the cost of each pipeline without the encoder.
        searcher = first.searcher
        timed = queries[: min(args.requests, len(queries))]
        for q in timed:  # every pipeline's query text (v2/v3 embed annotated ones) into the cache
            for mode in (SearchMode.hybrid, SearchMode.v2):
                searcher.search(q, k=5, mode=mode)
        for mode in (SearchMode.hybrid, SearchMode.v2, SearchMode.v3):
            ms = []
            for q in timed:
                t = time.perf_counter()
                searcher.search(q, k=5, mode=mode)
                ms.append((time.perf_counter() - t) * 1000)
            print(summary(f"in-process {mode.value}, query vector cached", ms, None))


if __name__ == "__main__":
    main()
