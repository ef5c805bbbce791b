"""Caller-runs: a blocked caller executes its request on an idle instance, on its own thread."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from infercore import InferRequest, Server, Tensor
from infercore.caller import Caller

WHO_RUNS_ME_CONFIG = """
name: "who"
backend: "python"
parameters: { key: "sleep_s" value: { string_value: "%s" } }
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "THREAD", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

WHO_RUNS_ME_PY = """
import json
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.sleep_s = float(config["parameters"]["sleep_s"]["string_value"])

    def execute(self, requests):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        name = threading.current_thread().name.encode()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("THREAD",
                np.array([name], dtype=np.object_))]) for _ in requests]
"""

X = {"X": np.array([1], np.int32)}


def _thread_of(response) -> str:
    return response.outputs["THREAD"].to_bytes_array()[0].decode()


@pytest.fixture
def who(repo):
    def build(sleep_s: float = 0.0) -> Server:
        repo.add_model("who", config=WHO_RUNS_ME_CONFIG % sleep_s, model_py=WHO_RUNS_ME_PY)
        return Server(model_repository=repo.path)
    return build


def test_blocking_sync_caller_runs_its_request_on_an_idle_instance(who):
    with who() as server:
        model = server.model("who")
        me = threading.current_thread().name
        assert _thread_of(model.infer(inputs=X).result()) == me
        assert _thread_of(next(iter(model.infer(inputs=X)))) == me


def test_a_caller_with_a_timeout_leaves_execution_to_the_instance_thread(who):
    with who() as server:
        response = server.model("who").infer(inputs=X).result(timeout=10)
        assert _thread_of(response) == "infercore-who-who_0_0"


def test_a_busy_instance_is_not_borrowed(who):
    with who() as server:
        loaded = server._manager.get("who")
        instance = loaded.instances[0]
        with instance.busy:  # as if a payload were executing on it
            stream = server.model("who").infer(inputs=X)
            assert not loaded._dispatch.run_inline(stream.request)
        # Once free, the instance thread (or a blocked caller) runs it.
        assert _thread_of(stream.result()) in ("infercore-who-who_0_0",
                                               threading.current_thread().name)


async def test_event_loop_runs_only_short_executions_inline(who):
    async with who() as server:
        model = server.model("who")
        loop_thread = threading.current_thread().name
        first = _thread_of(await model.async_infer(inputs=X))
        assert first == "infercore-who-who_0_0"  # unknown duration: never on the loop
        # Once the moving average of execute times is known to be short, the loop runs
        # requests itself (a slow first execution can take a few calls to average out).
        for _ in range(500):
            if _thread_of(await model.async_infer(inputs=X)) == loop_thread:
                break
        else:
            pytest.fail("a short model never ran on the event loop's thread")


async def test_event_loop_never_runs_slow_executions_inline(who):
    async with who(sleep_s=0.002) as server:
        model = server.model("who")
        threads = {_thread_of(await model.async_infer(inputs=X)) for _ in range(5)}
        assert threads == {"infercore-who-who_0_0"}
        # The loop stayed free while the model ran: a concurrent task made progress.
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.ensure_future(tick())
        await model.async_infer(inputs=X)
        ticker.cancel()
        assert ticks > 1


def _request() -> InferRequest:
    from infercore import InferRequest

    return InferRequest("who", {"X": Tensor.from_numpy(np.array([1], np.int32))})


def test_a_thread_caller_runs_inline_without_waking_the_instance_thread(who):
    with who() as server:
        stream = server.infer(_request(), caller=Caller.THREAD)
        assert _thread_of(stream.result()) == threading.current_thread().name


def test_a_thread_caller_hands_off_at_once_when_no_instance_is_idle(who):
    with who() as server:
        instance = server._manager.get("who").instances[0]
        with instance.busy:  # as if a payload were executing on it
            stream = server.infer(_request(), caller=Caller.THREAD)
        # queued with its wake-up sent inside infer(): no reader is needed to start it
        assert _thread_of(stream.result(timeout=10)) == "infercore-who-who_0_0"


async def test_a_loop_caller_dispatches_unknown_models(who):
    async with who() as server:
        # the model's execution time is still unknown: the loop must not run it
        response = await server.infer(_request(), caller=Caller.LOOP)
        assert _thread_of(response) == "infercore-who-who_0_0"


def _who_with_policy(repo, policy: str) -> Server:
    config = WHO_RUNS_ME_CONFIG % 0.0 + (
        f'parameters: {{ key: "infercore.caller_runs" value: {{ string_value: "{policy}" }} }}\n')
    repo.add_model("who", config=config, model_py=WHO_RUNS_ME_PY)
    return Server(model_repository=repo.path)


def test_caller_runs_off_leaves_every_request_to_the_instance_thread(repo):
    with _who_with_policy(repo, "off") as server:
        assert _thread_of(server.model("who").infer(inputs=X).result()) == "infercore-who-who_0_0"
        stream = server.infer(_request(), caller=Caller.THREAD)
        assert _thread_of(stream.result()) == "infercore-who-who_0_0"


async def test_caller_runs_blocking_keeps_a_short_model_off_the_event_loop(repo):
    async with _who_with_policy(repo, "blocking") as server:
        model = server.model("who")
        loop_thread = threading.current_thread().name
        threads = {_thread_of(await model.async_infer(inputs=X)) for _ in range(50)}
        assert loop_thread not in threads
        # A blocked synchronous caller still runs it itself once the instance is idle (the
        # instance thread may still be finishing the last request above when it comes).
        sync_threads = [
            _thread_of(await asyncio.to_thread(lambda: model.infer(inputs=X).result()))
            for _ in range(5)]
        assert any(name != "infercore-who-who_0_0" for name in sync_threads), sync_threads


def test_a_bad_caller_runs_value_fails_the_load(repo, caplog):
    server = _who_with_policy(repo, "sometimes")
    with pytest.raises(Exception, match="failed to load all models"):
        server.start()
    server.stop()
    assert "infercore.caller_runs" in caplog.text and "sometimes" in caplog.text


STREAMER_CONFIG = """
name: "streamer"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

# Sends one response, then waits (inside execute) until the caller has seen it.
STREAMER_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

SEEN = threading.Event()


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", np.array([1], np.int32))]))
            if not SEEN.wait(30):
                raise RuntimeError("the caller never saw the first response")
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", np.array([2], np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_a_sync_reader_of_a_decoupled_model_sees_responses_while_it_executes(repo):
    repo.add_model("streamer", config=STREAMER_CONFIG, model_py=STREAMER_PY)
    with Server(model_repository=repo.path) as server:
        import sys

        stream = server.model("streamer").infer(inputs=X)
        first = next(iter(stream))  # would deadlock if this thread ran execute itself
        assert int(first.outputs["Y"].to_numpy()[0]) == 1
        model_module = next(m for name, m in sys.modules.items()
                            if hasattr(m, "SEEN") and "streamer" in name)
        model_module.SEEN.set()
        values = [int(r.outputs["Y"].to_numpy()[0]) for r in stream if r.outputs]
        assert values == [2]
