"""The onnxruntime backend, driven as the engine drives it, against onnxruntime called directly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from framework_models import (  # noqa: E402 - after the skips
    ONNX_ADD_SUB_CONFIG,
    Harness,
    make_request,
    onnx_add_sub,
    onnx_mlp,
    onnx_optional_bias,
    onnx_scalar,
    onnx_strings,
    outputs_of,
    run_payload,
)
from google.protobuf import text_format  # noqa: E402
from tritonclient.grpc import model_config_pb2  # noqa: E402

from infercore.backends import onnxruntime_config as ort_config  # noqa: E402
from infercore.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from infercore.errors import (  # noqa: E402
    CancelledError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
)


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path, OnnxRuntimeBackend())
    yield h
    h.close()


def direct(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def f32(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- auto-complete ------------------------------------------------------------------------------
def test_auto_complete_fills_inputs_outputs_and_batching_from_the_graph(harness: Harness):
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    config = harness.prepare("add_sub")
    assert config.max_batch_size == 4  # Triton's default-max-batch-size
    assert config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("INPUT0", model_config_pb2.TYPE_FP32, [4]), ("INPUT1", model_config_pb2.TYPE_FP32, [4])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT0", [4]),
                                                               ("OUTPUT1", [4])]
    assert config.platform == "onnxruntime_onnx"


def test_default_max_batch_size_comes_from_the_backend_settings(tmp_path: Path):
    harness = Harness(tmp_path, OnnxRuntimeBackend({"default-max-batch-size": "16"}))
    onnx_mlp(harness.version_dir("mlp") / "model.onnx")
    assert harness.prepare("mlp").max_batch_size == 16


def test_auto_complete_keeps_a_configured_max_batch_size_and_scheduler(harness: Harness):
    onnx_mlp(harness.version_dir("mlp") / "model.onnx")
    config = harness.prepare("mlp", "max_batch_size: 32\nsequence_batching {}")
    assert config.max_batch_size == 32
    assert not config.HasField("dynamic_batching")


def test_auto_complete_of_a_model_without_batch_dimension(harness: Harness):
    onnx_add_sub(harness.version_dir("fixed") / "model.onnx", batch=False)
    config = harness.prepare("fixed")
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert [list(t.dims) for t in config.input] == [[4], [4]]


def test_auto_complete_rejects_max_batch_size_for_a_model_that_cannot_batch(harness: Harness):
    onnx_add_sub(harness.version_dir("fixed") / "model.onnx", batch=False)
    with pytest.raises(InvalidArgumentError, match="autofill failed for model 'fixed': model "
                       "does not support batching while non-zero max_batch_size"):
        harness.prepare("fixed", "max_batch_size: 8")


def test_auto_complete_is_skipped_when_the_config_lists_inputs_and_outputs(harness: Harness):
    # No model file at all: a complete config must not need the graph (Triton skips it).
    config = harness.prepare("add_sub", ONNX_ADD_SUB_CONFIG)
    assert config.max_batch_size == 8
    assert not config.HasField("dynamic_batching")


def test_auto_complete_of_string_and_scalar_tensors(harness: Harness):
    onnx_strings(harness.version_dir("strings") / "model.onnx")
    onnx_scalar(harness.version_dir("scalar") / "model.onnx")
    strings = harness.prepare("strings")
    assert {t.data_type for t in strings.input} == {model_config_pb2.TYPE_STRING}
    assert [list(t.dims) for t in strings.output] == [[1], [1]]
    scalar = harness.prepare("scalar")
    assert scalar.max_batch_size == 0
    assert list(scalar.input[0].dims) == [1] and not scalar.input[0].HasField("reshape")


def test_auto_complete_of_a_rank_one_batching_tensor_adds_an_empty_reshape():
    io = ort_config.GraphIo(inputs=(ort_config.TensorInfo("x", "tensor(int64)", (-1,)),),
                            initializers=(),
                            outputs=(ort_config.TensorInfo("y", "tensor(int64)", (-1,)),))
    config = model_config_pb2.ModelConfig(name="ids")
    ort_config.auto_complete(config, io, 4)
    assert list(config.input[0].dims) == [1]
    assert config.input[0].HasField("reshape") and not config.input[0].reshape.shape


def test_graph_inputs_the_sequence_batcher_fills_need_not_be_config_inputs():
    # qa/L0_sequence_batcher's ONNX models list START/READY only as control inputs
    io = ort_config.GraphIo(inputs=tuple(
        ort_config.TensorInfo(name, "tensor(int32)", (-1, 1))
        for name in ("INPUT", "START", "READY", "STATE_IN")),
        initializers=(), outputs=(ort_config.TensorInfo("OUTPUT", "tensor(int32)", (-1, 1)),))
    config = model_config_pb2.ModelConfig(name="seq", max_batch_size=4)
    text_format.Parse("""
        input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        sequence_batching {
          control_input [
            { name: "START" control [ { kind: CONTROL_SEQUENCE_START
                                        int32_false_true: [ 0, 1 ] } ] },
            { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY
                                        int32_false_true: [ 0, 1 ] } ] }
          ]
          state [ { input_name: "STATE_IN" output_name: "OUTPUT" data_type: TYPE_INT32
                    dims: [ 1 ] } ]
        }""", config)
    ort_config.check_config(config, io)
    config.sequence_batching.ClearField("state")
    with pytest.raises(InvalidArgumentError, match="STATE_IN"):
        ort_config.check_config(config, io)


# -- loading -----------------------------------------------------------------------------------
def test_model_directory_holding_model_onnx_loads(harness: Harness):
    onnx_mlp(harness.version_dir("mlp") / "model.onnx" / "model.onnx")
    _, (instance,) = harness.load("mlp")
    x = f32((2, 8))
    request, stream = make_request(harness.prepare("mlp"), {"x": x})
    run_payload(instance, request)
    np.testing.assert_allclose(outputs_of(stream)["y"],
                               direct(harness.version_dir("mlp") / "model.onnx" / "model.onnx",
                                      {"x": x})["y"], rtol=1e-6)


@pytest.mark.parametrize(("config", "message"), [
    ('input [{ name: "IN", data_type: TYPE_FP32, dims: [4] },'
     ' { name: "INPUT1", data_type: TYPE_FP32, dims: [4] }]',
     "unexpected inference input 'IN', allowed inputs are: INPUT0, INPUT1"),
    ('input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [4] },'
     ' { name: "INPUT1", data_type: TYPE_FP32, dims: [4] }]',
     "unexpected datatype TYPE_INT32 for input 'INPUT0', expecting TYPE_FP32"),
    ('input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [2, 2] },'
     ' { name: "INPUT1", data_type: TYPE_FP32, dims: [4] }]',
     "tensor 'INPUT0': the model expects 2 dimensions"),
    ('input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [5] },'
     ' { name: "INPUT1", data_type: TYPE_FP32, dims: [4] }]',
     "tensor 'INPUT0': the model expects shape \\[-1, 4\\]"),
    ('input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [4] }]',
     "the model needs input\\(s\\) 'INPUT1'"),
    ('output [{ name: "OUTPUT9", data_type: TYPE_FP32, dims: [4] }]',
     "unexpected inference output 'OUTPUT9', allowed outputs are: OUTPUT0, OUTPUT1"),
])
def test_config_contradicting_the_graph_fails_the_load(harness: Harness, config: str,
                                                       message: str):
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        harness.load("add_sub", "max_batch_size: 8\n" + config)
    assert "add_sub" in caught.value.message


def test_fixed_first_dimension_cannot_take_a_batch_dimension(harness: Harness):
    onnx_add_sub(harness.version_dir("fixed") / "model.onnx", batch=False)
    config = ONNX_ADD_SUB_CONFIG.replace("dims: [ 4 ]", "dims: [ 1 ], reshape: { shape: [] }")
    with pytest.raises(InvalidArgumentError, match="first dimension is fixed at 4"):
        harness.load("fixed", config)


def test_missing_model_file_fails_with_tritons_text(harness: Harness):
    with pytest.raises(UnavailableError, match=r"unable to find '.*model\.onnx' for model "
                       r"instance 'add_sub_0'"):
        harness.load("add_sub", ONNX_ADD_SUB_CONFIG)


def test_corrupt_model_file_fails_with_onnxruntimes_status(harness: Harness):
    (harness.version_dir("broken") / "model.onnx").write_bytes(b"not a protobuf at all")
    with pytest.raises(InternalError, match=r"failed to load model 'broken' from '.*': onnx "
                       r"runtime error 7: .*Protobuf parsing failed") as caught:
        harness.load("broken", ONNX_ADD_SUB_CONFIG)
    assert caught.value.__cause__ is not None  # translated at the boundary, from the original


def test_kind_gpu_without_cuda_is_a_clear_load_error(harness: Harness):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    with pytest.raises(UnavailableError, match="instance 'add_sub_0' of model 'add_sub' has "
                       "kind KIND_GPU, but this onnxruntime build has no CUDA execution "
                       "provider"):
        harness.load("add_sub", ONNX_ADD_SUB_CONFIG, kind="KIND_GPU")


# -- providers and session options -----------------------------------------------------------------
def _config(text: str) -> model_config_pb2.ModelConfig:
    from google.protobuf import text_format

    return text_format.Parse(text, model_config_pb2.ModelConfig(name="m"))


def test_gpu_instances_get_cuda_on_their_device_then_cpu():
    config = _config('parameters { key: "cudnn_conv_algo_search" value { string_value: "1" } }'
                     'optimization { execution_accelerators { gpu_execution_accelerator ['
                     '{ name: "tensorrt" parameters { key: "precision_mode" value: "FP16" }'
                     '  parameters { key: "max_workspace_size_bytes" value: "1024" } },'
                     '{ name: "cuda" parameters { key: "use_ep_level_unified_stream" '
                     'value: "1" } } ] } }')
    chosen = ort_config.providers(config, "KIND_GPU", 1, "m_0", available=[
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    assert chosen == [
        ("TensorrtExecutionProvider", {"device_id": "1", "trt_fp16_enable": "1",
                                       "trt_max_workspace_size": "1024"}),
        ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC", "device_id": "1",
                                   "use_ep_level_unified_stream": "1"}),
        "CPUExecutionProvider",
    ]


def test_accelerator_missing_from_the_build_or_unknown_is_an_error():
    tensorrt = _config('optimization { execution_accelerators { gpu_execution_accelerator '
                       '[{ name: "tensorrt" }] } }')
    with pytest.raises(UnavailableError, match="'tensorrt', but this onnxruntime build has no "
                       "TensorrtExecutionProvider"):
        ort_config.providers(tensorrt, "KIND_GPU", 0, "m_0",
                             available=["CUDAExecutionProvider", "CPUExecutionProvider"])
    unknown = _config('optimization { execution_accelerators { cpu_execution_accelerator '
                      '[{ name: "warp_drive" }] } }')
    with pytest.raises(InvalidArgumentError, match="unknown Execution Accelerator 'warp_drive'"):
        ort_config.providers(unknown, "KIND_CPU", 0, "m_0")
    assert ort_config.providers(_config(""), "KIND_CPU", 0, "m_0") == ["CPUExecutionProvider"]


def test_session_options_follow_tritons_parameter_names():
    config = _config(
        'optimization { graph { level: 2 } }'
        'parameters { key: "intra_op_thread_count" value { string_value: "3" } }'
        'parameters { key: "execution_mode" value { string_value: "1" } }'
        'parameters { key: "enable_mem_pattern" value { string_value: "false" } }'
        'parameters { key: "memory.enable_memory_arena_shrinkage" value { string_value: '
        '"cpu:0" } }')
    options, run_options = ort_config.session_options(config, {"inter_op_thread_count": "2"})
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 2  # from the backend settings
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert options.enable_mem_pattern is False
    assert run_options is not None
    assert ort_config.session_options(_config(""), {})[1] is None


@pytest.mark.parametrize(("key", "value", "message"), [
    ("execution_mode", "2", "execution_mode are 0 or 1 but got 2"),
    ("intra_op_thread_count", "many", "'many' is not an integer"),
    ("enable_mem_arena", "perhaps", "'perhaps' is not a boolean"),
])
def test_bad_session_parameters_fail_the_load(harness: Harness, key: str, value: str,
                                              message: str):
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    config = ONNX_ADD_SUB_CONFIG + f'parameters {{ key: "{key}" value {{ string_value: ' \
                                   f'"{value}" }} }}'
    with pytest.raises(InvalidArgumentError, match=message):
        harness.load("add_sub", config)


# -- execution ---------------------------------------------------------------------------------
def test_add_sub_matches_onnxruntime_called_directly(harness: Harness):
    path = onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    _, (instance,) = harness.load("add_sub", ONNX_ADD_SUB_CONFIG)
    a, b = f32((3, 4), 1), f32((3, 4), 2)
    request, stream = make_request(harness.prepare("add_sub", ONNX_ADD_SUB_CONFIG),
                                   {"INPUT0": a, "INPUT1": b})
    payload = run_payload(instance, request)
    got = outputs_of(stream)
    want = direct(path, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(got["OUTPUT0"], want["OUTPUT0"])
    np.testing.assert_array_equal(got["OUTPUT1"], want["OUTPUT1"])
    assert 0 < payload.compute_input_end_ns < payload.compute_output_start_ns


def test_a_payload_of_several_requests_runs_once_and_splits_per_request(harness: Harness,
                                                                         monkeypatch):
    path = onnx_mlp(harness.version_dir("mlp") / "model.onnx")
    config = harness.prepare("mlp", "max_batch_size: 8")
    _, (instance,) = harness.load("mlp", "max_batch_size: 8")
    runs: list[int] = []
    session = instance._session
    real_run = session.run
    monkeypatch.setattr(session, "run", lambda names, feeds, options=None: (
        runs.append(feeds["x"].shape[0]), real_run(names, feeds, options))[1])
    inputs = [f32((size, 8), seed) for seed, size in enumerate((1, 3, 2))]
    pairs = [make_request(config, {"x": x}) for x in inputs]
    run_payload(instance, *(request for request, _ in pairs))
    assert runs == [6]  # one run over the concatenated batch
    for x, (_, stream) in zip(inputs, pairs, strict=True):
        got = outputs_of(stream)["y"]
        assert got.shape == (x.shape[0], 4)
        np.testing.assert_allclose(got, direct(path, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_requested_outputs_limit_what_each_request_gets(harness: Harness):
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    config = harness.prepare("add_sub", ONNX_ADD_SUB_CONFIG)
    _, (instance,) = harness.load("add_sub", ONNX_ADD_SUB_CONFIG)
    a = f32((1, 4))
    first, first_stream = make_request(config, {"INPUT0": a, "INPUT1": a},
                                       requested_outputs=["OUTPUT1"])
    second, second_stream = make_request(config, {"INPUT0": a, "INPUT1": a})
    run_payload(instance, first, second)
    assert set(outputs_of(first_stream)) == {"OUTPUT1"}
    assert set(outputs_of(second_stream)) == {"OUTPUT0", "OUTPUT1"}


def test_cancelled_request_in_a_payload_is_answered_and_the_rest_run(harness: Harness):
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    config = harness.prepare("add_sub", ONNX_ADD_SUB_CONFIG)
    _, (instance,) = harness.load("add_sub", ONNX_ADD_SUB_CONFIG)
    a = f32((1, 4))
    cancelled, cancelled_stream = make_request(config, {"INPUT0": a, "INPUT1": a})
    kept, kept_stream = make_request(config, {"INPUT0": a, "INPUT1": a})
    cancelled.cancel()
    run_payload(instance, cancelled, kept)
    assert isinstance(cancelled_stream.result(timeout=5).error, CancelledError)
    np.testing.assert_array_equal(outputs_of(kept_stream)["OUTPUT0"], a + a)


def test_string_tensors_round_trip_as_bytes(harness: Harness):
    path = onnx_strings(harness.version_dir("strings") / "model.onnx")
    config = harness.prepare("strings")
    _, (instance,) = harness.load("strings")
    text = np.array([[b"caf\xc3\xa9"], [b"b"]], dtype=object)
    suffix = np.array([[b"!"], [b"?"]], dtype=object)
    request, stream = make_request(config, {"TEXT": text, "SUFFIX": suffix})
    run_payload(instance, request)
    got = outputs_of(stream)
    assert got["ECHO"].tolist() == [[b"caf\xc3\xa9"], [b"b"]]
    assert got["JOINED"].tolist() == [["café!".encode()], [b"b?"]]
    want = direct(path, {"TEXT": np.array([["café"], ["b"]], dtype=object),
                         "SUFFIX": np.array([["!"], ["?"]], dtype=object)})
    assert [[s.encode() for s in row] for row in want["JOINED"].tolist()] == \
        got["JOINED"].tolist()


def test_non_utf8_bytes_for_a_string_tensor_fail_the_request_clearly(harness: Harness):
    onnx_strings(harness.version_dir("strings") / "model.onnx")
    config = harness.prepare("strings")
    _, (instance,) = harness.load("strings")
    bad = np.array([[b"\xff\xfe"]], dtype=object)
    request, stream = make_request(config, {"TEXT": bad, "SUFFIX": bad})
    run_payload(instance, request)
    with pytest.raises(InvalidArgumentError, match="input '(TEXT|SUFFIX)' of model 'strings' "
                       "holds bytes that are not UTF-8"):
        outputs_of(stream)


def test_optional_input_falls_back_to_the_initializer(harness: Harness):
    onnx_optional_bias(harness.version_dir("bias") / "model.onnx")
    text = ('input [{ name: "x", data_type: TYPE_FP32, dims: [-1, 2] },'
            '       { name: "bias", data_type: TYPE_FP32, dims: [2], optional: true }]\n'
            'output [{ name: "y", data_type: TYPE_FP32, dims: [-1, 2] }]')
    config = harness.prepare("bias", text)
    _, (instance,) = harness.load("bias", text)
    x = np.ones((1, 2), np.float32)
    without, without_stream = make_request(config, {"x": x})
    given, given_stream = make_request(config, {"x": x, "bias": np.array([1, 2], np.float32)})
    run_payload(instance, without)
    run_payload(instance, given)
    np.testing.assert_array_equal(outputs_of(without_stream)["y"], [[11.0, 11.0]])
    np.testing.assert_array_equal(outputs_of(given_stream)["y"], [[2.0, 3.0]])


def test_optional_config_input_the_graph_requires_is_still_accepted(harness: Harness):
    # Triton allows marking a graph input optional; onnxruntime then fails the requests
    # that leave it out, with its own message.
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    text = ONNX_ADD_SUB_CONFIG.replace('dims: [ 4 ] },\n  { name: "INPUT1"',
                                       'dims: [ 4 ] },\n  { optional: true, name: "INPUT1"')
    config = harness.prepare("add_sub", text)
    _, (instance,) = harness.load("add_sub", text)
    request, stream = make_request(config, {"INPUT0": f32((1, 4))})
    run_payload(instance, request)
    with pytest.raises(InvalidArgumentError, match=r"Required inputs \(\['INPUT1'\]\) are missing"):
        outputs_of(stream)


def test_scalar_graph_tensors_are_served_as_dims_one(harness: Harness):
    onnx_scalar(harness.version_dir("scalar") / "model.onnx")
    config = harness.prepare("scalar")
    _, (instance,) = harness.load("scalar")
    request, stream = make_request(config, {"s": np.array([3.5], np.float32)})
    run_payload(instance, request)
    got = outputs_of(stream)["y"]
    assert got.shape == (1,) and got[0] == 7.0


def test_onnxruntime_errors_at_run_time_are_typed_with_the_model_name(harness: Harness):
    from infercore.request import InferRequest
    from infercore.response import ResponseSender, ResponseStream
    from infercore.tensor import Tensor

    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    _, (instance,) = harness.load("add_sub", ONNX_ADD_SUB_CONFIG)
    # Past the validator (as a buggy caller of the backend API could be): int64 input.
    wrong = Tensor.from_object(np.ones((1, 4), np.int64))
    request = InferRequest("add_sub", {"INPUT0": wrong, "INPUT1": wrong})
    request.batch_size = 1
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, "add_sub", 1)
    run_payload(instance, request)
    error = stream.result(timeout=5).error
    assert isinstance(error, InvalidArgumentError)
    assert "onnx runtime failed to execute model 'add_sub' (instance 'add_sub_0')" in \
        error.message
    assert "onnx runtime error 2" in error.message


def test_finalized_instance_fails_late_payloads_instead_of_crashing(harness: Harness):
    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    config = harness.prepare("add_sub", ONNX_ADD_SUB_CONFIG)
    _, (instance,) = harness.load("add_sub", ONNX_ADD_SUB_CONFIG)
    instance.finalize()
    a = f32((1, 4))
    request, stream = make_request(config, {"INPUT0": a, "INPUT1": a})
    run_payload(instance, request)
    with pytest.raises(UnavailableError, match="unloaded"):
        outputs_of(stream)


def test_batch_inputs_are_refused_at_load_rather_than_ignored(harness: Harness):
    from infercore.errors import UnsupportedError

    onnx_add_sub(harness.version_dir("add_sub") / "model.onnx")
    text = ONNX_ADD_SUB_CONFIG + ('batch_input [{ kind: BATCH_ELEMENT_COUNT, target_name: '
                                  '"COUNT", data_type: TYPE_FP32, source_input: "INPUT0" }]')
    with pytest.raises(UnsupportedError, match="batch_input and batch_output are not "
                       "supported by infercore's onnxruntime backend"):
        harness.load("add_sub", text)
