"""config.pbtxt -> ModelConfig: protobuf text format, with Triton's file selection rules."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from ..errors import InvalidArgumentError

__all__ = ["ConfigParseError", "parse_model_config", "read_model_config"]

CONFIG_FILENAME = "config.pbtxt"
CUSTOM_CONFIG_FOLDER = "configs"
CONFIG_EXTENSION = ".pbtxt"

# The parser prefixes its message with "line:col : "; we print the location ourselves.
_LOCATION_PREFIX = re.compile(r"^\d+:\d+ : ")


class ConfigParseError(InvalidArgumentError):
    """A config file that is no ModelConfig text. ``message`` says where and why;
    ``poll_reason`` is Triton's words for it (its poll logs only the file), ``detail``
    what Triton's protobuf parser logs on a line of its own ("Error parsing
    text-format inference.ModelConfig: <line>:<column>: <reason>")."""

    def __init__(self, message: str, *, source: str, detail: str) -> None:
        super().__init__(message)
        self.poll_reason = f"failed to read text proto from {source}"
        self.detail = detail


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
        at = f"{line}:{column}: " if line is not None else ""
        raise ConfigParseError(
            f"failed to load model '{model_name}': failed to read text proto from {where}: "
            f"{reason}", source=source,
            detail=f"Error parsing text-format inference.ModelConfig: {at}{reason}") from exc
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
