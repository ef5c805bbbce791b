"""Request and response parameters of a Python model through ``tritonclient`` and a real
``infercore serve``, in-thread and process-isolated (Triton's qa_python_parameters): every
parameter type each client sends reaches ``request.parameters()`` as the text Triton's
backend writes, and the model's response parameters reach both clients."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_process import ServeProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

# SEEN: the raw text of request.parameters(); its values come back as response parameters
# (the bool/int/str ones: the only kinds a response parameter takes).
ECHO_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seen = request.parameters()
            back = {key: value for key, value in json.loads(seen).items()
                    if isinstance(value, (bool, int, str))}
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([seen], dtype=np.object_))], parameters=back))
        return responses
"""

MODES = {"in_thread": "", "process": PROCESS}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("parameters")
    repo = RepositoryBuilder(root / "models")
    for mode, extra in MODES.items():
        repo.add_model(
            f"echo_{mode}",
            model_py=ECHO_PY,
            config=f"""
name: "echo_{mode}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [ {{ name: "SEEN", data_type: TYPE_STRING, dims: [ 1 ] }} ]
{extra}
""",
        )
    started = ServeProcess(
        root / "server.log", f"--model-repository={repo.path}", "--exit-timeout-secs=5"
    )
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def _x(module):  # an InferInput of module (httpclient or grpcclient)
    tensor = module.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    return tensor


@pytest.mark.parametrize("mode", MODES)
def test_http_parameters_of_every_type_reach_the_model_and_come_back(server, mode):
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        result = client.infer(
            f"echo_{mode}",
            [_x(httpclient)],
            parameters={"flag": True, "count": -7, "name": "n é", "ratio": 0.25, "whole": 2.0},
        )
        seen = result.as_numpy("SEEN")[0].decode()
        assert seen == '{"flag":true,"count":-7,"name":"n é","ratio":0.25,"whole":2.0}'
        assert result.get_response()["parameters"] == {"flag": True, "count": -7, "name": "n é"}
        # a bad parameter is refused, and the next request is served
        with pytest.raises(InferenceServerException, match="has invalid type"):
            client.infer(f"echo_{mode}", [_x(httpclient)], parameters={"bad": [1]})
        assert client.infer(f"echo_{mode}", [_x(httpclient)]).as_numpy("SEEN")[0] == b"{}"
    finally:
        client.close()


@pytest.mark.parametrize("mode", MODES)
def test_grpc_parameters_of_every_type_reach_the_model_and_come_back(server, mode):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for sent, text in (
            ({"flag": False}, '{"flag":false}'),
            ({"count": 2**63 - 1}, '{"count":9223372036854775807}'),
            ({"name": "text"}, '{"name":"text"}'),
            ({"ratio": 1e-7}, '{"ratio":1e-7}'),
        ):
            result = client.infer(f"echo_{mode}", [_x(grpcclient)], parameters=sent)
            assert result.as_numpy("SEEN")[0].decode() == text
            back = result.get_response().parameters
            if "ratio" not in sent:
                key, value = next(iter(sent.items()))
                field = {bool: "bool_param", int: "int64_param", str: "string_param"}
                assert getattr(back[key], field[type(value)]) == value
        # Triton 2.51 takes no uint64_param in a request's parameters (recorded); the
        # client has no way to send one, the raw stub does
        request = service_pb2.ModelInferRequest(model_name=f"echo_{mode}")
        request.inputs.add(name="X", datatype="INT32", shape=[1]).contents.int_contents.append(1)
        request.parameters["big"].uint64_param = 2**64 - 1
        with (
            grpc.insecure_channel(server.grpc_url) as channel,
            pytest.raises(grpc.RpcError) as raised,
        ):
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        assert raised.value.details() == (
            "invalid value type for 'big' parameter, expected int64_param, bool_param, "
            "or string_param."
        )
        assert json.loads(client.infer(f"echo_{mode}", [_x(grpcclient)]).as_numpy("SEEN")[0]) == {}
    finally:
        client.close()
