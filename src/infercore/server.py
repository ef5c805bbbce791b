"""Server: the in-process inference server (start, stop, models, inference).

Threads: ``start`` and ``stop`` run on the caller's thread (model loading fans out on the
repository manager's pool); ``infer`` and the lookups run on any thread at once. The async
twins (``astart``, ``astop``, ``async with``) run the blocking work in a worker thread so
an event loop stays responsive while models load.

States: created -> started (models loaded as the control mode says) -> stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from ._version import __version__
from .errors import InternalError, InvalidArgumentError, UnavailableError, UnsupportedError
from .handle import Model
from .logs import LogSettings, LogSettingsManager
from .metrics import MetricsSettings, ServerMetrics
from .model import LoadedModel, ModelEnvironment
from .options import ModelControlMode, Options
from .rate_limiter import RateLimiter
from .repository.manager import RepositoryManager
from .repository.states import ModelIndexEntry, ModelState
from .request import InferRequest
from .response import InferResponse, ResponseStream
from .stats import ModelStatistics
from .tracing import Tracer

__all__ = ["Server"]

logger = logging.getLogger(__name__)

# Triton protocol extensions this server implements.
_EXTENSIONS = ("model_configuration", "parameters", "statistics")


class Server:
    """An inference server running in this process.

    ``Server(Options(model_repository=...))`` or ``Server(model_repository=...)``; then
    ``start()`` (or ``with``/``async with``). Inference: ``server.model("m").infer(...)``.
    """

    def __init__(self, options: Options | None = None, **kwargs: Any) -> None:
        if options is not None and kwargs:
            raise InvalidArgumentError("pass either an Options object or keyword options")
        self.options = options if options is not None else Options(**kwargs)
        metrics = MetricsSettings.from_configuration(
            self.options.metrics_configuration, enabled=self.options.metrics,
            cpu=self.options.cpu_metrics, gpu=self.options.gpu_metrics,
            interval_ms=self.options.metrics_interval)
        self._tracer = Tracer(self.options.trace_config)
        self._manager = RepositoryManager(
            self.options.repositories,
            infer=self.infer,
            strict_model_config=self.options.strict_model_config,
            model_config_name=self.options.model_config_name,
            backend_configuration=self.options.backend_configuration,
            load_thread_count=self.options.model_load_thread_count,
            environment=ModelEnvironment(
                rate_limiter=RateLimiter(self.options.rate_limiter_mode,
                                         self.options.rate_limiter_resources),
                host_policies=self.options.host_policies,
                tracer=self._tracer,
                latency_summaries=metrics.enabled and metrics.summary_latencies,
                first_response_histogram=metrics.enabled and metrics.histogram_latencies,
            ),
        )
        self._metrics = ServerMetrics(metrics, self._manager.loaded)
        self._state_lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._logs = LogSettingsManager(LogSettings(
            log_info=self.options.log_info,
            log_warning=self.options.log_warn,
            log_error=self.options.log_error,
            log_verbose_level=self.options.log_verbose,
            log_file=self.options.log_file,
            log_format=self.options.log_format,
        ))

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "started" if self._started else "created"
        return f"Server(repositories={[str(p) for p in self.options.repositories]}, {state})"

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, *, wait_until_ready: bool = False) -> Server:
        """Load the models (all of them, or the startup models in explicit mode).

        Loading completes before this returns, so ``wait_until_ready`` (Triton's flag) is
        accepted for compatibility. With ``exit_on_error`` a model that fails to load stops
        the server and raises, as Triton does; otherwise it is left UNAVAILABLE with its
        reason in ``repository_index()``.
        """
        with self._state_lock:
            if self._started:
                raise InvalidArgumentError("server is already started")
            if self._stopped:
                raise InvalidArgumentError("a stopped server cannot be started again")
            self._started = True
        if not self.options.repositories:
            raise InvalidArgumentError("at least one model repository must be given")
        mode = self.options.model_control_mode
        if mode is ModelControlMode.EXPLICIT:
            names = list(self.options.startup_models)
            if "*" in names:
                failures = self._manager.load_all()
            else:
                self._manager.scan()
                failures = self._manager.load_all(names) if names else {}
        else:
            failures = self._manager.load_all()
        if failures and self.options.exit_on_error:
            self.stop()
            reasons = "; ".join(f"{name}: {reason}" for name, reason in sorted(failures.items()))
            raise InternalError(f"failed to load all models: {reasons}")
        return self

    def stop(self) -> None:
        """Stop admitting requests, let in-flight ones finish (``exit_timeout``), unload."""
        with self._state_lock:
            if self._stopped:
                return
            self._stopped = True
        self._manager.unload_all(timeout=float(self.options.exit_timeout))
        self._tracer.close()  # writes what the trace files still hold
        self._logs.close()

    async def astart(self, *, wait_until_ready: bool = False) -> Server:
        return await asyncio.to_thread(self.start, wait_until_ready=wait_until_ready)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> Server:
        return await self.astart()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.astop()

    # -- health and descriptions -----------------------------------------------------------
    def live(self) -> bool:
        return self._started and not self._stopped

    def ready(self) -> bool:
        """Live, and (with strict readiness) every model found is READY."""
        if not self.live():
            return False
        if not self.options.strict_readiness:
            return True
        return all(entry.state is ModelState.READY for entry in self._manager.index()
                   if not entry.name_only)

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.options.server_id,
            "version": __version__,
            "extensions": list(_EXTENSIONS),
        }

    def model(self, name: str, version: int = -1) -> Model:
        """A handle on a model; ``version`` -1 means the latest ready version."""
        return Model(self, name, int(version))

    def models(self, exclude_not_ready: bool = False) -> dict[tuple[str, int], Model]:
        """Handles of every model version the server knows, keyed by (name, version)."""
        found: dict[tuple[str, int], Model] = {}
        for entry in self._manager.index():
            if exclude_not_ready and entry.state is not ModelState.READY:
                continue
            version = int(entry.version) if entry.version else -1
            found[(entry.name, version)] = Model(self, entry.name, version)
        return found

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        """Every model and version found, with its state and the reason for that state."""
        return self._manager.index(ready_only=ready_only)

    # -- inference -------------------------------------------------------------------------
    def infer(
        self,
        request: InferRequest,
        *,
        raise_on_error: bool = True,
        callback: Callable[[InferResponse | None, bool], None] | None = None,
        consume_now: bool = False,
    ) -> ResponseStream:
        """Run a request built by the caller (frontends do this); see ``Model.infer``.

        ``consume_now=True`` promises that the caller awaits or iterates the stream right
        away: the request then crosses no thread when an instance is free (the reader runs
        it), and no instance thread is woken in vain. A stream taken this way must be read.

        With ``callback``, each response is passed to ``callback(response, final)`` on the
        thread that produced it, in order (``response`` is None for a bare final flag),
        instead of being queued on the stream; the callback must not block.
        """
        loaded = self._resolve(request.model_name, request.model_version)
        return loaded.infer(request, raise_on_error=raise_on_error, callback=callback,
                            consume_now=consume_now)

    def _resolve(self, name: str, version: int) -> LoadedModel:
        if not self._started or self._stopped:
            raise UnavailableError("server is not running")
        return self._manager.get(name, version)

    # -- model control ---------------------------------------------------------------------
    def load(self, name: str, config: str | Mapping[str, Any] | None = None) -> Model:
        """Load (or reload) a model from the repositories; raises its load error.

        ``config`` (Triton's JSON form, as a string or a dict) replaces the model's
        config.pbtxt for this load.
        """
        self._require_running()
        override = None
        if config is not None:
            from .config import model_config_from_json

            if isinstance(config, str):
                try:
                    config = json.loads(config)
                except ValueError as exc:
                    raise InvalidArgumentError(
                        f"failed to parse the config override of model '{name}': {exc}"
                    ) from exc
            if not isinstance(config, Mapping):
                raise InvalidArgumentError(
                    f"the config override of model '{name}' must be a JSON object"
                )
            override = model_config_from_json(dict(config))
        self._manager.load(name, override)
        return Model(self, name)

    def statistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        """Statistics of one model's versions, or of every ready model when name is ""."""
        if name:
            return self.model(name, version).statistics()
        snapshots = [model.stats.snapshot() for model in self._manager.loaded()]
        return sorted(snapshots, key=lambda s: (s.name, s.version))

    def unload(self, name: str) -> None:
        self._require_running()
        self._manager.unload(name, timeout=float(self.options.exit_timeout))

    # -- settings ----------------------------------------------------------------------------
    def log_settings(self) -> dict[str, Any]:
        """Triton's logging settings (log_file, log_info, ..., log_format)."""
        return self._logs.settings.to_dict()

    def update_log_settings(self, **changes: Any) -> dict[str, Any]:
        """Change logging at runtime with Triton's setting names; returns the new settings."""
        return self._logs.update(changes).to_dict()

    def trace_settings(self, model: str = "") -> dict[str, Any]:
        """Trace settings in force for ``model`` (global ones for "")."""
        return self._tracer.settings(model)

    def update_trace_settings(self, model: str = "", **changes: Any) -> dict[str, Any]:
        """Change trace settings, globally or for one model (None clears an override).

        New settings start new sampling counters; traces already running finish under
        the settings they started with."""
        return self._tracer.update(changes, model)

    # -- metrics -----------------------------------------------------------------------------
    def metrics(self, metric_format: str = "prometheus") -> str:
        """Server and custom metrics in Prometheus text format (what /metrics serves).

        With ``Options.metrics`` false only the custom metrics are reported.
        """
        if str(getattr(metric_format, "name", metric_format)).lower() != "prometheus":
            raise UnsupportedError(f"unsupported metric format '{metric_format}'")
        return self._metrics.render()

    def _require_running(self) -> None:
        if not self.live():
            raise UnavailableError("server is not running")
