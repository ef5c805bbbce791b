"""RayInstance: the BackendInstance the engine drives for a model instance living in a Ray
actor, and its supervision (restart with backoff, bounded).

The engine sees a local instance: its backend thread (or an inline caller) calls
``execute(payload)``, which ships the requests to the actor, waits for the result and
answers each request through its sender, so schedulers, batchers, the rate limiter and
statistics treat it as any other instance. Every Ray call goes through a ``Cluster``
(cluster.py; tests hand in a fake), so this module never imports Ray.

An instance's states::

    starting -> ready -> (actor lost) -> restarting -> ready
                                                    -> failed    (max_restarts spent)
             -> stopped (finalize, from any state)

A lost actor fails only the requests it was running (UnavailableError naming the model and
the instance). The instance's watcher thread (``infercore-ray-<model>-<instance>``) blocks
on the actor's ``watch`` call, which returns only at finalize, so a death is seen at once,
without polling; it then starts a new actor after a delay that doubles per consecutive
restart (``restart_backoff_ms``, at most 30 s), and gives up after ``max_restarts``
restarts with no successful execution in between. While an instance is not ready, its
payloads run on another ready Ray instance of the model (``failover``, off for sequence
models, whose sequences belong to one instance) or fail with UnavailableError.

Each instance counts what its actors ran, per Ray node (``NodeFigures``): the metrics'
per-node view (backends/ray/metrics.py). A payload run on another instance's actor (failover)
counts for that instance, where it ran.

Threads: ``execute`` runs on the instance's backend thread or an inline caller (one at a
time: the engine's ``busy`` lock, but failover payloads of other instances may run on this
instance's actor at the same time), ``finalize`` on the unloading thread, the supervision
on the watcher thread; ``_lock`` guards the state, the actor, the launch in progress, the
restart count and the per-node figures; ``_changed`` (on ``_lock``) tells
``wait_for_state`` of each change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...errors import TritonError, UnavailableError
from ...payload import Payload
from ...request import InferRequest
from ..base import InstanceInfo, InstanceState
from .host import HostReport
from .placement import RayPlacement
from .wire import RemoteRequest, RemoteResult, deliver, encode_requests

__all__ = ["ActorLost", "Cluster", "InstanceState", "NodeFigures", "RayInstance",
           "RayInstanceStatus"]

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0
_FINALIZE_TIMEOUT_S = 30.0


class ActorLost(Exception):
    """The actor died (or its node did); ``reason`` says how, in Ray's words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Cluster(Protocol):
    """The Ray calls an instance makes (cluster.py). Errors other than ActorLost are
    TritonErrors."""

    def reserve(self, group: str) -> None:
        """Reserve the group's placement group, if it has a strategy (once per group)."""
        ...

    def release(self) -> None:
        """Remove the placement groups."""
        ...

    def launch(self, info: InstanceInfo) -> Any:
        """Start an actor for ``info`` and its load; returns the launch, not waiting."""
        ...

    def wait_loaded(self, launch: Any, timeout_s: float) -> tuple[Any, HostReport]:
        """The actor once its instance is loaded; raises the load's error."""
        ...

    def store(self, array: np.ndarray) -> Any: ...

    def execute(self, actor: Any, requests: list[RemoteRequest]) -> RemoteResult: ...

    def watch(self, actor: Any) -> None:
        """Block until the actor is finalized; ActorLost if it dies first."""
        ...

    def finalize(self, actor: Any, timeout_s: float) -> None:
        """Finalize the instance in the actor, then end the actor (errors logged)."""
        ...

    def kill(self, actor_or_launch: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """What one instance's actors ran on one Ray node (completed executions only)."""

    node_id: str
    node_ip: str
    executions: int
    inferences: int  # the executions' batch sizes, summed (Triton's inference count)
    infer_ns: int  # the model's own time, measured in the actor
    call_ns: int  # shipping, the Ray call and the result's return, as this server saw it


@dataclass(frozen=True, slots=True)
class RayInstanceStatus:
    """One instance placed on Ray, as its model reports it."""

    name: str
    state: InstanceState
    node_id: str  # "" until loaded; the last node while restarting
    pid: int
    restarts: int  # actors started after the first one
    node_ip: str = ""
    figures: tuple[NodeFigures, ...] = ()  # per node it ran on, in first-use order


# (the instance that owns the actor, the actor), or None when no instance is ready
PickOther = Callable[["RayInstance"], "tuple[RayInstance, Any] | None"]


class RayInstance:
    """A model instance whose backend instance lives in a Ray actor."""

    def __init__(
        self,
        model_name: str,
        info: InstanceInfo,
        cluster: Cluster,
        placement: RayPlacement,
        *,
        pick_other: PickOther | None = None,
    ) -> None:
        self.model_name = model_name
        self.info = info
        self._cluster = cluster
        self._placement = placement
        self._pick_other = pick_other  # None: no failover
        self._lock = threading.Lock()
        self._state = InstanceState.STARTING
        self._changed = threading.Condition(self._lock)
        self._actor: Any = None
        self._launch: Any = None  # a launch in progress, killed by finalize
        self._report: HostReport | None = None
        self._consecutive = 0  # restarts since the last successful execution
        self._restarts = 0
        self._figures: dict[tuple[str, str], list[int]] = {}  # (node id, ip) -> 4 counts
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def state(self) -> InstanceState:
        return self._state

    def status(self) -> RayInstanceStatus:
        with self._lock:
            report = self._report
            figures = tuple(NodeFigures(node_id, node_ip, *counts)
                            for (node_id, node_ip), counts in self._figures.items())
            return RayInstanceStatus(self.name, self._state,
                                     report.node_id if report else "",
                                     report.pid if report else 0, self._restarts,
                                     report.node_ip if report else "", figures)

    def wait_for_state(self, states: Sequence[InstanceState], timeout: float) -> bool:
        """Wait until the instance is in one of ``states``; False at the timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._state in states, timeout)

    def _set_state(self, state: InstanceState) -> None:
        """Holds _lock."""
        self._state = state
        self._changed.notify_all()

    def ready_actor(self) -> Any:
        """The actor when the instance is ready, else None (for failover)."""
        with self._lock:
            return self._actor if self._state is InstanceState.READY else None

    def _count(self, actor: Any, batch_size: int, infer_ns: int, call_ns: int) -> None:
        """Add a completed execution of ``actor`` (this instance's) to its node's figures."""
        with self._lock:
            report = self._report
            if self._actor is not actor or report is None:
                return  # replaced meanwhile: its node is no longer known here
            counts = self._figures.setdefault((report.node_id, report.node_ip), [0, 0, 0, 0])
            counts[0] += 1
            counts[1] += batch_size
            counts[2] += infer_ns
            counts[3] += call_ns

    # -- start ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the actor and its load without waiting (``wait_started`` waits)."""
        self._launch = self._cluster.launch(self.info)

    def wait_started(self) -> HostReport:
        """Wait for the load; on success start watching the actor.

        Raises:
            TritonError: the load failed or timed out (the actor is ended).
        """
        launch = self._launch
        try:
            actor, report = self._cluster.wait_loaded(launch, self._placement.start_timeout_s)
        except ActorLost as lost:
            self._cluster.kill(launch)
            raise UnavailableError(
                f"instance '{self.name}' of model '{self.model_name}' on Ray died while "
                f"loading: {lost.reason}") from None
        except BaseException:
            self._cluster.kill(launch)
            raise
        with self._lock:
            if self._state is InstanceState.STOPPED:  # finalized meanwhile
                self._cluster.kill(actor)
                raise UnavailableError(f"instance '{self.name}' of model "
                                       f"'{self.model_name}' was finalized while loading")
            self._launch = None
            self._actor = actor
            self._report = report
            self._set_state(InstanceState.READY)
        logger.info("instance %s of model %s runs on Ray node %s (pid %d)", self.name,
                    self.model_name, report.node_id or "?", report.pid)
        watcher = threading.Thread(target=self._supervise, daemon=True,
                                   name=f"infercore-ray-{self.model_name}-{self.name}")
        self._watcher = watcher
        watcher.start()
        return report

    # -- execution -----------------------------------------------------------------------
    def execute(self, payload: Payload) -> None:
        requests = payload.requests
        with self._lock:
            state, actor = self._state, self._actor
        owner = self
        if state is not InstanceState.READY:
            other = self._pick_other(self) if self._pick_other is not None else None
            if other is None:
                _fail(requests, UnavailableError(
                    f"instance '{self.name}' of model '{self.model_name}' on Ray is "
                    f"{state.value} and no other instance of the model is ready"))
                return
            owner, actor = other
        message = encode_requests(requests, self._cluster.store)
        payload.mark_compute_input_end()  # provisional: corrected from the actor's phases
        try:
            result = self._cluster.execute(actor, message)
        except ActorLost as lost:
            owner._lost(actor)
            _fail(requests, UnavailableError(
                f"instance '{owner.name}' of model '{self.model_name}' on Ray failed: its "
                f"actor died while running the request ({lost.reason})"))
            return
        if owner is self:
            with self._lock:
                self._consecutive = 0
        call_ns = _mark_phases(payload, result)
        owner._count(actor, payload.batch_size, result.infer_ns, call_ns)
        deliver(requests, result)

    def _lost(self, actor: Any) -> None:
        """An execution found the actor dead: stop using it and make sure it is ended, so
        the watcher restarts it (Ray may also report a live but unreachable actor)."""
        with self._lock:
            if self._actor is not actor or self._state is not InstanceState.READY:
                return
            self._set_state(InstanceState.RESTARTING)
        self._cluster.kill(actor)

    # -- supervision (watcher thread) ----------------------------------------------------
    def _supervise(self) -> None:
        while True:
            with self._lock:
                actor = self._actor
                if self._state is InstanceState.STOPPED or actor is None:
                    return
            try:
                self._cluster.watch(actor)
                return  # finalized
            except ActorLost as lost:
                reason = lost.reason
            with self._lock:
                if self._state is InstanceState.STOPPED:
                    return
                self._set_state(InstanceState.RESTARTING)
            logger.warning("instance %s of model %s on Ray was lost: %s", self.name,
                           self.model_name, reason)
            if not self._restart():
                return

    def _restart(self) -> bool:
        """Start a new actor (after a backoff); False when stopped or out of restarts."""
        placement = self._placement
        while True:
            with self._lock:
                if self._state is InstanceState.STOPPED:
                    return False
                if self._consecutive >= placement.max_restarts:
                    self._set_state(InstanceState.FAILED)
                    logger.error("instance %s of model %s on Ray failed: %d restarts without "
                                 "a successful execution; not restarting it again",
                                 self.name, self.model_name, self._consecutive)
                    return False
                self._consecutive += 1
                attempt = self._consecutive
            delay_s = min(placement.restart_backoff_ms / 1000 * 2 ** (attempt - 1),
                          MAX_BACKOFF_S)
            if self._stop.wait(delay_s):
                return False
            try:
                launch = self._cluster.launch(self.info)
            except TritonError as exc:
                logger.warning("restart %d of instance %s of model %s on Ray failed: %s",
                               attempt, self.name, self.model_name, exc)
                continue
            with self._lock:
                stopped = self._state is InstanceState.STOPPED
                if not stopped:
                    self._launch = launch
            if stopped:
                self._cluster.kill(launch)
                return False
            try:
                actor, report = self._cluster.wait_loaded(launch, placement.start_timeout_s)
            except (ActorLost, TritonError) as exc:
                self._cluster.kill(launch)
                logger.warning("restart %d of instance %s of model %s on Ray failed: %s",
                               attempt, self.name, self.model_name, exc)
                continue
            with self._lock:
                self._launch = None
                stopped = self._state is InstanceState.STOPPED
                if not stopped:
                    self._actor, self._report = actor, report
                    self._set_state(InstanceState.READY)
                    self._restarts += 1
            if stopped:
                self._cluster.kill(actor)
                return False
            logger.info("instance %s of model %s restarted on Ray node %s (pid %d)",
                        self.name, self.model_name, report.node_id or "?", report.pid)
            return True

    # -- finalize ------------------------------------------------------------------------
    def finalize(self) -> None:
        """End the actor (finalizing the instance in it first) and the watcher. Idempotent."""
        with self._lock:
            if self._state is InstanceState.STOPPED:
                return
            self._set_state(InstanceState.STOPPED)
            actor, self._actor = self._actor, None
            launch, self._launch = self._launch, None
        self._stop.set()
        if launch is not None:
            self._cluster.kill(launch)
        if actor is not None:
            self._cluster.finalize(actor, _FINALIZE_TIMEOUT_S)
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(_FINALIZE_TIMEOUT_S)
            if watcher.is_alive():
                logger.error("watcher of instance %s of model %s did not stop", self.name,
                             self.model_name)

    def __repr__(self) -> str:
        return f"RayInstance(model={self.model_name!r}, name={self.name!r}, {self._state.value})"


def _fail(requests: Sequence[InferRequest], error: TritonError) -> None:
    for request in requests:
        sender = request.sender
        if sender is not None and not sender.closed:
            sender.send_error(error)


def _mark_phases(payload: Payload, result: RemoteResult) -> int:
    """Place the actor's compute phases on this server's clock: infer is the model's own
    time; shipping the inputs counts as input, bringing the outputs back as output.
    Returns the call's duration (from the execution's start, shipping included)."""
    started = payload.compute_input_end_ns
    payload.mark_compute_output_start()
    returned = payload.compute_output_start_ns
    call_ns = returned - (payload.requests[0].compute_start_ns or started)
    output_start = max(started, returned - result.output_ns)
    payload.compute_input_end_ns = max(started, output_start - result.infer_ns)
    payload.compute_output_start_ns = output_start
    return max(call_ns, 0)
