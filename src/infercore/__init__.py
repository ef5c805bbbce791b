"""infercore: a Python inference server, drop-in compatible with Triton Inference Server.

The public API is what this module exports; everything else is internal.
"""

from ._version import __version__
from .custom_metrics import Metric, MetricFamily, MetricKind
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
from .options import ModelControlMode, Options, RateLimiterResource, RateLimitMode
from .repository.states import ModelIndexEntry, ModelState
from .request import InferRequest
from .response import InferResponse, ResponseStream
from .server import Server
from .stats import BatchStatistics, Duration, ModelStatistics
from .tensor import DataType, MemoryType, Tensor, deserialize_bytes_tensor, serialize_bytes_tensor
from .tracing import TraceConfig

__all__ = [
    "AlreadyExistsError",
    "BatchStatistics",
    "CancelledError",
    "DataType",
    "Duration",
    "ErrorCode",
    "InferRequest",
    "InferResponse",
    "InternalError",
    "InvalidArgumentError",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "Model",
    "ModelControlMode",
    "ModelIndexEntry",
    "ModelState",
    "ModelStatistics",
    "NotFoundError",
    "Options",
    "RateLimitMode",
    "RateLimiterResource",
    "ResponseStream",
    "Server",
    "Tensor",
    "TraceConfig",
    "TritonError",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
    "__version__",
    "deserialize_bytes_tensor",
    "serialize_bytes_tensor",
]
