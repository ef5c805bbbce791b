"""parse_model_config / read_model_config: text format, errors, file selection."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from infercore.config import parse_model_config, read_model_config
from infercore.errors import InvalidArgumentError

ADD_SUB = """
# comments are fine
name: "add_sub"
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "123" } }
"""


def test_parse_reads_the_fields_into_a_model_config():
    config = parse_model_config(ADD_SUB, model_name="add_sub")

    assert isinstance(config, model_config_pb2.ModelConfig)
    assert config.name == "add_sub"
    assert config.backend == "python"
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert list(config.output[0].dims) == [-1, 4]
    assert config.parameters["EXECUTION_ENV_PATH"].string_value == "123"


def test_parse_accepts_an_empty_file():
    assert parse_model_config("", model_name="m") == model_config_pb2.ModelConfig()


def test_unknown_field_names_model_file_line_column_and_reason():
    text = 'name: "add_sub"\nbackend: "python"\n    foo: 1\n'

    with pytest.raises(InvalidArgumentError) as info:
        parse_model_config(text, model_name="add_sub")

    assert str(info.value) == (
        "failed to load model 'add_sub': failed to read text proto from config.pbtxt:3:5: "
        'Message type "inference.ModelConfig" has no field named "foo".'
    )


def test_unknown_field_in_a_nested_message_names_that_message():
    text = 'input [ { name: "x" shape: [ 1 ] } ]'

    with pytest.raises(InvalidArgumentError, match=r'"inference.ModelInput" has no field named'):
        parse_model_config(text, model_name="m")


def test_syntax_error_reports_its_location_and_the_given_source():
    with pytest.raises(InvalidArgumentError) as info:
        parse_model_config('name: "m"\ninput [ {', model_name="m", source="/repo/m/config.pbtxt")

    message = str(info.value)
    assert message.startswith(
        "failed to load model 'm': failed to read text proto from /repo/m/config.pbtxt:2:"
    )
    assert 'Expected "}"' in message


def test_wrong_enum_value_is_rejected():
    text = 'input [ { name: "x" data_type: TYPE_FOO dims: [ 1 ] } ]'

    with pytest.raises(
        InvalidArgumentError, match='"inference.DataType" has no value named TYPE_FOO'
    ):
        parse_model_config(text, model_name="m")


def test_non_repeated_field_given_twice_is_rejected():
    with pytest.raises(InvalidArgumentError, match='multiple "name" fields'):
        parse_model_config('name: "a"\nname: "b"', model_name="a")


def test_value_of_the_wrong_type_is_rejected():
    with pytest.raises(InvalidArgumentError, match="Couldn't parse integer"):
        parse_model_config('max_batch_size: "eight"', model_name="m")


def test_parse_error_keeps_the_parser_error_as_cause():
    with pytest.raises(InvalidArgumentError) as info:
        parse_model_config("foo: 1", model_name="m")

    assert info.value.__cause__ is not None


# read_model_config


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_read_returns_none_without_a_config_file(tmp_path: Path):
    (tmp_path / "1").mkdir()

    assert read_model_config(tmp_path, model_name="m") is None


def test_read_parses_config_pbtxt(tmp_path: Path):
    _write(tmp_path / "config.pbtxt", 'name: "m"\nmax_batch_size: 8')

    config = read_model_config(tmp_path, model_name="m")

    assert config is not None
    assert config.max_batch_size == 8


def test_read_prefers_the_named_config_from_the_configs_folder(tmp_path: Path):
    _write(tmp_path / "config.pbtxt", "max_batch_size: 1")
    _write(tmp_path / "configs" / "h100.pbtxt", "max_batch_size: 64")

    config = read_model_config(tmp_path, model_name="m", config_name="h100")

    assert config is not None
    assert config.max_batch_size == 64


def test_read_falls_back_to_config_pbtxt_when_the_named_config_is_absent(tmp_path: Path):
    _write(tmp_path / "config.pbtxt", "max_batch_size: 1")
    _write(tmp_path / "configs" / "other.pbtxt", "max_batch_size: 64")

    config = read_model_config(tmp_path, model_name="m", config_name="h100")

    assert config is not None
    assert config.max_batch_size == 1


def test_read_returns_none_when_neither_named_nor_default_config_exists(tmp_path: Path):
    _write(tmp_path / "configs" / "other.pbtxt", "max_batch_size: 64")

    assert read_model_config(tmp_path, model_name="m", config_name="h100") is None


def test_read_ignores_the_configs_folder_without_a_config_name(tmp_path: Path):
    _write(tmp_path / "configs" / "config.pbtxt", "max_batch_size: 64")

    assert read_model_config(tmp_path, model_name="m") is None


def test_read_parse_error_names_the_full_path(tmp_path: Path):
    path = _write(tmp_path / "config.pbtxt", "bogus: 1")

    with pytest.raises(InvalidArgumentError, match=f"from {path}:1:1: "):
        read_model_config(tmp_path, model_name="m")


def test_read_unreadable_config_is_invalid_argument(tmp_path: Path):
    (tmp_path / "config.pbtxt").mkdir()  # a directory cannot be read as a file

    with pytest.raises(InvalidArgumentError, match="failed to load model 'm'"):
        read_model_config(tmp_path, model_name="m")


def test_read_non_utf8_config_is_invalid_argument(tmp_path: Path):
    (tmp_path / "config.pbtxt").write_bytes(b'name: "\xff\xfe"')

    with pytest.raises(InvalidArgumentError, match="failed to read text proto"):
        read_model_config(tmp_path, model_name="m")
