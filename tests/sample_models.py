"""Model sources the tests share: Triton Python-backend models written as users write them."""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

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

# add_sub that first sets ``gate.entered`` and waits (up to 60 s) for ``gate.release``;
# the gate is a module the test installs (install_gate) under the name given.
_GATED_ADD_SUB_PY = """
import GATE_MODULE as gate
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        gate.entered.set()
        gate.release.wait(60)
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b),
                                                         pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


def gated_add_sub_py(gate_module: str) -> str:
    """The gated add_sub model's source, importing its gate as ``gate_module``."""
    return _GATED_ADD_SUB_PY.replace("GATE_MODULE", gate_module)


# "gate": Y = X (FP32 [1]) once the gate opens; a negative X is answered with an error.
_GATED_IDENTITY_CONFIG = """
name: "gate"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

_GATED_IDENTITY_PY = """
import GATE_MODULE as gate
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        gate.entered.set()
        gate.release.wait(60)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0] < 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative")))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""


def gated_identity_model(gate_module: str) -> tuple[str, str]:
    """The "gate" model's (config, model.py), importing its gate as ``gate_module``."""
    return _GATED_IDENTITY_CONFIG, _GATED_IDENTITY_PY.replace("GATE_MODULE", gate_module)


def install_gate(monkeypatch: Any, name: str) -> types.ModuleType:
    """A gate module (``entered``, ``release`` events) importable by in-thread models as
    ``name`` until the test ends; the caller releases it at teardown."""
    module = types.ModuleType(name)
    module.entered = threading.Event()  # type: ignore[attr-defined]
    module.release = threading.Event()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    return module


# "slow": runs for SECONDS or until cancelled, then answers CANCELLED (counted as a
# failure). Every execution takes a millisecond at least: the engine runs a request of a
# model whose recent executions were shorter than 50 µs on the event loop awaiting it,
# which a long one would then stall.
_SLOW_CONFIG = """
name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "SECONDS", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT_NAME", data_type: TYPE_FP32, dims: [ 1 ] } ]
instance_group [ { count: INSTANCES, kind: KIND_CPU } ]
"""

_SLOW_PY = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()
            deadline = time.monotonic() + float(seconds[0])
            time.sleep(0.001)
            while time.monotonic() < deadline and not request.is_cancelled():
                time.sleep(0.002)
            if request.is_cancelled():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "cancelled", pb_utils.TritonError.CANCELLED)))
            else:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT_NAME", seconds)]))
        return responses
"""


def slow_model(output: str = "SLEPT", instances: int = 2) -> tuple[str, str]:
    """The "slow" model's (config, model.py), answering SECONDS back as ``output``."""
    config = _SLOW_CONFIG.replace("OUTPUT_NAME", output).replace("INSTANCES", str(instances))
    return config, _SLOW_PY.replace("OUTPUT_NAME", output)


# Every Triton datatype, as the identity test models name their tensors.
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES")

# Decoupled: COUNT responses 0..COUNT-1, then a bare final flag. A negative COUNT sends
# an error response first, then one normal response, then the final flag.
DECOUPLED_COUNTER_CONFIG = """
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "INDEX", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

DECOUPLED_COUNTER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            if count < 0:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative count")))
                count = 1
            for index in range(count):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("INDEX", np.array([index], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
