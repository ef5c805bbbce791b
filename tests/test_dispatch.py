"""dispatch.py: the loop-driven chain and the loops' owned lifetimes, with a fake backend.

The fake backend declares ``LoopInstance`` (as process-isolated instances do): payloads
started from a loop are answered on that loop one callback later, or left in flight until
the test (or a detach) finishes them. The caller-runs and backend-thread paths are
covered by tests/scheduling/test_caller_runs.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.backends.base import InstanceInfo, LoopInstance
from infercore.caller import Caller
from infercore.dispatch import BackendThread, Dispatch, attach_loop, detach_loop
from infercore.instance import ModelInstance
from infercore.payload import Payload
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.scheduling.dynamic import DynamicBatcher
from infercore.stats import ModelStats
from infercore.tensor import Tensor
from infercore.testing import ManualClock

WAIT_S = 10.0
CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
dynamic_batching { }
"""


class LoopBackend:
    """Answers payloads on a thread (``execute``) or from a loop (``execute_on_loop``)."""

    def __init__(self, *, answer_on_loop: bool = True, start: bool = True) -> None:
        self.answer_on_loop = answer_on_loop  # False: left in flight until finished
        self.start = start  # False: every loop payload is reported unstarted
        self.runs: list[tuple[str, str, list[str]]] = []  # (how, thread, request ids)
        self.in_flight: tuple[asyncio.AbstractEventLoop, Payload, Callable[[], None]] | None
        self.in_flight = None

    def loop_ready(self) -> bool:
        return True

    def execute(self, payload: Payload) -> None:
        self._record("thread", payload)
        self._answer(payload)

    def execute_on_loop(self, payload: Payload, loop: asyncio.AbstractEventLoop,
                        done: Callable[[], None], unstarted: Callable[[], None]) -> None:
        if not self.start:
            unstarted()
            return
        self._record("loop", payload)
        self.in_flight = (loop, payload, done)
        if self.answer_on_loop:
            loop.call_soon(self._finish)

    def finish_from_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.in_flight is not None and self.in_flight[0] is loop:
            self._finish()

    def finalize(self) -> None:
        pass

    def _finish(self) -> None:
        assert self.in_flight is not None
        _, payload, done = self.in_flight
        self.in_flight = None
        self._answer(payload)
        done()

    def _record(self, how: str, payload: Payload) -> None:
        self.runs.append((how, threading.current_thread().name,
                          [r.id for r in payload.requests]))

    @staticmethod
    def _answer(payload: Payload) -> None:
        for request in payload.requests:
            request.sender.send({}, final=True)  # type: ignore[union-attr]


def _model(backend: LoopBackend) -> tuple[DynamicBatcher, Dispatch, ModelInstance]:
    config = text_format.Parse(CONFIG, model_config_pb2.ModelConfig())
    instance = ModelInstance("m", InstanceInfo("m_0", "m", 0, "KIND_CPU", 0), backend,
                             ModelStats("m", 1), decoupled=False, clock=ManualClock().now_ns)
    batcher = DynamicBatcher(config, 1, ManualClock(), lambda request: None)
    dispatch = Dispatch("m", [instance])
    dispatch.start(batcher, threads=False)
    return batcher, dispatch, instance


def _request(name: str) -> tuple[InferRequest, ResponseStream]:
    x = Tensor.from_numpy(np.zeros((1, 4), np.float32))
    request = InferRequest("m", {"X": x}, id=name)
    request.batch_size = 1
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, "m", 1)
    return request, stream


def test_the_fake_declares_the_loop_capability():
    assert isinstance(LoopBackend(), LoopInstance)
    _, _, instance = _model(LoopBackend())
    assert instance.loop_capable and instance.runs_on_loop()


async def test_an_attached_loop_chains_what_its_callers_queue_meanwhile():
    backend = LoopBackend()
    batcher, dispatch, instance = _model(backend)
    attached = attach_loop(asyncio.get_running_loop())
    streams = []
    for name in "abcde":
        request, stream = _request(name)
        dispatch.submit(request, attached)
        streams.append(stream)
    assert all(stream.request.runs_on_loop for stream in streams)
    responses = await asyncio.gather(*streams)
    assert all(r.error is None for r in responses)
    me = threading.current_thread().name
    # the first alone, the others joined its queue quietly and went as one batch
    assert backend.runs == [("loop", me, ["a"]), ("loop", me, ["b", "c", "d", "e"])]
    stats = batcher.statistics()
    assert (stats.ran_inline, stats.wakeups, stats.queued) == (2, 0, 0)
    assert not instance.busy.locked() and not attached.chains
    detach_loop(attached)


async def test_detaching_a_loop_finishes_the_payload_in_flight_there():
    backend = LoopBackend(answer_on_loop=False)
    batcher, dispatch, instance = _model(backend)
    attached = attach_loop(asyncio.get_running_loop())
    request, stream = _request("a")
    dispatch.submit(request, attached)
    assert not stream.done and instance.busy.locked() and attached.chains == {instance}
    detach_loop(attached)
    assert stream.done and not instance.busy.locked() and not attached.chains
    # Detached: the next request from it never starts a payload on the loop.
    later, later_stream = _request("b")
    dispatch.submit(later, attached)
    assert not later.runs_on_loop and not later_stream.done
    assert batcher.statistics().wakeups == 1  # queued for a backend thread (unknown length)


async def test_a_payload_the_backend_could_not_start_goes_to_a_backend_thread():
    backend = LoopBackend(start=False)
    batcher, dispatch, instance = _model(backend)
    thread = BackendThread("instance-thread", [instance], dispatch)
    thread.start()
    attached = attach_loop(asyncio.get_running_loop())
    request, stream = _request("a")
    dispatch.submit(request, attached)
    response = await asyncio.wait_for(_awaited(stream), WAIT_S)
    assert response is not None and response.error is None
    assert backend.runs == [("thread", "instance-thread", ["a"])]  # handed back, run once
    assert not attached.chains
    batcher.stop()
    assert thread.join(WAIT_S)
    detach_loop(attached)


def test_a_loop_that_is_not_attached_never_starts_a_payload_there():
    backend = LoopBackend()
    batcher, dispatch, instance = _model(backend)

    async def one() -> bool:
        request, stream = _request("a")
        dispatch.submit(request, Caller.LOOP)
        return stream.done

    assert asyncio.run(one()) is False  # queued: an unknown model never runs on a loop
    assert backend.runs == [] and batcher.statistics().wakeups == 1


async def _awaited(stream: ResponseStream):  # noqa: ANN202 - an InferResponse
    return await stream
