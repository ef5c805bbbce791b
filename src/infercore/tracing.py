"""Trace settings (Triton's trace extension): global values and per-model overrides.

This module keeps and validates the settings that the trace APIs read and change, with
Triton's names and string-valued JSON (trace_level is a list). Recording traces with these
settings (timestamps, trace files, OpenTelemetry) is the observability issue's work; until
then the settings are stored and reported, and no trace is written.

Threads: frontends and the API read and update at any time; ``_lock`` guards both maps.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["TraceSettingsStore"]

_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
_DEFAULTS: dict[str, Any] = {
    "trace_file": "",
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_mode": "triton",
}


def _validate(key: str, value: Any) -> Any:
    if key not in _DEFAULTS:
        raise InvalidArgumentError(f"unknown trace setting '{key}'")
    if key == "trace_level":
        levels = [value] if isinstance(value, str) else value
        if not isinstance(levels, list) or not levels:
            raise InvalidArgumentError("trace_level must be a non-empty list of levels")
        for level in levels:
            if level not in _LEVELS:
                raise InvalidArgumentError(
                    f"invalid trace level '{level}', expected one of {', '.join(_LEVELS)}")
        if "OFF" in levels and len(levels) > 1:
            raise InvalidArgumentError("trace level OFF cannot be combined with other levels")
        return list(levels)
    if key in ("trace_rate", "trace_count", "log_frequency"):
        try:
            number = int(str(value))
        except ValueError:
            raise InvalidArgumentError(f"{key} must be an integer, got '{value}'") from None
        minimum = -1 if key == "trace_count" else 0
        if number < minimum:
            raise InvalidArgumentError(f"{key} must be >= {minimum}, got {number}")
        return str(number)
    if key == "trace_mode":
        if value not in ("triton", "opentelemetry"):
            raise InvalidArgumentError(f"invalid trace mode '{value}'")
        return value
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{key} must be a string")
    return value


class TraceSettingsStore:
    """Global trace settings plus per-model overrides, as Triton's trace API exposes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._global: dict[str, Any] = dict(_DEFAULTS)
        self._models: dict[str, dict[str, Any]] = {}

    def get(self, model: str = "") -> dict[str, Any]:
        """The settings in force for ``model`` ("" for the global ones)."""
        with self._lock:
            settings = dict(self._global)
            if model:
                settings.update(self._models.get(model, {}))
            settings["trace_level"] = list(settings["trace_level"])
            return settings

    def update(self, changes: Mapping[str, Any], model: str = "") -> dict[str, Any]:
        """Apply ``changes``; a None value clears a model's override (or resets a global)."""
        validated = {key: (None if value is None else _validate(key, value))
                     for key, value in changes.items()}
        for key in validated:
            if key not in _DEFAULTS:
                raise InvalidArgumentError(f"unknown trace setting '{key}'")
        with self._lock:
            target = self._models.setdefault(model, {}) if model else self._global
            for key, value in validated.items():
                if value is None:
                    if model:
                        target.pop(key, None)
                    else:
                        target[key] = _DEFAULTS[key]
                else:
                    target[key] = value
        return self.get(model)
