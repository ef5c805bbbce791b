"""The python backend driven through its protocol, with real Triton model.py files."""

from __future__ import annotations

import itertools
import json
import logging
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.backends.base import Backend, InstanceInfo, ModelContext, get_backend
from infercore.backends.python.backend import PythonBackend, PythonInstance, PythonModel
from infercore.errors import InternalError, InvalidArgumentError, NotFoundError, TritonError
from infercore.payload import Payload
from infercore.request import InferRequest
from infercore.response import InferResponse, ResponseSender, ResponseStream
from infercore.tensor import DataType
from infercore.tensor import Tensor as CoreTensor

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
"""

ADD_SUB_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0 = in_0.as_numpy() + in_1.as_numpy()
            out_1 = in_0.as_numpy() - in_1.as_numpy()
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1)
            response = pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1])
            responses.append(response)
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("Cleaning up...")
"""


# -- harness -------------------------------------------------------------------------------
class Harness:
    """Builds model repositories in tmp_path and drives the backend like the engine does."""

    def __init__(self, root: Path) -> None:
        self.repo = root / "models"
        self.backend: Backend = PythonBackend()
        self._loaded: list[tuple[PythonModel, list[PythonInstance]]] = []

    def write(self, name: str, model_py: str, config: str, version: int = 1) -> None:
        version_dir = self.repo / name / str(version)
        version_dir.mkdir(parents=True, exist_ok=True)
        (version_dir / "model.py").write_text(textwrap.dedent(model_py))
        (self.repo / name / "config.pbtxt").write_text(config)

    def context(
        self, name: str, config: str | model_config_pb2.ModelConfig, version: int = 1, **kw
    ) -> ModelContext:
        if isinstance(config, str):
            config = text_format.Parse(config, model_config_pb2.ModelConfig())
        return ModelContext(
            name=name,
            version=version,
            config=config,
            model_dir=self.repo / name,
            version_dir=self.repo / name / str(version),
            repository=self.repo,
            **kw,
        )

    def load(
        self, name: str, model_py: str, config: str, *, instances: int = 1, **kw
    ) -> tuple[PythonModel, list[PythonInstance]]:
        self.write(name, model_py, config)
        model = self.backend.create_model(self.context(name, config, **kw))
        created: list[PythonInstance] = []
        self._loaded.append((model, created))
        for index in range(instances):
            info = InstanceInfo(f"{name}_{index}", name, index, "KIND_CPU", 0)
            created.append(model.create_instance(info))
        return model, created

    def close(self) -> None:
        for model, instances in reversed(self._loaded):
            for instance in instances:
                instance.finalize()
            model.finalize()


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path)
    yield h
    h.close()


def request(
    model: str, inputs: dict[str, object], **kw
) -> tuple[InferRequest, ResponseStream]:
    tensors = {
        name: value if isinstance(value, CoreTensor) else CoreTensor.from_object(value)
        for name, value in inputs.items()
    }
    core = InferRequest(model, tensors, **kw)
    stream = ResponseStream(core, raise_on_error=False)
    core.sender = ResponseSender(core, stream, model, 1)
    return core, stream


class ManualClock:
    def __init__(self) -> None:
        self._ticks = itertools.count(100)

    def __call__(self) -> int:
        return next(self._ticks)


def execute(instance: PythonInstance, *requests: InferRequest) -> Payload:
    payload = Payload(list(requests), ManualClock())
    instance.execute(payload)
    return payload


def collect(stream: ResponseStream, timeout: float = 10.0) -> list[InferResponse]:
    """Every response of a stream, waiting for the final one on a helper thread."""
    got: list[InferResponse] = []
    done = threading.Event()

    def read() -> None:
        try:
            got.extend(stream)
        finally:
            done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout), "the stream did not end"
    return got


def only(stream: ResponseStream) -> InferResponse:
    responses = collect(stream)
    assert len(responses) == 1
    return responses[0]


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


# -- registry ------------------------------------------------------------------------------
def test_registry_serves_the_python_backend():
    backend = get_backend("python")
    assert isinstance(backend, PythonBackend)
    assert isinstance(backend, Backend)
    assert backend.name == "python" and backend.supports_batching


# -- add_sub -------------------------------------------------------------------------------
def test_add_sub_computes_both_outputs(harness: Harness):
    _, (instance,) = harness.load("add_sub", ADD_SUB_PY, ADD_SUB_CONFIG)
    core, stream = request("add_sub", {"INPUT0": f32([1, 2, 3, 4]), "INPUT1": f32([1, 1, 1, 1])})
    payload = execute(instance, core)
    response = only(stream)
    assert response.error is None and response.final
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), [2, 3, 4, 5])
    np.testing.assert_array_equal(response.outputs["OUTPUT1"].to_numpy(), [0, 1, 2, 3])
    assert response.outputs["OUTPUT0"].data_type is DataType.FP32
    assert 0 < payload.compute_input_end_ns < payload.compute_output_start_ns


def test_initialize_receives_tritons_args(harness: Harness):
    model, (instance,) = harness.load("add_sub", ADD_SUB_PY, ADD_SUB_CONFIG)
    args = instance._object.args
    assert set(args) == {
        "model_config",
        "model_instance_kind",
        "model_instance_name",
        "model_instance_device_id",
        "model_repository",
        "model_version",
        "model_name",
    }
    assert all(isinstance(value, str) for value in args.values())
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] == "add_sub_0"
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(harness.repo / "add_sub")
    assert args["model_version"] == "1"
    assert args["model_name"] == "add_sub"
    config = json.loads(args["model_config"])
    assert config["name"] == "add_sub"
    assert config["input"][0]["dims"] == [4]


def test_batch_of_requests_gets_one_response_each(harness: Harness):
    _, (instance,) = harness.load("add_sub", ADD_SUB_PY, ADD_SUB_CONFIG)
    pairs = [
        request("add_sub", {"INPUT0": f32([i] * 4), "INPUT1": f32([1] * 4)}) for i in range(3)
    ]
    execute(instance, *(core for core, _ in pairs))
    for i, (_, stream) in enumerate(pairs):
        np.testing.assert_array_equal(only(stream).outputs["OUTPUT0"].to_numpy(), [i + 1] * 4)


# -- every datatype through an identity model -----------------------------------------------
IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT")
            out = pb_utils.Tensor("OUTPUT", tensor.as_numpy())
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

IDENTITY_CONFIG = """
name: "identity"
backend: "python"
input [ {{ name: "INPUT", data_type: {dt}, dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT", data_type: {dt}, dims: [ -1 ] }} ]
"""

SAMPLES = {
    DataType.BOOL: np.array([True, False, True]),
    DataType.INT8: np.array([-128, 0, 127], dtype=np.int8),
    DataType.INT16: np.array([-32768, 1, 32767], dtype=np.int16),
    DataType.INT32: np.array([-(2**31), 2, 2**31 - 1], dtype=np.int32),
    DataType.INT64: np.array([-(2**63), 3, 2**63 - 1], dtype=np.int64),
    DataType.UINT8: np.array([0, 1, 255], dtype=np.uint8),
    DataType.UINT16: np.array([0, 1, 65535], dtype=np.uint16),
    DataType.UINT32: np.array([0, 1, 2**32 - 1], dtype=np.uint32),
    DataType.UINT64: np.array([0, 1, 2**64 - 1], dtype=np.uint64),
    DataType.FP16: np.array([0.5, -1.0, 65504.0], dtype=np.float16),
    DataType.FP32: np.array([0.25, -1e30, 3.5], dtype=np.float32),
    DataType.FP64: np.array([1e-300, -2.0, 1e300], dtype=np.float64),
    DataType.BF16: np.array([1.5, -2.0, 3.0e38], dtype=ml_dtypes.bfloat16),
    DataType.BYTES: np.array([b"", b"\x00bin\xff", "ünï".encode()], dtype=np.object_),
}


@pytest.mark.parametrize("data_type", list(SAMPLES), ids=lambda dt: dt.value)
def test_identity_round_trips_every_datatype(harness: Harness, data_type: DataType):
    config = IDENTITY_CONFIG.format(dt=data_type.config_name)
    _, (instance,) = harness.load("identity", IDENTITY_PY, config)
    sample = SAMPLES[data_type]
    core, stream = request("identity", {"INPUT": CoreTensor.from_numpy(sample, data_type)})
    execute(instance, core)
    output = only(stream).outputs["OUTPUT"]
    assert output.data_type is data_type
    if data_type is DataType.BYTES:
        assert list(output.to_bytes_array()) == list(sample)
    else:
        assert output.to_numpy().dtype == sample.dtype
        np.testing.assert_array_equal(output.to_numpy().view(np.uint8), sample.view(np.uint8))
        # zero-copy: the output shares the request's input memory
        assert np.shares_memory(output.to_numpy(), core.inputs["INPUT"].to_numpy())


def test_str_output_array_becomes_bytes(harness: Harness):
    model_py = """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            out = pb_utils.Tensor("OUTPUT", np.array(["héllo", "x"], dtype=np.object_))
            return [pb_utils.InferenceResponse([out]) for _ in requests]
    """
    _, (instance,) = harness.load("s", model_py, IDENTITY_CONFIG.format(dt="TYPE_STRING"))
    core, stream = request("s", {"INPUT": np.array([b"a"], dtype=np.object_)})
    execute(instance, core)
    output = only(stream).outputs["OUTPUT"]
    assert list(output.to_bytes_array()) == ["héllo".encode(), b"x"]


# -- request accessors -----------------------------------------------------------------------
INSPECT_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            names = np.array(sorted(request.requested_output_names()), dtype=np.object_)
            params = np.array([request.parameters()], dtype=np.object_)
            flags = np.array([request.flags()], dtype=np.int32)
            ident = np.array(
                [request.request_id(), str(request.correlation_id())], dtype=np.object_
            )
            timeout = np.array([request.timeout()], dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("NAMES", names),
                        pb_utils.Tensor("PARAMS", params),
                        pb_utils.Tensor("FLAGS", flags),
                        pb_utils.Tensor("IDENT", ident),
                        pb_utils.Tensor("TIMEOUT", timeout),
                    ],
                    parameters={"seen": len(json.loads(request.parameters()))},
                )
            )
        return responses
"""

INSPECT_CONFIG = """
name: "inspect"
backend: "python"
input [ { name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [
  { name: "NAMES", data_type: TYPE_STRING, dims: [ -1 ] },
  { name: "PARAMS", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "FLAGS", data_type: TYPE_INT32, dims: [ 1 ] },
  { name: "IDENT", data_type: TYPE_STRING, dims: [ 2 ] },
  { name: "TIMEOUT", data_type: TYPE_INT64, dims: [ 1 ] }
]
"""

ONE = {"INPUT": np.array([1], dtype=np.int32)}


def _text(response: InferResponse, name: str) -> list[str]:
    return [item.decode() for item in response.outputs[name].to_bytes_array()]


def test_requested_output_names_are_honoured(harness: Harness):
    _, (instance,) = harness.load("inspect", INSPECT_PY, INSPECT_CONFIG)
    some, some_stream = request("inspect", ONE, requested_outputs=["NAMES", "FLAGS"])
    every, every_stream = request("inspect", ONE)
    execute(instance, some, every)
    response = only(some_stream)
    assert set(response.outputs) == {"NAMES", "FLAGS"}
    assert _text(response, "NAMES") == ["FLAGS", "NAMES"]  # sorted: a set, as Triton's
    # no requested outputs: the model is told every output of its config
    assert _text(only(every_stream), "NAMES") == ["FLAGS", "IDENT", "NAMES", "PARAMS", "TIMEOUT"]


def test_parameters_reach_the_model_as_json_and_come_back(harness: Harness):
    _, (instance,) = harness.load("inspect", INSPECT_PY, INSPECT_CONFIG)
    params = {"text": "hi", "count": 3, "on": True, "ratio": 0.5}
    core, stream = request("inspect", ONE, parameters=params)
    execute(instance, core)
    response = only(stream)
    assert json.loads(_text(response, "PARAMS")[0]) == params
    assert response.parameters == {"seen": 4}


@pytest.mark.parametrize(
    ("start", "end", "flags"),
    [(False, False, 0), (True, False, 1), (False, True, 2), (True, True, 3)],
)
def test_sequence_flags_come_from_start_and_end(harness: Harness, start, end, flags):
    _, (instance,) = harness.load("inspect", INSPECT_PY, INSPECT_CONFIG)
    core, stream = request(
        "inspect", ONE, id="r7", correlation_id=42, sequence_start=start, sequence_end=end,
        timeout_us=1500,
    )
    execute(instance, core)
    response = only(stream)
    assert response.outputs["FLAGS"].to_numpy().tolist() == [flags]
    assert _text(response, "IDENT") == ["r7", "42"]
    assert response.outputs["TIMEOUT"].to_numpy().tolist() == [1500]


# -- failures ---------------------------------------------------------------------------------
RAISING_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0]
            if value < 0:
                raise ValueError(f"negative input {value}")
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array([7], np.int32))])
            for _ in requests
        ]
"""

INT_CONFIG = """
name: "m"
backend: "python"
input [ { name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""


def _int(value: int) -> dict[str, np.ndarray]:
    return {"INPUT": np.array([value], dtype=np.int32)}


def test_execute_raising_fails_only_that_payload(harness: Harness, caplog):
    _, (instance,) = harness.load("m", RAISING_PY, INT_CONFIG)
    bad_a, bad_a_stream = request("m", _int(-1))
    bad_b, bad_b_stream = request("m", _int(5))
    good, good_stream = request("m", _int(1))
    execute(instance, bad_a, bad_b)  # one payload: both requests fail
    execute(instance, good)
    for stream in (bad_a_stream, bad_b_stream):
        error = only(stream).error
        assert isinstance(error, InternalError)
        assert error.message.startswith(
            "Failed to process the request(s) for model 'm_0', message: ValueError: negative "
            "input -1\n\nAt:\n"
        )
        assert "model.py(" in error.message and "): execute" in error.message
    assert only(good_stream).outputs["OUTPUT"].to_numpy().tolist() == [7]
    assert any("Failed to process the request(s)" in r.getMessage() for r in caplog.records)


def test_wrong_number_of_responses_fails_every_request(harness: Harness):
    model_py = """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([])]
    """
    _, (instance,) = harness.load("m", model_py, INT_CONFIG)
    pairs = [request("m", _int(i)) for i in range(2)]
    execute(instance, *(core for core, _ in pairs))
    for _, stream in pairs:
        error = only(stream).error
        assert isinstance(error, InternalError)
        assert error.message == (
            "Failed to process the request(s) for model 'm_0', message: Number of "
            "InferenceResponse objects do not match the number of InferenceRequest objects. "
            "InferenceRequest(s) size is:2, and InferenceResponse(s) size is:1"
        )


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("{}", "Expected a list in the execute return, found type '<class 'dict'>'."),
        (
            "['nope' for _ in requests]",
            "Expected an 'InferenceResponse' object in the execute function return list, "
            "found type '<class 'str'>'.",
        ),
        ("None", "Expected a list in the execute return, found type '<class 'NoneType'>'."),
    ],
)
def test_malformed_execute_return_is_an_error(harness: Harness, returned, message):
    model_py = f"""
    class TritonPythonModel:
        def execute(self, requests):
            return {returned}
    """
    _, (instance,) = harness.load("m", model_py, INT_CONFIG)
    core, stream = request("m", _int(1))
    execute(instance, core)
    assert only(stream).error.message.endswith(message)


def test_response_error_keeps_its_code(harness: Harness):
    model_py = """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("bad input", pb_utils.TritonError.INVALID_ARG)
                ),
                pb_utils.InferenceResponse(error=pb_utils.TritonError("gone", code=2)),
                pb_utils.InferenceResponse(error=pb_utils.TritonError("plain")),
            ]
    """
    _, (instance,) = harness.load("m", model_py, INT_CONFIG)
    pairs = [request("m", _int(i)) for i in range(3)]
    execute(instance, *(core for core, _ in pairs))
    errors = [only(stream).error for _, stream in pairs]
    assert isinstance(errors[0], InvalidArgumentError) and errors[0].message == "bad input"
    assert isinstance(errors[1], NotFoundError) and errors[1].message == "gone"
    assert isinstance(errors[2], InternalError) and errors[2].message == "plain"


def test_initialize_raising_fails_the_load_with_the_reason(harness: Harness):
    model_py = """
    class TritonPythonModel:
        def initialize(self, args):
            raise RuntimeError("cannot find weights.bin")

        def execute(self, requests):
            return []
    """
    with pytest.raises(InternalError) as info:
        harness.load("m", model_py, INT_CONFIG)
    message = info.value.message
    assert message.startswith("RuntimeError: cannot find weights.bin\n\nAt:\n")
    assert "model.py(" in message and "): initialize" in message


def test_model_file_with_a_syntax_error_fails_create_model(harness: Harness):
    with pytest.raises(InvalidArgumentError) as info:
        harness.load("m", "class TritonPythonModel\n", INT_CONFIG)
    assert "failed to load model 'm'" in info.value.message
    assert "SyntaxError" in info.value.message


def test_model_file_without_the_class_fails_create_model(harness: Harness):
    with pytest.raises(InternalError, match="has no attribute 'TritonPythonModel'"):
        harness.load("m", "class Model:\n    pass\n", INT_CONFIG)


def test_finalize_errors_are_logged_not_raised(harness: Harness, caplog):
    model_py = """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return []

        def finalize(self):
            raise pb_utils.TritonModelException("An error occurred during finalize.")
    """
    _, (instance,) = harness.load("m", model_py, INT_CONFIG)
    instance.finalize()
    assert any(
        "TritonModelException: An error occurred during finalize." in r.getMessage()
        for r in caplog.records
    )


# -- auto-complete ----------------------------------------------------------------------------
AUTO_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}]
        outputs = [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}]
        config = auto_complete_model_config.as_dict()
        input_names = [i["name"] for i in config["input"]]
        for input in inputs:
            if input["name"] not in input_names:
                auto_complete_model_config.add_input(input)
        for output in outputs:
            auto_complete_model_config.add_output(output)
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        pb_utils.Logger.log_info("completed in " + pb_utils.get_model_dir())
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in_0 * 2)]))
        return responses
"""


def test_auto_complete_fills_the_config_in_place(harness: Harness, caplog):
    caplog.set_level(logging.INFO, logger="infercore.model")
    harness.write("auto", AUTO_PY, 'name: "auto"\nbackend: "python"\n')
    config = model_config_pb2.ModelConfig(name="auto", backend="python")
    harness.backend.auto_complete_config(config, harness.repo / "auto", harness.repo / "auto" / "1")
    assert [i.name for i in config.input] == ["INPUT0"]
    assert list(config.input[0].dims) == [4]
    assert config.output[0].data_type == model_config_pb2.TYPE_FP32
    assert config.max_batch_size == 8
    assert config.HasField("dynamic_batching")
    assert f"completed in {harness.repo / 'auto' / '1'}" in caplog.text
    # the completed config loads and serves
    model = harness.backend.create_model(harness.context("auto", config))
    instance = model.create_instance(InstanceInfo("auto_0", "auto", 0, "KIND_CPU", 0))
    core, stream = request("auto", {"INPUT0": f32([[1, 2, 3, 4]])})
    execute(instance, core)
    np.testing.assert_array_equal(only(stream).outputs["OUTPUT0"].to_numpy(), [[2, 4, 6, 8]])
    instance.finalize()
    model.finalize()


def test_auto_complete_without_the_hook_leaves_the_config(harness: Harness):
    harness.write("m", RAISING_PY, INT_CONFIG)
    config = text_format.Parse(INT_CONFIG, model_config_pb2.ModelConfig())
    before = config.SerializeToString()
    harness.backend.auto_complete_config(config, harness.repo / "m", harness.repo / "m" / "1")
    assert config.SerializeToString() == before


def test_auto_complete_leaves_an_unimportable_model_to_create_model(harness: Harness):
    harness.write("m", "class TritonPythonModel(\n", INT_CONFIG)
    config = text_format.Parse(INT_CONFIG, model_config_pb2.ModelConfig())
    before = config.SerializeToString()
    harness.backend.auto_complete_config(config, harness.repo / "m", harness.repo / "m" / "1")
    assert config.SerializeToString() == before
    with pytest.raises(InvalidArgumentError, match="SyntaxError"):
        harness.backend.create_model(harness.context("m", config))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("return None", "must return a valid pb.ModelConfig object."),
        (
            "config.add_input({'name': 'INPUT', 'data_type': 'TYPE_FP64', 'dims': [1]})\n"
            "            return config",
            "ValueError: unable to load model 'm', configuration expects datatype TYPE_INT32 "
            "for input 'INPUT', model provides TYPE_FP64",
        ),
    ],
)
def test_auto_complete_errors_fail_the_load(harness: Harness, body, message):
    model_py = f"""
    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            {body}

        def execute(self, requests):
            return []
    """
    harness.write("m", model_py, INT_CONFIG)
    config = text_format.Parse(INT_CONFIG, model_config_pb2.ModelConfig())
    with pytest.raises(InternalError) as info:
        harness.backend.auto_complete_config(config, harness.repo / "m", harness.repo / "m" / "1")
    assert message in info.value.message


# -- logging ----------------------------------------------------------------------------------
LOGGING_PY = """
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_info("init " + args["model_instance_name"])

    def execute(self, requests):
        logger = pb_utils.Logger
        logger.log_warn("executing")
        thread = threading.Thread(target=self._background)
        thread.start()
        thread.join()
        return [pb_utils.InferenceResponse([]) for _ in requests]

    def _background(self):
        pb_utils.Logger.log("from a model thread", pb_utils.Logger.ERROR)
"""


def test_logger_names_the_model(harness: Harness, caplog):
    caplog.set_level(logging.INFO, logger="infercore.model")
    _, (instance,) = harness.load("chatty", LOGGING_PY, INT_CONFIG)
    core, stream = request("chatty", _int(1))
    execute(instance, core)
    only(stream)
    records = [r for r in caplog.records if r.name == "infercore.model"]
    got = [(r.levelno, r.getMessage(), r.model_name) for r in records]
    assert got == [
        (logging.INFO, "init chatty_0", "chatty"),
        (logging.WARNING, "executing", "chatty"),
        (logging.ERROR, "from a model thread", "chatty"),
    ]
    assert records[1].instance_name == "chatty_0"
    assert records[1].filename == "model.py"


# -- decoupled --------------------------------------------------------------------------------
DECOUPLED_CONFIG = """
name: "repeat"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

DECOUPLED_PY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.go = threading.Event()
        self.threads = []

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            thread = threading.Thread(target=self._respond, args=(sender, count))
            thread.start()
            self.threads.append(thread)
        return None

    def _respond(self, sender, count):
        self.go.wait(10)  # only after execute has returned
        for i in range(count):
            out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(10)
"""


@pytest.mark.timeout(30)
def test_decoupled_model_streams_responses_from_its_thread(harness: Harness):
    _, (instance,) = harness.load("repeat", DECOUPLED_PY, DECOUPLED_CONFIG)
    core, stream = request("repeat", {"IN": np.array([3], dtype=np.int32)})
    execute(instance, core)
    assert not stream.done  # execute returned; nothing sent yet
    instance._object.go.set()
    responses = collect(stream)
    assert [r.outputs["OUT"].to_numpy().tolist() for r in responses] == [[0], [1], [2]]
    assert all(r.error is None and not r.final for r in responses)
    assert stream.done


def test_decoupled_execute_raising_answers_open_requests(harness: Harness):
    model_py = """
    class TritonPythonModel:
        def execute(self, requests):
            self.sender = requests[0].get_response_sender()
            raise KeyError("state")
    """
    _, (instance,) = harness.load("repeat", model_py, DECOUPLED_CONFIG)
    core, stream = request("repeat", {"IN": np.array([1], dtype=np.int32)})
    execute(instance, core)
    error = only(stream).error
    assert isinstance(error, InternalError)
    assert "message: KeyError: 'state'" in error.message
    from triton_python_backend_utils import InferenceResponse, TritonModelException

    with pytest.raises(TritonModelException, match="Response sender has been closed"):
        instance._object.sender.send(InferenceResponse([]))


def test_decoupled_execute_must_return_none(harness: Harness):
    model_py = """
    class TritonPythonModel:
        def execute(self, requests):
            return []
    """
    _, (instance,) = harness.load("repeat", model_py, DECOUPLED_CONFIG)
    core, stream = request("repeat", {"IN": np.array([1], dtype=np.int32)})
    execute(instance, core)
    assert only(stream).error.message.endswith(
        "Python model 'repeat_0' is using the decoupled mode and the execute function must "
        "return None."
    )


def test_non_decoupled_model_may_answer_through_its_sender(harness: Harness):
    model_py = """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                sender = request.get_response_sender()
                out = pb_utils.Tensor("OUTPUT", np.array([9], np.int32))
                sender.send(pb_utils.InferenceResponse([out]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
    """
    _, (instance,) = harness.load("m", model_py, INT_CONFIG)
    core, stream = request("m", _int(1))
    execute(instance, core)
    assert only(stream).outputs["OUTPUT"].to_numpy().tolist() == [9]


def test_async_execute_runs_to_completion(harness: Harness):
    model_py = """
    import asyncio

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, requests):
            await asyncio.sleep(0)
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array([5], np.int32))])
                    for _ in requests]
    """
    _, (instance,) = harness.load("m", model_py, INT_CONFIG)
    core, stream = request("m", _int(1))
    execute(instance, core)
    assert only(stream).outputs["OUTPUT"].to_numpy().tolist() == [5]


# -- BLS --------------------------------------------------------------------------------------
BLS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0].decode()
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            infer_request = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["OUTPUT0"],
                inputs=[in_0, in_1],
            )
            infer_response = infer_request.exec()
            if infer_response.has_error():
                raise pb_utils.TritonModelException(infer_response.error().message())
            out = pb_utils.get_output_tensor_by_name(infer_response, "OUTPUT0")
            out = pb_utils.Tensor("OUTPUT0", out.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

BLS_CONFIG = """
name: "bls"
backend: "python"
input [
  { name: "MODEL_NAME", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""


def _in_process_infer(instances: dict[str, PythonInstance]) -> Callable:
    """A stand-in for the server's infer(): runs the request on a loaded instance."""

    def infer(core: InferRequest) -> ResponseStream:
        instance = instances.get(core.model_name)
        if instance is None:
            raise NotFoundError(f"Request for unknown model: '{core.model_name}' is not found")
        stream = ResponseStream(core)
        core.sender = ResponseSender(core, stream, core.model_name, 1)
        execute(instance, core)
        return stream

    return infer


def test_bls_exec_calls_another_model(harness: Harness):
    instances: dict[str, PythonInstance] = {}
    _, (add_sub,) = harness.load("add_sub", ADD_SUB_PY, ADD_SUB_CONFIG)
    instances["add_sub"] = add_sub
    _, (bls,) = harness.load("bls", BLS_PY, BLS_CONFIG, infer=_in_process_infer(instances))
    inputs = {"INPUT0": f32([1, 2, 3, 4]), "INPUT1": f32([10, 10, 10, 10])}
    core, stream = request("bls", {"MODEL_NAME": np.array([b"add_sub"], np.object_), **inputs})
    execute(bls, core)
    np.testing.assert_array_equal(only(stream).outputs["OUTPUT0"].to_numpy(), [11, 12, 13, 14])

    missing, missing_stream = request(
        "bls", {"MODEL_NAME": np.array([b"nope"], np.object_), **inputs}
    )
    execute(bls, missing)
    error = only(missing_stream).error
    # Triton's Python backend words it so (conformance qa_python_backend::bls_single_unknown_model)
    assert ("TritonModelException: Model nope - Error when running inference: Failed for "
            "execute the inference request. Model 'nope' is not ready.") in error.message


def test_bls_without_a_server_fails_the_request(harness: Harness):
    _, (bls,) = harness.load("bls", BLS_PY, BLS_CONFIG)
    inputs = {"INPUT0": f32([1, 2, 3, 4]), "INPUT1": f32([1, 1, 1, 1])}
    core, stream = request("bls", {"MODEL_NAME": np.array([b"add_sub"], np.object_), **inputs})
    execute(bls, core)
    error = only(stream).error
    assert isinstance(error, TritonError)
    assert "BLS needs the model to be served by an infercore server" in error.message


ASYNC_BLS_PY = """
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            calls = [
                pb_utils.InferenceRequest(
                    model_name="add_sub", requested_output_names=[name], inputs=inputs
                ).async_exec()
                for name in ("OUTPUT0", "OUTPUT1")
            ]
            added, subtracted = await asyncio.gather(*calls)
            total = added.output_tensors()[0].as_numpy() + subtracted.output_tensors()[0].as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
        return responses
"""


def test_bls_async_exec_runs_requests_concurrently(harness: Harness):
    instances: dict[str, PythonInstance] = {}
    _, (add_sub,) = harness.load("add_sub", ADD_SUB_PY, ADD_SUB_CONFIG)
    instances["add_sub"] = add_sub
    lock = threading.Lock()  # add_sub_0 is one instance: one execute at a time
    run = _in_process_infer(instances)

    def infer(core: InferRequest) -> ResponseStream:
        with lock:
            return run(core)

    _, (bls,) = harness.load("bls", ASYNC_BLS_PY, BLS_CONFIG, infer=infer)
    inputs = {"INPUT0": f32([1, 2, 3, 4]), "INPUT1": f32([1, 1, 1, 1])}
    core, stream = request("bls", {"MODEL_NAME": np.array([b"add_sub"], np.object_), **inputs})
    execute(bls, core)
    response = only(stream)
    assert response.error is None, response.error
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), [2, 4, 6, 8])


# -- request rescheduling (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) --------------------------
RESCHEDULE_CONFIG = """
name: "again"
backend: "python"
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

RESCHEDULE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    # ANSWER: what execute answers for a request it reschedules (None as Triton asks)
    ANSWER = None

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            if x.as_numpy()[0] > 0:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(self.ANSWER and pb_utils.InferenceResponse([x]))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.as_numpy())]))
        return responses
"""


def _rescheduled(harness: Harness, model_py: str = RESCHEDULE_PY, with_scheduler: bool = True):
    _, (instance,) = harness.load("again", model_py, RESCHEDULE_CONFIG)
    core, stream = request("again", {"X": np.array([1], np.int32)})
    taken: list[InferRequest] = []
    if with_scheduler:
        core.rescheduler = taken.append
    execute(instance, core)
    return core, stream, taken


def test_a_rescheduled_request_goes_back_to_its_scheduler_unanswered(harness: Harness):
    core, stream, taken = _rescheduled(harness)
    assert taken == [core]
    assert not core.sender.closed  # answered by a later execution
    assert stream.next_nowait() is None


def test_answering_a_rescheduled_request_is_refused_with_tritons_text(harness: Harness):
    model_py = RESCHEDULE_PY.replace("ANSWER = None", "ANSWER = True")
    core, stream, taken = _rescheduled(harness, model_py)
    assert taken == []
    assert only(stream).error.message == (
        "Failed to process the request(s) for model 'again_0', message: Expected a None "
        "object in the execute function return list for reschduled request, found type "
        "'<class 'c_python_backend_utils.InferenceResponse'>'.")


def test_rescheduling_without_an_iterative_scheduler_answers_tritons_log_text(harness, caplog):
    core, stream, _ = _rescheduled(harness, with_scheduler=False)
    text = ("Failed to release request: Request is released with "
            "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to "
            "handle such a flag.")
    assert only(stream).error.message == text
    assert text in caplog.text
    assert not core.sender.failed  # Triton's statistics count it as the backend's success
