"""resolve_backend, default_model_filename and normalize_model_config (Triton's defaults)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.config import default_model_filename, normalize_model_config, resolve_backend

Group = model_config_pb2.ModelInstanceGroup


def _config(text: str = "") -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def _normalized(text: str = 'backend: "python"', **kwargs) -> model_config_pb2.ModelConfig:
    config = _config(text)
    normalize_model_config(config, model_name=kwargs.pop("model_name", "m"), **kwargs)
    return config


# resolve_backend / default_model_filename


@pytest.mark.parametrize(
    ("text", "backend", "platform"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime", "onnxruntime_onnx"),
        ('platform: "pytorch_libtorch"', "pytorch", "pytorch_libtorch"),
        ('platform: "tensorflow_savedmodel"', "tensorflow", "tensorflow_savedmodel"),
        ('platform: "tensorflow_graphdef"', "tensorflow", "tensorflow_graphdef"),
        ('platform: "tensorrt_plan"', "tensorrt", "tensorrt_plan"),
        ('backend: "onnxruntime"', "onnxruntime", "onnxruntime_onnx"),
        ('backend: "pytorch"', "pytorch", "pytorch_libtorch"),
        ('backend: "tensorrt"', "tensorrt", "tensorrt_plan"),
        ('backend: "python"', "python", ""),
        ('backend: "openvino"', "openvino", ""),
        ('backend: "identity"', "identity", ""),
        ('platform: "ensemble"', "", "ensemble"),
        ('default_model_filename: "model.onnx"', "onnxruntime", "onnxruntime_onnx"),
        ('default_model_filename: "model.py"', "python", ""),
        ('default_model_filename: "model.xml"', "openvino", ""),
        ('default_model_filename: "model.pt"', "pytorch", "pytorch_libtorch"),
        ('default_model_filename: "model.plan"', "tensorrt", "tensorrt_plan"),
        ('default_model_filename: "model.savedmodel"', "tensorflow", "tensorflow_savedmodel"),
        (
            'backend: "tensorflow" default_model_filename: "model.graphdef"',
            "tensorflow",
            "tensorflow_graphdef",
        ),
        ("", "", ""),
    ],
)
def test_resolve_backend_fills_backend_and_platform_like_triton(text, backend, platform):
    config = _config(text)

    assert resolve_backend(config) == backend
    assert config.backend == backend
    assert config.platform == platform


def test_resolve_backend_keeps_an_explicit_backend():
    config = _config('backend: "python" platform: "onnxruntime_onnx"')

    assert resolve_backend(config) == "python"
    assert config.platform == "onnxruntime_onnx"


@pytest.mark.parametrize(
    ("backend", "platform", "filename"),
    [
        ("python", "", "model.py"),
        ("onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ("pytorch", "pytorch_libtorch", "model.pt"),
        ("tensorrt", "tensorrt_plan", "model.plan"),
        ("openvino", "", "model.xml"),
        ("tensorflow", "tensorflow_graphdef", "model.graphdef"),
        ("tensorflow", "tensorflow_savedmodel", "model.savedmodel"),
        ("", "tensorflow_savedmodel", "model.savedmodel"),
        ("tensorflow", "", ""),
        ("", "ensemble", ""),
        ("identity", "", ""),
    ],
)
def test_default_model_filename_matches_triton(backend, platform, filename):
    assert default_model_filename(backend, platform) == filename


# model-level defaults


def test_name_comes_from_the_model_directory_when_missing():
    assert _normalized(model_name="add_sub").name == "add_sub"


def test_name_in_the_config_is_kept():
    assert _normalized('name: "given" backend: "python"', model_name="dir").name == "given"


def test_backend_is_resolved_during_normalization():
    config = _normalized('platform: "onnxruntime_onnx"')

    assert config.backend == "onnxruntime"
    assert config.default_model_filename == "model.onnx"


def test_version_policy_defaults_to_latest_one():
    config = _normalized()

    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 1


def test_explicit_version_policy_is_kept():
    config = _normalized('backend: "python" version_policy { specific { versions: [ 2, 3 ] } }')

    assert list(config.version_policy.specific.versions) == [2, 3]
    assert not config.version_policy.HasField("latest")


def test_default_model_filename_is_filled_from_the_backend():
    assert _normalized().default_model_filename == "model.py"


def test_explicit_default_model_filename_is_kept():
    config = _normalized('backend: "python" default_model_filename: "entry.py"')

    assert config.default_model_filename == "entry.py"


def test_pinned_memory_is_enabled_by_default():
    optimization = _normalized().optimization

    assert optimization.input_pinned_memory.enable is True
    assert optimization.output_pinned_memory.enable is True


def test_pinned_memory_explicitly_disabled_stays_disabled():
    config = _normalized('backend: "python" optimization { input_pinned_memory { enable: false } }')

    assert config.optimization.input_pinned_memory.enable is False
    assert config.optimization.output_pinned_memory.enable is True


def test_fields_triton_leaves_unset_stay_unset():
    config = _normalized('backend: "python" sequence_batching { }')

    assert not config.HasField("model_transaction_policy")
    assert config.sequence_batching.WhichOneof("strategy_choice") is None
    assert not config.HasField("dynamic_batching")


def test_tensor_fields_are_left_as_written():
    config = _normalized(
        'backend: "python" max_batch_size: 4 '
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]'
    )

    tensor = config.input[0]
    assert list(tensor.dims) == [1]
    assert tensor.HasField("reshape")
    assert list(tensor.reshape.shape) == []
    assert tensor.optional is False


# dynamic / sequence batching


def test_dynamic_batching_preferred_size_defaults_to_max_batch_size():
    config = _normalized('backend: "python" max_batch_size: 8 dynamic_batching { }')

    assert list(config.dynamic_batching.preferred_batch_size) == [8]


def test_dynamic_batching_preferred_sizes_given_are_kept():
    config = _normalized(
        'backend: "python" max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 2, 4 ] }'
    )

    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]


def test_dynamic_batching_without_batching_gets_no_preferred_size():
    config = _normalized('backend: "python" max_batch_size: 0 dynamic_batching { }')

    assert list(config.dynamic_batching.preferred_batch_size) == []


def test_sequence_idle_timeout_defaults_to_one_second():
    config = _normalized('backend: "python" sequence_batching { }')

    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000


def test_sequence_idle_timeout_given_is_kept():
    config = _normalized(
        'backend: "python" sequence_batching { max_sequence_idle_microseconds: 5 }'
    )

    assert config.sequence_batching.max_sequence_idle_microseconds == 5


def test_oldest_strategy_preferred_size_defaults_to_max_batch_size():
    config = _normalized('backend: "python" max_batch_size: 6 sequence_batching { oldest { } }')

    assert list(config.sequence_batching.oldest.preferred_batch_size) == [6]


# instance groups


def test_missing_instance_group_becomes_one_cpu_instance_named_after_the_model():
    config = _normalized(model_name="add_sub")

    assert len(config.instance_group) == 1
    group = config.instance_group[0]
    assert (group.name, group.kind, group.count, list(group.gpus)) == (
        "add_sub",
        Group.KIND_CPU,
        1,
        [],
    )


def test_missing_instance_group_uses_every_gpu_when_there_are_gpus():
    config = _normalized(gpu_count=2)

    group = config.instance_group[0]
    assert (group.kind, group.count, list(group.gpus)) == (Group.KIND_GPU, 1, [0, 1])


def test_unnamed_groups_are_named_model_underscore_index():
    config = _normalized(
        'backend: "python" instance_group [ { kind: KIND_CPU }, { name: "mine" }, { count: 2 } ]',
        model_name="add_sub",
    )

    assert [g.name for g in config.instance_group] == ["add_sub_0", "mine", "add_sub_2"]


def test_single_unnamed_group_gets_index_zero():
    config = _normalized('backend: "python" instance_group [ { kind: KIND_CPU } ]', model_name="a")

    assert config.instance_group[0].name == "a_0"


def test_instance_count_defaults_to_one_and_given_counts_are_kept():
    config = _normalized(
        'backend: "python" instance_group [ { kind: KIND_CPU }, { kind: KIND_CPU count: 3 } ]'
    )

    assert [g.count for g in config.instance_group] == [1, 3]


@pytest.mark.parametrize(
    ("backend", "count"), [("onnxruntime", 2), ("tensorflow", 2), ("pytorch", 1)]
)
def test_cpu_instance_count_default_depends_on_backend(backend, count):
    platform = {"tensorflow": 'platform: "tensorflow_savedmodel"'}.get(backend, "")
    config = _normalized(f'backend: "{backend}" {platform} instance_group [ {{ kind: KIND_CPU }} ]')

    assert config.instance_group[0].count == count


def test_gpu_instance_count_default_is_one_even_for_onnxruntime():
    config = _normalized(
        'backend: "onnxruntime" instance_group [ { kind: KIND_GPU } ]', gpu_count=1
    )

    assert config.instance_group[0].count == 1


def test_zero_or_negative_count_is_replaced_by_the_default():
    config = _normalized(
        'backend: "python" '
        "instance_group [ { kind: KIND_CPU count: 0 }, { kind: KIND_CPU count: -3 } ]"
    )

    assert [g.count for g in config.instance_group] == [1, 1]


def test_kind_auto_becomes_cpu_without_gpus():
    config = _normalized('backend: "python" instance_group [ { kind: KIND_AUTO } ]')

    assert config.instance_group[0].kind == Group.KIND_CPU


def test_kind_auto_becomes_gpu_with_gpus():
    config = _normalized('backend: "python" instance_group [ { kind: KIND_AUTO } ]', gpu_count=2)

    group = config.instance_group[0]
    assert (group.kind, list(group.gpus)) == (Group.KIND_GPU, [0, 1])


def test_kind_auto_listing_a_missing_gpu_becomes_cpu():
    config = _normalized(
        'backend: "python" instance_group [ { kind: KIND_AUTO gpus: [ 0, 5 ] } ]', gpu_count=2
    )

    group = config.instance_group[0]
    # Triton keeps the gpus; validation then rejects a CPU group that lists GPUs.
    assert (group.kind, list(group.gpus)) == (Group.KIND_CPU, [0, 5])


def test_kind_gpu_without_gpus_gets_all_gpus_and_listed_gpus_are_kept():
    config = _normalized(
        'backend: "python" instance_group [ { kind: KIND_GPU }, { kind: KIND_GPU gpus: [ 1 ] } ]',
        gpu_count=3,
    )

    assert [list(g.gpus) for g in config.instance_group] == [[0, 1, 2], [1]]


def test_kind_gpu_on_a_cpu_only_host_stays_gpu_without_gpus():
    config = _normalized('backend: "python" instance_group [ { kind: KIND_GPU } ]')

    group = config.instance_group[0]
    assert (group.kind, list(group.gpus)) == (Group.KIND_GPU, [])


def test_backend_preferring_cpu_gets_a_cpu_default_group_on_a_gpu_host():
    preferred = [Group(kind=Group.KIND_CPU, count=3)]

    config = _normalized(gpu_count=2, preferred_groups=preferred)

    group = config.instance_group[0]
    assert (group.kind, group.count, list(group.gpus)) == (Group.KIND_CPU, 3, [])


def test_gpu_preference_is_skipped_on_a_cpu_only_host():
    preferred = [Group(kind=Group.KIND_GPU, count=4), Group(kind=Group.KIND_CPU, count=2)]

    config = _normalized(preferred_groups=preferred)

    group = config.instance_group[0]
    assert (group.kind, group.count) == (Group.KIND_CPU, 2)


def test_preferred_group_fills_count_and_gpus_of_a_matching_group():
    preferred = [Group(kind=Group.KIND_GPU, count=5, gpus=[1, 7])]

    config = _normalized(
        'backend: "python" instance_group [ { kind: KIND_GPU } ]',
        gpu_count=2,
        preferred_groups=preferred,
    )

    group = config.instance_group[0]
    assert (group.count, list(group.gpus)) == (5, [1])


def test_ensemble_gets_no_instance_group_and_no_optimization():
    config = _normalized(
        'platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" } ] }'
    )

    assert len(config.instance_group) == 0
    assert not config.HasField("optimization")
    assert config.backend == ""
    assert config.default_model_filename == ""


def test_normalizing_twice_changes_nothing():
    config = _normalized(
        'backend: "onnxruntime" max_batch_size: 4 dynamic_batching { } '
        "instance_group [ { kind: KIND_AUTO } ]",
        gpu_count=1,
    )
    again = model_config_pb2.ModelConfig()
    again.CopyFrom(config)

    normalize_model_config(again, model_name="m", gpu_count=1)

    assert again == config


def test_kind_auto_and_the_default_group_stay_on_the_cpu_for_a_backend_without_gpus():
    auto = _normalized('backend: "onnxruntime" instance_group [ { kind: KIND_AUTO } ]',
                       gpu_count=2, backend_gpus=False)
    default = _normalized('backend: "onnxruntime"', gpu_count=2, backend_gpus=False)
    explicit = _normalized('backend: "onnxruntime" instance_group [ { kind: KIND_GPU } ]',
                           gpu_count=2, backend_gpus=False)

    assert [(g.kind, g.count, list(g.gpus)) for g in auto.instance_group] == [
        (Group.KIND_CPU, 2, [])]
    assert [(g.kind, g.count, list(g.gpus)) for g in default.instance_group] == [
        (Group.KIND_CPU, 2, [])]
    # an explicit KIND_GPU group keeps its GPUs: the backend refuses it with its reason
    assert [(g.kind, list(g.gpus)) for g in explicit.instance_group] == [
        (Group.KIND_GPU, [0, 1])]
