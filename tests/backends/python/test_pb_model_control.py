"""pb_utils.load_model, unload_model and is_model_ready, in-thread and process-isolated.

One probe model runs the calls its request names (a JSON list) and answers each outcome;
"probe" runs in a worker process, "probe_local" in-thread, and both must answer alike:
loads with a config override and with files, unloads, readiness, and the refusals (an
unknown model, a config that is not JSON, a bad version, arguments of the wrong type,
load and unload outside EXPLICIT mode), each followed by a request that works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from infercore import Server
from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

PROBE_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "CALLS", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "SEEN", data_type: TYPE_STRING, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{extra}
"""

PROBE_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils

CALLS = {"load": pb_utils.load_model, "unload": pb_utils.unload_model,
         "ready": pb_utils.is_model_ready}


def outcome(op, args, kwargs):
    if "files" in kwargs:
        kwargs["files"] = {key: value.encode() for key, value in kwargs["files"].items()}
    try:
        return CALLS[op](*args, **kwargs)
    except pb_utils.TritonModelException as exc:
        return "TritonModelException: " + exc.message()
    except TypeError as exc:
        return "TypeError"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            calls = json.loads(
                pb_utils.get_input_tensor_by_name(request, "CALLS").as_numpy()[0].decode())
            seen = [outcome(*call) for call in calls]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "SEEN", np.array([json.dumps(seen).encode()], dtype=np.object_))]))
        return responses
"""

DOUBLE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 2 ] }} ]
output [ {{ name: "Y", data_type: TYPE_INT32, dims: [ 2 ] }} ]
"""

DOUBLE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)])
            for r in requests]
"""

PROBES = ("probe", "probe_local")


def _config_json(name: str, max_batch_size: int) -> str:
    return json.dumps({
        "name": name, "backend": "python", "max_batch_size": max_batch_size,
        "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [2]}],
        "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": [2]}]})


def _repository(root: Any) -> RepositoryBuilder:
    repo = RepositoryBuilder(root / "models")
    repo.add_model("probe", config=PROBE_CONFIG.format(name="probe", extra=PROCESS),
                   model_py=PROBE_PY)
    repo.add_model("probe_local", config=PROBE_CONFIG.format(name="probe_local", extra=""),
                   model_py=PROBE_PY)
    repo.add_model("double", config=DOUBLE_CONFIG.format(name="double", max_batch_size=0),
                   model_py=DOUBLE_PY)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = _repository(tmp_path_factory.mktemp("pb_model_control"))
    with Server(model_repository=repo.path, model_control_mode="explicit",
                startup_models=PROBES) as started:
        yield started


@pytest.fixture(scope="module")
def server_none(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = _repository(tmp_path_factory.mktemp("pb_model_control_none"))
    with Server(model_repository=repo.path) as started:
        yield started


def ask(server: Server, probe: str, *calls: tuple[Any, ...]) -> list[Any]:
    text = json.dumps([[call[0], call[1], call[2] if len(call) > 2 else {}]
                       for call in calls])
    response = server.model(probe).infer(
        {"CALLS": np.array([text.encode()], dtype=np.object_)}).result()
    assert response is not None
    return json.loads(response.outputs["SEEN"].to_numpy()[0])


def double(server: Server, model: str, batched: bool = False) -> list[Any]:
    values = np.array([[1, 2]] if batched else [1, 2], dtype=np.int32)
    response = server.model(model).infer({"X": values}).result()
    assert response is not None
    return response.outputs["Y"].to_numpy().tolist()


def failure(what: str, probe: str, message: str) -> str:
    instance = f"{probe}_0_0"
    return (f"TritonModelException: {what}: Failed to process the request for model "
            f"'{instance}', message: {message}")


@pytest.mark.parametrize("probe", PROBES)
def test_load_readiness_and_unload(server: Server, probe: str):
    assert ask(server, probe, ("ready", ["double"]), ("load", ["double"]),
               ("ready", ["double"]), ("ready", ["double", "1"]),
               ("ready", ["double", "2"])) == [False, None, True, True, False]
    assert double(server, "double") == [2, 4]
    assert ask(server, probe, ("unload", ["double"]), ("ready", ["double"]),
               ("unload", ["double"])) == [None, False, None]
    assert not server.model("double").ready()


@pytest.mark.parametrize("probe", PROBES)
def test_load_with_a_config_override_and_files(server: Server, probe: str):
    assert ask(server, probe, ("load", ["double", _config_json("double", 4)])) == [None]
    assert server.model("double").max_batch_size == 4
    assert double(server, "double", batched=True) == [[2, 4]]
    files = {"file:1/model.py": DOUBLE_PY}
    assert ask(server, probe, ("load", ["made", _config_json("made", 0)], {"files": files}),
               ("ready", ["made"])) == [None, True]
    assert double(server, "made") == [2, 4]
    assert ask(server, probe, ("unload", ["made"]), ("unload", ["double", True])) == [
        None, None]


@pytest.mark.parametrize("probe", PROBES)
def test_refusals_then_a_good_load(server: Server, probe: str):
    poll = "failed to load '{}', failed to poll from model repository"
    version = "failed to get model version from specified version string '{}'"
    assert ask(server, probe, ("load", ["nowhere"]), ("load", ["double", "{not json"]),
               ("load", ["made"], {"files": {"file:1/model.py": DOUBLE_PY}}),
               ("ready", ["double", "abc"]), ("ready", ["double", "-1"]),
               ("ready", ["nowhere"])) == [
        failure("Failed to load model", probe, poll.format("nowhere")),
        failure("Failed to load model", probe, poll.format("double")),
        failure("Failed to load model", probe, poll.format("made")),
        failure("Failed to check model readiness", probe, version.format("abc")
                + " (details: stol), version should be an integral value > 0"),
        failure("Failed to check model readiness", probe, version.format("-1")
                + ", version should be an integral value > 0"),
        False,
    ]
    assert ask(server, probe, ("load", ["double"]), ("ready", ["double", " 1x"]),
               ("unload", ["double"])) == [None, True, None]


@pytest.mark.parametrize("probe", PROBES)
def test_arguments_of_the_wrong_type(server: Server, probe: str):
    assert ask(server, probe, ("load", [3]), ("load", ["double", 5]),
               ("load", ["double", "", "files"]), ("load", []), ("unload", [None]),
               ("unload", ["double", "yes"]), ("ready", [7]), ("ready", ["double", 1]),
               ("load", ["double"], {"model": 1})) == [
        "TypeError", "TypeError",
        "TritonModelException: failed to load model 'double', files should be a dictionary "
        "of file paths and file contents",
        "TypeError", "TypeError", "TypeError", "TypeError", "TypeError", "TypeError"]
    assert ask(server, probe, ("ready", [probe]), ("ready", [b"double".decode()])) == [
        True, False]


@pytest.mark.parametrize("probe", PROBES)
def test_load_and_unload_need_explicit_mode(server_none: Server, probe: str):
    refused = "explicit model load / unload is not allowed if polling is enabled"
    assert ask(server_none, probe, ("load", ["double"]), ("unload", ["double"]),
               ("ready", ["double"]), ("ready", ["nowhere"])) == [
        failure("Failed to load model", probe, refused),
        failure("Failed to unload model", probe, refused), True, False]
    assert double(server_none, "double") == [2, 4]
