"""The request-level ``parameters`` of a KServe v2 inference request, Triton's way.

Triton reserves ``sequence_id``, ``sequence_start``, ``sequence_end``, ``priority``,
``timeout`` and ``binary_data_output`` (they set fields of the request), refuses keys
starting with ``triton_``, and passes every other string, integer, float or boolean on to
the model. The small validators here keep Triton's "Unable to parse '<key>'" wording.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError
from ..request import ParameterValue

__all__ = ["RequestFields", "bool_param", "is_uint", "uint_param"]


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
        if not isinstance(parameters, dict):
            raise InvalidArgumentError("failed to get request params.")
        for key, value in parameters.items():
            if key == "sequence_id":
                if not (is_uint(value) or isinstance(value, str)):
                    raise InvalidArgumentError("Unable to parse 'sequence_id'")
                self.correlation_id = value
            elif key == "sequence_start":
                self.sequence_start = bool_param(key, value)
            elif key == "sequence_end":
                self.sequence_end = bool_param(key, value)
            elif key == "priority":
                self.priority = uint_param(key, value)
            elif key == "timeout":
                self.timeout_us = uint_param(key, value)
            elif key == "binary_data_output":
                self.binary_output = bool_param(key, value)
            elif key.startswith("triton_"):
                raise InvalidArgumentError(
                    "parameter keys starting with 'triton_' are reserved for Triton usage "
                    "and should not be specified.")
            elif isinstance(value, (str, int, float)):  # bool is an int
                self.parameters[key] = value
            else:
                raise InvalidArgumentError(
                    f"parameter '{key}' has invalid type. It should be either 'int', "
                    "'bool', or 'string'.")


def is_uint(value: object) -> bool:
    return type(value) is int and value >= 0


def uint_param(key: str, value: object) -> int:
    if not is_uint(value):
        raise InvalidArgumentError(f"Unable to parse '{key}'")
    return value  # type: ignore[return-value]


def bool_param(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"Unable to parse '{key}'")
    return value
