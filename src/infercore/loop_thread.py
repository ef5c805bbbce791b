"""The one owner of an asyncio event loop on a thread: ``LoopThread``.

Every event loop infercore runs on a thread of its own is one of these: each network
frontend's (HTTP, gRPC, metrics), a RemoteServer's transport loop, and the loop a Python
model's ``async def execute`` runs on. The owner starts the thread, names it, and joins it.

Threads: ``start``, ``submit``, ``call``, ``call_soon`` and ``stop`` run on any caller's
thread; every coroutine handed over runs on the loop's thread, named ``name``, in a copy
of the caller's context (``asyncio.run_coroutine_threadsafe``). The thread is a daemon so
that a coroutine that never returns cannot keep the process from exiting.

States: created -> running -> stopped; ``_lock`` guards the state.

Stop, in order and within a deadline: ``final`` (the owner's own shutdown coroutine) runs
on the loop; the loop stops; on its thread the tasks still pending are cancelled and
given ``CANCEL_GRACE_S`` to end, async generators and the default executor are shut down,
``on_stop(loop)`` runs (a frontend detaches its loop from the engine there, before it
closes), and the loop closes. ``stop`` joins the thread within its ``timeout``; a thread
still running then (a coroutine blocking it) is logged and left behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .errors import InternalError, UnavailableError

__all__ = ["CANCEL_GRACE_S", "LoopThread", "new_event_loop"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

CANCEL_GRACE_S = 5.0  # for the tasks still pending at stop to end once cancelled


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (Linux/macOS), else asyncio's (a bit slower)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """An asyncio event loop running on a daemon thread this object starts and joins.

    ``owner`` names who owns it in error messages ("RemoteServer", "HTTP frontend", ...);
    ``new_loop`` makes the loop; ``on_start(loop)`` and ``on_stop(loop)`` run on the
    loop's thread, before it serves and before it closes.
    """

    def __init__(self, name: str, *, owner: str = "event loop owner",
                 new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
                 on_start: Callable[[asyncio.AbstractEventLoop], None] | None = None,
                 on_stop: Callable[[asyncio.AbstractEventLoop], None] | None = None) -> None:
        self.name = name
        self._owner = owner
        self._new_loop = new_loop
        self._on_start = on_start
        self._on_stop = on_stop
        self._lock = threading.Lock()
        self._state = "created"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"LoopThread({self.name!r}, {self._state})"

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or self._state != "running":
            raise UnavailableError(f"the {self._owner}'s event loop is not running")
        return loop

    @property
    def running(self) -> bool:
        return self._state == "running"

    def on_loop_thread(self) -> bool:
        """Whether the caller is the loop's own thread (where blocking would deadlock)."""
        return threading.current_thread() is self._thread

    def start(self) -> LoopThread:
        """Start the loop's thread and return once the loop runs (later calls do nothing
        while it runs). An error of ``on_start`` is raised here, the thread joined."""
        with self._lock:
            if self._state == "running":
                return self
            if self._state == "stopped":
                raise UnavailableError(f"the {self._owner} is stopped")
            loop = self._new_loop()
            started = threading.Event()
            failure: list[BaseException] = []
            thread = threading.Thread(target=self._run, args=(loop, started, failure),
                                      name=self.name, daemon=True)
            thread.start()
            started.wait()
            if failure:
                thread.join()
                self._state = "stopped"
                raise failure[0]
            self._loop, self._thread, self._state = loop, thread, "running"
        return self

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` on the loop; cancelling the future cancels it."""
        if self._state != "running":
            coroutine.close()
            raise UnavailableError(f"the {self._owner} is stopped")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop's thread, soon."""
        self.loop.call_soon_threadsafe(callback, *args)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and block the calling thread for its result."""
        if self.on_loop_thread():
            coroutine.close()
            raise InternalError(f"a blocking {self._owner} call cannot run on its own event "
                                "loop; use the a-prefixed async method")
        return self.submit(coroutine).result()

    async def acall(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and await its result from any loop."""
        if asyncio.get_running_loop() is self._loop:
            return await coroutine
        return await asyncio.wrap_future(self.submit(coroutine))

    def stop(self, final: Coroutine[Any, Any, Any] | None = None, *,
             timeout: float | None = None) -> bool:
        """Run ``final`` on the loop, then stop it, clean up and join the thread within
        ``timeout`` seconds (None: wait). False when the thread is still running then."""
        if self.on_loop_thread():
            if final is not None:
                final.close()
            raise InternalError(f"a {self._owner} cannot be stopped from its own event loop "
                                "(a response callback); stop it from another thread")
        with self._lock:
            previous, self._state = self._state, "stopped"
            loop, thread = self._loop, self._thread
        if previous != "running" or loop is None or thread is None:
            if final is not None:
                final.close()
            return True
        try:
            if final is not None:
                asyncio.run_coroutine_threadsafe(final, loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        if thread.is_alive():
            logger.warning("thread %s did not stop within %.1f s; left running", self.name,
                           timeout or 0.0)
            return False
        return True

    # -- the loop's thread -----------------------------------------------------------------
    def _run(self, loop: asyncio.AbstractEventLoop, started: threading.Event,
             failure: list[BaseException]) -> None:
        asyncio.set_event_loop(loop)
        try:
            if self._on_start is not None:
                self._on_start(loop)
        except BaseException as exc:  # noqa: BLE001 - raised by start()
            failure.append(exc)
            started.set()
            asyncio.set_event_loop(None)
            loop.close()
            return
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            try:
                _cancel_pending(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
                if self._on_stop is not None:
                    self._on_stop(loop)  # nothing is left in flight on the loop now
            except Exception:  # noqa: BLE001 - the loop closes whatever failed
                logger.exception("cleaning up the event loop of %s failed", self.name)
            finally:
                asyncio.set_event_loop(None)
                loop.close()


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    pending = asyncio.all_tasks(loop)
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.wait(pending, timeout=CANCEL_GRACE_S))
