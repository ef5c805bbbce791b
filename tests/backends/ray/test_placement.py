"""Ray placement parameters: parsing, validation, and the load errors a server gives.

None of these needs Ray: a bad placement fails the load before Ray is ever imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

from infercore import Server
from infercore.backends.base import ModelContext
from infercore.backends.ray import RayPlacement, create_backend_model, placements_from_config
from infercore.config import parse_model_config
from infercore.errors import InvalidArgumentError, TritonError

BASE = """
name: "m"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
instance_group [ { name: "local", count: 1, kind: KIND_CPU },
                 { name: "remote", count: 2, kind: KIND_CPU } ]
"""

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""


def config_with(value: str, key: str = "infercore.ray.remote", extra: str = ""
                ) -> model_config_pb2.ModelConfig:
    text = BASE + extra + f"parameters {{ key: \"{key}\" value {{ string_value: '{value}' }} }}"
    return parse_model_config(text, model_name="m")


def test_model_without_ray_parameters_has_no_placements():
    assert placements_from_config(parse_model_config(BASE, model_name="m"), "m") == {}


def test_placement_reads_every_key():
    config = config_with(
        '{"num_cpus": 2, "num_gpus": 0.5, "memory": 1024, "resources": {"node_b": 1}, '
        '"strategy": "SPREAD", "max_restarts": 5, "restart_backoff_ms": 100, '
        '"start_timeout_s": 9.5, "runtime_env": {"env_vars": {"A": "1"}}}')
    placement = placements_from_config(config, "m")["remote"]
    assert placement == RayPlacement(
        group="remote", count=2, num_cpus=2.0, num_gpus=0.5, memory=1024,
        resources=(("node_b", 1.0),), strategy="SPREAD", max_restarts=5,
        restart_backoff_ms=100, start_timeout_s=9.5,
        runtime_env='{"env_vars": {"A": "1"}}')
    assert placement.bundle() == {"CPU": 2.0, "GPU": 0.5, "memory": 1024.0, "node_b": 1.0}
    assert placement.actor_options() == {
        "num_cpus": 2.0, "num_gpus": 0.5, "memory": 1024, "resources": {"node_b": 1.0},
        "runtime_env": {"env_vars": {"A": "1"}}}


def test_empty_placement_takes_the_defaults():
    placement = placements_from_config(config_with("{}"), "m")["remote"]
    assert placement == RayPlacement(group="remote", count=2)
    assert placement.actor_options() == {"num_cpus": 1.0, "num_gpus": 0.0}


@pytest.mark.parametrize(("value", "key", "expected"), [
    ("{}", "infercore.ray.nope", "parameter 'infercore.ray.nope' names no instance group"),
    ("{}", "infercore.ray", "parameter 'infercore.ray' names no instance group"),
    ("[1]", "infercore.ray.remote", "must be a JSON object"),
    ("{num_cpus: 1}", "infercore.ray.remote", "must be a JSON object"),
    ('{"cpus": 1}', "infercore.ray.remote", "unknown key(s) 'cpus'"),
    ('{"num_cpus": -1}', "infercore.ray.remote", '"num_cpus" must be a number >= 0'),
    ('{"num_cpus": "1"}', "infercore.ray.remote", '"num_cpus" must be a number >= 0'),
    ('{"max_restarts": 1.5}', "infercore.ray.remote", '"max_restarts" must be a whole'),
    ('{"strategy": "spread"}', "infercore.ray.remote", '"strategy" must be one of PACK'),
    ('{"resources": [1]}', "infercore.ray.remote", '"resources" must be a JSON object'),
    ('{"resources": {"a": true}}', "infercore.ray.remote", '"a" must be a number >= 0'),
    ('{"resources": {"CPU": 1}}', "infercore.ray.remote", 'ask for CPU with "num_cpus"'),
    ('{"start_timeout_s": 0}', "infercore.ray.remote", '"start_timeout_s" must be > 0'),
    ('{"runtime_env": "x"}', "infercore.ray.remote", '"runtime_env" must be a JSON object'),
    ('{"num_cpus": 0, "strategy": "PACK"}', "infercore.ray.remote",
     "needs each instance to ask for some resource"),
])
def test_bad_placement_is_refused_with_a_clear_error(value, key, expected):
    with pytest.raises(InvalidArgumentError) as raised:
        placements_from_config(config_with(value, key), "m")
    assert expected in raised.value.message
    assert raised.value.message.startswith("model 'm': parameter")


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("passive", True, "a passive instance group cannot run on Ray"),
    ("host_policy", "pinned", "host policies pin threads of this server"),
])
def test_groups_that_cannot_run_on_ray_are_refused(field, value, expected):
    config = config_with("{}")
    setattr(config.instance_group[1], field, value)
    with pytest.raises(InvalidArgumentError, match=expected):
        placements_from_config(config, "m")


def test_decoupled_models_cannot_run_on_ray_yet():
    config = config_with("{}", extra="model_transaction_policy { decoupled: true }\n")
    with pytest.raises(InvalidArgumentError, match="decoupled models cannot run on Ray yet"):
        placements_from_config(config, "m")


def test_gpu_group_must_ask_ray_for_gpus():
    config = config_with("{}")
    config.instance_group[1].kind = model_config_pb2.ModelInstanceGroup.KIND_GPU
    with pytest.raises(InvalidArgumentError, match='"num_gpus"'):
        placements_from_config(config, "m")


class _Backend:
    name = "python"
    supports_batching = True

    def __init__(self) -> None:
        self.created = 0

    def auto_complete_config(self, config, model_dir, version_dir) -> None:
        pass

    def create_model(self, context):
        self.created += 1
        return "the backend's model"


def _context(config):
    return ModelContext(name="m", version=1, config=config, model_dir=Path("/x/m"),
                        version_dir=Path("/x/m/1"), repository=Path("/x"))


def test_hook_gives_the_backends_own_model_when_nothing_is_placed():
    backend = _Backend()
    context = _context(parse_model_config(BASE, model_name="m"))
    assert create_backend_model(backend, context, "") == "the backend's model"
    assert backend.created == 1


def test_hook_refuses_a_placed_model_without_a_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("infercore.backends.ray.hook._ray_running", lambda: False)
    with pytest.raises(InvalidArgumentError) as raised:
        create_backend_model(_Backend(), _context(config_with("{}")), "")
    assert raised.value.message == (
        "model 'm' places instance group(s) 'remote' on Ray ('infercore.ray.<group>' "
        "parameters), but this server has no Ray cluster: start it with --ray-address=auto "
        "(or the cluster's address, or 'local'), or set RAY_ADDRESS")


def test_server_load_fails_with_the_placement_error_and_keeps_serving(repo):
    repo.add_model("good", config=BASE.replace('"m"', '"good"'), model_py=IDENTITY_PY)
    bad = BASE.replace('"m"', '"bad"') + (
        "parameters { key: \"infercore.ray.remote\" value { string_value: '{\"gpus\": 1}' } }")
    repo.add_model("bad", config=bad, model_py=IDENTITY_PY)
    with Server(model_repository=repo.path, exit_on_error=False) as server:
        index = {entry.name: entry for entry in server.repository_index()}
        assert index["good"].state.value == "READY"
        assert index["bad"].state.value == "UNAVAILABLE"
        assert "parameter 'infercore.ray.remote' has unknown key(s) 'gpus'" in (
            index["bad"].reason)
        x = np.array([1.0], np.float32)
        with pytest.raises(TritonError):
            server.model("bad").infer(inputs={"X": x}).result()
        response = server.model("good").infer(inputs={"X": x}).result()
        assert response.outputs["Y"].to_numpy().tolist() == [1.0]


def test_importing_the_engine_never_imports_ray():
    code = ("import sys, infercore, infercore.model, infercore.backends.ray, "
            "infercore.backends.ray.model, infercore.backends.ray.instance, "
            "infercore.backends.ray.host; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
