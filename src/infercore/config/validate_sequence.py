"""Validation of sequence_batching (the sequence part of Triton's ValidateModelConfig).

Messages are Triton's; like Triton's, they already end with the model name.
"""

from __future__ import annotations

from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2

__all__ = ["sequence_errors"]

_Control = model_config_pb2.ModelSequenceBatching.Control

# Boolean controls carry their false/true values in exactly one of these fields.
_BOOLEAN_KINDS = (
    _Control.CONTROL_SEQUENCE_START,
    _Control.CONTROL_SEQUENCE_END,
    _Control.CONTROL_SEQUENCE_READY,
)
_FALSE_TRUE_FIELDS = ("int32_false_true", "fp32_false_true", "bool_false_true")
_CORRID_TYPES = frozenset(
    {
        model_config_pb2.TYPE_UINT64,
        model_config_pb2.TYPE_INT64,
        model_config_pb2.TYPE_UINT32,
        model_config_pb2.TYPE_INT32,
        model_config_pb2.TYPE_STRING,
    }
)


def sequence_errors(config: model_config_pb2.ModelConfig) -> Iterator[str]:
    """Yield the problems with the config's sequence batcher, in Triton's order."""
    if not config.HasField("sequence_batching"):
        return
    name = config.name
    batcher = config.sequence_batching
    if config.response_cache.enable:
        yield (
            f"Response Cache does not currently support model {name} with sequence "
            "batching scheduler. Please disable the response cache."
        )
    yield from _tensor_name_errors(batcher, name)
    for kind in _BOOLEAN_KINDS:
        yield from _boolean_control_errors(batcher, kind, name)
    yield from _corrid_errors(batcher, name)

    if batcher.HasField("oldest"):
        for size in batcher.oldest.preferred_batch_size:
            if size <= 0:
                yield f"sequence batching preferred batch size must be positive for {name}"
            elif size > config.max_batch_size:
                yield (
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    if batcher.HasField("direct"):
        utilization = batcher.direct.minimum_slot_utilization
        if utilization < 0.0 or utilization > 1.0:
            yield (
                "sequence batching minimum slot utilization must be in range (0.0, 1.0] for " + name
            )


def _tensor_name_errors(
    batcher: model_config_pb2.ModelSequenceBatching, name: str
) -> Iterator[str]:
    seen: set[str] = set()
    for control_input in batcher.control_input:
        if not control_input.name:
            yield f"sequence batching control tensor must have a name for {name}"
        elif control_input.name in seen:
            yield (
                f"sequence batching control tensor '{control_input.name}' is specified for "
                f"multiple control kinds for {name}"
            )
        seen.add(control_input.name)


def _controls_of_kind(
    batcher: model_config_pb2.ModelSequenceBatching, kind: int
) -> list[model_config_pb2.ModelSequenceBatching.Control]:
    return [c for ci in batcher.control_input for c in ci.control if c.kind == kind]


def _boolean_control_errors(
    batcher: model_config_pb2.ModelSequenceBatching, kind: int, name: str
) -> Iterator[str]:
    """Triton's GetBooleanSequenceControlProperties, without the values it extracts."""
    kind_name = _Control.Kind.Name(kind)
    controls = _controls_of_kind(batcher, kind)
    if len(controls) > 1:
        yield f"sequence batching specifies multiple {kind_name} tensors for {name}"
    for control in controls:
        given = [field for field in _FALSE_TRUE_FIELDS if len(getattr(control, field))]
        if not given:
            yield (
                "sequence batching must specify either 'int32_false_true', 'fp32_false_true' "
                f"or 'bool_false_true' for {kind_name} for {name}"
            )
        elif len(given) > 1:
            yield (
                "sequence batching specifies more than one from 'int32_false_true', "
                f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}"
            )
        elif len(getattr(control, given[0])) != 2:
            yield (
                f"sequence batching control '{given[0]}' must have exactly 2 entries for "
                f"{kind_name} for {name}"
            )


def _corrid_errors(batcher: model_config_pb2.ModelSequenceBatching, name: str) -> Iterator[str]:
    """Triton's GetTypedSequenceControlProperties for CONTROL_SEQUENCE_CORRID."""
    kind_name = _Control.Kind.Name(_Control.CONTROL_SEQUENCE_CORRID)
    controls = _controls_of_kind(batcher, _Control.CONTROL_SEQUENCE_CORRID)
    if len(controls) > 1:
        yield f"sequence batching specifies multiple {kind_name} tensors for {name}"
    for control in controls:
        if any(len(getattr(control, field)) for field in _FALSE_TRUE_FIELDS):
            yield (
                "sequence batching must not specify either 'int32_false_true', "
                f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {name}"
            )
        elif control.data_type not in _CORRID_TYPES:
            yield (
                f"unexpected data type for control {kind_name} for {name}. Allowed data "
                "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
            )
