"""How a config's tensors meet a TorchScript ``forward()``: Triton's naming conventions.

Inputs, in Triton's order of preference:

    dictionary              forward(self, inputs: Dict[str, Tensor]): the config's input
                            names are the dictionary's keys
    FORWARD_ARGUMENT        every config input is named after a forward() argument; they
                            are passed by keyword, so arguments with defaults may be left out
    NAMED_INDEX             every config input is named <name>__<index>: argument <index>
    STRICT_CONFIG_ORDERING  otherwise the config's order is forward()'s order

Outputs: a returned tuple or list is indexed by <index> when every config output is named
<name>__<index>, else by the config's order; a Dict[str, Tensor] is read by name; a
single Tensor (or List[str]) is the one configured output.

``plan_call`` checks all this once at load (the schema's argument names, count and types
against the config) and returns a ``CallPlan``, which the instance uses on every execution.
Pure functions of the config and the module's schema; no torch import is needed here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2

from ..errors import InternalError, InvalidArgumentError

__all__ = ["CallPlan", "plan_call"]

_NAMED_INDEX = re.compile(r"^.*__(\d+)$")

FORWARD_ARGUMENT = "FORWARD_ARGUMENT"
NAMED_INDEX = "NAMED_INDEX"
STRICT_CONFIG_ORDERING = "STRICT_CONFIG_ORDERING"
DICTIONARY = "DICTIONARY"


@dataclass(frozen=True, slots=True)
class CallPlan:
    """How to call forward() and read its result, for one model version."""

    model: str
    input_convention: str
    output_convention: str
    positions: Mapping[str, int]  # input name -> argument index (positional conventions)
    arg_count: int
    required_count: int  # leading arguments without a default
    string_inputs: frozenset[str]
    output_positions: Mapping[str, int]  # output name -> index in a returned tuple/list

    def arguments(self, tensors: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """(positional, keyword) arguments of forward() for the given inputs."""
        convention = self.input_convention
        if convention == DICTIONARY:
            return [tensors], {}
        if convention == FORWARD_ARGUMENT:
            return [], tensors
        args: list[Any] = [None] * self.arg_count
        for name, value in tensors.items():
            args[self.positions[name]] = value
        end = self.arg_count
        while end > self.required_count and args[end - 1] is None:
            end -= 1  # trailing optional inputs nobody sent keep forward()'s defaults
        return args[:end], {}

    def outputs(self, result: Any, names: Sequence[str]) -> list[tuple[str, Any]]:
        """(output name, value) for each wanted output, from what forward() returned."""
        if isinstance(result, dict):
            missing = [name for name in names if name not in result]
            if missing:
                raise InternalError(
                    f"model '{self.model}' returned a dictionary without the output(s) "
                    f"{', '.join(repr(n) for n in missing)}; it has {sorted(result)}"
                )
            return [(name, result[name]) for name in names]
        if isinstance(result, tuple) or (
            isinstance(result, list) and not all(isinstance(item, str) for item in result)
        ):
            values = []
            for name in names:
                index = self.output_positions[name]
                if index >= len(result):
                    raise InternalError(
                        f"model '{self.model}' returned {len(result)} outputs, but output "
                        f"'{name}' is number {index}"
                    )
                values.append((name, result[index]))
            return values
        if len(self.output_positions) != 1:
            raise InternalError(
                f"model '{self.model}' returned one value, but its configuration declares "
                f"{len(self.output_positions)} outputs"
            )
        return [(name, result) for name in names]


def plan_call(config: model_config_pb2.ModelConfig, module: Any) -> CallPlan:
    """Match the config's inputs and outputs to ``module.forward``'s schema.

    Raises:
        InvalidArgumentError: the config and forward() disagree (names, count, types).
    """
    model = config.name
    arguments = list(module.forward.schema.arguments)[1:]  # without self
    arg_names = [argument.name for argument in arguments]
    inputs = [tensor.name for tensor in config.input]
    strings = frozenset(t.name for t in config.input
                        if t.data_type == model_config_pb2.TYPE_STRING)
    required = 0
    for argument in arguments:
        if argument.has_default_value():
            break
        required += 1

    if len(arguments) == 1 and arguments[0].type.kind() == "DictType":
        if str(arguments[0].type) != "Dict[str, Tensor]" or strings:
            raise InvalidArgumentError(
                f"unable to load model '{model}': forward() takes {arguments[0].type}; a "
                "dictionary input must map str to Tensor"
            )
        convention, positions = DICTIONARY, {name: 0 for name in inputs}
    else:
        convention, positions = _input_positions(model, inputs, arg_names, required)
        for name, index in positions.items():
            _check_type(model, name, name in strings, arguments[index])

    if len(config.output) and all(_NAMED_INDEX.match(o.name) for o in config.output):
        output_convention = NAMED_INDEX
        output_positions = {o.name: _index_of(o.name) for o in config.output}
    else:
        output_convention = STRICT_CONFIG_ORDERING
        output_positions = {o.name: index for index, o in enumerate(config.output)}
    _check_returns(model, module, output_positions)
    return CallPlan(model, convention, output_convention, positions, len(arguments), required,
                    strings, output_positions)


def _index_of(name: str) -> int:
    match = _NAMED_INDEX.match(name)
    assert match is not None
    return int(match.group(1))


def _input_positions(
    model: str, inputs: list[str], arg_names: list[str], required: int
) -> tuple[str, dict[str, int]]:
    if len(inputs) > len(arg_names):
        raise InvalidArgumentError(
            f"unable to load model '{model}', configuration expects {len(inputs)} inputs, "
            f"model provides {len(arg_names)}"
        )
    if all(name in arg_names for name in inputs):
        positions = {name: arg_names.index(name) for name in inputs}
        for index in range(required):
            if arg_names[index] not in positions:
                raise InvalidArgumentError(
                    f"unable to load model '{model}': forward() argument "
                    f"'{arg_names[index]}' has no default value and no input of the "
                    "configuration is named after it"
                )
        return FORWARD_ARGUMENT, positions
    if all(_NAMED_INDEX.match(name) for name in inputs):
        positions = {name: _index_of(name) for name in inputs}
        by_index: dict[int, str] = {}
        for name, index in positions.items():
            if index >= len(arg_names):
                raise InvalidArgumentError(
                    f"unable to load model '{model}': input '{name}' names argument {index}, "
                    f"but forward() takes {len(arg_names)} arguments ({', '.join(arg_names)})"
                )
            if index in by_index:
                raise InvalidArgumentError(
                    f"unable to load model '{model}': inputs '{by_index[index]}' and "
                    f"'{name}' both name argument {index}"
                )
            by_index[index] = name
        absent = [arg_names[i] for i in range(required) if i not in by_index]
        if absent:
            raise InvalidArgumentError(
                f"unable to load model '{model}': forward() argument(s) "
                f"{', '.join(repr(a) for a in absent)} have no default value and no input "
                "of the configuration names their index"
            )
        return NAMED_INDEX, positions
    if len(inputs) < required:
        raise InvalidArgumentError(
            f"unable to load model '{model}', configuration expects {len(inputs)} inputs, "
            f"model provides {len(arg_names)} ({required} without a default value); the "
            "input names follow no naming convention, so the configuration's order is "
            "forward()'s order"
        )
    return STRICT_CONFIG_ORDERING, {name: index for index, name in enumerate(inputs)}


def _check_type(model: str, name: str, is_string: bool, argument: Any) -> None:
    kind = str(argument.type)
    fits = kind == "List[str]" if is_string else kind in ("Tensor", "Optional[Tensor]")
    if not fits:
        expected = "List[str]" if is_string else "Tensor"
        raise InvalidArgumentError(
            f"unable to load model '{model}': input '{name}' is passed to forward() argument "
            f"'{argument.name}', which takes {kind}, not {expected}"
            + (" (TYPE_STRING inputs are passed as List[str])" if is_string else "")
        )


def _check_returns(model: str, module: Any, positions: Mapping[str, int]) -> None:
    returns = module.forward.schema.returns
    if len(returns) != 1:
        return
    returned = returns[0].type
    if returned.kind() == "TupleType":
        count = len(returned.elements())
        for name, index in positions.items():
            if index >= count:
                raise InvalidArgumentError(
                    f"unable to load model '{model}': output '{name}' is number {index}, but "
                    f"forward() returns {count} values"
                )
    elif returned.kind() in ("TensorType",) and len(positions) != 1:
        raise InvalidArgumentError(
            f"unable to load model '{model}': forward() returns one Tensor, but the "
            f"configuration declares {len(positions)} outputs"
        )
