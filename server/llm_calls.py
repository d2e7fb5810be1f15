"""Calls to remote model services (LLM completions, transcriptions) under one overall deadline.

Shared by the LLM grader, the LLM interviewer and the speech transcriber."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


class DeadlineLoop:
    """One event loop on a daemon thread for one caller's remote model calls.

    Why: the provider timeout is per read, so a server that trickles a byte every few seconds
    never trips it. Here each call runs as a task with one overall deadline and is cancelled
    (its connection closed) when the deadline passes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="llm-io", daemon=True).start()
                self._loop = loop
            return self._loop

    def run(self, coro: Coroutine[Any, Any, Any], deadline: float) -> Any:
        """The coroutine's result; TimeoutError once `deadline` seconds have passed."""
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, timeout=deadline), self._get()
        )
        try:
            return future.result(timeout=deadline + 5)
        except TimeoutError:
            future.cancel()
            raise
