"""Search latency through HTTP: p50/p95 of `GET /api/questions/search` on the real server (uvicorn
on loopback, the real bank, Chroma and encoder), search v3 (what the API serves) against v2 on the
same queries, and where the time goes in process (encoder, pipeline without the encoder).

Every HTTP request is cache-free: the server's query-vector cache is emptied before each one, so
each query pays the encoder as a new user's question does. v3 and v2 alternate request by request
(which one goes first alternates too), so a change in the machine's load hits both alike. The
machine's load average (`os.getloadavg`, as `uptime` prints it) is reported before and after:
on a shared machine the absolute figures move with the load, the v3/v2 ratio much less.

Queries: --requests queries spread evenly over all of tests/eval/retrieval*.jsonl (every set's
wording, the long GitHub-thread questions of v5 included), in file order.

Run: .venv/bin/python benchmarks/search_latency.py [--requests 200] [--data-dir DIR] [--ingest]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import httpx
from common import percentile, serve, summary

from server.config import Settings
from server.evaluation.retrieval import RETRIEVAL_SETS
from server.retrieval.search import QuestionSearcher, SearchMode
from server.services import Services


class PinnedSearcher:
    """The service's searcher with `find` pinned to one mode, so the unchanged API route can serve
    v2 for the comparison. Everything else is delegated."""

    def __init__(self, inner: QuestionSearcher) -> None:
        self.inner = inner
        self.mode = SearchMode.v3

    def find(self, query, k=5, filters=None, mode=SearchMode.v3):  # mode: pinned
        return self.inner.find(query, k, filters, self.mode)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def load() -> str:
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu() -> str:
    """The CPU model and its widest vector extension: the encoder's cost per token follows them
    (the same code measured an encoder p95 of 24 ms on one 2-core machine and 52 ms on an AVX2-only
    AMD EPYC one)."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    model = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line), "?"
    )
    flags = next(
        (line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")),
        [],
    )
    widest = (
        "avx512"
        if any(f.startswith("avx512") for f in flags)
        else "avx2"
        if "avx2" in flags
        else "older"
    )
    return f"{model} ({widest})"


# Queries up to this many characters are the short ones in the by-length split: a typed question,
# against a pasted paragraph (the encoder's time grows with the query's tokens).
SHORT_QUERY = 60


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200, help="per mode")
    parser.add_argument("--data-dir", default="", help="reuse this index directory")
    parser.add_argument(
        "--ingest", action="store_true", help="also time a first and a second ingest"
    )
    args = parser.parse_args()
    queries = [
        json.loads(line)["q"]
        for path in RETRIEVAL_SETS
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    step = max(1, len(queries) // args.requests)
    spread = queries[::step][: args.requests]
    print(f"cpus: {os.cpu_count()}, {cpu()}; before: {load()}")

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=args.data_dir or tmp)
        svc = Services(settings)
        _ = svc.embedder, svc.bank  # model load and bank parse are not ingest
        t = time.perf_counter()
        report = svc.ingest()
        print(f"ingest: {time.perf_counter() - t:.1f} s, {report.embedded} documents embedded")
        if args.ingest:
            again = Services(settings)
            again.__dict__["embedder"] = svc.embedder
            t = time.perf_counter()
            report2 = again.ingest()
            print(
                f"second ingest: {time.perf_counter() - t:.2f} s, {report2.embedded} embedded "
                f"(target: none)"
            )

        pinned = PinnedSearcher(svc.searcher)
        svc.__dict__["searcher"] = pinned  # the routes read services.searcher
        cache = svc.vector_store._query_cache
        ms: dict[SearchMode, list[float]] = {SearchMode.v3: [], SearchMode.v2: []}
        asked: list[str] = []
        with serve(svc) as url, httpx.Client(base_url=url, timeout=60) as client:
            for q in ("warm up", "预热一下", "GRPO", "PPO clip"):
                for mode in ms:
                    pinned.mode = mode
                    client.get("/api/questions/search", params={"q": q, "k": 5})
            for n in range(args.requests):
                q = spread[n % len(spread)]
                asked.append(q)
                order = (
                    (SearchMode.v3, SearchMode.v2) if n % 2 == 0 else (SearchMode.v2, SearchMode.v3)
                )
                for mode in order:
                    pinned.mode = mode
                    cache.clear()  # a new user's question: the encoder runs
                    t = time.perf_counter()
                    r = client.get("/api/questions/search", params={"q": q, "k": 5})
                    ms[mode].append((time.perf_counter() - t) * 1000)
                    r.raise_for_status()
        for mode, values in ms.items():
            print(summary(f"HTTP GET /api/questions/search ({mode.value}, cache-free)", values, 50))
        ratio50 = percentile(ms[SearchMode.v3], 50) / percentile(ms[SearchMode.v2], 50)
        ratio95 = percentile(ms[SearchMode.v3], 95) / percentile(ms[SearchMode.v2], 95)
        print(f"v3 / v2 over HTTP: p50 x{ratio50:.2f}, p95 x{ratio95:.2f}")
        for label, keep in (
            (f"<= {SHORT_QUERY} chars", lambda q: len(q) <= SHORT_QUERY),
            (f"> {SHORT_QUERY} chars", lambda q: len(q) > SHORT_QUERY),
        ):
            values = [v for q, v in zip(asked, ms[SearchMode.v3], strict=True) if keep(q)]
            if values:
                print(summary(f"HTTP v3, queries of {label}", values, 50))

        # In process: the encoder alone, and each pipeline with the query vector cached.
        searcher = pinned.inner
        timed = spread
        enc = []
        for q in timed:
            text = searcher.glossary.annotate_v3(q, searcher._bank_zh)
            t = time.perf_counter()
            svc.embedder.embed_queries([text])
            enc.append((time.perf_counter() - t) * 1000)
        print(summary("in-process encoder alone (one query)", enc, None))
        for q in timed:  # every pipeline's query text into the cache
            for mode in (SearchMode.hybrid, SearchMode.v2, SearchMode.v3):
                searcher.search(q, k=5, mode=mode)
        for mode in (SearchMode.hybrid, SearchMode.v2, SearchMode.v3):
            values = []
            for q in timed:
                t = time.perf_counter()
                searcher.search(q, k=5, mode=mode)
                values.append((time.perf_counter() - t) * 1000)
            print(summary(f"in-process {mode.value}, query vector cached", values, None))
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
