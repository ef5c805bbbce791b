"""The "onnxruntime" backend (platform "onnxruntime_onnx"): ONNX models on ONNX Runtime.

    OnnxRuntimeBackend.auto_complete_config  a throwaway CPU session reads the graph
                                             (onnxruntime_config.auto_complete)
    OnnxRuntimeBackend.create_model          session options from the config, checked at load
    OnnxRuntimeModel.create_instance         one InferenceSession per instance, with the
                                             providers of its kind; the config is checked
                                             against the graph
    OnnxRuntimeInstance.execute(payload)     the payload's requests concatenated along dim 0,
                                             one ``session.run``, outputs split back per
                                             request (views), one response per request

Threads: ``auto_complete_config``, ``create_model`` and ``create_instance`` run on loading
threads; ``execute`` runs on whichever thread holds the instance's reservation (its backend
thread, or a caller running the request inline), one payload at a time; ``finalize`` runs on
the unloading thread once no payload runs. A session is used by one thread at a time.

onnxruntime's exceptions are translated here, and only here, into infercore's errors
(``raise ... from exc``), with the model's name and onnxruntime's own status text.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
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
from .onnxruntime_config import (
    CUDA_PROVIDER,
    DEFAULT_MAX_BATCH_SIZE,
    IoPlan,
    auto_complete,
    check_config,
    model_path,
    parse_bool,
    providers,
    read_io,
    session_options,
)

__all__ = ["OnnxRuntimeBackend", "OnnxRuntimeInstance", "OnnxRuntimeModel"]

logger = logging.getLogger(__name__)

# "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Failed to load model ..."
_ORT_STATUS = re.compile(r"\[ONNXRuntimeError\] : (\d+) : \w+ : (.*)", re.DOTALL)


def ort_error(exc: BaseException, context: str) -> TritonError:
    """An onnxruntime exception as a typed error, worded as Triton words ORT statuses."""
    text = str(exc).strip()
    match = _ORT_STATUS.match(text)
    if match is not None:
        text = f"onnx runtime error {match.group(1)}: {match.group(2).strip()}"
    kind = type(exc).__name__
    # ValueError: the Python wrapper's own checks of the feeds (e.g. a missing input).
    if kind == "InvalidArgument" or isinstance(exc, ValueError):
        return InvalidArgumentError(f"{context}: {text}")
    if kind == "NoSuchFile":
        return UnavailableError(f"{context}: {text}")
    return InternalError(f"{context}: {text}")


def _open_session(
    path: Path, options: ort.SessionOptions, chosen: Sequence[Any], model: str
) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=list(chosen))
    except Exception as exc:  # corrupt file, unsupported opset, provider failure ...
        raise ort_error(exc, f"failed to load model '{model}' from '{path}'") from exc


def _probe_options() -> ort.SessionOptions:
    # Reading the graph's signature needs neither optimisation nor threads.
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: the instances' sessions warn, if need be
    return options


class OnnxRuntimeBackend:
    """ONNX Runtime models; settings from ``--backend-config=onnxruntime,<key>=<value>``."""

    name = "onnxruntime"
    supports_batching = True

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self._settings = dict(settings or {})
        text = self._settings.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE))
        try:
            self._default_max_batch_size = int(text)
        except ValueError:
            raise InvalidArgumentError(
                f"backend config 'default-max-batch-size' of backend 'onnxruntime' must be an "
                f"integer, got '{text}'"
            ) from None
        if parse_bool(self._settings.get("enable-global-threadpool", "0"),
                      "enable-global-threadpool", "<backend onnxruntime>"):
            logger.warning("onnxruntime: enable-global-threadpool is not available through "
                           "onnxruntime's Python API; each session keeps its own thread pools")

    @property
    def gpu_capable(self) -> bool:
        """Whether this onnxruntime has its CUDA execution provider (onnxruntime-gpu)."""
        return CUDA_PROVIDER in ort.get_available_providers()

    def auto_complete_config(
        self, config: model_config_pb2.ModelConfig, model_dir: Path, version_dir: Path
    ) -> None:
        if not config.name:
            config.name = Path(model_dir).name
        if (config.input or config.batch_input) and config.output:
            logger.info("skipping model configuration auto-complete for '%s': inputs and "
                        "outputs already specified", config.name)
            return
        path = model_path(config, version_dir, f"model '{config.name}'")
        session = _open_session(path, _probe_options(), ["CPUExecutionProvider"], config.name)
        auto_complete(config, read_io(session), self._default_max_batch_size)

    def create_model(self, context: ModelContext) -> OnnxRuntimeModel:
        return OnnxRuntimeModel(context, {**self._settings, **context.backend_config})


class OnnxRuntimeModel:
    """One loaded version: its session options and the per-model tables execute uses."""

    def __init__(self, context: ModelContext, settings: Mapping[str, str]) -> None:
        config = context.config
        self.context = context
        self.name = context.name
        check_supported(config, "onnxruntime")
        # Parsed before any session exists, so a bad parameter fails the load at once.
        self.options, self.run_options = session_options(config, settings)
        self.batching = config.max_batch_size > 0
        self.output_names = tuple(output.name for output in config.output)
        self.output_types = {
            output.name: DataType.from_config(model_config_pb2.DataType.Name(output.data_type))
            for output in config.output
        }
        self.bytes_inputs = frozenset(
            i.name for i in config.input if i.data_type == model_config_pb2.TYPE_STRING)
        self.bytes_outputs = frozenset(
            o.name for o in config.output if o.data_type == model_config_pb2.TYPE_STRING)
        self.output_shapes = OutputShapes(config)

    def create_instance(self, info: InstanceInfo) -> OnnxRuntimeInstance:
        """Open this instance's session and check the config against its graph.

        Raises:
            UnavailableError: the model file is missing, or the instance's kind needs an
                execution provider this onnxruntime lacks (KIND_GPU on a CPU-only host).
            InvalidArgumentError: the config contradicts the graph, or a bad parameter.
            InternalError: onnxruntime could not load the file (corrupt, bad opset ...).
        """
        config = self.context.config
        path = model_path(config, self.context.version_dir, f"model instance '{info.name}'")
        chosen = providers(config, info.kind, info.device_id, info.name)
        session = _open_session(path, self.options, chosen, self.name)
        if info.kind == "KIND_GPU" and CUDA_PROVIDER not in session.get_providers():
            # onnxruntime falls back to the CPU with a warning; Triton fails the load.
            raise UnavailableError(
                f"instance '{info.name}' of model '{self.name}' has kind KIND_GPU, but "
                "onnxruntime could not start its CUDA execution provider"
            )
        plan = check_config(config, read_io(session))
        return OnnxRuntimeInstance(self, info, session, plan)

    def finalize(self) -> None:
        return None  # sessions belong to instances


class OnnxRuntimeInstance:
    """One InferenceSession, run by whichever thread holds the instance's reservation."""

    def __init__(self, model: OnnxRuntimeModel, info: InstanceInfo,
                 session: ort.InferenceSession, plan: IoPlan) -> None:
        self._session: ort.InferenceSession | None = session
        self._model_name = model.name
        self._context = f"onnx runtime failed to execute model '{model.name}' (instance " \
                        f"'{info.name}')"
        self._run_options = model.run_options
        self._batching = model.batching
        self._output_names = model.output_names
        self._output_types = model.output_types
        self._bytes_inputs = model.bytes_inputs
        self._bytes_outputs = model.bytes_outputs
        self._scalar_inputs = plan.scalar_inputs
        self._scalar_outputs = plan.scalar_outputs
        self._output_shapes = model.output_shapes
        self._adapt_inputs = bool(self._bytes_inputs or self._scalar_inputs)
        self._adapt_outputs = bool(self._bytes_outputs or self._scalar_outputs
                                   or self._output_shapes)

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
        session = self._session
        try:
            if session is None:
                raise UnavailableError(f"model '{self._model_name}' is unloaded")
            feeds = concat_inputs(requests, self._model_name)
            if self._adapt_inputs:
                self._adapt_feeds(feeds)
            names = request_outputs(requests, self._output_names) or self._output_names
            payload.mark_compute_input_end()
            try:
                results = session.run(names, feeds, self._run_options)
            except Exception as exc:
                raise ort_error(exc, self._context) from exc
            payload.mark_compute_output_start()
            self._answer(requests, names, results)
        except TritonError as error:
            fail_requests(requests, error)

    def _adapt_feeds(self, feeds: dict[str, np.ndarray]) -> None:
        for name in self._bytes_inputs.intersection(feeds):
            feeds[name] = _as_text(feeds[name], name, self._model_name)
        for name in self._scalar_inputs.intersection(feeds):
            feeds[name] = feeds[name].reshape(())

    def _adapt_output(self, name: str, array: np.ndarray) -> np.ndarray:
        if name in self._scalar_outputs:
            array = array.reshape(1)
        if name in self._bytes_outputs:
            array = _as_bytes(array)
        return self._output_shapes.apply(name, array)

    def _answer(self, requests: list[InferRequest], names: Sequence[str],
                results: Sequence[np.ndarray]) -> None:
        types = self._output_types
        if self._adapt_outputs:
            results = [self._adapt_output(n, a) for n, a in zip(names, results, strict=True)]
        respond(requests, [(name, types[name], array)
                           for name, array in zip(names, results, strict=True)],
                self._model_name)

    def finalize(self) -> None:
        self._session = None  # onnxruntime frees the session with its last reference


def _as_text(array: np.ndarray, name: str, model: str) -> np.ndarray:
    """BYTES elements as ``str``: onnxruntime's Python API takes string tensors as text."""
    try:
        text = [item.decode("utf-8") if isinstance(item, bytes) else str(item)
                for item in array.reshape(-1)]
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"input '{name}' of model '{model}' holds bytes that are not UTF-8 text, which "
            "onnxruntime's Python API cannot pass to a string tensor"
        ) from None
    out = np.empty(len(text), dtype=np.object_)
    out[:] = text
    return out.reshape(array.shape)


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """onnxruntime's string output (``str`` elements) as a BYTES array of ``bytes``."""
    items = [item.encode("utf-8") if isinstance(item, str) else bytes(item)
             for item in array.reshape(-1)]
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out.reshape(array.shape)
