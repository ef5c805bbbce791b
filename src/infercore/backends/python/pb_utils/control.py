"""``pb_utils.load_model``, ``unload_model`` and ``is_model_ready``: a model controlling others.

As in Triton's Python backend, a model may load (with a config override and files),
unload and check other models of its server, which must run with
``--model-control-mode=explicit`` for loads and unloads. The calls go to the server's
``ModelControl`` the model's scope holds: the server's own in-thread, a ``RemoteControl``
in a worker process (worker/bls.py), so both execution modes answer alike.

Arguments convert as Triton's pybind11 binding converts them (``TypeError`` otherwise);
the server's refusals come back as ``TritonModelException`` with Triton's texts ("Failed
to load model: Failed to process the request for model '<instance>', message: ...").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ....errors import TritonError as CoreTritonError
from ...base import ModelControl
from .args import as_str, refused
from .error import TritonModelException
from .request import current_scope

__all__ = ["is_model_ready", "load_model", "unload_model"]

_T = TypeVar("_T")
# std::stol: leading blanks, a sign, digits; whatever follows is ignored
_STOL = re.compile(r"\s*([+-]?\d+)")


def load_model(model_name: Any, config: Any = "", files: Any = None) -> None:
    """Load (or reload) a model; ``config`` a JSON model config replacing its
    config.pbtxt, ``files`` {"file:<path in the model folder>": bytes}."""
    name = as_str(model_name, "load_model", "model_name")
    config_text = as_str(config, "load_model", "config")
    contents: dict[str, bytes] = {}
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(  # the stub's own check, not wrapped
                f"failed to load model '{name}', files should be a dictionary of file "
                "paths and file contents")
        for key, value in files.items():
            if not isinstance(value, bytes):
                raise refused("load_model", "files", value, "bytes")
            contents[as_str(key, "load_model", "files")] = bytes(value)
    _run("Failed to load model", lambda control: control.load(name, config_text, contents))


def unload_model(model_name: Any, unload_dependents: Any = False) -> None:
    """Unload a model (once its requests finish); ``unload_dependents`` also unloads the
    models an unloaded ensemble loaded for its steps."""
    name = as_str(model_name, "unload_model", "model_name")
    dependents = _as_bool(unload_dependents, "unload_model", "unload_dependents")
    _run("Failed to unload model", lambda control: control.unload(name, dependents))


def is_model_ready(model_name: Any, model_version: Any = "") -> bool:
    """Whether the model's version (``""``: the latest) is ready; False when unknown."""
    name = as_str(model_name, "is_model_ready", "model_name")
    version_text = as_str(model_version, "is_model_ready", "model_version")
    return _run("Failed to check model readiness",
                lambda control: control.is_ready(name, _version(version_text)))


def _as_bool(value: Any, function: str, argument: str) -> bool:
    """pybind11's ``bool`` with conversion: None, a bool, a number (numpy's too)."""
    if value is None or isinstance(value, (bool, int, float, np.bool_, np.number)):
        return bool(value)
    raise refused(function, argument, value, "bool")


def _version(text: str) -> int:
    """Triton's version string: "" for the latest (-1), else an integer >= 0."""
    if not text:
        return -1
    match = _STOL.match(text)
    if match is None:
        raise CoreTritonError(
            f"failed to get model version from specified version string '{text}' (details: "
            "stol), version should be an integral value > 0")
    version = int(match.group(1))
    if version < 0:
        raise CoreTritonError(
            f"failed to get model version from specified version string '{text}', version "
            "should be an integral value > 0")
    return version


def _run(what: str, operation: Callable[[ModelControl], _T]) -> _T:
    """Run ``operation`` on the model's server; its refusal as Triton's stub words it."""
    scope = current_scope()
    control = None if scope is None else scope.control
    if control is None:
        raise TritonModelException(
            f"{what}: model control needs the model to be served by an infercore server, "
            "and none is attached to this model.")
    assert scope is not None
    try:
        return operation(control)
    except CoreTritonError as exc:
        raise TritonModelException(
            f"{what}: Failed to process the request for model '{scope.instance_name}', "
            f"message: {exc.message}") from None
