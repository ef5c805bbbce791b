"""Decoupled models and BLS (models calling models) through the in-process API."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from infercore import Options, Server, TritonError, UnavailableError

DECOUPLED_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "N", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "I", data_type: TYPE_INT32, dims: [ 1 ] }} ]
"""

COUNTER_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            threading.Thread(target=self._stream, args=(request, n)).start()
        return None

    def _stream(self, request, n):
        sender = request.get_response_sender()
        if n < 0:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("n < 0")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        for i in range(n):
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("I", np.array([i], np.int32))]))
        if n != 99:  # 99: "forget" the final flag
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

BLS_CONFIG = """
name: "bls"
backend: "python"
max_batch_size: 0
input [ { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "TOTAL", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

BLS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N")
            mode = request.parameters()
            if '"missing"' in mode:
                call = pb_utils.InferenceRequest(model_name="no_such_model",
                                                 requested_output_names=["I"], inputs=[n])
                result = call.exec()
                responses.append(pb_utils.InferenceResponse(error=result.error()))
                continue
            call = pb_utils.InferenceRequest(model_name="counter", inputs=[n],
                                             requested_output_names=["I"])
            total = 0
            for response in call.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                out = pb_utils.get_output_tensor_by_name(response, "I")
                if out is not None:
                    total += int(out.as_numpy()[0])
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("TOTAL", np.array([total], np.int32))]))
        return responses
"""


@pytest.fixture
def decoupled_repo(repo):
    repo.add_model("counter", config=DECOUPLED_CONFIG.format(name="counter"),
                   model_py=COUNTER_PY)
    repo.add_model("bls", config=BLS_CONFIG, model_py=BLS_PY)
    return repo


def _n(value: int) -> dict:
    return {"N": np.array([value], np.int32)}


def test_decoupled_model_streams_from_its_own_threads(decoupled_repo):
    with Server(model_repository=decoupled_repo.path) as server:
        values = [r.outputs["I"].to_numpy()[0] for r in server.model("counter").infer(
            inputs=_n(5))]
        assert values == [0, 1, 2, 3, 4]
        assert list(server.model("counter").infer(inputs=_n(0))) == []


async def test_decoupled_model_streams_to_async_for(decoupled_repo):
    async with Server(model_repository=decoupled_repo.path) as server:
        seen = [r.outputs["I"].to_numpy()[0]
                async for r in server.model("counter").infer(inputs=_n(4))]
        assert seen == [0, 1, 2, 3]


def test_an_error_ends_only_that_stream(decoupled_repo):
    with Server(model_repository=decoupled_repo.path) as server:
        with pytest.raises(TritonError, match="n < 0"):
            list(server.model("counter").infer(inputs=_n(-1)))
        assert len(list(server.model("counter").infer(inputs=_n(2)))) == 2


def test_missing_final_flag_is_failed_at_shutdown(decoupled_repo):
    server = Server(Options(model_repository=decoupled_repo.path, exit_timeout=0)).start()
    stream = server.model("counter").infer(inputs=_n(99))
    first = next(iter(stream))
    assert first.outputs["I"].to_numpy()[0] == 0
    server.stop()
    with pytest.raises(UnavailableError, match="unloaded before the request completed"):
        stream.result(timeout=10)


def test_bls_calls_a_decoupled_model_in_process(decoupled_repo):
    with Server(model_repository=decoupled_repo.path) as server:
        response = server.model("bls").infer(inputs=_n(5)).result(timeout=10)
        assert response.outputs["TOTAL"].to_numpy().tolist() == [0 + 1 + 2 + 3 + 4]
        # The counter's instance thread records its execution when execute returns, which
        # may be just after its final response reached the BLS caller (as in Triton).
        deadline = time.monotonic() + 10
        while (server.model("counter").statistics()[0].execution_count == 0
               and time.monotonic() < deadline):
            time.sleep(0.001)
        assert server.model("counter").statistics()[0].execution_count == 1


def test_bls_call_to_a_missing_model_fails_clearly(decoupled_repo):
    with Server(model_repository=decoupled_repo.path) as server:
        with pytest.raises(TritonError, match="no_such_model"):
            server.model("bls").infer(inputs=_n(1), parameters={"mode": "missing"}).result(
                timeout=10)
        ok = server.model("bls").infer(inputs=_n(3)).result(timeout=10)
        assert ok.outputs["TOTAL"].to_numpy().tolist() == [3]


async def test_bls_from_many_concurrent_requests(decoupled_repo):
    async with Server(model_repository=decoupled_repo.path) as server:
        results = await asyncio.gather(*(server.model("bls").async_infer(inputs=_n(i))
                                         for i in range(1, 8)))
        assert [r.outputs["TOTAL"].to_numpy()[0] for r in results] == [
            i * (i - 1) // 2 for i in range(1, 8)]


def test_response_statistics_count_each_response_index(decoupled_repo):
    with Server(model_repository=decoupled_repo.path) as server:
        list(server.model("counter").infer(inputs=_n(3)))
        list(server.model("counter").infer(inputs=_n(1)))
        stats = server.model("counter").statistics()[0]
        by_index = {i: (s.success.count, s.empty_response.count)
                    for i, s in stats.response_stats.items()}
        # request 1: responses 0, 1, 2 then a bare final (index 3);
        # request 2: response 0 then a bare final (index 1)
        assert by_index == {0: (2, 0), 1: (1, 1), 2: (1, 0), 3: (0, 1)}
        as_json = stats.to_dict()["response_stats"]
        assert set(as_json) == {"0", "1", "2", "3"}
        assert set(as_json["0"]) == {"compute_infer", "compute_output", "success", "fail",
                                     "empty_response", "cancel"}
