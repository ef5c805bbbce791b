"""Running ``infercore serve``: a Server and its network frontends, until SIGINT/SIGTERM.

The order follows what probes and clients expect of a server process:

0. The process's allocator maps large buffers on their own (``memory.map_large_buffers``)
   and keeps two heaps (``memory.limit_arenas``), so the memory of large requests goes
   back to the system once they are done.
1. SIGINT and SIGTERM are trapped first (a signal during loading stops the server once
   the startup loads end; a second signal is ignored, as tritonserver ignores it).
2. The frontends start and bind their ports before any model loads, so while models load
   ``/v2/health/live`` answers 200 and ``/v2/health/ready`` 400 (tritonserver opens its
   ports only after loading; a process that is up but loading is what liveness and
   readiness probes are meant to tell apart).
3. The models load as the control mode says; Triton's model table and options table are
   logged. With ``--exit-on-error`` a failed load stops everything, exit status 1.
4. On a signal, shutdown shares one deadline, ``--exit-timeout-secs``: the HTTP and gRPC
   frontends stop accepting at once (new connections are refused, new calls on open gRPC
   streams get UNAVAILABLE) and let their in-flight requests finish; the engine then
   unloads every model (requests still running are failed, instances are finalized in
   order); the metrics endpoint stops last. When the engine cannot stop by the deadline
   (a model's execute never returns), "Exit timeout expired. Exiting immediately." is
   logged and the process ends at once with status 1, as tritonserver's does.

Threads: everything here runs on the main thread (signal handlers need it), except the
concurrent frontend stops and the engine stop, which run on short-lived threads named
``infercore-stop-*`` so the deadline can be kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from ._version import __version__
from .errors import TritonError
from .memory import limit_arenas, map_large_buffers
from .options import ModelControlMode, Options, RateLimitMode
from .repository.states import ModelIndexEntry
from .server import Server
from .supervisor import notify_serving

__all__ = ["ServeExtras", "StopSignals", "format_table", "model_table", "options_table",
           "report_creation_failure", "serve", "shutdown"]

logger = logging.getLogger("infercore.launch")

_STOP_GRACE = 2.0  # seconds past the deadline before a stuck engine stop is abandoned

_CONTROL_MODES = {ModelControlMode.NONE: "MODE_NONE", ModelControlMode.POLL: "MODE_POLL",
                  ModelControlMode.EXPLICIT: "MODE_EXPLICIT"}
_RATE_LIMIT = {RateLimitMode.OFF: "OFF", RateLimitMode.EXEC_COUNT: "EXEC_COUNT"}


class Frontend(Protocol):
    # started once the startup loads are done (it needs the loaded models), not before
    starts_after_load: bool
    label: str

    def start(self) -> None: ...

    def stop(self, timeout: float = 30.0) -> None: ...


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
def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table framed as Triton frames its startup tables."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c:<{w}} " for c, w in zip(cells, widths, strict=False)) + "|"

    return "\n".join([rule, line(headers), rule, *(line(r) for r in rows), rule])


def model_table(index: Sequence[ModelIndexEntry]) -> str:
    """Triton's Model | Version | Status table: every model version that was loaded."""
    rows = []
    for entry in index:
        if entry.name_only:
            continue  # found but never loaded: Triton's table leaves it out
        status = entry.state.value if not entry.reason else f"{entry.state.value}: {entry.reason}"
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
    None; the metrics module's frontend is started with the others but stopped last, and
    one that ``starts_after_load`` (Vertex AI's) once the startup loads are done.
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
        network: list[Frontend] = []
        late: list[Frontend] = []
        after_load: list[Frontend] = []
        from .frontends.metrics import MetricsFrontend

        try:
            for module in frontend_modules if args is not None else ():
                frontend = module.from_args(server, args)
                if frontend is None:
                    continue
                if frontend.starts_after_load:
                    after_load.append(frontend)
                    continue
                frontend.start()
                (late if isinstance(frontend, MetricsFrontend) else network).append(frontend)
        except (OSError, TritonError) as exc:
            logger.error("failed to start a frontend: %s", exc)
            _stop_frontends(network + late, time.monotonic())
            server.stop(0.0)  # nothing loaded yet; closes the trace and log files
            return 1
        try:
            server.start()
        except TritonError as exc:
            logger.info("\n%s", model_table(server.repository_index()))
            report_creation_failure(exc)
            _stop_frontends(network + late, time.monotonic() + float(options.exit_timeout))
            return 1
        table_extras = extras or ServeExtras()
        if not table_extras.extensions:
            table_extras = dataclasses.replace(
                table_extras, extensions=tuple(server_extensions(server)))
        logger.info("\n%s", model_table(server.repository_index()))
        logger.info("\n%s", options_table(options, table_extras))
        for frontend in after_load:
            try:
                frontend.start()
            except (OSError, TritonError) as exc:
                _stop_frontends(network + late, time.monotonic() + float(options.exit_timeout))
                server.stop(float(options.exit_timeout))
                detail = (f"{exc.code_name} - {exc.message}" if isinstance(exc, TritonError)
                          else str(exc))
                # tritonserver's last words when an endpoint cannot start
                logger.error("failed to start %s service: %s", frontend.label, detail)
                return 1
            network.append(frontend)
        logger.info("infercore is serving %d model version(s); press Ctrl-C to stop",
                    sum(1 for e in server.repository_index() if e.state.value == "READY"))
        notify_serving()
        signals.requested.wait()
        if not shutdown(server, network, late, float(options.exit_timeout)):
            # Threads stuck in a model would keep the interpreter from exiting.
            logging.shutdown()
            os._exit(1)
        return 0
    finally:
        signals.restore()


def report_creation_failure(error: TritonError) -> None:
    """tritonserver's last words when the server cannot be created."""
    print(f"error: creating server: {error.code_name} - {error.message}", file=sys.stderr,
          flush=True)


def shutdown(server: Server, network: Sequence[Frontend], late: Sequence[Frontend],
             exit_timeout: float) -> bool:
    """Stop accepting, drain, unload and finalize within ``exit_timeout``.

    Returns False when the engine is still stopping past the deadline (plus a grace).
    """
    deadline = time.monotonic() + max(0.0, exit_timeout)
    logger.info("Waiting for in-flight requests to complete (exit timeout %gs).", exit_timeout)
    _stop_frontends(network, deadline)
    stopper = threading.Thread(
        target=server.stop, kwargs={"timeout": max(0.0, deadline - time.monotonic())},
        name="infercore-stop-server", daemon=True)
    stopper.start()
    stopper.join(max(0.0, deadline - time.monotonic()) + _STOP_GRACE)
    if stopper.is_alive():
        logger.error("Exit timeout expired. Exiting immediately.")
        _stop_frontends(late, time.monotonic())
        return False
    _stop_frontends(late, time.monotonic() + _STOP_GRACE)
    logger.info("infercore stopped")
    return True


def _stop_frontends(frontends: Sequence[Frontend], deadline: float) -> None:
    """Stop all at once (none keeps accepting while another drains), by ``deadline``."""
    threads = []
    for frontend in frontends:
        remaining = max(0.0, deadline - time.monotonic())
        thread = threading.Thread(target=_stop_one, args=(frontend, remaining),
                                  name="infercore-stop-frontend", daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        # A frontend's own stop is bounded; the grace covers joining its threads.
        thread.join(max(0.0, deadline - time.monotonic()) + _STOP_GRACE + 5.0)


def _stop_one(frontend: Frontend, timeout: float) -> None:
    try:
        frontend.stop(timeout)
    except Exception:  # noqa: BLE001 - one frontend failing must not stop the shutdown
        logger.exception("failed to stop a frontend cleanly")
