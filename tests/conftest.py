"""Shared fixtures: repositories of real Triton Python models, built per test."""

from __future__ import annotations

import pytest

from infercore.testing import RepositoryBuilder

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

ADD_SUB_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b),
                pb_utils.Tensor("OUTPUT1", a - b),
            ]))
        return responses
"""


@pytest.fixture
def repo(tmp_path) -> RepositoryBuilder:
    return RepositoryBuilder(tmp_path / "models")


@pytest.fixture
def add_sub_repo(repo: RepositoryBuilder) -> RepositoryBuilder:
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    return repo


@pytest.fixture
def add_sub_source() -> tuple[str, str]:
    """(config.pbtxt, model.py) of the add_sub test model."""
    return ADD_SUB_CONFIG, ADD_SUB_PY
