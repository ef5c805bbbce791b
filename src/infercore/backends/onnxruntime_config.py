"""ONNX Runtime backend: what the config and the graph decide, worked out at load.

    model_path(...)       the model file; a ``model.onnx`` directory holds ``model.onnx`` and
                          its external data files, as Triton allows
    read_io(session)      the graph's inputs (incl. overridable initializers) and outputs
    auto_complete(...)    Triton's onnxruntime auto-complete: max_batch_size (and
                          dynamic_batching) when every tensor's first dim is dynamic, inputs
                          and outputs when the config lists none
    check_config(...)     a config that contradicts the graph -> InvalidArgumentError
    session_options(...)  SessionOptions / RunOptions from config ``parameters`` and
                          ``optimization.graph.level``, under Triton's names
    providers(...)        execution providers by instance kind and execution accelerators

Pure functions of the config, the graph and onnxruntime's build, called on the loading
thread; the backend (onnxruntime.py) owns sessions and translates onnxruntime's errors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort
from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError, UnavailableError
from ..tensor import DataType

__all__ = [
    "CUDA_PROVIDER",
    "DEFAULT_MAX_BATCH_SIZE",
    "IoPlan",
    "TensorInfo",
    "auto_complete",
    "check_config",
    "model_path",
    "parse_bool",
    "providers",
    "read_io",
    "session_options",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_FILENAME = "model.onnx"
# Triton's --backend-config=onnxruntime,default-max-batch-size default.
DEFAULT_MAX_BATCH_SIZE = 4

_ONNX_TYPES: dict[str, DataType] = {
    "tensor(bool)": DataType.BOOL,
    "tensor(uint8)": DataType.UINT8,
    "tensor(uint16)": DataType.UINT16,
    "tensor(uint32)": DataType.UINT32,
    "tensor(uint64)": DataType.UINT64,
    "tensor(int8)": DataType.INT8,
    "tensor(int16)": DataType.INT16,
    "tensor(int32)": DataType.INT32,
    "tensor(int64)": DataType.INT64,
    "tensor(float16)": DataType.FP16,
    "tensor(float)": DataType.FP32,
    "tensor(double)": DataType.FP64,
    "tensor(bfloat16)": DataType.BF16,
    "tensor(string)": DataType.BYTES,
}

# optimization { graph { level } }: Triton's values; anything else enables everything.
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})

_CPU = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
_TENSORRT = "TensorrtExecutionProvider"
_OPENVINO = "OpenVINOExecutionProvider"

# Triton's TensorRT accelerator parameters whose ORT option has another name.
_TRT_RENAMED = {"max_workspace_size_bytes": "trt_max_workspace_size",
                "int8_calibration_table_name": "trt_int8_calibration_table_name",
                "int8_use_native_calibration_table": "trt_int8_use_native_calibration_table"}
# Legacy CUDA options read from the model's parameters (Triton still honours them).
_CUDNN_SEARCH = {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"}
_ARENA_STRATEGY = {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One graph input or output as onnxruntime reports it."""

    name: str
    onnx_type: str  # "tensor(float)", "seq(tensor(float))", ...
    dims: tuple[int, ...]  # symbolic or unknown dims are -1

    @property
    def data_type(self) -> DataType | None:
        return _ONNX_TYPES.get(self.onnx_type)


@dataclass(frozen=True, slots=True)
class IoPlan:
    """What each execution must adapt between the config's view and the graph's."""

    scalar_inputs: frozenset[str]  # graph rank 0, config dims [1]: fed as a scalar
    scalar_outputs: frozenset[str]  # graph rank 0, config dims [1]: answered as [1]


@dataclass(frozen=True, slots=True)
class GraphIo:
    inputs: tuple[TensorInfo, ...]  # required graph inputs
    initializers: tuple[TensorInfo, ...]  # inputs with a default (optional in the config)
    outputs: tuple[TensorInfo, ...]


def model_path(config: model_config_pb2.ModelConfig, version_dir: Path, whom: str) -> Path:
    """The ONNX file of a version; ``whom`` names the instance or model in the error.

    Raises:
        UnavailableError: the file does not exist (Triton's code and text).
    """
    path = Path(version_dir) / (config.default_model_filename or DEFAULT_MODEL_FILENAME)
    if path.is_dir():
        path = path / DEFAULT_MODEL_FILENAME
    if not path.is_file():
        raise UnavailableError(f"unable to find '{path}' for {whom}")
    return path


def _info(arg: Any) -> TensorInfo:
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or ()))
    return TensorInfo(arg.name, arg.type, dims)


def read_io(session: ort.InferenceSession) -> GraphIo:
    return GraphIo(
        inputs=tuple(_info(a) for a in session.get_inputs()),
        initializers=tuple(_info(a) for a in session.get_overridable_initializers()),
        outputs=tuple(_info(a) for a in session.get_outputs()),
    )


# -- auto-complete ----------------------------------------------------------------------------
def auto_complete(
    config: model_config_pb2.ModelConfig, io: GraphIo, default_max_batch_size: int
) -> None:
    """Fill max_batch_size, dynamic_batching, inputs and outputs from the graph (in place).

    Call it only when the config lacks inputs or outputs (Triton skips auto-complete for a
    config that lists both).
    """
    name = config.name
    tensors = io.inputs + io.outputs
    can_batch = all(info.dims and info.dims[0] == -1 for info in tensors)
    if can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
            logger.warning(
                "autofilled max_batch_size to %d for model '%s' since batching is supported "
                "but no max_batch_size is specified in model configuration. Must specify "
                "max_batch_size to utilize autofill with a larger max batch size",
                config.max_batch_size, name,
            )
        if (config.max_batch_size > 1 and not config.HasField("dynamic_batching")
                and not config.HasField("sequence_batching")):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        raise InvalidArgumentError(
            f"autofill failed for model '{name}': model does not support batching while "
            "non-zero max_batch_size is specified"
        )
    batching = config.max_batch_size > 0
    if not config.input and not config.batch_input:
        _fill(config.input, io.inputs, batching, name, "input")
    if not config.output:
        _fill(config.output, io.outputs, batching, name, "output")


def _fill(ios: Any, infos: Sequence[TensorInfo], batching: bool, model: str, kind: str) -> None:
    for info in infos:
        data_type = info.data_type
        if data_type is None:
            raise InvalidArgumentError(
                f"autofill failed for model '{model}': {kind} '{info.name}' has ONNX type "
                f"'{info.onnx_type}', which has no Triton datatype"
            )
        io = ios.add(name=info.name,
                     data_type=model_config_pb2.DataType.Value(data_type.config_name))
        dims = info.dims[1:] if batching else info.dims
        if dims:
            io.dims.extend(dims)
        else:
            io.dims.append(1)  # Triton has no scalar dims: [1], plus an empty reshape
            if batching:
                io.reshape.SetInParent()


# -- the config against the graph -------------------------------------------------------------
def check_config(config: model_config_pb2.ModelConfig, io: GraphIo) -> IoPlan:
    """Raise InvalidArgumentError where the config contradicts the graph.

    Every config input must be a graph input (or an overridable initializer, which may be
    optional), every graph input without a default must be in the config (or be filled by
    the server: a batch input, a sequence control input or state), every config output must
    be a graph output, with the same datatype and compatible dims.
    """
    model = config.name
    allowed = {info.name: info for info in io.inputs + io.initializers}
    scalar_inputs: set[str] = set()
    for tensor in config.input:
        info = allowed.get(tensor.name)
        if info is None:
            raise InvalidArgumentError(
                f"unable to load model '{model}', unexpected inference input "
                f"'{tensor.name}', allowed inputs are: {', '.join(allowed)}"
            )
        if _check_tensor(config, tensor, info, "input"):
            scalar_inputs.add(tensor.name)
    configured = {tensor.name for tensor in config.input} | _supplied_inputs(config)
    missing = [info.name for info in io.inputs if info.name not in configured]
    if missing:
        raise InvalidArgumentError(
            f"unable to load model '{model}', configuration expects {len(configured)} inputs, "
            f"model provides {len(io.inputs)}: the model needs input(s) "
            f"{', '.join(repr(n) for n in missing)}, which the configuration does not declare"
        )
    outputs = {info.name: info for info in io.outputs}
    scalar_outputs: set[str] = set()
    for tensor in config.output:
        info = outputs.get(tensor.name)
        if info is None:
            raise InvalidArgumentError(
                f"unable to load model '{model}', unexpected inference output "
                f"'{tensor.name}', allowed outputs are: {', '.join(outputs)}"
            )
        if _check_tensor(config, tensor, info, "output"):
            scalar_outputs.add(tensor.name)
    return IoPlan(frozenset(scalar_inputs), frozenset(scalar_outputs))


def _supplied_inputs(config: model_config_pb2.ModelConfig) -> set[str]:
    """Graph inputs the server fills although the config's ``input`` does not list them:
    batch inputs, and a sequence model's control inputs and implicit states (Triton's
    onnxruntime backend counts them among the inputs it expects)."""
    names = {name for batch_input in config.batch_input for name in batch_input.target_name}
    sequence = config.sequence_batching
    names.update(control.name for control in sequence.control_input)
    names.update(state.input_name for state in sequence.state)
    return names


def _check_tensor(
    config: model_config_pb2.ModelConfig, tensor: Any, info: TensorInfo, kind: str
) -> bool:
    """Check one tensor; True when the graph takes a scalar the config calls dims [1]."""
    model = config.name
    want = info.data_type
    have = model_config_pb2.DataType.Name(tensor.data_type)
    if want is None:
        raise InvalidArgumentError(
            f"unable to load model '{model}', {kind} '{info.name}' has ONNX type "
            f"'{info.onnx_type}', which infercore cannot exchange"
        )
    if have != want.config_name:
        raise InvalidArgumentError(
            f"unable to load model '{model}', unexpected datatype {have} for {kind} "
            f"'{tensor.name}', expecting {want.config_name}"
        )
    shape = [int(d) for d in (tensor.reshape.shape if tensor.HasField("reshape")
                              else tensor.dims)]
    batching = config.max_batch_size > 0
    full = ([-1] + shape) if batching else shape
    graph = list(info.dims)
    if not graph and full == [1]:
        return True  # the graph's scalar, which a config writes as dims [1]
    if len(graph) != len(full):
        note = (" (an initial batch dimension because max_batch_size > 0 followed by the "
                "explicit tensor shape)") if batching else ""
        raise InvalidArgumentError(
            f"model '{model}', tensor '{tensor.name}': the model expects {len(graph)} "
            f"dimensions (shape {graph}) but the model configuration specifies {len(full)} "
            f"dimensions{note}, making complete shape {full}"
        )
    if batching and graph[0] >= 0 and not (graph[0] == 1 and config.max_batch_size == 1):
        raise InvalidArgumentError(
            f"model '{model}', tensor '{tensor.name}': the model's first dimension is fixed at "
            f"{graph[0]}, so it cannot take a batch dimension; set max_batch_size to 0 and "
            "give the full shape in dims"
        )
    for index, (graph_dim, config_dim) in enumerate(zip(graph, full, strict=True)):
        if graph_dim >= 0 and config_dim >= 0 and graph_dim != config_dim:
            raise InvalidArgumentError(
                f"model '{model}', tensor '{tensor.name}': the model expects shape {graph} but "
                f"the model configuration specifies shape {full} (dimension {index} differs)"
            )
    return False


# -- session options and providers --------------------------------------------------------------
def parse_bool(value: str, key: str, model: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidArgumentError(
        f"failed to parse parameter '{key}' of model '{model}': '{value}' is not a boolean"
    )


def _parse_int(value: str, key: str, model: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"failed to parse parameter '{key}' of model '{model}': '{value}' is not an "
            "integer"
        ) from None


def string_parameters(config: model_config_pb2.ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


def session_options(
    config: model_config_pb2.ModelConfig, settings: Mapping[str, str]
) -> tuple[ort.SessionOptions, ort.RunOptions | None]:
    """SessionOptions (cloned per instance by onnxruntime) and RunOptions, if any are set.

    Thread counts come from the model's parameters, else from the backend's settings
    (``--backend-config=onnxruntime,intra_op_thread_count=N``); 0 leaves onnxruntime's
    default (one thread per core).
    """
    model = config.name
    params = string_parameters(config)
    options = ort.SessionOptions()
    level = int(config.optimization.graph.level) if config.optimization.HasField("graph") else 0
    options.graph_optimization_level = _GRAPH_LEVELS.get(
        level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)

    mode = _parse_int(params.get("execution_mode", "0"), "execution_mode", model)
    if mode not in (0, 1):
        raise InvalidArgumentError(
            "Invalid configuration value provided. Expected values for execution_mode are 0 "
            f"or 1 but got {mode} for model '{model}'."
        )
    options.execution_mode = (ort.ExecutionMode.ORT_SEQUENTIAL if mode == 0
                              else ort.ExecutionMode.ORT_PARALLEL)

    for key, attribute in (("intra_op_thread_count", "intra_op_num_threads"),
                           ("inter_op_thread_count", "inter_op_num_threads")):
        text = params.get(key, settings.get(key, "0"))
        count = _parse_int(text, key, model)
        if count > 0:
            setattr(options, attribute, count)

    if "enable_mem_arena" in params:
        options.enable_cpu_mem_arena = parse_bool(params["enable_mem_arena"],
                                                  "enable_mem_arena", model)
    if "enable_mem_pattern" in params:
        options.enable_mem_pattern = parse_bool(params["enable_mem_pattern"],
                                                "enable_mem_pattern", model)
    # Triton passes "session.use_device_allocator_for_initializers" through; every
    # onnxruntime session config key starts with "session.", so all of them pass here.
    for key, value in params.items():
        if key.startswith("session."):
            options.add_session_config_entry(key, value)

    run_options: ort.RunOptions | None = None
    shrinkage = "memory.enable_memory_arena_shrinkage"
    if shrinkage in params:
        run_options = ort.RunOptions()
        run_options.add_run_config_entry(shrinkage, params[shrinkage])
    return options, run_options


def providers(
    config: model_config_pb2.ModelConfig,
    kind: str,
    device_id: int,
    instance: str,
    available: Iterable[str] | None = None,
) -> list[Any]:
    """The execution providers of one instance, most preferred first.

    Raises:
        UnavailableError: the instance needs a provider this onnxruntime build lacks
            (KIND_GPU without CUDA, as on a CPU-only host, or an accelerator's provider).
        InvalidArgumentError: an unknown execution accelerator, or a bad parameter.
    """
    model = config.name
    have = set(ort.get_available_providers() if available is None else available)
    accelerators = config.optimization.execution_accelerators
    chosen: list[Any] = []
    if kind == "KIND_GPU":
        if CUDA_PROVIDER not in have:
            raise UnavailableError(
                f"instance '{instance}' of model '{model}' has kind KIND_GPU, but this "
                f"onnxruntime build has no CUDA execution provider (it offers "
                f"{', '.join(sorted(have))}); install onnxruntime-gpu on a host with a CUDA "
                "GPU, or use KIND_CPU"
            )
        cuda_options = _legacy_cuda_options(config)
        cuda_options["device_id"] = str(device_id)
        for accelerator in accelerators.gpu_execution_accelerator:
            parameters = dict(accelerator.parameters)
            if accelerator.name == "tensorrt":
                _require(_TENSORRT, have, "tensorrt", instance, model)
                chosen.append((_TENSORRT, _tensorrt_options(parameters, device_id, model)))
            elif accelerator.name == "cuda":
                cuda_options.update(parameters)
            else:
                raise InvalidArgumentError(
                    f"unknown Execution Accelerator '{accelerator.name}' is requested for "
                    f"model '{model}'"
                )
        chosen.append((CUDA_PROVIDER, cuda_options))
    else:
        for accelerator in accelerators.cpu_execution_accelerator:
            if accelerator.name == "openvino":
                _require(_OPENVINO, have, "openvino", instance, model)
                chosen.append((_OPENVINO, {"device_type": "CPU"}))
            else:
                raise InvalidArgumentError(
                    f"unknown Execution Accelerator '{accelerator.name}' is requested for "
                    f"model '{model}'"
                )
    chosen.append(_CPU)
    return chosen


def _require(provider: str, have: set[str], accelerator: str, instance: str, model: str) -> None:
    if provider not in have:
        raise UnavailableError(
            f"instance '{instance}' of model '{model}' requests execution accelerator "
            f"'{accelerator}', but this onnxruntime build has no {provider} (it offers "
            f"{', '.join(sorted(have))})"
        )


def _tensorrt_options(parameters: Mapping[str, str], device_id: int, model: str) -> dict[str, str]:
    options = {"device_id": str(device_id)}
    for key, value in parameters.items():
        if key == "precision_mode":
            if value == "FP16":
                options["trt_fp16_enable"] = "1"
            elif value == "INT8":
                options["trt_int8_enable"] = "1"
            elif value != "FP32":
                raise InvalidArgumentError(
                    f"unsupported precision mode '{value}' is requested for model '{model}'"
                )
        else:
            options[_TRT_RENAMED.get(key, key)] = value
    return options


def _legacy_cuda_options(config: model_config_pb2.ModelConfig) -> dict[str, str]:
    """CUDA options Triton still reads from the model's own parameters (deprecated there)."""
    params = string_parameters(config)
    options: dict[str, str] = {}
    for key, table in (("cudnn_conv_algo_search", _CUDNN_SEARCH),
                       ("arena_extend_strategy", _ARENA_STRATEGY)):
        if key in params:
            value = table.get(params[key].strip())
            if value is None:
                raise InvalidArgumentError(
                    f"unsupported {key} value '{params[key]}' is requested for model "
                    f"'{config.name}'"
                )
            options[key] = value
    for key in ("gpu_mem_limit", "do_copy_in_default_stream"):
        if key in params:
            options[key] = params[key]
    return options
