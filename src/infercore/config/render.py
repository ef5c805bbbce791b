"""ModelConfig <-> the JSON of Triton's config endpoints (ModelConfigToJson / JsonToModelConfig).

Triton prints the protobuf JSON with original field names and every primitive field, then
turns the 64-bit integers protobuf writes as strings back into numbers. We do the same,
finding those fields through the descriptors rather than by looking at values, so a string
parameter "123" stays a string.
"""

from __future__ import annotations

import inspect
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError

__all__ = ["model_config_from_json", "model_config_to_json"]

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)

# protobuf 5.26 renamed including_default_value_fields to always_print_fields_with_no_presence
# (and 6.x dropped the old name); both print unset primitives, repeated fields and maps.
_PRINT_DEFAULTS = (
    "always_print_fields_with_no_presence"
    if "always_print_fields_with_no_presence"
    in inspect.signature(json_format.MessageToDict).parameters
    else "including_default_value_fields"
)


def model_config_to_json(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The dict Triton's ``GET /v2/models/{name}/config`` returns for ``config``."""
    if config.ByteSize() == 0:
        return {}  # Triton answers an all-default config with an empty document
    printed = json_format.MessageToDict(
        config, preserving_proto_field_name=True, **{_PRINT_DEFAULTS: True}
    )
    return _fix_message(config.DESCRIPTOR, printed)


def model_config_from_json(data: dict[str, Any]) -> model_config_pb2.ModelConfig:
    """Parse Triton's config JSON (e.g. a load request's config override).

    Enum names are matched case-insensitively, as Triton's parser does; unknown fields and
    malformed values raise InvalidArgumentError.
    """
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"model configuration JSON must be an object, got {type(data).__name__}"
        )
    config = model_config_pb2.ModelConfig()
    try:
        json_format.ParseDict(_upper_enums(config.DESCRIPTOR, data), config)
    except (json_format.ParseError, TypeError, ValueError) as exc:
        # protobuf appends the list of every field name; the first line says what is wrong.
        raise InvalidArgumentError(str(exc).split("\n", 1)[0]) from exc
    return config


def _fix_message(descriptor: Descriptor, printed: dict[str, Any]) -> dict[str, Any]:
    """Rebuild one printed message in field-number order with 64-bit values as ints."""
    fixed: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name in printed:
            fixed[field.name] = _fix_field(field, printed[field.name])
    return fixed


def _fix_field(field: FieldDescriptor, value: Any) -> Any:
    if _is_map(field):
        # JSON object keys are strings, so 64-bit map keys stay strings (as in Triton).
        value_field = field.message_type.fields_by_name["value"]
        return {key: _fix_value(value_field, item) for key, item in value.items()}
    if _is_repeated(field):
        return [_fix_value(field, item) for item in value]
    return _fix_value(field, value)


def _fix_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE and isinstance(value, dict):
        return _fix_message(field.message_type, value)
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    return value


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 6 deprecates 'label' in favour of the 'is_repeated' property.
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _upper_enums(descriptor: Descriptor, data: Any) -> Any:
    """Copy of ``data`` with enum names upper-cased where that names a real value."""
    if not isinstance(data, dict):
        return data
    result: dict[str, Any] = {}
    for key, value in data.items():
        field = descriptor.fields_by_name.get(key) or _field_by_json_name(descriptor, key)
        result[key] = value if field is None else _upper_field(field, value)
    return result


def _upper_field(field: FieldDescriptor, value: Any) -> Any:
    if _is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        if isinstance(value, dict):
            return {k: _upper_value(value_field, v) for k, v in value.items()}
        return value
    if _is_repeated(field) and isinstance(value, list):
        return [_upper_value(field, item) for item in value]
    return _upper_value(field, value)


def _upper_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _upper_enums(field.message_type, value)
    if field.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        upper = value.upper()
        if upper in field.enum_type.values_by_name:
            return upper
    return value


def _field_by_json_name(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    for field in descriptor.fields:
        if field.json_name == key:
            return field
    return None
