"""A bounded pool for grading and code runs, separate from the threads that serve other routes.

Why: grading is CPU-bound and a coding answer may hold a worker for the whole sandbox wall time.
Run in the shared request thread pool, ~45 slow answers starved `/healthz`, search and question
lookup. Here the work has its own few threads, a queue limit (beyond it: 503) and a per-user
limit (beyond it: 429), both with `Retry-After`; closing the queue drops what has not started,
so SIGTERM never waits for a long queue. A queue limit in jobs alone still lets latency grow to
minutes when jobs get slow under load, so a job is also refused (503) when the work already
ahead of it would take longer than `max_wait_seconds` on this process's workers."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from server.api.errors import busy

T = TypeVar("T")


@dataclass(frozen=True)
class QueueStats:
    workers: int
    in_system: int  # running + waiting
    queue_limit: int
    closed: bool


class WorkQueue:
    def __init__(
        self,
        workers: int,
        queue_limit: int,
        per_user: int,
        name: str = "work",
        max_wait_seconds: float = 0.0,
    ) -> None:
        self.workers = workers
        self.queue_limit = queue_limit
        self.per_user = per_user
        self.max_wait_seconds = max_wait_seconds  # 0 = no bound on the expected wait
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()  # done-callbacks run on worker threads
        self._in_system = 0
        self._by_user: dict[str, int] = {}
        self._closed = False
        self._mean_seconds = 1.0  # running estimate of one job, for Retry-After

    def stats(self) -> QueueStats:
        with self._lock:
            return QueueStats(self.workers, self._in_system, self.queue_limit, self._closed)

    def _retry_after(self) -> float:
        waves = math.ceil((self._in_system + 1) / self.workers)
        return min(120.0, max(1.0, waves * self._mean_seconds))

    def expected_wait(self) -> float:
        """Seconds a job admitted now would wait before a worker takes it (running estimate)."""
        with self._lock:
            return self._expected_wait()

    def _expected_wait(self) -> float:
        ahead = self._in_system - self.workers + 1  # jobs that must start before this one
        return max(0.0, ahead / self.workers * self._mean_seconds)

    def _admit(self, user: str | None) -> None:
        with self._lock:
            if self._closed:
                raise busy(503, "shutting_down", "the server is shutting down; retry later", 5)
            if user is not None and self._by_user.get(user, 0) >= self.per_user:
                raise busy(
                    429,
                    "too_many_requests",
                    f"you already have {self.per_user} answers being graded; wait for them",
                    self._retry_after(),
                )
            if self._in_system >= self.workers + self.queue_limit:
                raise busy(
                    503,
                    "busy",
                    "the grading queue is full; nothing was saved, retry in a moment",
                    self._retry_after(),
                )
            if self.max_wait_seconds and self._expected_wait() > self.max_wait_seconds:
                raise busy(
                    503,
                    "busy",
                    f"grading would start in about {self._expected_wait():.0f} s; nothing was "
                    "saved, retry in a moment",
                    self._retry_after(),
                )
            self._in_system += 1
            if user is not None:
                self._by_user[user] = self._by_user.get(user, 0) + 1

    def _release(self, user: str | None, started: float | None) -> None:
        with self._lock:
            self._in_system -= 1
            if user is not None:
                left = self._by_user.get(user, 1) - 1
                if left > 0:
                    self._by_user[user] = left
                else:
                    self._by_user.pop(user, None)
            if started is not None:
                self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (time.monotonic() - started)

    async def run(self, fn: Callable[[], T], user: str | None = None) -> T:
        """Run `fn` on a worker; `user=None` skips the per-user limit (the one local user)."""
        self._admit(user)
        started: list[float] = []

        def job() -> T:
            started.append(time.monotonic())
            return fn()

        try:
            future: Future[T] = self._pool.submit(job)
        except RuntimeError:  # the pool was shut down between admit and submit
            self._release(user, None)
            raise busy(
                503, "shutting_down", "the server is shutting down; retry later", 5
            ) from None
        future.add_done_callback(lambda _: self._release(user, started[0] if started else None))
        try:
            # A cancelled request (client gone) cancels the job too if it has not started yet.
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and self._closed and not (task and task.cancelling()):
                raise busy(
                    503, "shutting_down", "the server is shutting down; retry later", 5
                ) from None
            raise

    def close(self) -> None:
        """Refuse new work and drop queued jobs; running ones finish on their own limits."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
