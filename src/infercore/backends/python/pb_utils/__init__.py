"""infercore's ``triton_python_backend_utils``: the API Triton Python models import.

``import triton_python_backend_utils as pb_utils`` resolves to a shim re-exporting this
module's ``__all__``. The pieces live in ``pb_error``, ``pb_tensor``, ``pb_request``,
``pb_metrics`` (custom metrics), ``pb_control`` (load_model, unload_model,
is_model_ready) and ``model_config_api``; ``Logger`` and the small lookup helpers live
here.

``Logger`` writes through Python ``logging`` (logger ``infercore.model``), each record
carrying ``model_name``/``model_version``/``instance_name`` attributes, with the caller's
file and line as the record's location.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from .args import as_str, refused
from .control import is_model_ready, load_model, unload_model
from .error import TritonError, TritonModelException
from .metrics import Metric, MetricFamily
from .model_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from .request import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    InferenceTrace,
    PreferredMemory,
    ResponseIterator,
    current_scope,
)
from .tensor import (
    TRITON_STRING_TO_NUMPY,
    Tensor,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

_logger = logging.getLogger("infercore.model")


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input tensor called ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(
    inference_response: InferenceResponse, name: str
) -> Tensor | None:
    """The output tensor called ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_model_dir() -> str:
    """The directory of the model version being served (``<repository>/<model>/<version>``)."""
    scope = current_scope()
    if scope is None:
        raise TritonModelException(
            "get_model_dir() is only available to a model loaded by the Python backend"
        )
    return str(scope.version_dir)


class LogLevel(enum.IntEnum):
    """Triton's Python-backend log levels."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_PY_LEVELS = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}


def _emit(message: Any, level: LogLevel, function: str) -> None:
    # As Triton's binding: a str message (or bytes), and a LogLevel, not a bare int
    message = as_str(message, function, "message")
    if not isinstance(level, LogLevel):
        raise refused(function, "level", level, "a pb_utils.Logger level")
    py_level = _PY_LEVELS[level]
    if not _logger.isEnabledFor(py_level):
        return
    scope = current_scope()
    if scope is None:
        extra = {"model_name": "", "model_version": -1, "instance_name": ""}
        # stacklevel 3: the model's call -> Logger method -> here
        _logger.log(py_level, "%s", message, extra=extra, stacklevel=3)
        return
    extra = {
        "model_name": scope.model_name,
        "model_version": scope.model_version,
        "instance_name": scope.instance_name,
    }
    # the message alone, as Triton's log shows it; the model is in the record's attributes
    _logger.log(py_level, "%s", message, extra=extra, stacklevel=3)


_LogLevel = LogLevel  # the module's name for it: inside Logger, LogLevel is the attribute


class Logger:
    """Log from a model: ``pb_utils.Logger.log_info("...")`` or ``Logger.log(msg, level)``."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _LogLevel = _LogLevel.INFO) -> None:
        _emit(message, level, "log")

    @staticmethod
    def log_info(message: str) -> None:
        _emit(message, LogLevel.INFO, "log_info")

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(message, LogLevel.WARNING, "log_warn")

    @staticmethod
    def log_error(message: str) -> None:
        _emit(message, LogLevel.ERROR, "log_error")

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(message, LogLevel.VERBOSE, "log_verbose")
