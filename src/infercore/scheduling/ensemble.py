"""Ensembles: a request flows through steps (other models) wired as a DAG of tensors.

``validate_ensemble`` checks the wiring at load (every consumed tensor has exactly one
producer or is an ensemble input, every ensemble output is produced, no cycles, step
models are loaded and their tensors exist). ``EnsembleScheduler.enqueue`` starts a run:
each step is sent, through the injected ``infer`` (the server's, never imported), as soon
as all its input tensors exist, so independent steps run in parallel. Responses come back
through callbacks on the threads that produced them; a run's lock guards its tensors and
its count of in-flight steps.

A step whose model is decoupled may answer several times: each response continues the
pipeline on its own copy of the tensors (a fork), and every fork that completes the
ensemble outputs produces one ensemble response. The ensemble's final flag comes when no
step is left in flight. The first error ends the run: in-flight steps are cancelled and
the request gets the error.

Threads: callers enqueue; the composing models' instance threads (or inline callers) run
the callbacks. Nothing blocks inside a callback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tritonclient.grpc import model_config_pb2

from ..errors import CancelledError, InvalidArgumentError, TritonError
from ..request import InferRequest
from ..response import InferResponse, ResponseStream
from ..tensor import Tensor
from ..trace_record import NO_TRACE

__all__ = ["EnsembleScheduler", "EnsembleStep", "StepDurations", "validate_ensemble"]


class InferFunction(Protocol):
    def __call__(self, request: InferRequest, *, raise_on_error: bool = ...,
                 callback: Callable[[InferResponse | None, bool], None] | None = ...
                 ) -> ResponseStream: ...


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    index: int
    model_name: str
    model_version: int
    inputs: Mapping[str, str]  # step model input -> ensemble tensor
    outputs: Mapping[str, str]  # step model output -> ensemble tensor
    decoupled: bool = False


def validate_ensemble(
    config: model_config_pb2.ModelConfig,
    describe: Callable[[str, int], model_config_pb2.ModelConfig],
) -> list[EnsembleStep]:
    """The ensemble's steps, checked; ``describe(name, version)`` returns a step model's
    config and raises if it is not loaded."""
    name = config.name
    scheduling = config.ensemble_scheduling
    if not scheduling.step:
        raise InvalidArgumentError(f"ensemble {name} must have at least one step")
    ensemble_inputs = {i.name for i in config.input}
    ensemble_outputs = {o.name for o in config.output}
    producers: dict[str, int] = {}
    steps: list[EnsembleStep] = []
    for index, step in enumerate(scheduling.step):
        try:
            step_config = describe(step.model_name, int(step.model_version))
        except TritonError as exc:
            raise InvalidArgumentError(
                f"ensemble {name} contains models that are not available or ambiguous: "
                f"{step.model_name} ({exc.message})"
            ) from exc
        model_inputs = {i.name for i in step_config.input}
        model_outputs = {o.name for o in step_config.output}
        for model_input in step.input_map:
            if model_input not in model_inputs:
                raise InvalidArgumentError(
                    f"in ensemble {name}, step {index} maps '{model_input}', which is not an "
                    f"input of model {step.model_name}"
                )
        for model_output, tensor in step.output_map.items():
            if model_output not in model_outputs:
                raise InvalidArgumentError(
                    f"in ensemble {name}, step {index} maps '{model_output}', which is not an "
                    f"output of model {step.model_name}"
                )
            if tensor in producers or tensor in ensemble_inputs:
                raise InvalidArgumentError(
                    f"in ensemble {name}, ensemble tensor '{tensor}' is written by more than "
                    "one step or is also an ensemble input"
                )
            producers[tensor] = index
        steps.append(EnsembleStep(
            index, step.model_name, int(step.model_version), dict(step.input_map),
            dict(step.output_map),
            bool(step_config.model_transaction_policy.decoupled),
        ))
    for step in steps:
        for tensor in step.inputs.values():
            if tensor not in ensemble_inputs and tensor not in producers:
                raise InvalidArgumentError(
                    f"in ensemble {name}, input '{tensor}' of step {step.index} "
                    f"({step.model_name}) is neither an ensemble input nor produced by a step"
                )
    for output in ensemble_outputs:
        if output not in producers:
            raise InvalidArgumentError(
                f"in ensemble {name}, ensemble output '{output}' is not produced by any step")
    _check_acyclic(name, steps, producers)
    return steps


def _check_acyclic(name: str, steps: list[EnsembleStep], producers: Mapping[str, int]) -> None:
    waiting = {s.index: {producers[t] for t in s.inputs.values() if t in producers}
               for s in steps}
    done: set[int] = set()
    while waiting:
        ready = [index for index, needs in waiting.items() if needs <= done]
        if not ready:
            cycle = ", ".join(f"step {i} ({steps[i].model_name})" for i in sorted(waiting))
            raise InvalidArgumentError(
                f"ensemble {name} has a circular dependency between {cycle}")
        for index in ready:
            done.add(index)
            del waiting[index]


@dataclass(slots=True)
class StepDurations:
    """What an ensemble request's steps spent queued and computing, summed: Triton
    reports these as the ensemble's own queue and compute figures."""

    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0

    def add(self, step: InferRequest) -> None:
        """Add a finished step request's figures (none for a step that never executed)."""
        if not step.compute_end_ns:
            return
        self.queue_ns += step.compute_start_ns - step.queue_start_ns
        self.compute_input_ns += step.compute_input_end_ns - step.compute_start_ns
        self.compute_infer_ns += step.compute_output_start_ns - step.compute_input_end_ns
        self.compute_output_ns += step.compute_end_ns - step.compute_output_start_ns


def _sequence_parameters(request: InferRequest) -> dict[str, Any]:
    """The parameters every ensemble response carries in Triton: the request's sequence
    id and flags (0 and false outside a sequence)."""
    return {"sequence_id": request.correlation_id or 0,
            "sequence_start": bool(request.sequence_start),
            "sequence_end": bool(request.sequence_end)}


class _Fork:
    """One line of the pipeline: the tensors it has, the steps it has sent."""

    __slots__ = ("tensors", "started", "answered")

    def __init__(self, tensors: dict[str, Tensor], started: set[int]) -> None:
        self.tensors = tensors
        self.started = started
        self.answered = False


class _Run:
    """One ensemble request in flight. ``lock`` (re-entrant: cancelling a step may answer
    it on this thread) guards everything below it."""

    __slots__ = ("request", "lock", "pending", "streams", "failed", "result", "durations")

    def __init__(self, request: InferRequest) -> None:
        self.request = request
        self.lock = threading.RLock()
        self.pending = 0  # steps sent and not finished
        self.streams: list[ResponseStream] = []
        self.failed = False
        self.result: dict[str, Tensor] | None = None  # the answer of a non-decoupled run
        # the steps' queue and compute durations summed (ns), the ensemble's own figures
        self.durations = StepDurations()


class EnsembleScheduler:
    """Runs ensemble requests over the composing models."""

    def __init__(
        self,
        config: model_config_pb2.ModelConfig,
        steps: list[EnsembleStep],
        infer: InferFunction,
        on_failed: Callable[[InferRequest], None],
        on_succeeded: Callable[[InferRequest, StepDurations], None],
    ) -> None:
        self._name = config.name
        self._steps = steps
        self._infer = infer
        self._on_failed = on_failed
        self._on_succeeded = on_succeeded
        self._outputs = [o.name for o in config.output]
        # With a decoupled step, each of its responses may complete the outputs once more.
        self.decoupled = any(step.decoupled for step in steps)

    # -- Scheduler protocol: an ensemble has no instances or queue of its own --------------
    def attach(self, instances: Any) -> None:
        pass

    def run_inline(self, request: InferRequest, *, on_loop: bool = False) -> bool:
        return False

    def next_payload(self) -> None:
        return None

    def queued_count(self) -> int:
        return 0

    def stop(self) -> None:
        pass

    def drain(self) -> None:
        pass

    def enqueue(self, request: InferRequest, *, caller_runs: bool = False,
                on_loop: bool = False) -> None:
        # the steps are requests of their own: nothing for the caller to run here
        run = _Run(request)
        request.on_cancel(lambda: self._cancel(run))
        with run.lock:
            fork = _Fork(dict(request.inputs), set())
            self._advance(run, fork)
            self._finish_if_idle(run)

    # -- the DAG ---------------------------------------------------------------------------
    def _advance(self, run: _Run, fork: _Fork) -> None:
        """Send every step of ``fork`` whose inputs exist; answer if outputs are complete."""
        for step in self._steps:
            if run.failed:
                return
            if step.index in fork.started:
                continue
            if all(tensor in fork.tensors for tensor in step.inputs.values()):
                fork.started.add(step.index)
                self._send(run, step, fork)
        if not fork.answered and all(name in fork.tensors for name in self._outputs):
            fork.answered = True
            outputs = {name: fork.tensors[name] for name in self._outputs}
            if self.decoupled:
                sender = run.request.sender
                if sender is not None and not sender.closed:
                    sender.send(outputs, parameters=_sequence_parameters(run.request),
                                final=False)
            else:
                run.result = outputs

    def _send(self, run: _Run, step: EnsembleStep, fork: _Fork) -> None:
        request = run.request
        step_request = InferRequest(
            step.model_name,
            {model_input: fork.tensors[tensor] for model_input, tensor in step.inputs.items()},
            model_version=step.model_version,
            id=request.id,
            requested_outputs=list(step.outputs),
            parameters=request.parameters,
            priority=request.priority,
            timeout_us=request.timeout_us,
            correlation_id=request.correlation_id,
            sequence_start=request.sequence_start,
            sequence_end=request.sequence_end,
        )
        # A traced ensemble request traces its steps as children; an untraced one's steps
        # are never sampled on their own (Triton samples only clients' requests).
        parent = request.trace
        step_request.trace = NO_TRACE if parent is None else parent.spawn_child()

        def on_response(response: InferResponse | None, final: bool) -> None:
            self._on_step_response(run, step, fork, step_request, response, final)

        run.pending += 1
        try:
            stream = self._infer(step_request, raise_on_error=False, callback=on_response)
        except TritonError as exc:
            run.pending -= 1
            self._fail(run, exc)
            return
        run.streams.append(stream)

    def _on_step_response(self, run: _Run, step: EnsembleStep, fork: _Fork,
                          step_request: InferRequest, response: InferResponse | None,
                          final: bool) -> None:
        with run.lock:
            if final:  # its execution is recorded by now (final responses are held)
                run.durations.add(step_request)
            if response is not None and not run.failed:
                if response.error is not None:
                    self._fail(run, response.error)
                else:
                    self._take_outputs(run, step, fork, response)
            if final:
                run.pending -= 1
                self._finish_if_idle(run)

    def _take_outputs(self, run: _Run, step: EnsembleStep, fork: _Fork,
                      response: InferResponse) -> None:
        values = {}
        for model_output, tensor in step.outputs.items():
            value = response.outputs.get(model_output)
            if value is None:
                self._fail(run, InvalidArgumentError(
                    f"in ensemble {self._name}, step {step.index} ({step.model_name}) "
                    f"returned no output '{model_output}'"))
                return
            values[tensor] = value
        if step.decoupled:
            # Each response continues on its own copy of the pipeline.
            fork = _Fork({**fork.tensors, **values}, set(fork.started))
        else:
            fork.tensors.update(values)
        self._advance(run, fork)

    def _finish_if_idle(self, run: _Run) -> None:
        sender = run.request.sender
        if run.pending or run.failed or sender is None or sender.closed:
            return
        if not self.decoupled and run.result is None:
            self._fail(run, InvalidArgumentError(
                f"ensemble {self._name} finished without producing all its outputs"))
            return
        # recorded before the answer goes out: a caller that has its answer sees its stats
        self._on_succeeded(run.request, run.durations)
        if self.decoupled:
            sender.close()
        else:
            sender.send(run.result, parameters=_sequence_parameters(run.request), final=True)

    def _fail(self, run: _Run, error: TritonError) -> None:
        if run.failed:
            return
        run.failed = True
        sender = run.request.sender
        if sender is not None and not sender.closed:
            sender.send_error(error)
        for stream in run.streams:
            stream.cancel()
        self._on_failed(run.request)

    def _cancel(self, run: _Run) -> None:
        with run.lock:
            self._fail(run, CancelledError("Request was cancelled"))
