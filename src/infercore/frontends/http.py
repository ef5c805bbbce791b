"""The KServe v2 HTTP/REST frontend with Triton's extensions: flags and lifecycle.

``add_arguments`` adds tritonserver's HTTP flags to ``infercore serve``; ``from_args``
builds the frontend they ask for. ``HttpFrontend`` serves one Server over HTTP/1.1 from
an event loop (uvloop when installed) running on its own thread, ``infercore-http``,
which it starts, owns and joins. Blocking endpoint work (model load and unload) runs on
a small pool, ``infercore-http-admin-*``, that it owns too.

Threads: ``start`` and ``stop`` are called from the owner's thread; everything else
happens on the loop thread. Shutdown (``stop``): stop accepting, close idle
connections, let in-flight requests finish until the timeout, then cancel what is left
(which cancels the inference requests), close the loop and join the threads.

States: created -> started (listening) -> stopped. A stopped frontend cannot restart.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import InvalidArgumentError
from ..server import Server
from .http_protocol import ConnectionSet, HttpConnection
from .http_routes import HttpRouter
from .shm import SystemSharedMemory, registry_for

__all__ = ["HttpFrontend", "HttpOptions", "add_arguments", "from_args"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024  # Triton's --http-max-input-size default


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """How the HTTP frontend listens and what it accepts."""

    address: str = "0.0.0.0"
    port: int = 8000  # 0 picks a free port (see HttpFrontend.port)
    thread_count: int = 8  # threads for blocking endpoints (model load/unload)
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE  # bytes of request body, decompressed
    header_forward_pattern: str = ""  # regex: matching headers become request parameters
    reuse_port: bool = False


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value '{text}'")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port '{text}'") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in [0, 65535], got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's HTTP flags."""
    group = parser.add_argument_group("HTTP/REST frontend (KServe v2 + Triton extensions)")
    group.add_argument("--allow-http", type=_bool, default=True, metavar="BOOL",
                       help="serve HTTP/REST (default true)")
    group.add_argument("--http-port", type=_port, default=8000, metavar="PORT")
    group.add_argument("--http-address", default="0.0.0.0", metavar="ADDRESS")
    group.add_argument("--reuse-http-port", type=_bool, default=False, metavar="BOOL",
                       help="let several servers bind the HTTP port (SO_REUSEPORT)")
    group.add_argument(
        "--http-thread-count", type=_positive, default=8, metavar="N",
        help="threads for blocking endpoints (model load/unload); requests are served by "
             "one event-loop thread")
    group.add_argument(
        "--http-max-input-size", type=_positive, default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES", help="largest accepted request body, after decompression "
                              "(default 64 MiB)")
    group.add_argument(
        "--http-header-forward-pattern", default="", metavar="REGEX",
        help="forward request headers whose name matches as inference request parameters")


def from_args(server: Server, args: argparse.Namespace) -> HttpFrontend | None:
    if not args.allow_http:
        return None
    return HttpFrontend(server, HttpOptions(
        address=args.http_address, port=args.http_port, thread_count=args.http_thread_count,
        max_input_size=args.http_max_input_size,
        header_forward_pattern=args.http_header_forward_pattern,
        reuse_port=args.reuse_http_port))


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop is Linux/macOS only; asyncio's loop works, slower
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class HttpFrontend:
    """Serves ``server`` over HTTP until ``stop``; ``start`` returns once listening."""

    def __init__(self, server: Server, options: HttpOptions | None = None,
                 shared_memory: SystemSharedMemory | None = None) -> None:
        self._server = server
        self.options = options or HttpOptions()
        # HTTP and gRPC see the same registered regions: one registry per server.
        self._shm = shared_memory if shared_memory is not None else registry_for(server)
        self._thread: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._listening = threading.Event()
        self._start_error: BaseException | None = None
        self._stop_timeout = 0.0
        self._port = 0
        self._state_lock = threading.Lock()
        self._state = "created"

    def __repr__(self) -> str:
        return (f"HttpFrontend(address={self.options.address!r}, port={self._port}, "
                f"{self._state})")

    @property
    def port(self) -> int:
        """The port listened on (the one chosen by the OS when options.port is 0)."""
        return self._port

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Listen and serve; raises OSError when the address cannot be bound."""
        with self._state_lock:
            if self._state != "created":
                raise InvalidArgumentError(f"the HTTP frontend is {self._state}")
            self._state = "started"
        self._executor = ThreadPoolExecutor(self.options.thread_count,
                                            thread_name_prefix="infercore-http-admin")
        self._thread = threading.Thread(target=self._run, name="infercore-http", daemon=True)
        self._thread.start()
        self._listening.wait()
        if self._start_error is not None:
            self._thread.join()
            self._executor.shutdown(wait=False)
            with self._state_lock:
                self._state = "stopped"
            raise self._start_error
        logger.info("Started HTTPService at %s:%d", self.options.address, self._port)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, finish in-flight requests within ``timeout`` s, then close."""
        with self._state_lock:
            if self._state != "started":
                self._state = "stopped"
                return
            self._state = "stopped"
        loop, stop_requested = self._loop, self._stop_requested
        self._stop_timeout = max(0.0, timeout)
        if loop is not None and stop_requested is not None:
            try:
                loop.call_soon_threadsafe(stop_requested.set)
            except RuntimeError:  # the loop already ended (it failed): just join
                pass
        assert self._thread is not None and self._executor is not None
        self._thread.join(self._stop_timeout + 5.0)
        if self._thread.is_alive():
            logger.error("the HTTP frontend's thread did not stop in time")
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> HttpFrontend:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- the loop thread ---------------------------------------------------------------------
    def _run(self) -> None:
        loop = _new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start() or logged
            if not self._listening.is_set():
                self._start_error = exc
            else:
                logger.exception("the HTTP frontend stopped on an error")
        finally:
            self._listening.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _serve(self) -> None:
        options = self.options
        self._stop_requested = asyncio.Event()
        connections = ConnectionSet()
        assert self._executor is not None
        router = HttpRouter(self._server, self._shm, self._executor,
                            max_input_size=options.max_input_size,
                            header_forward_pattern=options.header_forward_pattern)
        keep_raw = bool(options.header_forward_pattern)

        def connection() -> HttpConnection:
            return HttpConnection(router.handle, connections,
                                  max_input_size=options.max_input_size,
                                  keep_raw_headers=keep_raw)

        listener = await asyncio.get_running_loop().create_server(
            connection, options.address or None, options.port, reuse_address=True,
            reuse_port=options.reuse_port or None, backlog=1024)
        sockets = listener.sockets or ()
        self._port = next((s.getsockname()[1] for s in sockets
                           if s.family in (socket.AF_INET, socket.AF_INET6)), options.port)
        self._listening.set()
        await self._stop_requested.wait()
        listener.close()
        connections.drain()
        try:
            await asyncio.wait_for(connections.empty.wait(), self._stop_timeout)
        except asyncio.TimeoutError:
            left = list(connections.connections)
            logger.warning("HTTP frontend stopping with %d request(s) still in flight",
                           len(left))
            for conn in left:
                conn.abort()
        # Let the aborted connections' cancellations and close callbacks run.
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
