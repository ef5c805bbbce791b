"""Where each payload runs: the one place a payload meets a model instance.

Schedulers form payloads and never touch an instance (scheduling/); ``Dispatch`` (one per
loaded model version) decides which thread executes each payload, grants the instance's
rate-limiter resources, executes it (``ModelInstance.execute`` is called here and nowhere
else) and releases the instance. Three entry points, the same for every scheduler; each
earns its place by a measured figure (docs/architecture.md, "Dispatch entry points"):

1. The backend-thread loop (``BackendThread``: one per instance, or per device for a
   device-blocking backend): ``next_payload -> grant -> execute -> release`` until the
   scheduler returns None. Warmup executes its samples the same way (``run``).
2. The caller runs: ``submit`` with ``Caller.THREAD`` or ``Caller.LOOP`` (the caller says
   what it is, caller.py), or ``run_inline`` for a reader that made no promise and now
   blocks on its stream. The calling thread reserves an idle instance without waiting
   and executes the payload the scheduler forms for it (``enqueue(take=True)``, ``take``)
   before returning: no thread is woken, no core crossed. On a loop, only an instance
   whose recent executions were short qualifies (``ModelInstance.runs_short``). When no
   instance can be reserved now, the request is queued with its one wake-up in the same
   call, so no request ever waits on a reader that may not come.
3. The loop-driven chain: ``submit`` with an attached loop (``attach_loop``) for a model
   whose one instance can run a payload from an event loop without blocking it
   (process-isolated Python instances: ``ModelInstance.runs_on_loop``). The loop reserves
   the idle instance and starts the payload; the backend reads the answer when the loop
   finds it readable and calls back, and the scheduler's next ready payload is started the
   same way (``poll``). While the chain runs, its loop's requests join its queue without a
   wake-up (``join_chain``). It ends, releasing the instance, when nothing is ready, when a
   thread waits for the instance, when the instance cannot run on the loop any more (its
   worker restarting, the instance finalizing), or when the loop is detached. A payload
   the backend could not start (its worker died before reading it) is handed back to the
   instance threads (``hand_back``), which wait for the replacement.

Owned loops: a frontend attaches its loop when it starts serving and detaches it before
the loop closes (frontends/loop_frontend.py). Detaching stops new chains there and finishes,
on the detaching (loop) thread, a payload still in flight from it, so nothing is ever left
on a closed loop. A loop that was not attached (a caller's ``asyncio.run``) is a plain
``Caller.LOOP``: it never starts a chain.

Threads: backend threads run (1); callers run (2) on their own threads; chains (3) run on
their loop's thread, and a loop's attachment is used by that thread only. Reservation =
the instance's ``busy`` lock (instance.py) plus its rate-limiter resources: an instance
runs one payload at a time whichever thread runs it, only while its resources are free.
``Dispatch`` holds no lock of its own; its fields are set by the loading and unloading
thread while no request can reach it (before serving starts, after the scheduler stopped).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from .caller import Caller
from .clock import Clock, seconds_until
from .instance import ModelInstance, pin_current_thread
from .rate_limiter import RateLimiter
from .request import InferRequest

if TYPE_CHECKING:
    from .payload import Payload
    from .scheduling.base import Scheduler

__all__ = ["AttachedLoop", "BackendThread", "Caller", "Dispatch", "attach_loop",
           "backend_threads", "detach_loop"]

logger = logging.getLogger(__name__)

_NO_LIMITS = RateLimiter()


class AttachedLoop(Caller):
    """A frontend's event loop, attached for as long as it serves (``attach_loop``): the
    ``caller=`` of requests started on it. Used on the loop's own thread only."""

    __slots__ = ("loop", "attached", "chains")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__("LOOP", on_loop=True)
        self.loop = loop
        self.attached = True
        self.chains: set[ModelInstance] = set()  # instances with a payload in flight here

    def __repr__(self) -> str:
        return f"AttachedLoop(attached={self.attached}, chains={len(self.chains)})"


def attach_loop(loop: asyncio.AbstractEventLoop) -> AttachedLoop:
    """Attach ``loop`` (a frontend's, on its thread) until ``detach_loop``: requests
    started with the attachment as their caller may leave payloads in flight there."""
    return AttachedLoop(loop)


def detach_loop(attached: AttachedLoop) -> None:
    """On the loop's thread, before it closes: no payload starts there from now on, and
    each one still in flight from it is finished on this thread (or handed back to its
    instance's threads, if its worker never read it)."""
    attached.attached = False
    for instance in list(attached.chains):
        instance.finish_from_loop(attached.loop)
        attached.chains.discard(instance)


class Dispatch:
    """Where the payloads of one model version run (see the module doc)."""

    def __init__(self, model_name: str, instances: Sequence[ModelInstance] = (),
                 rate_limiter: RateLimiter = _NO_LIMITS) -> None:
        self._model_name = model_name
        self._limiter = rate_limiter
        # the active instances: a caller may borrow an idle one
        self._active = tuple(i for i in instances if not i.info.passive)
        self._scheduler: Scheduler | None = None
        self._callers_run = False
        self._loop_instance: ModelInstance | None = None
        self._threads: list[BackendThread] = []

    # -- lifecycle (the loading and unloading thread) ----------------------------------------
    def start(self, scheduler: Scheduler, *,
              cores: Mapping[str, frozenset[int] | None] | None = None,
              device_blocking: bool = False, threads: bool = True) -> None:
        """Serve ``scheduler``'s payloads: start the backend threads (``threads``) and let
        callers run payloads when the scheduler allows it."""
        self._scheduler = scheduler
        active = self._active
        self._callers_run = scheduler.callers_run and bool(active)
        # One instance that can run payloads from an event loop: attached loops chain them.
        self._loop_instance = (active[0] if self._callers_run and len(active) == 1
                               and active[0].loop_capable else None)
        if threads and active:
            self._threads = backend_threads(self._model_name, list(active), self, cores or {},
                                            device_blocking)
            for thread in self._threads:
                thread.start()

    def stop(self, clock: Clock, deadline_ns: int) -> None:
        """Stop the scheduler, join the backend threads (until ``deadline_ns`` on
        ``clock``, plus a second), answer what is left queued; lend no instance any more."""
        scheduler = self._scheduler
        if scheduler is None:
            return
        scheduler.stop()
        for thread in self._threads:
            if not thread.join(seconds_until(clock, deadline_ns) + 1.0):
                logger.error("thread %s of model %s did not stop in time", thread.name,
                             self._model_name)
        scheduler.drain()
        self._callers_run = False
        self._loop_instance = None
        self._active = ()
        self._threads = []

    # -- 1: the backend-thread loop ----------------------------------------------------------
    def serve(self, instances: Sequence[ModelInstance]) -> None:
        """The loop of a backend thread running ``instances`` (in turn); returns when the
        scheduler stops."""
        assert self._scheduler is not None
        next_payload = self._scheduler.next_payload
        turn = 0
        while True:
            payload = next_payload()
            if payload is None:
                return
            instance = instances[turn % len(instances)]
            turn += 1
            self.run(instance, payload)

    def run(self, instance: ModelInstance, payload: Payload) -> None:
        """Wait for ``instance`` and its resources, execute ``payload``, release."""
        limiter = self._limiter
        limiter.acquire(instance, instance.resources)
        instance.acquire()
        try:
            instance.execute(payload)
        finally:
            instance.release()
            limiter.release(instance, instance.resources)

    # -- 2: the caller runs ------------------------------------------------------------------
    def submit(self, request: InferRequest, caller: Caller | None) -> None:
        """Hand a validated request (its sender set) to the model: run it on the calling
        thread when ``caller`` may and an instance is idle, else queue it with one
        wake-up. Raises what the scheduler refuses at the door (stopped, a full queue)."""
        scheduler = self._scheduler
        assert scheduler is not None
        if caller is None or not self._callers_run or request.cancelled:
            scheduler.enqueue(request)
            return
        if (self._loop_instance is not None and type(caller) is AttachedLoop
                and self._submit_on_loop(request, caller)):
            return
        instance = self._reserve_idle(caller.on_loop)
        if instance is None:
            scheduler.enqueue(request)
            return
        try:
            payload = scheduler.enqueue(request, take=True)
            if payload is not None:
                instance.execute(payload)
        finally:
            self._release(instance)

    def run_inline(self, request: InferRequest, *, on_loop: bool = False) -> bool:
        """A reader blocking on the queued ``request`` (ResponseStream's runner): execute
        the payload holding it on this thread if an instance is idle; False (nothing done)
        otherwise. ``on_loop``: only an instance known to be short qualifies."""
        if not self._callers_run:
            return False
        instance = self._reserve_idle(on_loop)
        if instance is None:
            return False
        try:
            payload = self._scheduler.take(request)  # type: ignore[union-attr]
            if payload is None:
                return False  # taken meanwhile by an instance thread or a cancel
            instance.execute(payload)
            return True
        finally:
            self._release(instance)

    def _reserve_idle(self, on_loop: bool) -> ModelInstance | None:
        """An idle instance reserved for the calling thread without waiting, or None."""
        for instance in self._active:
            if on_loop and not instance.runs_short():
                continue  # unknown or long: the loop must not wait for it
            if self._try_reserve(instance):
                return instance
        return None

    def _try_reserve(self, instance: ModelInstance) -> bool:
        if not instance.try_acquire():
            return False
        if self._limiter.try_acquire(instance, instance.resources):
            return True
        instance.release()
        return False

    def _release(self, instance: ModelInstance) -> None:
        instance.release()
        self._limiter.release(instance, instance.resources)

    # -- 3: the loop-driven chain ------------------------------------------------------------
    def _submit_on_loop(self, request: InferRequest, caller: AttachedLoop) -> bool:
        """Start ``request`` from the caller's loop, or leave it to the chain that loop
        runs on the instance; False (nothing done) when neither applies."""
        instance = self._loop_instance
        scheduler = self._scheduler
        if instance is None or scheduler is None or not caller.attached:
            return False
        if not instance.runs_on_loop():
            return False
        if self._try_reserve(instance):
            try:
                payload = scheduler.enqueue(request, take=True, chain=caller)
            except BaseException:
                self._release(instance)
                raise
            if payload is None:  # queued with its wake-up behind earlier requests
                self._release(instance)
            else:
                caller.chains.add(instance)
                self._start_on_loop(instance, caller, payload)
            return True
        if scheduler.join_chain(request, caller):
            request.runs_on_loop = True  # the chain will run it: no thread answers
            return True
        return False

    def _start_on_loop(self, instance: ModelInstance, caller: AttachedLoop,
                       payload: Payload) -> None:
        for request in payload.requests:
            request.runs_on_loop = True
        instance.execute_on_loop(payload, caller.loop,
                                 partial(self._chain_next, instance, caller))

    def _chain_next(self, instance: ModelInstance, caller: AttachedLoop,
                    unstarted: Payload | None) -> None:
        """On the loop, a chained payload was answered (``unstarted``: could not start):
        start the scheduler's next ready payload the same way, or end the chain."""
        scheduler = self._scheduler
        payload = None
        if scheduler is not None:
            if unstarted is not None:
                scheduler.end_chain(caller)
                scheduler.hand_back(unstarted)  # the instance threads wait for the worker
            elif caller.attached and instance.runs_on_loop():
                payload = scheduler.poll(caller)  # None: ended, what is queued signalled
            else:
                scheduler.end_chain(caller)
        if payload is None:
            caller.chains.discard(instance)
            self._release(instance)
            return
        self._start_on_loop(instance, caller, payload)


class BackendThread:
    """The thread that runs one instance (or every instance of a device-blocking group):
    ``Dispatch.serve`` on a thread of its own, named ``infercore-<model>-<instance>``."""

    def __init__(
        self,
        name: str,
        instances: Sequence[ModelInstance],
        dispatch: Dispatch,
        cpu_cores: frozenset[int] | None = None,
    ) -> None:
        self.name = name
        self._instances = tuple(instances)
        self._dispatch = dispatch
        self._cpu_cores = cpu_cores
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # daemon: a hung model must not keep the interpreter alive at exit
        thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread = thread
        thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it did (or never started)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        if self._cpu_cores:
            pin_current_thread(self.name, self._cpu_cores)
        self._dispatch.serve(self._instances)


def backend_threads(
    model_name: str,
    instances: list[ModelInstance],
    dispatch: Dispatch,
    cores: Mapping[str, frozenset[int] | None],
    device_blocking: bool,
) -> list[BackendThread]:
    """One thread per instance, or per (kind, device) for a device-blocking backend."""
    if not device_blocking:
        return [BackendThread(f"infercore-{model_name}-{i.name}", [i], dispatch,
                              cores.get(i.name)) for i in instances]
    by_device: dict[tuple[str, int], list[ModelInstance]] = {}
    for instance in instances:
        by_device.setdefault((instance.info.kind, instance.info.device_id), []).append(instance)
    return [
        BackendThread(f"infercore-{model_name}-{kind.removeprefix('KIND_').lower()}{device}",
                      group, dispatch, cores.get(group[0].name))
        for (kind, device), group in by_device.items()
    ]
