"""Models for the model-control tests: a tagged echo model and a shared state module.

``control_state`` is a module the tests and the models both import (it lives outside the
repository, so writing to it never counts as a change of a model folder): models record
what happened there, and the tests hold executions with its events. Test modules define
their ``state`` fixture with ``shared_state``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from infercore.testing import RepositoryBuilder

# X (INT32 [1]) -> TAG (which source answered), VERSION (which version), Y = X.
ECHO_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
version_policy: {policy}
input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [
  {{ name: "Y", data_type: TYPE_INT32, dims: [ 1 ] }},
  {{ name: "TAG", data_type: TYPE_INT32, dims: [ 1 ] }},
  {{ name: "VERSION", data_type: TYPE_INT32, dims: [ 1 ] }}
]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""

ECHO_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils
import control_state as state

TAG = {tag}


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        self.version = int(args["model_version"])
        state.events.append(("initialize", self.name, self.version, TAG))
        if state.refuse_initialize.get(self.name, 0) > 0:
            state.refuse_initialize[self.name] -= 1
            raise RuntimeError(f"initialize of {{self.name}} refused on purpose")

    def execute(self, requests):
        if self.name in state.hold:
            state.entered.release()
            state.gate.wait(30)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", x),
                pb_utils.Tensor("TAG", np.array([TAG], np.int32)),
                pb_utils.Tensor("VERSION", np.array([self.version], np.int32)),
            ]))
        state.events.append(("executed", self.name, self.version, TAG))
        return responses

    def finalize(self):
        state.events.append(("finalize", self.name, self.version, TAG))
"""

STATE_PY = """
import threading

events = []  # (what, model, version, tag)
refuse_initialize = {}  # model name -> initializations still to refuse
hold = set()  # names of models whose executions wait at the gate
gate = threading.Event()
entered = threading.Semaphore(0)  # released by each held execution
"""


def echo_config(name: str, policy: str = "{ latest { num_versions: 1 } }") -> str:
    return ECHO_CONFIG.format(name=name, policy=policy)


def echo_py(tag: int) -> str:
    return ECHO_PY.format(tag=tag)


def ensemble_config(name: str, step: str) -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        platform: "ensemble"
        max_batch_size: 0
        input [ {{ name: "X", data_type: TYPE_INT32, dims: [ 1 ] }} ]
        output [ {{ name: "TAG", data_type: TYPE_INT32, dims: [ 1 ] }} ]
        ensemble_scheduling {{ step [ {{
          model_name: "{step}" model_version: -1
          input_map {{ key: "X" value: "X" }}
          output_map {{ key: "TAG" value: "TAG" }}
        }} ] }}
        """)


def add_echo(repo: RepositoryBuilder, name: str, tag: int, versions: tuple[int, ...] = (1,),
             policy: str = "{ latest { num_versions: 1 } }") -> Path:
    return repo.add_model(name, config=echo_config(name, policy), model_py=echo_py(tag),
                          versions=versions)


def echo_config_json(name: str = "") -> str:
    """The echo model's config as Triton's JSON, for load overrides."""
    tensors = [{"name": n, "data_type": "TYPE_INT32", "dims": [1]} for n in ("Y", "TAG",
                                                                               "VERSION")]
    document = {"backend": "python", "max_batch_size": 0,
                "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [1]}],
                "output": tensors}
    if name:
        document["name"] = name
    return json.dumps(document)


def shared_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Body of a ``state`` fixture: the ``control_state`` module, fresh for each test."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "control_state.py").write_text(STATE_PY)
    monkeypatch.syspath_prepend(str(shared))
    monkeypatch.delitem(sys.modules, "control_state", raising=False)
    import control_state

    yield control_state
    control_state.gate.set()
    sys.modules.pop("control_state", None)
