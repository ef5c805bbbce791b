"""EXPLICIT model control in process: load and unload, overrides, errors, dependents."""

from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from control_models import (
    add_echo,
    echo_config,
    echo_config_json,
    echo_py,
    ensemble_config,
    shared_state,
)

from infercore import InvalidArgumentError, ModelState, NotFoundError, Server, UnavailableError
from infercore.errors import InternalError
from infercore.testing import RepositoryBuilder

X = {"X": np.array([7], np.int32)}


@pytest.fixture
def state(tmp_path, monkeypatch):
    yield from shared_state(tmp_path, monkeypatch)


def _tag(server: Server, name: str) -> int:
    return int(server.model(name).infer(inputs=X).result(timeout=30).outputs["TAG"]
               .to_numpy()[0])


def _rows(server: Server, name: str) -> dict[str, tuple[str, str]]:
    return {e.version: (e.state.value, e.reason) for e in server.repository_index()
            if e.name == name}


def _explicit(repo: RepositoryBuilder, *startup: str, **options: object) -> Server:
    return Server(model_repository=repo.path, model_control_mode="explicit",
                  startup_models=list(startup), **options)


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_load_and_unload_are_refused_outside_explicit_mode(repo, state, mode):
    add_echo(repo, "m", 1)
    with Server(model_repository=repo.path, model_control_mode=mode,
                repository_poll_secs=0) as server:
        text = "explicit model load / unload is not allowed if polling is enabled"
        with pytest.raises(UnavailableError, match=text):
            server.load("m")
        with pytest.raises(UnavailableError, match=text):
            server.unload("m")
        assert _tag(server, "m") == 1


def test_polling_is_refused_outside_poll_mode(repo, state):
    add_echo(repo, "m", 1)
    with _explicit(repo) as server, pytest.raises(UnavailableError, match="polling is disabled"):
        server.poll_model_repository()


def test_the_wildcard_must_be_the_only_startup_model(repo, state):
    add_echo(repo, "m", 1)
    server = _explicit(repo, "*", "m")
    with pytest.raises(InvalidArgumentError, match="Wildcard model name '\\*' must be the ONLY"):
        server.start()
    server.stop()


def test_explicit_mode_loads_only_the_startup_models_and_lists_the_others(repo, state):
    add_echo(repo, "a", 1)
    add_echo(repo, "b", 2)
    with _explicit(repo, "a") as server:
        index = {e.name: e for e in server.repository_index()}
        assert index["a"].state is ModelState.READY
        assert index["b"].name_only and index["b"].to_dict() == {"name": "b"}
        assert not server.model("b").ready()
        server.load("b")
        assert _tag(server, "b") == 2
        server.unload("a")
        assert _rows(server, "a") == {"1": ("UNAVAILABLE", "unloaded")}
        server.unload("never_loaded")  # as Triton: nothing to unload is not an error


def test_loading_an_unchanged_model_keeps_the_serving_version(repo, state):
    add_echo(repo, "m", 1)
    with _explicit(repo, "m") as server:
        before = server._manager.get("m")
        server.load("m")
        assert server._manager.get("m") is before
        assert [e for e in state.events if e[0] == "initialize"] == [("initialize", "m", 1, 1)]


def test_a_changed_version_folder_reloads_that_version_only(repo, state):
    model_dir = add_echo(repo, "m", 1, versions=(1, 2), policy="{ all { } }")
    with _explicit(repo, "m") as server:
        one, two = server._manager.get("m", 1), server._manager.get("m", 2)
        (model_dir / "2" / "model.py").write_text(echo_py(22) + "\n# changed\n")
        server.load("m")
        assert server._manager.get("m", 1) is one
        assert server._manager.get("m", 2) is not two
        assert _tag(server, "m") == 22  # the latest version is the new one
        assert ("finalize", "m", 2, 1) in state.events
        assert ("finalize", "m", 1, 1) not in state.events


def test_a_changed_config_reloads_every_version_and_a_removed_version_unloads(repo, state):
    model_dir = add_echo(repo, "m", 1, versions=(1, 2), policy="{ all { } }")
    with _explicit(repo, "m") as server:
        one = server._manager.get("m", 1)
        (model_dir / "config.pbtxt").write_text(echo_config("m", "{ specific { versions: [1] } }"))
        server.load("m")
        assert server._manager.get("m", 1) is not one
        assert server._manager.ready_versions("m") == [1]
        assert _rows(server, "m") == {"1": ("READY", ""), "2": ("UNAVAILABLE", "unloaded")}


def test_a_failed_reload_keeps_the_serving_version_with_no_reason_as_triton(repo, state,
                                                                           caplog):
    model_dir = add_echo(repo, "m", 1)
    with _explicit(repo, "m") as server:
        (model_dir / "1" / "model.py").write_text("def broken(:\n")
        with pytest.raises(InvalidArgumentError) as raised:
            server.load("m")
        message = raised.value.message
        assert message.startswith("load failed for model 'm': version 1 is at UNAVAILABLE "
                                  "state: ") and "SyntaxError" in message
        assert _tag(server, "m") == 1
        assert _rows(server, "m")["1"] == ("READY", "")  # the log says why
        assert "SyntaxError" in caplog.text
        (model_dir / "1" / "model.py").write_text(echo_py(3))
        server.load("m")  # fixed: the reload goes through and the reason is gone
        assert _tag(server, "m") == 3 and _rows(server, "m")["1"] == ("READY", "")


@pytest.mark.parametrize(("model_py", "cause"), [
    ("def broken(:\n", "SyntaxError"),
    (None, "initialize of m refused on purpose"),
])
def test_load_errors_carry_their_cause_to_the_caller_index_and_log(repo, state, caplog,
                                                                   model_py, cause):
    model_dir = add_echo(repo, "m", 1)
    if model_py is not None:
        (model_dir / "1" / "model.py").write_text(model_py)
    state.refuse_initialize["m"] = 1
    with _explicit(repo) as server:
        with pytest.raises(InvalidArgumentError, match="load failed for model 'm'") as raised:
            server.load("m")
        assert cause in raised.value.message
        reasons = [reason for _, reason in _rows(server, "m").values()]
        assert reasons and all(cause in reason for reason in reasons)
        assert any(cause in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
        assert not server.model("m").ready()


@pytest.mark.parametrize(("config", "cause"), [
    ('name: "m"\nbackend: "python"\nmax_batch_size: nope\n', "max_batch_size"),
    ('name: "other"\nbackend: "python"\n', "directory name must equal model name"),
])
def test_a_config_refused_at_the_poll_leaves_the_model_untouched_and_logs_why(
        repo, state, caplog, config, cause):
    model_dir = add_echo(repo, "m", 1)
    (model_dir / "config.pbtxt").write_text(config)
    with _explicit(repo) as server:
        with pytest.raises(InternalError) as raised:
            server.load("m")
        # Triton's whole answer
        assert raised.value.message == "failed to load 'm', failed to poll from model repository"
        assert _rows(server, "m") == {"": ("UNKNOWN", "")}  # by name alone, as before
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert any(m.startswith("Poll failed for model directory 'm': ") for m in errors)
        # Triton's poll names the file a parser could not read; the parser's line why
        assert any(cause in message for message in errors)
        if "nope" in config:
            poll = next(m for m in errors if m.startswith("Poll failed"))
            assert poll == ("Poll failed for model directory 'm': failed to read text proto "
                            f"from {model_dir / 'config.pbtxt'}")
            assert ("Error parsing text-format inference.ModelConfig: 3:17: 'max_batch_size: "
                    "nope': Couldn't parse integer: nope") in errors, errors
        with pytest.raises(NotFoundError, match="'m' is not found"):  # never polled
            server.model("m").infer(inputs=X)


def test_a_failed_load_is_retried_model_load_retry_count_times(repo, state):
    add_echo(repo, "m", 1)
    state.refuse_initialize["m"] = 2
    with _explicit(repo, model_load_retry_count=1) as server:
        with pytest.raises(InvalidArgumentError, match="refused on purpose"):
            server.load("m")  # two refusals: the first try and its one retry
        server.load("m")  # one retry left over is not needed: the third try succeeds
        assert _tag(server, "m") == 1
    state.refuse_initialize["m"] = 2
    with _explicit(repo, "m", model_load_retry_count=2) as server:
        assert _tag(server, "m") == 1
    initializations = [e for e in state.events if e[0] == "initialize"]
    assert len(initializations) == 6


def test_a_version_failing_discards_the_whole_load(repo, state):
    model_dir = add_echo(repo, "m", 1, versions=(1, 2), policy="{ all { } }")
    (model_dir / "2" / "model.py").write_text("raise ImportError('version two is broken')\n")
    with _explicit(repo) as server:
        with pytest.raises(InvalidArgumentError, match="version two is broken"):
            server.load("m")
        rows = _rows(server, "m")
        assert rows["2"][0] == "UNAVAILABLE" and "version two is broken" in rows["2"][1]
        assert rows["1"][0] == "UNAVAILABLE" and "version 2 is at UNAVAILABLE" in rows["1"][1]
        assert server._manager.loaded() == []
        assert ("finalize", "m", 1, 1) in state.events  # version 1 loaded, then discarded


def test_unload_waits_for_requests_in_flight(repo, state):
    add_echo(repo, "m", 1)
    with _explicit(repo, "m") as server:
        loaded = server._manager.get("m")
        draining = threading.Event()
        original = loaded.unload

        def unload(timeout: float = 30.0) -> None:
            draining.set()
            original(timeout)

        loaded.unload = unload  # type: ignore[method-assign]
        state.hold.add("m")
        stream = server.model("m").infer(inputs=X)
        assert state.entered.acquire(timeout=30)
        unloading = threading.Thread(target=server.unload, args=("m",))
        unloading.start()
        assert draining.wait(30)
        with pytest.raises(NotFoundError):  # Triton: "... has no available versions"
            server.model("m").infer(inputs=X)  # no new request once unloading began
        state.gate.set()
        unloading.join(30)
        assert stream.result(timeout=30).outputs["TAG"].to_numpy().tolist() == [1]
        done = [e[0] for e in state.events if e[1] == "m" and e[0] != "initialize"]
        assert done == ["executed", "finalize"]


def test_a_request_that_meets_a_swap_goes_to_the_new_version(repo, state, monkeypatch):
    model_dir = add_echo(repo, "m", 1)
    with _explicit(repo, "m") as server:
        old = server._manager.get("m")
        (model_dir / "1" / "model.py").write_text(echo_py(2))
        server.load("m")  # the old version is unloaded: it refuses new requests
        real_get = server._manager.get
        answers = iter([old])
        monkeypatch.setattr(server._manager, "get",
                            lambda name, version=-1: next(answers, None) or real_get(name, version))
        from infercore import InferRequest, Tensor

        request = InferRequest("m", {"X": Tensor.from_numpy(np.array([1], np.int32))})
        assert server.infer(request).result(timeout=30).outputs["TAG"].to_numpy()[0] == 2


# -- overrides --------------------------------------------------------------------------


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where temporary override folders go, to check what they leave behind."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_config_override_stays_until_the_folder_changes_as_in_triton(repo, state):
    model_dir = add_echo(repo, "m", 1, versions=(1, 2))
    with _explicit(repo, "m") as server:
        assert server._manager.ready_versions("m") == [2]
        config = server.model("m").config()
        config["version_policy"] = {"specific": {"versions": [1]}}
        server.load("m", config=config)
        assert server._manager.ready_versions("m") == [1]
        server.load("m")  # Triton 2.51: the folder is older than the override
        assert server._manager.ready_versions("m") == [1]
        (model_dir / "config.pbtxt").write_text(echo_config("m") + "\n")
        server.load("m")
        assert server._manager.ready_versions("m") == [2]


def test_files_load_a_model_from_a_temporary_folder(repo, state, scratch):
    with _explicit(repo) as server:
        server.load("fresh", config=echo_config_json(),
                    files={"1/model.py": echo_py(5).encode(),
                           "file:1/notes/readme.txt": b"kept beside the model"})
        assert _tag(server, "fresh") == 5
        folder = server._manager.get("fresh").context.model_dir
        assert folder.is_relative_to(scratch) and (folder / "1/notes/readme.txt").exists()
        assert not (repo.path / "fresh").exists()
        server.unload("fresh")
        assert list(scratch.iterdir()) == []


def test_files_replace_a_repository_model_until_the_next_plain_load(repo, state, scratch):
    add_echo(repo, "m", 1)
    with _explicit(repo, "m") as server:
        server.load("m", parameters={"config": json.dumps(server.model("m").config()),
                                     "file:1/model.py": echo_py(9).encode()})
        assert _tag(server, "m") == 9
        assert len(list(scratch.iterdir())) == 1
        server.load("m")  # back to the repository's files; the temporary folder goes
        assert _tag(server, "m") == 1
        assert list(scratch.iterdir()) == []
        # tritonserver's positional form: load(model_name, parameters)
        server.load("m", {"config": json.dumps(server.model("m").config()),
                          "file:1/model.py": echo_py(10).encode()})
        assert _tag(server, "m") == 10


def test_files_need_a_config(repo, state, caplog):
    with _explicit(repo) as server, pytest.raises(InternalError, match="failed to poll"):
        server.load("m", files={"1/model.py": b"x"})
    assert "Load parameter 'config' must be specified for model file override" in caplog.text


@pytest.mark.parametrize("path", ["../escape.py", "1/../../escape.py", "../../escape.py",
                                  "", "1/model.py\0", "1/", "/"])
def test_file_paths_cannot_leave_the_model_folder(repo, state, scratch, caplog, path):
    with _explicit(repo) as server:
        with pytest.raises(InternalError) as raised:
            server.load("m", config="{}", files={"1/model.py": b"", path: b"escape"})
        assert raised.value.message == "failed to load 'm', failed to poll from model repository"
        assert "Invalid file parameter" in caplog.text  # the reason is logged
        assert list(scratch.iterdir()) == []  # nothing written, not even the folder
        assert not list(scratch.parent.glob("**/escape.py"))
        assert list(repo.path.iterdir()) == []


@pytest.mark.parametrize("path", ["/tmp/escape.py", "1\\..\\escape.py", "2/../escape.py"])
def test_file_paths_that_stay_inside_are_written_there_as_in_triton(repo, state, scratch,
                                                                    path):
    with _explicit(repo) as server:
        server.load("m", config=echo_config_json(), files={"1/model.py": echo_py(4).encode(),
                                                           path: b"kept"})
        folder = server._manager.get("m").context.model_dir
        assert (folder / path.lstrip("/").replace("2/../", "")).read_bytes() == b"kept"
        assert not list(scratch.parent.glob("escape.py")) and not Path("/tmp/escape.py").exists()
        server.unload("m")
        assert list(scratch.iterdir()) == []


def test_a_file_cannot_also_be_a_folder(repo, state, scratch, caplog):
    with _explicit(repo) as server, pytest.raises(InternalError, match="failed to poll"):
        server.load("m", config="{}", files={"1": b"a file", "1/model.py": b"a model"})
    assert "directory has been created as a file" in caplog.text
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(("name", "message"), [
    ("a/b", "path traversal"), ("..", "path traversal"), ("../m", "path traversal"),
    ("a..b", "path traversal"), ("", "must not be empty"), (" ", "only whitespace")])
def test_names_that_could_leave_the_repository_are_refused_on_load_only(repo, state, name,
                                                                        message):
    add_echo(repo, "m", 1)
    with _explicit(repo, "m") as server:
        with pytest.raises(InvalidArgumentError, match=message):
            server.load(name)
        server.unload(name)  # as Triton: nothing is loaded by that name, nothing happens
        # a request checks no name, as Triton's lookup: no model has it
        with pytest.raises(NotFoundError, match="is not found"):
            server.model(name).infer(inputs=X)
        assert _tag(server, "m") == 1


@pytest.mark.parametrize("name", ["a\\b", "m\0"])
def test_other_names_just_find_no_model(repo, state, name):
    with _explicit(repo) as server, pytest.raises(InternalError, match="failed to poll"):
        server.load(name)


def test_an_unknown_model_fails_to_load_with_tritons_message(repo, state):
    with _explicit(repo) as server, pytest.raises(
            InternalError, match="failed to load 'missing', failed to poll from model "
                                 "repository"):
        server.load("missing")


# -- ensembles and unload_dependents ----------------------------------------------------


@pytest.fixture
def pipe_repo(repo: RepositoryBuilder) -> RepositoryBuilder:
    add_echo(repo, "step", 4)
    repo.add_model("pipe", config=ensemble_config("pipe", "step"))
    return repo


def _ready(server: Server) -> set[str]:
    return {e.name for e in server.repository_index(ready_only=True)}


def test_loading_an_ensemble_loads_its_steps_and_unload_dependents_takes_them(pipe_repo,
                                                                              state):
    with _explicit(pipe_repo) as server:
        server.load("pipe")
        assert _ready(server) == {"pipe", "step"} and _tag(server, "pipe") == 4
        server.unload("pipe")  # without unload_dependents the step stays
        assert _ready(server) == {"step"}
        server.load("pipe")
        server.unload("pipe", unload_dependents=True)
        assert _ready(server) == set()


def test_unload_dependents_keeps_a_step_that_was_loaded_by_name(pipe_repo, state):
    with _explicit(pipe_repo, "step") as server:
        server.load("pipe")
        server.unload("pipe", unload_dependents=True)
        assert _ready(server) == {"step"}


def test_unloading_a_step_unloads_its_ensembles_until_it_is_back(pipe_repo, state):
    with _explicit(pipe_repo, "pipe") as server:
        server.unload("step")
        assert _ready(server) == set()
        assert _rows(server, "pipe")["1"] == ("UNAVAILABLE", "unloaded")  # Triton's words
        server.load("step")  # the ensemble was not unloaded by name: it comes back
        assert _ready(server) == {"pipe", "step"} and _tag(server, "pipe") == 4
        server.unload("pipe")
        server.unload("step")
        server.load("step")  # now it was: it stays unloaded
        assert _ready(server) == {"step"}


def test_reloading_a_step_checks_its_ensembles_again(pipe_repo, state):
    with _explicit(pipe_repo, "pipe") as server:
        config = server.model("step").config()
        config["output"] = [o for o in config["output"] if o["name"] != "TAG"]
        server.load("step", config=config)  # the ensemble's TAG is no longer produced
        assert _ready(server) == {"step"}
        assert "TAG" in _rows(server, "pipe")["1"][1]


def test_an_ensemble_whose_step_fails_reports_the_step_error(pipe_repo, state):
    state.refuse_initialize["step"] = 1
    with _explicit(pipe_repo) as server:
        with pytest.raises(InvalidArgumentError) as raised:
            server.load("pipe")
        assert "ensemble 'pipe' depends on 'step'" in raised.value.message
        assert "refused on purpose" in raised.value.message


def test_ensembles_that_use_each_other_are_reported_as_a_circle(repo, state):
    repo.add_model("a", config=ensemble_config("a", "b"))
    repo.add_model("b", config=ensemble_config("b", "a"))
    with _explicit(repo) as server, pytest.raises(InvalidArgumentError,
                                                  match="circular dependency"):
        server.load("a")


# -- namespacing ------------------------------------------------------------------------


@pytest.fixture
def two_repos(tmp_path: Path) -> tuple[RepositoryBuilder, RepositoryBuilder]:
    first, second = RepositoryBuilder(tmp_path / "first"), RepositoryBuilder(tmp_path / "second")
    add_echo(first, "m", 1)
    add_echo(second, "m", 2)
    first.add_model("pipe_one", config=ensemble_config("pipe_one", "m"))
    second.add_model("pipe_two", config=ensemble_config("pipe_two", "m"))
    return first, second


def test_without_namespacing_a_name_in_two_repositories_is_not_loaded(two_repos, state,
                                                                      caplog):
    first, second = two_repos
    with Server(model_repository=[first.path, second.path], exit_on_error=False) as server:
        rows = [e for e in server.repository_index() if e.name == "m"]
        assert [e.to_dict() for e in rows] == [{
            "name": "m", "state": "UNAVAILABLE",
            "reason": "model appears in two or more repositories"}]
        with pytest.raises(NotFoundError):
            server.model("m").infer(inputs=X)
    server = Server(model_repository=[first.path, second.path])
    with pytest.raises(InternalError, match="failed to load all models"):
        server.start()  # exit_on_error: as Triton, a duplicate fails the start
    assert "'m': model appears in two or more repositories" in caplog.text


def test_with_namespacing_each_repository_keeps_its_model(two_repos, state):
    first, second = two_repos
    with Server(model_repository=[first.path, second.path], model_namespacing=True) as server:
        rows = [(e.name, e.namespace, e.state.value) for e in server.repository_index()
                if e.name == "m"]
        assert rows == [("m", str(first.path), "READY"), ("m", str(second.path), "READY")]
        with pytest.raises(InvalidArgumentError) as raised:
            server.model("m").infer(inputs=X)
        # Triton's words (tests/conformance flags_model_namespacing)
        assert raised.value.message == (
            "There are 2 identifiers of model 'm' in global map, model namespace must be "
            "provided to resolve ambiguity.")
        # each ensemble runs the step of its own repository
        assert _tag(server, "pipe_one") == 1 and _tag(server, "pipe_two") == 2



def test_a_model_without_versions_is_left_out_of_the_index_and_shown_not_loaded(repo, state):
    from infercore.launch import model_table

    add_echo(repo, "m", 1, versions=())  # a config and no version folder
    add_echo(repo, "other", 2)
    with _explicit(repo, "other") as server:
        with pytest.raises(InvalidArgumentError, match="load failed for model 'm': at least "
                           "one version must be available under the version policy"):
            server.load("m")
        assert [e.name for e in server.repository_index()] == ["other"]  # Triton's index
        table = model_table(server.model_table_index())
        assert "| m     | -       | Not loaded: No model version was found |" in table
        assert not server.ready()  # a model that failed to load: not ready (strict)
        add_echo(repo, "m", 1)  # now with its version
        server.load("m")
        assert {(e.name, e.state) for e in server.repository_index()} == {
            ("m", ModelState.READY), ("other", ModelState.READY)}
        assert server.ready()
