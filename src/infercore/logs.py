"""Log settings (Triton's logging extension) applied to Python's logging.

Every infercore logger sits under the ``infercore`` logger (model code logs through
``infercore.model``), so one level and one handler on that logger implement Triton's
switches: log_info / log_warning / log_error enable those severities, log_verbose_level > 0
enables DEBUG, log_file sends records to that file only (empty: records propagate to the
application's handlers, standard error under ``infercore serve``), log_format is "default"
(Triton's glog-like prefix) or "ISO8601".

Applications write into the same log with ``log_message(level, text)`` (Triton's
TRITONSERVER_LogMessage; ``Server.log``) and ask ``log_enabled(level)`` first when a line
is costly to build (TRITONSERVER_LogIsEnabled). The switches decide, each on its own, as
in Triton: the settings a server applied last, or the ``infercore`` logger's level when no
server made any. A line carries the caller's file and line in the glog prefix where
Triton's carry theirs (``I1130 12:00:00.000 4242 app.py:17] text``).

Threads: settings change from frontends and the API at any time; ``_lock`` serialises
changes; logging itself is thread-safe.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["LOG_FORMATS", "LogFormat", "LogLevel", "LogSettings", "LogSettingsManager",
           "log_enabled", "log_message"]

_ROOT = "infercore"
LOG_FORMATS = {
    "default": ("%(levelname).1s%(asctime)s.%(msecs)03d %(process)d %(name)s] %(message)s",
                "%m%d %H:%M:%S"),
    "ISO8601": ("%(asctime)s %(levelname).1s %(process)d %(name)s] %(message)s",
                "%Y-%m-%dT%H:%M:%SZ"),
}


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


_TYPES: dict[str, type] = {"log_file": str, "log_info": bool, "log_warning": bool,
                           "log_error": bool, "log_verbose_level": int, "log_format": str}


class LogSettingsManager:
    """Holds the current LogSettings and applies them to the ``infercore`` logger."""

    def __init__(self, settings: LogSettings | None = None) -> None:
        self._lock = threading.Lock()
        self._settings = settings or LogSettings()
        self._handler: logging.Handler | None = None
        self._apply(self._settings)

    @property
    def settings(self) -> LogSettings:
        return self._settings

    def update(self, changes: Mapping[str, Any]) -> LogSettings:
        """Change some settings (Triton's names); unknown names or bad values raise."""
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
                f"invalid argument for log_format, got '{values['log_format']}'. Choose from "
                + ", ".join(LOG_FORMATS))
        if values.get("log_verbose_level", 0) < 0:
            raise InvalidArgumentError("log_verbose_level must be >= 0")
        with self._lock:
            updated = replace(self._settings, **values)
            self._apply(updated)
            self._settings = updated
        return updated

    def _apply(self, settings: LogSettings) -> None:
        global _active
        logger = logging.getLogger(_ROOT)
        logger.setLevel(settings.level)
        _active = settings
        if not settings.log_file:
            # Without a log file, records propagate to the application's handlers.
            self._remove_handler(logger)
            return
        try:
            handler: logging.Handler = logging.FileHandler(settings.log_file)
        except OSError as exc:
            raise InvalidArgumentError(
                f"failed to open log file '{settings.log_file}': {exc}") from exc
        fmt, datefmt = LOG_FORMATS[settings.log_format]
        handler.setFormatter(logging.Formatter(fmt, datefmt))
        self._remove_handler(logger)
        logger.addHandler(handler)
        logger.propagate = False  # a log file replaces the usual destination, as in Triton
        self._handler = handler

    def _remove_handler(self, logger: logging.Logger) -> None:
        if self._handler is not None:
            logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None
            logger.propagate = True

    def close(self) -> None:
        global _active
        with self._lock:
            self._remove_handler(logging.getLogger(_ROOT))
            if _active is self._settings:
                _active = None


# The settings a server applied last: the infercore logger (level and log file) is one per
# process, as Triton's logger is.
_active: LogSettings | None = None


def _level(level: LogLevel | str) -> LogLevel:
    if isinstance(level, LogLevel):
        return level
    if isinstance(level, str):
        name = level.strip().upper()
        member = LogLevel.__members__.get("WARN" if name == "WARNING" else name)
        if member is not None:
            return member
    raise InvalidArgumentError(
        f"unknown logging level '{level}', expected one of " + ", ".join(LogLevel.__members__))


def log_enabled(level: LogLevel | str, settings: LogSettings | None = None) -> bool:
    """Whether a line of ``level`` would be written to the server log."""
    chosen = _level(level)
    current = settings if settings is not None else _active
    if current is None:
        return logging.getLogger(_ROOT).isEnabledFor(chosen.value)
    return current.enabled(chosen)


def log_message(level: LogLevel | str, message: str, *, filename: str | None = None,
                line: int | None = None, settings: LogSettings | None = None,
                stacklevel: int = 1) -> None:
    """Write ``message`` to the server log at ``level`` if that level is enabled.

    ``filename`` and ``line`` name where the line comes from (default: the caller's, or
    the caller ``stacklevel`` frames up).
    """
    chosen = _level(level)
    if not isinstance(message, str):
        raise InvalidArgumentError(
            f"a log message must be a string, got {type(message).__name__}")
    if not log_enabled(chosen, settings):
        return
    if filename is None or line is None:
        frame = sys._getframe(stacklevel)
        filename = frame.f_code.co_filename if filename is None else filename
        line = frame.f_lineno if line is None else line
    logger = logging.getLogger(_ROOT)
    record = logger.makeRecord(f"{os.path.basename(filename)}:{line}", chosen.value,
                               filename, line, message, (), None)
    # The switch decided above; handle() skips the logger's own level, which can only
    # express the lowest enabled severity.
    logger.handle(record)
