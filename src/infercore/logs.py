"""Log settings (Triton's logging extension) applied to Python's logging.

Every infercore logger sits under the ``infercore`` logger (model code logs through
``infercore.model``), so one level and one handler on that logger implement Triton's
switches: log_info / log_warning / log_error enable those severities, log_verbose_level > 0
enables DEBUG, log_file sends records to that file only (empty: records propagate to the
application's handlers, standard error under ``infercore serve``), log_format is "default"
(Triton's glog-like prefix) or "ISO8601".

Threads: settings change from frontends and the API at any time; ``_lock`` serialises
changes; logging itself is thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["LOG_FORMATS", "LogSettings", "LogSettingsManager"]

_ROOT = "infercore"
LOG_FORMATS = {
    "default": ("%(levelname).1s%(asctime)s.%(msecs)03d %(process)d %(name)s] %(message)s",
                "%m%d %H:%M:%S"),
    "ISO8601": ("%(asctime)s %(levelname).1s %(process)d %(name)s] %(message)s",
                "%Y-%m-%dT%H:%M:%SZ"),
}


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
        logger = logging.getLogger(_ROOT)
        logger.setLevel(settings.level)
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
        with self._lock:
            self._remove_handler(logging.getLogger(_ROOT))
