"""Importing model.py files: isolation between models, reloads, siblings, and refusals."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from infercore.backends.python.loader import (
    load_model_class,
    model_package,
    unload_model_class,
)
from infercore.errors import InternalError, InvalidArgumentError

MODEL_PY = """
import triton_python_backend_utils as pb_utils

LOADS = []


class TritonPythonModel:
    KIND = {kind!r}

    def execute(self, requests):
        return []
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _model(repo: Path, name: str, text: str, version: int = 1) -> Path:
    return _write(repo / name / str(version) / "model.py", text)


def _load(repo: Path, name: str, version: int = 1) -> type:
    return load_model_class(
        repo / name / str(version) / "model.py",
        repository=repo,
        module_key=f"{name}_{version}",
    )


def test_two_model_files_named_model_py_do_not_collide(tmp_path: Path):
    _model(tmp_path, "a", MODEL_PY.format(kind="a"))
    _model(tmp_path, "b", MODEL_PY.format(kind="b"))
    a, b = _load(tmp_path, "a"), _load(tmp_path, "b")
    assert (a.KIND, b.KIND) == ("a", "b")
    assert a.__module__ != b.__module__
    assert sys.modules[a.__module__].LOADS is not sys.modules[b.__module__].LOADS
    unload_model_class(a)
    unload_model_class(b)


def test_reload_imports_the_file_afresh(tmp_path: Path):
    path = _model(tmp_path, "m", MODEL_PY.format(kind="old"))
    first = _load(tmp_path, "m")
    path.write_text(MODEL_PY.format(kind="new"))
    second = _load(tmp_path, "m")
    assert (first.KIND, second.KIND) == ("old", "new")
    assert model_package(first) != model_package(second)
    unload_model_class(first)
    unload_model_class(second)


def test_unload_forgets_the_modules(tmp_path: Path):
    _model(tmp_path, "m", MODEL_PY.format(kind="x"))
    cls = _load(tmp_path, "m")
    package = model_package(cls)
    assert package in sys.modules and cls.__module__ in sys.modules
    unload_model_class(cls)
    assert not [n for n in sys.modules if n == package or n.startswith(package + ".")]


SIBLING_MODEL = """
import helper_{tag}
from . import relative_helper


class TritonPythonModel:
    VALUES = (helper_{tag}.VALUE, relative_helper.VALUE)
"""


def test_sibling_modules_import_absolutely_and_relatively_without_leaking(tmp_path: Path):
    path_before = list(sys.path)
    for tag in ("x", "y"):
        _model(tmp_path, tag, SIBLING_MODEL.format(tag="same"))
        _write(tmp_path / tag / "1" / "helper_same.py", f"VALUE = 'abs-{tag}'\n")
        _write(tmp_path / tag / "1" / "relative_helper.py", f"VALUE = 'rel-{tag}'\n")
    x, y = _load(tmp_path, "x"), _load(tmp_path, "y")
    # Both models have a helper_same.py: each gets its own.
    assert x.VALUES == ("abs-x", "rel-x")
    assert y.VALUES == ("abs-y", "rel-y")
    assert sys.path == path_before
    assert "helper_same" not in sys.modules
    unload_model_class(x)
    unload_model_class(y)


def test_model_directory_modules_are_importable_during_load(tmp_path: Path):
    _model(tmp_path, "m", "import shared_util\n\nclass TritonPythonModel:\n    V = shared_util.V\n")
    _write(tmp_path / "m" / "shared_util.py", "V = 7\n")
    cls = _load(tmp_path, "m")
    assert cls.V == 7
    assert "shared_util" not in sys.modules
    unload_model_class(cls)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_model_file_outside_the_repository_is_refused(tmp_path: Path):
    repo = tmp_path / "repo"
    outside = _write(tmp_path / "elsewhere" / "evil.py", MODEL_PY.format(kind="evil"))
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "1" / "model.py").symlink_to(outside)
    with pytest.raises(InvalidArgumentError) as info:
        _load(repo, "m")
    message = info.value.message
    assert "outside the model repository" in message
    assert "'m'" in message and str(outside) in message


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_model_file_inside_the_repository_loads(tmp_path: Path):
    shared = _write(tmp_path / "common" / "impl.py", MODEL_PY.format(kind="shared"))
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").symlink_to(shared)
    cls = _load(tmp_path, "m")
    assert cls.KIND == "shared"
    unload_model_class(cls)


def test_syntax_error_names_model_and_file(tmp_path: Path):
    path = _model(tmp_path, "broken", "class TritonPythonModel(:\n    pass\n")
    modules_before = set(sys.modules)
    with pytest.raises(InvalidArgumentError) as info:
        _load(tmp_path, "broken")
    message = info.value.message
    assert "failed to load model 'broken'" in message
    assert str(path) in message
    assert "SyntaxError" in message
    assert not [n for n in set(sys.modules) - modules_before if "broken" in n]


def test_import_error_in_model_file_is_reported(tmp_path: Path):
    _model(tmp_path, "m", "import no_such_module_xyz\n\nclass TritonPythonModel:\n    pass\n")
    with pytest.raises(InvalidArgumentError) as info:
        _load(tmp_path, "m")
    assert "ModuleNotFoundError: No module named 'no_such_module_xyz'" in info.value.message


def test_exception_while_importing_is_reported(tmp_path: Path):
    _model(tmp_path, "m", "raise RuntimeError('top-level boom')\n")
    with pytest.raises(InvalidArgumentError, match="RuntimeError: top-level boom"):
        _load(tmp_path, "m")


def test_missing_triton_python_model_uses_tritons_wording(tmp_path: Path):
    _model(tmp_path, "m", "class SomethingElse:\n    pass\n")
    with pytest.raises(InternalError) as info:
        _load(tmp_path, "m")
    assert "AttributeError: module '1.model' has no attribute 'TritonPythonModel'" in (
        info.value.message
    )


def test_missing_model_file_is_reported(tmp_path: Path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(InvalidArgumentError, match="Python model file not found in"):
        _load(tmp_path, "m")


def test_model_file_must_be_python(tmp_path: Path):
    _write(tmp_path / "m" / "1" / "model.txt", "x")
    with pytest.raises(InvalidArgumentError, match="Model name must end with '.py'"):
        load_model_class(
            tmp_path / "m" / "1" / "model.txt", repository=tmp_path, module_key="m_1"
        )


# -- siblings by name, from any thread ---------------------------------------------------------
THREADED_MODEL = """
import pickle
import threading
import unittest

import helper


class Probe(unittest.TestCase):
    def test_word(self):
        import helper
        self.assertEqual(helper.WORD, MINE)


MINE = {mine!r}


def look():
    import helper
    import model
    from helper import WORD, Thing
    import deep.inner
    helper.CALLS.append(1)
    program = unittest.main("model", argv=["model"], exit=False,
                            testRunner=unittest.TextTestRunner(stream=__import__("io").StringIO()))
    return {{"word": WORD, "calls": len(helper.CALLS), "helper": helper.__name__,
            "model": model.__name__, "same": model.helper is helper,
            "deep": deep.inner.WORD, "thing": pickle.loads(pickle.dumps(Thing())).word,
            "tests": (program.result.testsRun, program.result.wasSuccessful())}}


def on_a_thread():
    seen = {{}}
    thread = threading.Thread(target=lambda: seen.update(look()))
    thread.start()
    thread.join(10)
    return seen


class TritonPythonModel:
    pass
"""

HELPER = """
WORD = {word!r}
CALLS = []


class Thing:
    word = WORD
"""


def _threaded(repo: Path, name: str) -> type:
    _model(repo, name, THREADED_MODEL.format(mine=name))
    _write(repo / name / "1" / "helper.py", HELPER.format(word=name))
    _write(repo / name / "1" / "deep" / "__init__.py", "")
    _write(repo / name / "1" / "deep" / "inner.py", "from helper import WORD\n")
    return _load(repo, name)


def test_siblings_imported_by_name_from_threads_stay_with_their_model(tmp_path: Path):
    a, b = _threaded(tmp_path, "a"), _threaded(tmp_path, "b")
    on_a = sys.modules[a.__module__].on_a_thread
    on_b = sys.modules[b.__module__].on_a_thread
    try:
        seen = [on_a(), on_b(), on_a(), on_b()]
        expected = {"helper": "helper", "model": "model", "same": True, "tests": (1, True)}
        for index, (name, calls) in enumerate([("a", 1), ("b", 1), ("a", 2), ("b", 2)]):
            assert seen[index] == dict(expected, word=name, calls=calls, deep=name,
                                       thing=name), index
        # nothing entered sys.modules by a bare name
        assert not {"helper", "model", "deep", "deep.inner"} & set(sys.modules)
    finally:
        unload_model_class(a)
        unload_model_class(b)
    assert not [n for n in sys.modules if n.startswith(model_package(a))]


def test_a_module_of_the_environment_wins_over_a_sibling_of_its_name(tmp_path: Path):
    _model(tmp_path, "m", "import json\nimport mine\n\nclass TritonPythonModel:\n"
                          "    SEEN = (json.__name__, hasattr(json, 'dumps'), mine.V)\n")
    _write(tmp_path / "m" / "1" / "json.py", "V = 'sibling'\n")
    _write(tmp_path / "m" / "1" / "mine.py", "V = 'mine'\n")
    cls = _load(tmp_path, "m")
    assert cls.SEEN == ("json", True, "mine")  # Triton appends the folders to sys.path
    unload_model_class(cls)


def test_code_outside_models_is_untouched(tmp_path: Path):
    _model(tmp_path, "m", "class TritonPythonModel:\n    pass\n")
    _write(tmp_path / "m" / "1" / "only_here.py", "V = 1\n")
    cls = _load(tmp_path, "m")
    try:
        with pytest.raises(ModuleNotFoundError):
            __import__("only_here")  # this test's own code is no model's
    finally:
        unload_model_class(cls)
