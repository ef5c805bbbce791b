"""KIND_GPU, KIND_AUTO and default instance groups on a host with GPUs, and the GPU
memory limit of model loading, with the GPUs of infercore.testing.FakeDevices: the
instances made, their names, what each backend is told, and Triton's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercore import ModelLoadDeviceLimit, Server
from infercore.backends.base import register_backend
from infercore.errors import InvalidArgumentError
from infercore.testing import FakeDevices, RepositoryBuilder

# Each instance writes what initialize(args) was told to a line of instances.jsonl.
RECORDING_PY = """
import json
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        seen = {key: args[key] for key in
                ("model_instance_name", "model_instance_kind", "model_instance_device_id")}
        with open(os.path.join(args["model_repository"], "instances.jsonl"), "a") as out:
            out.write(json.dumps(seen) + "\\n")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]

    def finalize(self):
        pass
"""


def _config(groups: str = "", backend: str = "python") -> str:
    return f'''
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
{groups}
'''


def _repo(tmp_path: Path, **models: str) -> RepositoryBuilder:
    repo = RepositoryBuilder(tmp_path / "models")
    for name, groups in models.items():
        repo.add_model(name, config=_config(groups), model_py=RECORDING_PY)
    return repo


def _instances(repo: RepositoryBuilder, name: str) -> list[tuple[str, str, str]]:
    path = repo.path / name / "instances.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        (seen["model_instance_name"], seen["model_instance_kind"], seen["model_instance_device_id"])
        for seen in lines
    ]


def _groups(server: Server, name: str) -> list[tuple[str, str, int, list[int]]]:
    return [
        (g["name"], g["kind"], g["count"], g["gpus"])
        for g in server.model(name).config()["instance_group"]
    ]


def _reasons(server: Server) -> dict[str, tuple[str, str]]:
    return {e.name: (e.state.value, e.reason) for e in server.repository_index()}


# infercore runs a Python model with this parameter in worker processes (docs/process_isolation.md)
PROCESS_MODE = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'


@pytest.mark.parametrize("mode", ["", PROCESS_MODE], ids=["in_thread", "process"])
def test_kind_gpu_makes_count_instances_on_each_listed_gpu_named_as_triton(tmp_path, mode):
    groups = "instance_group [ { kind: KIND_GPU gpus: [ 2, 0 ] count: 2 } ]"
    repo = _repo(tmp_path, m=f"{groups}\n{mode}")
    with Server(model_repository=repo.path, devices=FakeDevices(3)) as server:
        assert _groups(server, "m") == [("m_0", "KIND_GPU", 2, [2, 0])]
        # Triton's order: each count on each GPU; one name per count, on every GPU
        assert sorted(_instances(repo, "m")) == sorted(
            [
                ("m_0_0", "GPU", "2"),
                ("m_0_0", "GPU", "0"),
                ("m_0_1", "GPU", "2"),
                ("m_0_1", "GPU", "0"),
            ]
        )
        if not mode:  # in-thread instances are made one after the other
            assert _instances(repo, "m")[:2] == [("m_0_0", "GPU", "2"), ("m_0_0", "GPU", "0")]
        result = server.model("m").infer(inputs={"IN": [1.0]}).result()
        assert result.outputs["OUT"].to_numpy().tolist() == [1.0]


def test_kind_gpu_without_gpus_listed_goes_on_every_gpu(tmp_path):
    repo = _repo(tmp_path, m="instance_group [ { kind: KIND_GPU } ]")
    with Server(model_repository=repo.path, devices=FakeDevices(2)) as server:
        assert _groups(server, "m") == [("m_0", "KIND_GPU", 1, [0, 1])]
        assert _instances(repo, "m") == [("m_0_0", "GPU", "0"), ("m_0_0", "GPU", "1")]


def test_kind_auto_and_the_default_group_use_every_gpu_of_a_gpu_host(tmp_path):
    repo = _repo(tmp_path, auto="instance_group [ { kind: KIND_AUTO count: 2 } ]", plain="")
    with Server(model_repository=repo.path, devices=FakeDevices(2)) as server:
        assert _groups(server, "auto") == [("auto_0", "KIND_GPU", 2, [0, 1])]
        assert _groups(server, "plain") == [("plain", "KIND_GPU", 1, [0, 1])]
        assert _instances(repo, "plain") == [("plain_0", "GPU", "0"), ("plain_0", "GPU", "1")]
        assert len(_instances(repo, "auto")) == 4


def test_kind_auto_stays_on_the_cpu_without_gpus(tmp_path):
    repo = _repo(tmp_path, auto="instance_group [ { kind: KIND_AUTO count: 2 } ]")
    with Server(model_repository=repo.path, devices=FakeDevices(0)) as server:
        assert _groups(server, "auto") == [("auto_0", "KIND_CPU", 2, [])]
        assert _instances(repo, "auto") == [("auto_0_0", "CPU", "0"), ("auto_0_1", "CPU", "0")]


def test_gpu_groups_on_too_few_gpus_fail_with_tritons_words_and_others_load(tmp_path):
    repo = _repo(
        tmp_path,
        none="instance_group [ { kind: KIND_GPU } ]",
        second="instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]",
        cpu="instance_group [ { kind: KIND_CPU } ]",
    )
    with Server(model_repository=repo.path, devices=FakeDevices(0), exit_on_error=False) as server:
        reasons = _reasons(server)
        # as in Triton 2.51: the version fails to load (its poll succeeded)
        assert reasons["none"] == (
            "UNAVAILABLE",
            "Invalid argument: instance group none_0 "
            "of model none has kind KIND_GPU but no GPUs are available",
        )
        assert reasons["cpu"] == ("READY", "")
    with Server(model_repository=repo.path, devices=FakeDevices(1), exit_on_error=False) as server:
        assert _reasons(server)["second"] == (
            "UNAVAILABLE",
            "Invalid argument: instance group second_0 of model second "
            "specifies invalid or unsupported gpu id 1. GPUs with at least the minimum "
            "required CUDA compute compatibility of 6.000000 are: 0",
        )
        assert _reasons(server)["none"] == ("READY", "")


class _CpuOnlyBackend:
    """A backend whose framework has no CUDA here: KIND_AUTO must not reach the GPUs."""

    name = "cpu_only"
    supports_batching = False
    gpu_capable = False

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def auto_complete_config(self, config, model_dir, version_dir) -> None:
        return None

    def create_model(self, context):
        backend = self

        class Model:
            def create_instance(self, info):
                backend.kinds.append(info.kind)
                return Instance()

            def finalize(self) -> None:
                return None

        class Instance:
            def execute(self, payload) -> None:
                return None

            def finalize(self) -> None:
                return None

        return Model()


def test_kind_auto_is_the_cpu_for_a_backend_that_cannot_use_the_gpus(tmp_path):
    backend = _CpuOnlyBackend()
    register_backend("cpu_only", backend)
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model(
        "auto", config=_config("instance_group [ { kind: KIND_AUTO } ]", backend="cpu_only")
    )
    repo.add_model("plain", config=_config(backend="cpu_only"))
    with Server(model_repository=repo.path, devices=FakeDevices(2)) as server:
        assert _groups(server, "auto") == [("auto_0", "KIND_CPU", 1, [])]
        assert _groups(server, "plain") == [("plain", "KIND_CPU", 1, [])]
    assert backend.kinds == ["KIND_CPU", "KIND_CPU"]


# -- --model-load-gpu-limit -------------------------------------------------------------------
def test_an_instance_on_a_gpu_over_its_limit_fails_the_load_then_loads_once_freed(tmp_path):
    repo = _repo(tmp_path, m="instance_group [ { kind: KIND_GPU gpus: [ 0, 1 ] } ]")
    devices = FakeDevices(2, total_bytes=1000, used_bytes=[100, 600])
    with Server(
        model_repository=repo.path,
        devices=devices,
        exit_on_error=False,
        model_control_mode="explicit",
        model_load_device_limits=[ModelLoadDeviceLimit("GPU", 1, 0.5)],
    ) as server:
        with pytest.raises(InvalidArgumentError) as caught:
            server.load("m")
        # GPU 0 has no limit; GPU 1's instance was made, then refused, as Triton checks
        assert (
            "can not create model 'm_0_0': memory limit set for GPU 1 has exceeded, "
            "model loading is rejected." in caught.value.message
        )
        assert _instances(repo, "m") == [("m_0_0", "GPU", "0"), ("m_0_0", "GPU", "1")]
        assert devices.memory_reads == [0, 1]
        assert _reasons(server)["m"][0] == "UNAVAILABLE"
        devices.set_used(1, 500)  # at the limit is within it
        server.load("m")
        assert server.model("m").ready()
        assert server.model("m").infer(inputs={"IN": [2.0]}).result().outputs[
            "OUT"
        ].to_numpy().tolist() == [2.0]


def test_the_gpu_limit_leaves_cpu_instances_alone(tmp_path):
    repo = _repo(tmp_path, m="instance_group [ { kind: KIND_CPU } ]")
    devices = FakeDevices(1, total_bytes=1000, used_bytes=1000)
    with Server(
        model_repository=repo.path,
        devices=devices,
        model_load_device_limits=[ModelLoadDeviceLimit("GPU", 0, 0.1)],
    ) as server:
        assert server.model("m").ready()
    assert devices.memory_reads == [0]


# -- the framework backends are told the GPU ---------------------------------------------------
def _framework_repo(tmp_path: Path, name: str, config: str, model_file: str) -> RepositoryBuilder:
    repo = RepositoryBuilder(tmp_path / "models")
    text = config.replace("{name}", name).replace(
        "instance_group [ { count: 1, kind: KIND_CPU } ]",
        "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]",
    )
    repo.add_model(name, config=text, files={f"1/{model_file}": b""})
    return repo


def test_an_onnxruntime_gpu_instance_asks_for_cuda(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: tests/gpu runs it on a GPU")
    from framework_models import ONNX_ADD_SUB_CONFIG, onnx_add_sub

    repo = _framework_repo(tmp_path, "onnx", ONNX_ADD_SUB_CONFIG, "model.onnx")
    onnx_add_sub(repo.path / "onnx" / "1" / "model.onnx")
    with Server(model_repository=repo.path, devices=FakeDevices(2), exit_on_error=False) as server:
        state, reason = _reasons(server)["onnx"]
    assert state == "UNAVAILABLE"
    assert reason.startswith(
        "Unavailable: instance 'onnx_0_0' of model 'onnx' has kind "
        "KIND_GPU, but this onnxruntime build has no CUDA execution "
        "provider"
    )


def test_a_pytorch_gpu_instance_asks_for_its_cuda_device(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA: tests/gpu runs it on a GPU")
    from framework_models import TORCH_ADD_SUB_CONFIG, torch_model

    repo = _framework_repo(tmp_path, "pt", TORCH_ADD_SUB_CONFIG, "model.pt")
    torch_model("add_sub", repo.path / "pt" / "1" / "model.pt")
    with Server(model_repository=repo.path, devices=FakeDevices(2), exit_on_error=False) as server:
        state, reason = _reasons(server)["pt"]
    assert state == "UNAVAILABLE"
    assert "instance 'pt_0_0' of model 'pt' has kind KIND_GPU (device 1), but torch" in reason
