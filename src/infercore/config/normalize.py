"""Triton's defaults, applied in place: NormalizeModelConfig and NormalizeInstanceGroup.

Only what Triton itself fills is filled here, so the config endpoints show what Triton
would show. Fields Triton leaves unset (the sequence batcher's strategy, the transaction
policy, queue policies) stay unset; their proto3 defaults already mean what Triton means.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2

from .platform import ONNXRUNTIME_BACKEND, TENSORFLOW_BACKEND, default_model_filename
from .platform import resolve_backend as _resolve_backend

__all__ = ["normalize_model_config"]

_Group = model_config_pb2.ModelInstanceGroup

SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000

# Triton's SetDefaultInstanceCount: these backends get two CPU instances by default; the
# others (pytorch, openvino, ...) run slower with several instances, so they get one.
_DEFAULT_CPU_INSTANCE_COUNT = 2
_MULTI_CPU_INSTANCE_BACKENDS = frozenset({TENSORFLOW_BACKEND, ONNXRUNTIME_BACKEND})


def normalize_model_config(
    config: model_config_pb2.ModelConfig,
    *,
    model_name: str,
    gpu_count: int = 0,
    preferred_groups: Sequence[model_config_pb2.ModelInstanceGroup] = (),
    backend_gpus: bool = True,
) -> None:
    """Fill Triton's defaults into ``config`` in place.

    Args:
        model_name: the model directory name, used when the config has no name.
        gpu_count: GPUs usable on this host (ids 0..gpu_count-1).
        backend_gpus: whether the backend can run instances on GPUs here; when not,
            KIND_AUTO groups (and the default group) become KIND_CPU even on a GPU host.
        preferred_groups: the backend's preferred instance groups (Triton's
            ``TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup``), used for a config
            without instance groups and for groups that leave count or gpus unset.
    """
    if not config.name:
        config.name = model_name
    _resolve_backend(config)
    if not config.default_model_filename:
        config.default_model_filename = default_model_filename(config.backend, config.platform)
    _normalize_model_config(config)
    _normalize_instance_groups(config, range(gpu_count), preferred_groups, backend_gpus)


def _normalize_model_config(config: model_config_pb2.ModelConfig) -> None:
    """Triton's NormalizeModelConfig."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1

    if config.HasField("dynamic_batching"):
        batching = config.dynamic_batching
        if not batching.preferred_batch_size and config.max_batch_size > 0:
            batching.preferred_batch_size.append(config.max_batch_size)

    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if sequence.HasField("oldest"):
            oldest = sequence.oldest
            if not oldest.preferred_batch_size and config.max_batch_size > 0:
                oldest.preferred_batch_size.append(config.max_batch_size)

    # Ensembles may not carry an optimization policy, so Triton leaves theirs unset.
    if not config.HasField("ensemble_scheduling"):
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True


def _normalize_instance_groups(
    config: model_config_pb2.ModelConfig,
    supported_gpus: Sequence[int],
    preferred_groups: Sequence[model_config_pb2.ModelInstanceGroup],
    backend_gpus: bool = True,
) -> None:
    """Triton's NormalizeInstanceGroup: names, kinds, counts and gpus of every group."""
    if config.HasField("ensemble_scheduling"):
        return  # instance groups do not apply to ensembles

    if not config.instance_group:
        _add_default_group(config, supported_gpus, preferred_groups)

    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"

        if group.kind == _Group.KIND_AUTO:
            # GPU only when the host has GPUs and every listed gpu is one of them (and,
            # infercore's addition, the backend can use them: a CPU-only onnxruntime)
            usable = (backend_gpus and bool(supported_gpus)
                      and all(gid in supported_gpus for gid in group.gpus))
            group.kind = _Group.KIND_GPU if usable else _Group.KIND_CPU

        for preferred in preferred_groups:
            if preferred.kind != group.kind:
                continue
            if group.kind == _Group.KIND_GPU and not group.gpus and preferred.gpus:
                group.gpus.extend(gid for gid in preferred.gpus if gid in supported_gpus)
                if not group.gpus:
                    continue  # none of the preferred gpus exist here; try the next one
            if group.count < 1 and preferred.count > 0:
                group.count = preferred.count

        if group.count < 1:
            _set_default_instance_count(group, config.backend)
        if group.kind == _Group.KIND_GPU and not group.gpus:
            group.gpus.extend(supported_gpus)


def _add_default_group(
    config: model_config_pb2.ModelConfig,
    supported_gpus: Sequence[int],
    preferred_groups: Sequence[model_config_pb2.ModelInstanceGroup],
) -> None:
    # The group Triton adds is named after the model itself, without an index suffix.
    group = config.instance_group.add(name=config.name)
    for preferred in preferred_groups:
        if preferred.kind == _Group.KIND_GPU:
            if not supported_gpus:
                continue  # a GPU preference is useless on a host without GPUs
            group.gpus.extend(gid for gid in preferred.gpus if gid in supported_gpus)
        elif preferred.kind == _Group.KIND_AUTO:
            group.gpus.extend(preferred.gpus)
        group.kind = preferred.kind
        group.count = preferred.count
        break


def _set_default_instance_count(group: model_config_pb2.ModelInstanceGroup, backend: str) -> None:
    """Triton's SetDefaultInstanceCount."""
    if group.kind == _Group.KIND_CPU and backend in _MULTI_CPU_INSTANCE_BACKENDS:
        group.count = _DEFAULT_CPU_INSTANCE_COUNT
    else:
        group.count = 1
