"""config.pbtxt -> ModelConfig: protobuf text format, with Triton's file selection rules."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError

__all__ = ["parse_model_config", "read_model_config"]

CONFIG_FILENAME = "config.pbtxt"
CUSTOM_CONFIG_FOLDER = "configs"
CONFIG_EXTENSION = ".pbtxt"

# The parser prefixes its message with "line:col : "; we print the location ourselves.
_LOCATION_PREFIX = re.compile(r"^\d+:\d+ : ")


def parse_model_config(
    text: str, *, model_name: str, source: str = CONFIG_FILENAME
) -> model_config_pb2.ModelConfig:
    """Parse config.pbtxt text; syntax errors and unknown fields raise InvalidArgumentError.

    The message keeps Triton's "failed to read text proto from <file>" and adds the
    parser's line:col and reason, which Triton only writes to its log.
    """
    config = model_config_pb2.ModelConfig()
    try:
        # Parse, not Merge: like Triton's C++ parser, a non-repeated field given twice is an
        # error rather than last-one-wins.
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        reason = _LOCATION_PREFIX.sub("", str(exc))
        line, column = exc.GetLine(), exc.GetColumn()
        where = f"{source}:{line}:{column}" if line is not None else source
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': failed to read text proto from {where}: {reason}"
        ) from exc
    return config


def config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """The config file Triton reads for a model directory (``--model-config-name`` aware).

    ``configs/<config_name>.pbtxt`` when that file exists, else ``config.pbtxt``, as in
    Triton's ``GetModelConfigFullPath``.
    """
    model_dir = Path(model_dir)
    if config_name:
        custom = model_dir / CUSTOM_CONFIG_FOLDER / (config_name + CONFIG_EXTENSION)
        if custom.exists():
            return custom
    return model_dir / CONFIG_FILENAME


def read_model_config(
    model_dir: Path, *, model_name: str, config_name: str | None = None
) -> model_config_pb2.ModelConfig | None:
    """Read and parse a model directory's config; None when there is no config file.

    A missing file is not an error: the caller then relies on backend auto-complete.
    """
    path = config_path(model_dir, config_name)
    if not path.exists():
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': failed to read text proto from {path}: {exc}"
        ) from exc
    return parse_model_config(text, model_name=model_name, source=str(path))
