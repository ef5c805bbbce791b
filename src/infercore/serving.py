"""Network frontends started from an in-process Server: ``server.serve_http(port=0)``.

    with Server(model_repository="models") as server:
        http = server.serve_http(address="127.0.0.1", port=0)   # an Endpoint, listening
        grpc = server.serve_grpc(port=8001)
        metrics = server.serve_metrics(port=8002)
        client = tritonclient.http.InferenceServerClient(http.url)
        ...
        http.stop()                  # or `with server.serve_http(...) as http:`
    # stopping the server stops the endpoints still running

The same HTTP/REST, gRPC and metrics frontends ``infercore serve`` runs (frontends/),
with the same settings under the names their option classes use (``thread_count``,
``max_input_size``, ``header_forward_pattern``, ``reuse_port``, ``restricted`` for HTTP;
every ``GrpcOptions`` field for gRPC): Triton's ``tritonfrontend`` package
(``KServeHttp.Server(server, options).start()``) does this for its server. One endpoint
of each kind runs per server at a time; after ``stop`` another may be started.

``Server`` reaches this module only through those methods, importing it when first
called, and this module names the frontends by import string (``_FRONTENDS``), importing
one when an endpoint of its kind first starts: nothing imports ``frontends/``, so the
frontends, which use the server's public API, sit above it with no import cycle
(docs/architecture.md).

``infercore serve`` builds its frontends from the command line (each frontend module's
``from_args``) and hands each to ``serve_frontend``: the same Endpoint, registered on the
server the same way, so one module starts and stops every endpoint, in-process or not.

Shutdown (``stop_in_order``, which ``Server.stop`` calls): the HTTP, gRPC and other
network endpoints stop first, together, within the exit timeout (they stop accepting,
then let their requests finish), then the engine stops (``stop_engine``: unload, finalize),
then the metrics endpoint, last, so a scrape still answers while the models unload.

Threads: each frontend owns its threads (an event loop on a thread, loop_thread.py);
``start_endpoint``, ``serve_frontend`` and ``Endpoint.stop`` run on the caller's thread;
``stop_endpoints`` stops several at once on short-lived threads ``infercore-stop-<kind>``
it starts and joins.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .errors import AlreadyExistsError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from .server import Server

__all__ = ["Endpoint", "Frontend", "PortInUseError", "serve_frontend", "start_endpoint",
           "stop_endpoints", "stop_in_order"]

_LABELS = {"http": "HTTP", "grpc": "gRPC", "metrics": "metrics"}
_DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
_WILDCARDS = ("", "0.0.0.0", "::")


class PortInUseError(UnavailableError):
    """An endpoint's address and port are taken; ``socket`` is "address:port"."""

    def __init__(self, message: str, socket: str) -> None:
        super().__init__(message)
        self.socket = socket


class Frontend(Protocol):
    """What an endpoint runs: a frontend of frontends/ (or a test's)."""

    label: str  # "HTTP", "gRPC", "metrics", ...: in messages

    @property
    def port(self) -> int: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 30.0) -> None: ...


class Endpoint:
    """A network frontend serving a Server: ``kind`` "http", "grpc" or "metrics".

    ``port`` is the port listened on (the one the OS chose for port 0); ``url`` is
    "host:port" as tritonclient takes it (a wildcard address reads as 127.0.0.1).
    """

    __slots__ = ("kind", "address", "_requested_port", "_server", "_frontend", "_state",
                 "_lock")

    def __init__(self, server: Server, kind: str, address: str, port: int,
                 frontend: Frontend) -> None:
        self.kind = kind
        self.address = address
        self._requested_port = port
        self._server = server
        self._frontend = frontend
        self._state = "created"
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Endpoint(kind={self.kind!r}, url={self.url!r}, {self._state})"

    @property
    def port(self) -> int:
        return self._frontend.port or self._requested_port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.address in _WILDCARDS else self.address
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._state == "running"

    def stop(self, timeout: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish within ``timeout`` seconds
        (default: the server's exit timeout), cancel the rest, free the port. Idempotent."""
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
        try:
            self._frontend.stop(self._server.exit_timeout if timeout is None
                                else max(0.0, float(timeout)))
        finally:
            self._server._remove_endpoint(self)

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _start(self) -> None:
        with self._lock:
            if self._state != "created":  # the server stopped first
                raise UnavailableError("server is not running")
        try:
            self._frontend.start()
        except BaseException as exc:
            with self._lock:
                self._state = "stopped"  # a failed start leaves nothing running
            if isinstance(exc, (TypeError, ValueError)):  # e.g. thread_count=0
                raise InvalidArgumentError(
                    f"invalid {self._frontend.label} frontend settings: {exc}") from exc
            if isinstance(exc, OSError):  # the address cannot be bound: in use, ...
                where = f"{self.address}:{self._requested_port}"
                reason = exc.strerror or str(exc)
                message = f"failed to start the {self._frontend.label} frontend at {where}: "
                if exc.errno == errno.EADDRINUSE or "already in use" in reason:
                    raise PortInUseError(message + "address already in use", where) from exc
                raise UnavailableError(message + reason) from exc
            raise
        with self._lock:
            if self._state == "created":
                self._state = "running"


def start_endpoint(server: Server, kind: str, *, address: str | None = None,
                   port: int | None = None, **settings: Any) -> Endpoint:
    """Start the ``kind`` frontend on ``server``; raises once it cannot listen."""
    address = "0.0.0.0" if address is None else address
    port = _DEFAULT_PORTS[kind] if port is None else port
    if not isinstance(address, str):
        raise InvalidArgumentError(f"address must be a string, got {address!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidArgumentError(f"port must be an integer in [0, 65535], got {port!r}")
    if kind == "metrics" and not server.options.metrics:
        raise UnavailableError(
            "metrics are disabled (Options.metrics is False): no metrics endpoint to serve")
    return serve_frontend(server, kind, _frontend(server, kind, address, port, settings),
                          address=address, port=port)


def serve_frontend(server: Server, kind: str, frontend: Frontend, *, address: str,
                   port: int) -> Endpoint:
    """Start ``frontend`` (already built, e.g. from the command line) as ``server``'s
    ``kind`` endpoint; raises once it cannot listen. One endpoint per kind at a time."""
    endpoint = Endpoint(server, kind, address, port, frontend)
    running = server._add_endpoint(endpoint)
    if running is not None:
        raise AlreadyExistsError(
            f"the {frontend.label} frontend of this server is already serving at "
            f"{running.url}; stop it first")
    try:
        endpoint._start()
    except BaseException:
        server._remove_endpoint(endpoint)
        raise
    if not endpoint.running:  # the server stopped while it started
        endpoint.stop(0.0)
        raise UnavailableError("server is not running")
    return endpoint


def stop_endpoints(endpoints: list[Endpoint], timeout: float) -> None:
    """Stop ``endpoints`` at once (none keeps accepting while another drains), each within
    ``timeout`` real seconds from now (an edge: sockets drain in real time, clock.py)."""
    if len(endpoints) == 1:
        endpoints[0].stop(max(0.0, timeout))
        return
    deadline = time.monotonic() + timeout
    threads = [threading.Thread(target=endpoint.stop,
                                args=(max(0.0, deadline - time.monotonic()),),
                                name=f"infercore-stop-{endpoint.kind}", daemon=True)
               for endpoint in endpoints]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # each frontend's stop is bounded by its timeout


def stop_in_order(endpoints: Sequence[Endpoint], timeout: float,
                  stop_engine: Callable[[], None]) -> None:
    """The shutdown order: the network endpoints together within ``timeout`` real
    seconds, then ``stop_engine()``, then the metrics endpoint (at once)."""
    stop_endpoints([e for e in endpoints if e.kind != "metrics"], timeout)
    try:
        stop_engine()
    finally:
        stop_endpoints([e for e in endpoints if e.kind == "metrics"], 0.0)


# kind -> the frontend class and its options class ("module:attribute"), imported when an
# endpoint of that kind first starts: nothing imports frontends/, so the engine and the
# in-process API stay below them (docs/architecture.md, the import-linter contract)
_FRONTENDS: dict[str, tuple[str, str | None]] = {
    "http": ("infercore.frontends.http.server:HttpFrontend",
             "infercore.frontends.http.server:HttpOptions"),
    "grpc": ("infercore.frontends.grpc.server:GrpcFrontend",
             "infercore.frontends.grpc.server:GrpcOptions"),
    "metrics": ("infercore.frontends.metrics:MetricsFrontend", None),
}


def _frontend(server: Server, kind: str, address: str, port: int,
              settings: dict[str, Any]) -> Frontend:
    frontend_path, options_path = _FRONTENDS[kind]
    frontend = _load(frontend_path)
    if options_path is None:
        _check_settings(kind, settings, ())
        return frontend(server, address, port)
    options = _load(options_path)
    _check_settings(kind, settings, _field_names(options))
    return frontend(server, options(address=address, port=port, **settings))


def _load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _field_names(options: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(options)
                 if f.name not in ("address", "port"))


def _check_settings(kind: str, settings: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(settings) - set(known))
    if unknown:
        expected = ", ".join(("address", "port", *known))
        raise InvalidArgumentError(
            f"unknown {_LABELS[kind]} frontend setting '{unknown[0]}', expected one of "
            f"{expected}")
