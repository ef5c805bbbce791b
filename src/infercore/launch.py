"""Running ``infercore serve``: a Server and its network frontends, until SIGINT/SIGTERM.

The order follows what probes and clients expect of a server process:

0. The process's allocator maps large buffers on their own (``memory.map_large_buffers``)
   and keeps two heaps (``memory.limit_arenas``), so the memory of large requests goes
   back to the system once they are done.
1. SIGINT and SIGTERM are trapped first; a second signal is ignored, as tritonserver
   ignores it. A signal while the startup loads run ends the process at once, without
   the "serving" line (tritonserver waits for the loads: they run user code that cannot
   be interrupted, so here they are abandoned).
2. The frontends start and bind their ports before any model loads, so while models load
   ``/v2/health/live`` answers 200 and ``/v2/health/ready`` 400 (tritonserver opens its
   ports only after loading; a process that is up but loading is what liveness and
   readiness probes are meant to tell apart).
3. The models load as the control mode says; Triton's model table and options table are
   logged. With ``--exit-on-error`` a failed load stops everything, exit status 1;
   without it, a repository that cannot be read leaves the process serving, neither live
   nor ready (Triton's "failed to initialize" server: every model call "Server not ready").
4. On a signal, shutdown shares one deadline, ``--exit-timeout-secs``: the HTTP and gRPC
   frontends stop accepting at once (new connections are refused, new calls on open gRPC
   streams get UNAVAILABLE) and let their in-flight requests finish; the engine then
   unloads every model (requests still running are failed, instances are finalized in
   order); the metrics endpoint stops last. When the engine cannot stop by the deadline
   (a model's execute never returns), "Exit timeout expired. Exiting immediately." is
   logged and the process ends at once with status 1, as tritonserver's does.

Starting and stopping the frontends is serving.py's: each one the flags ask for becomes an
endpoint of the server (``serve_frontend``), and ``Server.stop`` stops them in order. What
is left here is the process: signals, the startup tables, the exit status, and the hard
exit when the engine cannot stop by the deadline.

Threads: everything here runs on the main thread (signal handlers need it), except the
startup loads (``infercore-startup-loads``, so a signal is acted on while they run) and the
stop, which runs on a short-lived thread ``infercore-stop-server`` (it stops the frontends
on threads of its own, serving.py) so the deadline can be kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from ._version import __version__
from .errors import TritonError
from .memory import limit_arenas, map_large_buffers
from .options import ModelControlMode, Options, RateLimitMode
from .repository.states import NOT_LOADED_NO_VERSION, ModelIndexEntry
from .server import Server, StartupLoadFailed
from .serving import Frontend, PortInUseError, serve_frontend
from .supervisor import notify_serving

__all__ = ["TABLE_WIDTH", "ServeExtras", "StopSignals", "format_table", "model_table",
           "options_table", "report_creation_failure", "serve", "serving_line", "shutdown"]

logger = logging.getLogger("infercore.launch")

# seconds past the deadline before a stuck stop is abandoned: the frontends' threads and
# the metrics endpoint stop after the deadline's work (loop_thread.py's join grace)
_STOP_GRACE = 7.0

_CONTROL_MODES = {ModelControlMode.NONE: "MODE_NONE", ModelControlMode.POLL: "MODE_POLL",
                  ModelControlMode.EXPLICIT: "MODE_EXPLICIT"}
_RATE_LIMIT = {RateLimitMode.OFF: "OFF", RateLimitMode.EXEC_COUNT: "EXEC_COUNT"}


@dataclass(frozen=True, slots=True)
class ServeExtras:
    """tritonserver settings that only the options table shows (no effect on a CPU host),
    and the start-up log's notes on flags given that have no effect here."""

    pinned_memory_pool_byte_size: int = 1 << 28
    cuda_memory_pool_byte_size: Sequence[tuple[int, int]] = ()
    min_supported_compute_capability: float = 0.0
    extensions: Sequence[str] = field(default_factory=tuple)
    notes: Sequence[str] = ()


# -- tables ----------------------------------------------------------------------------------
TABLE_WIDTH = 100  # columns a startup table may take: a long reason wraps inside its cell


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                 width: int = TABLE_WIDTH) -> str:
    """A table framed as Triton frames its startup tables, at most ``width`` columns wide.

    Triton lets a long value (a load error, the extensions list) widen the whole table past
    any terminal; here the widest columns give way and their values wrap inside the cell,
    and a value of several lines (a traceback) stays inside its cell too.
    """
    table = [[str(cell).splitlines() or [""] for cell in row] for row in [headers, *rows]]
    widths = [max(len(line) for row in table for line in row[i]) for i in range(len(headers))]
    frame = 3 * len(widths) + 1  # "| " + " | " ... + " |"
    floors = [max(len(h), 8) for h in headers]
    while sum(widths) + frame > width:
        widest = max(range(len(widths)), key=lambda i: widths[i] - floors[i])
        if widths[widest] <= floors[widest]:
            break  # nothing left to give
        widths[widest] -= 1
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def lines(row: Sequence[Sequence[str]]) -> list[str]:
        cells = [_wrap(cell, w) for cell, w in zip(row, widths, strict=False)]
        return ["|" + "|".join(f" {(c[i] if i < len(c) else ''):<{w}} "
                               for c, w in zip(cells, widths, strict=False)) + "|"
                for i in range(max(len(c) for c in cells))]

    head, *body = table
    return "\n".join([rule, *lines(head), rule, *(line for row in body for line in lines(row)),
                      rule])


def _wrap(cell: Sequence[str], width: int) -> list[str]:
    wrapped: list[str] = []
    for line in cell:  # a line that fits keeps its indentation (a traceback's)
        wrapped += [line] if len(line) <= width else textwrap.wrap(
            line, width, break_long_words=True, break_on_hyphens=False)
    return wrapped


def model_table(index: Sequence[ModelIndexEntry]) -> str:
    """Triton's Model | Version | Status table: every model version that was loaded."""
    rows = []
    for entry in index:
        if entry.name_only:
            continue  # found but never loaded: Triton's table leaves it out
        status = (entry.reason if entry.reason == NOT_LOADED_NO_VERSION
                  else f"{entry.state.value}: {entry.reason}" if entry.reason
                  else entry.state.value)
        rows.append([entry.name, entry.version or "-", status])
    return format_table(["Model", "Version", "Status"], rows)


def options_table(options: Options, extras: ServeExtras | None = None) -> str:
    """Triton's Option | Value table of the server's settings, in tritonserver's order."""
    extras = extras or ServeExtras()
    rows = [["server_id", options.server_id], ["server_version", __version__],
            ["server_extensions", " ".join(extras.extensions)]]
    rows += [[f"model_repository_path[{i}]", str(path)]
             for i, path in enumerate(options.repositories)]
    rows.append(["model_control_mode", _CONTROL_MODES[options.model_control_mode]])
    rows += [[f"startup_models_{i}", name] for i, name in enumerate(options.startup_models)]
    rows += [["strict_model_config", str(int(options.strict_model_config))],
             ["model_config_name", options.model_config_name],
             ["rate_limit", _RATE_LIMIT[options.rate_limiter_mode]]]
    rows += [[f"rate_limit_resource[{i}]", f"{r.name}:{r.count}:{r.device}"]
             for i, r in enumerate(options.rate_limiter_resources)]
    rows.append(["pinned_memory_pool_byte_size", str(extras.pinned_memory_pool_byte_size)])
    rows += [[f"cuda_memory_pool_byte_size{{{device}}}", str(size)]
             for device, size in extras.cuda_memory_pool_byte_size]
    rows += [["min_supported_compute_capability",
              f"{extras.min_supported_compute_capability:.1f}"],
             ["strict_readiness", str(int(options.strict_readiness))],
             ["exit_timeout", str(options.exit_timeout)],
             ["cache_enabled", str(int(bool(options.cache_config)))]]
    return format_table(["Option", "Value"], rows)


def server_extensions(server: Server) -> list[str]:
    return list(server.metadata()["extensions"])


# -- signals ---------------------------------------------------------------------------------
class StopSignals:
    """SIGINT/SIGTERM set ``requested``; later ones are logged and ignored (as tritonserver)."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.requested.is_set():
            logger.info("Signal (%d) received; already stopping", signum)
            return
        logger.info("Signal (%d) received.", signum)
        self.requested.set()


# -- the process -----------------------------------------------------------------------------
def serve(options: Options, args: argparse.Namespace | None = None, *,
          frontend_modules: Iterable[Any] = (), extras: ServeExtras | None = None) -> int:
    """Run a Server and the frontends ``args`` ask for until a signal; the exit status.

    ``frontend_modules`` each have ``from_args(server, args)`` returning a frontend or
    None; each frontend becomes one of the server's endpoints (serving.py), which also
    stops them in order. One that ``starts_after_load`` (Vertex AI's) starts once the
    startup loads are done.
    """
    map_large_buffers()  # large tensors go back to the system when freed (memory.py)
    limit_arenas()  # and what large requests leave in threads' heaps too
    signals = StopSignals()
    signals.install()
    try:
        try:
            server = Server(options)
        except TritonError as exc:  # a cache implementation that is not there, ...
            report_creation_failure(exc)
            return 1
        for note in (extras.notes if extras is not None else ()):
            logger.warning("%s", note)
        frontends = [frontend for module in (frontend_modules if args is not None else ())
                     if (frontend := module.from_args(server, args)) is not None]
        # in tritonserver's order: gRPC, HTTP, SageMaker, metrics (Vertex AI after the loads)
        for frontend in sorted(frontends,
                               key=lambda f: _START_ORDER.get(f.kind, len(_START_ORDER))):
            if frontend.starts_after_load:
                continue
            try:
                _serve_frontend(server, frontend)
            except TritonError as exc:
                _report_start_failure(frontend, exc)
                server.stop(0.0)  # nothing loaded yet; closes the trace and log files
                return 1
        try:
            if not _start_unless_stopped(server, signals):
                # The loads run user code that cannot be interrupted: the process ends now
                # rather than when they end (tritonserver waits for them). Workers of
                # isolated models die with it (PR_SET_PDEATHSIG).
                logger.info("stopping while models load: the startup loads are abandoned")
                logging.shutdown()
                os._exit(0)
        except TritonError as exc:
            # the table as the loads left it (Triton's), not after the stop unloaded all
            index = exc.index if isinstance(exc, StartupLoadFailed) else None
            logger.info("\n%s", model_table(index or server.model_table_index()))
            if index is not None:  # tritonserver's last words stay the last line
                logger.warning("--exit-on-error=false serves the models that loaded and leaves "
                               "the others UNAVAILABLE with their reasons")
            report_creation_failure(exc)
            server.stop()  # the endpoints, within the exit timeout
            return 1
        table_extras = extras or ServeExtras()
        if not table_extras.extensions:
            table_extras = dataclasses.replace(
                table_extras, extensions=tuple(server_extensions(server)))
        failure = server.initialization_failure  # logged; serving, neither live nor ready
        if failure is None:
            logger.info("\n%s", model_table(server.model_table_index()))
        logger.info("\n%s", options_table(options, table_extras))
        for frontend in frontends:
            if not frontend.starts_after_load:
                continue
            try:
                _serve_frontend(server, frontend)
            except TritonError as exc:
                server.stop()
                _report_start_failure(frontend, exc)
                return 1
        if not signals.requested.is_set():  # a signal as the loads ended: straight to the stop
            # the supervisor first: once the serving line is out, a crash is one after serving
            notify_serving()
            if failure is None:
                ready = sum(1 for e in server.repository_index() if e.state.value == "READY")
                logger.info("%s", serving_line(ready, frontends))
            else:
                logger.info("infercore is serving, neither live nor ready (%s: %s); press "
                            "Ctrl-C to stop", failure.code_name, failure.message)
        signals.requested.wait()
        if not shutdown(server, float(options.exit_timeout)):
            # Threads stuck in a model would keep the interpreter from exiting.
            logging.shutdown()
            os._exit(1)
        return 0
    finally:
        signals.restore()


class _CommandLineFrontend(Frontend, Protocol):
    kind: str  # the endpoint's kind: "http", "grpc", "metrics", "sagemaker", ...
    address: str
    starts_after_load: bool  # needs the loaded models (Vertex AI's picks its default)


def _serve_frontend(server: Server, frontend: _CommandLineFrontend) -> None:
    # the port the flags name: an HTTP or gRPC frontend knows the one it listens on only
    # once it listens (its options hold the configured one)
    options = getattr(frontend, "options", None)
    port = getattr(options, "port", None)
    serve_frontend(server, frontend.kind, frontend, address=frontend.address,
                   port=frontend.port if port is None else int(port))


_START_ORDER = {"grpc": 0, "http": 1, "sagemaker": 2, "vertex_ai": 3, "metrics": 4}
# how tritonserver names its endpoints in "failed to start <name> service"
_SERVICE_NAMES = {"grpc": "GRPC", "http": "HTTP", "metrics": "Metrics"}


def _report_start_failure(frontend: _CommandLineFrontend, error: TritonError) -> None:
    """tritonserver's last words when an endpoint cannot start; a port in use is
    "Socket '<address>:<port>' already in use " (sic, the trailing space)."""
    name = _SERVICE_NAMES.get(frontend.kind, frontend.label)
    message = (f"Socket '{error.socket}' already in use " if isinstance(error, PortInUseError)
               else error.message)
    logger.error("failed to start %s service: %s - %s", name, error.code_name, message)


def serving_line(ready: int, frontends: Sequence[_CommandLineFrontend]) -> str:
    """The last start-up line: what is served and where, as a user would connect."""
    where = ", ".join(f"{frontend.label} at {_host_port(frontend)}" for frontend in frontends)
    return (f"infercore is serving {ready} model version(s)"
            + (f" ({where})" if where else "") + "; press Ctrl-C to stop")


def _host_port(frontend: _CommandLineFrontend) -> str:
    address = frontend.address or "0.0.0.0"
    return f"[{address}]:{frontend.port}" if ":" in address else f"{address}:{frontend.port}"


def _start_unless_stopped(server: Server, signals: StopSignals) -> bool:
    """Run the startup loads (``Server.start``) on a thread of their own, so a signal
    can be acted on while they run: False when one came first; raises what start raised."""
    ended = threading.Event()
    failure: list[BaseException] = []

    def start() -> None:
        try:
            server.start()
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)
        finally:
            ended.set()

    threading.Thread(target=start, name="infercore-startup-loads", daemon=True).start()
    while not ended.wait(0.05):
        if signals.requested.is_set():
            return False
    if failure:
        raise failure[0]
    return True


def report_creation_failure(error: TritonError, step: str = "creating server") -> None:
    """tritonserver's last words when the server cannot be created (or, ``step``, one of
    its options cannot be set)."""
    print(f"error: {step}: {error.code_name} - {error.message}", file=sys.stderr,
          flush=True)


def shutdown(server: Server, exit_timeout: float) -> bool:
    """Stop accepting, drain, unload and finalize within ``exit_timeout`` (Server.stop,
    in serving.py's order), on a thread of its own so the deadline holds even when a
    model's execute never returns: False then (the engine is still stopping past the
    deadline plus a grace)."""
    exit_timeout = max(0.0, exit_timeout)
    logger.info("Waiting for in-flight requests to complete (exit timeout %gs).", exit_timeout)
    stopper = threading.Thread(target=server.stop, kwargs={"timeout": exit_timeout},
                               name="infercore-stop-server", daemon=True)
    stopper.start()
    stopper.join(exit_timeout + _STOP_GRACE)
    if stopper.is_alive():
        logger.error("Exit timeout expired. Exiting immediately.")
        return False
    logger.info("infercore stopped")
    return True
