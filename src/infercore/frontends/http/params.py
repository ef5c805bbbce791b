"""The request-level ``parameters`` of a KServe v2 inference request, Triton's way.

Triton reserves ``sequence_id``, ``sequence_start``, ``sequence_end``, ``priority``,
``timeout`` and ``binary_data_output`` (they set fields of the request), refuses keys
starting with ``triton_``, and passes every other string, (64-bit) integer, boolean or
other number (as a double) on to the model. A
reserved key of the wrong JSON type fails as TritonJson fails ("Unable to parse '<key>':
attempt to access ...", an INTERNAL error).
"""

from __future__ import annotations

from ...errors import InvalidArgumentError
from ...request import ParameterValue
from .json import as_bool, as_string, as_uint, is_int64, is_uint64, members

__all__ = ["RequestFields", "is_uint"]


class RequestFields:
    """The request-level ``parameters``: Triton's reserved keys, and the rest passed on."""

    __slots__ = ("binary_output", "correlation_id", "parameters", "priority",
                 "sequence_end", "sequence_start", "timeout_us")

    def __init__(self) -> None:
        self.binary_output = False
        self.correlation_id: int | str = 0
        self.parameters: dict[str, ParameterValue] = {}
        self.priority = 0
        self.timeout_us = 0
        self.sequence_start = False
        self.sequence_end = False

    def read(self, parameters: object) -> None:
        """Read a request's ``parameters`` as Triton does (member by member; a reserved
        key of the wrong JSON type is an INTERNAL error, as TritonJson reports it)."""
        for key in members(parameters, "failed to get request params."):
            value = parameters[key]  # type: ignore[index]
            if key == "sequence_id":
                self.correlation_id = (value if is_uint64(value) else
                                       as_string(value, "Unable to parse 'sequence_id'"))
            elif key == "sequence_start":
                self.sequence_start = as_bool(value, "Unable to parse 'sequence_start'")
            elif key == "sequence_end":
                self.sequence_end = as_bool(value, "Unable to parse 'sequence_end'")
            elif key == "priority":
                self.priority = as_uint(value, "Unable to parse 'priority'")
            elif key == "timeout":
                self.timeout_us = as_uint(value, "Unable to parse 'timeout'")
            elif key == "binary_data_output":
                self.binary_output = as_bool(value, "Unable to parse 'binary_data_output'")
            elif key.startswith("triton_"):
                raise InvalidArgumentError(
                    "parameter keys starting with 'triton_' are reserved for Triton usage "
                    "and should not be specified.")
            elif isinstance(value, str) or isinstance(value, bool) or is_int64(value):
                self.parameters[key] = value
            elif isinstance(value, (int, float)):  # any other number: a double
                self.parameters[key] = float(value)
            else:
                raise InvalidArgumentError(
                    f"parameter '{key}' has invalid type. It should be either 'int', "
                    "'bool', or 'string'.")


def is_uint(value: object) -> bool:
    return type(value) is int and value >= 0
