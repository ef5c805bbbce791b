"""python_backend's ``decoupled`` example through a real ``infercore serve``, in-thread and
process-isolated: ``repeat_int32`` (one request whose IN elements come back one response
each, DELAY milliseconds apart, from a thread that outlives ``execute``, which itself
sleeps WAIT milliseconds) and ``square_int32`` (four requests in one stream, n responses of
[n] for an IN of [n], none for [0]), both checked as the example's streaming gRPC clients
check them. Both models read their configuration as the example's do
(``using_decoupled_model_transaction_policy``, input and output configs by name) and wait,
in ``finalize``, for their answering threads."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from infercore.testing import RepositoryBuilder

COMMON_PY = """
import json
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


def check(config, name, tensor, dims, data_type, model):
    found = tensor(config, name)
    if found["dims"] != dims or found["data_type"] != data_type:
        raise pb_utils.TritonModelException(
            f"the model `{model}` requires '{name}' as {data_type} {dims}, got {found}")


class Threads:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                f"the model `{args['model_name']}` needs the decoupled transaction policy")
        self.checked(config, args["model_name"])
        self.running = 0
        self.lock = threading.Lock()

    def start(self, *args):
        with self.lock:
            self.running += 1
        threading.Thread(target=self.answer, args=args, daemon=True).start()

    def done(self, sender):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        with self.lock:
            self.running -= 1

    def finalize(self):
        while True:
            with self.lock:
                if self.running == 0:
                    return
            time.sleep(0.1)
"""

REPEAT_PY = (
    COMMON_PY
    + """

class TritonPythonModel(Threads):
    def checked(self, config, model):
        check(config, "IN", pb_utils.get_input_config_by_name, [-1], "TYPE_INT32", model)
        check(config, "DELAY", pb_utils.get_input_config_by_name, [-1], "TYPE_UINT32", model)
        check(config, "WAIT", pb_utils.get_input_config_by_name, [1], "TYPE_UINT32", model)
        self.out_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUT")["data_type"])
        self.idx_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "IDX")["data_type"])

    def execute(self, requests):
        if len(requests) != 1:
            raise pb_utils.TritonModelException(f"unsupported batch size {len(requests)}")
        request = requests[0]
        self.start(request.get_response_sender(),
                   pb_utils.get_input_tensor_by_name(request, "IN").as_numpy(),
                   pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy())
        wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
        time.sleep(wait[0] / 1000)
        return None

    def answer(self, sender, values, delays):
        for index in range(values.size):
            time.sleep(delays[index] / 1000)
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("IDX", np.array([index], self.idx_dtype)),
                pb_utils.Tensor("OUT", np.array([values[index]], self.out_dtype))]))
        self.done(sender)
"""
)

SQUARE_PY = (
    COMMON_PY
    + """

class TritonPythonModel(Threads):
    def checked(self, config, model):
        check(config, "IN", pb_utils.get_input_config_by_name, [1], "TYPE_INT32", model)
        check(config, "OUT", pb_utils.get_output_config_by_name, [1], "TYPE_INT32", model)

    def execute(self, requests):
        for request in requests:
            self.start(request.get_response_sender(),
                       pb_utils.get_input_tensor_by_name(request, "IN").as_numpy())
        return None

    def answer(self, sender, value):
        for _ in range(value[0]):
            sender.send(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([value[0]], np.int32))]))
        self.done(sender)
"""
)

REPEAT_CONFIG = """
name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""

SQUARE_CONFIG = """
name: "square_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"decoupled_{request.param}")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("repeat_int32", config=REPEAT_CONFIG, model_py=REPEAT_PY)
    repo.add_model("square_int32", config=SQUARE_CONFIG, model_py=SQUARE_PY)
    with serving_python_models(root, repo.path, request.param) as started:
        yield started


class UserData:
    def __init__(self) -> None:
        self._completed_requests: queue.Queue = queue.Queue()


def callback(user_data: UserData, result, error) -> None:
    user_data._completed_requests.put(error if error else result)


def _collect(user_data: UserData, expected_count: int) -> dict[str, list]:
    # As the example clients do: as many results as expected, an error raised, results
    # grouped by the id of the request they answer, in the order received.
    result_dict: dict[str, list] = {}
    for recv_count in range(expected_count):
        data_item = user_data._completed_requests.get(timeout=30)
        if isinstance(data_item, InferenceServerException):
            raise data_item
        this_id = data_item.get_response().id
        result_dict.setdefault(this_id, []).append((recv_count, data_item))
    return result_dict


def test_the_repeat_example_passes_its_clients_checks(server):
    in_values = [4, 2, 0, 1]
    delay_values = [1, 2, 3, 4]
    wait_value = 5
    inputs = [
        grpcclient.InferInput("IN", [len(in_values)], "INT32"),
        grpcclient.InferInput("DELAY", [len(delay_values)], "UINT32"),
        grpcclient.InferInput("WAIT", [1], "UINT32"),
    ]
    outputs = [grpcclient.InferRequestedOutput("OUT"), grpcclient.InferRequestedOutput("IDX")]
    user_data = UserData()
    with grpcclient.InferenceServerClient(url=server.grpc_url) as triton_client:
        triton_client.start_stream(callback=partial(callback, user_data))
        inputs[0].set_data_from_numpy(np.array(in_values, dtype=np.int32))
        inputs[1].set_data_from_numpy(np.array(delay_values, dtype=np.uint32))
        inputs[2].set_data_from_numpy(np.array([wait_value], dtype=np.uint32))
        request_id = "0"
        triton_client.async_stream_infer(
            model_name="repeat_int32", inputs=inputs, request_id=request_id, outputs=outputs
        )
        result_dict = _collect(user_data, len(in_values))
        triton_client.stop_stream()
    result_list = result_dict[request_id]
    assert len(result_list) == len(in_values)
    for i, (_, result) in enumerate(result_list):
        assert np.array_equal(np.array([in_values[i]], dtype=np.int32), result.as_numpy("OUT"))
        assert np.array_equal(np.array([i], dtype=np.uint32), result.as_numpy("IDX"))
    assert user_data._completed_requests.empty()


def test_the_square_example_passes_its_clients_checks(server):
    in_values = [4, 2, 0, 1]
    inputs = [grpcclient.InferInput("IN", [1], np_to_triton_dtype(np.int32))]
    outputs = [grpcclient.InferRequestedOutput("OUT")]
    user_data = UserData()
    with grpcclient.InferenceServerClient(url=server.grpc_url) as triton_client:
        triton_client.start_stream(callback=partial(callback, user_data))
        for i, value in enumerate(in_values):
            inputs[0].set_data_from_numpy(np.array([value], dtype=np.int32))
            triton_client.async_stream_infer(
                model_name="square_int32", inputs=inputs, request_id=str(i), outputs=outputs
            )
        result_dict = _collect(user_data, sum(in_values))
        triton_client.stop_stream()
    for i, value in enumerate(in_values):
        this_id = str(i)
        if value == 0:
            assert this_id not in result_dict
            continue
        assert len(result_dict[this_id]) == value
        for _, result in result_dict[this_id]:
            assert np.array_equal(np.array([value], dtype=np.int32), result.as_numpy("OUT"))
    assert user_data._completed_requests.empty()
