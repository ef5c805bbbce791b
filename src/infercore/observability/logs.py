"""Log settings (Triton's logging extension) applied to Python's logging.

Every infercore logger sits under the ``infercore`` logger (model code logs through
``infercore.model``), so one level and one handler on that logger implement Triton's
switches: log_info / log_warning / log_error enable those severities, log_verbose_level > 0
enables DEBUG, log_file sends records to that file only (empty: records propagate to the
application's handlers, standard error under ``infercore serve``; a file that cannot be
opened when the server starts leaves them there, as tritonserver does), log_format is
"default" or "ISO8601".

``TritonFormatter`` writes Triton's lines, ``I1201 21:25:48.949297 6502 model.py:8]
"message"`` or ``2024-12-01T21:25:48Z I 6502 model.py:8] "message"``: the level letter
(verbose lines are I), the process id, the file and line the record comes from, and the
message JSON-escaped in quotes (``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0``: as it is). A
message that starts with a newline (a table) is a multi-line entry, written as it is.
One formatter serves the process (the log file's handler and ``infercore serve``'s
standard error, both made by ``triton_handler``); it follows the log_format a server
applied last. The logger's level can only say the lowest severity enabled, so those
handlers also filter each severity by its own switch (log_warning off, log_info on).

Applications write into the same log with ``log_message(level, text)`` (Triton's
TRITONSERVER_LogMessage; ``Server.log``) and ask ``log_enabled(level)`` first when a line
is costly to build (TRITONSERVER_LogIsEnabled). The switches decide, each on its own, as
in Triton: the settings a server applied last, or the ``infercore`` logger's level when no
server made any. A line carries the caller's file and line where Triton's carry theirs
(``I1130 12:00:00.000000 4242 app.py:17] "text"``).

Threads: settings change from frontends and the API at any time; ``_lock`` serialises
changes; logging itself is thread-safe.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import InvalidArgumentError
from ..log_settings import LogLevel, LogSettings

__all__ = ["LogSettingsManager", "TritonFormatter", "log_enabled", "log_message",
           "triton_formatter", "triton_handler"]

_ROOT = "infercore"
ESCAPE_VARIABLE = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"

# JSON string escaping as rapidjson writes it (upper-case hex for other control characters)
_ESCAPES = {**{code: f"\\u{code:04X}" for code in range(0x20)},
            ord('"'): '\\"', ord("\\"): "\\\\", ord("\b"): "\\b", ord("\f"): "\\f",
            ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


class TritonFormatter(logging.Formatter):
    """Records as Triton's log lines, in the format ``log_format`` names."""

    def __init__(self, log_format: str = "default") -> None:
        super().__init__()
        self.log_format = log_format
        self.escape = os.environ.get(ESCAPE_VARIABLE) != "0"

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message}\n{record.exc_text}"
        if self.escape and not message.startswith("\n"):
            message = '"' + message.translate(_ESCAPES) + '"'
        level = "E" if record.levelno >= logging.ERROR else (
            "W" if record.levelno >= logging.WARNING else "I")
        where = f"{record.process} {record.filename}:{record.lineno}]"
        if self.log_format == "ISO8601":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            return f"{stamp} {level} {where} {message}"
        seconds = int(record.created)
        micros = min(999_999, round((record.created - seconds) * 1_000_000))
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(seconds))
        return f"{level}{stamp}.{micros:06d} {where} {message}"


class _Switches(logging.Filter):
    """Each severity on its own switch (the logger's level holds only the lowest one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        settings = _active
        if settings is None:
            return True
        if record.levelno >= logging.ERROR:
            return settings.log_error
        if record.levelno >= logging.WARNING:
            return settings.log_warning
        if record.levelno >= logging.INFO:
            return settings.log_info
        return settings.log_verbose_level >= 1


_FORMATTER = TritonFormatter()
_SWITCHES = _Switches()


def triton_formatter() -> TritonFormatter:
    """The process's formatter (its format follows the server's log_format setting)."""
    return _FORMATTER


def triton_handler(handler: logging.Handler) -> logging.Handler:
    """``handler`` writing Triton's lines, with the server's switches applied."""
    handler.setFormatter(_FORMATTER)
    handler.addFilter(_SWITCHES)
    return handler


class LogSettingsManager:
    """Holds the current LogSettings and applies them to the ``infercore`` logger."""

    def __init__(self, settings: LogSettings | None = None) -> None:
        self._lock = threading.Lock()
        self._handler: logging.Handler | None = None
        settings = settings or LogSettings()
        try:
            self._apply(settings)
        except InvalidArgumentError as exc:
            # tritonserver keeps logging where it did when it cannot open --log-file
            settings = replace(settings, log_file="")
            self._apply(settings)
            logging.getLogger(__name__).warning("%s; logging to standard error", exc.message)
        self._settings = settings

    @property
    def settings(self) -> LogSettings:
        return self._settings

    def update(self, changes: Mapping[str, Any]) -> LogSettings:
        """Change some settings (Triton's names); unknown names or bad values raise, and
        then nothing changes."""
        with self._lock:
            updated = self._settings.changed(changes)
            self._apply(updated)
            self._settings = updated
        return updated

    def _apply(self, settings: LogSettings) -> None:
        """Make ``settings`` the logger's; a log file that cannot be opened raises first."""
        global _active
        logger = logging.getLogger(_ROOT)
        handler: logging.Handler | None = None
        if settings.log_file and (self._handler is None
                                  or settings.log_file != self._settings.log_file):
            try:
                handler = logging.FileHandler(settings.log_file)
            except OSError as exc:
                raise InvalidArgumentError(
                    f"failed to open log file '{settings.log_file}': {exc}") from exc
            triton_handler(handler)
        logger.setLevel(settings.level)
        _FORMATTER.log_format = settings.log_format
        _active = settings
        if not settings.log_file:
            # Without a log file, records propagate to the application's handlers.
            self._remove_handler(logger)
        elif handler is not None:
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
