"""Tracing (Triton's trace extension): settings, sampling, and where traces go.

``TraceSettingsStore`` keeps the settings the trace APIs read and change, with Triton's
names and string-valued JSON (trace_level is a list): global values plus per-model
overrides. ``Tracer`` (one per server) turns them into sampling: each model holds a
``ModelTracer`` whose ``on`` flag is the only thing a request checks when tracing is off.
A sampled request gets a ``trace_record.Trace``; when its trace is complete the group
goes to a Triton trace file or to OpenTelemetry (trace_export.py).

Sampling follows Triton's TraceSetting: every ``trace_rate``-th request of a scope is
traced while ``trace_count`` (-1: unlimited) lasts; a scope is the global settings, or a
model's own once it overrides any of them. A scope traces nothing when the level is OFF,
the rate is 0, or (triton mode) no file is set. Updating settings starts new scopes (and
counters); the old ones write what they collected once their traces finish.
``log_frequency`` N writes every N traces to ``<file>.<index>``; 0 writes one array to
``<file>`` when the server stops. ``trace_count`` reads back as what remains.

``--trace-config`` flags (tritonserver's syntax) become a ``TraceConfig`` through
``parse_trace_config``.

Threads: frontends and the API read and update settings at any time (``_lock`` guards
both maps of the store); requests sample from any thread (each scope's ``_lock`` guards
its counters); traces finish on whichever thread completes them.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgumentError
from .trace_export import OtelExporter, TraceFile
from .trace_record import Trace

__all__ = ["ModelTracer", "TraceConfig", "TraceSettingsStore", "Tracer",
           "parse_trace_config"]

logger = logging.getLogger(__name__)

_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
_DEFAULTS: dict[str, Any] = {
    "trace_file": "",
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_mode": "triton",
}
_OTEL_BATCH = ("bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size")


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """Tracing as the server starts with it (tritonserver's ``--trace-config``)."""

    level: tuple[str, ...] = ("OFF",)
    rate: int = 1000
    count: int = -1
    mode: str = "triton"
    file: str = ""
    log_frequency: int = 0
    # opentelemetry mode: the OTLP/HTTP endpoint, resource attributes, batch processor
    url: str = "http://localhost:4318/v1/traces"
    resource: Mapping[str, str] = field(default_factory=dict)
    batch: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.level, str):  # level="TIMESTAMPS" means ("TIMESTAMPS",)
            object.__setattr__(self, "level", (self.level,))
        elif isinstance(self.level, (list, tuple)):
            object.__setattr__(self, "level", tuple(self.level))
        else:
            raise InvalidArgumentError(f"trace level must be a list of levels, got "
                                       f"{self.level!r}")
        for name in ("rate", "count", "log_frequency"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgumentError(f"trace {name} must be an integer, got {value!r}")
        settings = self.settings()
        for key, value in settings.items():
            _validate(key, value)
        if not isinstance(self.url, str) or not self.url:
            raise InvalidArgumentError(f"the OpenTelemetry url must be a string, got "
                                       f"{self.url!r}")
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

    def settings(self) -> dict[str, Any]:
        """The initial trace settings, in the trace API's names and shapes."""
        return {"trace_file": self.file, "trace_level": list(self.level),
                "trace_rate": str(self.rate), "trace_count": str(self.count),
                "log_frequency": str(self.log_frequency), "trace_mode": self.mode}


def parse_trace_config(items: Iterable[str]) -> TraceConfig:
    """tritonserver's ``--trace-config`` values -> TraceConfig.

    ``<setting>=<value>`` for the global settings (level, rate, count, mode; level may
    repeat), ``triton,<setting>=<value>`` (file, log-frequency) and
    ``opentelemetry,<setting>=<value>`` (url, resource=<key>=<value> (repeatable),
    bsp_max_queue_size, bsp_schedule_delay, bsp_max_export_batch_size).
    """
    values: dict[str, Any] = {}
    levels: list[str] = []
    resource: dict[str, str] = {}
    batch: dict[str, int] = {}
    for item in items:
        mode, comma, setting = item.partition(",")
        if not comma:
            mode, setting = "", item
        key, equals, value = setting.partition("=")
        if not equals or not key:
            raise InvalidArgumentError(
                f"invalid --trace-config '{item}', expected [<mode>,]<setting>=<value>")
        if mode == "":
            if key == "level":
                levels.append(value.upper())
            elif key in ("rate", "count"):
                values[key] = _int(item, value)
            elif key == "mode":
                values["mode"] = value
            else:
                raise InvalidArgumentError(f"unknown global trace setting '{key}' in '{item}'")
        elif mode == "triton":
            if key == "file":
                values["file"] = value
            elif key == "log-frequency":
                values["log_frequency"] = _int(item, value)
            else:
                raise InvalidArgumentError(f"unknown triton trace setting '{key}' in '{item}'")
        elif mode == "opentelemetry":
            if key == "url":
                values["url"] = value
            elif key == "resource":
                name, eq, attribute = value.partition("=")
                if not eq or not name:
                    raise InvalidArgumentError(
                        f"invalid resource in '{item}', expected resource=<key>=<value>")
                resource[name] = attribute
            elif key in _OTEL_BATCH:
                batch[key] = _int(item, value)
            else:
                raise InvalidArgumentError(
                    f"unknown opentelemetry trace setting '{key}' in '{item}'")
        else:
            raise InvalidArgumentError(
                f"invalid trace mode '{mode}' in '{item}', expected triton or opentelemetry")
    if levels:
        # "level=OFF" alongside others means the others (Triton ORs the level bits).
        named = [level for level in levels if level != "OFF"]
        values["level"] = tuple(dict.fromkeys(named)) or ("OFF",)
    return TraceConfig(resource=resource, batch=batch, **values)


def _int(item: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"invalid integer in --trace-config '{item}'") from None


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

    def __init__(self, initial: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._global: dict[str, Any] = dict(_DEFAULTS)
        if initial:
            self._global.update({k: _validate(k, v) for k, v in initial.items()})
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


class _Scope:
    """One settings snapshot with its counters (Triton's TraceSetting); a TraceScope."""

    def __init__(self, tracer: Tracer, owner: str | None, settings: Mapping[str, Any],
                 file: TraceFile | None, otel: OtelExporter | None) -> None:
        self._tracer = tracer
        # where trace_count was set ("" global, a model name), None: a copy of the global
        self.owner = owner
        levels = settings["trace_level"]
        self.timestamps = "TIMESTAMPS" in levels
        self.tensors = "TENSORS" in levels
        self.rate = int(settings["trace_rate"])
        self.count = int(settings["trace_count"])
        self.log_frequency = int(settings["log_frequency"])
        self.mode = settings["trace_mode"]
        self.file = file
        self.otel = otel if self.mode == "opentelemetry" else None
        self.enabled = (levels != ["OFF"] and self.rate > 0
                        and (self.mode == "opentelemetry" or file is not None))
        self.users: list[ModelTracer] = []
        self._lock = threading.Lock()
        self._sampled = 0
        self._live: set[Trace] = set()  # sampled, not yet collected
        self._stream: list[list[str]] = []  # collected, not yet written
        self._retired = False

    @property
    def valid(self) -> bool:
        return self.enabled and self.count != 0

    @property
    def idle(self) -> bool:
        return not self._live

    def next_id(self) -> int:
        return self._tracer.next_id()

    def sample(self) -> Trace | None:
        with self._lock:
            if self.count == 0 or self._retired:
                return None
            self._sampled += 1
            if self._sampled % self.rate:
                return None
            exhausted = False
            if self.count > 0:
                self.count -= 1
                exhausted = self.count == 0
                if self.owner is not None:
                    self._tracer.store.set_remaining_count(self.owner, self.count)
            trace = Trace(self)
            self._live.add(trace)
        if exhausted:
            for user in self.users:
                user.on = False
        return trace

    def collect(self, root: Trace, records: list[str]) -> None:
        """A finished group (a client request's trace and its children's)."""
        with self._lock:
            self._live.discard(root)
            if self.file is None:  # opentelemetry: spans are already on their way
                return
            self._stream.append(records)
            flush = ((self.log_frequency and len(self._stream) >= self.log_frequency)
                     or (self.count == 0 and not self._live) or (self._retired
                                                                 and not self._live))
            groups, self._stream = (self._stream, []) if flush else ([], self._stream)
        if groups:
            self.file.write(groups, indexed=self.log_frequency != 0)

    def retire(self, *, stopping: bool = False) -> None:
        """Settings changed (or the server stops): write what is collected now, or once the
        traces still running finish. Stopping writes unfinished ones as they are."""
        with self._lock:
            self._retired = True
            live = list(self._live) if stopping else []
            if stopping:
                self._live.clear()
            if self._live:
                return  # the last collect writes
            groups, self._stream = self._stream, []
        groups += [trace.group(partial=True) for trace in live]
        if groups and self.file is not None:
            self.file.write(groups, indexed=self.log_frequency != 0)


class ModelTracer:
    """A model's view of tracing: ``on`` is read by every request of the model."""

    __slots__ = ("name", "on", "_scope")

    def __init__(self, name: str) -> None:
        self.name = name
        self.on = False
        self._scope: _Scope | None = None

    def sample(self) -> Trace | None:
        """A new trace if this request is sampled (the rate and count of its scope)."""
        scope = self._scope
        return None if scope is None else scope.sample()

    def _use(self, scope: _Scope) -> None:
        scope.users.append(self)
        self._scope = scope
        self.on = scope.valid


class Tracer:
    """A server's tracing: settings, the models' samplers, trace files, OpenTelemetry."""

    def __init__(self, config: TraceConfig | None = None) -> None:
        self.config = config or TraceConfig()
        self.store = TraceSettingsStore(self.config.settings())
        self._lock = threading.Lock()  # guards the maps below and rebuilding scopes
        self._models: dict[str, ModelTracer] = {}
        self._scopes: dict[str, _Scope] = {}  # "" global, else model name
        self._retiring: list[_Scope] = []  # replaced scopes whose traces still run
        self._files: dict[str, TraceFile] = {}
        self._otel: OtelExporter | None = None
        self._ids = itertools.count(1)
        self._closed = False
        self._rebuild()

    def next_id(self) -> int:
        return next(self._ids)  # atomic under the GIL

    # -- settings ----------------------------------------------------------------------
    def settings(self, model: str = "") -> dict[str, Any]:
        return self.store.get(model)

    def update(self, changes: Mapping[str, Any], model: str = "") -> dict[str, Any]:
        updated = self.store.update(changes, model)
        self._rebuild()
        return updated

    def for_model(self, name: str) -> ModelTracer:
        """The sampler every version of model ``name`` uses (kept across reloads)."""
        with self._lock:
            tracer = self._models.get(name)
            if tracer is None:
                tracer = self._models[name] = ModelTracer(name)
                tracer._use(self._scope_for(name))
            return tracer

    def _rebuild(self) -> None:
        with self._lock:
            if self._closed:
                return
            old, self._scopes = self._scopes, {}
            for name, tracer in self._models.items():
                tracer._use(self._scope_for(name))
            self._scope_for("")
            self._retiring = [s for s in self._retiring if not s.idle] + list(old.values())
        for scope in old.values():
            scope.retire()

    def _scope_for(self, model: str) -> _Scope:
        """The scope of ``model`` (lock held): its own once it overrides a setting."""
        key = model if model and self.store.overrides(model) else ""
        scope = self._scopes.get(key)
        if scope is None:
            settings = self.store.get(key)
            owner = "" if not key else key if "trace_count" in self.store.overrides(key) else None
            scope = self._scopes[key] = _Scope(self, owner, settings,
                                               self._file(settings), self._otel_for(settings))
        return scope

    def _file(self, settings: Mapping[str, Any]) -> TraceFile | None:
        path = settings["trace_file"]
        if settings["trace_mode"] != "triton" or not path:
            return None
        file = self._files.get(path)
        if file is None:
            file = self._files[path] = TraceFile(path)
        return file

    def _otel_for(self, settings: Mapping[str, Any]) -> OtelExporter | None:
        if settings["trace_mode"] != "opentelemetry" or settings["trace_level"] == ["OFF"]:
            return None
        if self._otel is None:
            config = self.config
            self._otel = OtelExporter(config.url, config.resource, config.batch)
        return self._otel

    def close(self) -> None:
        """Write every trace (unfinished ones as they are), close files, flush spans."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            scopes = self._retiring + list(self._scopes.values())
            self._scopes, self._retiring = {}, []
            for tracer in self._models.values():
                tracer.on = False
        for scope in scopes:
            scope.retire(stopping=True)
        for file in self._files.values():
            file.close()
        if self._otel is not None:
            self._otel.close()
