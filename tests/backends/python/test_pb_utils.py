"""pb_utils (triton_python_backend_utils) used directly, as model code uses it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

import triton_python_backend_utils as pb_utils
from infercore.backends.python import pb_utils as infercore_pb_utils
from infercore.backends.python.pb_utils.request import _Scope, use_scope
from infercore.backends.python.pb_utils.tensor import _from_core, _to_core
from infercore.errors import ErrorCode
from infercore.request import InferRequest
from infercore.response import ResponseSender, ResponseStream
from infercore.tensor import DataType, MemoryType
from infercore.tensor import Tensor as CoreTensor

ALL_NUMPY = [
    (np.bool_, 1),
    (np.uint8, 2),
    (np.uint16, 3),
    (np.uint32, 4),
    (np.uint64, 5),
    (np.int8, 6),
    (np.int16, 7),
    (np.int32, 8),
    (np.int64, 9),
    (np.float16, 10),
    (np.float32, 11),
    (np.float64, 12),
    (np.object_, 13),
    (ml_dtypes.bfloat16, 14),
]


# -- the shim ------------------------------------------------------------------------------
def test_shim_reexports_every_public_name():
    assert set(pb_utils.__all__) == set(infercore_pb_utils.__all__)
    for name in infercore_pb_utils.__all__:
        assert getattr(pb_utils, name) is getattr(infercore_pb_utils, name)
    for name in (
        "Tensor",
        "InferenceRequest",
        "InferenceResponse",
        "TritonError",
        "TritonModelException",
        "Logger",
        "ModelConfig",
        "get_input_tensor_by_name",
        "get_output_tensor_by_name",
        "get_input_config_by_name",
        "get_output_config_by_name",
        "triton_string_to_numpy",
        "using_decoupled_model_transaction_policy",
    ):
        assert name in pb_utils.__all__


def test_flag_constants_have_tritons_values():
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


# -- Tensor --------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "code"), ALL_NUMPY)
def test_tensor_wraps_array_without_copy_and_reports_triton_dtype(dtype, code):
    if dtype is np.object_:
        array = np.array([b"a", b"bc"], dtype=np.object_)
    else:
        array = np.zeros((2, 3), dtype=dtype)
    tensor = pb_utils.Tensor("T", array)
    assert tensor.name() == "T"
    assert tensor.as_numpy() is array
    assert tensor.triton_dtype() == code
    assert tensor.shape() == list(array.shape)
    assert tensor.is_cpu()


def test_tensor_makes_non_contiguous_array_contiguous():
    array = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    tensor = pb_utils.Tensor("T", array)
    assert tensor.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(tensor.as_numpy(), array)


def test_tensor_of_str_and_bytes_arrays_is_bytes():
    assert pb_utils.Tensor("S", np.array(["a", "bcd"])).triton_dtype() == 13
    assert pb_utils.Tensor("B", np.array([b"a", b"bcd"])).triton_dtype() == 13
    core = _to_core(pb_utils.Tensor("S", np.array(["a", "bcd"])))
    assert core.data_type is DataType.BYTES
    assert list(core.to_bytes_array()) == [b"a", b"bcd"]


def test_tensor_rejects_empty_name_and_unsupported_dtype():
    with pytest.raises(pb_utils.TritonModelException, match="Tensor name cannot be an empty"):
        pb_utils.Tensor("", np.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="NumPy dtype is not supported."):
        pb_utils.Tensor("C", np.zeros(2, dtype=np.complex64))


def test_from_core_and_to_core_share_memory():
    array = np.arange(6, dtype=np.float32)
    core = CoreTensor(DataType.FP32, array)
    tensor = _from_core("IN", core)
    assert tensor.as_numpy() is array
    assert _to_core(tensor) is core  # handed back unchanged: the engine's own tensor
    out = pb_utils.Tensor("OUT", array[::-1].copy())
    out_core = _to_core(out)
    assert out_core.to_numpy() is out.as_numpy()
    assert out_core.data_type is DataType.FP32


def test_dlpack_round_trip_shares_memory():
    array = np.arange(5, dtype=np.int64)
    tensor = pb_utils.Tensor("T", array)
    viewed = np.from_dlpack(tensor)
    assert np.shares_memory(viewed, array)
    back = pb_utils.Tensor.from_dlpack("U", tensor.to_dlpack())
    assert np.shares_memory(back.as_numpy(), array)
    assert back.triton_dtype() == 9
    from_producer = pb_utils.Tensor.from_dlpack("V", array)
    assert np.shares_memory(from_producer.as_numpy(), array)


def test_a_read_only_input_exports_a_copy_through_dlpack():
    # inputs that view a received HTTP/gRPC message are read-only, which numpy cannot export
    received = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), np.float32)
    assert not received.flags.writeable
    tensor = pb_utils.Tensor("T", received)
    viewed = np.from_dlpack(tensor)
    assert viewed.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not np.shares_memory(viewed, received)
    assert pb_utils.Tensor.from_dlpack("U", tensor.to_dlpack()).as_numpy().tolist() == \
        [0.0, 1.0, 2.0, 3.0]
    torch = pytest.importorskip("torch")
    assert torch.from_dlpack(tensor).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_bf16_travels_through_dlpack_with_its_bits():
    array = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    tensor = pb_utils.Tensor("T", array)
    assert tensor.triton_dtype() == 14
    back = pb_utils.Tensor.from_dlpack("U", tensor.to_dlpack())
    assert back.triton_dtype() == 14
    assert back.as_numpy().dtype == ml_dtypes.bfloat16
    assert np.shares_memory(back.as_numpy(), array)
    np.testing.assert_array_equal(back.as_numpy().astype(np.float32), [1.5, -2.0, 3.25])
    again = pb_utils.Tensor.from_dlpack("W", tensor)  # the Tensor itself is a producer
    np.testing.assert_array_equal(again.as_numpy().view(np.uint16), array.view(np.uint16))


def test_dlpack_errors_use_tritons_wording():
    with pytest.raises(pb_utils.TritonModelException, match="string tensors"):
        pb_utils.Tensor("S", np.array([b"x"], dtype=np.object_)).to_dlpack()
    with pytest.raises(pb_utils.TritonModelException, match="Provided tensor is not supported"):
        pb_utils.Tensor.from_dlpack("X", [1, 2, 3])


class _FakeGpuArray:
    """A producer that says it lives on CUDA device 1 (its capsule describes a CPU array)."""

    def __init__(self, array):
        self._array = array
        self.shape = array.shape

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return (2, 1)


def test_gpu_producer_is_kept_and_reexported():
    producer = _FakeGpuArray(np.zeros((2, 2), dtype=np.float16))
    tensor = pb_utils.Tensor.from_dlpack("G", producer)
    assert not tensor.is_cpu()
    assert tensor.triton_dtype() == 10
    assert tensor.shape() == [2, 2]
    assert tensor.__dlpack_device__() == (2, 1)
    with pytest.raises(pb_utils.TritonModelException, match="stored in GPU"):
        tensor.as_numpy()
    core = _to_core(tensor)
    assert core.memory_type is MemoryType.GPU
    assert core.memory_type_id == 1
    assert core.data_type is DataType.FP16


@pytest.mark.parametrize(("dtype", "code"), ALL_NUMPY)
def test_type_conversions_round_trip(dtype, code):
    assert pb_utils.numpy_to_triton_type(dtype) == code
    assert np.dtype(pb_utils.triton_to_numpy_type(code)) == np.dtype(dtype)


def test_type_conversion_edges():
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex128) is None
    assert pb_utils.triton_to_numpy_type(0) is None
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool


def test_byte_tensor_serialization_round_trip():
    array = np.array([b"ab", "c", 7], dtype=np.object_)
    wire = pb_utils.serialize_byte_tensor(array)
    assert wire == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c\x01\x00\x00\x007"
    assert list(pb_utils.deserialize_bytes_tensor(wire)) == [b"ab", b"c", b"7"]
    assert pb_utils.serialize_byte_tensor(np.zeros(2, dtype=np.float32)) is None


# -- errors, responses ---------------------------------------------------------------------
def test_triton_error_codes_match_infercore():
    error = pb_utils.TritonError("boom")
    assert error.message() == "boom"
    assert error.code() == pb_utils.TritonError.INTERNAL
    assert pb_utils.TritonError.INVALID_ARG == ErrorCode.INVALID_ARG == 3
    assert pb_utils.TritonError.CANCELLED == ErrorCode.CANCELLED == 7
    error = pb_utils.TritonError("missing", pb_utils.TritonError.NOT_FOUND)
    assert error.code() == ErrorCode.NOT_FOUND


def test_triton_model_exception_is_raisable_with_message():
    with pytest.raises(pb_utils.TritonModelException) as info:
        raise pb_utils.TritonModelException("bad")
    assert info.value.message() == "bad"


def test_inference_response_accessors_and_parameters_json():
    out = pb_utils.Tensor("OUT", np.ones(2, dtype=np.float32))
    response = pb_utils.InferenceResponse(
        output_tensors=[out], parameters={"a": 1, "b": "x", "c": True}
    )
    assert response.output_tensors() == [out]
    assert not response.has_error()
    assert response.error() is None
    assert json.loads(response.parameters()) == {"a": 1, "b": "x", "c": True}
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is out
    assert pb_utils.get_output_tensor_by_name(response, "NOPE") is None
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("no"))
    assert failed.has_error() and failed.error().message() == "no"
    assert failed.output_tensors() == []


def test_inference_response_checks_its_arguments():
    with pytest.raises(TypeError, match="'output_tensors' must be a list, not str"):
        pb_utils.InferenceResponse(output_tensors="nope")
    with pytest.raises(pb_utils.TritonModelException, match="bool/int/str"):
        pb_utils.InferenceResponse([], parameters={"f": 1.5})
    with pytest.raises(pb_utils.TritonModelException, match="keys to have type str"):
        pb_utils.InferenceResponse([], parameters={1: 1})


def test_bls_request_holds_its_arguments():
    tensor = pb_utils.Tensor("IN", np.zeros(1, dtype=np.int32))
    request = pb_utils.InferenceRequest(
        model_name="m",
        inputs=[tensor],
        requested_output_names=["OUT"],
        request_id="r1",
        correlation_id="seq",
        flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        timeout=5,
        parameters={"k": "v"},
    )
    assert pb_utils.get_input_tensor_by_name(request, "IN") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "X") is None
    assert request.requested_output_names() == {"OUT"}  # a set, as Triton's
    assert request.request_id() == "r1"
    assert request.correlation_id() == "seq"
    assert request.flags() == 1
    assert request.timeout() == 5
    assert json.loads(request.parameters()) == {"k": "v"}
    assert not request.is_cancelled()
    with pytest.raises(TypeError, match="model_name"):
        pb_utils.InferenceRequest(inputs=[], requested_output_names=[])


def test_bls_exec_without_a_server_raises():
    request = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
    with pytest.raises(pb_utils.TritonModelException, match="BLS"):
        request.exec()


def test_release_flags_take_all_and_reschedule_only():
    request = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported request release"):
        request.set_release_flags(7)


# -- response sender -----------------------------------------------------------------------
def _served_request(decoupled: bool):
    core = InferRequest("m", {})
    stream = ResponseStream(core, raise_on_error=False)
    core.sender = ResponseSender(core, stream, "m", 1)
    return pb_utils.InferenceRequest._wrap(core, ("OUT",), decoupled), stream


def test_sender_checks_flags_and_arguments():
    request, _ = _served_request(decoupled=True)
    sender = request.get_response_sender()
    assert request.get_response_sender() is sender
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported flag provided"):
        sender.send(pb_utils.InferenceResponse([]), flags=4)
    with pytest.raises(pb_utils.TritonModelException, match="must be provided when the"):
        sender.send(None, flags=0)


def test_decoupled_sender_sends_many_then_refuses_after_final():
    request, stream = _served_request(decoupled=True)
    sender = request.get_response_sender()
    out = pb_utils.Tensor("OUT", np.ones(1, dtype=np.float32))
    sender.send(pb_utils.InferenceResponse([out]))
    sender.send(pb_utils.InferenceResponse([out]))
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException) as info:
        sender.send(pb_utils.InferenceResponse([out]))
    assert str(info.value) == "Unable to send response. Response sender has been closed."
    responses = list(stream)
    assert len(responses) == 2
    assert stream.done


def test_non_decoupled_sender_allows_one_response():
    request, stream = _served_request(decoupled=False)
    sender = request.get_response_sender()
    with pytest.raises(pb_utils.TritonModelException, match="cannot send complete final before"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    sender.send(pb_utils.InferenceResponse([]))
    with pytest.raises(pb_utils.TritonModelException, match="cannot send more than one response"):
        sender.send(pb_utils.InferenceResponse([]))
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert stream.done


# -- model config --------------------------------------------------------------------------
CONFIG = """
name: "m"
max_batch_size: 4
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 3 ] } ]
"""


def _config(text: str = CONFIG) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_model_config_as_dict_renders_like_triton():
    config = pb_utils.ModelConfig(_config())
    data = config.as_dict()
    assert data["name"] == "m"
    assert data["max_batch_size"] == 4
    assert data["input"][0]["dims"] == [3]  # a number, not proto3 JSON's "3"
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["output"] == []
    assert pb_utils.get_input_config_by_name(data, "IN")["name"] == "IN"
    assert pb_utils.get_input_config_by_name(data, "NOPE") is None
    assert pb_utils.get_output_config_by_name(data, "OUT") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(data)


def test_model_config_mutations_land_in_the_protobuf():
    proto = _config()
    config = pb_utils.ModelConfig(proto)
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [3]})
    config.add_input({"name": "IN2", "data_type": "TYPE_INT64", "dims": [-1], "optional": True})
    config.add_output({"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]})
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": True})
    assert [i.name for i in proto.input] == ["IN", "IN2"]
    assert proto.input[1].optional and list(proto.input[1].dims) == [-1]
    assert proto.output[0].data_type == model_config_pb2.TYPE_STRING
    assert proto.max_batch_size == 8
    assert proto.HasField("dynamic_batching")
    assert proto.model_transaction_policy.decoupled
    assert pb_utils.using_decoupled_model_transaction_policy(config.as_dict())


def test_model_config_fills_an_input_named_without_type():
    proto = _config('name: "m" input [ { name: "IN" } ]')
    pb_utils.ModelConfig(proto).add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [2]})
    assert proto.input[0].data_type == model_config_pb2.TYPE_INT32
    assert list(proto.input[0].dims) == [2]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda c: c.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [3]}),
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for input "
            "'IN', model provides TYPE_INT32",
        ),
        (
            lambda c: c.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [5]}),
            "model 'm', tensor 'IN': the model expects dims [5] but the model configuration "
            "specifies dims [3]",
        ),
        (
            lambda c: c.add_input({"name": "X", "data_type": "TYPE_FP32"}),
            "input 'X' in auto-complete-config function for model 'm' is missing 'dims' "
            "property.",
        ),
        (
            lambda c: c.add_output({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "z": 1}),
            "output 'X' in auto-complete-config function for model 'm' contains property "
            "other than 'name', 'data_type' and 'dims'.",
        ),
        (
            lambda c: c.set_max_batch_size(2),
            "configuration specified max_batch_size 4, but in auto-complete-config function "
            "for model 'm' specified max_batch_size 2",
        ),
        (
            lambda c: c.set_model_transaction_policy({"other": 1}),
            "contains property other than 'decoupled'.",
        ),
    ],
)
def test_model_config_refuses_what_triton_refuses(call, message):
    proto = _config()
    before = proto.SerializeToString()
    with pytest.raises(ValueError) as info:
        call(pb_utils.ModelConfig(proto))
    assert message in str(info.value)
    assert proto.SerializeToString() == before


def test_set_dynamic_batching_refuses_a_sequence_batcher():
    config = pb_utils.ModelConfig(_config('name: "m" sequence_batching {}'))
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        config.set_dynamic_batching()


def test_set_transaction_policy_refuses_a_change():
    config = pb_utils.ModelConfig(_config('name: "m" model_transaction_policy { decoupled: true }'))
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": False})


# -- Logger --------------------------------------------------------------------------------
def test_logger_writes_levels_to_infercore_model_logger(caplog):
    caplog.set_level(logging.DEBUG, logger="infercore.model")
    logger = pb_utils.Logger
    logger.log_info("i")
    logger.log_warn("w")
    logger.log_error("e")
    logger.log_verbose("v")
    logger.log("x", logger.ERROR)
    logger.log("y")
    got = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [
        ("infercore.model", logging.INFO, "i"),
        ("infercore.model", logging.WARNING, "w"),
        ("infercore.model", logging.ERROR, "e"),
        ("infercore.model", logging.DEBUG, "v"),
        ("infercore.model", logging.ERROR, "x"),
        ("infercore.model", logging.INFO, "y"),
    ]
    assert caplog.records[0].filename == "test_pb_utils.py"  # the caller's location


def test_logger_tags_records_with_the_current_model(caplog, tmp_path: Path):
    caplog.set_level(logging.INFO, logger="infercore.model")
    with use_scope(_Scope("my_model", 3, tmp_path, "my_model_0")):
        pb_utils.Logger.log_info("hello")
        assert pb_utils.get_model_dir() == str(tmp_path)
    record = caplog.records[-1]
    assert record.getMessage() == "hello"  # the model is in the attributes, as Triton logs it
    assert record.model_name == "my_model"
    assert record.model_version == 3
    assert record.instance_name == "my_model_0"
    assert pb_utils.LogLevel.VERBOSE == pb_utils.Logger.VERBOSE


def test_get_model_dir_outside_a_model_raises():
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.get_model_dir()


def test_metric_kinds_are_names_of_metric_family_only_as_in_triton():
    # Triton's stub copies MetricFamily, not its MetricKind enum or the enum's values, into
    # triton_python_backend_utils: a model writing kind=pb_utils.COUNTER fails its load on
    # Triton 2.51 with an AttributeError, as here.
    assert pb_utils.MetricFamily.COUNTER is not pb_utils.MetricFamily.GAUGE
    for name in ("COUNTER", "GAUGE", "HISTOGRAM", "MetricKind"):
        assert not hasattr(pb_utils, name), name
