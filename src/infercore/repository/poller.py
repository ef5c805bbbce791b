"""The repository poller: applies repository changes every few seconds (POLL mode).

Threads: the server starts the poller and stops it (joining its thread) before unloading
the models; the poller's own thread, ``infercore-repository-poll``, runs ``poll``. Waiting on
``_changed`` (a condition on ``_lock``, which guards ``_stopping``) until the next poll's
deadline on the server's clock both paces the polls and ends the wait at once when the
server stops; a ManualClock makes a test's advance the only thing that starts a poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..clock import Clock, MonotonicClock

__all__ = ["RepositoryPoller"]

logger = logging.getLogger(__name__)


class RepositoryPoller:
    """Calls ``poll`` every ``interval`` seconds on its own thread until stopped."""

    __slots__ = ("_clock", "_interval_ns", "_poll", "_lock", "_changed", "_stopping",
                 "_thread")

    def __init__(self, poll: Callable[[], object], interval: float,
                 clock: Clock | None = None) -> None:
        if interval <= 0:
            raise ValueError("the poll interval must be > 0 seconds")
        self._poll = poll
        self._interval_ns = int(interval * 1e9)
        self._clock = clock or MonotonicClock()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the repository poller is already started")
        self._thread = threading.Thread(target=self._run, name="infercore-repository-poll",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; waits for a poll in progress to finish."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while self._wait_for_next():
            try:
                self._poll()
            except Exception:  # a failed poll is logged; the next one tries again
                logger.exception("polling the model repository failed")

    def _wait_for_next(self) -> bool:
        """Wait one interval from now; False once stopping."""
        clock = self._clock
        deadline = clock.now_ns() + self._interval_ns
        with self._changed:
            while not self._stopping and clock.now_ns() < deadline:
                clock.wait(self._changed, deadline)
            return not self._stopping

    def __repr__(self) -> str:
        running = self._thread is not None and self._thread.is_alive()
        return f"RepositoryPoller(interval={self._interval_ns / 1e9}, running={running})"
