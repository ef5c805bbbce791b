"""Every call this server makes to Ray's API: connecting, placement groups, actors.

    connect(address)      ray.init once per process (a process that already runs Ray keeps
                          its connection)
    RayCluster            one model version's Ray side: its placement groups, the actors of
                          its instances, and the calls RayInstance makes on them, with Ray's
                          exceptions translated here (ActorLost, or a TritonError)

Importing this module imports Ray; hook.py imports it only for a model that places a group
on Ray. Threads: ``connect`` is serialised by ``_LOCK``; the loading thread reserves
placement groups and launches actors; backend threads, watcher threads and the unloading
thread call the rest (Ray's API is thread-safe). ``_lock`` guards the placement groups.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ...errors import InternalError, UnavailableError, error_from_code
from ..base import InstanceInfo
from .host import HostReport, HostSpec, InstanceHost, LoadOutcome
from .instance import ActorLost
from .placement import RayPlacement
from .wire import RemoteRequest, RemoteResult

__all__ = ["RayCluster", "connect"]

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_ACTOR_CLASS: Any = None
_CONNECTED = ""  # the address this module connected to ("" when Ray was started by others)
WATCH_GROUP = "watch"


def connect(address: str, model_name: str) -> None:
    """Join the Ray cluster at ``address`` ("auto", "local", "host:port", "ray://...").

    Raises:
        UnavailableError: Ray could not connect (or start, for "local").
    """
    global _CONNECTED
    with _LOCK:
        if ray.is_initialized():
            if _CONNECTED and address != _CONNECTED:
                logger.warning("model %s asks for the Ray cluster at %s, but this process "
                               "is connected to %s (Ray allows one per process): using it",
                               model_name, address, _CONNECTED)
            return
        options: dict[str, Any] = {}
        if address == "local":  # a private single-node Ray: no dashboard to serve
            options["include_dashboard"] = False
        # On the main thread ray.init replaces the SIGTERM handler with one that exits at
        # once: the server's own (drain, then unload) must stay.
        main = threading.current_thread() is threading.main_thread()
        saved = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS} if main else {}
        try:
            ray.init(address=address, **options)
        except Exception as exc:
            raise UnavailableError(
                f"model '{model_name}' runs instances on Ray, but connecting to the Ray "
                f"cluster at '{address}' failed: {type(exc).__name__}: {exc}") from exc
        finally:
            for sig, handler in saved.items():
                if handler is not None and signal.getsignal(sig) is not handler:
                    signal.signal(sig, handler)
        _CONNECTED = address
        logger.info("connected to the Ray cluster at %s", address)


def _actor_class() -> Any:
    global _ACTOR_CLASS
    with _LOCK:
        if _ACTOR_CLASS is None:
            # "watch" holds the one long call that tells of the actor's death; everything
            # else runs one at a time in the default group.
            _ACTOR_CLASS = ray.remote(  # type: ignore[call-overload]
                concurrency_groups={WATCH_GROUP: 1})(InstanceHost)
        return _ACTOR_CLASS


@dataclass(frozen=True, slots=True)
class Launch:
    """An actor being started, and its pending load."""

    actor: Any
    load: Any  # ObjectRef[LoadOutcome]
    info: InstanceInfo


class RayCluster:
    """The Ray side of one model version."""

    def __init__(self, spec: HostSpec, placements: dict[str, RayPlacement]) -> None:
        self._spec = spec
        self._placements = placements
        self._lock = threading.Lock()
        self._groups: dict[str, PlacementGroup] = {}

    @property
    def model_name(self) -> str:
        return self._spec.model_name

    # -- placement groups ----------------------------------------------------------------
    def reserve(self, group: str) -> None:
        """Reserve the group's placement group, when it has a strategy (once).

        Raises:
            UnavailableError: the cluster cannot hold it within the start timeout.
        """
        placement = self._placements[group]
        with self._lock:
            if not placement.strategy or group in self._groups:
                return
        bundle = placement.bundle()
        pg = placement_group([dict(bundle) for _ in range(placement.count)],
                             strategy=placement.strategy)
        try:
            ray.get(pg.ready(), timeout=placement.start_timeout_s)
        except GetTimeoutError:
            remove_placement_group(pg)
            raise UnavailableError(
                f"model '{self.model_name}': the placement group of instance group "
                f"'{group}' ({placement.count} x {bundle}, {placement.strategy}) could not "
                f"be reserved on the Ray cluster within {placement.start_timeout_s:g} s"
            ) from None
        with self._lock:
            self._groups[group] = pg

    def release(self) -> None:
        """Remove the placement groups (after the actors ended)."""
        with self._lock:
            groups, self._groups = list(self._groups.values()), {}
        for pg in groups:
            try:
                remove_placement_group(pg)
            except Exception:
                logger.exception("removing a placement group of model %s failed",
                                 self.model_name)

    # -- actors --------------------------------------------------------------------------
    def launch(self, info: InstanceInfo) -> Launch:
        if not ray.is_initialized():
            # Ray would connect again on its own: after a shutdown, start nothing.
            raise UnavailableError(
                f"model '{self.model_name}': this process is no longer connected to Ray")
        placement = self._placements[info.group_name]
        options = placement.actor_options()
        with self._lock:
            pg = self._groups.get(info.group_name)
        if pg is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=info.index)
        # Restarts are ours (backoff, bounds, failing in-flight requests): Ray's are off.
        actor = _actor_class().options(max_restarts=0, max_task_retries=0, **options).remote()
        return Launch(actor, actor.load.remote(self._spec, info), info)

    def wait_loaded(self, launch: Launch, timeout_s: float) -> tuple[Any, HostReport]:
        where = f"instance '{launch.info.name}' of model '{self.model_name}' on Ray"
        try:
            outcome: LoadOutcome = ray.get(launch.load, timeout=timeout_s)
        except GetTimeoutError:
            placement = self._placements[launch.info.group_name]
            raise UnavailableError(
                f"{where} was not placed and loaded within {timeout_s:g} s: no node of the "
                f"cluster may offer {placement.bundle() or 'what it asks'}") from None
        except RayActorError as exc:
            raise ActorLost(_reason(exc)) from None
        except RayError as exc:  # e.g. its runtime_env could not be set up
            raise InternalError(f"{where} could not start: {_reason(exc)}") from None
        if outcome.error is not None:
            raise error_from_code(outcome.error.code, outcome.error.message)
        assert outcome.report is not None
        return launch.actor, outcome.report

    def store(self, array: np.ndarray) -> Any:
        try:
            return ray.put(array)
        except RayError as exc:  # e.g. the object store is full
            raise UnavailableError(
                f"model '{self.model_name}': an input could not be put in Ray's object "
                f"store: {_reason(exc)}") from None

    def execute(self, actor: Any, requests: list[RemoteRequest]) -> RemoteResult:
        try:
            result: RemoteResult = ray.get(actor.execute.remote(requests))
        except RayActorError as exc:
            raise ActorLost(_reason(exc)) from None
        except RayTaskError as exc:
            raise InternalError(
                f"model '{self.model_name}' on Ray: {_reason(exc)}") from None
        except RayError as exc:
            raise UnavailableError(
                f"model '{self.model_name}' on Ray: {_reason(exc)}") from None
        return result

    def watch(self, actor: Any) -> None:
        try:
            ray.get(actor.watch.options(concurrency_group=WATCH_GROUP).remote())
        except RayError as exc:
            raise ActorLost(_reason(exc)) from None

    def finalize(self, actor: Any, timeout_s: float) -> None:
        try:
            ray.get(actor.finalize.remote(), timeout=timeout_s)
        except RayActorError:
            pass  # already gone: nothing to finalize
        except (RayError, GetTimeoutError) as exc:
            logger.error("finalize of an instance of model %s on Ray failed: %s",
                         self.model_name, _reason(exc))
        self.kill(actor)

    def kill(self, actor_or_launch: Any) -> None:
        actor = actor_or_launch.actor if isinstance(actor_or_launch, Launch) else actor_or_launch
        try:
            ray.kill(actor, no_restart=True)
        except Exception as exc:  # already dead, or Ray is shutting down
            logger.debug("killing an actor of model %s: %s", self.model_name, exc)


_REASON_MAX = 300


def _reason(exc: BaseException) -> str:
    """Ray's explanation, which it puts on the last line of a long message, without the
    troubleshooting advice it appends to a worker's death."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    reason = lines[-1].split(" Some common causes include:")[0]
    return reason if len(reason) <= _REASON_MAX else reason[:_REASON_MAX - 3] + "..."
