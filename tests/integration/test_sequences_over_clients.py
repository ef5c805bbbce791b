"""Sequences through the real clients: ``sequence_id`` / ``sequence_start`` /
``sequence_end`` from ``tritonclient.http`` and ``tritonclient.grpc`` (integer and string
correlation ids) to a sequence-batched model with implicit state, Triton's errors for bad
sequence requests, and a decoupled sequence model streamed through ``start_stream``.

One ``infercore serve`` process serves both protocols; tests/integration/test_sequences.py
covers the scheduler's strategies in process.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_process import HttpServeProcess as ServeProcess
from serve_process import free_port
from tritonclient.utils import InferenceServerException

from infercore.testing import RepositoryBuilder

pytest_plugins = ["conftest_http"]

# The running sum travels as implicit state (STATE_IN <- STATE_OUT), reset at START. SEEN
# tells the correlation id the model was given, as JSON.
STATE_CONFIG = """
name: "state_acc"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] },
         { name: "SEEN", data_type: TYPE_STRING, dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  direct { }
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }
          } ]
}
instance_group [ { count: 2, kind: KIND_CPU } ]
"""

STATE_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = (state + value).astype(np.int32)
            seen = json.dumps(request.correlation_id()).encode()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("STATE_OUT", total),
                pb_utils.Tensor("SEEN", np.full(value.shape, seen, np.object_))]))
        return responses
"""

# Decoupled and sequence-batched: N responses per request, counting up from the START of
# the sequence (kept per correlation id); a negative N answers an error instead.
STREAM_CONFIG = """
name: "seq_stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  direct { }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] }
  ]
}
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

STREAM_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.counts = {}

    def execute(self, requests):
        for request in requests:
            def flag(name):
                return bool(pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0])
            cid = request.correlation_id()
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            if flag("START"):
                self.counts[cid] = 0
            if n < 0:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "negative step", pb_utils.TritonError.INVALID_ARG)), flags=FINAL)
                continue
            for _ in range(n):
                self.counts[cid] += 1
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("COUNT", np.array([self.counts[cid]], np.int32))]))
            if flag("END"):
                del self.counts[cid]
            sender.send(flags=FINAL)
        return None
"""


class Both:
    """One ``infercore serve`` with HTTP and gRPC, and the address of each."""

    def __init__(self, process: ServeProcess, grpc_port: int) -> None:
        self.process = process
        self.http_url = process.url
        self.grpc_url = f"127.0.0.1:{grpc_port}"


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    root = tmp_path_factory.mktemp("sequences")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("state_acc", config=STATE_CONFIG, model_py=STATE_PY)
    repo.add_model("seq_stream", config=STREAM_CONFIG, model_py=STREAM_PY)
    grpc_port = free_port()
    # The last --allow-grpc wins over the one ServeProcess adds to keep gRPC off.
    process = ServeProcess(repo.path, root / "server.log", "--allow-grpc", "true",
                           "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port))
    try:
        process.wait_ready()
        server = Both(process, grpc_port)
        _wait_grpc_ready(server.grpc_url)
        yield server
    finally:
        process.stop()


def _wait_grpc_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with grpcclient.InferenceServerClient(url) as client:
        while True:
            try:
                if client.is_server_ready():
                    return
            except InferenceServerException:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)  # a separate process: nothing to wait on but its port


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, both: Both) -> Iterator[Any]:
    if request.param == "http":
        with httpclient.InferenceServerClient(both.http_url) as http_client:
            yield http_client
    else:
        with grpcclient.InferenceServerClient(both.grpc_url) as grpc_client:
            yield grpc_client


def _module(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def _add(client: Any, correlation_id: int | str, value: int, **flags: bool
         ) -> tuple[int, int | str]:
    """One step of a sequence: the running sum and the correlation id the model saw."""
    module = _module(client)
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], np.int32))
    result = client.infer("state_acc", [tensor], sequence_id=correlation_id, **flags)
    assert result.get_output("STATE_OUT") is None  # the state stays inside the server
    return int(result.as_numpy("OUTPUT")[0, 0]), json.loads(result.as_numpy("SEEN")[0, 0])


# gRPC's client sends integer ids as int64; HTTP's JSON carries the whole uint64 range.
@pytest.mark.parametrize("kind", ["integer", "string"])
def test_implicit_state_is_carried_per_sequence_and_reset_at_start(client, kind):
    big = 2**64 - 2 if _module(client) is httpclient else 2**62 + 3
    first, second = (big, 7) if kind == "integer" else ("session-a", "session-b")

    # two sequences interleaved: each keeps its own sum
    assert _add(client, first, 5, sequence_start=True) == (5, first)
    assert _add(client, second, 100, sequence_start=True) == (100, second)
    assert _add(client, first, 1) == (6, first)
    assert _add(client, second, 1) == (101, second)
    assert _add(client, first, 1, sequence_end=True) == (7, first)
    # START again without an END: the state starts over
    assert _add(client, second, 3, sequence_start=True) == (3, second)
    assert _add(client, second, 1, sequence_end=True) == (4, second)
    # an ended sequence can start again from zero
    assert _add(client, first, 2, sequence_start=True, sequence_end=True) == (2, first)


def _error_of(client: Any, correlation_id: int | str, **flags: bool) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as raised:
        _add(client, correlation_id, 1, **flags)
    return raised.value


def _invalid_argument_status(client: Any) -> str:
    return "400" if _module(client) is httpclient else "StatusCode.INVALID_ARGUMENT"


def test_bad_sequence_requests_get_tritons_errors(client):
    no_id = _error_of(client, 0, sequence_start=True)
    unknown_end = _error_of(client, 404404, sequence_end=True)
    unknown_string = _error_of(client, "never-started")

    assert no_id.message() == ("inference request to model 'state_acc' must specify a "
                               "non-zero or non-empty correlation ID")
    assert unknown_end.message() == (
        "inference request for sequence 404404 to model 'state_acc' must specify the START "
        "flag on the first request of the sequence")
    assert unknown_string.message() == (
        "inference request for sequence never-started to model 'state_acc' must specify the "
        "START flag on the first request of the sequence")
    for error in (no_id, unknown_end, unknown_string):
        assert error.status() == _invalid_argument_status(client)
    # the server goes on serving sequences
    assert _add(client, 31, 4, sequence_start=True, sequence_end=True) == (4, 31)


def _n(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("N", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return [tensor]


def test_a_decoupled_sequence_streams_several_responses_and_errors_in_band(both):
    results: queue.Queue = queue.Queue()
    steps = [(2, {"sequence_start": True}), (3, {}), (-1, {}), (1, {"sequence_end": True})]
    with grpcclient.InferenceServerClient(both.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for index, (n, flags) in enumerate(steps):
                for cid in (2**40 + 1, "stream-b"):  # two sequences, interleaved
                    client.async_stream_infer("seq_stream", _n(n), sequence_id=cid,
                                              request_id=f"{cid}/{index}", **flags)
            # an END for a sequence that never started: an error, and the stream goes on
            client.async_stream_infer("seq_stream", _n(1), sequence_id=999,
                                      sequence_end=True, request_id="unknown")
            client.async_stream_infer("seq_stream", _n(2), sequence_id="after",
                                      sequence_start=True, sequence_end=True,
                                      request_id="after/0")
            got = [results.get(timeout=30) for _ in range(2 * 7 + 1 + 2)]
        finally:
            client.stop_stream()
    counts: dict[str, list[int]] = {}
    errors = []
    for result, error in got:
        if error is not None:
            errors.append(error.message())
            continue
        counts.setdefault(result.get_response().id, []).append(
            int(result.as_numpy("COUNT")[0]))
    for cid in (2**40 + 1, "stream-b"):
        assert counts.pop(f"{cid}/0") == [1, 2]
        assert counts.pop(f"{cid}/1") == [3, 4, 5]
        assert counts.pop(f"{cid}/3") == [6]
    assert counts == {"after/0": [1, 2]}
    assert sorted(errors) == [
        "inference request for sequence 999 to model 'seq_stream' must specify the START "
        "flag on the first request of the sequence",
        "negative step", "negative step"]
    assert results.empty()
