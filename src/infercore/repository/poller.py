"""The repository poller: applies repository changes every few seconds (POLL mode).

Threads: the server starts the poller and stops it (joining its thread) before unloading
the models; the poller's own thread, ``infercore-repository-poll``, runs ``poll``. Waiting
on the stop event with the interval as deadline both paces the polls and ends the wait
at once when the server stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["RepositoryPoller"]

logger = logging.getLogger(__name__)


class RepositoryPoller:
    """Calls ``poll`` every ``interval`` seconds on its own thread until stopped."""

    __slots__ = ("_interval", "_poll", "_stop", "_thread")

    def __init__(self, poll: Callable[[], object], interval: float) -> None:
        if interval <= 0:
            raise ValueError("the poll interval must be > 0 seconds")
        self._poll = poll
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the repository poller is already started")
        self._thread = threading.Thread(target=self._run, name="infercore-repository-poll",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; waits for a poll in progress to finish."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._poll()
            except Exception:  # a failed poll is logged; the next one tries again
                logger.exception("polling the model repository failed")

    def __repr__(self) -> str:
        running = self._thread is not None and self._thread.is_alive()
        return f"RepositoryPoller(interval={self._interval}, running={running})"
