"""Process-isolated instances run from an event loop (the HTTP/gRPC frontends' path).

A caller on an attached loop (a frontend's; the tests attach theirs with
``dispatch.attach_loop``) passes the attachment as ``caller=`` and starts its request on an
idle isolated instance without blocking the loop: the worker's answer is read by the loop
itself, so no instance thread is woken. While that chain runs, the same loop's callers'
requests are queued silently and batched by the chain (dispatch.py, "the loop-driven
chain"). A loop is detached before it closes, which finishes what it left in flight.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest
from test_isolated_server import ADD_SUB_PY, add_sub_config

from infercore import Server
from infercore.backends.python.isolation.worker_handle import WorkerHandle
from infercore.caller import Caller
from infercore.dispatch import AttachedLoop, attach_loop, detach_loop
from infercore.errors import InternalError
from infercore.request import InferRequest
from infercore.response import ResponseStream
from infercore.tensor import Tensor
from infercore.testing import RepositoryBuilder

BATCHED = "dynamic_batching { }\n"


# Answers once the file named by the request's "gate" parameter exists.
GATED_PY = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            gate = json.loads(request.parameters())["gate"]
            while not os.path.exists(gate):
                time.sleep(0.01)
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b),
                pb_utils.Tensor("PIDS", (a * 0).astype("int64")[:, :2])]))
        return responses
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepositoryBuilder:
    built = RepositoryBuilder(tmp_path_factory.mktemp("isolated_loop") / "models")
    built.add_model("loop", config=add_sub_config("loop") + BATCHED, model_py=ADD_SUB_PY)
    built.add_model("pair", config=add_sub_config("pair", count=2) + BATCHED,
                    model_py=ADD_SUB_PY)
    built.add_model("gated", config=add_sub_config("gated") + BATCHED, model_py=GATED_PY)
    built.add_model("plain", config=add_sub_config("plain"), model_py=ADD_SUB_PY)
    return built


@pytest.fixture
async def caller() -> AsyncIterator[AttachedLoop]:
    attached = attach_loop(asyncio.get_running_loop())  # as a frontend's loop is
    yield attached
    detach_loop(attached)


@pytest.fixture
async def server(repo: RepositoryBuilder, caller: AttachedLoop) -> AsyncIterator[Server]:
    async with Server(model_repository=repo.path, model_control_mode="explicit",
                      startup_models=("loop", "pair", "plain")) as started:
        yield started


def _request(model: str = "loop", value: float = 1.0, **parameters: object) -> InferRequest:
    ones = np.full((1, 4), value, np.float32)
    return InferRequest(model, {"INPUT0": Tensor.from_numpy(ones * 2),
                                "INPUT1": Tensor.from_numpy(ones)},
                        parameters=parameters or None)


def _sum(response) -> list[float]:  # noqa: ANN001 - an InferResponse
    assert response.error is None, response.error
    return response.outputs["OUTPUT0"].to_numpy()[0].tolist()


async def test_a_loop_caller_runs_its_request_without_waking_the_instance_thread(
        server: Server, caller: AttachedLoop):
    loaded = server._manager.get("loop")
    before = loaded._scheduler.statistics()
    stream = server.infer(_request(), caller=caller)
    assert not stream.done  # sent to the worker: the loop goes on meanwhile
    response = await stream
    assert _sum(response) == [3.0] * 4
    pid = int(response.outputs["PIDS"].to_numpy()[0][0])
    assert pid != os.getpid()  # answered by the worker process
    after = loaded._scheduler.statistics()
    assert after.wakeups == before.wakeups
    assert after.ran_inline == before.ran_inline + 1


async def test_concurrent_loop_callers_are_batched_by_the_chain(
        server: Server, caller: AttachedLoop):
    loaded = server._manager.get("loop")
    stats = server.model("loop").statistics()[0]
    before = loaded._scheduler.statistics()
    streams = [server.infer(_request(value=float(i)), caller=caller) for i in range(24)]
    responses = await asyncio.gather(*streams)
    assert [_sum(r)[0] for r in responses] == [3.0 * i for i in range(24)]
    assert all(stream.request.runs_on_loop for stream in streams)  # no thread of ours
    after = loaded._scheduler.statistics()
    assert after.wakeups == before.wakeups  # only the loop ran them
    assert after.queued == 0
    batches = after.ran_inline - before.ran_inline
    assert 1 < batches < 24  # the first alone, the rest queued behind it in batches
    now = server.model("loop").statistics()[0]
    assert now.inference_count - stats.inference_count == 24
    assert now.execution_count - stats.execution_count == batches
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert getattr(now, phase).count - getattr(stats, phase).count == 24, phase


async def test_a_thread_caller_meanwhile_is_served_too(server: Server, caller: AttachedLoop):
    loop_streams = [server.infer(_request(value=float(i)), caller=caller)
                    for i in range(8)]
    results: list[list[float]] = []

    def from_a_thread() -> None:
        handle = server.model("loop")
        ones = np.ones((1, 4), np.float32)
        for _ in range(10):
            response = handle.infer({"INPUT0": ones * 2, "INPUT1": ones}).result()
            results.append(_sum(response))

    thread = threading.Thread(target=from_a_thread)
    thread.start()
    more = []
    while thread.is_alive():  # keep the chain busy while the thread's requests queue
        streams = [server.infer(_request(), caller=caller) for _ in range(4)]
        more.extend(await asyncio.gather(*streams))
    thread.join()
    responses = await asyncio.gather(*loop_streams)
    assert [_sum(r)[0] for r in responses] == [3.0 * i for i in range(8)]
    assert all(_sum(r) == [3.0] * 4 for r in more)
    assert results == [[3.0] * 4] * 10


async def test_a_crash_on_the_loop_fails_its_request_and_the_next_ones_succeed(
        server: Server, caller: AttachedLoop):
    assert _sum(await server.infer(_request(), caller=caller)) == [3.0] * 4
    response = await server.infer(_request(segv=True), raise_on_error=False,
                                  caller=caller)
    assert isinstance(response.error, InternalError)
    assert "Stub process is not healthy" in response.error.message
    assert "SIGSEGV" in response.error.message
    for _ in range(5):  # served by the restarted worker (the backend thread waits for it)
        assert _sum(await server.infer(_request(), caller=caller)) == [3.0] * 4
    assert server.model("loop").statistics()[0].fail.count == 1


async def test_a_worker_killed_between_requests_is_replaced_without_a_failure(
        server: Server, caller: AttachedLoop):
    response = await server.infer(_request(), caller=caller)
    pid = int(response.outputs["PIDS"].to_numpy()[0][0])
    os.kill(pid, signal.SIGKILL)
    # Whether the death is seen before, while or after this request is sent, it never
    # reached the worker: it is retried on the replacement.
    response = await server.infer(_request(), caller=caller)
    assert _sum(response) == [3.0] * 4
    assert int(response.outputs["PIDS"].to_numpy()[0][0]) != pid
    assert server.model("loop").statistics()[0].fail.count == 0


async def test_a_payload_the_dead_worker_never_read_is_retried_on_its_replacement(
        server: Server, caller: AttachedLoop):
    response = await server.infer(_request(), caller=caller)
    pid = int(response.outputs["PIDS"].to_numpy()[0][0])
    os.kill(pid, signal.SIGSTOP)  # it cannot read what the loop sends from now on
    pending = asyncio.ensure_future(server.infer(_request(), caller=caller))
    await asyncio.sleep(0.3)
    assert not pending.done()  # sent from the loop, unread in the stopped worker's socket
    os.kill(pid, signal.SIGKILL)
    response = await asyncio.wait_for(pending, 20)
    assert _sum(response) == [3.0] * 4
    assert int(response.outputs["PIDS"].to_numpy()[0][0]) not in (0, pid)
    assert server.model("loop").statistics()[0].fail.count == 0


async def test_without_dynamic_batching_a_loop_caller_runs_an_idle_instance(
        server: Server, caller: AttachedLoop):
    loaded = server._manager.get("plain")
    before = loaded._scheduler.statistics()
    streams = [server.infer(_request("plain", value=float(i)), caller=caller)
               for i in range(6)]
    responses = await asyncio.gather(*streams)
    assert [_sum(r)[0] for r in responses] == [3.0 * i for i in range(6)]
    assert [stream.request.runs_on_loop for stream in streams] == [True] + [False] * 5
    after = loaded._scheduler.statistics()
    # The first ran from the loop; the others found the instance busy and were queued
    # for its thread (no chaining without a batcher).
    assert after.ran_inline == before.ran_inline + 1
    assert after.wakeups == before.wakeups + 5


async def test_models_with_several_instances_keep_their_threads(
        server: Server, caller: AttachedLoop):
    loaded = server._manager.get("pair")
    before = loaded._scheduler.statistics()
    response = await server.infer(_request("pair"), caller=caller)
    assert _sum(response) == [3.0] * 4
    assert loaded._scheduler.statistics().wakeups == before.wakeups + 1


async def test_unload_after_loop_runs_finalizes_the_worker(server: Server, caller: AttachedLoop):
    response = await server.infer(_request(), caller=caller)
    pid = int(response.outputs["PIDS"].to_numpy()[0][0])
    await asyncio.to_thread(server.unload, "loop")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_detached_loop_finishes_its_payload_before_it_closes(repo: RepositoryBuilder,
                                                              tmp_path):  # noqa: ANN001
    gate = tmp_path / "gate"
    with Server(model_repository=repo.path, model_control_mode="explicit",
                startup_models=("gated",)) as server:
        instance = server._manager.get("gated").instances[0]
        streams: list[ResponseStream] = []

        async def start_and_leave() -> None:
            attached = attach_loop(asyncio.get_running_loop())
            streams.append(server.infer(_request("gated", gate=str(gate)),
                                        raise_on_error=False, caller=attached))
            assert not streams[0].done  # in flight, its answer to be read by this loop
            gate.touch()
            detach_loop(attached)  # as a frontend does before its loop closes
            assert streams[0].done  # read and finished here, on the loop's thread

        asyncio.run(start_and_leave())
        assert _sum(streams[0].result()) == [3.0] * 4
        # Recorded, and the instance released: its thread serves the next request.
        assert instance.execution_count == 1
        assert not instance.busy.locked()
        ones = np.ones((1, 4), np.float32)
        response = server.model("gated").infer(
            {"INPUT0": ones * 2, "INPUT1": ones}, parameters={"gate": str(gate)}).result()
        assert _sum(response) == [3.0] * 4


async def test_a_failure_reading_the_answer_fails_the_payload_and_the_loop_goes_on(
        server: Server, caller: AttachedLoop, monkeypatch: pytest.MonkeyPatch):
    from infercore.backends.python.isolation import worker_handle as isolated_worker

    deliver = isolated_worker.WorkerHandle._deliver
    calls = []

    def broken_once(self, frame):  # noqa: ANN001, ANN202
        calls.append(frame)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return deliver(self, frame)

    monkeypatch.setattr(isolated_worker.WorkerHandle, "_deliver", broken_once)
    response = await server.infer(_request(), raise_on_error=False, caller=caller)
    assert isinstance(response.error, InternalError)
    assert "RuntimeError: boom" in response.error.message
    for _ in range(3):
        assert _sum(await server.infer(_request(), caller=caller)) == [3.0] * 4
    instance = server._manager.get("loop").instances[0]
    assert not instance.busy.locked()


def test_two_event_loops_take_turns_on_one_instance(repo: RepositoryBuilder):
    with Server(model_repository=repo.path, model_control_mode="explicit",
                startup_models=("loop",)) as server:
        results: dict[int, list[float]] = {}

        async def clients(offset: int) -> None:
            attached = attach_loop(asyncio.get_running_loop())
            try:
                await run_clients(offset, attached)
            finally:
                detach_loop(attached)  # before asyncio.run closes it

        async def run_clients(offset: int, attached: AttachedLoop) -> None:
            for _ in range(10):
                streams = [server.infer(_request(value=float(offset + i)), caller=attached)
                           for i in range(6)]
                for i, response in enumerate(await asyncio.gather(*streams)):
                    results.setdefault(offset + i, []).append(_sum(response)[0])

        threads = [threading.Thread(target=asyncio.run, args=(clients(offset),))
                   for offset in (0, 100)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
            # A loop that ended while watching the other loop's payload left it unread.
            assert not thread.is_alive(), "a payload was never read"
        assert sorted(results) == [*range(6), *range(100, 106)]
        assert all(sums == [3.0 * key] * 10 for key, sums in results.items())
        instance = server._manager.get("loop").instances[0]
        assert not instance.busy.locked()


def test_a_loop_that_is_not_attached_leaves_the_payload_to_the_instance_thread(
        repo: RepositoryBuilder):
    # asyncio.run in a caller's code may close with work in flight: never a chain there.
    with Server(model_repository=repo.path, model_control_mode="explicit",
                startup_models=("loop",)) as server:
        scheduler = server._manager.get("loop")._scheduler

        async def one() -> float:
            response = await server.infer(_request(value=2.0), caller=Caller.LOOP)
            return float(_sum(response)[0])

        before = scheduler.statistics()
        assert asyncio.run(one()) == 6.0
        after = scheduler.statistics()
        assert after.wakeups == before.wakeups + 1
        assert after.ran_inline == before.ran_inline


def test_an_instance_thread_reads_answers_after_uvloop_watched_them(repo: RepositoryBuilder):
    # The frontends run uvloop, whose libuv leaves a watched descriptor non-blocking; the
    # instance thread's blocking read of the next answer must still wait for it, not take
    # EAGAIN for a dead worker (a request over HTTP, then one from a thread or gRPC).
    uvloop = pytest.importorskip("uvloop")
    with Server(model_repository=repo.path, model_control_mode="explicit",
                startup_models=("loop",)) as server:
        loop = uvloop.new_event_loop()
        attached = attach_loop(loop)

        async def on_the_loop() -> list[float]:
            return _sum(await server.infer(_request(), caller=attached))

        try:
            assert loop.run_until_complete(on_the_loop()) == [3.0] * 4
        finally:
            detach_loop(attached)
            loop.close()
        handle = server.model("loop")
        ones = np.ones((1, 4), np.float32)
        for _ in range(3):  # from this thread: run by the instance, blocking on its answer
            assert _sum(handle.infer({"INPUT0": ones * 2, "INPUT1": ones}).result()) == [3.0] * 4


def test_an_unload_waits_for_the_loop_to_stop_watching_before_closing_the_channel(
        repo: RepositoryBuilder, tmp_path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001
    # A payload still in flight from a running loop at unload: the loop must have let go
    # of the answer channel before it is closed (a registration left behind could outlive
    # the descriptor, whose number the next worker's channel may get), even when the
    # loop is busy for a moment then.
    gate = tmp_path / "gate"
    loop = asyncio.SelectorEventLoop()  # its selector shows what it watches
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    watched_at_close: list[bool] = []
    close = WorkerHandle._close_resources

    def recording_close(handle: WorkerHandle) -> None:
        watched_at_close.append(handle._answers.fileno() in loop._selector.get_map())
        close(handle)

    monkeypatch.setattr(WorkerHandle, "_close_resources", recording_close)
    try:
        with Server(model_repository=repo.path, model_control_mode="explicit",
                    startup_models=("gated",), exit_timeout=0) as server:

            async def start() -> ResponseStream:
                attached = attach_loop(asyncio.get_running_loop())  # detached never: it
                return server.infer(_request("gated", gate=str(gate)), raise_on_error=False,
                                    caller=attached)  # outlives the server here

            stream = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
            assert not stream.done
            # The loop is busy past the unload's wait for the instance (~1 s here), so the
            # answer is still unread when the worker is finalized.
            loop.call_soon_threadsafe(time.sleep, 2.0)
            gate.touch()
            server.unload("gated")
            response = stream.result(10)
            assert response is not None and "unloaded" in response.error.message
        assert watched_at_close == [False]
        # and the loop goes on serving
        alive = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "alive"), loop)
        assert alive.result(5) == "alive"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
