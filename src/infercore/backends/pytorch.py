"""The "pytorch" backend (platform "pytorch_libtorch"): TorchScript models.

    PyTorchBackend.auto_complete_config   nothing: a TorchScript file carries no tensor
                                          datatypes or shapes (as Triton, the config must
                                          list inputs and outputs)
    PyTorchBackend.create_model           parameters parsed and process-wide settings applied
    PyTorchModel.create_instance          torch.jit.load on the instance's device; the
                                          config's names matched to forward() (pytorch_call)
    PyTorchInstance.execute(payload)      inputs concatenated along dim 0, one forward() under
                                          torch.inference_mode(), outputs split per request

Threads: loading threads run ``create_model``/``create_instance``; ``execute`` runs on the
thread holding the instance's reservation, one payload at a time; ``finalize`` on the
unloading thread. torch's thread-pool sizes and JIT switches are process-wide (as in
Triton): ``_SETTINGS_LOCK`` serialises changing them.

torch is imported by this module only, which the registry imports when a model first
needs it. torch's exceptions become infercore errors here, with Triton's wording
("PyTorch execute failure: ...").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch
from tritonclient.grpc import model_config_pb2

from ..errors import InternalError, InvalidArgumentError, TritonError, UnavailableError
from ..payload import Payload
from ..request import InferRequest
from ..tensor import DataType
from .base import InstanceInfo, ModelContext
from .batching import (
    OutputShapes,
    check_supported,
    concat_inputs,
    fail_requests,
    request_outputs,
    respond,
    take_live,
)
from .pytorch_call import CallPlan, plan_call

__all__ = ["PyTorchBackend", "PyTorchInstance", "PyTorchModel", "instance_device"]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_FILENAME = "model.pt"
_BF16 = np.dtype(ml_dtypes.bfloat16)
_SETTINGS_LOCK = threading.Lock()

# torch 2.x deprecates TorchScript for new code; serving existing TorchScript files is this
# backend's purpose (as Triton's), so loading one must not warn on every model load. A
# process-wide filter, set once here: warnings.catch_warnings is not safe across threads.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated",
                        category=DeprecationWarning)
_INTEROP_SET: list[int] = []  # the inter-op pool size this process chose, once


class PyTorchBackend:
    """TorchScript models; settings from ``--backend-config=pytorch,<key>=<value>``."""

    name = "pytorch"
    supports_batching = True

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self._settings = dict(settings or {})

    @property
    def gpu_capable(self) -> bool:
        """Whether this torch is a CUDA build that sees a GPU."""
        return bool(torch.cuda.is_available())

    def auto_complete_config(
        self, config: model_config_pb2.ModelConfig, model_dir: Path, version_dir: Path
    ) -> None:
        # TorchScript keeps argument names but no datatypes or shapes, so there is nothing
        # reliable to fill; create_model explains what the config lacks.
        return None

    def create_model(self, context: ModelContext) -> PyTorchModel:
        return PyTorchModel(context)


class _Options:
    """The model's ``parameters``, parsed once (Triton's names, string values)."""

    def __init__(self, config: model_config_pb2.ModelConfig) -> None:
        model = config.name
        params = {key: value.string_value for key, value in config.parameters.items()}

        def flag(key: str, default: bool | None) -> bool | None:
            return _parse_bool(params[key], key, model) if key in params else default

        def count(key: str) -> int:
            text = params.get(key, "0")
            try:
                return int(text.strip())
            except ValueError:
                raise InvalidArgumentError(
                    f"failed to parse parameter '{key}' of model '{model}': '{text}' is not "
                    "an integer"
                ) from None

        self.optimized = not flag("DISABLE_OPTIMIZED_EXECUTION", False)
        self.inference_mode = bool(flag("INFERENCE_MODE", True))
        self.jit_executor = flag("ENABLE_JIT_EXECUTOR", None)
        self.jit_profiling = flag("ENABLE_JIT_PROFILING", None)
        self.tensor_fuser = flag("ENABLE_TENSOR_FUSER", None)
        self.disable_cudnn = bool(flag("DISABLE_CUDNN", False))
        self.weight_sharing = bool(flag("ENABLE_WEIGHT_SHARING", False))
        self.cache_cleaning = bool(flag("ENABLE_CACHE_CLEANING", False))
        flag("ENABLE_NVFUSER", False)  # parsed for its errors; nvFuser left torch long ago
        self.intra_op_threads = count("INTRA_OP_THREAD_COUNT")
        self.inter_op_threads = count("INTER_OP_THREAD_COUNT")


def _parse_bool(value: str, key: str, model: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise InvalidArgumentError(
        f"failed to parse parameter '{key}' of model '{model}': '{value}' is not a boolean"
    )


def _apply_thread_counts(options: _Options, model: str) -> None:
    """torch's pool sizes are per process: intra-op follows the latest model that sets it,
    inter-op can be set once (torch refuses later changes), so the first value wins."""
    with _SETTINGS_LOCK:
        if options.intra_op_threads > 0:
            torch.set_num_threads(options.intra_op_threads)
        wanted = options.inter_op_threads
        if wanted > 0:
            if not _INTEROP_SET:
                try:
                    torch.set_num_interop_threads(wanted)
                    _INTEROP_SET.append(wanted)
                except RuntimeError:
                    _INTEROP_SET.append(torch.get_num_interop_threads())
            if _INTEROP_SET[0] != wanted:
                logger.warning(
                    "model '%s': INTER_OP_THREAD_COUNT=%d ignored, torch's inter-op pool "
                    "already has %d threads (it is sized once per process)",
                    model, wanted, _INTEROP_SET[0],
                )
        if options.disable_cudnn:
            torch.backends.cudnn.enabled = False


class PyTorchModel:
    """One loaded version: parameters, the model file, the call plan and shared modules."""

    def __init__(self, context: ModelContext) -> None:
        config = context.config
        self.context = context
        self.name = context.name
        if not config.input:
            raise InvalidArgumentError(
                f"model configuration must contain at least one input, none were specified "
                f"(model '{self.name}': TorchScript files carry no tensor datatypes or shapes, "
                "so the pytorch backend cannot auto-complete them; list the inputs in "
                "config.pbtxt)"
            )
        if not config.output:
            raise InvalidArgumentError(
                f"model configuration must contain at least one output, none were specified "
                f"(model '{self.name}')"
            )
        check_supported(config, "pytorch")
        self.options = _Options(config)
        self.path = Path(context.version_dir) / (
            config.default_model_filename or DEFAULT_MODEL_FILENAME)
        if not self.path.is_file():
            raise UnavailableError(f"unable to find '{self.path}' for model '{self.name}'")
        _apply_thread_counts(self.options, self.name)
        self.batching = config.max_batch_size > 0
        self.output_names = tuple(output.name for output in config.output)
        self.output_types = {
            output.name: DataType.from_config(model_config_pb2.DataType.Name(output.data_type))
            for output in config.output
        }
        self.output_shapes = OutputShapes(config)
        self._plan: CallPlan | None = None
        self._shared: dict[str, Any] = {}  # device -> module, with ENABLE_WEIGHT_SHARING
        self._lock = threading.Lock()  # guards _plan and _shared (instances load in turn)

    def create_instance(self, info: InstanceInfo) -> PyTorchInstance:
        """Load the module for this instance's device and match the config to forward().

        Raises:
            UnavailableError: KIND_GPU without a CUDA device torch can use.
            InternalError: torch could not load the file as TorchScript.
            InvalidArgumentError: the config's inputs/outputs do not fit forward().
        """
        device = _device(info, self.name)
        key = str(device)
        with self._lock:
            module = self._shared.get(key) if self.options.weight_sharing else None
            if module is None:
                module = self._load(device)
                if self.options.weight_sharing:
                    self._shared[key] = module
            if self._plan is None:
                self._plan = plan_call(self.context.config, module)
            plan = self._plan
        return PyTorchInstance(self, info, module, plan, device)

    def _load(self, device: torch.device | None) -> Any:
        try:
            module = torch.jit.load(str(self.path), map_location=device)
        except Exception as exc:  # not TorchScript, truncated, saved by a newer torch ...
            raise InternalError(
                f"failed to load model '{self.name}': torch could not load '{self.path}' as "
                f"TorchScript (the pytorch backend serves torch.jit.script/trace models saved "
                f"with torch.jit.save): {exc}"
            ) from exc
        module.eval()
        return module

    def finalize(self) -> None:
        self._shared.clear()


def instance_device(info: InstanceInfo) -> str | None:
    """Where an instance's module and inputs go, as torch names the device: "cuda:<id>"
    for a KIND_GPU instance on GPU <id>, "cpu", or None for KIND_MODEL (wherever the
    model keeps its own parameters: load as saved, leave inputs on the CPU)."""
    if info.kind == "KIND_GPU":
        return f"cuda:{info.device_id}"
    if info.kind == "KIND_MODEL":
        return None
    return "cpu"


def _device(info: InstanceInfo, model: str) -> torch.device | None:
    """The instance's ``instance_device``, once torch is known to have it."""
    name = instance_device(info)
    if name is None:
        return None
    if info.kind == "KIND_GPU" and (not torch.cuda.is_available()
                                    or info.device_id >= torch.cuda.device_count()):
        build = ("a CPU-only build" if torch.version.cuda is None
                 else f"built for CUDA {torch.version.cuda}")
        raise UnavailableError(
            f"instance '{info.name}' of model '{model}' has kind KIND_GPU (device "
            f"{info.device_id}), but torch {torch.__version__} ({build}) sees no such "
            "CUDA device; use KIND_CPU, or install a CUDA build of torch on a GPU host"
        )
    return torch.device(name)


class PyTorchInstance:
    """One TorchScript module, run by whichever thread holds the instance's reservation."""

    def __init__(self, model: PyTorchModel, info: InstanceInfo, module: Any, plan: CallPlan,
                 device: torch.device | None) -> None:
        self._module: Any = module
        self._plan = plan
        self._device = device
        self._on_gpu = device is not None and device.type == "cuda"
        self._model_name = model.name
        self._options = model.options
        self._batching = model.batching
        self._output_names = model.output_names
        self._output_types = model.output_types
        self._output_shapes = model.output_shapes
        self._plain = (self._options.optimized and self._options.jit_executor is None
                       and self._options.jit_profiling is None
                       and self._options.tensor_fuser is None)

    def execute(self, payload: Payload) -> None:
        requests = take_live(payload.requests)
        if not requests:
            return
        if self._batching or len(requests) == 1:
            self._run(payload, requests)
        else:  # a model without a batch dimension runs its requests one by one
            for request in requests:
                self._run(payload, [request])

    def _run(self, payload: Payload, requests: list[InferRequest]) -> None:
        module = self._module
        try:
            if module is None:
                raise UnavailableError(f"model '{self._model_name}' is unloaded")
            feeds = concat_inputs(requests, self._model_name)
            args, kwargs = self._plan.arguments(
                {name: self._to_torch(name, array) for name, array in feeds.items()})
            names = request_outputs(requests, self._output_names) or self._output_names
            payload.mark_compute_input_end()
            with self._execution_mode():
                try:
                    result = module(*args, **kwargs)
                except Exception as exc:
                    raise InternalError(f"PyTorch execute failure: {exc}") from exc
            payload.mark_compute_output_start()
            arrays = [(name, self._output_types[name], self._output(name, value))
                      for name, value in self._plan.outputs(result, names)]
            respond(requests, arrays, self._model_name)
        except TritonError as error:
            fail_requests(requests, error)
        finally:
            if self._on_gpu and self._options.cache_cleaning:
                torch.cuda.empty_cache()

    @contextlib.contextmanager
    def _execution_mode(self) -> Iterator[None]:
        options = self._options
        grad = torch.inference_mode() if options.inference_mode else torch.no_grad()
        if self._plain:
            with grad:
                yield
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(grad)
            if not options.optimized:
                stack.enter_context(torch.jit.optimized_execution(False))
            # Process-wide JIT switches, set per execution as Triton does for each model.
            if options.jit_executor is not None:
                torch._C._jit_set_profiling_executor(options.jit_executor)
            if options.jit_profiling is not None:
                torch._C._jit_set_profiling_mode(options.jit_profiling)
            if options.tensor_fuser is not None:
                torch._C._jit_set_texpr_fuser_enabled(options.tensor_fuser)
            yield

    def _to_torch(self, name: str, array: np.ndarray) -> Any:
        if name in self._plan.string_inputs:
            return _as_strings(array, name, self._model_name)
        if array.dtype == _BF16:
            tensor = torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(
                torch.bfloat16)
        else:
            if not array.flags.writeable:
                # torch tensors are writable: a model writing into its input must not reach
                # memory infercore does not own (a frontend's receive buffer).
                array = array.copy()
            try:
                tensor = torch.from_numpy(array)  # zero-copy
            except ValueError:  # negative strides
                tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self._device is not None and self._device.type != "cpu":
            tensor = tensor.to(self._device)
        return tensor

    def _output(self, name: str, value: Any) -> np.ndarray:
        want = self._output_types[name]
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            if tensor.device.type != "cpu":
                tensor = tensor.cpu()
            if tensor.dtype == torch.bfloat16:
                array = tensor.contiguous().view(torch.int16).numpy().view(_BF16)
            else:
                array = tensor.resolve_conj().resolve_neg().numpy()
            got = DataType.from_numpy(array.dtype)
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            array = _as_bytes(value, self._batching)
            got = DataType.BYTES
        else:
            raise InternalError(
                f"output '{name}' of model '{self._model_name}' is a {type(value).__name__}, "
                "expected a tensor (or a list of str for a TYPE_STRING output)"
            )
        if got is not want:
            raise InternalError(
                f"unexpected datatype {got.config_name} for inference output '{name}' of model "
                f"'{self._model_name}', expecting {want.config_name}"
            )
        return self._output_shapes.apply(name, array)

    def finalize(self) -> None:
        self._module = None


def _as_strings(array: np.ndarray, name: str, model: str) -> list[str]:
    """A BYTES input as the List[str] TorchScript takes (flattened: strings are 1-D there)."""
    try:
        return [item.decode("utf-8") if isinstance(item, bytes) else str(item)
                for item in array.reshape(-1)]
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"input '{name}' of model '{model}' holds bytes that are not UTF-8 text, which "
            "TorchScript's str cannot hold"
        ) from None


def _as_bytes(items: list[str], batching: bool) -> np.ndarray:
    out = np.empty(len(items), dtype=np.object_)
    out[:] = [item.encode("utf-8") for item in items]
    # Strings come back flat; a batching model's response keeps one row per batch item.
    return out.reshape(len(items), 1) if batching else out
