"""model_config_to_json / model_config_from_json: Triton's config JSON."""

from __future__ import annotations

import json

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infercore.config import (
    model_config_from_json,
    model_config_to_json,
    normalize_model_config,
    parse_model_config,
)
from infercore.errors import InvalidArgumentError

ADD_SUB = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { kind: KIND_CPU } ]
parameters { key: "threshold" value { string_value: "123" } }
"""


def _config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_normalized_add_sub_renders_as_triton_does():
    config = parse_model_config(ADD_SUB, model_name="add_sub")
    normalize_model_config(config, model_name="add_sub")

    assert model_config_to_json(config) == {
        "name": "add_sub",
        "platform": "",
        "backend": "python",
        "runtime": "",
        "version_policy": {"latest": {"num_versions": 1}},
        "max_batch_size": 8,
        "input": [
            {
                "name": "INPUT0",
                "data_type": "TYPE_FP32",
                "format": "FORMAT_NONE",
                "dims": [16],
                "is_shape_tensor": False,
                "allow_ragged_batch": False,
                "optional": False,
                "is_non_linear_format_io": False,
            }
        ],
        "output": [
            {
                "name": "OUTPUT0",
                "data_type": "TYPE_FP32",
                "dims": [16],
                "label_filename": "",
                "is_shape_tensor": False,
                "is_non_linear_format_io": False,
            }
        ],
        "batch_input": [],
        "batch_output": [],
        "optimization": {
            "priority": "PRIORITY_DEFAULT",
            "input_pinned_memory": {"enable": True},
            "output_pinned_memory": {"enable": True},
            "gather_kernel_buffer_threshold": 0,
            "eager_batching": False,
        },
        "dynamic_batching": {
            "preferred_batch_size": [8],
            "max_queue_delay_microseconds": 100,
            "preserve_ordering": False,
            "priority_levels": 0,
            "default_priority_level": 0,
            "priority_queue_policy": {},
        },
        "instance_group": [
            {
                "name": "add_sub_0",
                "kind": "KIND_CPU",
                "count": 1,
                "gpus": [],
                "secondary_devices": [],
                "profile": [],
                "passive": False,
                "host_policy": "",
            }
        ],
        "default_model_filename": "model.py",
        "cc_model_filenames": {},
        "metric_tags": {},
        "parameters": {"threshold": {"string_value": "123"}},
        "model_warmup": [],
    }


def test_keys_follow_the_proto_field_order():
    config = parse_model_config(ADD_SUB, model_name="add_sub")
    normalize_model_config(config, model_name="add_sub")

    keys = list(model_config_to_json(config))

    assert keys[:6] == [
        "name",
        "platform",
        "backend",
        "runtime",
        "version_policy",
        "max_batch_size",
    ]
    assert keys.index("input") < keys.index("output") < keys.index("instance_group")


def test_every_64_bit_field_is_a_json_number():
    config = _config(
        """
        input [ { name: "I" data_type: TYPE_FP32 dims: [ -1, 3 ] reshape { shape: [ 3, -1 ] } } ]
        output [ { name: "O" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ 1, 2 ] } } ]
        version_policy { specific { versions: [ 1, 3 ] } }
        dynamic_batching {
          max_queue_delay_microseconds: 100
          priority_levels: 2
          default_priority_level: 1
          default_queue_policy { default_timeout_microseconds: 7 }
          priority_queue_policy { key: 2 value { default_timeout_microseconds: 9 } }
        }
        instance_group [ { secondary_devices [ { device_id: 5 } ] } ]
        model_warmup [ { name: "w" inputs { key: "I" value { dims: [ 4 ] zero_data: true } } } ]
        optimization { cuda { graph_spec [ { input { key: "I" value { dim: [ 8 ] } } } ] } }
        """
    )

    rendered = model_config_to_json(config)

    assert rendered["input"][0]["dims"] == [-1, 3]
    assert rendered["input"][0]["reshape"] == {"shape": [3, -1]}
    assert rendered["output"][0]["reshape"] == {"shape": [1, 2]}
    assert rendered["version_policy"] == {"specific": {"versions": [1, 3]}}
    batching = rendered["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert batching["priority_levels"] == 2
    assert batching["default_priority_level"] == 1
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 7
    # JSON object keys are strings; the values inside are fixed.
    assert list(batching["priority_queue_policy"]) == ["2"]
    assert batching["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 9
    assert rendered["instance_group"][0]["secondary_devices"][0]["device_id"] == 5
    assert rendered["model_warmup"][0]["inputs"]["I"]["dims"] == [4]
    graph_input = rendered["optimization"]["cuda"]["graph_spec"][0]["input"]["I"]
    assert graph_input["dim"] == [8]


def test_sequence_64_bit_fields_are_json_numbers():
    config = _config(
        """
        sequence_batching {
          max_sequence_idle_microseconds: 5000000
          oldest { max_queue_delay_microseconds: 3 }
          state [ { input_name: "a" output_name: "b" dims: [ -1 ]
                    initial_state { name: "s" dims: [ 2 ] zero_data: true } } ]
        }
        """
    )

    sequence = model_config_to_json(config)["sequence_batching"]

    assert sequence["max_sequence_idle_microseconds"] == 5000000
    assert sequence["oldest"]["max_queue_delay_microseconds"] == 3
    assert sequence["state"][0]["dims"] == [-1]
    assert sequence["state"][0]["initial_state"][0]["dims"] == [2]


def test_ensemble_step_version_is_a_json_number():
    config = _config('ensemble_scheduling { step [ { model_name: "m" model_version: -1 } ] }')

    step = model_config_to_json(config)["ensemble_scheduling"]["step"][0]

    assert step["model_version"] == -1


def test_no_64_bit_value_is_left_as_a_string():
    config = _config(
        'name: "m" input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        "sequence_batching { max_sequence_idle_microseconds: 2 direct { "
        "max_queue_delay_microseconds: 3 } }"
    )

    text = json.dumps(model_config_to_json(config))

    assert '"1"' not in text and '"2"' not in text and '"3"' not in text


def test_strings_that_look_like_numbers_stay_strings():
    config = _config(
        'name: "42" parameters { key: "7" value { string_value: "123" } } '
        'metric_tags { key: "zone" value: "9" } '
        'input [ { name: "0" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    )

    rendered = model_config_to_json(config)

    assert rendered["name"] == "42"
    assert rendered["parameters"] == {"7": {"string_value": "123"}}
    assert rendered["metric_tags"] == {"zone": "9"}
    assert rendered["input"][0]["name"] == "0"


def test_enums_are_names_and_defaults_are_printed():
    config = _config('instance_group [ { kind: KIND_GPU } ] input [ { name: "I" } ]')

    rendered = model_config_to_json(config)

    assert rendered["instance_group"][0]["kind"] == "KIND_GPU"
    assert rendered["input"][0]["data_type"] == "TYPE_INVALID"
    assert rendered["input"][0]["dims"] == []
    assert rendered["max_batch_size"] == 0
    assert rendered["input"][0]["optional"] is False


def test_unset_messages_are_not_printed():
    rendered = model_config_to_json(_config('name: "m"'))

    assert "dynamic_batching" not in rendered
    assert "model_transaction_policy" not in rendered
    assert "version_policy" not in rendered


def test_an_all_default_config_renders_as_an_empty_document():
    assert model_config_to_json(model_config_pb2.ModelConfig()) == {}


# model_config_from_json


def test_round_trip_through_json_gives_the_same_config():
    config = parse_model_config(ADD_SUB, model_name="add_sub")
    normalize_model_config(config, model_name="add_sub", gpu_count=1)

    rendered = json.loads(json.dumps(model_config_to_json(config)))

    assert model_config_from_json(rendered) == config


def test_from_json_accepts_64_bit_values_as_numbers_or_strings():
    config = model_config_from_json(
        {
            "input": [{"name": "I", "dims": [4, "5"]}],
            "dynamic_batching": {"max_queue_delay_microseconds": "100"},
        }
    )

    assert list(config.input[0].dims) == [4, 5]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100


def test_from_json_matches_enum_names_case_insensitively():
    config = model_config_from_json(
        {
            "input": [{"name": "I", "data_type": "type_fp32"}],
            "instance_group": [{"kind": "kind_cpu"}],
            "parameters": {"k": {"string_value": "type_fp32"}},
        }
    )

    assert config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert config.parameters["k"].string_value == "type_fp32"


def test_from_json_accepts_camel_case_names():
    config = model_config_from_json({"maxBatchSize": 4, "input": [{"dataType": "type_int32"}]})

    assert config.max_batch_size == 4
    assert config.input[0].data_type == model_config_pb2.TYPE_INT32


def test_from_json_rejects_unknown_fields():
    with pytest.raises(InvalidArgumentError) as info:
        model_config_from_json({"name": "m", "foo": 1})

    message = str(info.value)
    assert 'has no field named "foo"' in message
    assert "Available Fields" not in message


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"input": [{"data_type": "TYPE_NOPE"}]}, "TYPE_NOPE"),
        ({"max_batch_size": "many"}, "max_batch_size"),
        ({"input": {"name": "x"}}, "input"),
    ],
)
def test_from_json_rejects_malformed_values(data, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        model_config_from_json(data)


def test_from_json_rejects_a_non_object():
    with pytest.raises(InvalidArgumentError, match="must be an object"):
        model_config_from_json(["name"])  # type: ignore[arg-type]
