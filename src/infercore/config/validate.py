"""Reject what Triton rejects: ValidateModelConfig, ValidateModelIOConfig, ValidateInstanceGroup.

Run it on a normalized config, as Triton does. Each rule yields messages; the first one
raised wins. Messages are Triton's wherever Triton has the rule, so clients see the same
text. Of the ensemble graph only a step output that nothing reads is refused here (Triton
refuses it when it reads the config); the other step checks live with the ensemble
scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2

from ..errors import InternalError, InvalidArgumentError
from .platform import ENSEMBLE_PLATFORM, KNOWN_BACKEND_PLATFORMS, TENSORRT_PLATFORM
from .validate_io import io_errors
from .validate_sequence import sequence_errors

__all__ = ["validate_instance_groups", "validate_model_config"]

# Triton reports the CUDA compute capability it requires next to the GPUs it found.
MIN_COMPUTE_CAPABILITY = 6.0

_Group = model_config_pb2.ModelInstanceGroup
_DELAY = model_config_pb2.ModelQueuePolicy.DELAY
_PROFILE_INDEX = re.compile(r"\s*[+-]?\d+")  # what std::stoi accepts as a prefix


def validate_model_config(
    config: model_config_pb2.ModelConfig,
    *,
    model_name: str,
    backend_can_batch: bool = True,
    gpu_count: int = 0,
    instance_groups: bool = True,
) -> None:
    """Raise InvalidArgumentError for the first rule ``config`` breaks.

    Args:
        model_name: the model directory name; the config's name must equal it.
        backend_can_batch: False when the backend cannot batch, so max_batch_size must be 0.
        gpu_count: GPUs usable on this host (ids 0..gpu_count-1).
        instance_groups: False leaves the instance groups out (``validate_instance_groups``
            checks them: Triton does as each version loads, not when it polls).

    Raises:
        InvalidArgumentError: the config breaks a rule.
        InternalError: an instance group still has KIND_AUTO (the config was not normalized).
    """
    for message in _errors(config, model_name, backend_can_batch):
        raise InvalidArgumentError(message)
    if instance_groups:
        validate_instance_groups(config, gpu_count=gpu_count)


def validate_instance_groups(config: model_config_pb2.ModelConfig, *, gpu_count: int = 0) -> None:
    """Triton's ValidateInstanceGroup: raise InvalidArgumentError for the first rule the
    normalised instance groups break, with this host's GPUs as ids 0..gpu_count-1.

    Raises:
        InternalError: an instance group still has KIND_AUTO (the config was not normalized).
    """
    for message in _instance_group_errors(config, gpu_count):
        raise InvalidArgumentError(message)


def _errors(
    config: model_config_pb2.ModelConfig, model_name: str, backend_can_batch: bool
) -> Iterator[str]:
    yield from _model_errors(config, backend_can_batch)
    yield from _unused_ensemble_tensors(config)
    yield from _dynamic_batching_errors(config)
    yield from sequence_errors(config)
    yield from _policy_errors(config)
    name = config.name
    yield from (f"{message} for {name}" for message in io_errors(config))
    if name != model_name:
        yield (
            f"unexpected directory name '{model_name}' for model '{name}', directory name "
            "must equal model name"
        )


def _model_errors(config: model_config_pb2.ModelConfig, backend_can_batch: bool) -> Iterator[str]:
    name = config.name
    if not name:
        yield "model configuration must specify 'name'"
    if not config.backend and config.platform != ENSEMBLE_PLATFORM:
        yield f"unexpected platform type '{config.platform}' for {name}"
    elif config.backend and config.platform == ENSEMBLE_PLATFORM:
        yield (
            f"Ensemble model '{name}' must have platform type '{config.platform}' and empty "
            "backend type"
        )
    platforms = KNOWN_BACKEND_PLATFORMS.get(config.backend)
    if platforms is not None and config.platform not in platforms:
        yield f"unexpected 'platform' and 'backend' pair, got:{config.platform}, {config.backend}"

    if config.max_batch_size < 0:
        yield f"'max_batch_size' must be non-negative value for {name}"
    elif config.max_batch_size > 0 and not backend_can_batch:
        # Triton's backends word it "autofill failed for model 'x': model does not support
        # batching while non-zero max_batch_size is specified".
        yield (
            f"model '{name}' does not support batching while non-zero max_batch_size is specified"
        )

    if not config.HasField("version_policy"):
        yield f"must specify 'version policy' for {name}"
    elif config.version_policy.HasField("specific") and not config.version_policy.specific.versions:
        # Triton finds this when it picks versions to load; no version could ever match.
        yield f"at least one version must be available under the version policy of model '{name}'"


def _unused_ensemble_tensors(config: model_config_pb2.ModelConfig) -> Iterator[str]:
    """Triton's check for redundant ensemble tensors: a step output that no step reads and
    that is not an ensemble output."""
    steps = config.ensemble_scheduling.step
    if not steps:
        return
    written = {tensor for step in steps for tensor in step.output_map.values()}
    if any(output.name not in written for output in config.output):
        return  # Triton refuses an output left unwritten first (here: at load, see above)
    read = {tensor for step in steps for tensor in step.input_map.values()}
    read.update(output.name for output in config.output)
    for step in steps:
        for tensor in step.output_map.values():
            if tensor not in read:
                yield f"ensemble tensor '{tensor}' is unused in ensemble '{config.name}'"


def _dynamic_batching_errors(config: model_config_pb2.ModelConfig) -> Iterator[str]:
    if not config.HasField("dynamic_batching"):
        return
    name = config.name
    batching = config.dynamic_batching
    for size in batching.preferred_batch_size:
        if size <= 0:
            yield f"dynamic batching preferred size must be positive for {name}"
        elif size > config.max_batch_size:
            yield f"dynamic batching preferred size must be <= max batch size for {name}"

    levels = batching.priority_levels
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            yield f"default priority level must be in range [1, {levels}] for {name}"
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                yield (
                    f"priority queue policy must have priority level in range [1, {levels}] "
                    f"for {name}"
                )

    # Preserving order cannot work with requests that overtake each other.
    if batching.preserve_ordering:
        if levels > 1:
            yield f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        for policy in policies:
            if policy.default_timeout_microseconds != 0 and policy.timeout_action == _DELAY:
                yield (
                    "Queue policy can not have DELAY as timeout action when "
                    f"'preserve_ordering' is true for {name}"
                )


def _policy_errors(config: model_config_pb2.ModelConfig) -> Iterator[str]:
    name = config.name
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        yield (
            f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )
    for control in config.model_metrics.metric_control:
        if not control.HasField("metric_identifier"):
            yield "metric control must specify 'metric_identifier'"
        elif not control.metric_identifier.family:
            yield "metric identifier must specify non-empty 'family'"
        elif not control.HasField("histogram_options"):
            yield "metric control must specify 'histogram_options'"
        elif not control.histogram_options.buckets:
            yield "histogram options must specify non-empty 'buckets'"


def _instance_group_errors(config: model_config_pb2.ModelConfig, gpu_count: int) -> Iterator[str]:
    """Triton's ValidateInstanceGroup, with this host's GPUs as ids 0..gpu_count-1."""
    if config.HasField("ensemble_scheduling"):
        return  # instance groups do not apply to ensembles
    name = config.name
    if not config.instance_group:
        yield f"must specify one or more 'instance group's for {name}"
    for group in config.instance_group:
        where = f"instance group {group.name} of model {name}"
        if group.kind == _Group.KIND_MODEL and group.gpus:
            yield f"{where} has kind KIND_MODEL but specifies one or more GPUs"
        elif group.kind == _Group.KIND_CPU and group.gpus:
            yield f"{where} has kind KIND_CPU but specifies one or more GPUs"
        elif group.kind == _Group.KIND_GPU:
            yield from _gpu_errors(group, where, gpu_count)
        elif group.kind == _Group.KIND_AUTO:
            raise InternalError(f"{where} has unexpected kind KIND_AUTO")
        yield from _profile_errors(group, where, config.platform)


def _gpu_errors(
    group: model_config_pb2.ModelInstanceGroup, where: str, gpu_count: int
) -> Iterator[str]:
    if not group.gpus:
        if gpu_count == 0:
            yield f"{where} has kind KIND_GPU but no GPUs are available"
        else:
            yield f"{where} has kind KIND_GPU but specifies no GPUs"
    for gid in group.gpus:
        if not 0 <= gid < gpu_count:
            supported = ", ".join(str(i) for i in range(gpu_count))
            # Triton prints the capability with std::to_string: "6.000000".
            yield (
                f"{where} specifies invalid or unsupported gpu id {gid}. GPUs with at least "
                f"the minimum required CUDA compute compatibility of "
                f"{MIN_COMPUTE_CAPABILITY:f} are: {supported}"
            )


def _profile_errors(
    group: model_config_pb2.ModelInstanceGroup, where: str, platform: str
) -> Iterator[str]:
    if not group.profile:
        return
    if platform != TENSORRT_PLATFORM:
        yield (
            f"{where} and platform {platform} specifies profile field which is only supported "
            "for TensorRT models"
        )
        return
    for profile in group.profile:
        if not profile:
            yield "profile name must not be empty"
            continue
        match = _PROFILE_INDEX.match(profile)
        if match is None:
            yield f"unable to parse '{profile}': stoi"
        elif int(match.group()) < 0:
            yield (
                f"{where} and platform {platform} specifies invalid profile {profile}. The "
                "field should contain the string representation of a non-negative integer."
            )
