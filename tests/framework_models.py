"""Small ONNX and TorchScript models built at test time, and their config.pbtxt texts.

ONNX graphs come from the ``onnx`` helper API; TorchScript modules are scripted or traced
here (TorchScript needs the source file). Each builder writes one model file and returns
its path. onnx and torch are imported inside the builders, so a module that only needs
one framework skips cleanly without the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# Opset and IR version every onnxruntime since 1.17 reads.
ONNX_OPSET = 17
ONNX_IR_VERSION = 8


def _save_onnx(graph: Any, path: Path, opset: int = ONNX_OPSET) -> Path:
    from onnx import helper, save

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ONNX_IR_VERSION
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))
    return path


def onnx_add_sub(path: Path, *, batch: bool = True, width: int = 4) -> Path:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [N, width] (or [width])."""
    from onnx import TensorProto, helper

    shape: list[Any] = ["N", width] if batch else [width]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
              for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
               for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
             helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    return _save_onnx(helper.make_graph(nodes, "add_sub", inputs, outputs), path)


def mlp_weights() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return (rng.standard_normal((8, 16), dtype=np.float32),
            rng.standard_normal(16, dtype=np.float32),
            rng.standard_normal((16, 4), dtype=np.float32),
            rng.standard_normal(4, dtype=np.float32))


def onnx_mlp(path: Path) -> Path:
    """y = relu(x @ W1 + b1) @ W2 + b2; x FP32 [batch, 8] (symbolic batch), y [batch, 4]."""
    from onnx import TensorProto, helper, numpy_helper

    w1, b1, w2, b2 = mlp_weights()
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "W1"), (b1, "B1"),
                                                          (w2, "W2"), (b2, "B2"))]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "B1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
        helper.make_node("Add", ["h3", "B2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=inits,
    )
    return _save_onnx(graph, path)


def onnx_strings(path: Path) -> Path:
    """ECHO = TEXT; JOINED = TEXT + SUFFIX (StringConcat); strings [N, 1]."""
    from onnx import TensorProto, helper

    shape: list[Any] = ["N", 1]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["TEXT"], ["ECHO"]),
         helper.make_node("StringConcat", ["TEXT", "SUFFIX"], ["JOINED"])],
        "strings",
        [helper.make_tensor_value_info("TEXT", TensorProto.STRING, shape),
         helper.make_tensor_value_info("SUFFIX", TensorProto.STRING, shape)],
        [helper.make_tensor_value_info("ECHO", TensorProto.STRING, shape),
         helper.make_tensor_value_info("JOINED", TensorProto.STRING, shape)],
    )
    return _save_onnx(graph, path, opset=20)


def onnx_optional_bias(path: Path) -> Path:
    """y = x + bias; bias is an initializer a request may override (default 10.0)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        "optional_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        initializer=[numpy_helper.from_array(np.full(2, 10.0, np.float32), "bias")],
    )
    return _save_onnx(graph, path)


def onnx_scalar(path: Path) -> Path:
    """y = s * 2 on a rank-0 FP32 tensor."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["s", "two"], ["y"])],
        "scalar",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    return _save_onnx(graph, path)


ONNX_ADD_SUB_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
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


# -- TorchScript ------------------------------------------------------------------------------
def _torch_modules() -> dict[str, Any]:
    """The module classes, defined on first use so that importing this file needs no torch."""
    import torch
    from torch import Tensor

    class AddSub(torch.nn.Module):
        def forward(self, INPUT__0: Tensor, INPUT__1: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803
            return INPUT__0 + INPUT__1, INPUT__0 - INPUT__1

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w1, b1, w2, b2 = mlp_weights()
            self.first = torch.nn.Linear(8, 16)
            self.second = torch.nn.Linear(16, 4)
            with torch.no_grad():
                self.first.weight.copy_(torch.from_numpy(w1.T.copy()))
                self.first.bias.copy_(torch.from_numpy(b1))
                self.second.weight.copy_(torch.from_numpy(w2.T.copy()))
                self.second.bias.copy_(torch.from_numpy(b2))

        def forward(self, x: Tensor) -> Tensor:
            return self.second(torch.relu(self.first(x)))

    class Named(torch.nn.Module):
        def forward(self, scale: Tensor, values: Tensor) -> dict[str, Tensor]:
            return {"scaled": values * scale, "total": (values * scale).sum(dim=1, keepdim=True)}

    class Strings(torch.nn.Module):
        def forward(self, words: list[str]) -> list[str]:
            return [word.upper() for word in words]

    class Optional_(torch.nn.Module):
        def forward(self, x: Tensor, offset: Tensor | None = None) -> Tensor:
            if offset is None:
                return x + 100.0
            return x + offset

    class Defaulted(torch.nn.Module):
        def forward(self, x: Tensor, factor: int = 3) -> Tensor:
            return x * factor

    return {"add_sub": AddSub, "mlp": Mlp, "named": Named, "strings": Strings,
            "optional": Optional_, "defaulted": Defaulted}


def torch_model(kind: str, path: Path, *, trace: bool = False) -> Path:
    """Script (or trace, for the MLP) one of the modules above into ``path``."""
    import torch

    module = _torch_modules()[kind]().eval()
    if trace:
        compiled = torch.jit.trace(module, torch.zeros(2, 8))
    else:
        compiled = torch.jit.script(module)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(compiled, str(path))
    return path


TORCH_ADD_SUB_CONFIG = """
name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "INPUT__0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT__1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [
  { name: "OUTPUT__0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "OUTPUT__1", data_type: TYPE_FP32, dims: [ 4 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""


# -- driving a backend as the engine does ------------------------------------------------------
class Harness:
    """Loads models of one backend from ``root`` (config -> auto-complete -> normalise ->
    validate -> create_model -> create_instance) and runs payloads on an instance."""

    def __init__(self, root: Path, backend: Any) -> None:
        self.repo = root / "models"
        self.backend = backend
        self._loaded: list[tuple[Any, list[Any]]] = []

    def version_dir(self, name: str, version: int = 1) -> Path:
        path = self.repo / name / str(version)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def prepare(self, name: str, config: str | None = None) -> Any:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2

        from infercore.config import normalize_model_config, validate_model_config

        proto = model_config_pb2.ModelConfig(name=name)
        if config is not None:
            text_format.Merge(config.replace("{name}", name), proto)
        if not proto.backend and not proto.platform:
            proto.backend = self.backend.name  # what the repository finds from the file
        self.backend.auto_complete_config(proto, self.repo / name, self.version_dir(name))
        normalize_model_config(proto, model_name=name)
        validate_model_config(proto, model_name=name,
                              backend_can_batch=self.backend.supports_batching)
        return proto

    def context(self, name: str, config: Any, **kw: Any) -> Any:
        from infercore.backends.base import ModelContext

        return ModelContext(name=name, version=1, config=config, model_dir=self.repo / name,
                            version_dir=self.version_dir(name), repository=self.repo, **kw)

    def load(self, name: str, config: str | None = None, *, kind: str = "KIND_CPU",
             device_id: int = 0, instances: int = 1, **kw: Any) -> tuple[Any, list[Any]]:
        from infercore.backends.base import InstanceInfo

        model = self.backend.create_model(self.context(name, self.prepare(name, config), **kw))
        created: list[Any] = []
        self._loaded.append((model, created))
        for index in range(instances):
            created.append(model.create_instance(
                InstanceInfo(f"{name}_{index}", name, index, kind, device_id)))
        return model, created

    def close(self) -> None:
        for model, instances in reversed(self._loaded):
            for instance in instances:
                instance.finalize()
            model.finalize()


def make_request(config: Any, inputs: dict[str, Any], **kw: Any) -> tuple[Any, Any]:
    """A validated request (batch size and reshapes set, as the engine does) and its stream."""
    from infercore.request import InferRequest
    from infercore.response import ResponseSender, ResponseStream
    from infercore.tensor import Tensor
    from infercore.validation import RequestValidator

    tensors = {name: value if isinstance(value, Tensor) else Tensor.from_object(value)
               for name, value in inputs.items()}
    request = InferRequest(config.name, tensors, **kw)
    RequestValidator(config).validate(request)
    stream = ResponseStream(request, raise_on_error=False)
    request.sender = ResponseSender(request, stream, config.name, 1)
    return request, stream


def run_payload(instance: Any, *requests: Any) -> Any:
    """Execute one payload of ``requests`` on ``instance``; return the payload."""
    import itertools

    from infercore.payload import Payload

    ticks = itertools.count(1)
    payload = Payload(list(requests), lambda: next(ticks))
    instance.execute(payload)
    return payload


def outputs_of(stream: Any) -> dict[str, np.ndarray]:
    """The outputs of a finished stream's only response (raises its error, if any)."""
    response = stream.result(timeout=10)
    assert response is not None, "no response"
    if response.error is not None:
        raise response.error
    return {name: tensor.to_numpy() for name, tensor in response.outputs.items()}
