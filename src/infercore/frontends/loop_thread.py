"""The lifecycle every network frontend shares: an event loop on a thread it owns.

Threads: ``start`` and ``stop`` run on the caller's thread; ``_serve`` (the subclass's
server) runs on the frontend's own thread, named ``infercore-<kind>``, with its own event
loop (uvloop when installed); repository work goes to a small thread pool the frontend
also owns, and large requests to a thread of their own, ``infercore-<kind>-large``
(large_requests.py). States: created -> started -> stopped (a failed start ends stopped too).

``_serve`` binds, sets ``_port``, calls ``_listening.set()``, waits for
``_stop_requested``, then lets in-flight work finish within ``_stop_timeout`` seconds.

The loop is attached to the engine (``Server.attach_loop``) before ``_serve`` starts, and
``_caller``, the attachment, is the ``caller=`` of the requests its handlers start on it;
it is detached on the loop's thread after ``_serve`` ended and before the loop closes, so
the engine finishes there whatever it still had in flight from this loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..caller import Caller
from ..errors import InvalidArgumentError
from .large_requests import LargeRequests

if TYPE_CHECKING:
    from ..server import Server

__all__ = ["LoopThreadFrontend", "new_event_loop"]

logger = logging.getLogger(__name__)


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop is Linux/macOS only; asyncio's loop works, a bit slower
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThreadFrontend:
    """Base of the HTTP and gRPC frontends: start, stop and the loop thread."""

    kind = "frontend"  # "http", "grpc": names the threads
    label = "network"  # "HTTP", "gRPC": in messages
    service_name = "service"  # as tritonserver logs it when listening
    starts_after_load = False  # `infercore serve` starts it before the models load

    def __init__(self, server: Server, address: str, executor_threads: int,
                 executor_name: str) -> None:
        self._server = server
        self._address = address
        self._executor_threads = executor_threads
        self._executor_name = executor_name
        self._thread: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._large: LargeRequests | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._caller: Caller | None = None  # the loop's attachment, while it serves
        self._stop_requested: asyncio.Event | None = None
        self._listening = threading.Event()
        self._start_error: BaseException | None = None
        self._stop_timeout = 0.0
        self._port = 0
        self._state_lock = threading.Lock()
        self._state = "created"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(address={self._address!r}, port={self._port}, "
                f"{self._state})")

    @property
    def address(self) -> str:
        return self._address

    @property
    def port(self) -> int:
        """The port listened on (the one the OS chose when the configured port is 0)."""
        return self._port

    def start(self) -> None:
        """Listen and serve; raises OSError when the address cannot be bound."""
        with self._state_lock:
            if self._state != "created":
                raise InvalidArgumentError(f"the {self.label} frontend is {self._state}")
            self._state = "started"
        self._executor = ThreadPoolExecutor(self._executor_threads,
                                            thread_name_prefix=self._executor_name)
        self._large = LargeRequests(f"infercore-{self.kind}-large")
        self._thread = threading.Thread(target=self._run, name=f"infercore-{self.kind}",
                                        daemon=True)
        self._thread.start()
        self._listening.wait()
        if self._start_error is not None:
            self._thread.join()
            self._executor.shutdown(wait=False)
            self._large.shutdown()
            with self._state_lock:
                self._state = "stopped"
            raise self._start_error
        logger.info("Started %s at %s:%d", self.service_name, self._address, self._port)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, finish in-flight work within ``timeout`` s, cancel the rest."""
        with self._state_lock:
            if self._state != "started":
                self._state = "stopped"
                return
            self._state = "stopped"
        self._stop_timeout = max(0.0, timeout)
        loop, stop_requested = self._loop, self._stop_requested
        if loop is not None and stop_requested is not None:
            try:
                loop.call_soon_threadsafe(stop_requested.set)
            except RuntimeError:  # the loop already ended (it failed): just join
                pass
        assert self._thread is not None and self._executor is not None
        assert self._large is not None
        self._thread.join(self._stop_timeout + 5.0)
        if self._thread.is_alive():
            logger.error("the %s frontend's thread did not stop in time", self.label)
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._large.shutdown()

    def __enter__(self) -> LoopThreadFrontend:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- the loop thread -------------------------------------------------------------------
    def _run(self) -> None:
        loop = new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._caller = attached = self._server.attach_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start() or logged
            if not self._listening.is_set():
                self._start_error = exc
            else:
                logger.exception("the %s frontend stopped on an error", self.label)
        finally:
            self._listening.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                # before it closes: nothing is left in flight there
                self._server.detach_loop(attached)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _serve(self) -> None:
        raise NotImplementedError
