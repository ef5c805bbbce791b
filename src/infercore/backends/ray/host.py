"""InstanceHost: the body of a Ray actor that runs one model instance through a backend.

It does inside the actor what the engine does locally: ``load`` builds the ModelContext,
gets the backend by name (built-in or installed plugin) and runs ``create_model`` and
``create_instance``; ``execute`` rebuilds the payload's requests, runs
``BackendInstance.execute(payload)`` and collects what the backend sends through each
request's ResponseSender; ``finalize`` finalizes the instance, then the model.

The class never imports Ray at module level (cluster.py wraps it with ``ray.remote``), so
tests can drive it in-process. Ray is asked only where the actor runs (``_where``).

Threads: Ray runs ``load``, ``execute`` and ``finalize`` one at a time (the actor's default
concurrency group holds one), ``watch`` alone in the "watch" group: it blocks until
``finalize`` sets ``_stopped``, so the server learns of the actor's death by that call
failing, without polling. A backend may answer from threads of its own during
``execute``; ``_collect`` appends under the GIL, one list per request.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from ...errors import InternalError, TritonError
from ...payload import Payload
from ...response import InferResponse, ResponseSender, ResponseStream
from ..base import (
    BackendInstance,
    BackendModel,
    CustomMetrics,
    InstanceInfo,
    ModelContext,
    get_backend,
)
from .wire import (
    RemoteError,
    RemoteRequest,
    RemoteResponse,
    RemoteResult,
    decode_requests,
    encode_response,
)

__all__ = ["HostReport", "HostSpec", "InstanceHost", "LoadOutcome"]

logger = logging.getLogger(__name__)

_BARE_FINAL = RemoteResponse((), None, None, True, bare=True)


@dataclass(frozen=True, slots=True)
class HostSpec:
    """What an actor needs to load the model version as the server would."""

    model_name: str
    model_version: int
    config: bytes  # the normalised ModelConfig, serialised
    model_dir: str
    version_dir: str
    repository: str
    backend: str
    backend_config: tuple[tuple[str, str], ...]
    # The server's registry; it arrives in the actor as the actor process's own, so the
    # models' custom metrics work there but are not on the server's endpoint (docs/ray.md).
    metrics: CustomMetrics | None = None


@dataclass(frozen=True, slots=True)
class HostReport:
    """Where an instance runs: the Ray node, the process, the resources Ray gave it."""

    node_id: str
    pid: int
    resources: tuple[tuple[str, float], ...]
    node_ip: str = ""


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    report: HostReport | None
    error: RemoteError | None


class InstanceHost:
    """One model instance living in a Ray actor."""

    def __init__(self) -> None:
        self._model: BackendModel | None = None
        self._instance: BackendInstance | None = None
        self._info: InstanceInfo | None = None
        self._spec: HostSpec | None = None
        self._stopped = threading.Event()

    def load(self, spec: HostSpec, info: InstanceInfo) -> LoadOutcome:
        """Load the model and create the instance; errors come back as values, so their
        text reaches the server whatever Ray does with exceptions."""
        try:
            config = model_config_pb2.ModelConfig()
            config.ParseFromString(spec.config)
            context = ModelContext(
                name=spec.model_name,
                version=spec.model_version,
                config=config,
                model_dir=Path(spec.model_dir),
                version_dir=Path(spec.version_dir),
                repository=Path(spec.repository),
                backend_config=dict(spec.backend_config),
                infer=None,  # no BLS from an actor yet: there is no server here
                metrics=spec.metrics,
            )
            backend = get_backend(spec.backend, dict(spec.backend_config))
            self._model = backend.create_model(context)
            self._instance = self._model.create_instance(info)
        except Exception as exc:
            error = exc if isinstance(exc, TritonError) else InternalError(
                f"{type(exc).__name__}: {exc}")
            self._finalize_model()
            return LoadOutcome(None, RemoteError(int(error.code), error.message))
        self._spec = spec
        self._info = info
        return LoadOutcome(_where(), None)

    def execute(
        self,
        remote: list[RemoteRequest],
        fetch: Callable[[list[Any]], list[np.ndarray]] | None = None,
    ) -> RemoteResult:
        """Run one payload; every response the backend sends is in the result."""
        spec, instance, info = self._spec, self._instance, self._info
        if spec is None or instance is None or info is None:
            raise InternalError("the instance is not loaded")
        start = time.monotonic_ns()
        requests = decode_requests(remote, fetch or _fetch, spec.model_name,
                                   spec.model_version)
        collected: list[list[RemoteResponse]] = [[] for _ in requests]
        for request, responses in zip(requests, collected, strict=True):
            stream = ResponseStream(request, callback=_collector(responses))
            request.sender = ResponseSender(request, stream, spec.model_name,
                                            spec.model_version)
        payload = Payload(requests, time.monotonic_ns)
        try:
            instance.execute(payload)
        except Exception as exc:
            error = exc if isinstance(exc, TritonError) else InternalError(
                f"instance '{info.name}' of model '{spec.model_name}' failed: "
                f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, TritonError):
                logger.exception("instance %s of model %s raised in execute", info.name,
                                 spec.model_name)
            for request in requests:
                sender = request.sender
                if sender is not None and not sender.closed:
                    sender.send_error(error)
        end = time.monotonic_ns()
        input_end = payload.compute_input_end_ns or start
        output_start = max(payload.compute_output_start_ns or end, input_end)
        return RemoteResult(
            responses=tuple(tuple(r) for r in collected),
            input_ns=input_end - start,
            infer_ns=output_start - input_end,
            output_ns=end - output_start,
        )

    def watch(self) -> None:
        """Return when the instance is finalized; an actor that dies fails this call."""
        self._stopped.wait()

    def finalize(self) -> None:
        """Finalize the instance, then the model (errors logged, as the engine does)."""
        instance, self._instance = self._instance, None
        if instance is not None:
            try:
                instance.finalize()
            except Exception:
                logger.exception("finalize of an instance of model %s failed",
                                 self._spec.model_name if self._spec else "?")
        self._finalize_model()
        self._stopped.set()

    def _finalize_model(self) -> None:
        model, self._model = self._model, None
        if model is not None:
            try:
                model.finalize()
            except Exception:
                logger.exception("finalize of a model on Ray failed")


def _collector(responses: list[RemoteResponse]) -> Callable[[InferResponse | None, bool], None]:
    def collect(response: InferResponse | None, final: bool) -> None:
        if response is None:
            responses.append(_BARE_FINAL)
        else:
            responses.append(encode_response(response.outputs, response.parameters,
                                             response.error, response.final))

    return collect


def _fetch(refs: list[Any]) -> list[np.ndarray]:
    import ray  # only reached inside an actor, where Ray is running

    return list(ray.get(refs))


def _where() -> HostReport:
    """The node, process and resources of this actor (no node outside Ray)."""
    ray = sys.modules.get("ray")
    # Outside a Ray worker (tests drive the host in-process) asking Ray would start or
    # join a cluster: only ask when this process already runs Ray.
    if ray is None or not ray.is_initialized():
        return HostReport("", os.getpid(), ())
    context = ray.get_runtime_context()
    resources = tuple(sorted(context.get_assigned_resources().items()))
    return HostReport(context.get_node_id(), os.getpid(), resources,
                      ray.util.get_node_ip_address())
