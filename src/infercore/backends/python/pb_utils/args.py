"""Argument conversions of the pb_utils constructors, as Triton's pybind11 bindings do them.

Triton's ``pb_utils`` classes are C++ bound with pybind11, which converts each argument to
its C++ type before the constructor runs and raises ``TypeError`` when it cannot: ``None``
where a value is required, an ``int`` for a ``str``, a list for an array. A few things
convert that plain Python would keep apart: ``bytes`` become ``str`` (UTF-8), any
sequence but a str becomes a list. The helpers here do the same, so a model written for
Triton meets the same refusals (``qa/L0_backend_python/argument_validation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["as_array", "as_int", "as_list", "as_str", "refused"]


def refused(function: str, argument: str, value: Any, expected: str) -> TypeError:
    """The TypeError for ``argument`` of ``function`` ("Class.__init__" or "name").

    It opens as pybind11's does ("__init__(): incompatible constructor arguments.");
    pybind11 then lists every signature, this says which argument could not convert.
    """
    owner, _, name = function.rpartition(".")
    kind = "constructor" if name == "__init__" else "function"
    where = f"{owner}'s " if owner else ""
    return TypeError(f"{name}(): incompatible {kind} arguments. {where}'{argument}' must be "
                     f"{expected}, not {type(value).__name__}")


def as_str(value: Any, function: str, argument: str) -> str:
    """A ``std::string`` argument: a str (np.str_ included) or UTF-8 bytes."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    raise refused(function, argument, value, "str")


def as_int(value: Any, function: str, argument: str) -> int:
    """An integer argument: anything with ``__index__`` (no float, no None, no str)."""
    if isinstance(value, (str, bytes)) or not hasattr(type(value), "__index__"):
        raise refused(function, argument, value, "int")
    return int(value.__index__())


def as_list(value: Any, function: str, argument: str) -> list[Any]:
    """A ``std::vector`` argument: any sequence except a str or bytes."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise refused(function, argument, value, "a list")
    return list(value)


def as_array(value: Any, function: str, argument: str) -> np.ndarray:
    """A ``py::array`` argument: a numpy array, nothing converted to one."""
    if not isinstance(value, np.ndarray):
        raise refused(function, argument, value, "a numpy.ndarray")
    return value
