"""Tracing (Triton's trace extension): settings, sampling, and where traces go.

``TraceSettingsStore`` (trace_settings.py, with ``TraceConfig`` and the ``--trace-config``
parser) keeps the settings the trace APIs read and change. ``Tracer`` (one per server)
turns them into sampling: each model holds a ``ModelTracer`` whose ``on`` flag is the only
thing a request checks when tracing is off. A sampled request gets a
``trace_record.Trace``; when its trace is complete the group goes to a Triton trace file or
to OpenTelemetry (trace_export.py; without the OpenTelemetry SDK, opentelemetry mode
traces nothing and says so in the log, the server starts as tritonserver does).

Sampling follows Triton's TraceSetting: every ``trace_rate``-th request of a scope is
traced while ``trace_count`` (-1: unlimited) lasts; a scope is the global settings, or a
model's own once it overrides any of them. A scope traces nothing when the level is OFF,
the rate or the count is 0, or (triton mode) no file is set. Updating settings starts new
scopes (and counters); the old ones write what they collected once their traces finish.
``log_frequency`` N writes every N traces to ``<file>.<index>``; 0 writes one array to
``<file>`` when the server stops. A scope whose ``trace_count`` runs out writes its traces
to ``<file>.<index>`` at once. ``trace_count`` reads back as what remains.

Threads: frontends and the API read and update settings at any time; requests sample
from any thread (each scope's ``_lock`` guards its counters); traces finish on whichever
thread completes them.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping
from typing import Any

from ..clock import Clock, MonotonicClock
from ..errors import UnavailableError
from ..trace_settings import OTEL_DEFAULT_URL, TraceConfig, TraceSettingsStore, parse_trace_config
from .trace_export import OtelExporter, TraceFile
from .trace_record import Trace

__all__ = ["ModelTracer", "TraceConfig", "TraceSettingsStore", "Tracer",
           "parse_trace_config"]

logger = logging.getLogger(__name__)


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
        self.log_frequency = int(settings.get("log_frequency", "0"))
        self.mode = settings["trace_mode"]
        self.file = file
        self.otel = otel if self.mode == "opentelemetry" else None
        self.enabled = (levels != ["OFF"] and self.rate > 0
                        and (self.otel if self.mode == "opentelemetry" else file) is not None)
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

    def now_ns(self) -> int:
        return self._tracer.now_ns()

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
            exhausted = self.count == 0 and not self._live
            flush = ((self.log_frequency and len(self._stream) >= self.log_frequency)
                     or exhausted or (self._retired and not self._live))
            groups, self._stream = (self._stream, []) if flush else ([], self._stream)
        if groups:
            # Triton writes the traces a count ran out on to the next <file>.<index>, as
            # it does a log_frequency batch, so they are on disk while the server runs
            self.file.write(groups, indexed=self.log_frequency != 0 or exhausted)

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

    def __init__(self, config: TraceConfig | None = None, *,
                 clock: Clock | None = None) -> None:
        self.config = config or TraceConfig()
        self._clock = clock  # the engine's (Options.clock), for OpenTelemetry's wall times
        self.store = TraceSettingsStore(self.config.settings())
        self._lock = threading.Lock()  # guards the maps below and rebuilding scopes
        self._models: dict[str, ModelTracer] = {}
        self._scopes: dict[str, _Scope] = {}  # "" global, else model name
        self._retiring: list[_Scope] = []  # replaced scopes whose traces still run
        self._files: dict[str, TraceFile] = {}
        self._otel: OtelExporter | None = None
        self._ids = itertools.count(1)
        self._closed = False
        # Whether some scope may sample: frontends stamp what they receive only then.
        self.active = False
        self.now_ns = (clock or MonotonicClock()).now_ns  # the clock of every trace stamp
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
                self.active = self.active or tracer.on
            return tracer

    def refused(self, model: str, stamps: list[tuple[str, int]]) -> None:
        """A request for ``model`` (a model the server has) that a frontend refused before
        it reached the model: sampled as Triton's HTTP frontend samples every request it
        starts, and written with the frontend's timestamps only."""
        trace = self.for_model(model).sample()
        if trace is not None:
            trace.refused(stamps)

    def _rebuild(self) -> None:
        with self._lock:
            if self._closed:
                return
            old, self._scopes = self._scopes, {}
            for name, tracer in self._models.items():
                tracer._use(self._scope_for(name))
            self._scope_for("")
            self._retiring = [s for s in self._retiring if not s.idle] + list(old.values())
            self.active = any(scope.valid for scope in self._scopes.values())
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
        path = settings.get("trace_file", "")
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
            try:
                self._otel = OtelExporter(config.url or OTEL_DEFAULT_URL, config.resource,
                                          config.batch, self._clock)
            except UnavailableError as exc:
                # tritonserver starts whatever becomes of its exports: so does infercore,
                # tracing nothing
                logger.error("%s", exc.message)
        return self._otel

    def close(self) -> None:
        """Write every trace (unfinished ones as they are), close files, flush spans."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.active = False
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
