"""Prometheus metrics with Triton's names and labels, rendered at scrape time.

Nothing is counted for metrics on the hot path: ``ServerMetrics.render`` reads each loaded
model's statistics snapshot (stats.py, the single source) and turns it into Triton's
families, labelled ``model`` and ``version``:

    nv_inference_request_success / _failure{reason=REJECTED|CANCELED|BACKEND|OTHER}
    nv_inference_count, nv_inference_exec_count, nv_inference_pending_request_count
    nv_inference_{request,queue,compute_input,compute_infer,compute_output}_duration_us
        (counter_latencies, default on)
    nv_inference_{request,queue,compute_input,compute_infer,compute_output}_summary_us
        (summary_latencies=true; quantiles from stats' latency window)
    nv_inference_first_response_histogram_ms (histogram_latencies=true, decoupled models)
    nv_cache_{num_hits,num_misses,hit_duration,miss_duration}_per_model (models using the
        response cache, counter_latencies), nv_cache_{hit,miss}_summary_per_model
        (summary_latencies)

plus the families a model contributes beside Triton's (``LoadedModel.metric_families``,
e.g. ``infercore_ray_*`` per instance and node for instances on Ray, docs/ray.md): each
a ``ModelMetricFamily``, merged over models into one family per name and labelled
``model`` and ``version`` first; Triton's families are never changed by them.

plus ``nv_gpu_utilization``, ``nv_gpu_memory_{total,used}_bytes``,
``nv_gpu_power_{usage,limit}`` and ``nv_energy_consumption`` for each GPU the device layer
(infercore.devices) sees, labelled ``gpu_uuid``, and ``nv_cpu_utilization`` and
``nv_cpu_memory_{total,used}_bytes`` from /proc (Linux), each sampled at most once per
``metrics_interval`` when scraped, and the custom families (custom_metrics.py). Without a
GPU (or with ``gpu_metrics`` off) the GPU families are absent, as Triton's are.

The text comes from prometheus_client's exposition, with one correction: prometheus_client
follows OpenMetrics and names every counter family ``<name>_total`` in its HELP/TYPE
lines, while Triton's counters (``nv_inference_count``, ...) have no such suffix.
``render`` removes exactly the suffix prometheus_client added, so the output is Triton's.

Threads: ``render`` runs on any thread (the metrics endpoint's, an API caller's); it takes
each model's statistics lock briefly and the CPU and GPU samplers' locks.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric as PromMetric
from prometheus_client.utils import floatToGoString

from ..clock import MonotonicClock
from ..devices import Devices, GpuSample
from ..errors import TritonError
from ..metrics_settings import MetricsSettings
from ..stats import BACKEND, CANCELED, OTHER, REJECTED, Duration, ModelStatistics
from .custom_metrics import REGISTRY as CUSTOM_REGISTRY
from .custom_metrics import CustomMetricsRegistry

if TYPE_CHECKING:
    from ..model import LoadedModel

__all__ = ["ServerMetrics"]

logger = logging.getLogger(__name__)

# name, help, statistics field (durations are reported in microseconds)
_LATENCIES = (
    ("request", "Cumulative inference request duration in microseconds "
                "(includes cached requests)", "success"),
    ("queue", "Cumulative inference queuing duration in microseconds "
              "(includes cached requests)", "queue"),
    ("compute_input", "Cumulative compute input duration in microseconds "
                      "(does not include cached requests)", "compute_input"),
    ("compute_infer", "Cumulative compute inference duration in microseconds "
                      "(does not include cached requests)", "compute_infer"),
    ("compute_output", "Cumulative inference compute output duration in microseconds "
                       "(does not include cached requests)", "compute_output"),
)
_SUMMARY_HELP = {
    "request": "Summary of inference request duration in microseconds "
               "(includes cached requests)",
    "queue": "Summary of inference queuing duration in microseconds "
             "(includes cached requests)",
    "compute_input": "Summary of compute input duration in microseconds "
                     "(does not include cached requests)",
    "compute_infer": "Summary of compute inference duration in microseconds "
                     "(does not include cached requests)",
    "compute_output": "Summary of inference compute output duration in microseconds "
                      "(does not include cached requests)",
}

# Every family the server itself may emit: custom families cannot take these names.
BUILTIN_FAMILIES = (
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_pending_request_count",
    *(f"nv_inference_{name}_duration_us" for name, _, _ in _LATENCIES),
    *(f"nv_inference_{name}_summary_us" for name, _, _ in _LATENCIES),
    "nv_inference_first_response_histogram_ms",
    "nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model",
    "nv_cache_hit_duration_per_model", "nv_cache_miss_duration_per_model",
    "nv_cache_hit_summary_per_model", "nv_cache_miss_summary_per_model",
    "nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes",
    "nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption",
)
CUSTOM_REGISTRY.reserve(BUILTIN_FAMILIES)


class CpuSampler:
    """nv_cpu_* from /proc/stat and /proc/meminfo, re-read at most once per interval.

    Utilisation is busy/total jiffies between the two latest samples, as Triton computes
    it (busy: user, nice, system, irq, softirq, steal; idle: idle, iowait); used memory is
    MemTotal - MemAvailable.
    """

    def __init__(self, interval_ns: int, proc: Path = Path("/proc"),
                 clock: Callable[[], int] = MonotonicClock.now_ns) -> None:
        self._interval_ns = interval_ns
        self._proc = proc
        self._clock = clock
        self._lock = threading.Lock()
        self._times = self._read_times()
        self._sampled_ns = clock()
        self._values: tuple[float, int, int] | None = None

    @property
    def available(self) -> bool:
        return self._times is not None

    def values(self) -> tuple[float, int, int] | None:
        """(utilisation 0..1, total bytes, used bytes), or None off Linux."""
        with self._lock:
            now = self._clock()
            if self._values is None or now - self._sampled_ns >= self._interval_ns:
                self._refresh(now)
            return self._values

    def _refresh(self, now: int) -> None:
        times = self._read_times()
        memory = self._read_memory()
        if times is None or memory is None:
            self._values = None
            return
        utilisation = 0.0
        if self._times is not None:
            busy = times[0] - self._times[0]
            total = busy + times[1] - self._times[1]
            utilisation = busy / total if total > 0 else 0.0
        self._times, self._sampled_ns = times, now
        self._values = (utilisation, memory[0], memory[1])

    def _read_times(self) -> tuple[int, int] | None:
        try:
            line = (self._proc / "stat").read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        fields = line.split()
        if fields[0] != "cpu" or len(fields) < 9:
            return None
        user, nice, system, idle, iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
        return user + nice + system + irq + softirq + steal, idle + iowait

    def _read_memory(self) -> tuple[int, int] | None:
        try:
            text = (self._proc / "meminfo").read_text()
        except OSError:
            return None
        info = {}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                info[name] = int(parts[0]) * 1024
        if "MemTotal" not in info or "MemAvailable" not in info:
            return None
        return info["MemTotal"], info["MemTotal"] - info["MemAvailable"]


# Triton's GPU families (core src/metrics.cc): name, help, type, GpuSampler row field
_GPU_FAMILIES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge", "utilization"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge", "total_bytes"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge", "used_bytes"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "gauge", "power_watts"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge",
     "power_limit_watts"),
    ("nv_energy_consumption", "GPU energy consumption in joules since the Triton Server "
     "started", "counter", "energy_joules"),
)


@dataclass(slots=True)
class GpuRow:
    """One GPU's figures as the metrics report them (0 where the driver cannot say, as
    Triton reports them); ``energy_joules`` is the energy used since the first sample."""

    gpu: int
    uuid: str
    utilization: float = 0.0
    total_bytes: int = 0
    used_bytes: int = 0
    power_watts: float = 0.0
    power_limit_watts: float = 0.0
    energy_joules: float = 0.0
    last_energy: float | None = None  # the driver's running total at the previous sample


class GpuSampler:
    """nv_gpu_* from the device layer, re-read at most once per interval (as CpuSampler).

    The GPUs are counted at the first read (NVML starts then, not when the server is
    made). As Triton's: utilization, power and memory are the latest figures, 0 where the
    driver cannot give one; energy adds what the driver's running total grew by since the
    previous sample, so it starts at 0 and counts the energy used since the first sample.
    A GPU that cannot be read keeps its previous figures (a warning says why), and one
    never read yet is left out.
    """

    def __init__(self, devices: Devices, interval_ns: int,
                 clock: Callable[[], int] = MonotonicClock.now_ns) -> None:
        self._devices = devices
        self._interval_ns = interval_ns
        self._clock = clock
        self._lock = threading.Lock()
        self._count: int | None = None  # the GPUs, counted at the first read
        self._rows: dict[int, GpuRow] = {}  # by GPU, once it has been read
        self._sampled_ns = 0

    def values(self) -> list[GpuRow]:
        """Each GPU's figures, GPU 0 first; none on a host without GPUs."""
        with self._lock:
            now = self._clock()
            if self._count is None:
                self._count = self._devices.gpu_count()
                self._refresh(now)
            elif now - self._sampled_ns >= self._interval_ns:
                self._refresh(now)
            return list(self._rows.values())

    def _refresh(self, now: int) -> None:
        assert self._count is not None
        self._sampled_ns = now
        for gpu in range(self._count):
            try:
                sample = self._devices.sample(gpu)
                memory = self._devices.memory(gpu)
            except TritonError as exc:
                logger.warning("Unable to get field values for GPU ID %d: %s", gpu,
                               exc.message)
                continue
            row = self._rows.get(gpu)
            if row is None:
                logger.info("Collecting metrics for GPU %d: %s", gpu, sample.uuid)
                row = self._rows[gpu] = GpuRow(gpu, sample.uuid)
                self._rows = dict(sorted(self._rows.items()))
            _update(row, sample)
            row.total_bytes, row.used_bytes = memory.total_bytes, memory.used_bytes


def _update(row: GpuRow, sample: GpuSample) -> None:
    """One sample into ``row``, as Triton's PollDcgmMetrics takes one."""
    row.utilization = sample.utilization or 0.0
    row.power_watts = sample.power_watts or 0.0
    row.power_limit_watts = sample.power_limit_watts or 0.0
    energy = sample.energy_joules
    if energy is not None:
        if row.last_energy is not None:
            row.energy_joules += max(0.0, energy - row.last_energy)
        row.last_energy = energy


def _cache_enabled(model: LoadedModel) -> bool:
    """Whether ``model`` uses the response cache: only such models have the nv_cache_*
    families, and their request summary is left out, as Triton does."""
    return model.response_cache_enabled


class ServerMetrics:
    """A server's metrics: ``render()`` gives the Prometheus text."""

    def __init__(self, settings: MetricsSettings,
                 models: Callable[[], Sequence[LoadedModel]],
                 custom: CustomMetricsRegistry = CUSTOM_REGISTRY,
                 clock: Callable[[], int] = MonotonicClock.now_ns,
                 devices: Devices | None = None, pinned_pool_bytes: int = 0) -> None:
        self.settings = settings
        self._pinned_pool_bytes = pinned_pool_bytes
        self._models = models
        self._custom = custom
        self._clock = clock
        self._cpu = (CpuSampler(settings.interval_ms * 1_000_000, clock=clock)
                     if settings.enabled and settings.cpu else None)
        self._gpu = (GpuSampler(devices, settings.interval_ms * 1_000_000, clock=clock)
                     if settings.enabled and settings.gpu and devices is not None else None)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)  # type: ignore[arg-type]

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of every family, Triton's names."""
        text = generate_latest(self._registry).decode("utf-8")
        return _triton_values(_triton_counter_names(text))

    # -- prometheus_client Collector -------------------------------------------------------
    def collect(self) -> Iterator[PromMetric]:
        if self.settings.enabled:
            models = sorted(self._models(), key=lambda m: (m.name, m.version))
            if models:
                yield from self._model_families(models)
            yield from _pinned_memory_families(
                self._pinned_pool_bytes if self._cpu is not None else 0)
            if self._gpu is not None:
                yield from self._gpu_families()
            if self._cpu is not None:
                yield from self._cpu_families()
        yield from self._custom.collect()

    def _model_families(self, models: Sequence[LoadedModel]) -> Iterator[PromMetric]:
        settings = self.settings
        rows = [(m, m.stats.snapshot(), {"model": m.name, "version": str(m.version)})
                for m in models]

        def counter(name: str, help_text: str,
                    value: Callable[[ModelStatistics], float]) -> PromMetric:
            family = PromMetric(name, help_text, "counter")
            for _, snapshot, labels in rows:
                family.add_sample(name, labels, value(snapshot))
            return family

        yield counter("nv_inference_request_success",
                      "Number of successful inference requests, all batch sizes",
                      lambda s: s.success.count)
        failure = PromMetric("nv_inference_request_failure",
                             "Number of failed inference requests, all batch sizes", "counter")
        for _, snapshot, labels in rows:
            counts = snapshot.fail_reasons.by_reason()
            for reason in _TRITON_REASON_ORDER:
                failure.add_sample("nv_inference_request_failure",
                                   {**labels, "reason": reason}, counts[reason])
        yield failure
        yield counter("nv_inference_count",
                      "Number of inferences performed (does not include cached requests)",
                      lambda s: s.inference_count)
        yield counter("nv_inference_exec_count",
                      "Number of model executions performed (does not include cached "
                      "requests)", lambda s: s.execution_count)
        if settings.counter_latencies:
            for name, help_text, field_name in _LATENCIES:
                yield counter(f"nv_inference_{name}_duration_us", help_text,
                              functools.partial(_field_us, field_name))
        pending = PromMetric("nv_inference_pending_request_count",
                             "Instantaneous number of pending requests awaiting execution "
                             "per-model.", "gauge")
        for model, _, labels in rows:
            pending.add_sample("nv_inference_pending_request_count", labels,
                               model.pending_count)
        yield pending
        cached = [row for row in rows if _cache_enabled(row[0])]
        if cached and settings.counter_latencies:
            yield from _cache_families(cached)
        if settings.summary_latencies:
            yield from self._summaries(rows)
        if settings.histogram_latencies:
            yield from _first_response_histograms(rows)
        yield from _contributed_families(rows)

    def _summaries(self, rows: list[tuple[LoadedModel, ModelStatistics, dict[str, str]]]
                   ) -> Iterator[PromMetric]:
        qs = [q for q, _ in self.settings.quantiles]
        now = self._clock()
        windows = [(model.stats.latency_quantiles(now, qs), snapshot, labels,
                    _cache_enabled(model)) for model, snapshot, labels in rows]
        for name, _, field_name in _LATENCIES:
            family_name = f"nv_inference_{name}_summary_us"
            family = PromMetric(family_name, _SUMMARY_HELP[name], "summary")
            for quantiles, snapshot, labels, cached in windows:
                if quantiles is None or (name == "request" and cached):
                    # Triton leaves the request summary out for cached models (its
                    # duration would not include cache management).
                    continue
                for q, value in zip(qs, quantiles[name], strict=True):
                    family.add_sample(family_name, {**labels, "quantile": floatToGoString(q)},
                                      value)
                duration: Duration = getattr(snapshot, field_name)
                family.add_sample(family_name + "_count", labels, duration.count)
                family.add_sample(family_name + "_sum", labels, _us(duration))
            yield family
        cache_rows = [(model, snapshot, labels) for model, snapshot, labels in rows
                      if _cache_enabled(model)]
        if cache_rows:
            yield from _cache_summaries(cache_rows, qs, now)

    def _gpu_families(self) -> Iterator[PromMetric]:
        assert self._gpu is not None
        rows = self._gpu.values()
        if not rows:
            return  # Triton, too, writes no GPU family on a host without GPUs
        for name, help_text, kind, field_name in _GPU_FAMILIES:
            family = PromMetric(name, help_text, kind)
            for row in rows:
                family.add_sample(name, {"gpu_uuid": row.uuid}, getattr(row, field_name))
            yield family

    def _cpu_families(self) -> Iterator[PromMetric]:
        assert self._cpu is not None
        values = self._cpu.values()
        if values is None:
            return
        for name, help_text, value in (
                ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", values[0]),
                ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", values[1]),
                ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", values[2])):
            family = PromMetric(name, help_text, "gauge")
            family.add_sample(name, {}, value)
            yield family


def _contributed_families(rows: list[tuple[LoadedModel, ModelStatistics, dict[str, str]]]
                          ) -> Iterator[PromMetric]:
    """The models' own families, one per name (a name appears once in an exposition)."""
    families: dict[str, PromMetric] = {}
    for model, _, labels in rows:
        for extra in model.metric_families():
            family = families.get(extra.name)
            if family is None:
                family = families[extra.name] = PromMetric(extra.name, extra.help, extra.kind)
            for sample_labels, value in extra.samples:
                family.add_sample(extra.name, {**labels, **sample_labels}, value)
    yield from families.values()


def _us(duration: Duration) -> float:
    return duration.ns // 1_000


def _field_us(field_name: str, snapshot: ModelStatistics) -> float:
    return _us(getattr(snapshot, field_name))


def _cache_families(rows: list[tuple[Any, ModelStatistics, dict[str, str]]]
                    ) -> Iterator[PromMetric]:
    for name, help_text, value in (
            ("nv_cache_num_hits_per_model", "Number of cache hits per model",
             lambda s: s.cache_hit.count),
            ("nv_cache_num_misses_per_model", "Number of cache misses per model",
             lambda s: s.cache_miss.count),
            ("nv_cache_hit_duration_per_model",
             "Total cache hit duration per model, in microseconds", lambda s: _us(s.cache_hit)),
            ("nv_cache_miss_duration_per_model",
             "Total cache miss (insert+lookup) duration per model, in microseconds",
             lambda s: _us(s.cache_miss))):
        family = PromMetric(name, help_text, "counter")
        for _, snapshot, labels in rows:
            family.add_sample(name, labels, value(snapshot))
        yield family


def _cache_summaries(rows: list[tuple[LoadedModel, ModelStatistics, dict[str, str]]],
                     qs: list[float], now: int) -> Iterator[PromMetric]:
    """Triton's summaries of cache hit and miss durations (us) for models using the cache."""
    windows = [(model.stats.cache_latency_quantiles(now, qs), snapshot, labels)
               for model, snapshot, labels in rows]
    for series, family_name, help_text in (
            ("cache_hit", "nv_cache_hit_summary_per_model",
             "Summary of cache hit duration per model, in microseconds"),
            ("cache_miss", "nv_cache_miss_summary_per_model",
             "Summary of cache miss (insert+lookup) duration per model, in microseconds")):
        family = PromMetric(family_name, help_text, "summary")
        for quantiles, snapshot, labels in windows:
            if quantiles is None:
                continue
            for q, value in zip(qs, quantiles[series], strict=True):
                family.add_sample(family_name, {**labels, "quantile": floatToGoString(q)},
                                  value)
            duration: Duration = getattr(snapshot, series)
            family.add_sample(family_name + "_count", labels, duration.count)
            family.add_sample(family_name + "_sum", labels, _us(duration))
        if family.samples:
            yield family


def _first_response_histograms(rows: list[tuple[LoadedModel, ModelStatistics,
                                                dict[str, str]]]) -> Iterator[PromMetric]:
    name = "nv_inference_first_response_histogram_ms"
    family = PromMetric(name, "Duration from request to first response in milliseconds",
                        "histogram")
    for model, _, labels in rows:
        histogram = model.stats.first_response_histogram()
        if histogram is None:
            continue
        for bound, cumulative in zip((*histogram.bounds, math.inf), histogram.cumulative,
                                     strict=True):
            family.add_sample(name + "_bucket", {**labels, "le": floatToGoString(bound)},
                              cumulative)
        family.add_sample(name + "_count", labels, histogram.count)
        family.add_sample(name + "_sum", labels, histogram.sum)
    if family.samples:
        yield family


# nv_inference_request_failure's reasons in the order Triton's families list them
_TRITON_REASON_ORDER = (OTHER, CANCELED, BACKEND, REJECTED)


def _pinned_memory_families(total_bytes: int) -> Iterator[PromMetric]:
    """Triton's pinned memory pool gauges. infercore keeps no pinned pool (no GPU copies
    go through one), so nothing is ever used; the total is what Triton 2.51 reports on a
    host where the pool could not be allocated: the size asked for
    (``--pinned-memory-pool-byte-size``) once CPU metrics are polled, else 0."""
    for name, help_text, value in (
            ("total", "Pinned memory pool total memory size, in bytes", total_bytes),
            ("used", "Pinned memory pool used memory size, in bytes", 0)):
        family = PromMetric(f"nv_pinned_memory_pool_{name}_bytes", help_text, "gauge")
        family.add_sample(f"nv_pinned_memory_pool_{name}_bytes", {}, value)
        yield family


def _triton_values(text: str) -> str:
    """Sample values as Triton's prometheus-cpp writes them (a stream of 16 significant
    digits: ``2``, ``0.25``, ``25275973632``), where prometheus_client writes ``2.0`` and
    ``2.5275973632e+10``; a shell script comparing ``$value -eq 2`` reads Triton's form
    only. NaN and the infinities keep prometheus_client's spelling."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isfinite(number):
            lines[index] = f"{head} {number:.16g}"
    return "\n".join(lines)


def _triton_counter_names(text: str) -> str:
    """Undo prometheus_client's ``_total`` on counter HELP/TYPE lines (see the module
    docstring): it appends the suffix to every counter family name, so one suffix is
    removed from each."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.startswith("# TYPE ") and line.endswith(" counter"):
            name = line[len("# TYPE "):-len(" counter")]
            if not name.endswith("_total"):
                continue
            bare = name[:-len("_total")]
            lines[index] = f"# TYPE {bare} counter"
            previous = lines[index - 1] if index else ""
            if previous.startswith(f"# HELP {name} ") or previous == f"# HELP {name}":
                lines[index - 1] = f"# HELP {bare}" + previous[len(f"# HELP {name}"):]
    return "\n".join(lines)
