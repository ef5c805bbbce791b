"""The models the conformance suites serve: Triton Python-backend models, written as a
Triton user writes them, so real Triton's Python backend and infercore run the same files.

Each function returns a ``Model``; a suite lists the models it needs (renamed where a
case wants two of one kind). Keep models small: a case checks answers, not compute.
"""

from __future__ import annotations

from .case import Model

__all__ = ["add_sub", "broken", "decoupled_repeat", "identity", "python_model"]


def python_model(name: str, config: str, model_py: str, versions: tuple[int, ...] = (1,)
                 ) -> Model:
    files = {f"{v}/model.py": model_py for v in versions}
    return Model(name, config, files)


# infercore runs a model with this parameter in a worker process; Triton ignores it
PROCESS_MODE = ('parameters: { key: "infercore.execution_mode" '
                'value: { string_value: "process" } }')


def string_probe(name: str, input_name: str, model_py: str, extra: str = "") -> Model:
    """A Python model of one STRING input ``input_name`` and one STRING output SEEN (what
    it saw); ``extra`` is added to its config (``PROCESS_MODE``, say)."""
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "{input_name}" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
    return python_model(name, config, model_py)


ADD_SUB_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b).astype(a.dtype)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(a.dtype))]))
        return responses
'''


def add_sub(name: str = "simple", datatype: str = "TYPE_INT32", dims: str = "[ 16 ]",
            max_batch_size: int = 8, versions: tuple[int, ...] = (1,), extra: str = "") -> Model:
    """Triton's ``simple`` model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [
  {{ name: "INPUT0" data_type: {datatype} dims: {dims} }},
  {{ name: "INPUT1" data_type: {datatype} dims: {dims} }}
]
output [
  {{ name: "OUTPUT0" data_type: {datatype} dims: {dims} }},
  {{ name: "OUTPUT1" data_type: {datatype} dims: {dims} }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
    return python_model(name, config, ADD_SUB_PY, versions)


# A JSON infer body for ``add_sub()`` with its defaults (INT32, [1, 16]); read-only.
ADD_SUB_JSON = {"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}


IDENTITY_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        config = json.loads(args["model_config"])
        self.pairs = [(i["name"], o["name"]) for i, o in zip(config["input"], config["output"])]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for input_name, output_name in self.pairs:
                tensor = pb_utils.get_input_tensor_by_name(request, input_name)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor(output_name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
'''


def identity(name: str = "identity_fp32", datatype: str = "TYPE_FP32", dims: str = "[ -1 ]",
             max_batch_size: int = 0, inputs: int = 1, optional: bool = False,
             extra: str = "") -> Model:
    """INPUTi -> OUTPUTi unchanged, for i < ``inputs``."""
    opt = " optional: true" if optional else ""
    ins = ",\n".join(f'  {{ name: "INPUT{i}" data_type: {datatype} dims: {dims}{opt} }}'
                     for i in range(inputs))
    outs = ",\n".join(f'  {{ name: "OUTPUT{i}" data_type: {datatype} dims: {dims} }}'
                      for i in range(inputs))
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [
{ins}
]
output [
{outs}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
    return python_model(name, config, IDENTITY_PY)


REPEAT_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for item in value.reshape(-1):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([item], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


def decoupled_repeat(name: str = "repeat_int32") -> Model:
    """Decoupled: one response per element of IN, then an empty final one."""
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, REPEAT_PY)


BROKEN_PY = '''
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this model never loads")

    def execute(self, requests):
        return []
'''


def broken(name: str = "broken") -> Model:
    """A model whose initialize raises: it fails to load, with the model's own reason."""
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
'''
    return python_model(name, config, BROKEN_PY)
