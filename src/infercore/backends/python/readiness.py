"""A Python model's own readiness: ``TritonPythonModel.is_ready()``, as current Triton's
python_backend asks it (README "is_ready"; python_backend pull request #430, 2026; newer
than Triton 2.51, which has no such call).

At each model readiness request (HTTP GET /v2/models/<m>/ready, gRPC ModelReady, BLS
``pb_utils.is_model_ready``) the instance's ``is_ready()`` is called, sync or
``async def`` (run on the instance's asyncio loop, with its ``async def execute``
coroutines). It must return a bool: True is ready; False, any other value, an exception,
or no answer within ``READY_TIMEOUT_S`` (Triton's kUserModelReadinessTimeoutMs, 5 s) is
not ready, the reason logged. A model without ``is_ready`` is ready while loaded, and is
asked nothing. Checks asked while one is still running wait for that one's answer
instead of starting another (as Triton reuses the pending request), so a slow
``is_ready`` never piles up threads.

Threads: ``check`` and ``start`` are called from any thread (request threads, the
worker's reader thread); each check runs on a thread of its own, started here and named
``<instance>-is_ready``, in the model's scope (pb_utils calls find their model). ``_lock``
guards ``_pending``, the check under way. ``stop`` (at the instance's finalize) joins a
check still running, within ``STOP_TIMEOUT_S``; one that still runs after that is left
to end by itself (a daemon thread: it never holds the process up).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from typing import Any

from .pb_utils.error import python_error_text

__all__ = ["READY_TIMEOUT_S", "ReadinessProbe", "all_ready"]

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 1.0


class ReadinessProbe:
    """Runs one instance's ``is_ready``; at most one call under way at a time."""

    def __init__(
        self,
        instance_name: str,
        is_ready: Callable[[], Any],
        scope: Callable[[], AbstractContextManager[None]],
        run_coroutine: Callable[[Coroutine[Any, Any, Any]], Any],
    ) -> None:
        self._name = instance_name
        self._is_ready = is_ready
        self._scope = scope
        self._run_coroutine = run_coroutine  # on the instance's asyncio loop, to its end
        self._lock = threading.Lock()
        self._pending: concurrent.futures.Future[bool] | None = None
        self._thread: threading.Thread | None = None

    def check(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """The model's answer, or False past ``timeout_s``."""
        try:
            return self.start().result(timeout_s)
        except concurrent.futures.TimeoutError:
            logger.error(
                "is_ready() of model instance '%s' did not answer within %.1f s: "
                "the model is not ready",
                self._name,
                timeout_s,
            )
            return False

    def start(self) -> concurrent.futures.Future[bool]:
        """The check under way, or a new one: a future of the answer (never failing)."""
        with self._lock:
            pending = self._pending
            if pending is not None and not pending.done():
                return pending
            future: concurrent.futures.Future[bool] = concurrent.futures.Future()
            self._pending = future
            self._thread = threading.Thread(
                target=self._run, args=(future,), daemon=True, name=f"{self._name}-is_ready"
            )
            self._thread.start()
            return future

    def _run(self, future: concurrent.futures.Future[bool]) -> None:
        try:
            with self._scope():
                answer = self._is_ready()
                if isinstance(answer, Coroutine):
                    answer = self._run_coroutine(answer)
        except BaseException as exc:  # noqa: BLE001 - any failure answers "not ready"
            logger.error(
                "is_ready() of model instance '%s' failed, the model is not ready: %s",
                self._name,
                python_error_text(exc),
            )
            future.set_result(False)
            return
        if not isinstance(answer, bool):
            logger.error(
                "is_ready() of model instance '%s' must return a boolean value, "
                "returned %s: the model is not ready",
                self._name,
                type(answer),
            )
            future.set_result(False)
            return
        future.set_result(answer)

    def stop(self) -> None:
        """Wait (briefly) for a check still running."""
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_TIMEOUT_S)


def all_ready(answers: list[concurrent.futures.Future[bool]], model_name: str) -> bool:
    """Whether every answer is True, all within READY_TIMEOUT_S (a model's instances are
    asked at once; the first False, or the bound, answers not ready)."""
    try:
        for answer in concurrent.futures.as_completed(answers, READY_TIMEOUT_S):
            if not answer.result():
                return False
    except concurrent.futures.TimeoutError:
        logger.error(
            "is_ready() of model '%s' did not answer within %.1f s: the model is not ready",
            model_name,
            READY_TIMEOUT_S,
        )
        return False
    return True
