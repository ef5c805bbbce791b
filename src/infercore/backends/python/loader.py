"""Import a Triton Python model file (``model.py``) safely, once per model version.

Each load gets a fresh, uniquely named package, ``_infercore_model_<key>_<n>``, whose
``__path__`` is the version directory, and the file is imported as ``<package>.model``. So
two models both called ``model.py`` never collide, a reload re-executes the file, and the
model's relative imports (``from .utils import x``) find its siblings, as Triton's
``<version>.model`` import does.

Triton's stub also appends the version directory and the model directory to ``sys.path``,
so ``import utils`` finds a sibling. infercore does the same, but only while the file is
imported (one interpreter serves every model): afterwards the directories leave
``sys.path`` and the sibling modules leave ``sys.modules``, so another model's ``utils`` is
imported afresh. A sibling imported later, by name, from code running for a model
(``import utils`` inside ``execute``, or ``unittest.main("model")``, which imports the
model file again as ``model`` as Triton's QA models do) is found by ``LAZY_SIBLINGS``, a
finder consulted after every other one, in the folders of the model whose code imports
it; the instance forgets such modules when its ``execute`` returns (``forget``).

Threads: loads run on whatever thread loads models; ``_LOCK`` serialises the window in which
``sys.path`` and ``sys.modules`` are changed; ``LAZY_SIBLINGS`` runs on any thread a model
imports from, and its own lock guards the names it found.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import os
import re
import sys
import threading
import types
from pathlib import Path
from typing import Any

from ...errors import InternalError, InvalidArgumentError
from .pb_utils.request import current_scope

__all__ = ["LAZY_SIBLINGS", "MODEL_CLASS_NAME", "load_model_class", "model_package",
           "unload_model_class"]

MODEL_CLASS_NAME = "TritonPythonModel"
PACKAGE_PREFIX = "_infercore_model_"

_LOCK = threading.Lock()
_SEQUENCE = itertools.count(1)
_UNSAFE = re.compile(r"[^0-9A-Za-z_]")


def load_model_class(
    model_file: Path,
    *,
    repository: Path,
    module_key: str,
    model_name: str | None = None,
) -> type:
    """Import ``model_file`` and return its ``TritonPythonModel`` class.

    Args:
        repository: the model repository; the file, symlinks resolved, must lie inside it.
        module_key: names the module (e.g. "<model>_<version>"); a counter keeps each load
            distinct.
        model_name: for messages; defaults to the model directory's name.

    Raises:
        InvalidArgumentError: the file is outside the repository, missing, not a ``.py``
            file, or fails to import.
        InternalError: it has no ``TritonPythonModel`` class.
    """
    model_file = Path(os.path.abspath(model_file))
    if model_name is None:
        model_name = model_file.parent.parent.name
    real_file = model_file.resolve()
    real_repository = Path(repository).resolve()
    if not real_file.is_relative_to(real_repository):
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': model file '{model_file}' resolves to "
            f"'{real_file}', which is outside the model repository '{real_repository}'"
        )
    if not model_file.name.endswith(".py"):
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': Model name must end with '.py'. Model "
            f'name is "{model_file.name}".'
        )
    if not real_file.is_file():
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': Python model file not found in "
            f"'{model_file}'"
        )
    version_dir = model_file.parent.resolve()
    model_dir = version_dir.parent
    package = f"{PACKAGE_PREFIX}{_UNSAFE.sub('_', module_key)}_{next(_SEQUENCE)}"
    stem = model_file.name[: -len(".py")]
    # Triton imports the file as "<version>.<stem>"; messages use that name.
    triton_name = f"{model_file.parent.name}.{stem}"
    with _LOCK:
        module = _import(package, stem, real_file, version_dir, model_dir, model_name)
    model_class = getattr(module, MODEL_CLASS_NAME, None)
    if not isinstance(model_class, type):
        _drop_package(package)
        # Triton's words, and its code (tests/conformance: repository_explicit)
        raise InternalError(
            f"AttributeError: module '{triton_name}' has no attribute '{MODEL_CLASS_NAME}'")
    return model_class


def model_package(model_class: type) -> str:
    """The unique package a loaded model class lives in."""
    return model_class.__module__.partition(".")[0]


def unload_model_class(model_class: type) -> None:
    """Forget the modules of a loaded model, so its memory can be freed."""
    package = model_package(model_class)
    if package.startswith(PACKAGE_PREFIX):
        with _LOCK:
            _drop_package(package)


def _import(
    package: str,
    stem: str,
    real_file: Path,
    version_dir: Path,
    model_dir: Path,
    model_name: str,
) -> types.ModuleType:
    package_module = types.ModuleType(package)
    package_module.__path__ = [str(version_dir)]
    package_module.__package__ = package
    name = f"{package}.{stem}"
    spec = importlib.util.spec_from_file_location(name, real_file)
    if spec is None or spec.loader is None:  # not expected for a .py file
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': cannot import '{real_file}'"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = package_module
    sys.modules[name] = module
    setattr(package_module, stem, module)

    added = [d for d in (str(version_dir), str(model_dir)) if d not in sys.path]
    sys.path.extend(added)
    before = set(sys.modules)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        _drop_package(package)
        raise InvalidArgumentError(
            f"failed to load model '{model_name}': unable to import '{real_file}': "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    finally:
        for directory in added:
            try:
                sys.path.remove(directory)
            except ValueError:  # removed by the model itself
                pass
        _forget_siblings(set(sys.modules) - before, package, model_dir)
    return module


def _forget_siblings(new_names: set[str], package: str, model_dir: Path) -> None:
    """Drop modules imported from the model's own folders by absolute name."""
    prefix = str(model_dir) + os.sep
    for name in new_names:
        if name == package or name.startswith(package + "."):
            continue
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path).startswith(prefix):
            del sys.modules[name]


def _drop_package(package: str) -> None:
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


class _LazySiblings(importlib.abc.MetaPathFinder):
    """Top-level modules in the folders of the model whose code is importing them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if path is not None:  # a submodule: its package's __path__ finds it
            return None
        scope = current_scope()
        if scope is None:
            return None
        version_dir = Path(scope.version_dir)
        for directory in (version_dir, version_dir.parent):
            spec = importlib.machinery.PathFinder.find_spec(fullname, [str(directory)])
            if spec is not None:
                with self._lock:
                    self._found.append(fullname)
                return spec
        return None

    @property
    def pending(self) -> bool:
        return bool(self._found)

    def forget(self) -> None:
        """Drop the modules found so far (and their submodules) from ``sys.modules``."""
        with self._lock:
            names, self._found = self._found, []
        for name in names:
            for loaded in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                del sys.modules[loaded]


LAZY_SIBLINGS = _LazySiblings()
sys.meta_path.append(LAZY_SIBLINGS)
