"""Log settings as Triton names, checks and shows them (a value module;
observability/logs.py applies them).

``LogSettings`` is the logging extension's JSON (``log_file``, ``log_info``, ...);
``changed`` checks a change as the logging APIs receive it. ``LogFormat`` and
``LogLevel`` are Triton's TRITONSERVER_LogFormat and TRITONSERVER_LogLevel.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["LOG_FORMATS", "LogFormat", "LogLevel", "LogSettings", "verbose_level"]

LOG_FORMATS = ("default", "ISO8601")
_UINT32 = 0xFFFFFFFF


class LogFormat(str, enum.Enum):
    """Triton's TRITONSERVER_LogFormat (``--log-format``)."""

    DEFAULT = "default"
    ISO8601 = "ISO8601"


class LogLevel(enum.Enum):
    """Triton's TRITONSERVER_LogLevel; VERBOSE is verbose level 1 (Python's DEBUG)."""

    INFO = logging.INFO
    WARN = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


@dataclass(frozen=True, slots=True)
class LogSettings:
    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"

    def to_dict(self) -> dict[str, Any]:
        """Triton's logging JSON."""
        return asdict(self)

    @property
    def level(self) -> int:
        if self.log_verbose_level > 0:
            return logging.DEBUG
        for enabled, level in ((self.log_info, logging.INFO), (self.log_warning, logging.WARNING),
                               (self.log_error, logging.ERROR)):
            if enabled:
                return level
        return logging.CRITICAL + 1

    def enabled(self, level: LogLevel) -> bool:
        """Whether lines of ``level`` are written (each switch on its own, as Triton)."""
        if level is LogLevel.INFO:
            return self.log_info
        if level is LogLevel.WARN:
            return self.log_warning
        if level is LogLevel.ERROR:
            return self.log_error
        return self.log_verbose_level >= 1

    def changed(self, changes: Mapping[str, Any]) -> LogSettings:
        """These settings with ``changes`` (Triton's names) applied; unknown names or bad
        values raise InvalidArgumentError."""
        values: dict[str, Any] = {}
        for key, value in changes.items():
            expected = _TYPES.get(key)
            if expected is None:
                raise InvalidArgumentError(f"unknown log setting '{key}'")
            if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidArgumentError(f"log setting '{key}' must be an integer")
            if expected is not int and not isinstance(value, expected):
                raise InvalidArgumentError(
                    f"log setting '{key}' must be a {expected.__name__}")
            values[key] = value
        if "log_format" in values and values["log_format"] not in LOG_FORMATS:
            raise InvalidArgumentError(
                f"invalid argument for log_format, got: {values['log_format']}")
        if "log_verbose_level" in values:
            values["log_verbose_level"] = verbose_level(values["log_verbose_level"])
        return replace(self, **values)


_TYPES: dict[str, type] = {"log_file": str, "log_info": bool, "log_warning": bool,
                           "log_error": bool, "log_verbose_level": int, "log_format": str}


def verbose_level(value: int) -> int:
    """A verbose level as tritonserver's C API reads it: an int (the low 32 bits), a
    negative one meaning 0."""
    low = value & _UINT32
    return 0 if low >= 1 << 31 else low
