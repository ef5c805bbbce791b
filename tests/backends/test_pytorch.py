"""The pytorch backend, driven as the engine drives it, against the TorchScript module itself."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from framework_models import (  # noqa: E402 - after the skip
    TORCH_ADD_SUB_CONFIG,
    Harness,
    make_request,
    outputs_of,
    run_payload,
    torch_model,
)

from infercore.backends.pytorch import PyTorchBackend  # noqa: E402
from infercore.errors import InternalError, InvalidArgumentError, UnavailableError  # noqa: E402

# Building TorchScript models is deprecated in torch 2.x; serving them is what is tested.
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated")

MLP_CONFIG = """
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 8 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""

NAMED_CONFIG = """
max_batch_size: 4
input [ { name: "values", data_type: TYPE_FP32, dims: [ 3 ] },
        { name: "scale", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "total", data_type: TYPE_FP32, dims: [ 1 ] },
         { name: "scaled", data_type: TYPE_FP32, dims: [ 3 ] } ]
"""

STRINGS_CONFIG = """
input [ { name: "words", data_type: TYPE_STRING, dims: [ -1 ] } ]
output [ { name: "LOUD", data_type: TYPE_STRING, dims: [ -1 ] } ]
"""

OPTIONAL_CONFIG = """
input [ { name: "x", data_type: TYPE_FP32, dims: [ 2 ] },
        { name: "offset", data_type: TYPE_FP32, dims: [ 2 ], optional: true } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 2 ] } ]
"""


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path, PyTorchBackend())
    yield h
    h.close()


def f32(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def module_of(harness: Harness, name: str) -> Any:
    return torch.jit.load(str(harness.version_dir(name) / "model.pt"))


class Recorder:
    """Stands in for an instance's module: records each call, then delegates."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append({"args": args, "kwargs": kwargs,
                           "inference_mode": torch.is_inference_mode_enabled(),
                           "grad": torch.is_grad_enabled()})
        return self.module(*args, **kwargs)


def test_input_index_naming_matches_the_module_called_directly(harness: Harness):
    torch_model("add_sub", harness.version_dir("add_sub") / "model.pt")
    config = harness.prepare("add_sub", TORCH_ADD_SUB_CONFIG)
    _, (instance,) = harness.load("add_sub", TORCH_ADD_SUB_CONFIG)
    a, b = f32((2, 4), 1), f32((2, 4), 2)
    request, stream = make_request(config, {"INPUT__0": a, "INPUT__1": b})
    payload = run_payload(instance, request)
    got = outputs_of(stream)
    want = module_of(harness, "add_sub")(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_array_equal(got["OUTPUT__0"], want[0].numpy())
    np.testing.assert_array_equal(got["OUTPUT__1"], want[1].numpy())
    assert 0 < payload.compute_input_end_ns < payload.compute_output_start_ns


def test_named_index_outputs_pick_tuple_elements_by_index(harness: Harness):
    torch_model("add_sub", harness.version_dir("swapped") / "model.pt")
    text = TORCH_ADD_SUB_CONFIG.replace('"OUTPUT__0"', '"DIFF__1"').replace(
        '"OUTPUT__1"', '"SUM__0"')
    config = harness.prepare("swapped", text)
    _, (instance,) = harness.load("swapped", text)
    a = np.full((1, 4), 5, np.float32)
    request, stream = make_request(config, {"INPUT__0": a, "INPUT__1": a})
    run_payload(instance, request)
    got = outputs_of(stream)
    np.testing.assert_array_equal(got["SUM__0"], a + a)
    np.testing.assert_array_equal(got["DIFF__1"], a - a)


def test_traced_mlp_batches_a_payload_into_one_forward(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    config = harness.prepare("mlp", MLP_CONFIG)
    _, (instance,) = harness.load("mlp", MLP_CONFIG)
    recorder = Recorder(instance._module)
    instance._module = recorder
    inputs = [f32((size, 8), seed) for seed, size in enumerate((2, 1, 3))]
    pairs = [make_request(config, {"x": x}) for x in inputs]
    run_payload(instance, *(request for request, _ in pairs))
    assert [call["kwargs"]["x"].shape[0] for call in recorder.calls] == [6]
    assert recorder.calls[0]["inference_mode"]  # INFERENCE_MODE defaults to on
    module = module_of(harness, "mlp")
    for x, (_, stream) in zip(inputs, pairs, strict=True):
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(outputs_of(stream)["y"], want, rtol=1e-5, atol=1e-6)


def test_forward_argument_names_match_in_any_config_order_and_dict_outputs_by_key(
        harness: Harness):
    torch_model("named", harness.version_dir("named") / "model.pt")
    config = harness.prepare("named", NAMED_CONFIG)  # values before scale: not forward's order
    _, (instance,) = harness.load("named", NAMED_CONFIG)
    values = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    scale = np.array([[2], [10]], np.float32)
    request, stream = make_request(config, {"values": values, "scale": scale})
    run_payload(instance, request)
    got = outputs_of(stream)
    np.testing.assert_array_equal(got["scaled"], values * scale)
    np.testing.assert_array_equal(got["total"], (values * scale).sum(axis=1, keepdims=True))


def test_strict_config_ordering_when_names_follow_no_convention(harness: Harness):
    torch_model("add_sub", harness.version_dir("plain") / "model.pt")
    text = (TORCH_ADD_SUB_CONFIG.replace('"INPUT__0"', '"first"').replace('"INPUT__1"', '"second"')
            .replace('"OUTPUT__0"', '"sum"').replace('"OUTPUT__1"', '"difference"'))
    config = harness.prepare("plain", text)
    _, (instance,) = harness.load("plain", text)
    a, b = np.full((1, 4), 7, np.float32), np.full((1, 4), 2, np.float32)
    request, stream = make_request(config, {"second": b, "first": a})
    run_payload(instance, request)
    got = outputs_of(stream)
    np.testing.assert_array_equal(got["sum"], a + b)
    np.testing.assert_array_equal(got["difference"], a - b)


def test_string_lists_in_and_out(harness: Harness):
    torch_model("strings", harness.version_dir("strings") / "model.pt")
    config = harness.prepare("strings", STRINGS_CONFIG)
    _, (instance,) = harness.load("strings", STRINGS_CONFIG)
    request, stream = make_request(config, {"words": np.array([b"caf\xc3\xa9", b"ok"],
                                                               dtype=object)})
    run_payload(instance, request)
    want = module_of(harness, "strings")(["café", "ok"])
    assert outputs_of(stream)["LOUD"].tolist() == [word.encode() for word in want]


def test_optional_input_left_out_uses_forwards_default(harness: Harness):
    torch_model("optional", harness.version_dir("optional") / "model.pt")
    config = harness.prepare("optional", OPTIONAL_CONFIG)
    _, (instance,) = harness.load("optional", OPTIONAL_CONFIG)
    x = np.array([1, 2], np.float32)
    without, without_stream = make_request(config, {"x": x})
    given, given_stream = make_request(config, {"x": x, "offset": np.ones(2, np.float32)})
    run_payload(instance, without)
    run_payload(instance, given)
    np.testing.assert_array_equal(outputs_of(without_stream)["y"], [101, 102])
    np.testing.assert_array_equal(outputs_of(given_stream)["y"], [2, 3])


def test_trailing_arguments_with_defaults_are_left_out_under_positional_naming(
        harness: Harness):
    torch_model("defaulted", harness.version_dir("defaulted") / "model.pt")
    text = ('input [ { name: "IN__0", data_type: TYPE_FP32, dims: [ 2 ] } ]\n'
            'output [ { name: "OUT__0", data_type: TYPE_FP32, dims: [ 2 ] } ]')
    config = harness.prepare("defaulted", text)
    _, (instance,) = harness.load("defaulted", text)
    request, stream = make_request(config, {"IN__0": np.array([1, 2], np.float32)})
    run_payload(instance, request)
    np.testing.assert_array_equal(outputs_of(stream)["OUT__0"], [3, 6])


def test_read_only_inputs_are_copied_not_warned_about(harness: Harness):
    torch_model("add_sub", harness.version_dir("add_sub") / "model.pt")
    config = harness.prepare("add_sub", TORCH_ADD_SUB_CONFIG)
    _, (instance,) = harness.load("add_sub", TORCH_ADD_SUB_CONFIG)
    frozen = np.ones((1, 4), np.float32)
    frozen.flags.writeable = False
    request, stream = make_request(config, {"INPUT__0": frozen, "INPUT__1": frozen})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_payload(instance, request)
    np.testing.assert_array_equal(outputs_of(stream)["OUTPUT__0"], [[2, 2, 2, 2]])


def test_inference_mode_off_runs_under_no_grad(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    text = MLP_CONFIG + 'parameters { key: "INFERENCE_MODE" value { string_value: "false" } }'
    config = harness.prepare("mlp", text)
    _, (instance,) = harness.load("mlp", text)
    recorder = Recorder(instance._module)
    instance._module = recorder
    request, stream = make_request(config, {"x": f32((1, 8))})
    run_payload(instance, request)
    outputs_of(stream)
    assert recorder.calls[0]["inference_mode"] is False
    assert recorder.calls[0]["grad"] is False


def test_thread_count_parameters_size_torchs_pools(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    before = torch.get_num_threads()
    text = MLP_CONFIG + 'parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }'
    try:
        harness.load("mlp", text)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_weight_sharing_gives_instances_one_module(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    _, separate = harness.load("mlp", MLP_CONFIG, instances=2)
    assert separate[0]._module is not separate[1]._module
    torch_model("mlp", harness.version_dir("shared") / "model.pt", trace=True)
    text = MLP_CONFIG + 'parameters { key: "ENABLE_WEIGHT_SHARING" value { string_value: "true" } }'
    _, shared = harness.load("shared", text, instances=2)
    assert shared[0]._module is shared[1]._module


# -- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "config", "message"), [
    ("add_sub", TORCH_ADD_SUB_CONFIG.replace(
        'input [', 'input [ { name: "INPUT__2", data_type: TYPE_FP32, dims: [ 4 ] },'),
     "configuration expects 3 inputs, model provides 2"),
    ("add_sub", TORCH_ADD_SUB_CONFIG.replace('"INPUT__1"', '"INPUT__5"'),
     "input 'INPUT__5' names argument 5, but forward\\(\\) takes 2 arguments"),
    ("named", NAMED_CONFIG.replace('{ name: "scale", data_type: TYPE_FP32, dims: [ 1 ] }',
                                   '{ name: "values_too", data_type: TYPE_FP32, dims: [ 1 ] }'),
     None),  # names follow no convention -> strict ordering, which fits: loads
    ("named", 'max_batch_size: 4\ninput [ { name: "values", data_type: TYPE_FP32, dims: [3] } ]'
              '\noutput [ { name: "total", data_type: TYPE_FP32, dims: [1] } ]',
     "forward\\(\\) argument 'scale' has no default value"),
    ("strings", STRINGS_CONFIG.replace("TYPE_STRING, dims: [ -1 ] } ]\noutput",
                                       "TYPE_FP32, dims: [ -1 ] } ]\noutput"),
     "input 'words' is passed to forward\\(\\) argument 'words', which takes List\\[str\\]"),
    ("add_sub", TORCH_ADD_SUB_CONFIG.replace('"OUTPUT__1"', '"OUTPUT__2"'),
     "output 'OUTPUT__2' is number 2, but forward\\(\\) returns 2 values"),
    ("mlp", MLP_CONFIG.replace('output [', 'output [ { name: "z", data_type: TYPE_FP32, '
                                           'dims: [ 4 ] },'),
     "forward\\(\\) returns one Tensor, but the configuration declares 2 outputs"),
])
def test_config_that_does_not_fit_forward_fails_the_load(harness: Harness, kind: str,
                                                         config: str, message: str | None):
    torch_model(kind, harness.version_dir("m") / "model.pt", trace=kind == "mlp")
    if message is None:
        harness.load("m", config)
        return
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        harness.load("m", config)
    assert "'m'" in caught.value.message


def test_without_config_pbtxt_the_load_explains_what_is_missing(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    with pytest.raises(InvalidArgumentError, match="must contain at least one input, none were "
                       "specified .*cannot auto-complete"):
        harness.load("mlp")


def test_missing_and_corrupt_model_files(harness: Harness):
    harness.version_dir("missing")
    with pytest.raises(UnavailableError, match=r"unable to find '.*model\.pt' for model "
                       "'missing'"):
        harness.load("missing", MLP_CONFIG)
    (harness.version_dir("corrupt") / "model.pt").write_bytes(b"\x00garbage")
    with pytest.raises(InternalError, match="failed to load model 'corrupt': torch could not "
                       "load .* as TorchScript") as caught:
        harness.load("corrupt", MLP_CONFIG)
    assert caught.value.__cause__ is not None


def test_kind_gpu_without_cuda_is_a_clear_load_error(harness: Harness):
    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device")
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    with pytest.raises(UnavailableError, match="instance 'mlp_0' of model 'mlp' has kind "
                       "KIND_GPU \\(device 0\\), but torch .* sees no such CUDA device"):
        harness.load("mlp", MLP_CONFIG, kind="KIND_GPU")


def test_bad_boolean_parameter_fails_the_load(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    text = MLP_CONFIG + 'parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { ' \
                        'string_value: "sometimes" } }'
    with pytest.raises(InvalidArgumentError, match="'sometimes' is not a boolean"):
        harness.load("mlp", text)


def test_forward_raising_fails_the_requests_with_tritons_wording(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    text = MLP_CONFIG.replace("dims: [ 8 ]", "dims: [ -1 ]")  # lets a wrong width through
    config = harness.prepare("mlp", text)
    _, (instance,) = harness.load("mlp", text)
    request, stream = make_request(config, {"x": f32((1, 5))})
    run_payload(instance, request)
    with pytest.raises(InternalError, match="^PyTorch execute failure: "):
        outputs_of(stream)


def test_output_datatype_other_than_configured_fails_the_request(harness: Harness):
    torch_model("mlp", harness.version_dir("mlp") / "model.pt", trace=True)
    text = MLP_CONFIG.replace('name: "y", data_type: TYPE_FP32', 'name: "y", data_type: TYPE_FP64')
    config = harness.prepare("mlp", text)
    _, (instance,) = harness.load("mlp", text)
    request, stream = make_request(config, {"x": f32((1, 8))})
    run_payload(instance, request)
    with pytest.raises(InternalError, match="unexpected datatype TYPE_FP32 for inference output "
                       "'y' of model 'mlp', expecting TYPE_FP64"):
        outputs_of(stream)


def test_each_kind_of_instance_runs_on_its_torch_device():
    from infercore.backends.base import InstanceInfo
    from infercore.backends.pytorch import instance_device

    assert instance_device(InstanceInfo("m_0_0", "m_0", 0, "KIND_GPU", 3)) == "cuda:3"
    assert instance_device(InstanceInfo("m_0_0", "m_0", 0, "KIND_CPU", 0)) == "cpu"
    assert instance_device(InstanceInfo("m_0_0", "m_0", 0, "KIND_MODEL", 0)) is None
    assert PyTorchBackend().gpu_capable == torch.cuda.is_available()
