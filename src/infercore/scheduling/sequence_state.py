"""What the sequence batcher adds to each request: control inputs and implicit state.

    SequenceControls(config)           START / END / READY / CORRID tensors, built at load
    ImplicitState.from_config(...)     the ``state`` entries, or None when there are none
    StateSender                        stands in for a request's sender while it executes,
                                       taking the next state out of its responses

Control inputs (model_config.proto ``ModelSequenceBatching.Control``): each configured
control becomes an input of shape ``[1]`` per batch item, so ``[1, 1]`` when the model
batches and ``[1]`` when it does not. START, END and READY carry the control's false or
true value in its datatype (``int32_false_true`` -> INT32, ``fp32_false_true`` -> FP32,
``bool_false_true`` -> BOOL); READY is always true, since no "null" requests are sent
(see sequence.py). CORRID carries the correlation id in the control's ``data_type``: a
string id as one BYTES element; an integer id as its low-order 64 bits, truncated to the
low-order 32 bits for the 32-bit types (as model_config.proto says).

Implicit state (``state`` entries): the state of each sequence starts as the entry's
``initial_state`` (zeros, or the raw row-major contents of
``<model dir>/initial_state/<data_file>``) or, without one, as zeros whose variable dims
are 1 (Triton leaves that first state uninitialised; zeros make it deterministic). Before a
request executes its sequence's current state is added as the input ``input_name`` (with a
batch dim of 1 when the model batches); the ``output_name`` tensor of the response becomes
the next state. The client receives that output only when the config's ``output`` section
lists it and the request asked for it (or for all outputs), as Triton documents: "to allow
the client to request the output state, the output section of the model configuration must
list the output state". A model should return the state output whatever its
``requested_output_names()`` say.

Threads: the controls and initial states are immutable after load (their arrays are
read-only), so any thread may use them. ``StateSender.send`` runs on whichever thread
answers the request (the instance's thread, or a decoupled model's own thread) and writes
the sequence's state dict; the batcher reads that dict when it forms the sequence's next
request, which for models that are not decoupled is after the execution returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError, TritonError
from ..request import InferRequest, ParameterValue
from ..response import ResponseSender
from ..tensor import DataType, Tensor, deserialize_bytes_tensor

__all__ = ["ImplicitState", "SequenceControls", "StateSender", "StateSpec"]

_Control = model_config_pb2.ModelSequenceBatching.Control
INITIAL_STATE_FOLDER = "initial_state"  # data_file is read from <model_dir>/initial_state/
_U64 = (1 << 64) - 1


def _constant(array: np.ndarray, data_type: DataType) -> Tensor:
    """A tensor shared by many requests: read-only, so no model can change it for others."""
    array.flags.writeable = False
    return Tensor(data_type, array)


@dataclass(frozen=True, slots=True)
class _Flag:
    """One boolean control: its input name and its false / true tensors."""

    name: str
    false: Tensor
    true: Tensor


class SequenceControls:
    """The control inputs a model configured, added to each request of a sequence."""

    def __init__(self, config: model_config_pb2.ModelConfig) -> None:
        self._shape = (1, 1) if config.max_batch_size > 0 else (1,)
        batcher = config.sequence_batching
        self._start = self._flag(batcher, _Control.CONTROL_SEQUENCE_START)
        self._end = self._flag(batcher, _Control.CONTROL_SEQUENCE_END)
        self._ready = self._flag(batcher, _Control.CONTROL_SEQUENCE_READY)
        corrid = _find(batcher, _Control.CONTROL_SEQUENCE_CORRID)
        self._corrid: tuple[str, DataType] | None = None
        if corrid is not None:
            name, control = corrid
            self._corrid = (name, DataType.from_config(
                model_config_pb2.DataType.Name(control.data_type)))

    def _flag(self, batcher: model_config_pb2.ModelSequenceBatching, kind: int) -> _Flag | None:
        found = _find(batcher, kind)
        if found is None:
            return None
        name, control = found
        # config validation guarantees exactly one of the fields, with two entries
        values: Any
        if len(control.int32_false_true):
            data_type, values = DataType.INT32, control.int32_false_true
        elif len(control.fp32_false_true):
            data_type, values = DataType.FP32, control.fp32_false_true
        else:
            data_type, values = DataType.BOOL, control.bool_false_true
        dtype = data_type.numpy_dtype
        return _Flag(name,
                     _constant(np.full(self._shape, values[0], dtype), data_type),
                     _constant(np.full(self._shape, values[1], dtype), data_type))

    def check_correlation_id(self, model_name: str, correlation_id: int | str) -> None:
        """Raise InvalidArgumentError unless the id names a sequence this model can take."""
        if correlation_id in (0, ""):
            raise InvalidArgumentError(
                f"inference request to model '{model_name}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        if self._corrid is None:
            return
        # Triton copies whatever bytes the id has into the tensor; a clear error is kinder.
        name, data_type = self._corrid
        if data_type is DataType.BYTES and not isinstance(correlation_id, str):
            raise InvalidArgumentError(
                f"inference request to model '{model_name}' must specify a string "
                f"correlation ID: its CORRID control '{name}' is TYPE_STRING"
            )
        if data_type is not DataType.BYTES and not isinstance(correlation_id, int):
            raise InvalidArgumentError(
                f"inference request to model '{model_name}' must specify an integer "
                f"correlation ID: its CORRID control '{name}' is {data_type.config_name}"
            )

    def add_to(self, request: InferRequest) -> None:
        """Put the control tensors for ``request`` among its inputs."""
        inputs = request.inputs
        if self._start is not None:
            inputs[self._start.name] = (self._start.true if request.sequence_start
                                        else self._start.false)
        if self._end is not None:
            inputs[self._end.name] = self._end.true if request.sequence_end else self._end.false
        if self._ready is not None:
            inputs[self._ready.name] = self._ready.true
        if self._corrid is not None:
            name, data_type = self._corrid
            inputs[name] = self._corrid_tensor(request.correlation_id, data_type)

    def add_null_to(self, request: InferRequest) -> None:
        """The control tensors of a null (padding) request, as Triton's direct strategy
        sets them: START, END and READY false, CORRID 0 (empty for a string id)."""
        inputs = request.inputs
        for flag in (self._start, self._end, self._ready):
            if flag is not None:
                inputs[flag.name] = flag.false
        if self._corrid is not None:
            name, data_type = self._corrid
            inputs[name] = self._corrid_tensor("" if data_type is DataType.BYTES else 0,
                                               data_type)

    def _corrid_tensor(self, correlation_id: int | str, data_type: DataType) -> Tensor:
        if isinstance(correlation_id, str):
            array = np.empty(self._shape, dtype=np.object_)
            array.flat[0] = correlation_id.encode("utf-8")
            return Tensor(DataType.BYTES, array)
        # astype wraps around, which is the truncation to the low-order bits we want
        low = np.full(self._shape, correlation_id & _U64, np.uint64)
        return Tensor(data_type, low.astype(data_type.numpy_dtype))


def _find(
    batcher: model_config_pb2.ModelSequenceBatching, kind: int
) -> tuple[str, model_config_pb2.ModelSequenceBatching.Control] | None:
    """(input name, control) of the control of ``kind``, if configured."""
    for control_input in batcher.control_input:
        for control in control_input.control:
            if control.kind == kind:
                return control_input.name, control
    return None


# -- implicit state ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StateSpec:
    """One ``state`` entry, ready for use."""

    input_name: str
    output_name: str
    initial: Tensor  # in the model's view: with the batch dim when it batches
    shown: bool  # listed among the config's outputs: a client may receive it


class ImplicitState:
    """The model's implicit state entries: initial tensors, and the state outputs."""

    def __init__(self, specs: tuple[StateSpec, ...]) -> None:
        self.specs = specs

    @classmethod
    def from_config(
        cls, config: model_config_pb2.ModelConfig, model_dir: Path | None
    ) -> ImplicitState | None:
        """The state entries of ``config``; None without any.

        Raises:
            InvalidArgumentError: an ``initial_state`` Triton would reject (its messages).
        """
        states = config.sequence_batching.state
        if not states:
            return None
        outputs = frozenset(output.name for output in config.output)
        seen: set[str] = set()
        specs = []
        for state in states:
            if state.input_name in seen:
                raise InvalidArgumentError(
                    f"State input name '{state.input_name}' specified more than once.")
            seen.add(state.input_name)
            initial = _initial_state(state, config.max_batch_size > 0, model_dir)
            specs.append(StateSpec(state.input_name, state.output_name, initial,
                                   state.output_name in outputs))
        return cls(tuple(specs))

    def initial(self) -> dict[str, Tensor]:
        """A fresh state for a starting sequence: input name -> tensor."""
        return {spec.input_name: spec.initial for spec in self.specs}

    def add_to(self, request: InferRequest, state: dict[str, Tensor]) -> None:
        """Give ``request`` its sequence's state as inputs, and capture the next state
        from its responses."""
        for spec in self.specs:
            request.inputs[spec.input_name] = state[spec.input_name]
        inner = request.sender
        if inner is not None:
            # A stand-in, not a ResponseSender: everything but send() is delegated.
            request.sender = cast(ResponseSender, StateSender(inner, self.specs, state))


def _initial_state(
    state: model_config_pb2.ModelSequenceBatching.State, batching: bool,
    model_dir: Path | None,
) -> Tensor:
    data_type = DataType.from_config(model_config_pb2.DataType.Name(state.data_type))
    batch = (1,) if batching else ()
    if len(state.initial_state) > 1:
        raise InvalidArgumentError(
            f"initial_state field for state input '{state.input_name}' must contain exactly "
            f"one or zero element. Found '{len(state.initial_state)}' elements.")
    if not state.initial_state:
        dims = tuple(1 if d == -1 else int(d) for d in state.dims)
        return _constant(_zeros(batch + dims, data_type), data_type)
    initial = state.initial_state[0]
    dims = _initial_dims(state, initial)
    shape = batch + dims
    which = initial.WhichOneof("state_data")
    if which == "zero_data":
        return _constant(_zeros(shape, data_type), data_type)
    if which == "data_file":
        return _constant(_read_state_file(state.input_name, initial.data_file, shape,
                                          data_type, model_dir), data_type)
    raise InvalidArgumentError(
        f"initial_state setting expects state '{state.input_name}' to have state_data set")


def _initial_dims(
    state: model_config_pb2.ModelSequenceBatching.State,
    initial: model_config_pb2.ModelSequenceBatching.InitialState,
) -> tuple[int, ...]:
    """The initial state's dims, checked against the state's (Triton's messages)."""
    name = state.input_name
    if initial.data_type != state.data_type:
        raise InvalidArgumentError(
            f"The data type used for 'initial_state' field of state '{name}' does not match "
            "the state data type.")
    if not initial.name:
        raise InvalidArgumentError(
            f"Field 'name' must be set when using initial_state for state input '{name}'.")
    if len(initial.dims) != len(state.dims):
        raise InvalidArgumentError(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(initial.dims)} != {len(state.dims)}")
    for initial_dim, state_dim in zip(initial.dims, state.dims, strict=True):
        if initial_dim == -1:
            raise InvalidArgumentError(
                f"'initial_state' field for state input name '{name}' contains variable "
                "dimensions.")
        if state_dim != -1 and initial_dim != state_dim:
            raise InvalidArgumentError(
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim "
                f"description. {initial_dim} != {state_dim}")
    return tuple(int(d) for d in initial.dims)


def _zeros(shape: tuple[int, ...], data_type: DataType) -> np.ndarray:
    if data_type is DataType.BYTES:
        return np.full(shape, b"", dtype=np.object_)
    return np.zeros(shape, data_type.numpy_dtype)


def _read_state_file(
    input_name: str, file_name: str, shape: tuple[int, ...], data_type: DataType,
    model_dir: Path | None,
) -> np.ndarray:
    """The initial state from ``<model_dir>/initial_state/<file_name>``, row-major."""
    if model_dir is None:
        raise InvalidArgumentError(
            f"initial_state of state input '{input_name}' needs a model directory to read "
            f"'{file_name}' from")
    folder = (Path(model_dir) / INITIAL_STATE_FOLDER).resolve()
    path = (folder / file_name).resolve()
    if not path.is_relative_to(folder):
        raise InvalidArgumentError(
            f"initial_state file '{file_name}' of state input '{input_name}' is outside the "
            f"model's '{INITIAL_STATE_FOLDER}' folder")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(
            f"failed to read initial_state file '{file_name}' of state input '{input_name}':"
            f" {exc.strerror}") from exc
    count = int(np.prod(shape, dtype=np.int64))
    if data_type is DataType.BYTES:
        # the file holds the elements in the wire form: 4-byte length, then the bytes
        return deserialize_bytes_tensor(data, count).reshape(shape)
    needed = count * data_type.byte_size
    if len(data) < needed:
        raise InvalidArgumentError(
            f"initial_state setting expects {needed} bytes, but the data provided from "
            f"{file_name} only has {len(data)} bytes.")
    return np.frombuffer(data[:needed], dtype=data_type.numpy_dtype).reshape(shape)


class StateSender:
    """Stands in for a request's ResponseSender while the request may answer.

    Every response passes through ``send``: state outputs become the sequence's next state
    and are removed unless the client may see them; everything else goes to the real sender
    (``hold``, ``closed``, ``failed`` ... are read from it).
    """

    __slots__ = ("_inner", "_specs", "_state")

    def __init__(self, inner: ResponseSender, specs: tuple[StateSpec, ...],
                 state: dict[str, Tensor]) -> None:
        self._inner = inner
        self._specs = specs
        self._state = state

    def send(
        self,
        outputs: Mapping[str, Tensor] | None = None,
        *,
        parameters: Mapping[str, ParameterValue] | None = None,
        error: TritonError | None = None,
        final: bool = True,
    ) -> None:
        if outputs:
            outputs = self._take_state(outputs)
        self._inner.send(outputs, parameters=parameters, error=error, final=final)

    def _take_state(self, outputs: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        kept: dict[str, Tensor] | None = None
        for spec in self._specs:
            tensor = outputs.get(spec.output_name)
            if tensor is None:
                continue
            self._state[spec.input_name] = tensor
            if not spec.shown:
                if kept is None:
                    kept = dict(outputs)
                del kept[spec.output_name]
        return outputs if kept is None else kept

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
