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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .cache import ResponseCache
from .caller import Caller
from .clock import deadline_after, seconds_until
from .dispatch import AttachedLoop, attach_loop, detach_loop
from .errors import (
    InternalError,
    InvalidArgumentError,
    TritonError,
    UnavailableError,
    UnsupportedError,
)
from .handle import Model
from .lifecycle import StartStop
from .log_settings import LogLevel, LogSettings
from .metrics_settings import MetricsSettings
from .model import LoadedModel, ModelEnvironment
from .observability.logs import LogSettingsManager, log_enabled, log_message
from .observability.metrics import ServerMetrics
from .observability.tracing import Tracer
from .options import ModelControlMode, Options, readiness_models
from .rate_limiter import RateLimiter
from .repository.layout import check_model_name, check_repository
from .repository.manager import RepositoryManager
from .repository.overrides import FILE_PREFIX, split_load_parameters
from .repository.poller import RepositoryPoller
from .repository.states import ModelIndexEntry, ModelState
from .request import InferRequest
from .response import InferResponse, ResponseStream
from .server_handles import HandleEngine
from .stats import ModelStatistics

if TYPE_CHECKING:
    from .serving import Endpoint

__all__ = ["Server", "StartupLoadFailed"]

logger = logging.getLogger(__name__)

# The protocol extensions Triton's server metadata lists, in its order (recorded from
# Triton 2.51: tests/conformance/cases/health.py). cuda_shared_memory is listed on hosts
# without GPUs too; its calls answer there as Triton's do.
_EXTENSIONS = ("classification", "sequence", "model_repository",
               "model_repository(unload_dependents)", "schedule_policy",
               "model_configuration", "system_shared_memory", "cuda_shared_memory",
               "binary_tensor_data", "parameters", "statistics", "trace", "logging")


class _ServerControl:
    """The server's ``ModelControl``: what a Python model's pb_utils.load_model,
    unload_model and is_model_ready do, through the server's own load API."""

    __slots__ = ("_server",)

    def __init__(self, server: Server) -> None:
        self._server = server

    def load(self, name: str, config: str, files: Mapping[str, bytes]) -> None:
        # Triton's stub passes the files as load parameters named as given ("file:...").
        parameters: dict[str, Any] = dict(files)
        if config:
            parameters["config"] = config
        self._server.load(name, parameters=parameters or None)

    def unload(self, name: str, unload_dependents: bool) -> None:
        self._server.unload(name, unload_dependents=unload_dependents)

    def is_ready(self, name: str, version: int) -> bool:
        return self._server.model(name, version).ready()


class StartupLoadFailed(InternalError):
    """A startup load failed with ``exit_on_error``: the server stopped. ``index`` is the
    repository index as the loads left it, before the stop unloaded every model, as the
    model table reads it (``Server.model_table_index``)."""

    def __init__(self, index: list[ModelIndexEntry]) -> None:
        super().__init__("failed to load all models")  # tritonserver's words
        self.index = index


class Server(HandleEngine, StartStop):
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
        self._tracer = Tracer(self.options.trace_config, clock=self.options.clock)
        self._manager = RepositoryManager(
            self.options.repositories,
            infer=self.infer,
            strict_model_config=self.options.strict_model_config,
            model_config_name=self.options.model_config_name,
            backend_configuration=self.options.backend_configuration,
            load_thread_count=self.options.model_load_thread_count,
            namespacing=self.options.model_namespacing,
            load_retry_count=self.options.model_load_retry_count,
            unload_timeout=float(self.options.exit_timeout),
            control=_ServerControl(self),
            environment=ModelEnvironment(
                clock=self.options.clock,
                rate_limiter=RateLimiter(self.options.rate_limiter_mode,
                                         self.options.rate_limiter_resources),
                host_policies=self.options.host_policies,
                tracer=self._tracer,
                latency_summaries=metrics.enabled and metrics.summary_latencies,
                first_response_histogram=metrics.enabled and metrics.histogram_latencies,
                response_cache=ResponseCache.from_config(self.options.cache_config),
                ray_address=self.options.ray_address,
                devices=self.options.devices,
                gpu_load_limits={limit.device: limit.fraction
                                 for limit in self.options.model_load_device_limits},
            ),
        )
        self._metrics = ServerMetrics(metrics, self._manager.loaded,
                                      clock=self.options.clock.now_ns,
                                      devices=self.options.devices,
                                      pinned_pool_bytes=self.options.pinned_memory_pool_size)
        self._poller: RepositoryPoller | None = None  # POLL mode with an interval
        self._state_lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._exit_timeout = float(self.options.exit_timeout)  # set_exit_timeout changes it
        self._endpoints: dict[str, Endpoint] = {}  # kind -> running frontend (serving.py)
        # Live from start() on, ready only once the startup loads are done (Triton's
        # SERVER_INITIALIZING): frontends started first answer live 200 / ready 400.
        self._startup_done = False
        # the repository error that left the server up but not initialized (start, with
        # exit_on_error False): not live, not ready, model calls refused
        self._init_failure: TritonError | None = None
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
        self._load_backend_directories()
        try:
            for repository in self.options.repositories:
                check_repository(Path(repository))
        except TritonError as exc:
            self._manager.starting_up = False
            if self.options.exit_on_error:
                self.stop()
                raise
            # Triton's SERVER_FAILED_TO_INITIALIZE: the endpoints serve, the server is
            # neither live nor ready, and every model call is refused "Server not ready".
            logger.error("%s: %s", exc.code_name, exc.message)
            self._init_failure = exc
            self._startup_done = True
            return self
        try:
            failures = self._load_startup_models()
        finally:
            self._manager.starting_up = False
        self._startup_done = True
        if failures and self.options.exit_on_error:
            for name, reason in sorted(failures.items()):
                logger.error("failed to load '%s': %s", name, reason)
            loaded = self.model_table_index()  # as loaded: the stop unloads them all
            self.stop()
            raise StartupLoadFailed(loaded)
        return self

    def _load_startup_models(self) -> dict[str, str]:
        """Load what the control mode says (Triton's): every model in NONE and POLL mode,
        the ``startup_models`` in EXPLICIT mode ("*" alone: every model). In POLL mode
        the repository poller starts next. Returns name -> failure."""
        if self.options.model_control_mode is not ModelControlMode.EXPLICIT:
            failures = self._manager.load_all()
            if (self.options.model_control_mode is ModelControlMode.POLL
                    and self.options.repository_poll_secs > 0):
                self._poller = RepositoryPoller(self._manager.poll,
                                                self.options.repository_poll_secs,
                                                self.options.clock)
                self._poller.start()
            return failures
        names = list(dict.fromkeys(self.options.startup_models))
        if "*" in names:
            if len(names) > 1:
                raise InvalidArgumentError(
                    "Wildcard model name '*' must be the ONLY startup model if specified "
                    "at all.")
            return self._manager.load_all()
        return self._manager.load_all(names)

    def _load_backend_directories(self) -> None:
        """Register the backend plugins of ``Options.backend_directory`` (as the CLI's
        ``--backend-directory``): a missing folder is logged, the built-ins serve."""
        from .backends.base import load_backend_directory

        for directory in self.options.backend_directory:
            try:
                load_backend_directory(directory)
            except InvalidArgumentError as exc:
                logger.warning("%s; using the built-in backends", exc.message)

    def stop(self, timeout: float | None = None) -> None:
        """Stop admitting requests, let in-flight ones finish, unload every model.

        In-flight requests get ``timeout`` seconds (default: the exit timeout, see
        ``set_exit_timeout``); those still running then are failed, and instances are
        finalized in order. Network endpoints started with ``serve_http`` and
        ``serve_grpc`` stop first within the same deadline, the metrics endpoint last.
        """
        with self._state_lock:
            if self._stopped:
                return
            self._stopped = True
            endpoints, self._endpoints = list(self._endpoints.values()), {}
        clock = self.options.clock
        deadline = deadline_after(clock, self._exit_timeout if timeout is None else timeout)
        from .serving import stop_in_order

        # The frontends are edges: their sockets drain in real seconds (clock.py).
        stop_in_order(endpoints, seconds_until(clock, deadline),
                      lambda: self._stop_engine(seconds_until(clock, deadline)))

    def _stop_engine(self, timeout: float) -> None:
        if self._poller is not None:
            self._poller.stop()  # a poll in progress finishes first
        self._manager.unload_all(timeout=timeout)
        self._tracer.close()  # writes what the trace files still hold
        self._logs.close()

    @property
    def exit_timeout(self) -> float:
        """Seconds in-flight requests get when the server stops or a model unloads."""
        return self._exit_timeout

    def set_exit_timeout(self, seconds: float) -> None:
        """Replace ``Options.exit_timeout`` from now on, also while the server runs
        (Triton's TRITONSERVER_ServerSetExitTimeout): the next ``stop``, unloads and
        repository polls wait that long for in-flight requests."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
                seconds >= 0):
            raise InvalidArgumentError(
                f"the exit timeout must be a number of seconds >= 0, got {seconds!r}")
        self._exit_timeout = float(seconds)
        # The manager drains unloaded versions (polls, failed reloads) for this long too.
        self._manager.unload_timeout = self._exit_timeout

    async def astart(self, *, wait_until_ready: bool = False) -> Server:
        return await asyncio.to_thread(self.start, wait_until_ready=wait_until_ready)

    # -- health and descriptions -----------------------------------------------------------
    def live(self) -> bool:
        return self._started and not self._stopped and self._init_failure is None

    @property
    def initialization_failure(self) -> TritonError | None:
        """Why ``start`` left the server up but neither live nor ready (a repository that
        cannot be read, with ``exit_on_error`` False), or None."""
        return self._init_failure

    def _require_initialized(self) -> None:
        if self._init_failure is not None:
            raise UnavailableError("Server not ready")  # Triton's, for every model call

    async def alive(self) -> bool:
        return self.live()

    def started_up(self) -> bool:
        """Live with the startup loads finished, whatever they left (infercore's startup
        probe, ``/v2/health/startup``: a model that failed does not hold it back, as it
        holds readiness back)."""
        return self.live() and self._startup_done

    def ready(self) -> bool:
        """Live with the startup loads done, and (strict readiness) the models the readiness
        policy names READY: every model (Triton's), any one, or the listed ones."""
        if not self.live() or not self._startup_done:
            return False
        if not self.options.strict_readiness:
            return True
        # As Triton: a version that is not ready because it was unloaded does not count.
        # (An ensemble unloaded with its step records "unloaded: ..."; the state table, not
        # the repository listing, so health probes do not read the disk.)
        entries = [entry for entry in self._manager.states.index()
                   if not entry.reason.startswith("unloaded")]
        serving = all(model.serving for model in self._manager.loaded())  # (docs/ray.md)
        policy = self.options.readiness_policy
        if policy == "any":
            return any(entry.state is ModelState.READY for entry in entries) and serving
        listed = readiness_models(policy)
        if listed is not None:  # each listed model has a READY version
            ready = {entry.name for entry in entries if entry.state is ModelState.READY}
            return all(name in ready for name in listed) and serving
        return all(entry.state is ModelState.READY for entry in entries) and serving

    async def aready(self) -> bool:
        return self.ready()

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.options.server_id,
            "version": __version__,
            "extensions": list(_EXTENSIONS),
        }

    async def ametadata(self) -> dict[str, Any]:
        return self.metadata()

    def model(self, name: str, version: int = -1) -> Model:
        """A handle on a model; ``version`` -1 means the latest ready version."""
        return Model(self, name, int(version))

    def models(self, exclude_not_ready: bool = False) -> dict[tuple[str, int], Model]:
        """Handles of every model version the server knows, keyed by (name, version)."""
        self._require_initialized()
        found: dict[tuple[str, int], Model] = {}
        for entry in self._manager.index():
            if exclude_not_ready and entry.state is not ModelState.READY:
                continue
            version = int(entry.version) if entry.version else -1
            found[(entry.name, version)] = Model(self, entry.name, version)
        return found

    async def amodels(self, exclude_not_ready: bool = False
                      ) -> dict[tuple[str, int], Model]:
        return self.models(exclude_not_ready)

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        """Every model and version found, with its state and the reason for that state."""
        self._require_initialized()
        return self._manager.index(ready_only=ready_only)

    async def arepository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        return self.repository_index(ready_only)

    def model_table_index(self) -> list[ModelIndexEntry]:
        """The index as Triton's start-up model table reads it: also the models its index
        leaves out (one whose version policy selected no version, "Not loaded")."""
        self._require_initialized()
        return self._manager.index(unlisted=True)

    # -- inference -------------------------------------------------------------------------
    def infer(
        self,
        request: InferRequest,
        *,
        raise_on_error: bool = True,
        callback: Callable[[InferResponse | None, bool], None] | None = None,
        caller: Caller | None = None,
    ) -> ResponseStream:
        """Run a request built by the caller (frontends do this); see ``Model.infer``.

        ``caller`` (``Caller.THREAD``, ``Caller.LOOP``, or a frontend's attached loop)
        says that the caller will await or iterate the stream right away, and what kind
        of thread it is: when an instance is idle (and, for a loop, the model is known to
        be short) the calling thread runs the request before this returns, waking no
        other thread; otherwise it is queued with exactly one wake-up (dispatch.py).

        With ``callback``, each response is passed to ``callback(response, final)`` on the
        thread that produced it, in order (``response`` is None for a bare final flag),
        instead of being queued on the stream; the callback must not block.
        """
        return self._infer_on(self._resolve(request.model_name, request.model_version),
                              request, raise_on_error=raise_on_error, callback=callback,
                              caller=caller)

    def _infer_on(
        self,
        loaded: LoadedModel,
        request: InferRequest,
        *,
        raise_on_error: bool = True,
        callback: Callable[[InferResponse | None, bool], None] | None = None,
        caller: Caller | None = None,
    ) -> ResponseStream:
        """``infer`` for a caller that has resolved the request's model already."""
        try:
            return loaded.infer(request, raise_on_error=raise_on_error, callback=callback,
                                caller=caller)
        except UnavailableError:
            # A reload may have swapped this version out between the lookup and the
            # admission (it then refuses new requests while draining): the version
            # serving now takes the request, so a reload never fails a request.
            current = self._resolve(request.model_name, request.model_version)
            if current is loaded:
                raise
            return current.infer(request, raise_on_error=raise_on_error, callback=callback,
                                 caller=caller)

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> Caller:
        """Attach ``loop``, a frontend's event loop that serves until the frontend stops
        (called on its thread): the answer is the ``caller=`` of the requests started on
        it, which may leave payloads in flight there (a process-isolated model's, whose
        answer the loop reads when it comes; dispatch.py). Detach it before it closes."""
        return attach_loop(loop)

    def detach_loop(self, caller: Caller) -> None:
        """On the loop's thread, before it closes: no payload starts there any more, and
        what is still in flight from it is finished on this thread."""
        if isinstance(caller, AttachedLoop):
            detach_loop(caller)

    def _resolve(self, name: str, version: int) -> LoadedModel:
        self._require_running()
        return self._manager.get(name, version)

    # -- model control ---------------------------------------------------------------------
    def load(
        self,
        name: str,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        parameters: Mapping[str, Any] | None = None,
    ) -> Model:
        """Load (or reload) a model, as Triton's load API does; raises its load error.

        Only in EXPLICIT model control mode. ``config`` (Triton's JSON form, as a string
        or a dict) replaces the model's config.pbtxt for this load. ``files`` maps paths
        inside the model folder ("1/model.py", with or without Triton's "file:" prefix) to
        their contents: the model then loads from a temporary folder holding them (they
        need ``config``). ``parameters`` takes the same as Triton's load parameters
        (``{"config": ..., "file:1/model.py": b"..."}``). Loading an unchanged model
        does nothing; a failed reload leaves the serving version in place.
        """
        self._require_running()
        self._require_explicit()
        check_model_name(name)  # before anything is read, as Triton checks it
        if isinstance(config, Mapping) and parameters is None and any(
                key == "config" or key.startswith(FILE_PREFIX) for key in config):
            # tritonserver's load(model_name, parameters) called positionally: no model
            # config has a "config" or "file:" field, so the dict can only be parameters.
            config, parameters = None, config
        files = {key.removeprefix(FILE_PREFIX): bytes(value)
                 for key, value in (files or {}).items()}
        if parameters:
            parameter_config, parameter_files = split_load_parameters(parameters)
            config = parameter_config if parameter_config is not None else config
            files.update(parameter_files)
        override = None
        if config is not None:
            from .config import model_config_from_json

            # An override Triton cannot read fails its poll: answered "failed to poll"
            try:
                if isinstance(config, str):
                    config = json.loads(config)
                if not isinstance(config, Mapping):
                    raise InvalidArgumentError("the config override must be a JSON object")
                override = model_config_from_json(dict(config))
            except (TritonError, ValueError) as exc:
                raise self._manager.poll_failure(
                    name, f"Invalid config override: {exc}") from exc
        self._manager.load(name, override, files or None)
        return Model(self, name)

    async def aload(
        self,
        name: str,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        parameters: Mapping[str, Any] | None = None,
    ) -> Model:
        """``load`` on a worker thread: loading blocks (a model's initialize may take
        minutes)."""
        return await asyncio.to_thread(self.load, name, config, files, parameters=parameters)

    def unload(self, name: str, *, unload_dependents: bool = False) -> None:
        """Unload a model once its in-flight requests finish (up to ``exit_timeout``).

        Only in EXPLICIT model control mode. Ensembles using the model are unloaded
        first; ``unload_dependents`` also unloads the models an unloaded ensemble loaded
        for its steps. Unloading a model that is not loaded does nothing, as in Triton.
        """
        self._require_running()
        self._require_explicit()
        self._manager.unload(name, timeout=self._exit_timeout,
                             unload_dependents=unload_dependents)

    async def aunload(self, name: str, *, unload_dependents: bool = False) -> None:
        """``unload`` on a worker thread: it waits for in-flight requests."""
        await asyncio.to_thread(self.unload, name, unload_dependents=unload_dependents)

    def register_model_repository(self, repository_path: str | Path,
                                  name_mapping: Mapping[str, str] | None = None) -> None:
        """Serve one more model repository, as Triton's repository registration does.

        Only in EXPLICIT model control mode; nothing is loaded (``load`` does that).
        ``name_mapping`` maps subdirectories of the repository to the model names they are
        loaded under (their configs' names are replaced by these).
        """
        self._require_running()
        if self.options.model_control_mode is not ModelControlMode.EXPLICIT:
            raise UnsupportedError(
                "repository registration is not allowed if model control mode is not "
                "EXPLICIT")
        if not str(repository_path):  # Path("") would be the working directory
            raise InvalidArgumentError("failed to register '', repository not found")
        self._manager.register_repository(Path(repository_path), dict(name_mapping or {}))

    def unregister_model_repository(self, repository_path: str | Path) -> None:
        """Stop serving a registered repository's models by name; those loaded stay
        loaded. Only in EXPLICIT model control mode."""
        self._require_running()
        if self.options.model_control_mode is not ModelControlMode.EXPLICIT:
            raise UnsupportedError(
                "repository unregistration is not allowed if model control mode is not "
                "EXPLICIT")
        self._manager.unregister_repository(Path(repository_path))

    def poll_model_repository(self) -> None:
        """Apply the repository's changes now (POLL mode), as the poller does each
        ``repository_poll_secs``; returns once loads and unloads are done."""
        self._require_running()
        if self.options.model_control_mode is not ModelControlMode.POLL:
            raise UnavailableError("polling is disabled")
        self._manager.poll()

    def _require_explicit(self) -> None:
        if self.options.model_control_mode is not ModelControlMode.EXPLICIT:
            # Triton's text for NONE and POLL mode alike.
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled")

    def statistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        """Statistics of one model's versions, or of every ready model when name is ""."""
        self._require_initialized()
        if name:
            return self.model(name, version).statistics()
        snapshots = [model.stats.snapshot() for model in self._manager.loaded()]
        return sorted(snapshots, key=lambda s: (s.name, s.version))

    async def astatistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        return self.statistics(name, version)

    # -- settings ----------------------------------------------------------------------------
    def log_settings(self) -> dict[str, Any]:
        """Triton's logging settings (log_file, log_info, ..., log_format)."""
        return self._logs.settings.to_dict()

    async def alog_settings(self) -> dict[str, Any]:
        return self.log_settings()

    def update_log_settings(self, **changes: Any) -> dict[str, Any]:
        """Change logging at runtime with Triton's setting names; returns the new settings."""
        return self._logs.update(changes).to_dict()

    async def aupdate_log_settings(self, **changes: Any) -> dict[str, Any]:
        # at once: a new log file is opened, nothing waits
        return self.update_log_settings(**changes)

    def log(self, level: LogLevel | str, message: str) -> None:
        """Write ``message`` to the server log at ``level`` (LogLevel or its name) when
        that level is enabled, prefixed with the caller's file and line (Triton's
        TRITONSERVER_LogMessage)."""
        log_message(level, message, settings=self._logs.settings, stacklevel=2)

    def log_enabled(self, level: LogLevel | str) -> bool:
        """Whether ``level`` is enabled in this server's log settings."""
        return log_enabled(level, self._logs.settings)

    @property
    def tracer(self) -> Tracer:
        """The server's tracing: frontends read ``active`` and stamp with ``now_ns``."""
        return self._tracer

    def trace_settings(self, model: str = "") -> dict[str, Any]:
        """Trace settings in force for ``model`` (global ones for "")."""
        return self._tracer.settings(model)

    async def atrace_settings(self, model: str = "") -> dict[str, Any]:
        return self.trace_settings(model)

    def update_trace_settings(self, model: str = "", **changes: Any) -> dict[str, Any]:
        """Change trace settings, globally or for one model (None clears an override).

        New settings start new sampling counters; traces already running finish under
        the settings they started with."""
        return self._tracer.update(changes, model)

    async def aupdate_trace_settings(self, model: str = "", **changes: Any) -> dict[str, Any]:
        return self.update_trace_settings(model, **changes)

    # -- metrics -----------------------------------------------------------------------------
    def metrics(self, metric_format: str = "prometheus") -> str:
        """Server and custom metrics in Prometheus text format (what /metrics serves).

        With ``Options.metrics`` false only the custom metrics are reported.
        """
        if str(getattr(metric_format, "name", metric_format)).lower() != "prometheus":
            raise UnsupportedError(f"unsupported metric format '{metric_format}'")
        return self._metrics.render()

    def _require_running(self) -> None:
        if not self._started or self._stopped:
            raise UnavailableError("server is not running")
        self._require_initialized()

    # -- network frontends (serving.py) ---------------------------------------------------
    def serve_http(self, *, address: str = "0.0.0.0", port: int = 8000,
                   **settings: Any) -> Endpoint:
        """Serve this server over KServe v2 HTTP/REST until the returned Endpoint (or the
        server) stops; port 0 picks a free port (``endpoint.port``). ``settings``:
        thread_count, max_input_size, header_forward_pattern, reuse_port, restricted."""
        from .serving import start_endpoint

        return start_endpoint(self, "http", address=address, port=port, **settings)

    def serve_grpc(self, *, address: str = "0.0.0.0", port: int = 8001,
                   **settings: Any) -> Endpoint:
        """Serve this server over KServe v2 gRPC (see ``serve_http``); ``settings`` are
        the gRPC frontend's options (use_ssl, server_cert, keepalive_time_ms, ...)."""
        from .serving import start_endpoint

        return start_endpoint(self, "grpc", address=address, port=port, **settings)

    def serve_metrics(self, *, address: str = "0.0.0.0", port: int = 8002) -> Endpoint:
        """Serve ``metrics()`` at GET /metrics (see ``serve_http``)."""
        from .serving import start_endpoint

        return start_endpoint(self, "metrics", address=address, port=port)

    def _add_endpoint(self, endpoint: Endpoint) -> Endpoint | None:
        """Register a starting endpoint; returns the one of its kind already running
        (registering nothing then). Raises once the server is stopped."""
        with self._state_lock:
            if self._stopped:
                raise UnavailableError("server is not running")
            running = self._endpoints.get(endpoint.kind)
            if running is None:
                self._endpoints[endpoint.kind] = endpoint
            return running

    def _remove_endpoint(self, endpoint: Endpoint) -> None:
        with self._state_lock:
            if self._endpoints.get(endpoint.kind) is endpoint:
                del self._endpoints[endpoint.kind]
