"""An example infercore backend, "scale": every output is its input times a factor.

It shows the whole plugin interface (docs/backends.md):

- ``ScaleBackend(settings)``: the factory infercore calls, with the backend's settings from
  ``--backend-config=scale,<key>=<value>``; here ``default-factor``.
- ``auto_complete_config``: fills a missing input/output pair, so a model folder without
  config.pbtxt loads too.
- ``create_model`` -> ``ScaleModel`` -> ``create_instance`` -> ``ScaleInstance.execute``.
- Responses go out through each request's sender; errors are infercore's typed errors.

Installed (``pip install examples/custom_backend``) it registers through the
``infercore.backends`` entry point; dropped into a ``--backend-directory`` it is found by
its ``create_backend`` alias.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2

from infercore import DataType, InvalidArgumentError, Tensor
from infercore.backends.base import InstanceInfo, ModelContext
from infercore.payload import Payload

__all__ = ["ScaleBackend", "create_backend"]


class ScaleBackend:
    name = "scale"  # must be the name the backend is registered under
    supports_batching = True  # requests may arrive batched (max_batch_size > 0)

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self.default_factor = float((settings or {}).get("default-factor", "1.0"))

    def auto_complete_config(
        self, config: model_config_pb2.ModelConfig, model_dir: Path, version_dir: Path
    ) -> None:
        if not config.input:
            config.input.add(name="INPUT", data_type=model_config_pb2.TYPE_FP32, dims=[-1])
        if not config.output:
            config.output.add(name="OUTPUT", data_type=model_config_pb2.TYPE_FP32, dims=[-1])
        if config.max_batch_size == 0:
            config.max_batch_size = 8

    def create_model(self, context: ModelContext) -> ScaleModel:
        return ScaleModel(context, self.default_factor)


class ScaleModel:
    def __init__(self, context: ModelContext, default_factor: float) -> None:
        # A model's own parameter first, then the settings the server hands each model
        # (--backend-config=scale,default-factor=N), then the factory's settings.
        parameter = context.config.parameters.get("factor")
        text = (parameter.string_value if parameter is not None
                else context.backend_config.get("default-factor", str(default_factor)))
        try:
            self.factor = np.float32(text)
        except ValueError:
            # Raised at load: the model is UNAVAILABLE with this reason, others keep serving.
            raise InvalidArgumentError(
                f"model '{context.name}': parameter 'factor' must be a number, got '{text}'"
            ) from None
        self.input_name = context.config.input[0].name
        self.output_name = context.config.output[0].name

    def create_instance(self, info: InstanceInfo) -> ScaleInstance:
        if info.kind == "KIND_GPU":
            raise InvalidArgumentError("the scale backend runs on the CPU only")
        return ScaleInstance(self)

    def finalize(self) -> None:
        pass


class ScaleInstance:
    def __init__(self, model: ScaleModel) -> None:
        self.model = model

    def execute(self, payload: Payload) -> None:
        # Runs on the instance's thread (or a caller's, inline), one payload at a time.
        model = self.model
        inputs = [request.inputs[model.input_name].to_numpy() for request in payload.requests]
        payload.mark_compute_input_end()
        results = [array * model.factor for array in inputs]
        payload.mark_compute_output_start()
        for request, result in zip(payload.requests, results, strict=True):
            request.sender.send({model.output_name: Tensor(DataType.FP32, result)})

    def finalize(self) -> None:
        pass


# The name a --backend-directory module is looked up by.
create_backend = ScaleBackend
