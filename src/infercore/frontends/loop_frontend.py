"""The lifecycle the HTTP and gRPC frontends share: serving from an event loop on a thread.

Threads: ``start`` and ``stop`` run on the caller's thread; ``_serve`` (the subclass's
server) runs as a task on the frontend's own event loop (uvloop when installed), on a
``LoopThread`` named ``infercore-<kind>`` (infercore/loop_thread.py, the one owner of a
loop on a thread, which starts, names and joins it); repository work goes to a small
thread pool the frontend also owns, and large requests to a thread of their own,
``infercore-<kind>-large`` (large_requests.py). States: created -> started -> stopped (a
failed start ends stopped too).

``_serve`` binds, sets ``_port``, calls ``_listening.set()``, waits for
``_stop_requested``, then lets in-flight work finish within ``_stop_timeout`` seconds.

The loop is attached to the engine (``Server.attach_loop``) before ``_serve`` starts, and
``_caller``, the attachment, is the ``caller=`` of the requests its handlers start on it;
it is detached on the loop's thread after ``_serve`` ended and before the loop closes
(``LoopThread``'s ``on_stop``), so the engine finishes there whatever it still had in
flight from this loop.

Stop, within deadlines: ``_stop_requested`` is set; ``_serve`` gets ``_stop_timeout`` for
in-flight work and ``STOP_SLACK_S`` more to end; then the loop thread stops (tasks left
are cancelled, the loop detached and closed, the thread joined), then the thread pools.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..caller import Caller
from ..errors import InvalidArgumentError, UnavailableError
from ..loop_thread import CANCEL_GRACE_S, LoopThread, new_event_loop
from .large_requests import LargeRequests

if TYPE_CHECKING:
    from ..server import Server

__all__ = ["STOP_SLACK_S", "LoopThreadFrontend"]

logger = logging.getLogger(__name__)

STOP_SLACK_S = 5.0  # past the stop timeout, for ``_serve`` to close its listener and end


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
        self._loop_thread: LoopThread | None = None
        self._serving: concurrent.futures.Future[None] | None = None  # ``_serve``'s task
        self._executor: ThreadPoolExecutor | None = None
        self._large: LargeRequests | None = None
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
        self._loop_thread = LoopThread(f"infercore-{self.kind}",
                                       owner=f"{self.label} frontend",
                                       new_loop=new_event_loop, on_start=self._attach,
                                       on_stop=self._detach)
        try:
            self._loop_thread.start()
            self._serving = self._loop_thread.submit(self._serve())
        except BaseException as exc:  # noqa: BLE001 - attaching the loop failed
            self._start_error = exc
        else:
            self._serving.add_done_callback(self._served)
            self._listening.wait()
        if self._start_error is not None:
            self._loop_thread.stop(timeout=CANCEL_GRACE_S + 1.0)
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
        loop_thread, serving = self._loop_thread, self._serving
        assert loop_thread is not None and serving is not None
        assert self._executor is not None and self._large is not None
        stop_requested = self._stop_requested
        if stop_requested is not None:
            try:
                loop_thread.call_soon(stop_requested.set)
            except (RuntimeError, UnavailableError):  # the loop already ended: just join
                pass
        try:
            serving.result(self._stop_timeout + STOP_SLACK_S)
        except concurrent.futures.TimeoutError:
            logger.error("the %s frontend did not stop in time; cancelling it", self.label)
        except BaseException:  # noqa: BLE001, S110 - ``_served`` logged it
            pass
        loop_thread.stop(timeout=CANCEL_GRACE_S + 1.0)
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._large.shutdown()

    def __enter__(self) -> LoopThreadFrontend:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- on the loop's thread --------------------------------------------------------------
    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._caller = self._server.attach_loop(loop)

    def _detach(self, _loop: asyncio.AbstractEventLoop) -> None:
        if self._caller is not None:
            self._server.detach_loop(self._caller)  # before the loop closes

    def _served(self, serving: concurrent.futures.Future[None]) -> None:
        error = None if serving.cancelled() else serving.exception()
        if error is not None:
            if not self._listening.is_set():
                self._start_error = error  # raised by start()
            else:
                logger.error("the %s frontend stopped on an error", self.label,
                             exc_info=error)
        self._listening.set()

    async def _serve(self) -> None:
        raise NotImplementedError
