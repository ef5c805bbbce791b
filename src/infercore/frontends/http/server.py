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

The SageMaker and Vertex AI frontends (sagemaker.py, vertex_ai.py) are HttpFrontends with
their own routes (``_handler``), inference framing (``dialect``) and request headers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from ...caller import Caller
from ...server import Server
from ..flag_types import boolean, int_at_least, integer
from ..loop_frontend import LoopThreadFrontend
from ..restricted import HttpRestrictionAction, RestrictedFeatures, guard_http
from ..shm import SystemSharedMemory, for_clients
from .busy_poll import BusyPoll
from .infer import KSERVE, InferDialect
from .messages import HttpRequest
from .protocol import WANTED_HEADERS, ConnectionSet, HttpConnection
from .routes import HttpRouter, Result

__all__ = ["HttpFrontend", "HttpOptions", "add_arguments", "from_args"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024  # Triton's --http-max-input-size default
DEFAULT_BUSY_POLL_US = 200
MAX_BUSY_POLL_US = 1_000_000


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """How the HTTP frontend listens and what it accepts."""

    address: str = "0.0.0.0"
    port: int = 8000  # 0 picks a free port (see HttpFrontend.port)
    thread_count: int = 8  # threads for blocking endpoints (model load/unload)
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE  # bytes of request body, decompressed
    header_forward_pattern: str = ""  # regex: matching headers become request parameters
    reuse_port: bool = False
    # --http-restricted-api: categories that answer only requests carrying a header
    restricted: RestrictedFeatures = field(default_factory=RestrictedFeatures)
    # µs the loop keeps polling after a request or an answer, 0: never (busy_poll.py)
    busy_poll_us: int = DEFAULT_BUSY_POLL_US
    # --allow-client-shm: clients may use shared-memory regions (shm.py)
    allow_client_shm: bool = False





def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's HTTP flags, in its order, then infercore's own."""
    group = parser.add_argument_group("HTTP", "The KServe v2 HTTP/REST endpoint with Triton's "
                                       "extensions.")
    group.add_argument("--allow-http", type=boolean, default=True, metavar="BOOL",
                       help="serve HTTP/REST (default true)")
    group.add_argument("--http-address", default="0.0.0.0", metavar="ADDRESS",
                       help="address the HTTP endpoint binds (default 0.0.0.0)")
    group.add_argument("--http-port", type=integer, default=8000, metavar="PORT",
                       help="HTTP port; 0 picks a free one (default 8000)")
    group.add_argument("--reuse-http-port", type=boolean, default=False, metavar="BOOL",
                       help="let several servers bind the HTTP port (SO_REUSEPORT)")
    group.add_argument(
        "--http-header-forward-pattern", default="", metavar="REGEX",
        help="forward request headers whose name matches (case-insensitively, anywhere in "
             "the name) as inference request parameters")
    group.add_argument(
        "--http-thread-count", type=integer, default=8, metavar="N",
        help="threads for blocking endpoints (model load/unload; at least 1); requests are "
             "served by one event-loop thread")
    group.add_argument(
        "--http-restricted-api", action=HttpRestrictionAction, default=RestrictedFeatures(),
        metavar="CATEGORIES:KEY=VALUE",
        help="answer the endpoints of these comma-separated categories (health, metadata, "
             "inference, shared-memory, model-config, model-repository, statistics, trace, "
             "logging) only for requests with the header KEY: VALUE; repeatable, one group "
             "per flag")
    group.add_argument(
        "--http-max-input-size", type=int_at_least(1), default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES", help="largest accepted request body, after decompression "
                              "(default 64 MiB; infercore's own flag)")
    group.add_argument(
        "--http-busy-poll-us", type=int_at_least(0, at_most=MAX_BUSY_POLL_US),
        default=DEFAULT_BUSY_POLL_US, metavar="MICROSECONDS",
        help="after reading a request or writing a response, the event loop polls for "
             "this long instead of sleeping, to answer quick events without a wake-up; "
             f"0 turns it off (default {DEFAULT_BUSY_POLL_US}; infercore's own flag)")


def from_args(server: Server, args: argparse.Namespace) -> HttpFrontend | None:
    if not args.allow_http:
        return None
    return HttpFrontend(server, HttpOptions(
        address=args.http_address, port=args.http_port,
        thread_count=max(1, args.http_thread_count),  # tritonserver takes 0 and less too
        max_input_size=args.http_max_input_size,
        header_forward_pattern=args.http_header_forward_pattern,
        reuse_port=args.reuse_http_port, restricted=args.http_restricted_api,
        busy_poll_us=args.http_busy_poll_us, allow_client_shm=args.allow_client_shm))


class HttpFrontend(LoopThreadFrontend):
    """Serves ``server`` over HTTP until ``stop``; ``start`` returns once listening."""

    kind = "http"
    label = "HTTP"
    service_name = "HTTPService"
    # what the SageMaker and Vertex AI frontends, built on this one, change
    dialect: InferDialect = KSERVE
    wanted_headers: frozenset[bytes] = WANTED_HEADERS

    def __init__(self, server: Server, options: HttpOptions | None = None,
                 shared_memory: SystemSharedMemory | None = None) -> None:
        self.options = options or HttpOptions()
        super().__init__(server, self.options.address, self.options.thread_count,
                         f"infercore-{self.kind}-admin")
        # HTTP and gRPC see the same registered regions: one registry per server.
        self._shm = for_clients(server, self.options.allow_client_shm, shared_memory)

    def __enter__(self) -> HttpFrontend:
        self.start()
        return self

    def _handler(self, router: HttpRouter) -> Callable[[HttpRequest], Result]:
        """What answers each request (on the loop thread): the KServe routes here."""
        return router.handle

    async def _serve(self) -> None:
        options = self.options
        self._stop_requested = asyncio.Event()
        connections = ConnectionSet()
        assert self._executor is not None
        window = options.busy_poll_us
        if (not isinstance(window, int) or isinstance(window, bool)
                or not 0 <= window <= MAX_BUSY_POLL_US):
            raise ValueError(f"busy_poll_us must be a whole number of microseconds from 0 "
                             f"(off) to {MAX_BUSY_POLL_US}, not {window!r}")
        busy_poll = BusyPoll(asyncio.get_running_loop(), window) if window else None
        router = HttpRouter(self._server, self._shm, self._executor,
                            max_input_size=options.max_input_size,
                            header_forward_pattern=options.header_forward_pattern,
                            busy_poll=busy_poll, dialect=self.dialect, large=self._large,
                            caller=self._caller or Caller.LOOP)
        # The restricted header is not among those the connection reads by default.
        keep_raw = bool(options.header_forward_pattern) or bool(options.restricted)
        handle = guard_http(self._handler(router), options.restricted)
        wanted = self.wanted_headers
        tracer = self._server.tracer

        def connection() -> HttpConnection:
            return HttpConnection(handle, connections,
                                  max_input_size=options.max_input_size,
                                  keep_raw_headers=keep_raw, busy_poll=busy_poll,
                                  wanted_headers=wanted, large=self._large,
                                  tracer=tracer, label=self.label)

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
