"""Back-pressure of the grading pool: a job that would wait longer than `max_wait_seconds` is
refused at once with 503 + Retry-After instead of joining a queue whose latency grows unbounded."""

from __future__ import annotations

import asyncio
import threading

import pytest

from server.api.errors import ApiError
from server.work_queue import WorkQueue


def test_a_job_that_would_wait_too_long_is_refused_with_retry_after() -> None:
    queue = WorkQueue(workers=1, queue_limit=10, per_user=10, max_wait_seconds=0.5)
    release = threading.Event()

    async def scenario() -> None:
        running = asyncio.create_task(queue.run(lambda: release.wait(30)))
        while queue.stats().in_system == 0:
            await asyncio.sleep(0.01)
        # One job ahead on the one worker, ~1 s each (the starting estimate) > 0.5 s allowed.
        assert queue.expected_wait() > 0.5
        with pytest.raises(ApiError) as refused:
            await queue.run(lambda: "never runs")
        assert refused.value.status == 503
        assert refused.value.headers is not None and int(refused.value.headers["Retry-After"]) >= 1
        release.set()
        assert await running is True
        assert queue.expected_wait() == 0.0
        assert await queue.run(lambda: "ran") == "ran"  # free again: admitted

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        queue.close()


def test_without_a_wait_bound_only_the_queue_limit_refuses() -> None:
    queue = WorkQueue(workers=1, queue_limit=1, per_user=10, max_wait_seconds=0)
    release = threading.Event()

    async def scenario() -> None:
        first = asyncio.create_task(queue.run(lambda: release.wait(30)))
        second = asyncio.create_task(queue.run(lambda: release.wait(30)))
        while queue.stats().in_system < 2:
            await asyncio.sleep(0.01)
        with pytest.raises(ApiError) as refused:
            await queue.run(lambda: None)
        assert refused.value.status == 503
        release.set()
        assert [await first, await second] == [True, True]

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        queue.close()
