"""validate_model_config: each rule Triton enforces, with Triton's message."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.config import (
    normalize_model_config,
    validate_instance_groups,
    validate_model_config,
)
from infercore.errors import InternalError, InvalidArgumentError

INPUT = 'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]'
OUTPUT = 'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]'


def _text(
    *,
    name: str = "add_sub",
    backend: str = "python",
    platform: str = "",
    max_batch_size: int = 8,
    inputs: str = INPUT,
    outputs: str = OUTPUT,
    extra: str = "",
) -> str:
    return (
        f'name: "{name}" backend: "{backend}" platform: "{platform}" '
        f"max_batch_size: {max_batch_size} {inputs} {outputs} {extra}"
    )


def _normalized(text: str, gpu_count: int = 0) -> model_config_pb2.ModelConfig:
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    normalize_model_config(config, model_name="add_sub", gpu_count=gpu_count)
    return config


def _message(text: str, **kwargs) -> str:
    gpu_count = kwargs.get("gpu_count", 0)
    config = _normalized(text, gpu_count)
    with pytest.raises(InvalidArgumentError) as info:
        validate_model_config(config, model_name="add_sub", **kwargs)
    return str(info.value)


def test_a_normal_config_passes():
    validate_model_config(_normalized(_text()), model_name="add_sub")


def test_gpu_config_passes_on_a_gpu_host():
    config = _normalized(_text(extra="instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]"), 2)

    validate_model_config(config, model_name="add_sub", gpu_count=2)


def test_ensemble_without_backend_passes_the_model_checks():
    text = (
        'name: "add_sub" platform: "ensemble" max_batch_size: 8 '
        f"{INPUT} {OUTPUT} "
        'ensemble_scheduling { step [ { model_name: "x" } ] }'
    )

    validate_model_config(_normalized(text), model_name="add_sub")


def _ensemble_text(outputs: str) -> str:
    return ('name: "add_sub" platform: "ensemble" max_batch_size: 8 '
            f"{INPUT} {OUTPUT} "
            'ensemble_scheduling { step [ { model_name: "x" '
            'input_map { key: "IN" value: "INPUT0" } '
            f"{outputs} }} ] }}")


def test_an_ensemble_step_output_nothing_reads_is_refused_like_triton():
    text = _ensemble_text('output_map { key: "A" value: "OUTPUT0" } '
                          'output_map { key: "B" value: "spare" }')
    assert _message(text) == "ensemble tensor 'spare' is unused in ensemble 'add_sub'"
    validate_model_config(_normalized(_ensemble_text(
        'output_map { key: "A" value: "OUTPUT0" }')), model_name="add_sub")


# model-level rules

MODEL_CASES = [
    pytest.param(
        _text(name="other"),
        "unexpected directory name 'add_sub' for model 'other', directory name must equal "
        "model name",
        id="name-mismatch",
    ),
    pytest.param(
        _text(max_batch_size=-1),
        "'max_batch_size' must be non-negative value for add_sub",
        id="negative-max-batch",
    ),
    pytest.param(
        _text(backend="", platform="custom_thing"),
        "unexpected platform type 'custom_thing' for add_sub",
        id="no-backend",
    ),
    pytest.param(
        _text(platform="ensemble"),
        "Ensemble model 'add_sub' must have platform type 'ensemble' and empty backend type",
        id="ensemble-with-backend",
    ),
    pytest.param(
        _text(backend="onnxruntime", platform="pytorch_libtorch"),
        "unexpected 'platform' and 'backend' pair, got:pytorch_libtorch, onnxruntime",
        id="platform-backend-pair",
    ),
    pytest.param(
        _text(extra="version_policy { specific { } }"),
        "at least one version must be available under the version policy of model 'add_sub'",
        id="specific-without-versions",
    ),
    pytest.param(
        _text(extra="dynamic_batching { preferred_batch_size: [ 0 ] }"),
        "dynamic batching preferred size must be positive for add_sub",
        id="preferred-size-zero",
    ),
    pytest.param(
        _text(extra="dynamic_batching { preferred_batch_size: [ 4, 16 ] }"),
        "dynamic batching preferred size must be <= max batch size for add_sub",
        id="preferred-size-above-max",
    ),
    pytest.param(
        _text(max_batch_size=0, extra="dynamic_batching { preferred_batch_size: [ 2 ] }"),
        "dynamic batching preferred size must be <= max batch size for add_sub",
        id="preferred-size-without-batching",
    ),
    pytest.param(
        _text(extra="dynamic_batching { priority_levels: 3 }"),
        "default priority level must be in range [1, 3] for add_sub",
        id="default-priority-zero",
    ),
    pytest.param(
        _text(extra="dynamic_batching { priority_levels: 3 default_priority_level: 4 }"),
        "default priority level must be in range [1, 3] for add_sub",
        id="default-priority-above-levels",
    ),
    pytest.param(
        _text(
            extra="dynamic_batching { priority_levels: 2 default_priority_level: 1 "
            "priority_queue_policy { key: 3 value { } } }"
        ),
        "priority queue policy must have priority level in range [1, 2] for add_sub",
        id="queue-policy-level",
    ),
    pytest.param(
        _text(
            extra="dynamic_batching { preserve_ordering: true priority_levels: 2 "
            "default_priority_level: 1 }"
        ),
        "Only one priority level is allowed when 'preserve_ordering' is true for add_sub",
        id="preserve-ordering-priorities",
    ),
    pytest.param(
        _text(
            extra="dynamic_batching { preserve_ordering: true default_queue_policy { "
            "timeout_action: DELAY default_timeout_microseconds: 10 } }"
        ),
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true "
        "for add_sub",
        id="preserve-ordering-delay",
    ),
    pytest.param(
        _text(extra="model_transaction_policy { decoupled: true } response_cache { enable: true }"),
        "Response Cache does not currently support model add_sub with 'decoupled' transaction "
        "policy. Please disable the response cache.",
        id="decoupled-cache",
    ),
    pytest.param(
        _text(
            extra="model_metrics { metric_control [ { histogram_options { buckets: [ 1 ] } } ] }"
        ),
        "metric control must specify 'metric_identifier'",
        id="metric-identifier",
    ),
]


@pytest.mark.parametrize(("text", "expected"), MODEL_CASES)
def test_model_rules(text, expected):
    assert _message(text) == expected


def test_max_batch_size_with_a_backend_that_cannot_batch():
    message = _message(_text(max_batch_size=4), backend_can_batch=False)

    assert message == (
        "model 'add_sub' does not support batching while non-zero max_batch_size is specified"
    )


def test_no_batching_is_fine_for_a_backend_that_cannot_batch():
    config = _normalized(_text(max_batch_size=0))

    validate_model_config(config, model_name="add_sub", backend_can_batch=False)


def test_dynamic_batching_without_max_batch_size_is_accepted_like_triton():
    config = _normalized(_text(max_batch_size=0, extra="dynamic_batching { }"))

    validate_model_config(config, model_name="add_sub")


def test_missing_version_policy_is_rejected():
    config = _normalized(_text())
    config.ClearField("version_policy")

    with pytest.raises(InvalidArgumentError, match="must specify 'version policy' for add_sub"):
        validate_model_config(config, model_name="add_sub")


def test_missing_name_is_rejected():
    config = _normalized(_text())
    config.name = ""

    with pytest.raises(InvalidArgumentError, match="model configuration must specify 'name'"):
        validate_model_config(config, model_name="add_sub")


# instance groups


def test_kind_gpu_on_a_cpu_only_host():
    message = _message(_text(extra="instance_group [ { kind: KIND_GPU } ]"))

    assert message == (
        "instance group add_sub_0 of model add_sub has kind KIND_GPU but no GPUs are available"
    )


def test_gpu_id_on_a_cpu_only_host():
    message = _message(_text(extra="instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]"))

    assert message == (
        "instance group add_sub_0 of model add_sub specifies invalid or unsupported gpu id 0. "
        "GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: "
    )


def test_gpu_id_beyond_the_gpus_present():
    message = _message(
        _text(extra="instance_group [ { kind: KIND_GPU gpus: [ 0, 2 ] } ]"), gpu_count=2
    )

    assert message == (
        "instance group add_sub_0 of model add_sub specifies invalid or unsupported gpu id 2. "
        "GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: "
        "0, 1"
    )


def test_negative_gpu_id_is_rejected():
    message = _message(
        _text(extra="instance_group [ { kind: KIND_GPU gpus: [ -1 ] } ]"), gpu_count=1
    )

    assert "specifies invalid or unsupported gpu id -1" in message


def test_cpu_group_listing_gpus():
    message = _message(
        _text(extra="instance_group [ { kind: KIND_AUTO gpus: [ 4 ] } ]"), gpu_count=1
    )

    assert message == (
        "instance group add_sub_0 of model add_sub has kind KIND_CPU but specifies one or more GPUs"
    )


def test_model_group_listing_gpus():
    message = _message(_text(extra='instance_group [ { name: "g" kind: KIND_MODEL gpus: [ 0 ] } ]'))

    assert message == (
        "instance group g of model add_sub has kind KIND_MODEL but specifies one or more GPUs"
    )


def test_profile_outside_tensorrt():
    message = _message(_text(extra='instance_group [ { kind: KIND_CPU profile: [ "0" ] } ]'))

    assert message == (
        "instance group add_sub_0 of model add_sub and platform  specifies profile field "
        "which is only supported for TensorRT models"
    )


def test_negative_tensorrt_profile():
    text = _text(
        backend="tensorrt",
        platform="tensorrt_plan",
        extra='instance_group [ { kind: KIND_GPU profile: [ "-1" ] } ]',
    )

    message = _message(text, gpu_count=1)

    assert message.endswith(
        "specifies invalid profile -1. The field should contain the string representation "
        "of a non-negative integer."
    )


def test_unnormalized_kind_auto_is_an_internal_error():
    config = text_format.Parse(_text(), model_config_pb2.ModelConfig())
    normalize_model_config(config, model_name="add_sub")
    config.instance_group[0].kind = model_config_pb2.ModelInstanceGroup.KIND_AUTO

    with pytest.raises(InternalError, match="has unexpected kind KIND_AUTO"):
        validate_model_config(config, model_name="add_sub")


def test_missing_instance_group_is_rejected():
    config = _normalized(_text())
    config.ClearField("instance_group")

    with pytest.raises(
        InvalidArgumentError, match="must specify one or more 'instance group's for add_sub"
    ):
        validate_model_config(config, model_name="add_sub")


def test_first_broken_rule_wins():
    # Both the batch size and the name are wrong; Triton checks the batch size first.
    message = _message(_text(name="other", max_batch_size=-1))

    assert message == "'max_batch_size' must be non-negative value for other"


def test_instance_groups_are_checked_apart_when_asked():
    config = _normalized(_text(extra="instance_group [ { kind: KIND_GPU } ]"))

    validate_model_config(config, model_name="add_sub", instance_groups=False)
    with pytest.raises(InvalidArgumentError, match="has kind KIND_GPU but no GPUs are available"):
        validate_instance_groups(config)
    validate_instance_groups(
        _normalized(_text(extra="instance_group [ { kind: KIND_GPU } ]"), 1), gpu_count=1)
