"""The metrics endpoint: ``GET /metrics`` with the server's Prometheus text, on its own port.

``add_arguments`` adds tritonserver's metrics flags; ``options_from_args`` gives the
``Options`` fields they set (the metrics switches, interval and configuration, which the
server needs before models load); ``from_args`` builds the endpoint, or None with
``--allow-metrics=false``.

``MetricsFrontend`` serves HTTP/1.1 (keep-alive, httptools' parser) from an asyncio loop on
its own thread, ``infercore-metrics``, a ``LoopThread`` (loop_thread.py) it starts, owns and
joins. Rendering happens on that thread: a scrape reads statistics snapshots, nothing
blocks on inference.

States: created -> started (listening) -> stopped. ``stop`` closes the listener and the
open connections; it waits at most ``timeout`` seconds for the thread.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from typing import Any

import httptools

from ..errors import InvalidArgumentError
from ..loop_thread import LoopThread
from ..metrics_settings import parse_metrics_config
from ..server import Server
from .flag_types import boolean, integer

__all__ = ["MetricsFrontend", "add_arguments", "from_args", "options_from_args"]

logger = logging.getLogger(__name__)

# Triton's metrics server's header (recorded: tests/conformance/cases/devices.py), not
# prometheus_client's "text/plain; version=0.0.4; charset=utf-8"; Prometheus reads both
_CONTENT_TYPE = b"text/plain; charset=utf-8"




def add_arguments(parser: argparse.ArgumentParser) -> None:
    """tritonserver's metrics flags."""
    group = parser.add_argument_group("Metrics", "Prometheus text at /metrics.")
    group.add_argument("--allow-metrics", type=boolean, default=True, metavar="BOOL",
                       help="serve metrics (default true)")
    group.add_argument("--allow-gpu-metrics", type=boolean, default=True, metavar="BOOL",
                       help="nv_gpu_* metrics of each GPU, when there are GPUs (default true)")
    group.add_argument("--allow-cpu-metrics", type=boolean, default=True, metavar="BOOL",
                       help="nv_cpu_* metrics from /proc (default true)")
    group.add_argument("--metrics-address", default=None, metavar="ADDRESS",
                       help="default: the --http-address (as tritonserver)")
    group.add_argument("--metrics-port", type=integer, default=8002, metavar="PORT",
                       help="port of the Prometheus /metrics endpoint (default 8002)")
    # tritonserver reads the interval as an integer, though its help says float
    group.add_argument("--metrics-interval-ms", type=integer, default=2000, metavar="MS",
                       help="how often CPU metrics are re-read (default 2000)")
    group.add_argument("--metrics-config", action="append", default=[],
                       type=_metrics_setting, metavar="SETTING=VALUE",
                       help="counter_latencies, summary_latencies, summary_quantiles, "
                            "histogram_latencies (repeatable)")


def _metrics_setting(text: str) -> str:
    """One --metrics-config value, refused as tritonserver's parser refuses it."""
    try:
        parse_metrics_config([text])
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Options`` fields the metrics flags set (``Options(**..., **these)``).

    Raises InvalidArgumentError for a malformed ``--metrics-config``.
    """
    return {
        "metrics": args.allow_metrics,
        "gpu_metrics": args.allow_gpu_metrics,
        "cpu_metrics": args.allow_cpu_metrics,
        # tritonserver takes 0 and less; an interval is at least a millisecond here
        "metrics_interval": max(1, args.metrics_interval_ms),
        "metrics_configuration": parse_metrics_config(args.metrics_config),
    }


def from_args(server: Server, args: argparse.Namespace) -> MetricsFrontend | None:
    if not args.allow_metrics:
        return None
    address = args.metrics_address
    if address is None:  # tritonserver binds metrics where HTTP binds
        address = getattr(args, "http_address", None) or "0.0.0.0"
    return MetricsFrontend(server, address, args.metrics_port)


class MetricsFrontend:
    """Serves ``server.metrics()`` at ``GET /metrics``."""

    kind = "metrics"  # serving.py stops it last
    label = "metrics"
    starts_after_load = False  # `infercore serve` starts it before the models load

    def __init__(self, server: Server, address: str = "0.0.0.0", port: int = 8002) -> None:
        self._server = server
        self.address = address
        self._port = port
        self._state = "created"
        self._state_lock = threading.Lock()
        self._loop_thread = LoopThread("infercore-metrics", owner="metrics endpoint")
        self._listener: asyncio.Server | None = None
        self._connections: set[asyncio.Transport] = set()

    def __repr__(self) -> str:
        return f"MetricsFrontend(address={self.address!r}, port={self._port}, {self._state})"

    @property
    def port(self) -> int:
        """The port listened on (the one the OS chose when created with port 0)."""
        return self._port

    def start(self) -> None:
        """Listen and serve; raises OSError when the address cannot be bound."""
        with self._state_lock:
            if self._state != "created":
                raise InvalidArgumentError(f"the metrics endpoint is {self._state}")
            self._state = "started"
        try:
            self._loop_thread.start().call(self._listen())
        except BaseException:
            self._loop_thread.stop(timeout=1.0)
            with self._state_lock:
                self._state = "stopped"
            raise
        logger.info("Started Metrics Service at %s:%d", self.address, self._port)

    def stop(self, timeout: float = 30.0) -> None:
        """Close the listener and the connections; join the thread (at most ``timeout``)."""
        with self._state_lock:
            previous, self._state = self._state, "stopped"
        if previous != "started":
            return
        try:
            self._loop_thread.stop(self._close(), timeout=max(0.0, timeout) + 1.0)
        except TimeoutError:
            logger.error("the metrics endpoint's thread did not stop in time")

    def __enter__(self) -> MetricsFrontend:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- on the loop's thread --------------------------------------------------------------
    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(lambda: _Connection(self), self.address,
                                                  self._port)
        self._port = self._listener.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        listener = self._listener
        if listener is None:
            return
        listener.close()
        for transport in list(self._connections):
            transport.close()
        await listener.wait_closed()

    def _render(self) -> bytes:
        return self._server.metrics().encode("utf-8")


class _Connection(asyncio.Protocol):
    """One client connection: parse requests, answer each in order."""

    def __init__(self, frontend: MetricsFrontend) -> None:
        self._frontend = frontend
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._frontend._connections.add(self._transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self._frontend._connections.discard(self._transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._respond(400, b"upgrades are not supported\n", close=True)
        except httptools.HttpParserError:
            self._respond(400, b"bad request\n", close=True)

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_message_complete(self) -> None:
        url, self._url = self._url, b""
        path = httptools.parse_url(url).path
        method = self._parser.get_method()
        keep_alive = self._parser.should_keep_alive()
        # as Triton's metrics server: GET only, and any other path an empty 200
        if method != b"GET":
            self._respond(405, b'{"error":"Method Not Allowed"}', close=not keep_alive,
                          content_type=b"text/plain")
        elif path != b"/metrics":
            self._respond(200, b"", close=not keep_alive)
        else:
            try:
                body = self._frontend._render()
            except Exception:  # noqa: BLE001 - a scrape must not take the endpoint down
                logger.exception("rendering metrics failed")
                self._respond(500, b"failed to render metrics\n", close=not keep_alive)
                return
            self._respond(200, body, close=not keep_alive, content_type=_CONTENT_TYPE)

    def _respond(self, status: int, body: bytes, *, close: bool,
                 content_type: bytes = b"text/plain; charset=utf-8") -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        reason = {200: b"OK", 400: b"Bad Request", 405: b"Method Not Allowed",
                  500: b"Internal Server Error"}[status]
        header = (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n"
                  % (status, reason, content_type, len(body),
                     b"Connection: close\r\n" if close else b""))
        transport.write(header + body)
        if close:
            transport.close()
