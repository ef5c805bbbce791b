"""The actor's body and the wire format, driven in-process (no Ray): a real Python model
loads through the python backend, executes, and its responses come back as values."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from infercore.backends.base import InstanceInfo
from infercore.backends.ray.host import HostSpec, InstanceHost
from infercore.backends.ray.wire import (
    STORE_MIN_BYTES,
    RemoteError,
    RemoteResponse,
    RemoteResult,
    Stored,
    decode_requests,
    deliver,
    encode_requests,
)
from infercore.config import normalize_model_config, parse_model_config
from infercore.errors import InternalError, InvalidArgumentError, UnavailableError
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.tensor import Tensor

CONFIG = """
name: "twice"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ -1 ] },
         { name: "WHO", data_type: TYPE_STRING, dims: [ 1 ] } ]
instance_group [ { name: "remote", count: 1, kind: KIND_CPU } ]
"""

# Doubles X; a negative first element raises; answers with the instance's name.
TWICE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if args["model_instance_name"] == "broken_0":
            raise RuntimeError("cannot start")
        self.name = args["model_instance_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x.size and x[0] < 0:
                raise ValueError("negative input")
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", x * 2),
                pb_utils.Tensor("WHO", np.array([self.name.encode()], np.object_))]))
        return responses
"""


def _spec(repo) -> HostSpec:
    model_dir = repo.add_model("twice", config=CONFIG, model_py=TWICE_PY)
    config = parse_model_config(CONFIG, model_name="twice")
    normalize_model_config(config, model_name="twice", gpu_count=0)
    return HostSpec("twice", 1, config.SerializeToString(), str(model_dir),
                    str(model_dir / "1"), str(repo.path), "python", ())


def _info(name: str = "remote") -> InstanceInfo:
    return InstanceInfo(name=f"{name}_0", group_name=name, index=0, kind="KIND_CPU",
                        device_id=0)


def _request(x: np.ndarray, **kwargs) -> tuple[InferRequest, ResponseStream]:
    request = InferRequest("twice", {"X": Tensor.from_object(x)}, **kwargs)
    stream = ResponseStream(request)
    request.sender = ResponseSender(request, stream, "twice", 1)
    return request, stream


class _Store:
    """Stands for Ray's object store: keeps what is put, hands it back by reference."""

    def __init__(self) -> None:
        self.objects: dict[int, np.ndarray] = {}

    def put(self, array: np.ndarray) -> int:
        self.objects[len(self.objects)] = array
        return len(self.objects) - 1

    def fetch(self, refs: list[int]) -> list[np.ndarray]:
        return [self.objects[ref] for ref in refs]


def test_host_runs_the_model_through_its_backend(repo):
    host = InstanceHost()
    outcome = host.load(_spec(repo), _info())
    assert outcome.error is None and outcome.report is not None
    assert outcome.report.node_id == ""  # not in Ray
    store = _Store()
    small, small_stream = _request(np.array([1.0, 2.0], np.float32), id="small")
    big, big_stream = _request(np.ones(STORE_MIN_BYTES // 4, np.float32), id="big",
                   requested_outputs=["Y"])
    remote = encode_requests([small, big], store.put)
    assert not isinstance(remote[0].inputs[0][2], Stored)
    assert isinstance(remote[1].inputs[0][2], Stored)  # large: through the store
    result = host.execute(remote, store.fetch)
    assert result.infer_ns >= 0 and result.input_ns >= 0 and result.output_ns >= 0
    deliver([small, big], result)
    first = small_stream.result()
    assert first.request_id == "small"
    assert first.outputs["Y"].to_numpy().tolist() == [2.0, 4.0]
    assert first.outputs["WHO"].to_numpy().tolist() == [b"remote_0"]
    second = big_stream.result()
    assert set(second.outputs) == {"Y"}  # only what the request asked for
    assert float(second.outputs["Y"].to_numpy().sum()) == 2.0 * (STORE_MIN_BYTES // 4)
    host.finalize()
    host.watch()  # returns at once once finalized


def test_a_model_error_in_execute_answers_each_request(repo):
    host = InstanceHost()
    host.load(_spec(repo), _info())
    request, stream = _request(np.array([-1.0], np.float32), id="bad")
    result = host.execute(encode_requests([request], _Store().put))
    (response,) = result.responses[0]
    assert response.error is not None and "negative input" in response.error.message
    deliver([request], result)
    with pytest.raises(InternalError, match="negative input"):
        stream.result()
    host.finalize()


def test_a_load_failure_comes_back_as_a_value(repo):
    host = InstanceHost()
    outcome = host.load(_spec(repo), _info("broken"))
    assert outcome.report is None and outcome.error is not None
    assert "cannot start" in outcome.error.message
    assert isinstance(outcome.error.to_error(), InternalError)


def test_an_unknown_backend_fails_the_load(repo):
    host = InstanceHost()
    outcome = host.load(replace(_spec(repo), backend="nope"), _info())
    assert outcome.report is None and outcome.error is not None
    assert isinstance(outcome.error.to_error(), InvalidArgumentError)
    assert "unable to find backend library for backend 'nope'" in outcome.error.message


def test_decode_keeps_what_backends_read():
    request = InferRequest("m", {"X": Tensor.from_object(np.zeros(2, np.int32))}, id="r",
                           parameters={"p": 1}, correlation_id="seq", sequence_start=True,
                           priority=2, timeout_us=5)
    request.batch_size = 3
    request.cancel()
    (decoded,) = decode_requests(encode_requests([request], _Store().put), _Store().fetch,
                                 "m", 4)
    assert (decoded.id, decoded.parameters, decoded.correlation_id, decoded.sequence_start,
            decoded.sequence_end, decoded.priority, decoded.timeout_us, decoded.batch_size,
            decoded.cancelled, decoded.model_version) == (
        "r", {"p": 1}, "seq", True, False, 2, 5, 3, True, 4)
    assert decoded.inputs["X"].to_numpy().dtype == np.int32


def test_deliver_sends_errors_and_bare_finals():
    (erring, erring_stream), (bare, bare_stream) = (_request(np.zeros(1, np.float32)),
                                                    _request(np.zeros(1, np.float32)))
    result = RemoteResult(
        responses=((RemoteResponse((), None, RemoteError(4, "gone"), True),),
                   (RemoteResponse((), None, None, True, bare=True),)),
        input_ns=0, infer_ns=0, output_ns=0)
    deliver([erring, bare], result)
    with pytest.raises(UnavailableError, match="gone"):
        erring_stream.result()
    assert bare.sender.closed and list(bare_stream) == []
