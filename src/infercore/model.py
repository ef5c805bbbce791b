"""LoadedModel: one loaded model version: config, instances, scheduler, statistics.

Threads: ``infer`` runs on callers' threads (many at once); backend threads answer the
requests and call ``_release`` through each request's sender; the repository manager's
thread calls ``load`` and ``unload``. ``_inflight_lock`` guards the in-flight count and
the accepting flag; ``_drained`` is signalled when the count falls to zero, so unloading
waits on a condition with a deadline, never a poll.

Lifecycle: created -> load() -> serving -> unload() (stop admitting, drain to a deadline,
cancel the rest, stop the scheduler, join the threads, finalize instances, then the
backend model).

Observability hooks, each free when unused: ``infer`` reads the model's ``ModelTracer.on``
(tracing off: that one check) and samples; a traced request's trace hears ``released`` in
``_release`` and ``settled`` where its outcome is recorded. Failures are counted with
Triton's reasons. ``pending_count`` is what the scheduler still holds (Triton's
nv_inference_pending_request_count: received, not yet executing).

Response cache (cache.py): a model version uses the server's cache when its config says
``response_cache { enable: true }`` and the server has one; otherwise ``_cache`` is None
and ``infer`` pays that one check. With the cache, ``infer`` hashes the validated request
and looks it up: a hit is answered on the caller's thread at once (statistics first, then
the response), never queued or executed; a miss is counted and goes on with a
``CachingSender``, which inserts the successful response before delivering it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from .backends.base import (
    Backend,
    BackendModel,
    HealthReporting,
    InstanceInfo,
    MetricContributor,
    ModelContext,
    ReadinessCheck,
    device_blocking,
)
from .backends.ray import create_backend_model
from .cache import CacheFill, ResponseCache, caching_sender, request_key
from .caller import Caller
from .clock import Clock, MonotonicClock, deadline_after, seconds_until
from .devices import Devices, NvmlDevices, check_load_limit
from .dispatch import Dispatch
from .errors import InvalidArgumentError, UnavailableError, UnsupportedError
from .instance import ModelInstance, cpu_cores_of, log_state
from .observability.custom_metrics import REGISTRY as CUSTOM_REGISTRY
from .observability.custom_metrics import CustomMetricsRegistry
from .observability.trace_record import TracingSender
from .observability.tracing import Tracer
from .rate_limiter import RateLimiter, ResourceAsk
from .request import InferRequest
from .response import InferResponse, ResponseSender, ResponseStream
from .scheduling.base import Scheduler
from .scheduling.default import DefaultScheduler
from .scheduling.dynamic import DynamicBatcher
from .scheduling.ensemble import EnsembleScheduler, StepDurations, validate_ensemble
from .scheduling.sequence import SequenceBatcher
from .stats import BACKEND, CANCELED, OTHER, REJECTED, LatencyWindow, ModelStats
from .tensor import DataType
from .validation import BackendRefusal, RequestValidator
from .warmup import run_warmup, warmup_samples

if TYPE_CHECKING:
    from .metrics_settings import ModelMetricFamily

__all__ = ["LoadedModel", "ModelEnvironment"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelEnvironment:
    """What the server shares with every model: time, the rate limiter, host policies,
    tracing, the custom metrics registry, which optional latency figures the metrics
    configuration asks for, and the GPUs with their load limits."""

    clock: Clock = field(default_factory=MonotonicClock)
    rate_limiter: RateLimiter = field(default_factory=RateLimiter)
    host_policies: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    tracer: Tracer = field(default_factory=Tracer)
    # --metrics-config summary_latencies=true: keep a window of per-request latencies
    latency_summaries: bool = False
    # --metrics-config histogram_latencies=true: decoupled models' first-response histogram
    first_response_histogram: bool = False
    # --cache-config local,size=N: the cache of models with response_cache { enable: true }
    response_cache: ResponseCache | None = None
    # --ray-address: the Ray cluster of instance groups placed on Ray ("": none; docs/ray.md)
    ray_address: str = ""
    # where models' custom metrics live (ModelContext.metrics): the process-wide registry
    custom_metrics: CustomMetricsRegistry = CUSTOM_REGISTRY
    # the GPUs (Options.devices), and --model-load-gpu-limit: GPU id -> the fraction of
    # its memory in use beyond which no instance is created there
    devices: Devices = field(default_factory=NvmlDevices)
    gpu_load_limits: Mapping[int, float] = field(default_factory=dict)


# Each load of a model version keys its cache entries apart (cache.request_key).
_CACHE_GENERATIONS = itertools.count(1)

# Triton's default buckets (ms) of nv_inference_first_response_histogram_ms.
FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
FIRST_RESPONSE_FAMILY = "nv_inference_first_response_histogram_ms"


class LoadedModel:
    """A model version that can take requests once ``load()`` returns."""

    def __init__(
        self,
        context: ModelContext,
        backend: Backend | None,
        environment: ModelEnvironment | None = None,
        *,
        describe: Callable[[str, int], model_config_pb2.ModelConfig] | None = None,
    ) -> None:
        self.context = context
        self.name = context.name
        self.version = context.version
        self.config = context.config
        self._backend = backend  # None for an ensemble
        self._describe = describe  # other loaded models' configs (ensemble steps)
        self._environment = environment or ModelEnvironment()
        self._clock = self._environment.clock.now_ns
        self.stats = ModelStats(
            self.name, self.version,
            latency_window=LatencyWindow() if self._environment.latency_summaries else None,
            first_response_buckets=(
                _first_response_buckets(self.config)
                if self._environment.first_response_histogram and context.decoupled
                else None))
        self._trace = self._environment.tracer.for_model(self.name)
        self._validator = RequestValidator(self.config)
        self._backend_model: BackendModel | None = None
        # its optional capabilities (backends/base.py), None when it has not them
        self._health: HealthReporting | None = None
        self._contributor: MetricContributor | None = None
        self._readiness: ReadinessCheck | None = None
        self._instances: list[ModelInstance] = []
        self._scheduler: Scheduler | None = None
        self._dispatch = Dispatch(self.name)  # replaced at load
        self._inflight: dict[int, InferRequest] = {}  # id -> request not yet answered
        self._accepting = False
        self._inflight_lock = threading.Lock()
        self._drained = threading.Condition(self._inflight_lock)
        self.labels: dict[str, list[str]] = {}  # output name -> classification labels
        self._decoupled = context.decoupled
        self._cache = self._response_cache()
        self._cache_generation = next(_CACHE_GENERATIONS) if self._cache is not None else 0

    def _response_cache(self) -> ResponseCache | None:
        """The server's cache if this model version uses it (its config enables it)."""
        if not self.config.response_cache.enable:
            return None
        cache = self._environment.response_cache
        if cache is None:
            # Triton enables the cache only where both the server and the model ask.
            logger.info("model %s v%d enables the response cache, but the server has none "
                        "(--cache-config local,size=<bytes>): its responses are not cached",
                        self.name, self.version)
            return None
        if self._decoupled or self.config.HasField("sequence_batching"):
            return None  # config validation refuses these combinations at load
        return cache

    @property
    def response_cache_enabled(self) -> bool:
        """Whether requests to this model version go through the response cache."""
        return self._cache is not None

    # -- lifecycle ---------------------------------------------------------------------
    def load(self) -> None:
        """Create the backend model and every instance, then start serving.

        On failure everything created so far is finalized and the error propagates.
        """
        self.labels = _read_labels(self.context)
        if self._backend is None:
            self._load_ensemble()
            return
        infos = _instance_infos(self.config)
        groups = {group.name: group for group in self.config.instance_group}
        # by position: Triton names a group's instances on different GPUs alike, and
        # each asks for its own device's resources
        asks = [ResourceAsk.from_config(groups[info.group_name], info.device_id)
                for info in infos]
        rate_limiter = self._environment.rate_limiter
        rate_limiter.register(self.name, asks)
        # an instance's name gives its group, and so its host policy: the same cores
        cores = {info.name: self._cpu_cores(info) for info in infos}
        blocking = device_blocking(self._backend)
        samples = warmup_samples(self.config, self.context.model_dir)
        verbose = logger.isEnabledFor(logging.DEBUG)
        if verbose:  # Triton's backends say so at verbose level 1 (the lines below too)
            logger.debug("TRITONBACKEND_ModelInitialize: %s (version %d)", self.name,
                         self.version)
        # the backend's model, or one that places some instance groups on Ray (docs/ray.md)
        self._backend_model = create_backend_model(self._backend, self.context,
                                                   self._environment.ray_address)
        model = self._backend_model
        self._health = model if isinstance(model, HealthReporting) else None
        self._contributor = model if isinstance(model, MetricContributor) else None
        self._readiness = model if isinstance(model, ReadinessCheck) else None
        caller_runs = _caller_runs_policy(self.config)
        try:
            for position, info in enumerate(infos):
                # Triton's: backends log the instance (info level), its core the artifact
                logger.info("TRITONBACKEND_ModelInstanceInitialize: %s (%s device %d)",
                            info.name, info.kind_name, info.device_id)
                if verbose:
                    logger.debug("Creating instance %s on %s using artifact '%s'", info.name,
                                 info.kind_name, self.config.default_model_filename)
                backend_instance = self._backend_model.create_instance(info)
                if verbose:
                    logger.debug("TRITONBACKEND_ModelInstanceInitialize: instance "
                                 "initialization successful %s (device %d)", info.name,
                                 info.device_id)
                self._instances.append(ModelInstance(
                    self.name, info, backend_instance, self.stats,
                    decoupled=self.context.decoupled, clock=self._clock,
                    resources=asks[position],
                    # Only an instance's own thread runs it when the thread matters: GPU
                    # (the current device is per thread), a device-blocking backend (one
                    # thread per device), a host policy (the thread is pinned). Never for
                    # a decoupled model: its caller must see responses while it executes.
                    inline_allowed=(info.kind != "KIND_GPU" and not blocking
                                    and cores[info.name] is None
                                    and not self.context.decoupled
                                    and caller_runs != CALLER_RUNS_OFF),
                    inline_on_loop_allowed=caller_runs == CALLER_RUNS_AUTO,
                ))
                if info.kind == "KIND_GPU":  # checked once it is made, as Triton does
                    check_load_limit(self._environment.devices,
                                     self._environment.gpu_load_limits, info.device_id,
                                     info.name)
            dispatch = Dispatch(self.name, self._instances, rate_limiter)
            # Every active instance runs the warmup samples before the model is READY.
            run_warmup(self.name, self.version, samples, self._instances, self._clock,
                       dispatch.run)
            active = [i for i in self._instances if not i.info.passive]
            scheduler = self._make_scheduler(len(active))
        except BaseException:
            self._finalize_all()
            raise
        self._scheduler = scheduler
        self._dispatch = dispatch
        dispatch.start(scheduler, cores=cores, device_blocking=blocking)
        if verbose:
            for instance in active:
                logger.debug("Starting backend thread for %s at nice 0 on device %d...",
                             instance.name, instance.info.device_id)
        with self._inflight_lock:
            self._accepting = True

    def _load_ensemble(self) -> None:
        if self._describe is None or self.context.infer is None:
            raise InvalidArgumentError(f"ensemble {self.name} needs a server to run in")
        steps = validate_ensemble(self.config, self._describe)
        # As Triton: an ensemble is decoupled when a step is, and its config says so.
        self.config.model_transaction_policy.decoupled = any(s.decoupled for s in steps)
        if self._cache is not None:
            obstacle = self._ensemble_cache_obstacle(steps)
            if obstacle:
                # Triton: an ensemble caches only if all its composing models could.
                logger.warning("ensemble %s enables the response cache, but %s: its "
                               "responses are not cached", self.name, obstacle)
                self._cache = None
        self._scheduler = EnsembleScheduler(
            self.config, steps, self.context.infer,  # type: ignore[arg-type]
            self._record_ensemble_failure, self._record_success)
        self._dispatch.start(self._scheduler)  # no instances: its steps are requests
        with self._inflight_lock:
            self._accepting = True

    def _ensemble_cache_obstacle(self, steps: list[Any]) -> str:
        """Why an ensemble's top-level responses cannot be cached ("" if they can)."""
        for step in steps:
            if step.decoupled:
                return f"its step model {step.model_name} is decoupled"
            config = self._describe(step.model_name, step.model_version)  # type: ignore[misc]
            if config.HasField("sequence_batching"):
                return f"its step model {step.model_name} uses the sequence batcher"
        return ""

    def _record_success(self, request: InferRequest, steps: StepDurations) -> None:
        self.stats.record_success(request, self._clock(), queue_ns=steps.queue_ns,
                                  input_ns=steps.compute_input_ns,
                                  infer_ns=steps.compute_infer_ns,
                                  output_ns=steps.compute_output_ns)
        if request.trace is not None:
            request.trace.settled()

    def _make_scheduler(self, thread_count: int) -> Scheduler:
        if self.config.HasField("sequence_batching"):
            return SequenceBatcher(self.config, self._environment.clock,
                                   self._record_failure, self.context.model_dir)
        if self.config.HasField("dynamic_batching"):
            return DynamicBatcher(self.config, thread_count, self._environment.clock,
                                  self._record_failure)
        return DefaultScheduler(self.name, thread_count, self._clock, self._record_failure)

    def _cpu_cores(self, info: InstanceInfo) -> frozenset[int] | None:
        if not info.host_policy:
            return None
        policy = self._environment.host_policies.get(info.host_policy)
        if policy is None:
            raise InvalidArgumentError(
                f"instance group {info.group_name} of model {self.name} uses host policy "
                f"'{info.host_policy}', which the server does not define"
            )
        return cpu_cores_of(policy, info.host_policy)

    def unload(self, timeout: float = 30.0) -> None:
        """Stop admitting, let in-flight requests finish until ``timeout``, then shut down."""
        clock = self._environment.clock
        deadline = deadline_after(clock, timeout)
        with self._inflight_lock:
            self._accepting = False
            while self._inflight and clock.now_ns() < deadline:
                clock.wait(self._drained, deadline)
            leftover = list(self._inflight.values())
        if leftover:
            logger.warning("model %s v%d unloading with %d requests still in flight",
                           self.name, self.version, len(leftover))
            # Nothing may wait forever: requests still open past the deadline (e.g. a
            # decoupled model that never sent its final flag) are failed now.
            for request in leftover:
                request.cancel()
                sender = request.sender
                if sender is not None and not sender.closed:
                    sender.abort(UnavailableError(
                        f"model '{self.name}' version {self.version} was unloaded before "
                        "the request completed"))
        self._dispatch.stop(clock, deadline)  # lends its instances to callers no more
        # An execute still running past the deadline (a model that ignores cancellation)
        # gets the same second of grace as its thread, not finalize's own default.
        self._finalize_all(seconds_until(clock, deadline) + 1.0)
        # Nothing of the backend stays reachable from an unloaded model (its dispatch
        # held the instances), so its memory can go back to the system.
        self._dispatch = Dispatch(self.name)

    def _finalize_all(self, timeout: float = 30.0) -> None:
        verbose = logger.isEnabledFor(logging.DEBUG)  # Triton's lines at verbose level 1
        for instance in self._instances:
            if verbose and not instance.info.passive:
                logger.debug("Stopping backend thread for %s...", instance.name)
            instance.finalize(timeout)
            if verbose:
                logger.debug("TRITONBACKEND_ModelInstanceFinalize: delete instance state")
        self._instances.clear()
        if self._backend_model is not None:
            try:
                self._backend_model.finalize()
            except Exception:
                logger.exception("finalize of model %s v%d failed", self.name, self.version)
            if verbose:
                logger.debug("TRITONBACKEND_ModelFinalize: delete model state")
            self._backend_model = self._health = self._contributor = self._readiness = None

    # -- requests ----------------------------------------------------------------------
    def infer(
        self,
        request: InferRequest,
        *,
        raise_on_error: bool = True,
        callback: Callable[[InferResponse | None, bool], None] | None = None,
        caller: Caller | None = None,
    ) -> ResponseStream:
        """Validate and enqueue ``request``; its responses arrive on the returned stream
        (or, with ``callback``, are passed to it on the producing thread).

        ``caller`` says who reads the stream at once (caller.py; frontends do): the
        request then runs on the calling thread before this returns when an instance is
        idle (``Caller.LOOP``: only a model known to execute briefly), without waking an
        instance thread; otherwise it is queued and one instance thread is woken
        (dispatch.py). None: queued; a reader blocking on the stream may still run it.

        Raises at once (InvalidArgumentError, UnavailableError) for what is wrong on entry.
        """
        request.request_start_ns = self._clock()
        if request.single_response and self._decoupled:
            raise UnsupportedError(
                f"Model {self.name} is using the decoupled. The current BLS request call "
                "doesn't support models using the decoupled transaction policy. Please use "
                "'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled "
                "models.'")  # sic: Triton's Python backend ends its text with a quote
        # A request refused here never reaches the model: as in Triton (whose request
        # normalization runs before the scheduler), it is in no statistics. What Triton's
        # backend refuses (BackendRefusal) is answered, as a failed request, instead.
        try:
            self._validator.validate(request)
        except BackendRefusal as refusal:
            return self._answer_refusal(request, refusal, raise_on_error, callback)
        except ValueError as exc:  # e.g. a reshape numpy cannot do
            raise InvalidArgumentError(f"invalid input for model '{self.name}': {exc}") from exc
        if logger.isEnabledFor(logging.DEBUG):  # Triton's request states at verbose 1
            log_state(request, "INITIALIZED", "INITIALIZED")
            log_state(request, "INITIALIZED", "PENDING")
        key: bytes | None = None
        cached: dict[str, Any] | None = None
        lookup_ns = 0
        cache = self._cache
        if cache is not None:  # the only cost of the cache to models without it
            key, cached, lookup_ns = self._lookup(cache, request)
        stream = ResponseStream(request, raise_on_error=raise_on_error, callback=callback)
        dispatch = self._dispatch
        if callback is not None:
            caller = None  # answered on the producer's thread: nobody reads the stream
        elif caller is None:
            stream._runner = dispatch  # a blocking reader may run it (once)
        fill = None
        if key is not None and cached is None:
            fill = CacheFill(cache, key, lookup_ns, self.stats, self._clock)  # type: ignore[arg-type]
        if fill is not None or self._trace.on or request.trace is not None:
            request.sender = self._sender(request, stream, fill)
        else:
            request.sender = ResponseSender(request, stream, self.name, self.version,
                                            self._release)
        if self._decoupled:
            self._observe_responses(request)
        with self._inflight_lock:
            accepting = self._accepting
            if accepting:
                self._inflight[id(request)] = request
        if not accepting:
            if request.trace is not None:  # sampled, then refused: end its trace
                request.trace.released(self._clock())
                request.trace.settled()
            raise UnavailableError(
                f"Request for unknown model: '{self.name}' version {self.version} is not "
                "ready"
            )
        if key is not None:
            if cached is not None:
                stream._runner = None  # answered here: nothing to run
                self._answer_from_cache(request, cached, lookup_ns)
                return stream
            self.stats.record_cache_miss(lookup_ns)
        try:
            dispatch.submit(request, caller)
        except InvalidArgumentError:
            # The scheduler's own checks of the request (a sequence's id and START flag):
            # Triton refuses it in the scheduler's Enqueue, in no statistics.
            self._release(request)
            if request.trace is not None:
                request.trace.settled()
            raise
        except BaseException:
            # Refused at the door (e.g. a full queue): not in flight, counted as failed.
            self._release(request)
            self.stats.record_failure(request, self._clock(), REJECTED)
            if request.trace is not None:
                request.trace.settled()
            raise
        return stream

    def _answer_refusal(self, request: InferRequest, refusal: BackendRefusal,
                        raise_on_error: bool, callback: Any) -> ResponseStream:
        """Answer a request its backend would refuse before executing it: its answer is
        the error (HTTP sends it as an answer's error, text/plain), counted as failed."""
        stream = ResponseStream(request, raise_on_error=raise_on_error, callback=callback)
        request.sender = ResponseSender(request, stream, self.name, self.version)
        self.stats.record_failure(request, self._clock(), BACKEND)
        request.sender.send_error(refusal)
        return stream

    def _sender(self, request: InferRequest, stream: ResponseStream,
                fill: CacheFill | None) -> ResponseSender:
        """The sender of a traced request or of one that fills the cache: sample (a
        client's request) or adopt the parent's child trace, and bind it."""
        capture = None
        if self._trace.on or request.trace is not None:
            trace = request.trace
            if trace is None:
                trace = self._trace.sample()
                if trace is not None:
                    request.trace = trace
            # TENSORS level: the sender captures the outputs
            if trace is not None and trace.begin(request, self.name, self.version):
                capture = trace
        if fill is not None:
            return caching_sender(fill, capture, request, stream, self.name, self.version,
                                  self._release)
        if capture is not None:
            return TracingSender(capture, request, stream,  # type: ignore[arg-type]
                                 self.name, self.version, self._release)
        return ResponseSender(request, stream, self.name, self.version, self._release)

    def _lookup(self, cache: ResponseCache, request: InferRequest
                ) -> tuple[bytes | None, dict[str, Any] | None, int]:
        """(key, cached outputs or None, lookup ns incl. hashing); the key is None for a
        request that cannot be cached (an input outside CPU memory)."""
        start = self._clock()
        key = request_key(self.name, self.version, request.inputs, request.requested_outputs,
                          self._cache_generation)
        if key is None:
            return None, None, 0
        cached = cache.lookup(key)
        return key, cached, self._clock() - start

    def _answer_from_cache(self, request: InferRequest, outputs: dict[str, Any],
                           lookup_ns: int) -> None:
        """A hit: count it (before the caller can see the response), then answer."""
        self.stats.record_cache_hit(request, lookup_ns, self._clock())
        request.sender.send(outputs, final=True)  # type: ignore[union-attr]
        if request.trace is not None:
            request.trace.settled()

    def _observe_responses(self, request: InferRequest) -> None:
        """Per-response statistics of a decoupled request (and its first-response time)."""
        stats = self.stats
        if not stats.observes_first_response:
            request.sender.observe_responses(  # type: ignore[union-attr]
                stats.record_response, self._clock)
            return
        clock = self._clock

        def observe(index: int, infer_ns: int, output_ns: int, kind: str) -> None:
            stats.record_response(index, infer_ns, output_ns, kind)
            if index == 0:
                stats.observe_first_response((clock() - request.request_start_ns) / 1e6)

        request.sender.observe_responses(observe, clock)  # type: ignore[union-attr]

    def _release(self, request: InferRequest) -> None:
        if request.trace is not None:
            request.trace.released(self._clock())
        with self._inflight_lock:
            if self._inflight.pop(id(request), None) is None:
                return  # already released (aborted at unload, then answered late)
            if not self._inflight:
                self._drained.notify_all()

    def _record_failure(self, request: InferRequest) -> None:
        """A request the scheduler failed without executing it."""
        if request.cancelled:
            reason = CANCELED
        elif request.timed_out:
            reason = REJECTED  # "Request timeout expired" in the queue
        else:
            reason = OTHER  # e.g. unloaded before it could run, a sequence error
        self.stats.record_failure(request, self._clock(), reason)
        if request.trace is not None:
            request.trace.settled()

    def _record_ensemble_failure(self, request: InferRequest) -> None:
        # Triton's ensembles report every failure of their own as OTHER (their steps
        # count theirs with the right reason), and count it twice: Triton 2.51 reports it
        # when the run ends with the error and again when the request is released
        # (conformance qa_engine_ensemble_failure). A request its client cancelled is
        # counted as no failure at all (Triton 2.51, cancelled over gRPC while its step ran).
        if request.cancelled:
            if request.trace is not None:
                request.trace.settled()
            return
        now = self._clock()
        self.stats.record_failure(request, now, OTHER)
        self.stats.record_failure(request, now, OTHER)
        if request.trace is not None:
            request.trace.settled()

    @property
    def health_reason(self) -> str:
        """Why a serving model is degraded (e.g. instances on Ray down), or ""."""
        health = self._health
        return "" if health is None else health.health_reason

    @property
    def serving(self) -> bool:
        """False while every instance is down (all of them on Ray, docs/ray.md): the
        version is then reported not ready until one is back."""
        health = self._health
        return True if health is None else health.serving

    @property
    def checks_readiness(self) -> bool:
        """Whether ``check_ready`` would ask the model (a Python model's ``is_ready()``)."""
        readiness = self._readiness
        return readiness is not None and readiness.checks_readiness

    def check_ready(self) -> bool:
        """The model's own answer to a readiness request (True when it has none). Blocks,
        as long as the backend's bound at most: never call it on an event loop."""
        readiness = self._readiness
        return True if readiness is None else readiness.check_ready()

    def metric_families(self) -> tuple[ModelMetricFamily, ...]:
        """Families this version adds to the metrics beside Triton's (observability/metrics.py)."""
        contributor = self._contributor
        return () if contributor is None else tuple(contributor.metric_families())

    @property
    def inflight_count(self) -> int:
        return len(self._inflight)

    @property
    def pending_count(self) -> int:
        """Requests received and not yet executing (queued in the scheduler)."""
        scheduler = self._scheduler
        return 0 if scheduler is None else scheduler.queued_count()

    @property
    def instances(self) -> list[ModelInstance]:
        return list(self._instances)

    # -- descriptions ------------------------------------------------------------------
    def metadata(self, versions: list[int]) -> dict[str, Any]:
        """Triton's model metadata JSON (KServe v2); ``versions``: those it lists."""
        batching = self.config.max_batch_size > 0
        return {
            "name": self.name,
            "versions": [str(v) for v in versions],
            "platform": self.config.platform or self.config.backend,
            "inputs": [_tensor_metadata(t, batching) for t in self.config.input],
            "outputs": [_tensor_metadata(t, batching) for t in self.config.output],
        }


def _first_response_buckets(config: model_config_pb2.ModelConfig) -> tuple[float, ...]:
    """The first-response histogram's buckets: Triton's defaults, or the model's
    ``model_metrics`` override for that family."""
    for control in config.model_metrics.metric_control:
        if control.metric_identifier.family == FIRST_RESPONSE_FAMILY:
            return tuple(sorted(set(control.histogram_options.buckets)))
    return FIRST_RESPONSE_BUCKETS_MS


def _read_labels(context: ModelContext) -> dict[str, list[str]]:
    """Each output's classification labels, from its label_filename in the model folder."""
    labels: dict[str, list[str]] = {}
    for output in context.config.output:
        if not output.label_filename:
            continue
        path = (context.model_dir / output.label_filename).resolve()
        if not path.is_relative_to(context.model_dir.resolve()):
            raise InvalidArgumentError(
                f"label file '{output.label_filename}' of output '{output.name}' of model "
                f"'{context.name}' is outside the model directory"
            )
        try:
            labels[output.name] = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InvalidArgumentError(
                f"failed to read label file '{output.label_filename}' of model "
                f"'{context.name}': {exc.strerror}"
            ) from exc
    return labels


def _tensor_metadata(tensor: Any, batching: bool) -> dict[str, Any]:
    dims = [int(d) for d in tensor.dims]
    return {
        "name": tensor.name,
        "datatype": DataType.from_config(
            model_config_pb2.DataType.Name(tensor.data_type)
        ).value,
        "shape": ([-1] + dims) if batching else dims,
    }


def _instance_infos(config: model_config_pb2.ModelConfig) -> list[InstanceInfo]:
    """One InstanceInfo per instance, named and ordered as Triton's PrepareInstances
    makes them: for each of a group's ``count``, "<group>_<index>" on each of its GPUs
    (a KIND_GPU group), so instances on different GPUs share their names."""
    infos = []
    for group in config.instance_group:
        kind = model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)
        devices = list(group.gpus) if kind == "KIND_GPU" else [0]
        secondary = tuple(
            (model_config_pb2.ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind.Name(
                d.kind), int(d.device_id))
            for d in group.secondary_devices
        )
        for index in range(group.count):
            for device in devices:
                infos.append(
                    InstanceInfo(
                        name=f"{group.name}_{index}",
                        group_name=group.name,
                        index=index,
                        kind=kind,
                        device_id=int(device),
                        passive=bool(group.passive),
                        profiles=tuple(group.profile),
                        secondary_devices=secondary,
                        host_policy=group.host_policy,
                    )
                )
    if not infos:
        raise InvalidArgumentError(f"model '{config.name}' has no model instances")
    return infos


# Config parameter "infercore.caller_runs" (docs/architecture.md, "Dispatch entry points"):
#   auto      a blocked caller, or an event loop for a model known to execute briefly,
#             may run a request on an idle instance itself (the default)
#   blocking  only a blocked (synchronous) caller may; never an event loop's thread: for
#             models whose execute time varies widely (a rare long call would stall the
#             frontend's loop while it runs)
#   off       only the instances' own threads run the model
PARAM_CALLER_RUNS = "infercore.caller_runs"
CALLER_RUNS_AUTO, CALLER_RUNS_BLOCKING, CALLER_RUNS_OFF = "auto", "blocking", "off"


def _caller_runs_policy(config: model_config_pb2.ModelConfig) -> str:
    parameter = config.parameters.get(PARAM_CALLER_RUNS)
    if parameter is None:
        return CALLER_RUNS_AUTO
    value = parameter.string_value.strip().lower()
    if value not in (CALLER_RUNS_AUTO, CALLER_RUNS_BLOCKING, CALLER_RUNS_OFF):
        raise InvalidArgumentError(
            f"model '{config.name}': parameter '{PARAM_CALLER_RUNS}' must be one of "
            f"'{CALLER_RUNS_AUTO}', '{CALLER_RUNS_BLOCKING}', '{CALLER_RUNS_OFF}', got "
            f"'{parameter.string_value}'")
    return value
