"""Ensembles: a request flows through steps (other models) wired as a DAG of tensors.

``validate_ensemble`` checks the wiring at load (every consumed tensor has exactly one
producer or is an ensemble input, every ensemble output is produced, no cycles, step
models are loaded and their tensors exist). ``EnsembleScheduler.enqueue`` starts a run,
as Triton's ensemble scheduler does: the steps none of the requested outputs depend on
are pruned; every other step is sent, through the injected ``infer`` (the server's,
never imported), as soon as each tensor it reads has a value, so independent steps run
in parallel. An optional ensemble input left out, or an output a step did not produce,
is a value without a tensor: its consumers run without that input, and a requested
output without one is left out of the response. Tensors change shape where they cross
between batching and non-batching sides (a batch dimension of 1 added or dropped).

A step whose model is decoupled may answer several times: each response writes a new
iteration of its output tensors, and the steps after it run once per iteration; every
iteration that completes the requested outputs is one ensemble response. The ensemble's
final flag comes when no step is left in flight. The first error ends the run, named
"in ensemble '<name>', ..." as Triton names it.

Threads: callers enqueue; the composing models' instance threads (or inline callers) run
the callbacks. A run's re-entrant lock guards its tensors and its count of in-flight
steps. Nothing blocks inside a callback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonclient.grpc import model_config_pb2

from ..errors import CancelledError, InvalidArgumentError, TritonError
from ..request import NO_TRACE, InferRequest, request_label
from ..response import InferResponse, ResponseStream
from ..tensor import Tensor
from ..triton_order import triton_order
from .base import NoCallerRuns

__all__ = ["EnsembleScheduler", "EnsembleStep", "StepDurations", "validate_ensemble"]

logger = logging.getLogger(__name__)


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
    batching: bool = False  # the step model's max_batch_size > 0
    input_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # config dims


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
            step_config.max_batch_size > 0,
            {i.name: tuple(int(d) for d in i.dims) for i in step_config.input},
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


def _dims_match(config_dims: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    """Triton's CompareDimsWithWildcard: same rank, each dim equal or either one -1."""
    return len(config_dims) == len(dims) and all(
        a == b or a == -1 or b == -1 for a, b in zip(config_dims, dims, strict=True))


def _reshape_dims(config_dims: tuple[int, ...], batching: bool, batch_size: int,
                  dims: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a tensor takes where it crosses between a batching and a non-batching
    side (Triton's ReshapeTensorDims): a non-batched tensor that already has the
    config's dims gains a batch dimension of 1; a batch-1 tensor that does not fit a
    non-batching config loses its batch dimension. Anything else keeps its shape."""
    if batching == (batch_size != 0):
        return dims
    if batching:
        return (1, *dims) if _dims_match(config_dims, dims) else dims
    if batch_size == 1 and not _dims_match(config_dims, dims):
        return dims[1:]
    return dims


class _Sequence:
    """The sequence id and flags a tensor carries to the steps that consume it: the
    ensemble request's, or those a step's response set in its parameters."""

    __slots__ = ("correlation_id", "start", "end")

    def __init__(self, correlation_id: int | str, start: bool, end: bool) -> None:
        self.correlation_id = correlation_id
        self.start = start
        self.end = end

    def same(self, other: _Sequence) -> bool:
        return (self.correlation_id == other.correlation_id and self.start == other.start
                and self.end == other.end)


class _Value:
    """One value of an ensemble tensor: the tensor (None where an optional ensemble input
    was left out or a step did not produce the output), the batch size it was made with
    (0: not batched), the sequence it carries, and how many consumers still need it."""

    __slots__ = ("tensor", "batch_size", "sequence", "remaining")

    def __init__(self, tensor: Tensor | None, batch_size: int, sequence: _Sequence | None,
                 remaining: int) -> None:
        self.tensor = tensor
        self.batch_size = batch_size
        self.sequence = sequence  # None: the ensemble request's own
        self.remaining = remaining


class _TensorData:
    """Every value an ensemble tensor takes in one run, by iteration: a decoupled step
    writes its outputs once per response, and a step runs once per iteration of its
    inputs (Triton's TensorData)."""

    __slots__ = ("values", "next_iteration", "consumers")

    def __init__(self, consumers: int) -> None:
        self.values: dict[int, _Value] = {}
        self.next_iteration = 0
        self.consumers = consumers  # steps (and the response) that read each value

    def add(self, tensor: Tensor | None, batch_size: int, sequence: _Sequence | None) -> int:
        iteration = self.next_iteration
        self.values[iteration] = _Value(tensor, batch_size, sequence, self.consumers)
        self.next_iteration += 1
        return iteration

    def release(self, iteration: int) -> None:
        value = self.values[iteration]
        value.remaining -= 1
        if value.remaining <= 0:
            del self.values[iteration]


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


_Updated = set[tuple[str, int]]  # (ensemble tensor, iteration) written by one event


class _Run:
    """One ensemble request in flight. ``lock`` (re-entrant: a step that runs on the
    calling thread answers inside ``_send``) guards everything below it."""

    __slots__ = ("request", "lock", "tensors", "consumers", "requested", "inflight",
                 "streams", "status", "responded", "done", "durations", "held")

    held: tuple[dict[str, Tensor], _Sequence | None] | None

    def __init__(self, request: InferRequest, consumers: Mapping[str, frozenset[int]],
                 requested: tuple[str, ...]) -> None:
        self.request = request
        self.lock = threading.RLock()
        self.consumers = consumers  # tensor -> steps that read it, pruned for this request
        self.requested = requested
        self.tensors = {name: _TensorData(len(steps) + (name in requested))
                        for name, steps in consumers.items()}
        self.inflight = 0  # steps sent whose final response has not come
        self.streams: list[ResponseStream] = []
        self.status: TritonError | None = None  # the first error ends the run
        self.responded = False  # a response went out
        self.done = False  # the final response (or the error) went out
        # a non-decoupled run's answer, kept until no step is left in flight
        self.held = None
        # the steps' queue and compute durations summed (ns), the ensemble's own figures
        self.durations = StepDurations()


class EnsembleScheduler(NoCallerRuns):
    """Runs ensemble requests over the composing models, as Triton's ensemble scheduler:
    a step is sent as soon as every tensor it reads has a value (of the same iteration);
    the steps whose outputs the request does not ask for (directly or through other
    steps) are left out; an optional ensemble input left out, or an output a step did not
    produce, is a tensor without a value that lets its consumers run without it."""

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
        self._outputs = tuple(o.name for o in config.output)
        # Triton keeps the outputs' shapes in an unordered_map: responses list the outputs
        # in that map's order.
        self._response_order = tuple(triton_order(self._outputs))
        self._output_dims = {
            o.name: tuple(int(d) for d in (o.reshape.shape if o.HasField("reshape")
                                           else o.dims))
            for o in config.output}
        self._batching = config.max_batch_size > 0
        self._optional_inputs = tuple(i.name for i in config.input if i.optional)
        consumers: dict[str, set[int]] = {i.name: set() for i in config.input}
        consumers.update((name, set()) for name in self._outputs)
        self._producer: dict[str, int] = {}
        for step in steps:
            for tensor in step.inputs.values():
                consumers.setdefault(tensor, set()).add(step.index)
            for tensor in step.outputs.values():
                consumers.setdefault(tensor, set())
                self._producer[tensor] = step.index
        self._consumers = {name: frozenset(s) for name, s in consumers.items()}
        # the tensors each step reads, each once (one may feed two of its inputs)
        self._sources = [tuple(dict.fromkeys(step.inputs.values())) for step in steps]
        self.decoupled = bool(config.model_transaction_policy.decoupled)

    # -- Scheduler protocol: an ensemble has no instances or queue of its own --------------
    def next_payload(self) -> None:
        return None

    def queued_count(self) -> int:
        return 0

    def stop(self) -> None:
        pass

    def drain(self) -> None:
        pass

    def enqueue(self, request: InferRequest, *, take: bool = False,
                chain: object | None = None) -> None:
        # the steps are requests of their own: nothing for the caller to run here
        requested = request.requested_outputs or self._outputs
        run = _Run(request, self._pruned(requested), tuple(requested))
        request.on_cancel(lambda: self._cancel(run))
        batch_size = request.batch_size if self._batching else 0
        updated: _Updated = set()
        with run.lock:
            for name, tensor in request.inputs.items():
                data = run.tensors.get(name)
                if data is not None:
                    updated.add((name, data.add(tensor, batch_size, None)))
            for name in self._optional_inputs:
                data = run.tensors.get(name)
                if data is not None and not data.values and data.next_iteration == 0:
                    updated.add((name, data.add(None, batch_size, None)))
            self._proceed(run, updated)

    def _pruned(self, requested: Sequence[str]) -> Mapping[str, frozenset[int]]:
        """The consumers of each tensor without the steps whose outputs nobody needs:
        walk back from the outputs the request does not ask for."""
        ignored = set(self._outputs).difference(requested)
        if not ignored:
            return self._consumers
        consumers = {name: set(steps) for name, steps in self._consumers.items()}
        unneeded: dict[int, int] = {}  # step -> outputs of it still possibly needed
        while ignored:
            next_ignored: set[str] = set()
            for tensor in ignored:
                index = self._producer.get(tensor)
                if index is None:
                    continue  # an ensemble input no step needs
                step = self._steps[index]
                left = unneeded.setdefault(index, len(step.outputs)) - 1
                unneeded[index] = left
                if left == 0:
                    for source in step.inputs.values():
                        readers = consumers[source]
                        readers.discard(index)
                        if not readers:
                            next_ignored.add(source)
            ignored = next_ignored
        return {name: frozenset(steps) for name, steps in consumers.items()}

    # -- the DAG ---------------------------------------------------------------------------
    def _proceed(self, run: _Run, updated: _Updated) -> None:
        """After ``updated`` were written: answer if the outputs are complete (final once
        nothing is left in flight), then send the steps now ready. As in Triton, the
        answer is settled before the steps go out: one of them may answer inline."""
        if run.status is None:
            ready = self._ready_steps(run, updated)
            self._finish(run, self._complete_outputs(run, updated) if updated else None)
            for index, iteration in ready:
                if run.status is not None or run.done:
                    run.inflight -= 1  # not sent
                    continue
                self._send(run, self._steps[index], iteration)
        if run.status is not None:
            self._fail(run, run.status)

    def _ready_steps(self, run: _Run, updated: _Updated) -> list[tuple[int, int]]:
        ready: set[tuple[int, int]] = set()
        for name, iteration in updated:
            for index in run.consumers.get(name, ()):
                if all(iteration in run.tensors[tensor].values
                       for tensor in self._sources[index]):
                    ready.add((index, iteration))
        run.inflight += len(ready)  # counted before any is sent: one may answer inline
        return sorted(ready)

    def _send(self, run: _Run, step: EnsembleStep, iteration: int) -> None:
        request = run.request
        inputs: dict[str, Tensor] = {}
        sequence: _Sequence | None = None
        for model_input, name in step.inputs.items():
            value = run.tensors[name].values[iteration]
            tensor = value.tensor
            if tensor is not None:
                if step.batching == (value.batch_size != 0):  # the common case: as it is
                    inputs[model_input] = tensor
                else:
                    shape = _reshape_dims(step.input_dims[model_input], step.batching,
                                          value.batch_size, tensor.shape)
                    inputs[model_input] = (tensor if shape == tensor.shape
                                           else tensor.reshape(shape))
            if value.sequence is not None:
                if sequence is not None and not sequence.same(value.sequence):
                    logger.error(
                        "%sDifferent set of response parameters are set for '%s'. Parameter "
                        "correlation ID %s, flags %d is used.", request_label(request.id),
                        step.model_name, sequence.correlation_id, _flags(sequence))
                    continue
                sequence = value.sequence
        for name in self._sources[step.index]:
            run.tensors[name].release(iteration)
        if sequence is None:
            sequence = _Sequence(request.correlation_id, bool(request.sequence_start),
                                 bool(request.sequence_end))
        step_request = InferRequest(
            step.model_name,
            inputs,
            model_version=step.model_version,
            id=request.id,
            requested_outputs=list(step.outputs),
            parameters=request.parameters,
            priority=request.priority,
            timeout_us=request.timeout_us,
            correlation_id=sequence.correlation_id,
            sequence_start=sequence.start,
            sequence_end=sequence.end,
        )
        # A traced ensemble request traces its steps as children; an untraced one's steps
        # are never sampled on their own (Triton samples only clients' requests).
        parent = request.trace
        step_request.trace = NO_TRACE if parent is None else parent.spawn_child()

        def on_response(response: InferResponse | None, final: bool) -> None:
            self._on_step_response(run, step, step_request, sequence, response, final)

        try:
            stream = self._infer(step_request, raise_on_error=False, callback=on_response)
        except TritonError as exc:
            run.inflight -= 1
            if run.status is None:
                run.status = exc
            return
        run.streams.append(stream)

    def _on_step_response(self, run: _Run, step: EnsembleStep, step_request: InferRequest,
                          sequence: _Sequence, response: InferResponse | None,
                          final: bool) -> None:
        with run.lock:
            if final:  # its execution is recorded by now (final responses are held)
                run.durations.add(step_request)
                run.inflight -= 1
            if run.status is not None or run.done:
                return
            updated: _Updated = set()
            if response is not None:
                try:
                    self._take_outputs(run, step, step_request, sequence, response, updated)
                except TritonError as exc:
                    run.status = exc
            self._proceed(run, updated)

    def _take_outputs(self, run: _Run, step: EnsembleStep, step_request: InferRequest,
                      sequence: _Sequence, response: InferResponse, updated: _Updated) -> None:
        """Write the step's outputs as new values of their ensemble tensors (an output it
        did not produce becomes a value without a tensor)."""
        if response.error is not None:
            raise response.error
        sequence = _response_sequence(response, sequence)
        batch_size = step_request.batch_size if step.batching else 0
        for model_output, name in step.outputs.items():
            data = run.tensors.get(name)
            if data is None:
                continue
            tensor = response.outputs.get(model_output)
            updated.add((name, data.add(tensor, batch_size, sequence)))

    def _complete_outputs(self, run: _Run, updated: _Updated
                          ) -> tuple[dict[str, Tensor], _Sequence | None] | None:
        """The response, if ``updated`` completed an iteration of every requested output."""
        requested = run.requested
        ready = False
        iteration = 0
        for name, written in updated:
            if name not in requested:
                continue
            iteration = written
            ready = all(written in run.tensors[output].values for output in requested)
        if not ready:
            return None
        outputs: dict[str, Tensor] = {}
        sequence: _Sequence | None = None
        batch_size = run.request.batch_size if self._batching else 0
        for name in self._response_order:
            if name not in requested:
                continue
            data = run.tensors[name]
            value = data.values[iteration]
            tensor = value.tensor
            if tensor is None:
                logger.debug("Composing models did not output tensor %s", name)
                continue
            if (batch_size != 0) != (value.batch_size != 0):
                shape = _reshape_dims(self._output_dims[name], batch_size != 0,
                                      value.batch_size, tensor.shape)
                if shape != tensor.shape:
                    tensor = tensor.reshape(shape)
            outputs[name] = tensor
            if 0 in tensor.shape:
                continue  # Triton is done with an empty output before its parameters
            data.release(iteration)
            sequence = value.sequence or sequence
        return outputs, sequence

    def _finish(self, run: _Run,
                response: tuple[dict[str, Tensor], _Sequence | None] | None) -> None:
        """Answer ``response``, final once no step is in flight (a non-decoupled run keeps
        its answer until then); at the end of a run that never answered, fail it (a
        decoupled ensemble may end without a response)."""
        sender = run.request.sender
        if run.done or sender is None or sender.closed:
            return
        final = run.inflight == 0
        if response is not None and not final and not self.decoupled:
            run.held, response = response, None
        if response is None and final:
            run.held, response = None, run.held
        if response is None:
            if not final:
                return
            if not self.decoupled and not run.responded:
                self._fail(run, InvalidArgumentError(
                    f"in ensemble '{self._name}', {request_label(run.request.id)}unexpected "
                    "deadlock, at least one output is not set while no more ensemble steps "
                    "can be made"), prefix=False)
                return
            run.done = True
            self._on_succeeded(run.request, run.durations)
            sender.close()
            return
        outputs, sequence = response
        if final:
            run.done = True
            # recorded before the answer goes out: a caller that has its answer sees stats
            self._on_succeeded(run.request, run.durations)
        run.responded = True
        sender.send(outputs, parameters=_sequence_parameters(sequence), final=final)

    def _fail(self, run: _Run, error: TritonError, *, prefix: bool = True) -> None:
        """End the run with ``error`` (once); Triton names the ensemble before it."""
        if run.done:
            return
        run.done = True
        if run.status is None:
            run.status = error
        sender = run.request.sender
        if sender is not None and not sender.closed:
            sender.send_error(_in_ensemble(self._name, error) if prefix else error)
        self._on_failed(run.request)

    def _cancel(self, run: _Run) -> None:
        with run.lock:
            self._fail(run, CancelledError("Request was cancelled"), prefix=False)
            for stream in run.streams:
                stream.cancel()


def _flags(sequence: _Sequence) -> int:
    """Triton's request flags: SEQUENCE_START 1, SEQUENCE_END 2."""
    return int(sequence.start) | (int(sequence.end) << 1)


def _in_ensemble(name: str, error: TritonError) -> TritonError:
    """``error`` with the ensemble named first, as Triton reports a step's failure."""
    return type(error)(f"in ensemble '{name}', {error.message}")


def _response_sequence(response: InferResponse, sequence: _Sequence) -> _Sequence:
    """The sequence a step's response passes on: its own, unless the response's
    parameters set ``sequence_id``, ``sequence_start`` or ``sequence_end``."""
    parameters = response.parameters
    if not parameters or not any(key in parameters for key in _SEQUENCE_KEYS):
        return sequence
    correlation_id: int | str = sequence.correlation_id
    start = end = False  # flags not given are cleared once any parameter overrides
    for key, value in parameters.items():
        if key == "sequence_id":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise InvalidArgumentError(
                    "expected parameter 'sequence_id' to be TRITONSERVER_PARAMETER_INT or "
                    "TRITONSERVER_PARAMETER_STRING")
            correlation_id = value
        elif key in ("sequence_start", "sequence_end"):
            if not isinstance(value, bool):
                raise InvalidArgumentError(
                    f"expect parameter '{key}' to be TRITONSERVER_PARAMETER_BOOL")
            if key == "sequence_start":
                start = value
            else:
                end = value
    return _Sequence(correlation_id, start, end)


_SEQUENCE_KEYS = ("sequence_id", "sequence_start", "sequence_end")


def _sequence_parameters(sequence: _Sequence | None) -> dict[str, Any] | None:
    """The parameters an ensemble response carries in Triton: the sequence id and flags
    of the values it answers with (0 and false outside a sequence)."""
    if sequence is None:
        return None
    return {"sequence_id": sequence.correlation_id or 0,
            "sequence_start": sequence.start, "sequence_end": sequence.end}
