"""A Python model that batches, sent a request without inputs: Triton's core lets it
through (every input optional, or none configured) and the Python backend refuses it
before executing, reading the batch size from an input that is not there ("out of bounds
index 0"), counting the request as failed. A model that does not batch runs it.
"""

from __future__ import annotations

from ..case import Case, Grpc, Http, Suite
from ..models import python_model

_ONES_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.ones([1, 1], np.float32))])
                for _ in requests]
'''

_OPTIONAL_IN = 'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]'


def _model(name: str, max_batch_size: int, extra: str = "", dims: str = "[ 1 ]"):
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: {dims} }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
    return python_model(name, config, _ONES_PY)


_MODELS = [
    _model("no_inputs_batching", 4),
    _model("optional_input_batching", 4, _OPTIONAL_IN),
    _model("optional_input_dynamic", 4, f"{_OPTIONAL_IN}\ndynamic_batching {{ }}"),
    _model("no_inputs_not_batching", 0, dims="[ 1, 1 ]"),
]


def _both(model: str) -> list[Http | Grpc]:
    return [Http("POST", f"/v2/models/{model}/infer", json={"inputs": []}),
            Grpc("ModelInfer", {"model_name": model, "id": "zero"}),
            Http("GET", f"/v2/models/{model}/stats")]


_CASES = [Case(model.name, _both(model.name)) for model in _MODELS]

SUITES = [Suite("qa_python_backend_zero_inputs", "python_backend", _MODELS, (), _CASES)]
