"""infercore: a Python inference server, drop-in compatible with Triton Inference Server.

The public API is what this module exports; everything else is internal.
"""

from ._version import __version__
from .errors import (
    AlreadyExistsError,
    CancelledError,
    ErrorCode,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from .handle import Model
from .inference_request import InferenceRequest
from .log_settings import LogFormat, LogLevel
from .observability.custom_metrics import Metric, MetricFamily, MetricKind
from .observability.logs import log_enabled, log_message
from .observability.tracing import TraceConfig
from .options import (
    ModelControlMode,
    ModelLoadDeviceLimit,
    Options,
    RateLimiterResource,
    RateLimitMode,
)
from .remote import RemoteModel, RemoteServer
from .repository.states import ModelIndexEntry, ModelState
from .request import InferRequest
from .request_trace import TensorTraceEvent, Trace, TraceActivity, TraceEvent
from .response import InferResponse, ResponseStream
from .server import Server
from .serving import Endpoint
from .stats import BatchStatistics, Duration, ModelStatistics
from .tensor import DataType, MemoryType, Tensor, deserialize_bytes_tensor, serialize_bytes_tensor

__all__ = [
    "AlreadyExistsError",
    "BatchStatistics",
    "CancelledError",
    "DataType",
    "Duration",
    "Endpoint",
    "ErrorCode",
    "InferRequest",
    "InferenceRequest",
    "InferResponse",
    "InternalError",
    "InvalidArgumentError",
    "LogFormat",
    "LogLevel",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "Model",
    "ModelControlMode",
    "ModelIndexEntry",
    "ModelLoadDeviceLimit",
    "ModelState",
    "ModelStatistics",
    "NotFoundError",
    "Options",
    "RateLimitMode",
    "RateLimiterResource",
    "RemoteModel",
    "RemoteServer",
    "ResponseStream",
    "Server",
    "Tensor",
    "TensorTraceEvent",
    "Trace",
    "TraceActivity",
    "TraceConfig",
    "TraceEvent",
    "TritonError",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
    "__version__",
    "deserialize_bytes_tensor",
    "log_enabled",
    "log_message",
    "serialize_bytes_tensor",
]
