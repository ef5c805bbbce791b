"""Calls a worker process makes into the server and waits for.

Custom metrics (worker/metrics.py) and model control (worker/bls.py) send a frame
``(kind, number, *fields)`` and block until the server's reply frame
``(reply kind, number, error, value)`` arrives on the worker's reader thread.

Threads: any model thread calls; the reader thread answers; ``_lock`` guards the map of
calls waiting. Numbers come from ``itertools.count``, whose ``next`` is atomic under the GIL.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from ....errors import error_from_code

__all__ = ["PendingCalls"]


class _Reply:
    __slots__ = ("error", "event", "value")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: tuple[int, str] | None = None
        self.value: Any = None


class PendingCalls:
    """The calls of one kind a worker waits on, by number."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._send = send
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, _Reply] = {}

    def call(self, kind: int, *fields: Any) -> Any:
        """Send ``(kind, number, *fields)`` and wait for the outcome; raises the server's
        error as its typed TritonError."""
        number = next(self._numbers)
        reply = _Reply()
        with self._lock:
            self._waiting[number] = reply
        self._send((kind, number, *fields))
        # No timeout: a load takes as long as it takes, and if the server goes, this
        # process exits (the reader thread sees EOF).
        reply.event.wait()
        if reply.error is not None:
            raise error_from_code(*reply.error)
        return reply.value

    def reply(self, frame: tuple[Any, ...]) -> None:
        """A reply frame (on the reader thread): wake its caller."""
        _, number, error, value = frame
        with self._lock:
            reply = self._waiting.pop(number, None)
        if reply is not None:
            reply.error = error
            reply.value = value
            reply.event.set()
