"""Trace settings as tritonserver reads, checks and shows them (a value module).

``TraceConfig`` is tracing as the server starts with it; ``parse_trace_config`` reads
tritonserver's ``--trace-config`` values into one (``parse_trace_item`` checks a single
value, for the command line). ``TraceSettingsStore`` holds the settings the trace APIs
read and change, with Triton's names and string values (trace_level is a list): global
values plus per-model ones.

Triton's rules, as 2.51 answers them:
- numbers are read as ``std::stoi`` reads them (leading blanks, a sign, digits, the rest
  ignored; past int32 is out of range); rate and log frequency are unsigned 32-bit, so
  a negative one wraps ("-1" is 4294967295); a count below -1 is refused by the APIs but
  taken from the command line;
- a level list is read name by name: TIMESTAMPS and TENSORS add to the level, OFF must be
  alone, any other name is ignored, and a list naming no level changes nothing;
- a setting is refused if, once applied, tracing is on but cannot trace: a rate of 0
  ("sample rate must be non-zero"), no file in triton mode ("trace file name is not
  given"), or a count of 0 (Triton gives no reason);
- a cleared global setting goes back to its start-up value, a cleared model setting
  follows the global one again; a model left with none of its own follows them all;
- the settings read back depend on the mode: triton mode shows log_frequency and
  trace_file (and any other ``triton,<setting>`` given), opentelemetry mode its url (if
  given), the resources given and the batch span processor's settings.

Threads: ``_lock`` guards both maps of the store; the APIs read and update at any time.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["OTEL_DEFAULT_URL", "TraceConfig", "TraceSettingsStore", "option_int",
           "parse_trace_config", "parse_trace_item", "parse_trace_level", "stoi"]

OTEL_DEFAULT_URL = "http://localhost:4318/v1/traces"
_LEVELS = ("TIMESTAMPS", "TENSORS")  # the order levels read back in (Triton's bits)
_MODES = ("triton", "opentelemetry")
_UPDATABLE = ("trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file")
_OTEL_BATCH = {"bsp_max_queue_size": 2048, "bsp_schedule_delay": 5000,
               "bsp_max_export_batch_size": 512}
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_UINT32_MAX = (1 << 32) - 1
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def stoi(text: str) -> int:
    """``text`` as ``std::stoi`` reads it: ValueError without a number, OverflowError
    past int32."""
    match = _STOI.match(text)
    if match is None:
        raise ValueError(text)
    value = int(match.group(1))
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise OverflowError(text)
    return value


def option_int(text: str) -> int:
    """A number of a tritonserver option (read by std::stoi), with its wording for a bad
    one."""
    try:
        return stoi(text)
    except ValueError:
        raise InvalidArgumentError(f"Invalid option value. Got {text}") from None
    except OverflowError:
        raise InvalidArgumentError(
            f"Provided option value is out of bound. Got {text}") from None


def parse_trace_level(text: str) -> str:
    """A level of ``--trace-level`` or ``--trace-config level=``; OFF, TIMESTAMPS, TENSORS."""
    lowered = text.lower()
    if lowered in ("false", "off"):
        return "OFF"
    if lowered in ("true", "on", "min", "max", "timestamps"):
        return "TIMESTAMPS"
    if lowered == "tensors":
        return "TENSORS"
    raise InvalidArgumentError(f"invalid value for trace level option: {lowered}")


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """Tracing as the server starts with it (tritonserver's ``--trace-config``)."""

    level: tuple[str, ...] = ("OFF",)
    rate: int = 1000
    count: int = -1
    mode: str = "triton"
    file: str = ""
    log_frequency: int = 0
    # opentelemetry mode: the OTLP/HTTP endpoint ("": OTEL_DEFAULT_URL), resource
    # attributes, batch span processor settings
    url: str = ""
    resource: Mapping[str, str] = field(default_factory=dict)
    batch: Mapping[str, int] = field(default_factory=dict)
    # settings given for a mode that tracing does not use ({"triton": {"speed": "3"}}):
    # tritonserver keeps them and shows them with the settings
    extra: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        level = (self.level,) if isinstance(self.level, str) else self.level
        if not isinstance(level, (list, tuple)) or not level or not all(
                name in ("OFF", *_LEVELS) for name in level):
            raise InvalidArgumentError(
                f"trace level must be a list of OFF, TIMESTAMPS, TENSORS, got {self.level!r}")
        named = {name for name in level if name != "OFF"}
        object.__setattr__(self, "level", tuple(n for n in _LEVELS if n in named) or ("OFF",))
        for name, low, high in (("rate", 0, _UINT32_MAX), ("count", _INT32_MIN, _INT32_MAX),
                                ("log_frequency", 0, _UINT32_MAX)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgumentError(
                    f"trace {name} must be an integer in [{low}, {high}], got {value!r}")
        if self.mode not in _MODES:
            raise InvalidArgumentError(
                f"invalid trace mode {self.mode!r}, expected triton or opentelemetry")
        for name in ("file", "url"):
            if not isinstance(getattr(self, name), str):
                raise InvalidArgumentError(f"trace {name} must be a string")
        if not isinstance(self.resource, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.resource.items()):
            raise InvalidArgumentError(
                f"trace resource attributes must map strings to strings, got {self.resource!r}")
        if not isinstance(self.batch, Mapping):
            raise InvalidArgumentError(f"trace batch settings must be a dict, got "
                                       f"{self.batch!r}")
        for key, value in self.batch.items():
            if key not in _OTEL_BATCH:
                raise InvalidArgumentError(
                    f"unknown OpenTelemetry batch setting '{key}', expected one of "
                    + ", ".join(_OTEL_BATCH))
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgumentError(f"{key} must be a positive integer, got {value!r}")
        if not isinstance(self.extra, Mapping) or not all(
                mode in _MODES and isinstance(settings, Mapping)
                for mode, settings in self.extra.items()):
            raise InvalidArgumentError(
                f"extra trace settings must map a mode to settings, got {self.extra!r}")

    def settings(self) -> dict[str, Any]:
        """The start-up trace settings, as the trace APIs show them."""
        shown: dict[str, Any] = {"trace_level": list(self.level), "trace_rate": str(self.rate),
                                 "trace_count": str(self.count), "trace_mode": self.mode}
        if self.mode == "triton":
            shown.update(log_frequency=str(self.log_frequency), trace_file=self.file)
        else:
            if self.url:
                shown["url"] = self.url
            if self.resource:  # each one given (HTTP's JSON repeats the key)
                shown["resource"] = [f"{key}={value}" for key, value in self.resource.items()]
            shown.update({key: str(self.batch.get(key, default))
                          for key, default in _OTEL_BATCH.items()})
        shown.update(self.extra.get(self.mode, {}))
        return shown


def parse_trace_item(item: str) -> tuple[str, str, Any]:
    """One ``--trace-config`` value -> (mode, setting, value), mode "" for the global
    settings; numbers are read, levels and modes named as TraceConfig names them."""
    mode, comma, setting = item.partition(",")
    if not comma:
        mode, setting = "", item
    key, equals, value = setting.partition("=")
    if not key or not value:
        raise InvalidArgumentError("--trace-config option format is '<trace mode>,"
                                   f"<setting>=<value>'. Got {item}")
    if mode and mode.lower() not in _MODES:
        raise InvalidArgumentError(_bad_mode(mode))
    mode = mode.lower()
    if mode == "":
        if key == "level":
            return mode, key, parse_trace_level(value)
        if key in ("rate", "count"):
            return mode, key, option_int(value)
        if key == "mode":
            if value.lower() not in _MODES:
                raise InvalidArgumentError(_bad_mode(value))
            return mode, key, value.lower()
        return mode, key, value  # a global setting tritonserver ignores
    if mode == "triton" and key == "log-frequency":
        return mode, key, option_int(value)
    if mode == "opentelemetry" and key in _OTEL_BATCH:
        return mode, key, option_int(value)
    return mode, key, value


def _bad_mode(mode: str) -> str:
    return (f"invalid value for trace mode option: {mode}. Available options are "
            '"triton" and "opentelemetry"')


def parse_trace_config(items: Iterable[str]) -> TraceConfig:
    """tritonserver's ``--trace-config`` values -> TraceConfig; a later value of a setting
    wins, levels add up (OFF adds nothing).

    ``<setting>=<value>`` for the global settings (level, rate, count, mode),
    ``triton,<setting>=<value>`` (file, log-frequency) and
    ``opentelemetry,<setting>=<value>`` (url, resource=<key>=<value> (repeatable),
    bsp_max_queue_size, bsp_schedule_delay, bsp_max_export_batch_size).
    """
    values: dict[str, Any] = {}
    levels: set[str] = set()
    resource: dict[str, str] = {}
    batch: dict[str, int] = {}
    extra: dict[str, dict[str, str]] = {}
    for item in items:
        mode, key, value = parse_trace_item(item)
        if mode == "":
            if key == "level":
                levels.add(value)
            elif key == "rate":
                values["rate"] = value & _UINT32_MAX
            elif key in ("count", "mode"):
                values[key] = value
        elif mode == "triton" and key == "file":
            values["file"] = value
        elif mode == "triton" and key == "log-frequency":
            values["log_frequency"] = value & _UINT32_MAX
        elif mode == "opentelemetry" and key == "url":
            values["url"] = value
        elif mode == "opentelemetry" and key == "resource":
            name, _, attribute = value.partition("=")
            resource[name] = attribute
        elif mode == "opentelemetry" and key in _OTEL_BATCH:
            batch[key] = value
        else:
            extra.setdefault(mode, {})[key] = value
    levels.discard("OFF")
    return TraceConfig(level=tuple(levels) or ("OFF",), resource=resource, batch=batch,
                       extra=extra, **values)


# -- the settings the trace APIs change --------------------------------------------------------
def _number(key: str, value: Any) -> str:
    """A trace number from the APIs (a string, as Triton's JSON carries it)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{key} must be a string, got {type(value).__name__}")
    count = key == "trace_count"
    try:
        number = stoi(value)
    except ValueError:
        raise InvalidArgumentError(f"Unable to parse '{key}', got: {value}") from None
    except OverflowError:
        bounds = "[ -1, 2147483647 ]" if count else f"[ 0, {_UINT32_MAX} ]"
        raise InvalidArgumentError(
            f"Unable to parse '{key}', value is out of range {bounds}, got: {value}") from None
    if count:
        if number < -1:
            raise InvalidArgumentError(
                f"Unable to parse 'trace_count'. Expecting value >= -1, got: {value}")
        return str(number)
    return str(number & _UINT32_MAX)


def _levels(value: Any) -> list[str] | None:
    """A level list read as Triton reads it; None when it names no level."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError("trace_level must be a list of level names")
    levels: set[str] | None = None
    for name in names:
        if name == "OFF":
            if len(names) != 1:
                raise InvalidArgumentError("Expect only one trace level 'OFF' is specified")
            levels = set()
        elif name in _LEVELS:
            levels = (levels or set()) | {name}
    if levels is None:
        return None
    return [name for name in _LEVELS if name in levels] or ["OFF"]


def _checked(key: str, value: Any) -> Any:
    if key not in _UPDATABLE:
        raise InvalidArgumentError(f"unknown trace setting '{key}'")
    if key == "trace_level":
        return _levels(value)
    if key == "trace_file":
        if not isinstance(value, str):
            raise InvalidArgumentError("trace_file must be a string")
        return value
    return _number(key, value)


def _invalid_reason(settings: Mapping[str, Any]) -> str | None:
    """Why tracing on with ``settings`` could not trace (None: it can, or it is off)."""
    if settings["trace_level"] == ["OFF"]:
        return None
    if settings["trace_rate"] == "0":
        return "sample rate must be non-zero"
    if settings["trace_mode"] == "triton" and not settings.get("trace_file"):
        return "trace file name is not given"
    if settings["trace_count"] == "0":
        return ""
    return None


class TraceSettingsStore:
    """Global trace settings plus per-model ones, as Triton's trace API exposes them."""

    def __init__(self, initial: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        # what a cleared global setting goes back to
        self._initial = dict(initial) if initial else TraceConfig().settings()
        self._global = dict(self._initial)
        self._models: dict[str, dict[str, Any]] = {}

    def get(self, model: str = "") -> dict[str, Any]:
        """The settings in force for ``model`` ("" for the global ones)."""
        with self._lock:
            return self._merged(model, self._models.get(model, {}) if model else self._global)

    def _merged(self, model: str, own: Mapping[str, Any]) -> dict[str, Any]:
        settings = dict(self._global)
        if model:
            settings.update(own)
        else:
            settings = dict(own)
        settings["trace_level"] = list(settings["trace_level"])
        return settings

    def update(self, changes: Mapping[str, Any], model: str = "") -> dict[str, Any]:
        """Apply ``changes`` (all or none); a None value clears a setting."""
        checked: dict[str, Any] = {}
        for key, value in changes.items():
            if value is None:
                if key not in _UPDATABLE:
                    raise InvalidArgumentError(f"unknown trace setting '{key}'")
                checked[key] = None
                continue
            setting = _checked(key, value)
            if setting is not None:  # None: a level list that names no level
                checked[key] = setting
        with self._lock:
            own = dict(self._models.get(model, {}) if model else self._global)
            for key, value in checked.items():
                if value is not None:
                    own[key] = value
                elif model or key not in self._initial:
                    own.pop(key, None)
                else:
                    own[key] = self._initial[key]
            reason = _invalid_reason(self._merged(model, own))
            if reason is not None:
                raise InvalidArgumentError(f"Attempting to set invalid trace setting :{reason}")
            if not model:
                self._global = own
            elif own:
                self._models[model] = own
            else:
                self._models.pop(model, None)  # nothing of its own: it follows the global
        return self.get(model)

    def overrides(self, model: str) -> frozenset[str]:
        """The settings ``model`` sets itself."""
        with self._lock:
            return frozenset(self._models.get(model, ()))

    def set_remaining_count(self, model: str, count: int) -> None:
        """Report what remains of trace_count where it was set (``model`` or global)."""
        with self._lock:
            target = self._models.get(model) if model else self._global
            if target is not None:
                target["trace_count"] = str(count)
