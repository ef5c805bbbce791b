"""Model files sent with a load request: Triton's ``file:<version>/<name>`` load parameters.

Triton writes such files into a fresh temporary model directory and loads the model from
there; the repositories are never written. Each path is checked before anything is
written, as Triton checks it: joined under the temporary folder (a leading '/' stays under
it) and resolved, it must stay inside that folder ('1/../model.py' does, '../x' does not),
and name a file, so a request cannot place a file anywhere else. Unlike Triton's string
prefix test, "inside" is tested on path components ('/tmp/ab' is not inside '/tmp/a').
The folder lives as long as the model versions loaded from it; the manager removes it
when they are unloaded or replaced.

Threads: an ``OverrideDirectory`` is created and removed on the thread running a model
control operation; nothing else touches it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import InvalidArgumentError
from .layout import ModelSource, check_model_name, resolve_inside

__all__ = ["FILE_PREFIX", "OverrideDirectory", "split_load_parameters"]

FILE_PREFIX = "file:"


def split_load_parameters(
    parameters: Mapping[str, object],
) -> tuple[str | None, dict[str, bytes]]:
    """Triton's load parameters -> ``(config JSON or None, {relative path: content})``.

    Raises:
        InvalidArgumentError: a parameter other than ``config`` and ``file:...``, or a
            value of the wrong type (the config is a string, files are bytes).
    """
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if key == "config":
            if not isinstance(value, str):
                raise InvalidArgumentError(
                    "Config parameter 'config' must have string type for its value")
            config = value
        elif key.startswith(FILE_PREFIX):
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise InvalidArgumentError(
                    f"File parameter '{key}' must have bytes type for its value")
            files[key[len(FILE_PREFIX):]] = bytes(value)
        else:
            raise InvalidArgumentError(
                f"Unrecognized load parameter '{key}' with type '{type(value).__name__}'")
    return config, files


class OverrideDirectory:
    """A temporary model folder, ``<tmp>/<model name>/``, holding a load request's files."""

    __slots__ = ("model_dir", "root")

    def __init__(self, model_name: str, files: Mapping[str, bytes]) -> None:
        """Write ``files`` (paths relative to the model folder) into a new temporary folder.

        Raises:
            InvalidArgumentError: a path is empty, absolute, contains '..', a backslash or
                NUL, would leave the folder, or clashes with another file's folder.
        """
        check_model_name(model_name)
        if "\0" in model_name:  # it names a folder here
            raise InvalidArgumentError(f"invalid model name {model_name!r} for a model folder")
        if not files:
            raise InvalidArgumentError(
                f"failed to load '{model_name}': no model file given for the override")
        self.root = Path(tempfile.mkdtemp(prefix="infercore-override-"))
        self.model_dir = self.root / model_name
        try:
            self.model_dir.mkdir()
            for relative, content in files.items():
                self._write(relative, content)
        except BaseException:
            self.remove()
            raise

    @property
    def source(self) -> ModelSource:
        """The model's source: the override folder, inside its own temporary root."""
        return ModelSource(self.model_dir.name, self.model_dir, self.root)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _write(self, relative: str, content: bytes) -> None:
        parameter = FILE_PREFIX + relative
        inside = relative.lstrip("/")  # joined under the folder, as Triton joins it
        if not inside or "\0" in inside or inside.endswith("/"):
            raise InvalidArgumentError(
                f"Invalid file parameter '{parameter}': the path must name a file inside "
                "the model directory")
        try:
            target = resolve_inside(self.model_dir, inside)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"Invalid file parameter '{parameter}' must stay within model directory: "
                f"{exc.message}") from exc
        if target == self.model_dir.resolve():
            raise InvalidArgumentError(
                f"Invalid file parameter '{parameter}': the path must name a file")
        parent = target.parent
        if parent.exists() and not parent.is_dir():
            raise InvalidArgumentError(
                f"Invalid file parameter '{parameter}', directory has been created as a file")
        if target.is_dir():
            raise InvalidArgumentError(
                f"Invalid file parameter '{parameter}', the path is already a directory")
        parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a file is never written through a link, even one made meanwhile.
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        descriptor = os.open(target, flags, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)

    def __repr__(self) -> str:
        return f"OverrideDirectory({str(self.model_dir)!r})"
