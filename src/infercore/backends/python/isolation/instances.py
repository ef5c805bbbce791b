"""Process-isolated Python instances: each instance's model runs in a worker process.

Opt-in per model (docs/process_isolation.md)::

    parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }
    parameters: { key: "infercore.worker_start_method" value: { string_value: "spawn" } }

    isolation_from_config   the config's parameters -> Isolation (None: in-thread), at load
    IsolatedModel           a model version whose instances are worker processes; model.py
                            is imported by the workers only, never by the server
    IsolatedInstance        the BackendInstance the engine drives; restarts its worker

Shared memory sizes and the start timeout come from the python backend's configuration,
with Triton's names: ``--backend-config=python,shm-default-byte-size=N``,
``shm-growth-byte-size=N``, ``stub-timeout-seconds=N``.

An instance's states::

    starting -> ready -> (worker dies) -> restarting -> ready
                                                     -> failed -> (next execute) restarting
             -> stopped (finalize; from any state, after a restart in progress ends)

A crash fails the requests in flight (isolation/worker_handle.py), then the dead worker's event
thread starts a new worker at once, re-running ``initialize``, so the next request usually
finds it ready. If the new worker fails to start, the instance is ``failed``: each later
``execute`` tries one restart itself and fails its payload if that fails too, so a model
that cannot start is not restarted in a loop.

Threads: ``execute`` runs on the instance's backend thread or an inline caller, and
``execute_on_loop`` on an event loop (never two at once: the engine's ``busy`` lock), as
does ``finalize``; ``finish_from_loop`` runs on a loop's thread as the loop is detached;
the restart after a crash runs on the dead worker's event thread. A payload sent from a
loop whose worker died before reading it (or that finds no ready worker) is reported
``unstarted``: the engine hands it back to the backend thread, whose ``execute`` waits
for the replacement (dispatch.py). ``_lock`` guards the state, the current worker and the
retired ones; ``_changed`` tells waiters that a restart ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2

from ....errors import InternalError, InvalidArgumentError, TritonError
from ...base import InstanceInfo, InstanceState, ModelContext
from ..ipc.spawner import FORKSERVER, START_METHODS
from ..readiness import all_ready
from .worker_handle import WorkerHandle, WorkerSettings, WorkerUnreachable

if TYPE_CHECKING:
    from ....payload import Payload

__all__ = [
    "MODE_PROCESS",
    "MODE_THREAD",
    "PARAM_EXECUTION_MODE",
    "PARAM_START_METHOD",
    "InstanceState",
    "IsolatedInstance",
    "IsolatedModel",
    "Isolation",
    "WorkerStatistics",
    "default_execution_mode",
    "isolation_from_config",
]

logger = logging.getLogger(__name__)

PARAM_EXECUTION_MODE = "infercore.execution_mode"
PARAM_START_METHOD = "infercore.worker_start_method"
MODE_THREAD = "thread"
MODE_PROCESS = "process"
_KNOWN = (PARAM_EXECUTION_MODE, PARAM_START_METHOD)

# infercore's own python backend setting: where models that do not choose run
EXECUTION_MODE = "execution-mode"

# Triton's python backend settings (--backend-config=python,<key>=<value>), same defaults
SHM_DEFAULT_BYTE_SIZE = "shm-default-byte-size"
SHM_GROWTH_BYTE_SIZE = "shm-growth-byte-size"
STUB_TIMEOUT_SECONDS = "stub-timeout-seconds"
_DEFAULTS = {SHM_DEFAULT_BYTE_SIZE: 1 << 20, SHM_GROWTH_BYTE_SIZE: 1 << 20,
             STUB_TIMEOUT_SECONDS: 30}

_FINALIZE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Isolation:
    """A model's process isolation settings."""

    start_method: str = FORKSERVER


def isolation_from_config(
    config: model_config_pb2.ModelConfig, model_name: str, default_mode: str = MODE_THREAD
) -> Isolation | None:
    """The model's isolation settings; None when its instances run in-thread.

    ``default_mode`` applies to a model whose config does not choose (the server-wide
    ``--backend-config=python,execution-mode=...``).

    Raises:
        InvalidArgumentError: an unknown ``infercore.execution_mode``/``worker_*`` parameter
            or value (a typo would otherwise silently leave the model in-thread).
    """
    parameters = config.parameters
    for key in parameters:
        if (key.startswith(("infercore.execution_", "infercore.worker_"))
                and key not in _KNOWN):
            _config_error(model_name, f"unknown parameter '{key}'; process isolation reads "
                                      f"'{PARAM_EXECUTION_MODE}' and '{PARAM_START_METHOD}'")
    mode = parameters[PARAM_EXECUTION_MODE].string_value if (
        PARAM_EXECUTION_MODE in parameters) else default_mode
    if mode not in (MODE_THREAD, MODE_PROCESS):
        _config_error(model_name, f"parameter '{PARAM_EXECUTION_MODE}' must be "
                                  f"'{MODE_THREAD}' or '{MODE_PROCESS}', not '{mode}'")
    method = parameters[PARAM_START_METHOD].string_value if (
        PARAM_START_METHOD in parameters) else FORKSERVER
    if method not in START_METHODS:
        _config_error(model_name, f"parameter '{PARAM_START_METHOD}' must be one of "
                                  f"{', '.join(repr(m) for m in START_METHODS)}, not '{method}'")
    if mode == MODE_THREAD:
        if PARAM_START_METHOD in parameters:
            _config_error(model_name, f"parameter '{PARAM_START_METHOD}' needs "
                                      f"'{PARAM_EXECUTION_MODE}' set to '{MODE_PROCESS}'")
        return None
    return Isolation(method)


def default_execution_mode(backend_config: Mapping[str, str]) -> str:
    """The server-wide ``execution-mode`` python backend setting (default: thread).

    Raises:
        InvalidArgumentError: a value other than thread or process.
    """
    mode = backend_config.get(EXECUTION_MODE, MODE_THREAD)
    if mode not in (MODE_THREAD, MODE_PROCESS):
        raise InvalidArgumentError(
            f"python backend setting '{EXECUTION_MODE}' must be '{MODE_THREAD}' or "
            f"'{MODE_PROCESS}', not '{mode}'")
    return mode


def _config_error(model_name: str, text: str) -> None:
    raise InvalidArgumentError(f"model '{model_name}': {text}")


def _backend_setting(context: ModelContext, key: str) -> int:
    value = context.backend_config.get(key)
    if value is None:
        return _DEFAULTS[key]
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise InvalidArgumentError(
            f"python backend setting '{key}' must be a positive integer, not '{value}'"
        )
    return number


class IsolatedModel:
    """A Python model version whose instances each run in a worker process."""

    def __init__(self, context: ModelContext, isolation: Isolation) -> None:
        self._context = context
        self._isolation = isolation
        self._config = context.config.SerializeToString()
        self._shm_size = _backend_setting(context, SHM_DEFAULT_BYTE_SIZE)
        self._shm_growth = _backend_setting(context, SHM_GROWTH_BYTE_SIZE)
        self._timeout_s = float(_backend_setting(context, STUB_TIMEOUT_SECONDS))
        self._instances_lock = threading.Lock()
        self._instances: list[IsolatedInstance] = []  # for readiness checks
        if "EXECUTION_ENV_PATH" in context.config.parameters:
            logger.warning("model '%s': EXECUTION_ENV_PATH is not supported; its workers run "
                           "this server's interpreter", context.name)

    @property
    def context(self) -> ModelContext:
        return self._context

    def create_instance(self, info: InstanceInfo) -> IsolatedInstance:
        """Start the instance's worker and run ``initialize`` there.

        Raises:
            TritonError: as the in-thread mode raises it (the model's error text), or the
                worker could not start.
        """
        context = self._context
        settings = WorkerSettings(
            model_name=context.name,
            model_version=context.version,
            instance=info,
            config=self._config,
            model_dir=str(context.model_dir),
            version_dir=str(context.version_dir),
            repository=str(context.repository),
            backend_config=tuple(sorted(context.backend_config.items())),
            decoupled=context.decoupled,
            start_method=self._isolation.start_method,
            shm_size=self._shm_size,
            shm_growth=self._shm_growth,
            start_timeout_s=self._timeout_s,
            infer=context.infer,
            control=context.control,
            metrics=context.metrics,
        )
        instance = IsolatedInstance(settings)
        instance.start()
        with self._instances_lock:
            self._instances.append(instance)
        return instance

    @property
    def checks_readiness(self) -> bool:
        """ReadinessCheck: whether the model object in a worker has ``is_ready``."""
        with self._instances_lock:
            return any(instance.checks_readiness for instance in self._instances)

    def check_ready(self) -> bool:
        """ReadinessCheck: every worker's ``is_ready()`` answers True, within
        readiness.READY_TIMEOUT_S in all (READY_CHECK frames, asked at once)."""
        with self._instances_lock:
            instances = list(self._instances)
        answers = [answer for instance in instances
                   if (answer := instance.start_ready_check()) is not None]
        return all_ready(answers, self._context.name)

    def finalize(self) -> None:
        """Nothing to do: each instance finalized its own worker."""
        with self._instances_lock:
            self._instances.clear()


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
    """What an isolated instance can tell about its worker."""

    state: InstanceState
    pid: int  # 0 when there is no live worker
    crashes: int
    restarts: int
    last_failure: str  # why the last restart failed ("" if none did)


class IsolatedInstance:
    """The engine's instance of a process-isolated model: a worker, restarted when it dies."""

    def __init__(self, settings: WorkerSettings) -> None:
        self._settings = settings
        self._name = settings.instance.name
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._state = InstanceState.STARTING
        self._worker: WorkerHandle | None = None
        self._retired: list[WorkerHandle] = []
        self._crashes = 0
        self._restarts = 0
        self._last_failure = ""

    def start(self) -> None:
        worker = WorkerHandle(self._settings, self._on_death)
        worker.start()  # raises: the load fails
        with self._lock:
            self._worker = worker
            self._state = InstanceState.READY

    def statistics(self) -> WorkerStatistics:
        with self._lock:
            worker = self._worker
            pid = worker.pid if worker is not None and not worker.dead else 0
            return WorkerStatistics(self._state, pid, self._crashes, self._restarts,
                                    self._last_failure)

    # -- readiness ------------------------------------------------------------------------
    @property
    def checks_readiness(self) -> bool:
        with self._lock:
            worker = self._worker if self._state is InstanceState.READY else None
        return worker is not None and worker.checks_readiness

    def start_ready_check(self) -> concurrent.futures.Future[bool] | None:
        """Ask the worker's model ``is_ready()``; None when it has none, or no worker is
        up (a restart, a stopped instance: nothing to ask)."""
        with self._lock:
            worker = self._worker if self._state is InstanceState.READY else None
        if worker is None or not worker.checks_readiness:
            return None
        return worker.start_ready_check()

    # -- execute --------------------------------------------------------------------------
    def execute(self, payload: Payload) -> None:
        self._release_retired()
        for _ in range(2):
            worker = self._ready_worker()
            if worker is None:
                self._fail_unhealthy(payload)
                return
            try:
                worker.execute(payload)
                return
            except WorkerUnreachable:
                # It died before the payload reached it: wait for its replacement, retry once.
                self._await_replacement(worker)
        self._fail_unhealthy(payload)

    def loop_ready(self) -> bool:
        """Whether ``execute_on_loop`` may be used now: the worker is up (a restart, or a
        failed instance, is handled on the backend thread, which may wait)."""
        return self._state is InstanceState.READY and not self._settings.decoupled

    def execute_on_loop(self, payload: Payload, loop: asyncio.AbstractEventLoop,
                        done: Callable[[], None], unstarted: Callable[[], None]) -> None:
        """``execute`` for an event loop caller (``loop``, the running one): sends the
        payload and returns; ``done`` is called on the loop once it is answered
        (isolation/worker_handle.py), or ``unstarted`` when no ready worker read it. Raises before
        anything was sent (the engine answers)."""
        self._release_retired()
        with self._lock:
            worker = self._worker if self._state is InstanceState.READY else None
        if worker is not None:
            try:
                worker.execute_on_loop(payload, loop, done, unstarted)
                return
            except WorkerUnreachable:  # died just now: its requests are untouched
                pass
        unstarted()

    def finish_from_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """``loop`` is being detached: finish here a payload still in flight from it."""
        with self._lock:
            worker = self._worker
        if worker is not None:
            worker.finish_from_loop(loop)

    def _ready_worker(self) -> WorkerHandle | None:
        with self._lock:
            while self._state is InstanceState.RESTARTING:
                self._changed.wait()
            if self._state is InstanceState.READY:
                return self._worker
            if self._state is not InstanceState.FAILED:
                return None
            self._state = InstanceState.RESTARTING
        return self._restart()  # failed before: one more try, on this thread

    def _await_replacement(self, dead: WorkerHandle) -> None:
        with self._lock:
            self._changed.wait_for(
                lambda: self._worker is not dead or self._state is not InstanceState.READY,
                timeout=self._settings.start_timeout_s,
            )

    def _fail_unhealthy(self, payload: Payload) -> None:
        reason = self._last_failure or (
            f"The worker process of instance '{self._name}' is not running.")
        text = (f"Failed to process the request(s) for model '{self._name}', message: Stub "
                f"process is not healthy. {reason}")
        for request in payload.requests:
            sender = request.sender
            if sender is not None and not sender.closed:
                sender.send_error(InternalError(text))

    # -- restart --------------------------------------------------------------------------
    def _on_death(self, worker: WorkerHandle) -> None:
        """A worker died unasked (on its event thread): start its replacement now."""
        with self._lock:
            if worker is not self._worker or self._state is not InstanceState.READY:
                return
            self._crashes += 1
            self._retired.append(worker)
            self._state = InstanceState.RESTARTING
        self._restart()

    def _restart(self) -> WorkerHandle | None:
        """Start a new worker (state is RESTARTING); publish it, or the failure."""
        worker: WorkerHandle | None = WorkerHandle(self._settings, self._on_death)
        failure = ""
        try:
            worker.start()  # type: ignore[union-attr]
        except TritonError as exc:
            worker, failure = None, exc.message
        except Exception as exc:  # noqa: BLE001 - whatever it was, the instance stays up
            worker, failure = None, f"{type(exc).__name__}: {exc}"
        if worker is None:
            logger.error("restarting the worker process of instance '%s' failed: %s",
                         self._name, failure)
        with self._lock:
            if worker is not None:
                self._worker = worker
                self._restarts += 1
                self._state = InstanceState.READY
            else:
                self._worker = None
                self._last_failure = (
                    f"Restarting the worker process of instance '{self._name}' failed: "
                    f"{failure}")
                self._state = InstanceState.FAILED
            self._changed.notify_all()
        return worker

    def _release_retired(self) -> None:
        """Close the resources of dead workers whose event threads have ended."""
        if not self._retired:
            return
        with self._lock:
            done = [w for w in self._retired if not w.event_thread_alive()]
            self._retired = [w for w in self._retired if w.event_thread_alive()]
        for worker in done:
            worker.release()

    # -- finalize -------------------------------------------------------------------------
    def finalize(self) -> None:
        with self._lock:
            while self._state is InstanceState.RESTARTING:
                self._changed.wait()
            self._state = InstanceState.STOPPED
            worker, self._worker = self._worker, None
            retired, self._retired = self._retired, []
            self._changed.notify_all()
        if worker is not None:
            worker.finalize(_FINALIZE_TIMEOUT_S)
        for dead in retired:
            dead.release()
