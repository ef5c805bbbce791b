"""config.pbtxt -> ModelConfig (tritonclient's model_config_pb2): parse, normalize, validate."""

from .normalize import normalize_model_config
from .parse import ConfigParseError, parse_model_config, read_model_config
from .platform import default_model_filename, resolve_backend
from .render import model_config_from_json, model_config_to_json
from .validate import validate_instance_groups, validate_model_config

__all__ = [
    "ConfigParseError",
    "default_model_filename",
    "model_config_from_json",
    "model_config_to_json",
    "normalize_model_config",
    "parse_model_config",
    "read_model_config",
    "resolve_backend",
    "validate_instance_groups",
    "validate_model_config",
]
