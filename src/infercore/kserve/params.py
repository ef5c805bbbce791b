"""KServe v2 gRPC ``InferParameter`` values <-> infercore's parameter values.

A value goes out as the one field that fits it (bool before int: a bool is an int);
what comes back is whichever field is set. Both servers' responses and the client's
requests write them this way; the server's reading of a request's parameters keeps
Triton's own checks and texts (frontends/grpc/codec.py).

Pure functions; no state.
"""

from __future__ import annotations

from tritonclient.grpc import service_pb2

from ..request import ParameterValue

__all__ = ["from_infer_parameter", "to_infer_parameter"]


def to_infer_parameter(value: ParameterValue, target: service_pb2.InferParameter) -> None:
    """Store ``value`` in ``target``: bool, int64, double or string."""
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


def from_infer_parameter(parameter: service_pb2.InferParameter) -> ParameterValue:
    """The value set in ``parameter`` ("" when none is)."""
    kind = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, kind) if kind is not None else ""
