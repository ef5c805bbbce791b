"""Model warmup: samples built from model_warmup, run on every active instance."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.backends.base import InstanceInfo, ModelContext
from infercore.backends.python.backend import PythonBackend
from infercore.dispatch import Dispatch
from infercore.errors import InvalidArgumentError
from infercore.instance import ModelInstance
from infercore.stats import ModelStats
from infercore.tensor import DataType, serialize_bytes_tensor
from infercore.testing import RepositoryBuilder
from infercore.warmup import WarmupSample, run_warmup, warmup_samples

NUMERIC = [dt for dt in DataType if dt is not DataType.BYTES]


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def one_input_config(
    data_type: str, warmup: str, *, dims: str = "[ 2, 3 ]", max_batch_size: int = 4
) -> model_config_pb2.ModelConfig:
    return parse(f"""
        name: "m"
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {{ name: "X", data_type: {data_type}, dims: {dims} }} ]
        output [ {{ name: "Y", data_type: {data_type}, dims: {dims} }} ]
        model_warmup [ {warmup} ]
    """)


def sample_of(data_type: str, data: str, *, dims: str = "[ 2, 3 ]", batch_size: int = 1,
              name: str = "s", extra: str = "") -> str:
    return f"""{{
        name: "{name}" batch_size: {batch_size} {extra}
        inputs {{ key: "X" value {{ data_type: {data_type} dims: {dims} {data} }} }}
    }}"""


def build(
    config: model_config_pb2.ModelConfig, model_dir: Path, seed: int = 7
) -> list[WarmupSample]:
    return warmup_samples(config, model_dir, rng=np.random.default_rng(seed))


# -- building samples ------------------------------------------------------------------------
@pytest.mark.parametrize("data_type", NUMERIC, ids=lambda dt: dt.value)
def test_zero_data_is_zeros_with_the_batch_dimension(tmp_path: Path, data_type: DataType):
    name = data_type.config_name
    config = one_input_config(name, sample_of(name, "zero_data: true"))
    (sample,) = build(config, tmp_path)
    assert (sample.name, sample.count, sample.batch_size) == ("s", 1, 1)
    tensor = sample.inputs["X"]
    assert tensor.data_type is data_type
    array = tensor.to_numpy()
    assert array.shape == (1, 2, 3)
    assert array.dtype == data_type.numpy_dtype
    assert not array.view(np.uint8).any()


@pytest.mark.parametrize("data", ["zero_data: true", "random_data: true"])
def test_bytes_zero_and_random_data_are_empty_strings(tmp_path: Path, data: str):
    config = one_input_config("TYPE_STRING", sample_of("TYPE_STRING", data))
    (sample,) = build(config, tmp_path)
    tensor = sample.inputs["X"]
    assert tensor.data_type is DataType.BYTES
    assert tensor.shape == (1, 2, 3)
    assert tensor.to_bytes_array().tolist() == [[[b"", b"", b""], [b"", b"", b""]]]


@pytest.mark.parametrize("data_type", NUMERIC, ids=lambda dt: dt.value)
def test_random_data_has_the_datatype_shape_and_varied_finite_values(
    tmp_path: Path, data_type: DataType
):
    name = data_type.config_name
    config = one_input_config(name, sample_of(name, "random_data: true", dims="[ 8, 16 ]"),
                              dims="[ 8, 16 ]")
    (sample,) = build(config, tmp_path)
    array = sample.inputs["X"].to_numpy()
    assert array.shape == (1, 8, 16)
    assert array.dtype == data_type.numpy_dtype
    if data_type is DataType.BOOL:
        assert set(np.unique(array).tolist()) == {False, True}
        assert set(np.unique(array.view(np.uint8)).tolist()) == {0, 1}  # canonical bools
    else:
        values = array.astype(np.float64)
        assert np.isfinite(values).all()
        assert len(np.unique(values)) > 64  # random, not a constant fill
        if data_type.value.startswith(("INT", "UINT")):
            info = np.iinfo(data_type.numpy_dtype)
            assert info.min <= values.min() and values.max() <= info.max


def test_random_data_differs_between_draws(tmp_path: Path):
    config = one_input_config("TYPE_INT32", sample_of("TYPE_INT32", "random_data: true"))
    (first,) = build(config, tmp_path, seed=1)
    (second,) = build(config, tmp_path, seed=2)
    assert not np.array_equal(first.inputs["X"].to_numpy(), second.inputs["X"].to_numpy())


def test_non_batching_model_gets_no_batch_dimension(tmp_path: Path):
    config = one_input_config("TYPE_FP32", sample_of("TYPE_FP32", "zero_data: true"),
                              max_batch_size=0)
    (sample,) = build(config, tmp_path)
    assert sample.inputs["X"].shape == (2, 3)


def test_count_zero_runs_once_and_batch_size_zero_is_skipped(tmp_path: Path):
    config = one_input_config("TYPE_FP32", ", ".join([
        sample_of("TYPE_FP32", "zero_data: true", name="skipped", batch_size=0),
        sample_of("TYPE_FP32", "zero_data: true", name="once", batch_size=2),
        sample_of("TYPE_FP32", "zero_data: true", name="thrice", extra="count: 3"),
    ]))
    samples = build(config, tmp_path)
    assert [(s.name, s.count, s.batch_size) for s in samples] == [("once", 1, 2), ("thrice", 3, 1)]
    # each of the batch's requests holds the sample once: batch dimension 1
    assert samples[0].inputs["X"].shape == (1, 2, 3)


def test_model_without_warmup_has_no_samples(tmp_path: Path):
    config = parse('name: "m" input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]')
    assert warmup_samples(config, tmp_path) == []


def test_sample_repr_is_short(tmp_path: Path):
    config = one_input_config("TYPE_FP32", sample_of("TYPE_FP32", "zero_data: true"))
    (sample,) = build(config, tmp_path)
    assert repr(sample) == "WarmupSample(name='s', count=1, batch_size=1, inputs=['X'])"


def test_reshape_is_applied_as_for_client_requests(tmp_path: Path):
    config = parse("""
        name: "m"
        max_batch_size: 2
        input [ { name: "X", data_type: TYPE_FP32, dims: [ 6 ], reshape: { shape: [ 2, 3 ] } } ]
        model_warmup [ { name: "r" batch_size: 1
                         inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 6 ]
                                                   zero_data: true } } } ]
    """)
    (sample,) = build(config, tmp_path)
    assert sample.inputs["X"].shape == (1, 2, 3)


def test_control_inputs_pass_through_with_the_batch_dimension(tmp_path: Path):
    config = parse("""
        name: "seq"
        max_batch_size: 4
        input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
        model_warmup [ { name: "sequence sample" batch_size: 2
            inputs { key: "X" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
            inputs { key: "START" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
        } ]
    """)
    (sample,) = build(config, tmp_path)
    assert set(sample.inputs) == {"X", "START"}
    assert sample.inputs["START"].shape == (1, 1)


# -- input_data_file -------------------------------------------------------------------------
def add_file(model_dir: Path, name: str, data: bytes) -> None:
    path = model_dir / "warmup" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.mark.parametrize("data_type", NUMERIC, ids=lambda dt: dt.value)
def test_input_data_file_is_read_raw_as_the_datatype(tmp_path: Path, data_type: DataType):
    values = np.arange(6).astype(data_type.numpy_dtype)
    add_file(tmp_path, "raw", values.tobytes() + b"\x01\x02")  # extra bytes are ignored
    name = data_type.config_name
    config = one_input_config(name, sample_of(name, 'input_data_file: "raw"'))
    (sample,) = build(config, tmp_path)
    array = sample.inputs["X"].to_numpy()
    assert array.shape == (1, 2, 3)
    assert array.dtype == data_type.numpy_dtype
    np.testing.assert_array_equal(array.reshape(-1), values)


def test_input_data_file_of_bytes_is_length_prefixed(tmp_path: Path):
    add_file(tmp_path, "strings", serialize_bytes_tensor([b"233", b"", b"\x00x"]))
    config = one_input_config(
        "TYPE_STRING", sample_of("TYPE_STRING", 'input_data_file: "strings"', dims="[ 3 ]"),
        dims="[ 3 ]",
    )
    (sample,) = build(config, tmp_path)
    assert sample.inputs["X"].to_bytes_array().tolist() == [[b"233", b"", b"\x00x"]]


def test_input_data_file_in_a_subfolder_of_warmup(tmp_path: Path):
    add_file(tmp_path, "sub/raw", np.ones(6, dtype=np.float32).tobytes())
    config = one_input_config("TYPE_FP32", sample_of("TYPE_FP32", 'input_data_file: "sub/raw"'))
    (sample,) = build(config, tmp_path)
    assert sample.inputs["X"].to_numpy().sum() == 6


def test_input_data_file_too_short_names_the_sample(tmp_path: Path):
    add_file(tmp_path, "short", np.zeros(5, dtype=np.float32).tobytes())
    config = one_input_config(
        "TYPE_FP32", sample_of("TYPE_FP32", 'input_data_file: "short"', name="image sample")
    )
    with pytest.raises(InvalidArgumentError) as info:
        build(config, tmp_path)
    assert info.value.message == (
        "model 'm' warmup sample 'image sample': warmup setting expects 24 bytes, but the "
        "data provided from short only has 20 bytes"
    )


def test_bytes_input_data_file_with_wrong_element_count_is_rejected(tmp_path: Path):
    add_file(tmp_path, "strings", serialize_bytes_tensor([b"a", b"b"]))
    config = one_input_config(
        "TYPE_STRING", sample_of("TYPE_STRING", 'input_data_file: "strings"', dims="[ 3 ]"),
        dims="[ 3 ]",
    )
    with pytest.raises(InvalidArgumentError,
                       match="model 'm' warmup sample 's': input_data_file 'strings' of input "
                             "'X': BYTES tensor data holds 2 elements, but the shape needs 3"):
        build(config, tmp_path)


@pytest.mark.parametrize("file_name", ["../config.pbtxt", "/etc/hostname", "sub/../../x", ""])
def test_input_data_file_outside_the_warmup_folder_is_rejected(tmp_path: Path, file_name: str):
    (tmp_path / "config.pbtxt").write_bytes(bytes(24))
    (tmp_path / "x").write_bytes(bytes(24))
    add_file(tmp_path, "sub/placeholder", b"")
    config = one_input_config(
        "TYPE_FP32", sample_of("TYPE_FP32", f'input_data_file: "{file_name}"')
    )
    with pytest.raises(InvalidArgumentError,
                       match=f"model 'm' warmup sample 's': input_data_file '{file_name}' of "
                             "input 'X' must name a file inside the model's 'warmup' folder"):
        build(config, tmp_path)


def test_input_data_file_symlinked_out_of_the_warmup_folder_is_rejected(tmp_path: Path):
    (tmp_path / "secret").write_bytes(bytes(24))
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "link").symlink_to(tmp_path / "secret")
    config = one_input_config("TYPE_FP32", sample_of("TYPE_FP32", 'input_data_file: "link"'))
    with pytest.raises(InvalidArgumentError, match="inside the model's 'warmup' folder"):
        build(config, tmp_path)


def test_missing_input_data_file_is_rejected(tmp_path: Path):
    config = one_input_config("TYPE_FP32", sample_of("TYPE_FP32", 'input_data_file: "gone"'))
    with pytest.raises(InvalidArgumentError) as info:
        build(config, tmp_path)
    assert info.value.message == (
        f"model 'm' warmup sample 's': failed to open text file for read "
        f"{tmp_path / 'warmup' / 'gone'}: No such file or directory"
    )


# -- malformed samples -----------------------------------------------------------------------
def test_batch_size_above_max_batch_size_is_rejected(tmp_path: Path):
    config = one_input_config("TYPE_FP32",
                              sample_of("TYPE_FP32", "zero_data: true", batch_size=5))
    with pytest.raises(InvalidArgumentError) as info:
        build(config, tmp_path)
    assert info.value.message == (
        "model 'm' warmup sample 's': batch_size 5 exceeds the model's max_batch_size 4"
    )


def test_batch_size_above_one_for_a_model_that_does_not_batch_is_rejected(tmp_path: Path):
    config = one_input_config("TYPE_FP32",
                              sample_of("TYPE_FP32", "zero_data: true", batch_size=2),
                              max_batch_size=0)
    with pytest.raises(InvalidArgumentError,
                       match="model 'm' warmup sample 's': batch_size 2 exceeds the model's "
                             "limit of 1 for a model that does not support batching"):
        build(config, tmp_path)


def test_batch_size_equal_to_max_batch_size_is_accepted(tmp_path: Path):
    config = one_input_config("TYPE_FP32",
                              sample_of("TYPE_FP32", "zero_data: true", batch_size=4))
    (sample,) = build(config, tmp_path)
    assert sample.batch_size == 4


def test_variable_size_dimension_is_rejected(tmp_path: Path):
    config = one_input_config("TYPE_FP32",
                              sample_of("TYPE_FP32", "zero_data: true", dims="[ -1 ]"),
                              dims="[ -1 ]")
    with pytest.raises(InvalidArgumentError) as info:
        build(config, tmp_path)
    assert info.value.message == (
        "model 'm' warmup sample 's': warmup setting expects all variable-size dimensions "
        "are specified for input 'X'"
    )


def test_input_without_data_is_rejected(tmp_path: Path):
    config = one_input_config("TYPE_FP32", sample_of("TYPE_FP32", ""))
    with pytest.raises(InvalidArgumentError) as info:
        build(config, tmp_path)
    assert info.value.message == (
        "model 'm' warmup sample 's': warmup setting expects input 'X' to have "
        "input_data_type set"
    )


def test_sample_not_matching_the_model_inputs_is_rejected(tmp_path: Path):
    config = one_input_config("TYPE_FP32", sample_of("TYPE_INT32", "zero_data: true"))
    with pytest.raises(InvalidArgumentError,
                       match=r"model 'm' warmup sample 's': \[request id: <id_unknown>\] "
                             "inference input 'X' data-type is 'INT32', but model 'm' expects "
                             "'FP32'"):
        build(config, tmp_path)
    config = one_input_config("TYPE_FP32",
                              sample_of("TYPE_FP32", "zero_data: true", dims="[ 3, 2 ]"))
    with pytest.raises(InvalidArgumentError,
                       match=r"model 'm' warmup sample 's': \[request id: <id_unknown>\] "
                             r"unexpected shape for input 'X'"):
        build(config, tmp_path)


def test_sample_missing_a_required_input_is_rejected(tmp_path: Path):
    config = parse("""
        name: "m"
        input [ { name: "A", data_type: TYPE_FP32, dims: [ 1 ] },
                { name: "B", data_type: TYPE_FP32, dims: [ 1 ] } ]
        model_warmup [ { name: "half" batch_size: 1
            inputs { key: "A" value { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]
    """)
    with pytest.raises(InvalidArgumentError,
                       match=r"model 'm' warmup sample 'half': \[request id: <id_unknown>\] "
                             r"expected 2 inputs but got 1"):
        build(config, tmp_path)


# -- running warmup on a real Python model ---------------------------------------------------
RECORDING_PY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

import warmup_log


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]

    def execute(self, requests):
        shapes = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy().shape for r in requests]
        warmup_log.calls.append((self.name, threading.current_thread().name, shapes))
        if warmup_log.fail:
            raise ValueError("An Error Occurred")
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""

RECORDING_CONFIG = """
name: "rec"
backend: "python"
max_batch_size: 4
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
model_warmup [
  { name: "zero sample" batch_size: 2 count: 2
    inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
  { name: "random sample" batch_size: 1 count: 3
    inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } }
]
"""


@pytest.fixture
def warmup_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A module both the test and the model import: what execute saw, and switches."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "warmup_log.py").write_text(
        "import threading\ncalls = []\nfail = False\n"
        "executed = threading.Event()\ngo = threading.Event()\n"
    )
    monkeypatch.syspath_prepend(str(shared))
    monkeypatch.delitem(sys.modules, "warmup_log", raising=False)
    import warmup_log

    yield warmup_log
    sys.modules.pop("warmup_log", None)


class Ticks:
    """A manual clock: every reading is 10 ns after the previous one."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 10
        return self.now


class Loaded:
    """A Python model built straight from the backend, its instances wrapped for the engine."""

    def __init__(self, repo: RepositoryBuilder, name: str, config: str, model_py: str,
                 passive: tuple[bool, ...]) -> None:
        model_dir = repo.add_model(name, config=config, model_py=model_py)
        self.config = parse(config)
        self.model_dir = model_dir
        context = ModelContext(name=name, version=1, config=self.config, model_dir=model_dir,
                               version_dir=model_dir / "1", repository=repo.path)
        self.stats = ModelStats(name, 1)
        self.clock = Ticks()
        self.backend_model = PythonBackend().create_model(context)
        self.instances: list[ModelInstance] = []
        for index, is_passive in enumerate(passive):
            info = InstanceInfo(f"{name}_{index}", name, index, "KIND_CPU", 0, passive=is_passive)
            self.instances.append(ModelInstance(
                name, info, self.backend_model.create_instance(info), self.stats,
                decoupled=context.decoupled, clock=self.clock,
            ))

    def warmup(self, **kw) -> None:
        samples = warmup_samples(self.config, self.model_dir)
        run_warmup(self.config.name, 1, samples, self.instances, self.clock,
                   Dispatch(self.config.name, self.instances).run, **kw)

    def close(self) -> None:
        for instance in self.instances:
            instance.finalize()
        self.backend_model.finalize()


@pytest.fixture
def load(repo: RepositoryBuilder) -> Iterator:
    loaded: list[Loaded] = []

    def _load(config: str, model_py: str, passive: tuple[bool, ...] = (False,)) -> Loaded:
        name = parse(config).name
        model = Loaded(repo, name, config, model_py, passive)
        loaded.append(model)
        return model

    yield _load
    for model in loaded:
        model.close()


def test_every_active_instance_runs_each_sample_count_times(load, warmup_log):
    model = load(RECORDING_CONFIG, RECORDING_PY, passive=(False, True, False))
    model.warmup()
    per_instance: dict[str, list[list[tuple[int, ...]]]] = {}
    for instance_name, _thread, shapes in warmup_log.calls:
        per_instance.setdefault(instance_name, []).append(shapes)
    zero = [(1, 4), (1, 4)]  # batch_size 2: two requests of batch 1 in one execution
    random = [(1, 4)]
    assert per_instance == {
        "rec_0": [zero, zero, random, random, random],
        "rec_2": [zero, zero, random, random, random],
    }  # nothing on the passive rec_1
    assert [i.execution_count for i in model.instances] == [5, 0, 5]


def test_warmup_runs_on_the_calling_thread(load, warmup_log):
    model = load(RECORDING_CONFIG, RECORDING_PY)
    model.warmup()
    assert {thread for _, thread, _ in warmup_log.calls} == {threading.current_thread().name}


def test_warmup_is_counted_in_the_model_statistics_as_triton_does(load, warmup_log):
    model = load(RECORDING_CONFIG, RECORDING_PY, passive=(False, False))
    model.warmup()
    stats = model.stats.snapshot()
    assert stats.execution_count == 2 * (2 + 3)
    assert stats.inference_count == 2 * (2 * 2 + 3 * 1)
    assert stats.success.count == stats.inference_count
    assert stats.fail.count == 0
    assert stats.queue.count == stats.success.count and stats.queue.ns > 0


def test_failing_warmup_raises_with_the_sample_name_and_error(load, warmup_log):
    model = load(RECORDING_CONFIG, RECORDING_PY, passive=(False, False))
    warmup_log.fail = True
    with pytest.raises(InvalidArgumentError) as info:
        model.warmup()
    message = info.value.message
    assert message.startswith(
        "failed to load 'rec' version 1: failed to run warmup sample 'zero sample': "
    )
    assert "ValueError: An Error Occurred" in message
    assert message.endswith(";")
    assert len(warmup_log.calls) == 1  # the first failing sample ends warmup


ERROR_RESPONSE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred"))
            for _ in requests
        ]
"""


def test_error_responses_of_the_batch_are_all_reported(load):
    config = RECORDING_CONFIG.replace('name: "rec"', 'name: "bad"')
    model = load(config, ERROR_RESPONSE_PY)
    with pytest.raises(InvalidArgumentError) as info:
        model.warmup()
    assert info.value.message == (
        "failed to load 'bad' version 1: failed to run warmup sample 'zero sample': "
        "An Error Occurred; An Error Occurred;"
    )


def test_model_without_samples_runs_nothing(load, warmup_log):
    config = RECORDING_CONFIG.split("model_warmup")[0]
    model = load(config, RECORDING_PY)
    model.warmup()
    assert warmup_log.calls == []


DECOUPLED_CONFIG = """
name: "dec"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
model_warmup [ { name: "decoupled sample" batch_size: 1
    inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"""

DECOUPLED_PY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

import warmup_log


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self._respond, args=(request.get_response_sender(),))
            thread.start()
            self.threads.append(thread)
        warmup_log.executed.set()
        return None

    def _respond(self, sender):
        warmup_log.go.wait(10)  # answers only after execute has returned
        if warmup_log.fail:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("midway")))
        else:
            out = pb_utils.Tensor("Y", np.zeros(4, dtype=np.float32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(10)
"""


def run_in_thread(model: Loaded) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def target() -> None:
        try:
            model.warmup(timeout=30)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, raised


@pytest.mark.timeout(60)
def test_decoupled_warmup_waits_for_the_final_flag(load, warmup_log):
    model = load(DECOUPLED_CONFIG, DECOUPLED_PY)
    thread, raised = run_in_thread(model)
    assert warmup_log.executed.wait(30)
    thread.join(0.05)
    assert thread.is_alive()  # execute returned, the final flag has not come yet
    warmup_log.go.set()
    thread.join(30)
    assert not thread.is_alive() and raised == []


@pytest.mark.timeout(60)
def test_decoupled_error_before_the_final_flag_fails_warmup(load, warmup_log):
    model = load(DECOUPLED_CONFIG, DECOUPLED_PY)
    warmup_log.fail = True
    warmup_log.go.set()
    thread, raised = run_in_thread(model)
    thread.join(30)
    assert len(raised) == 1 and isinstance(raised[0], InvalidArgumentError)
    assert raised[0].message == (
        "failed to load 'dec' version 1: failed to run warmup sample 'decoupled sample': "
        "midway;"
    )


SILENT_DECOUPLED_PY = """
class TritonPythonModel:
    def execute(self, requests):
        self.senders = [request.get_response_sender() for request in requests]
        return None
"""


def test_decoupled_warmup_without_a_final_flag_times_out(load):
    model = load(DECOUPLED_CONFIG, SILENT_DECOUPLED_PY)
    with pytest.raises(InvalidArgumentError) as info:
        model.warmup(timeout=0.05)
    assert info.value.message == (
        "failed to load 'dec' version 1: failed to run warmup sample 'decoupled sample': "
        "the final response did not arrive within 0.05 s;"
    )
    assert model.instances[0].info.passive is False


def test_bf16_random_data_is_finite(tmp_path: Path):
    config = one_input_config("TYPE_BF16", sample_of("TYPE_BF16", "random_data: true",
                                                     dims="[ 64, 64 ]"), dims="[ 64, 64 ]")
    (sample,) = build(config, tmp_path)
    array = sample.inputs["X"].to_numpy()
    assert array.dtype == ml_dtypes.bfloat16
    assert np.isfinite(array.astype(np.float32)).all()
