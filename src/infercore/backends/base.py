"""The backend authors' API, after TRITONBACKEND's lifecycle, and the backend registry.

    Backend.create_model(ModelContext)         -> BackendModel     once per model version
    BackendModel.create_instance(InstanceInfo) -> BackendInstance  once per instance
    BackendInstance.execute(Payload)                               on the instance's thread
    BackendInstance.finalize(), BackendModel.finalize()            at unload, in that order

A backend answers each request of a payload through ``request.sender`` (from any thread,
during or after ``execute``), so batching and decoupled models share one path. Errors a
backend raises from ``execute`` fail that payload's unanswered requests only.

Backends are found by name in a registry of import strings and imported on first use, so
``import infercore`` never imports onnxruntime or torch.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError, TritonError

if TYPE_CHECKING:
    from ..payload import Payload
    from ..request import InferRequest
    from ..response import ResponseStream

__all__ = [
    "Backend",
    "BackendInstance",
    "BackendModel",
    "InstanceInfo",
    "ModelContext",
    "get_backend",
    "register_backend",
]


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What a backend is told about the model version it loads."""

    name: str
    version: int
    config: model_config_pb2.ModelConfig  # normalised; treat as read-only
    model_dir: Path  # <repository>/<name>
    version_dir: Path  # <repository>/<name>/<version>
    repository: Path
    backend_config: Mapping[str, str] = field(default_factory=dict)
    # Runs a request on any loaded model, in-process (BLS). Set by the server.
    infer: Callable[[InferRequest], ResponseStream] | None = None

    @property
    def decoupled(self) -> bool:
        return bool(self.config.model_transaction_policy.decoupled)


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """One model instance, as Triton describes it to a backend."""

    name: str  # "<group name>_<index in group>", e.g. "add_sub_0"
    group_name: str
    index: int  # index within its group
    kind: str  # "KIND_CPU", "KIND_GPU", "KIND_MODEL"
    device_id: int
    passive: bool = False
    profiles: tuple[str, ...] = ()
    secondary_devices: tuple[tuple[str, int], ...] = ()
    host_policy: str = ""

    @property
    def kind_name(self) -> str:
        """The kind as Triton's Python backend names it in ``args``: "CPU", "GPU", "MODEL"."""
        return self.kind.removeprefix("KIND_")


@runtime_checkable
class BackendInstance(Protocol):
    def execute(self, payload: Payload) -> None: ...

    def finalize(self) -> None: ...


@runtime_checkable
class BackendModel(Protocol):
    def create_instance(self, info: InstanceInfo) -> BackendInstance: ...

    def finalize(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A backend: a factory of models, plus what the server asks before loading one."""

    name: str
    supports_batching: bool

    def auto_complete_config(
        self, config: model_config_pb2.ModelConfig, model_dir: Path, version_dir: Path
    ) -> None:
        """Fill what the backend can tell about the model into ``config`` (in place)."""
        ...

    def create_model(self, context: ModelContext) -> BackendModel: ...


# name -> "module:attribute" of a Backend class or factory, imported on first use
_REGISTRY: dict[str, str] = {
    "python": "infercore.backends.python.backend:PythonBackend",
}
_LOADED: dict[str, Backend] = {}
_LOCK = threading.Lock()


def register_backend(name: str, target: str | Backend) -> None:
    """Make a backend available under ``name``: an import string or a Backend object."""
    with _LOCK:
        if isinstance(target, str):
            _REGISTRY[name] = target
            _LOADED.pop(name, None)
        else:
            _LOADED[name] = target


def get_backend(name: str) -> Backend:
    """The backend registered under ``name``, imported and created on first use."""
    with _LOCK:
        backend = _LOADED.get(name)
        if backend is not None:
            return backend
        target = _REGISTRY.get(name)
        if target is None:
            raise InvalidArgumentError(
                f"unable to find backend library for backend '{name}', try specifying "
                "runtime on the model configuration."
            )
        module_name, _, attribute = target.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute)
            backend = factory()
        except TritonError:
            raise
        except Exception as exc:  # an optional dependency missing, or a broken plugin
            raise InvalidArgumentError(f"unable to load backend '{name}': {exc}") from exc
        _LOADED[name] = backend
        return backend
