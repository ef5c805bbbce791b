"""Backend plugins: register_backend, entry points, backend directories, settings, failures."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import infercore
from infercore.backends import base
from infercore.backends.base import (
    backend_settings,
    get_backend,
    list_backends,
    load_backend_directory,
    parse_backend_config,
    register_backend,
)
from infercore.errors import InvalidArgumentError
from infercore.testing import RepositoryBuilder

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "custom_backend"

# A whole backend in one module: Y = X * factor, factor from the model's backend settings.
PLUGIN = '''
from infercore import DataType, Tensor

LOADED = True


class TimesBackend:
    supports_batching = False

    def __init__(self, settings):
        self.settings = dict(settings)

    def auto_complete_config(self, config, model_dir, version_dir):
        if not config.input:
            config.input.add(name="X", data_type=11, dims=[2])  # TYPE_FP32
            config.output.add(name="Y", data_type=11, dims=[2])

    def create_model(self, context):
        return TimesModel(float(context.backend_config.get("factor", DEFAULT)))


class TimesModel:
    def __init__(self, factor):
        self.factor = factor

    def create_instance(self, info):
        return TimesInstance(self.factor)

    def finalize(self):
        pass


class TimesInstance:
    def __init__(self, factor):
        self.factor = factor

    def execute(self, payload):
        for request in payload.requests:
            x = request.inputs["X"].to_numpy()
            request.sender.send({"Y": Tensor(DataType.FP32, x * self.factor)})

    def finalize(self):
        pass


def create_backend(settings):
    backend = TimesBackend(settings)
    backend.name = NAME
    return backend
'''


def plugin_source(name: str, default_factor: float = 2.0) -> str:
    return PLUGIN + f"\nNAME = {name!r}\nDEFAULT = {default_factor!r}\n"


def model_config(backend: str) -> str:
    return f'backend: "{backend}"\ninstance_group [ {{ kind: KIND_CPU, count: 1 }} ]\n'


# Each test starts from the built-in registry and leaves it as it found it (conftest.py).
pytestmark = pytest.mark.usefixtures("isolated_registry")


def install(site: Path, monkeypatch, dist: str, entries: dict[str, str],
            modules: dict[str, str] | None = None) -> None:
    """Make ``site`` look like site-packages holding distribution ``dist``."""
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[infercore.backends]\n{lines}\n")
    for module, source in (modules or {}).items():
        (site / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(site))


def infer_y(server: infercore.Server, model: str, x: np.ndarray) -> np.ndarray:
    response = server.model(model).infer(inputs={"X": x}).result()
    return response.outputs["Y"].to_numpy()


# -- register_backend ----------------------------------------------------------------------------
class _Fake:
    supports_batching = False

    def __init__(self, settings=None) -> None:
        self.settings = dict(settings or {})
        self.name = "fake"

    def auto_complete_config(self, config, model_dir, version_dir) -> None:
        pass

    def create_model(self, context):
        raise NotImplementedError


def test_register_backend_takes_an_object_a_factory_or_an_import_string():
    ready = _Fake()
    register_backend("fake", ready)
    assert get_backend("fake") is ready
    register_backend("fake", _Fake)
    made = get_backend("fake")
    assert isinstance(made, _Fake) and made is not ready
    register_backend("fake", f"{__name__}:_Fake")
    assert type(get_backend("fake")).__name__ == "_Fake"


def test_factory_gets_the_settings_and_each_settings_get_their_own_backend():
    register_backend("fake", _Fake)
    plain = get_backend("fake")
    tuned = get_backend("fake", {"level": "3"})
    assert plain.settings == {} and tuned.settings == {"level": "3"}
    assert get_backend("fake", {"level": "3"}) is tuned


def test_a_slow_backend_creation_blocks_only_its_own_name():
    import threading

    started, release = threading.Event(), threading.Event()
    made: list[_Fake] = []

    def slow_factory() -> _Fake:
        started.set()
        assert release.wait(10)
        made.append(_Fake())
        return made[-1]

    register_backend("fake", slow_factory)
    base._LOADED.pop(("python", ()), None)  # so that it must be created below
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(get_backend("fake")))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    assert started.wait(10)
    # Meanwhile another backend is served at once (a framework import holds no global lock).
    assert type(get_backend("python")).__name__ == "PythonBackend"
    release.set()
    for thread in threads:
        thread.join(10)
    assert len(made) == 1 and results == [made[0], made[0]]


def test_builtins_are_registered_by_import_string_without_importing_them():
    assert {"python", "onnxruntime", "pytorch"} <= set(list_backends())
    code = ("import sys, infercore, infercore.backends.base as b; b.list_backends(); "
            "bad = [m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_unknown_backend_keeps_tritons_message():
    with pytest.raises(InvalidArgumentError, match="unable to find backend library for backend "
                       "'nope', try specifying runtime on the model configuration."):
        get_backend("nope")


def test_unknown_backend_names_the_backends_there_are():
    register_backend("extra_here", _Fake)
    with pytest.raises(InvalidArgumentError) as caught:
        get_backend("tensorrt")
    message = caught.value.message
    assert "infercore has no 'tensorrt' backend; the backends here are " in message
    named = message.split("the backends here are ")[1].split(" (more can be added")[0]
    assert {"extra_here", "onnxruntime", "python", "pytorch"} <= set(named.split(", "))
    assert named.split(", ") == list_backends()


@pytest.mark.parametrize(("backend", "framework", "extra"), [
    ("onnxruntime", "onnxruntime", "onnx"), ("pytorch", "torch", "torch")])
def test_a_builtin_without_its_framework_names_the_extra(backend: str, framework: str,
                                                         extra: str):
    # None in sys.modules makes the framework's import fail as if it were not installed.
    code = textwrap.dedent(f"""
        import sys
        sys.modules[{framework!r}] = None
        from infercore.backends.base import get_backend
        from infercore.errors import InvalidArgumentError
        try:
            get_backend({backend!r})
        except InvalidArgumentError as exc:
            print(exc.message)
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                         capture_output=True, text=True).stdout.strip()
    assert out == (f"unable to load backend '{backend}': it needs {framework}, which is not "
                   f"installed here; install it with: pip install 'infercore[{extra}]'")


def test_a_model_of_a_missing_backend_fails_per_version_as_in_triton(
        add_sub_repo: RepositoryBuilder):
    add_sub_repo.add_model("trt", config='name: "trt"\nbackend: "tensorrt"\n'
                           'max_batch_size: 0\n'
                           'input [{name: "I" data_type: TYPE_FP32 dims: [1]}]\n'
                           'output [{name: "O" data_type: TYPE_FP32 dims: [1]}]\n',
                           files={"1/model.plan": "x", "2/model.plan": "x"})
    with infercore.Server(model_repository=add_sub_repo.path, exit_on_error=False) as server:
        entries = [e for e in server.repository_index() if e.name == "trt"]
        # the default policy (latest 1) tries version 2 alone, as Triton's does
        assert [(e.version, e.state) for e in entries] == [
            ("2", infercore.ModelState.UNAVAILABLE)]
        assert entries[0].reason.startswith("Invalid argument: unable to find backend library "
                                            "for backend 'tensorrt'")
        a = np.ones((1, 4), np.float32)
        response = server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": a}).result()
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), a + a)


@pytest.mark.parametrize("target", ["no_colon", ":attr", "module:"])
def test_malformed_import_strings_are_refused(target: str):
    with pytest.raises(InvalidArgumentError, match="expected '<module>:<attribute>'"):
        register_backend("bad", target)


# -- entry points --------------------------------------------------------------------------------
def test_entry_point_plugin_is_found_by_name_and_imported_on_first_use(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, "times-plugin",
            {"times": "plugin_times:create_backend"},
            {"plugin_times": plugin_source("times")})
    assert "times" in list_backends()
    assert "plugin_times" not in sys.modules  # listed, not imported
    backend = get_backend("times", {"a": "b"})
    assert "plugin_times" in sys.modules
    assert backend.name == "times" and backend.settings == {"a": "b"}


def test_entry_point_plugin_serves_models_with_backend_settings(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, "times-plugin",
            {"times": "plugin_times:create_backend"},
            {"plugin_times": plugin_source("times")})
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("tripler", config=model_config("times"))
    with infercore.Server(model_repository=repo.path,
                          backend_configuration={"times": {"factor": "3"}}) as server:
        np.testing.assert_array_equal(infer_y(server, "tripler", np.array([1, 2], np.float32)),
                                      [3, 6])


def test_entry_point_never_shadows_a_builtin(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, "imposter",
            {"python": "plugin_imposter:create_backend"},
            {"plugin_imposter": plugin_source("python")})
    assert type(get_backend("python")).__name__ == "PythonBackend"
    assert "plugin_imposter" not in sys.modules


# -- backend directories ---------------------------------------------------------------------------
def test_backend_directory_registers_modules_and_packages(tmp_path):
    directory = tmp_path / "backends"
    directory.mkdir()
    (directory / "doubler.py").write_text(plugin_source("doubler", 2.0))
    package = directory / "quad"
    package.mkdir()
    (package / "impl.py").write_text(plugin_source("quad", 4.0))
    (package / "__init__.py").write_text("from .impl import create_backend\n")
    (directory / "_helper.py").write_text("raise RuntimeError('never imported')\n")
    (directory / "notes.txt").write_text("not a backend\n")
    assert load_backend_directory(directory) == ["doubler", "quad"]
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("twice", config=model_config("doubler"))
    repo.add_model("four", config=model_config("quad"))
    x = np.array([1, 3], np.float32)
    with infercore.Server(model_repository=repo.path) as server:
        np.testing.assert_array_equal(infer_y(server, "twice", x), [2, 6])
        np.testing.assert_array_equal(infer_y(server, "four", x), [4, 12])


def test_backend_directory_replaces_a_built_in_of_the_same_name(tmp_path):
    directory = tmp_path / "backends"
    directory.mkdir()
    (directory / "onnxruntime.py").write_text(plugin_source("onnxruntime"))
    load_backend_directory(directory)
    assert type(get_backend("onnxruntime")).__name__ == "TimesBackend"


def test_backend_directory_must_exist(tmp_path):
    with pytest.raises(InvalidArgumentError, match="backend directory '.*missing' does not "
                       "exist"):
        load_backend_directory(tmp_path / "missing")


# -- broken plugins --------------------------------------------------------------------------------
@pytest.mark.parametrize(("source", "message"), [
    ("x = 1 / 0\n", "unable to load backend 'broken' from file '.*broken.py': "
                    "ZeroDivisionError: division by zero"),
    ("VALUE = 1\n", "defines no 'create_backend'"),
    ("def create_backend():\n    raise RuntimeError('no licence')\n",
     "unable to load backend 'broken' .*RuntimeError: no licence"),
    ("class B:\n    name = 'broken'\n    supports_batching = False\n"
     "def create_backend():\n    return B()\n",
     "does not implement the Backend interface: it has no auto_complete_config, create_model"),
    (plugin_source("other"), "backend registered as 'broken' .* calls itself 'other'"),
])
def test_broken_directory_plugin_is_a_clear_load_error(tmp_path, source: str, message: str):
    directory = tmp_path / "backends"
    directory.mkdir()
    (directory / "broken.py").write_text(source)
    load_backend_directory(directory)
    with pytest.raises(InvalidArgumentError, match=message):
        get_backend("broken")


def test_entry_point_to_a_missing_module_is_a_clear_load_error(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, "ghost-plugin", {"ghost": "plugin_ghost:Factory"})
    with pytest.raises(InvalidArgumentError, match="unable to load backend 'ghost' from entry "
                       "point 'ghost = plugin_ghost:Factory' of distribution 'ghost-plugin': "
                       "ModuleNotFoundError"):
        get_backend("ghost")


def test_a_broken_plugin_fails_only_its_models(tmp_path, add_sub_repo: RepositoryBuilder):
    directory = tmp_path / "backends"
    directory.mkdir()
    (directory / "broken.py").write_text("import no_such_dependency\n")
    load_backend_directory(directory)
    add_sub_repo.add_model("needs_broken", config=model_config("broken"))
    with infercore.Server(model_repository=add_sub_repo.path, exit_on_error=False) as server:
        states = {entry.name: entry for entry in server.repository_index()}
        assert states["needs_broken"].state is infercore.ModelState.UNAVAILABLE
        assert "unable to load backend 'broken'" in states["needs_broken"].reason
        assert "ModuleNotFoundError" in states["needs_broken"].reason
        a = np.ones((1, 4), np.float32)
        response = server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": a}).result()
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), a + a)


def test_a_fixed_plugin_loads_on_the_next_try(tmp_path):
    directory = tmp_path / "backends"
    directory.mkdir()
    (directory / "flaky.py").write_text("raise ImportError('not yet')\n")
    load_backend_directory(directory)
    with pytest.raises(InvalidArgumentError, match="not yet"):
        get_backend("flaky")
    (directory / "flaky.py").write_text(plugin_source("flaky"))
    assert get_backend("flaky").name == "flaky"


# -- --backend-config ----------------------------------------------------------------------------
def test_parse_backend_config_per_backend_and_global():
    parsed = parse_backend_config([
        "onnxruntime,default-max-batch-size=8",
        "onnxruntime,intra_op_thread_count=2",
        "python,shm-region-prefix-name=a,b=c",  # the value may hold ',' and '='
        "default-max-batch-size=16",
    ])
    assert parsed == {
        "onnxruntime": {"default-max-batch-size": "8", "intra_op_thread_count": "2"},
        "python": {"shm-region-prefix-name": "a,b=c"},
        "": {"default-max-batch-size": "16"},
    }
    assert backend_settings(parsed, "onnxruntime")["default-max-batch-size"] == "8"
    assert backend_settings(parsed, "pytorch") == {"default-max-batch-size": "16"}


@pytest.mark.parametrize("item", ["onnxruntime", "onnxruntime,=3", "=3"])
def test_malformed_backend_config_is_refused(item: str):
    with pytest.raises(InvalidArgumentError, match="--backend-config option format"):
        parse_backend_config([item])


# -- the example package --------------------------------------------------------------------
def test_example_custom_backend_installs_by_entry_point_and_serves(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, "infercore-example-backend",
            {"scale": "infercore_example_backend:ScaleBackend"})
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    with infercore.Server(model_repository=EXAMPLE / "models") as server:
        response = server.model("scale_demo").infer(
            inputs={"INPUT": np.array([[1, 2, 4]], np.float32)}).result()
        np.testing.assert_array_equal(response.outputs["OUTPUT"].to_numpy(), [[2.5, 5, 10]])


def test_example_custom_backend_works_from_a_backend_directory(tmp_path):
    directory = tmp_path / "backends"
    directory.mkdir()
    (directory / "scale").symlink_to(EXAMPLE / "src" / "infercore_example_backend")
    load_backend_directory(directory)
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("auto", config=textwrap.dedent("""
        backend: "scale"
        instance_group [ { kind: KIND_CPU, count: 1 } ]
    """))  # inputs, outputs and max_batch_size come from the backend's auto-complete
    with infercore.Server(model_repository=repo.path,
                          backend_configuration={"scale": {"default-factor": "3"}}) as server:
        response = server.model("auto").infer(
            inputs={"INPUT": np.array([[1, 2]], np.float32)}).result()
        np.testing.assert_array_equal(response.outputs["OUTPUT"].to_numpy(), [[3, 6]])
        assert server.model("auto").config()["max_batch_size"] == 8
