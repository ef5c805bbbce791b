"""The event loop a RemoteServer's transport runs on, on a thread the server owns.

Threads: ``start``, ``call``, ``submit`` and ``stop`` run on any caller's thread; every
coroutine handed over runs on the loop's own thread, named ``infercore-remote``. The
gRPC and HTTP clients (grpc.aio channels, aiohttp sessions) are bound to the loop that
created them, so one loop serves sync callers and asyncio callers on any loop alike.

States: created -> running -> stopped. ``_lock`` guards the state and the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..errors import InternalError, UnavailableError

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running on a daemon thread this object starts and joins."""

    def __init__(self, name: str = "infercore-remote") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._state = "created"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            raise UnavailableError("the remote server's event loop is not running")
        return loop

    @property
    def running(self) -> bool:
        return self._state == "running"

    def on_loop_thread(self) -> bool:
        """Whether the caller is the loop's own thread (where blocking would deadlock)."""
        return threading.current_thread() is self._thread

    def start(self) -> None:
        """Start the loop's thread (once; later calls do nothing while it runs)."""
        with self._lock:
            if self._state == "running":
                return
            if self._state == "stopped":
                raise UnavailableError("the remote server is stopped")
            loop = asyncio.new_event_loop()
            started = threading.Event()
            thread = threading.Thread(target=self._run, args=(loop, started), name=self._name,
                                      daemon=True)  # a forgotten stop() must not hang exit
            thread.start()
            started.wait()
            self._loop, self._thread, self._state = loop, thread, "running"

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` on the loop; cancelling the future cancels it."""
        if self._state != "running":
            coroutine.close()
            raise UnavailableError("the remote server is stopped")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call_soon(self, callback: Any, *args: Any) -> None:
        """Run ``callback(*args)`` on the loop's thread, soon."""
        self.loop.call_soon_threadsafe(callback, *args)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and block the calling thread for its result."""
        if self.on_loop_thread():
            coroutine.close()
            raise InternalError("a blocking RemoteServer call cannot run on its own event "
                                "loop; use the a-prefixed async method")
        return self.submit(coroutine).result()

    async def acall(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and await its result from any other loop."""
        if asyncio.get_running_loop() is self._loop:
            return await coroutine
        return await asyncio.wrap_future(self.submit(coroutine))

    def stop(self, final: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``final`` (the transport's shutdown) on the loop, then stop and join it."""
        if self.on_loop_thread():
            if final is not None:
                final.close()
            raise InternalError("a RemoteServer cannot be stopped from its own event loop "
                                "(a response callback); stop it from another thread")
        with self._lock:
            if self._state != "running":
                self._state = "stopped"
                if final is not None:
                    final.close()
                return
            self._state = "stopped"
            loop, thread = self._loop, self._thread
        assert loop is not None and thread is not None
        try:
            if final is not None:
                asyncio.run_coroutine_threadsafe(final, loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
